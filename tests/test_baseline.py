"""Baseline store, hardware key, refresh from a results directory, and `gemmperf baseline`."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.store import hardware as hwmod
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.hardware import (collect_metadata, cpu_hardware_key, hardware_key,
                                            parse_rocprofv3_version)
from pytest_gemmperf.store.record import SAMPLE_COLUMNS, BaselineRecord, normalize_samples, slug_for_test
from pytest_gemmperf.store.results import records_from_results, refresh_from_results
from pytest_gemmperf.traces.schema import finalize_agents, finalize_dispatches

HW = "gfx950-AMD_Instinct_MI350X-x8"
TEST = "perf_tests/test_gemm.py::test_overlap"
LONG_KERNEL = "Cijk_Ailk_Bljk_HHS_BH_MT256x256x64_MI32x32x8x1_SN_" + "1LDSB0_APM1_ABV0_" * 8


def make_samples(seed: int = 0, n: int = 600, scale: float = 1.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    units = [f"node{h}/{1000 + r}/{r}/{k}" for h in range(2) for r in range(2) for k in range(2)]
    df = pd.DataFrame({
        "point": rng.choice(["ch28-th256", "ch56-th512"], n),
        "kernel": rng.choice([LONG_KERNEL, "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"], n),
        "metric": "dur_ns",
        "unit": rng.choice(units, n),
        "value": np.round(rng.lognormal(10, 0.1, n) * scale),
    })
    unit_level = pd.DataFrame({"point": "ch28-th256", "kernel": "*", "metric": "overlap_fraction",
                               "unit": units, "value": rng.uniform(0.5, 0.9, len(units))})
    return pd.concat([df, unit_level], ignore_index=True)


def files_of(store: BaselineStore, test_id: str = TEST, hw: str = HW) -> dict[str, bytes]:
    """Every file of the record, by path relative to the record directory."""
    d = store.path_for(test_id, hw)
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- store


def test_roundtrip_and_generations(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "baselines")
    samples = make_samples()
    rec = BaselineRecord(TEST, HW, samples, meta={"rocm_version": "7.0.2", "git_commit": "abc"})
    assert store.load(TEST, HW) is None
    assert store.save(rec) is True

    got = store.load(TEST, HW)
    assert got.test_id == TEST and got.hw_key == HW and got.generation == 1
    assert got.meta == {"rocm_version": "7.0.2", "git_commit": "abc"}
    pd.testing.assert_frame_equal(got.samples, normalize_samples(samples))
    assert list(got.samples.columns) == list(SAMPLE_COLUMNS)
    assert got.samples["value"].dtype == "float64"

    d = store.path_for(TEST, HW)
    assert d == tmp_path / "baselines" / HW / "perf_tests_test_gemm.py__test_overlap"
    assert sorted(files_of(store)) == ["meta.json", "summary.yaml", "v1/meta.json", "v1/samples.parquet",
                                       "v1/summary.yaml"]
    assert store.files_dir(TEST, HW) == d / "v1"
    # meta.json is the pointer: a byte copy of the version's; summary.yaml a copy for review
    assert (d / "meta.json").read_bytes() == (d / "v1" / "meta.json").read_bytes()
    assert (d / "summary.yaml").read_bytes() == (d / "v1" / "summary.yaml").read_bytes()
    assert (tmp_path / "baselines" / ".locks" / ".gitignore").read_text() == "*\n"

    # the same samples again: nothing is rewritten, no diff for reviewers
    before = files_of(store)
    assert store.save(BaselineRecord(TEST, HW, samples.sample(frac=1, random_state=3), meta=rec.meta)) is False
    assert files_of(store) == before

    assert store.save(BaselineRecord(TEST, HW, make_samples(seed=1), meta=rec.meta)) is True
    again = store.load(TEST, HW)
    assert again.generation == 2 and again.created == got.created
    assert sorted(p.name for p in d.iterdir()) == ["meta.json", "summary.yaml", "v2"]  # v1 removed
    assert store.load(TEST, "gfx942-AMD_Instinct_MI300X-x8") is None
    assert [r.test_id for r in store.load_all()] == [TEST]
    assert store.load_all("gfx942-other") == []


def test_summary_and_samples_are_deterministic(tmp_path: Path) -> None:
    samples = make_samples()
    meta = {"rocm_version": "7.0.2", "torch_version": "2.13.0"}
    a, b = BaselineStore(tmp_path / "a"), BaselineStore(tmp_path / "b")
    a.save(BaselineRecord(TEST, HW, samples, meta=meta))
    shuffled = samples.sample(frac=1, random_state=7)[["value", "unit", "metric", "kernel", "point"]]
    b.save(BaselineRecord(TEST, HW, shuffled.astype({"point": "category"}), meta=dict(reversed(meta.items()))))
    fa, fb = files_of(a), files_of(b)
    assert fa["summary.yaml"] == fb["summary.yaml"] == fa["v1/summary.yaml"]
    assert fa["v1/samples.parquet"] == fb["v1/samples.parquet"]
    ma, mb = (json.loads(f["meta.json"]) for f in (fa, fb))
    for m in (ma, mb):
        m.pop("created"), m.pop("updated")
    assert ma == mb


def test_summary_is_reviewable(tmp_path: Path) -> None:
    import yaml

    store = BaselineStore(tmp_path)
    samples = make_samples()
    store.save(BaselineRecord(TEST, HW, samples, meta={"run": {"rocm_version": "7.0.2"}}))
    text = (store.path_for(TEST, HW) / "summary.yaml").read_text()
    doc = yaml.safe_load(text)
    assert doc["test_id"] == TEST and doc["source"] == {"rocm_version": "7.0.2"}
    assert [p["point"] for p in doc["points"]] == ["ch28-th256", "ch56-th512"]
    kernels = [k["kernel"] for k in doc["points"][0]["kernels"]]
    assert kernels == sorted(kernels) and "*" in kernels and LONG_KERNEL in kernels
    # one line per (point, kernel, metric): a changed median is a one-line diff
    metric_lines = [ln for ln in text.splitlines() if ln.lstrip().startswith(("dur_ns:", "overlap_fraction:"))]
    assert len(metric_lines) == 5
    assert all("{n_units:" in ln for ln in metric_lines)
    st = doc["points"][0]["kernels"][kernels.index(LONG_KERNEL)]["metrics"]["dur_ns"]
    sel = samples[(samples.point == "ch28-th256") & (samples.kernel == LONG_KERNEL)]
    assert st["n"] == len(sel) and st["n_units"] == sel["unit"].nunique()
    assert st["median"] == pytest.approx(sel["value"].median(), rel=1e-3)
    assert len(str(st["median"]).replace(".", "").strip("0")) <= 4  # rounded to 4 significant digits


def _rewrite_checksum(d: Path, name: str) -> None:
    """Make meta.json vouch for the (edited) data file ``name`` of the current version."""
    meta = json.loads((d / "meta.json").read_text())
    meta["files"][name]["sha256"] = hashlib.sha256((d / meta["version"] / name).read_bytes()).hexdigest()
    for copy in (d / "meta.json", d / meta["version"] / "meta.json"):  # the pointer and its version's copy
        copy.write_text(json.dumps(meta))


def _v(d: Path, name: str) -> Path:
    """``name`` in the record's current version directory."""
    return d / json.loads((d / "meta.json").read_text())["version"] / name


CORRUPTIONS = {
    "meta_not_json": ("meta.json", lambda d: (d / "meta.json").write_text("{oops"), "not valid JSON"),
    "meta_foreign": ("meta.json", lambda d: (d / "meta.json").write_text('{"benchmarks": []}'),
                     "no schema_version"),
    "meta_newer": ("meta.json", lambda d: (d / "meta.json").write_text(
        (d / "meta.json").read_text().replace('"schema_version": 1', '"schema_version": 7')), "newer gemmperf"),
    "meta_generation_text": ("meta.json", lambda d: (d / "meta.json").write_text(
        (d / "meta.json").read_text().replace('"generation": 1', '"generation": "one"')),
        "'generation' is 'one', expected a non-negative integer"),
    "meta_version_escapes": ("meta.json", lambda d: (d / "meta.json").write_text(
        (d / "meta.json").read_text().replace('"version": "v1"', '"version": "../../x"')), "expected v<number>"),
    "summary_edited": ("summary.yaml", lambda d: _v(d, "summary.yaml").write_text(
        _v(d, "summary.yaml").read_text().replace("n_units", "n_unitz")), "checksum"),
    "summary_bad_yaml": ("summary.yaml", lambda d: (_v(d, "summary.yaml").write_text("a: [b\n"),
                                                    _rewrite_checksum(d, "summary.yaml")), "not valid YAML"),
    "summary_foreign": ("summary.yaml", lambda d: (_v(d, "summary.yaml").write_text("schema_version: 1\ntest_id: x\n"),
                                                   _rewrite_checksum(d, "summary.yaml")), "differ from meta.json"),
    "parquet_truncated": ("samples.parquet", lambda d: _v(d, "samples.parquet").write_bytes(
        _v(d, "samples.parquet").read_bytes()[:100]), "checksum"),
    "parquet_garbage": ("samples.parquet", lambda d: (_v(d, "samples.parquet").write_bytes(b"PAR1 not really"),
                                                      _rewrite_checksum(d, "samples.parquet")), "unreadable parquet"),
    "parquet_missing": ("samples.parquet", lambda d: _v(d, "samples.parquet").unlink(), "missing"),
    "version_missing": ("v1", lambda d: shutil.rmtree(_v(d, "")), "missing"),
    "meta_missing": ("meta.json", lambda d: (d / "meta.json").unlink(), "no meta.json"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_record_names_the_file(tmp_path: Path, case: str, capsys) -> None:
    from pytest_gemmperf.cli import main

    store = BaselineStore(tmp_path)
    store.save(BaselineRecord(TEST, HW, make_samples()))
    fname, corrupt, words = CORRUPTIONS[case]
    d = store.path_for(TEST, HW)
    corrupt(d)
    with pytest.raises(GemmperfInputError) as err:
        store.load(TEST, HW)
    msg = str(err.value)
    assert fname in msg and words in msg and "\n" not in msg
    with pytest.raises(GemmperfInputError):
        store.load_all()
    # the CLI turns it into one line on stderr and exit status 2
    assert main(["baseline", "show", "--baseline-dir", str(tmp_path), TEST]) == 2
    assert fname in capsys.readouterr().err
    # an explicit refresh repairs the record
    assert store.save(BaselineRecord(TEST, HW, make_samples(seed=5))) is True
    assert store.load(TEST, HW).samples["value"].notna().all()


def test_test_id_mismatch_and_slug_collision(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(BaselineRecord("t.py::test_a[x/y]", HW, make_samples()))
    # ids that sanitize alike get distinct directories (a hash of the id is appended)
    assert store.load("t.py::test_a[x_y]", HW) is None
    store.save(BaselineRecord("a/t.py::test_a", HW, make_samples()))
    # the layout's own '/' -> '_' meets here: the second test gets the name plus a hash of its id
    assert store.load("a_t.py::test_a", HW) is None
    store.save(BaselineRecord("a_t.py::test_a", HW, make_samples()))
    assert store.path_for("a_t.py::test_a", HW) != store.path_for("a/t.py::test_a", HW)
    assert store.load("a_t.py::test_a", HW).test_id == "a_t.py::test_a"
    assert store.load("a/t.py::test_a", HW).test_id == "a/t.py::test_a"
    assert len(slug_for_test("t.py::test_" + "p" * 400)) <= 150
    assert slug_for_test("t.py::test_" + "p" * 400) != slug_for_test("t.py::test_" + "p" * 399)


def test_save_rejects_bad_samples(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    with pytest.raises(GemmperfInputError, match="lacks columns"):
        store.save(BaselineRecord(TEST, HW, pd.DataFrame({"point": ["a"], "value": [1.0]})))
    with pytest.raises(GemmperfInputError, match="empty baseline"):
        store.save(BaselineRecord(TEST, HW, make_samples().iloc[:0]))
    with pytest.raises(GemmperfInputError, match="not numeric"):
        store.save(BaselineRecord(TEST, HW, make_samples().assign(value="fast")))
    assert not store.path_for(TEST, HW).exists()


def test_stale_temp_files_are_cleaned_by_next_save(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(BaselineRecord(TEST, HW, make_samples()))
    d = store.path_for(TEST, HW)
    (d / ".samples.parquet.abc.tmp").write_bytes(b"half")  # a writer killed mid-write
    assert store.load(TEST, HW) is not None
    store.save(BaselineRecord(TEST, HW, make_samples(seed=2)))
    assert not list(d.glob("*.tmp")) and not list(d.glob(".*.tmp"))
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in d.rglob("*") if p.is_file())


def test_diff(tmp_path: Path) -> None:
    old = make_samples()
    new = old.copy()
    gemm = new["kernel"] == LONG_KERNEL
    new.loc[gemm, "value"] *= 1.1
    new = new[new["metric"] != "overlap_fraction"]
    added = pd.DataFrame({"point": ["ch56-th512"], "kernel": ["*"], "metric": ["exposed_comm_ns"],
                          "unit": ["node0/1000/0/0"], "value": [5.0]})
    new = pd.concat([new, added], ignore_index=True)
    d = BaselineStore.diff(BaselineRecord(TEST, HW, old), BaselineRecord(TEST, HW, new))
    assert list(d.columns) == ["point", "kernel", "metric", "old_median", "new_median", "ratio",
                               "old_n_units", "new_n_units", "change"]
    by = d.set_index(["point", "kernel", "metric"])["change"]
    assert by[("ch28-th256", "*", "overlap_fraction")] == "removed"
    assert by[("ch56-th512", "*", "exposed_comm_ns")] == "added"
    assert (d.loc[d["kernel"] == LONG_KERNEL, "change"] == "changed").all()
    assert np.allclose(d.loc[d["kernel"] == LONG_KERNEL, "ratio"], 1.1, rtol=1e-3)
    assert (d.loc[d["kernel"].str.startswith("nccl"), "change"] == "unchanged").all()
    assert set(BaselineStore.diff(None, new)["change"]) == {"added"}
    assert set(BaselineStore.diff(old, old.sample(frac=1, random_state=1))["change"]) == {"unchanged"}


def _age(store: BaselineStore, test_id: str, days: float) -> None:
    p = store.path_for(test_id, HW) / "meta.json"
    meta = json.loads(p.read_text())
    meta["updated"] = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days)).isoformat()
    for copy in (p, p.parent / meta["version"] / "meta.json"):  # the pointer and its version's copy
        copy.write_text(json.dumps(meta))


def test_prune(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    for t in ("t.py::test_old", "t.py::test_new", "t.py::test_gone"):
        store.save(BaselineRecord(t, HW, make_samples()))
    _age(store, "t.py::test_old", 40)
    plan = store.prune(older_than=30, dry_run=True)
    assert [r["test_id"] for r in plan] == ["t.py::test_old"]
    assert store.load("t.py::test_old", HW) is not None  # dry run removes nothing
    assert [r["test_id"] for r in store.prune(older_than=dt.timedelta(days=30))] == ["t.py::test_old"]
    assert store.load("t.py::test_old", HW) is None
    assert not store.path_for("t.py::test_old", HW).exists()
    gone = store.prune(keep_test_ids=["t.py::test_new"])
    assert [r["test_id"] for r in gone] == ["t.py::test_gone"]
    assert [r.test_id for r in store.load_all()] == ["t.py::test_new"]
    assert not [p for p in (tmp_path / HW).iterdir() if p.name.startswith(".")]  # no trash left
    store.prune(keep_test_ids=[])
    assert not (tmp_path / HW).exists()


def test_list(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(BaselineRecord(TEST, HW, make_samples(), meta={"rocm_version": "7.0.2", "torch_version": "2.13"}))
    store.save(BaselineRecord(TEST, "cpu-x86_64-AMD_EPYC-2c", make_samples()))
    table = store.list()
    assert list(table["hw_key"]) == ["cpu-x86_64-AMD_EPYC-2c", HW]
    row = table[table["hw_key"] == HW].iloc[0]
    assert (row.points, row.kernels, row.metrics) == (2, 3, 2)
    assert row.versions == "rocm 7.0.2, torch 2.13"
    assert BaselineStore(tmp_path / "nothing").list().empty


# ----------------------------------------------------------------------------- hardware


def _agents(hosts: int = 1, files_per_host: int = 2, gpus: int = 8, ids: bool = True) -> pd.DataFrame:
    rows = []
    for h in range(hosts):
        for f in range(files_per_host):  # every rank's trace lists all agents of its node
            rows.append({"host": f"node{h}", "file": f"rank{f}.json", "type": "CPU", "product": "AMD EPYC 9575F"})
            for g in range(gpus):
                rows.append({"host": f"node{h}", "file": f"rank{f}.json", "type": "GPU", "gpu_arch": "gfx950",
                             "product": "AMD Instinct MI350X", "gpu_index": g if ids else None})
    return finalize_agents(pd.DataFrame(rows), "agents.parquet")


def test_hardware_key() -> None:
    assert hardware_key(_agents()) == "gfx950-AMD_Instinct_MI350X-x8"
    assert hardware_key(_agents(hosts=2)) == "gfx950-AMD_Instinct_MI350X-x8-n2"
    assert hardware_key(_agents(gpus=1, ids=False)) == "gfx950-AMD_Instinct_MI350X-x1"
    assert hardware_key(_agents(ids=False)) == "gfx950-AMD_Instinct_MI350X-x8"
    raw = pd.DataFrame({"type": ["GPU"] * 4, "gpu_arch": ["gfx942"] * 4, "product": ["AMD Instinct MI300X"] * 4,
                        "node_id": [2, 3, 4, 5]})
    assert hardware_key(raw) == "gfx942-AMD_Instinct_MI300X-x4"
    cpu_only = _agents(gpus=0)
    assert hardware_key(cpu_only) == hardware_key(None) == cpu_hardware_key()
    assert hardware_key(None).startswith("cpu-") and hardware_key(None).endswith(f"-{os.cpu_count()}c")


def test_cpu_key_strips_marketing() -> None:
    assert cpu_hardware_key("AMD EPYC 9575F 64-Core Processor", 2, "x86_64") == "cpu-x86_64-AMD_EPYC_9575F-2c"
    assert (cpu_hardware_key("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz", 112, "x86_64")
            == "cpu-x86_64-Intel_Xeon_Platinum_8480+-112c")
    assert cpu_hardware_key("weird/name:*", 4, "aarch64") == "cpu-aarch64-weird_name-4c"


def test_parse_nvidia_driver_version() -> None:
    proc = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue Oct 14 00:00:00 UTC 2025\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    assert hwmod.parse_nvidia_driver_version(proc) == "580.159.04"
    open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build\n"
    assert hwmod.parse_nvidia_driver_version(open_module) == "575.57.08"
    assert hwmod.parse_nvidia_driver_version("garbage") is None
    assert hwmod.parse_nvidia_driver_version(None) is None


def test_parse_rocprofv3_version() -> None:
    text = "rocprofv3 information:\n    version: 1.0.0\n    git_revision: abc\n    rocm_version: 7.0.2\n"
    assert parse_rocprofv3_version(text) == "1.0.0"
    assert parse_rocprofv3_version("\nrocprofv3 0.5.0\n") == "rocprofv3 0.5.0"


def test_collect_metadata(tmp_path: Path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "rocprofv3"
    fake.write_text("#!/bin/sh\necho '- version: 1.2.3'\necho 'rocm_version: 7.0.2'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    outside = tmp_path / "not_a_repo"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    m = collect_metadata(cwd=outside)
    assert m["rocprofv3_version"] == "1.2.3"
    assert m["git_commit"] is None
    assert m["tool_version"] and m["host"]
    assert dt.datetime.fromisoformat(m["date"]).tzinfo is not None
    json.dumps(m)  # storable as-is in meta.json
    code = ("import sys; from pytest_gemmperf.store import hardware as h; h.collect_metadata(); "
            "assert 'torch' not in sys.modules, 'metadata must not import torch'")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0

    hang = bin_dir / "rocprofv3"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    monkeypatch.setattr(hwmod, "PROBE_TIMEOUT_S", 0.2)
    assert collect_metadata(cwd=outside)["rocprofv3_version"] is None


# ----------------------------------------------------------------------------- refresh


@pytest.fixture
def samples_module():
    """The real gate.samples: refresh must build exactly the samples the plugin gates on."""
    from pytest_gemmperf.gate import samples

    return samples


KERNELS = {"gemm": LONG_KERNEL, "nccl": "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"}


def _dispatches(point: str, seed: int, n_per: int = 30, ranks: int = 2, runs: int = 2, base_ns: float = 1e5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frames = []
    for rank in range(ranks):
        for run in range(runs):
            n = n_per * len(KERNELS)
            start = np.cumsum(rng.integers(200_000, 300_000, n))
            dur = rng.normal(base_ns, base_ns * 0.02, n).astype(np.int64)
            frames.append(pd.DataFrame({
                "host": "node0", "pid": 4000 + rank, "rank": rank, "run": run, "point": point, "agent": rank,
                "dispatch_id": np.arange(n), "kernel": np.tile(list(KERNELS.values()), n_per),
                "start_ns": start, "end_ns": start + dur, "source": "rocprofv3-csv"}))
    return finalize_dispatches(pd.concat(frames, ignore_index=True), f"{point}.csv")


def make_results(root: Path, *, hw_key: str | None = HW, with_agents: bool = False, seed: int = 0,
                 failed_point: bool = True) -> Path:
    """A finished run in the documented results layout."""
    root.mkdir(parents=True)
    run = {"start_time": "2026-11-20T10:00:00+00:00", "rocm_version": "7.0.2", "git_commit": "deadbeef",
           "argv": ["pytest", "perf_tests"]}
    if hw_key:
        run["hardware_key"] = hw_key
    (root / "run.json").write_text(json.dumps(run))
    tests = {"perf_tests/test_gemm.py::test_overlap": ["ch28-th256", "ch56-th512"],
             "perf_tests/test_gemm.py::test_alone": ["th256"]}
    for i, (test_id, points) in enumerate(tests.items()):
        for j, point in enumerate(points):
            pdir = root / slug_for_test(test_id) / point
            pdir.mkdir(parents=True)
            doc = {"test_id": test_id, "point": point, "status": "ok", "repeats": 2, "runs": []}
            if test_id.endswith("test_alone"):
                doc["kernels"] = ["^Cijk_", "no_such_kernel"]  # the gate only sees these kernels
            (pdir / "point.json").write_text(json.dumps(doc))
            _dispatches(point, seed + 10 * i + j).to_parquet(pdir / "dispatches.parquet")
            if with_agents:
                _agents(gpus=2).to_parquet(pdir / "agents.parquet")
    if failed_point:
        pdir = root / slug_for_test("perf_tests/test_gemm.py::test_alone") / "th512"
        pdir.mkdir()
        (pdir / "point.json").write_text(json.dumps({"test_id": "perf_tests/test_gemm.py::test_alone",
                                                     "point": "th512", "status": "failed"}))
    (root / slug_for_test("perf_tests/test_gemm.py::test_alone") / "verdicts.csv").write_text("test,point\n")
    return root


def test_refresh_from_results(tmp_path: Path, samples_module) -> None:
    results = make_results(tmp_path / "results" / "2026-11-20T10-00-00")
    store = BaselineStore(tmp_path / "baselines")
    messages: list[str] = []
    recs = refresh_from_results(results, store, report=messages.append)
    assert [r.test_id for r in recs] == ["perf_tests/test_gemm.py::test_alone", "perf_tests/test_gemm.py::test_overlap"]
    assert any("th512" in m and "failed" in m for m in messages)
    overlap = store.load("perf_tests/test_gemm.py::test_overlap", HW)
    s = overlap.samples
    assert set(s["point"]) == {"ch28-th256", "ch56-th512"}
    gemm = s[(s["kernel"] == LONG_KERNEL) & (s["metric"] == "dur_ns")]
    assert gemm["unit"].nunique() == 4  # 2 ranks x 2 repeats per point: the independent processes
    disp = pd.read_parquet(results / slug_for_test(overlap.test_id) / "ch28-th256" / "dispatches.parquet")
    # the stored values are compacted quantiles of this point's own dispatches (the middle one of
    # an even count is the geometric midpoint of the two middle dispatches): inside their range
    dur = disp["dur_ns"].astype(float)
    assert gemm.loc[gemm["point"] == "ch28-th256", "value"].between(dur.min(), dur.max()).all()
    assert overlap.meta["run"]["rocm_version"] == "7.0.2"
    alone = store.load("perf_tests/test_gemm.py::test_alone", HW)
    assert set(alone.samples["point"]) == {"th256"}  # the failed point is not promoted
    dur = alone.samples[alone.samples["metric"] == "dur_ns"]
    assert set(dur["kernel"]) == {LONG_KERNEL}  # narrowed to the point's kernel regexes

    # refreshing the same run again changes nothing; -k narrows it down
    before = files_of(store, overlap.test_id)
    recs2 = refresh_from_results(results.parent, store, test_filter="test_overlap")  # parent: newest run
    assert [r.test_id for r in recs2] == [overlap.test_id]
    assert files_of(store, overlap.test_id) == before
    assert store.load(overlap.test_id, HW).generation == 1


def test_refresh_hardware_key_from_agents(tmp_path: Path, samples_module) -> None:
    results = make_results(tmp_path / "r", hw_key=None, with_agents=True)
    recs = records_from_results(results)
    assert {r.hw_key for r in recs} == {"gfx950-AMD_Instinct_MI350X-x2"}
    no_hw = make_results(tmp_path / "r2", hw_key=None)
    with pytest.raises(GemmperfInputError, match="run.json.*no hardware key"):
        records_from_results(no_hw)


def test_refresh_point_hardware_key_wins(tmp_path: Path, samples_module) -> None:
    results = make_results(tmp_path / "r")
    pj = results / slug_for_test("perf_tests/test_gemm.py::test_overlap") / "ch56-th512" / "point.json"
    doc = json.loads(pj.read_text())
    pj.write_text(json.dumps(doc | {"hardware_key": "gfx942-AMD_Instinct_MI300X-x8"}))
    recs = records_from_results(results, test_filter="test_overlap")
    assert [(r.hw_key, sorted(set(r.samples["point"]))) for r in recs] == [
        ("gfx942-AMD_Instinct_MI300X-x8", ["ch56-th512"]), (HW, ["ch28-th256"])]


@pytest.mark.parametrize("damage, where, words", [
    ("bad_regex", "point.json", "invalid kernel regex"),
    ("no_match", "dispatches.parquet", "no dispatch matches"),
    ("no_dispatches", "dispatches.parquet", "missing"),
    ("bad_parquet", "dispatches.parquet", "unreadable parquet"),
    ("bad_point_json", "point.json", "not valid JSON"),
    ("no_test_id", "point.json", "lacks 'test_id'"),
    ("bad_run_json", "run.json", "not valid JSON"),
])
def test_refresh_bad_results(tmp_path: Path, samples_module, damage: str, where: str, words: str) -> None:
    results = make_results(tmp_path / "r")
    pdir = results / slug_for_test("perf_tests/test_gemm.py::test_alone") / "th256"
    if damage in ("bad_regex", "no_match"):
        doc = json.loads((pdir / "point.json").read_text())
        doc["kernels"] = ["Cijk_(" if damage == "bad_regex" else "^rccl_only$"]
        (pdir / "point.json").write_text(json.dumps(doc))
    elif damage == "no_dispatches":
        (pdir / "dispatches.parquet").unlink()
    elif damage == "bad_parquet":
        (pdir / "dispatches.parquet").write_bytes(b"PAR1garbage")
    elif damage == "bad_point_json":
        (pdir / "point.json").write_text("{")
    elif damage == "no_test_id":
        (pdir / "point.json").write_text('{"point": "th256"}')
    else:
        (results / "run.json").write_text("[")
    store = BaselineStore(tmp_path / "b")
    with pytest.raises(GemmperfInputError) as err:
        refresh_from_results(results, store)
    assert where in str(err.value) and words in str(err.value)
    assert store.load_all() == []  # nothing half-promoted


def test_refresh_rejects_non_results(tmp_path: Path, samples_module) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(GemmperfInputError, match="not a gemmperf results directory"):
        records_from_results(tmp_path / "empty")
    with pytest.raises(GemmperfInputError, match="does not exist"):
        records_from_results(tmp_path / "nope")
    results = make_results(tmp_path / "r")
    with pytest.raises(GemmperfInputError, match="no finished test points matching"):
        records_from_results(results, test_filter="no_such_test")


# ----------------------------------------------------------------------------- CLI


def test_cli(tmp_path: Path, samples_module, capsys) -> None:
    from pytest_gemmperf.cli import main

    bdir = str(tmp_path / "baselines")
    r1 = make_results(tmp_path / "r1", seed=0)
    assert main(["baseline", "diff", "--from", str(r1), "--baseline-dir", bdir]) == 0
    assert "new baseline" in capsys.readouterr().out
    assert main(["baseline", "refresh", "--from", str(r1), "--baseline-dir", bdir, "-k", "overlap"]) == 0
    assert "1 baseline record(s)" in capsys.readouterr().out

    assert main(["baseline", "show", "--baseline-dir", bdir]) == 0
    out = capsys.readouterr().out
    assert "perf_tests/test_gemm.py::test_overlap" in out and HW in out and "test_alone" not in out
    assert main(["baseline", "show", "--baseline-dir", bdir, "perf_tests/test_gemm.py::test_overlap"]) == 0
    assert "ch56-th512" in capsys.readouterr().out

    r2 = make_results(tmp_path / "r2", seed=100)
    assert main(["baseline", "diff", "--from", str(r2), "--baseline-dir", bdir, "-k", "overlap"]) == 0
    out = capsys.readouterr().out
    assert "changed" in out and "change [95% CI]" in out and " µs " in out
    assert BaselineStore(bdir).load("perf_tests/test_gemm.py::test_overlap", HW).generation == 1  # diff wrote nothing

    # prune lists by default (--dry-run still accepted) and removes only with --yes
    for flags in ([], ["--dry-run"]):
        assert main(["baseline", "prune", "--baseline-dir", bdir, "--older-than", "0", *flags]) == 0
        out = capsys.readouterr().out
        assert "would remove" in out and "run again with --yes" in out
        assert len(BaselineStore(bdir).load_all()) == 1
    assert main(["baseline", "prune", "--baseline-dir", bdir, "--older-than", "0", "--yes", "--dry-run"]) == 2
    assert len(BaselineStore(bdir).load_all()) == 1
    assert main(["baseline", "prune", "--baseline-dir", bdir, "--older-than", "0", "--yes"]) == 0
    assert "1 record(s) removed" in capsys.readouterr().out
    assert BaselineStore(bdir).load_all() == []

    assert main(["baseline", "refresh", "--from", str(tmp_path / "nope"), "--baseline-dir", bdir]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["baseline", "refresh", "--baseline-dir", bdir])  # --from is required
    assert exc.value.code == 2


def test_refresh_from_a_partial_run_keeps_the_other_points(tmp_path: Path, samples_module, capsys) -> None:
    """A run made with -k (one point of a test) refreshes that point only; --replace is the
    explicit way to drop points, and `baseline diff` says which ones it would drop."""
    from pytest_gemmperf.cli import main

    bdir = str(tmp_path / "baselines")
    test = "perf_tests/test_gemm.py::test_overlap"
    assert main(["baseline", "refresh", "--from", str(make_results(tmp_path / "r1", seed=0)),
                 "--baseline-dir", bdir]) == 0
    before = BaselineStore(bdir).load(test, HW)
    partial = make_results(tmp_path / "r2", seed=50)
    shutil.rmtree(partial / slug_for_test(test) / "ch56-th512")  # the run lacks this point
    capsys.readouterr()

    assert main(["baseline", "diff", "--from", str(partial), "--baseline-dir", bdir, "-k", "overlap"]) == 0
    out = capsys.readouterr().out
    assert "point(s) not in the run: ch56-th512 -- kept (refresh --replace would remove them)" in out
    assert "0 removed" in out and "changed" in out
    assert main(["baseline", "diff", "--from", str(partial), "--baseline-dir", bdir, "-k", "overlap",
                 "--replace"]) == 0
    out = capsys.readouterr().out
    assert "REMOVED by --replace" in out and "ch56-th512" in out and " removed" in out
    assert " 0 removed" not in out

    assert main(["baseline", "refresh", "--from", str(partial), "--baseline-dir", bdir, "-k", "overlap"]) == 0
    assert "kept 1 stored point(s)" in capsys.readouterr().err
    merged = BaselineStore(bdir).load(test, HW)
    assert set(merged.samples["point"]) == {"ch28-th256", "ch56-th512"}
    keep = before.samples[before.samples["point"] == "ch56-th512"].reset_index(drop=True)
    got = merged.samples[merged.samples["point"] == "ch56-th512"].reset_index(drop=True)
    pd.testing.assert_frame_equal(normalize_samples(got), normalize_samples(keep))
    assert set(merged.meta["points"]) == {"ch28-th256", "ch56-th512"}
    assert not merged.samples[merged.samples["point"] == "ch28-th256"].equals(
        before.samples[before.samples["point"] == "ch28-th256"])
    # the replaced ch28 run moved into the history; ch56 was not replaced
    assert set(merged.variance["point"]) == {"ch28-th256"}

    assert main(["baseline", "refresh", "--from", str(partial), "--baseline-dir", bdir, "-k", "overlap",
                 "--replace"]) == 0
    assert set(BaselineStore(bdir).load(test, HW).samples["point"]) == {"ch28-th256"}


def test_show_verifies_and_lists_damaged_and_incomplete_records(tmp_path: Path, capsys) -> None:
    from pytest_gemmperf.cli import main

    store = BaselineStore(tmp_path)
    tests = {n: f"t.py::test_{n}" for n in ("good", "checksum", "no_meta", "generation")}
    for t in tests.values():
        store.save(BaselineRecord(t, HW, make_samples()))
    (store.files_dir(tests["checksum"], HW) / "samples.parquet").write_bytes(b"PAR1 flipped bits")
    (store.path_for(tests["no_meta"], HW) / "meta.json").unlink()
    gen = store.path_for(tests["generation"], HW) / "meta.json"
    gen.write_text(gen.read_text().replace('"generation": 1', '"generation": 1.5'))
    capsys.readouterr()

    assert main(["baseline", "show", "--baseline-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert "4 record(s); checksums verified: 1 ok, 2 damaged, 1 incomplete" in out
    lines = err.strip().splitlines()
    assert len(lines) == 3
    assert any(ln.startswith("damaged:") and "samples.parquet" in ln and "checksum" in ln for ln in lines)
    assert any(ln.startswith("damaged:") and "'generation' is 1.5, expected a non-negative integer" in ln
               for ln in lines)
    assert any(ln.startswith("incomplete:") and "test_no_meta" in ln and "meta.json missing" in ln
               for ln in lines)
    table = store.list(verify=True).set_index("test_id")["status"]
    assert table[tests["good"]] == "ok"

    assert main(["baseline", "show", "--baseline-dir", str(tmp_path), "--no-verify"]) == 0
    out = capsys.readouterr().out
    assert "checksums NOT verified" in out
    assert store.list().set_index("test_id")["status"][tests["checksum"]] == "not verified"

    # one damaged record breaks neither the show of another nor loading the others
    assert main(["baseline", "show", "--baseline-dir", str(tmp_path), tests["good"]]) == 0
    assert "(checksums verified)" in capsys.readouterr().out
    assert main(["baseline", "show", "--baseline-dir", str(tmp_path), tests["generation"]]) == 2
    err = capsys.readouterr().err
    assert "meta.json" in err and "'generation' is 1.5" in err and len(err.strip().splitlines()) == 1
    damaged: list = []
    assert [r.test_id for r in store.load_all(damaged=damaged)] == [tests["good"]]
    assert len(damaged) == 3
    with pytest.raises(GemmperfInputError, match="meta.json missing|no meta.json"):
        store.load(tests["no_meta"], HW)
    # prune leaves damaged records alone and says so
    assert main(["baseline", "prune", "--baseline-dir", str(tmp_path), "--older-than", "0", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "would remove" in out and "skipped (damaged, not pruned)" in err and "'generation' is 1.5" in err
    # a refresh repairs each of them
    for t in tests.values():
        store.save(BaselineRecord(t, HW, make_samples(seed=9)))
    assert (store.list(verify=True)["status"] == "ok").all()


def test_compare_of_other_records_survives_a_damaged_one(tmp_path: Path, samples_module, capsys) -> None:
    from pytest_gemmperf.cli import main

    results = make_results(tmp_path / "r", seed=0)
    store = BaselineStore(tmp_path / "baselines")
    refresh_from_results(results, store)
    overlap, alone = "perf_tests/test_gemm.py::test_overlap", "perf_tests/test_gemm.py::test_alone"
    (store.files_dir(alone, HW) / "summary.yaml").write_text("edited by hand\n")
    cand = tmp_path / "cand"
    shutil.copytree(results, cand)
    shutil.rmtree(cand / slug_for_test(alone))  # (a candidate test without a baseline is another matter)
    capsys.readouterr()
    rc = main(["compare", str(store.root), str(cand), "--out", str(tmp_path / "o"), "--no-report"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "summary.yaml" in err and "checksum" in err and "record skipped" in err
    v = pd.read_csv(tmp_path / "o" / "verdicts.csv")
    cmp = v[(v["test"] == overlap) & (v["metric"] == "dur_ns") & (v["kernel"] != "*")]
    assert len(cmp) and (cmp["verdict"] == "unchanged").all()  # the healthy record was compared
    # the healthy record's own directory as BASE: the damaged neighbour does not matter at all
    from pytest_gemmperf.store.compare_inputs import all_baseline_records

    assert [r.test_id for r in all_baseline_records(store.path_for(overlap, HW))] == [overlap]
    # the damaged record's directory as BASE: one line naming the file
    rc = main(["compare", str(store.path_for(alone, HW)), str(results), "--out", str(tmp_path / "o3")])
    err = capsys.readouterr().err
    assert rc == 2 and "summary.yaml" in err and len(err.strip().splitlines()) == 1


def test_refresh_skips_point_with_invalid_environment(tmp_path: Path, samples_module) -> None:
    """A point that ran with e.g. OMP_NUM_THREADS=abc never becomes a baseline, by the CLI refresh
    as by the pytest path (session._save_baseline)."""
    results = make_results(tmp_path / "results" / "run")
    pj = results / slug_for_test("perf_tests/test_gemm.py::test_overlap") / "ch56-th512" / "point.json"
    doc = json.loads(pj.read_text())
    doc["env"] = {"OMP_NUM_THREADS": "abc"}
    pj.write_text(json.dumps(doc))
    store = BaselineStore(tmp_path / "baselines")
    messages: list[str] = []
    refresh_from_results(results, store, report=messages.append)
    overlap = store.load("perf_tests/test_gemm.py::test_overlap", HW)
    assert set(overlap.samples["point"]) == {"ch28-th256"}
    assert any("ch56-th512" in m and "OMP_NUM_THREADS='abc'" in m for m in messages)
