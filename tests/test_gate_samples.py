"""One samples path for the gate (``gate.samples.gate_samples``): pytest, ``baseline refresh``
and ``gemmperf compare`` gate the same per-kernel durations, category totals over every
dispatch, GEMM overlap / exposed communication and cross-rank collective metrics.

Multi-rank inputs are Kineto traces written like PyTorch writes them (record_param_comms with
the collective metadata, the RCCL kernel carrying it in its args), read by the real reader.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

# pytester's in-process runs drop the modules they imported afterwards; pyarrow extension types
# cannot be registered twice, so everything the inner sessions use is imported here, once.
import pandas.core.arrays.arrow.extension_types  # noqa: F401
import pyarrow.parquet  # noqa: F401

import pytest_gemmperf.analysis.collectives  # noqa: F401
import pytest_gemmperf.analysis.overlap  # noqa: F401
import pytest_gemmperf.analysis.timeline  # noqa: F401
import pytest_gemmperf.gate.compare  # noqa: F401
import pytest_gemmperf.gate.verdict  # noqa: F401
import pytest_gemmperf.run.replay  # noqa: F401
import pytest_gemmperf.store.baselines  # noqa: F401
import pytest_gemmperf.store.hardware  # noqa: F401
import pytest_gemmperf.store.results  # noqa: F401
import pytest_gemmperf.traces.discover  # noqa: F401
import pytest_gemmperf.traces.torch_trace  # noqa: F401
from pytest_gemmperf.analysis.overlap import gemm_overlap
from pytest_gemmperf.cli import main as cli_main
from pytest_gemmperf.gate.compare import compare
from pytest_gemmperf.gate.samples import gate_samples, samples_from_dispatches
from pytest_gemmperf.run.results import slugify_test_id, write_tables
from pytest_gemmperf.run.torch_backend import load_rank_traces
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.record import normalize_samples
from pytest_gemmperf.store.results import records_from_results

pytest_plugins = ["pytester"]

NCCL_KERNEL = "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"
GEMM_KERNEL = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1_ISA942"
ELEM_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
POINT = "ch28-th256"
TEST_ID = "test_coll.py::test_coll"
KEY = ["point", "kernel", "metric", "unit", "value"]


# ------------------------------------------------------------------------------ Kineto traces


def write_rank_trace(path: Path, rank: int, *, seed: int, allreduce_scale: float = 1.0,
                     steps: int = 6, allreduce_name: str = "allreduce", profiler_steps: bool = False) -> Path:
    """One rank of a training step loop: per step a GEMM (stream 3) with an allreduce of 4 MiB
    overlapping it and an all-gather of 2 MiB after it (stream 7), then an elementwise kernel.
    Ranks arrive with a few µs of skew; every duration has ~1 % noise per run and rank."""
    rng = np.random.default_rng(seed)
    pid, ev, corr = 7000 + rank, [], 100
    unit = rng.lognormal(0.0, 0.01)
    colls = ((allreduce_name, "Float", 1 << 20, 1 << 20, 100, 300 * allreduce_scale),
             ("_allgather_base", "BFloat16", 1 << 18, 1 << 20, 900, 150))
    for i in range(steps):
        t0 = 10_000 + 2_000 * i
        if profiler_steps:  # what torch.profiler's schedule writes around each step
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 2}", "pid": pid,
                       "tid": pid, "ts": t0 - 500, "dur": 1_990})
        corr += 10
        ev.append({"ph": "X", "cat": "kernel", "name": GEMM_KERNEL, "pid": 0, "tid": 3, "ts": t0,
                   "dur": round(400 * unit * rng.lognormal(0, 0.01), 3),
                   "args": {"device": 0, "stream": 3, "correlation": corr, "grid": [256, 1, 1],
                            "block": [65536, 1, 1]}})
        ev.append({"ph": "X", "cat": "kernel", "name": ELEM_KERNEL, "pid": 0, "tid": 3, "ts": t0 + 1200,
                   "dur": round(30 * unit * rng.lognormal(0, 0.01), 3),
                   "args": {"device": 0, "stream": 3, "correlation": corr + 1, "grid": [256, 1, 1],
                            "block": [65536, 1, 1]}})
        for j, (name, dtype, n_in, n_out, offset, dur) in enumerate(colls):
            ext, c = 1000 + 10 * i + 2 * j, corr + 2 + j
            meta = {"Collective name": name, "dtype": dtype, "In msg nelems": n_in, "Out msg nelems": n_out,
                    "Group size": 4, "In split size": "[]", "Out split size": "[]",
                    "Process Group Name": "0", "Process Group Description": "default_pg",
                    "Process Group Ranks": "[0, 1, 2, 3]"}
            t = t0 + offset + 3 * ((rank + i) % 4)
            cpu_t = t - 200
            ev += [
                {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": pid,
                 "ts": cpu_t, "dur": 30, "args": {"External id": ext, **meta, "Rank": rank}},
                {"ph": "X", "cat": "cpu_op", "name": f"nccl:{name}", "pid": pid, "tid": pid, "ts": cpu_t + 2,
                 "dur": 20, "args": {"External id": ext + 1}},
                {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": pid, "tid": pid,
                 "ts": cpu_t + 5, "dur": 8, "args": {"External id": ext + 1, "correlation": c}},
                {"ph": "X", "cat": "kernel", "name": NCCL_KERNEL, "pid": 0, "tid": 7, "ts": t,
                 "dur": round(dur * unit * rng.lognormal(0, 0.01), 3),
                 "args": {"External id": ext + 1, "device": 0, "stream": 7, "correlation": c,
                          "grid": [64, 1, 1], "block": [16384, 1, 1], **meta}},
            ]
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X",
                                                      "warpSize": 64, "numSms": 304}],
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4, "pg_count": 1},
           "rocprofiler-sdk_version": "1.0", "traceEvents": ev, "displayTimeUnit": "ms"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def torch_point(root: Path, *, runs: int = 3, point: str = POINT, seed: int = 0, **kw) -> pd.DataFrame:
    """Dispatches of ``runs`` repeats of a 4-rank point, read as the torch backend reads them."""
    frames = []
    for k in range(runs):
        files = {r: [write_rank_trace(root / point / f"run{k}" / f"rank{r}" / "trace.json", r,
                                      seed=1000 * seed + 10 * k + r, **kw)] for r in range(4)}
        frames.append(load_rank_traces(files, point=point, run=k).dispatches)
    from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA, concat_tables

    return concat_tables(frames, DISPATCH_SCHEMA)


def write_results(root: Path, dispatches: pd.DataFrame, *, kernels: list[str], test_id: str = TEST_ID,
                  point: str = POINT) -> Path:
    """A results directory as the plugin leaves it (run.json, point.json, dispatches.parquet)."""
    pdir = root / slugify_test_id(test_id) / point
    pdir.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"hardware_key": "gfx942-AMD_Instinct_MI300X-x1"}))
    (pdir / "point.json").write_text(json.dumps({"test_id": test_id, "point": point, "status": "ok",
                                                 "kernels": kernels, "backend": "torch", "runs": []}))
    write_tables(pdir, {"dispatches": dispatches})
    return root


@pytest.fixture(scope="module")
def coll_sides(tmp_path_factory) -> dict[str, pd.DataFrame]:
    root = tmp_path_factory.mktemp("coll_sides")
    return {"base": torch_point(root / "base", seed=1), "same": torch_point(root / "same", seed=2),
            "slow": torch_point(root / "slow", seed=3, allreduce_scale=1.3)}


def rows(v: pd.DataFrame, metric: str, kernel: str | None = None) -> pd.DataFrame:
    sel = v["metric"] == metric
    if kernel is not None:
        sel &= v["kernel"] == kernel
    return v[sel]


def one(v: pd.DataFrame, metric: str, kernel: str) -> pd.Series:
    r = rows(v, metric, kernel)
    assert len(r) == 1, (metric, kernel, v[["kernel", "metric", "verdict"]])
    return r.iloc[0]


# ------------------------------------------------------------------------------ synthetic tables


def synthetic(side: int, *, units: int = 4, steps: int = 40, gemm: str = "Cijk_A_MT128", gemm_us: float = 100.0,
              comm_offset_us: float | None = None, comm_us: float = 50.0, seed: int = 0) -> pd.DataFrame:
    """Canonical-looking dispatches of ``units`` processes: per step one GEMM, one elementwise
    kernel and optionally an RCCL kernel on a second stream ``comm_offset_us`` after the GEMM's
    start. Durations carry 1 % per-process and 1 % per-dispatch noise."""
    rng = np.random.default_rng(seed)
    frames = []
    for u in range(units):
        scale = rng.lognormal(0, 0.01)
        t0 = np.arange(steps, dtype=np.int64) * 1_000_000
        parts = [(gemm, "gemm", 3, t0, gemm_us), ("elementwise_kernel_add", "elementwise", 3,
                                                  t0 + int(800_000), 20.0)]
        if comm_offset_us is not None:
            parts.append(("ncclDevKernel_Generic_1", "collective", 7, t0 + int(comm_offset_us * 1000), comm_us))
        for name, cat, stream, start, us in parts:
            dur = np.rint(us * 1000 * scale * rng.lognormal(0, 0.01, steps)).astype(np.int64)
            frames.append(pd.DataFrame({"kernel": name, "category": cat, "stream": stream, "start_ns": start,
                                        "end_ns": start + dur, "dur_ns": dur}))
    d = pd.concat(frames, ignore_index=True)
    n = len(d) // units
    d["pid"] = np.repeat(np.arange(units) + 100 * side, n)
    d["rank"] = np.repeat(np.arange(units), n)
    d["host"] = "node0"
    d["run"] = 0
    d["agent"] = d["rank"]
    d["point"] = POINT
    d["zero_dur"] = False
    for c in ("kernel", "category", "host", "point"):
        d[c] = d[c].astype("category")
    return d


# ------------------------------------------------------------------------------ tests


def test_kernel_replaced_by_a_slower_differently_named_one_fails_through_the_category_total():
    base = gate_samples(synthetic(0, gemm="Cijk_A_MT128", seed=1), kernels=["^Cijk_"])
    cand = gate_samples(synthetic(1, gemm="Cijk_B_MT64", gemm_us=130.0, seed=2), kernels=["^Cijk_"])
    # the regexes narrow the per-kernel durations only: the elementwise kernel is not gated...
    assert set(rows(base, "dur_ns")["kernel"]) == {"Cijk_A_MT128"}
    # ...but every dispatch of the point counts in the category totals
    assert set(rows(base, "category_total_ns")["kernel"]) == {"category:gemm", "category:elementwise"}
    v = compare(base, cand)
    a = one(v, "dur_ns", "Cijk_A_MT128")
    if "swapped" in str(a["note"]):  # the gate pairs the two names as one swapped kernel
        assert a["verdict"] == "regression"
    else:
        assert a["verdict"] == "missing"
        assert one(v, "dur_ns", "Cijk_B_MT64")["verdict"] == "new"
    gemm = one(v, "category_total_ns", "category:gemm")
    assert gemm["verdict"] == "regression" and gemm["ratio"] == pytest.approx(1.3, rel=0.02)
    # the elementwise total stays in the samples (a control) but is not gated: the test selects GEMMs
    assert v[v["kernel"] == "category:elementwise"].empty
    every = compare(gate_samples(synthetic(0, gemm="Cijk_A_MT128", seed=1)),
                    gate_samples(synthetic(1, gemm="Cijk_B_MT64", gemm_us=130.0, seed=2)))
    assert one(every, "category_total_ns", "category:elementwise")["verdict"] == "unchanged"  # all selected
    # no collectives in these points: no overlap / timeline / collective rows to clutter the gate
    assert set(v["metric"]) <= {"dur_ns", "category_total_ns", "cv_robust"}


def test_gemm_that_loses_its_overlap_is_caught_by_overlap_fraction_and_exposed_comm():
    # base: the collective starts 25 µs into the 100 µs GEMM and runs 100 µs (75 µs hidden);
    # candidate: the collective is serialized after the GEMM
    base = gate_samples(synthetic(0, comm_offset_us=25, comm_us=100, seed=3), kernels=["^Cijk_"])
    cand = gate_samples(synthetic(1, comm_offset_us=105, comm_us=100, seed=4), kernels=["^Cijk_"])
    ov = rows(base, "overlap_fraction", "category:gemm")
    assert len(ov) == 4 and ov["value"].between(0.72, 0.78).all()
    assert (rows(cand, "overlap_fraction")["value"] == 0).all()
    exposed = rows(base, "exposed_comm_ns", "*")["value"]  # per step (samples are per step)
    assert exposed.between(20_000, 30_000).all()  # ~25 µs of the collective sticks out
    # the per-kernel durations did not change: only the overlap metrics can catch this
    v = compare(base, cand)
    assert one(v, "dur_ns", "Cijk_A_MT128")["verdict"] == "unchanged"
    frac = one(v, "overlap_fraction", "category:gemm")
    assert frac["verdict"] == "regression" and frac["cand_median_ns"] == 0
    exp = one(v, "exposed_comm_ns", "*")
    assert exp["verdict"] == "regression" and exp["ratio"] == pytest.approx(4.0, rel=0.1)
    assert one(v, "computation_ns", "*")["verdict"] == "unchanged"


def test_interference_slowdown_compares_overlapped_with_isolated_dispatches():
    d = synthetic(0, steps=40, comm_offset_us=10, comm_us=50, seed=5)
    # every second step the collective moves far away from the GEMM; overlapped GEMMs are 20 % slower
    comm = (d["kernel"] == "ncclDevKernel_Generic_1").to_numpy()
    step = d["start_ns"].to_numpy() // 1_000_000
    far = comm & (step % 2 == 1)
    d.loc[far, "start_ns"] += 500_000
    d.loc[far, "end_ns"] += 500_000
    slow = (d["kernel"] == "Cijk_A_MT128").to_numpy() & (step % 2 == 0)
    d.loc[slow, "dur_ns"] = (d.loc[slow, "dur_ns"] * 1.2).round().astype("int64")
    d.loc[slow, "end_ns"] = d.loc[slow, "start_ns"] + d.loc[slow, "dur_ns"]
    s = gate_samples(d)
    inter = rows(s, "interference_slowdown", "category:gemm")
    assert len(inter) == 4 and inter["value"].between(1.17, 1.23).all()


def test_gate_samples_agrees_with_samples_from_dispatches_and_uses_the_same_units():
    d = synthetic(0, comm_offset_us=25, seed=6)
    full = gate_samples(d, warmup=3, compact=False)
    plain = samples_from_dispatches(d, warmup=3)
    mine = full[full["metric"].isin(["dur_ns", "category_total_ns"])]
    pd.testing.assert_frame_equal(mine.sort_values(KEY).reset_index(drop=True),
                                  plain.sort_values(KEY).reset_index(drop=True))
    units = set(plain["unit"])
    assert units == {f"node0/{p}/{p}/0" for p in range(4)}
    for metric in ("overlap_fraction", "exposed_comm_ns", "computation_ns"):
        assert set(rows(full, metric)["unit"]) == units, metric
    # compact=True is compact_samples of the full table (same rows, fewer dur_ns)
    small = gate_samples(d, warmup=3)
    from pytest_gemmperf.gate.samples import compact_samples

    pd.testing.assert_frame_equal(small.sort_values(KEY).reset_index(drop=True),
                                  compact_samples(full).sort_values(KEY).reset_index(drop=True))
    assert (rows(small, "dur_ns").groupby(["kernel", "unit"]).size() == 21).all()


def test_gate_samples_bad_inputs_are_one_line_errors():
    from pytest_gemmperf.errors import GemmperfInputError

    d = synthetic(0, seed=7)
    with pytest.raises(GemmperfInputError, match="no dispatch matches the kernel regexes .*kernels seen"):
        gate_samples(d, kernels=["^rccl_only$"], path="x/dispatches.parquet")
    with pytest.raises(GemmperfInputError, match="invalid kernel regex"):
        gate_samples(d, kernels=["Cijk_("])
    with pytest.raises(GemmperfInputError, match="warm-up"):
        gate_samples(d, kernels=["^Cijk_"], warmup=1000)


def test_gemm_overlap_without_names_is_the_same_table_minus_the_names():
    d = synthetic(0, comm_offset_us=25, seed=8)
    full = gemm_overlap(d)
    bare = gemm_overlap(d, names=False)
    assert "overlapping_collectives" in full.columns and "overlapping_collectives" not in bare.columns
    pd.testing.assert_frame_equal(full.drop(columns="overlapping_collectives"), bare)


def test_collective_samples_from_torch_traces(coll_sides):
    s = gate_samples(coll_sides["base"], kernels=["^Cijk_"])
    lat = rows(s, "coll_latency_ns")
    assert set(lat["kernel"]) == {"allreduce:4MiB", "_allgather_base:2MiB"}
    assert set(lat["unit"]) == {"-/-/-/0", "-/-/-/1", "-/-/-/2"}  # the whole 4-rank run is the unit
    ar = rows(s, "coll_latency_ns", "allreduce:4MiB")["value"]
    assert ar.between(280_000, 310_000).all()  # min over ranks of ~300 µs kernels
    bw = rows(s, "coll_busbw_gbps", "allreduce:4MiB")["value"]
    # 4 MiB / latency in 2**30 B/s, times 2 (n-1)/n = 1.5 (medians of 6 per run: close, not equal)
    np.testing.assert_allclose(bw.to_numpy(), (4 / 1024) / (ar.to_numpy() / 1e9) * 1.5, rtol=1e-5)
    # per-process metrics are there too, one per rank and run
    assert rows(s, "exposed_comm_ns")["unit"].nunique() == 12
    assert rows(s, "overlap_fraction")["value"].between(0.6, 0.8).all()  # 300 of 400 µs hidden


def test_allreduce_thirty_percent_slower_fails_compare_cli_on_latency_and_bus_bandwidth(coll_sides, tmp_path, capsys):
    kernels = ["^Cijk_"]
    base = write_results(tmp_path / "base", coll_sides["base"], kernels=kernels)
    same = write_results(tmp_path / "same", coll_sides["same"], kernels=kernels)
    slow = write_results(tmp_path / "slow", coll_sides["slow"], kernels=kernels)
    assert cli_main(["compare", str(base), str(same), "--out", str(tmp_path / "o1"), "--no-report"]) == 0
    v = pd.read_csv(tmp_path / "o1" / "verdicts.csv")
    assert set(rows(v, "coll_latency_ns")["verdict"]) == {"unchanged"}
    assert cli_main(["compare", str(base), str(slow), "--out", str(tmp_path / "o2"), "--no-report"]) == 1
    v = pd.read_csv(tmp_path / "o2" / "verdicts.csv")
    lat = one(v, "coll_latency_ns", "allreduce:4MiB")
    assert lat["verdict"] == "regression" and lat["ratio"] == pytest.approx(1.3, rel=0.03)
    bw = one(v, "coll_busbw_gbps", "allreduce:4MiB")
    assert bw["verdict"] == "regression" and bw["ratio"] == pytest.approx(1 / 1.3, rel=0.03)
    assert one(v, "coll_latency_ns", "_allgather_base:2MiB")["verdict"] == "unchanged"
    assert one(v, "coll_busbw_gbps", "_allgather_base:2MiB")["verdict"] == "unchanged"
    assert one(v, "dur_ns", GEMM_KERNEL)["verdict"] == "unchanged"
    assert set(v["point"]) == {POINT}
    out = capsys.readouterr().out
    assert "coll_latency_ns" in out and "allreduce:4MiB" in out


# ------------------------------------------------------------------------------ plugin path


def _entry_point_loaded() -> bool:
    return any(ep.value == "pytest_gemmperf.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))


PLUGIN_ARGS = [] if _entry_point_loaded() else ["-p", "pytest_gemmperf.plugin"]
TEST_FILE = """
from pytest_gemmperf import sweep

@sweep(channels=[28], threads=[256], kernels=[r"^Cijk_"])
def test_coll(gemmperf):
    gemmperf.assert_no_regression(gemmperf.profile(["true"]), warmup=1)
"""


@pytest.mark.usefixtures("without_session_reports")  # no session report is read here
def test_plugin_gate_fails_on_slower_allreduce_and_refresh_gives_the_pytest_samples(coll_sides, pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_coll=TEST_FILE)
    kernels = [r"^Cijk_"]
    write_results(pytester.path / "stored_base", coll_sides["base"], kernels=kernels)
    write_results(pytester.path / "stored_slow", coll_sides["slow"], kernels=kernels)

    def run(replay: str, results: str):
        return pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
                                  f"--gemmperf-replay={replay}", f"--gemmperf-results-dir={results}",
                                  "--gemmperf-baseline-dir=base", "--gemmperf-report-dir=rep")

    out = run("stored_base", "res1")
    out.assert_outcomes(passed=1)
    stored = BaselineStore(pytester.path / "base").load_all()
    assert len(stored) == 1 and stored[0].test_id == TEST_ID
    gated = stored[0].samples
    assert {"dur_ns", "category_total_ns", "overlap_fraction", "exposed_comm_ns", "computation_ns",
            "coll_latency_ns", "coll_busbw_gbps"} <= set(gated["metric"])
    # baseline refresh of the session's results directory: exactly the samples pytest gated
    res1 = pytester.path / "res1"
    assert json.loads((res1 / slugify_test_id(TEST_ID) / POINT / "point.json").read_text())["warmup"] == 1
    refreshed, = records_from_results(res1)
    pd.testing.assert_frame_equal(normalize_samples(refreshed.samples).sort_values(KEY).reset_index(drop=True)
                                  .astype({c: str for c in KEY[:4]}),
                                  normalize_samples(gated).sort_values(KEY).reset_index(drop=True)
                                  .astype({c: str for c in KEY[:4]}))

    out = run("stored_slow", "res2")
    out.assert_outcomes(failed=1)
    text = out.stdout.str()
    assert "regression" in text and "coll_latency_ns" in text and "allreduce:4MiB" in text
    v = pd.read_csv(pytester.path / "res2" / slugify_test_id(TEST_ID) / "verdicts.csv")
    assert one(v, "coll_latency_ns", "allreduce:4MiB")["verdict"] == "regression"
    assert one(v, "coll_busbw_gbps", "allreduce:4MiB")["verdict"] == "regression"
    assert one(v, "dur_ns", GEMM_KERNEL)["verdict"] == "unchanged"


# ------------------------------------------------------------------------------ per unit of work


def _sums(s: pd.DataFrame) -> pd.DataFrame:
    return s[s["metric"].isin(["category_total_ns", "computation_ns", "exposed_comm_ns"])]


@pytest.mark.parametrize("warmup", [0, 3])
def test_a_run_with_30_percent_fewer_iterations_reads_neither_faster_nor_slower(warmup):
    # no step ranges in these tables: the unit of work is estimated from the dispatch counts
    base = gate_samples(synthetic(0, steps=40, comm_offset_us=25, seed=11), kernels=["^Cijk_"], warmup=warmup)
    cand = gate_samples(synthetic(1, steps=28, comm_offset_us=25, seed=12), kernels=["^Cijk_"], warmup=warmup)
    assert set(pd.DataFrame(base.attrs["steps"])["source"]) == {"estimated: median dispatches per kernel"}
    assert pd.DataFrame(base.attrs["steps"])["steps"].tolist() == [40.0] * 4
    assert pd.DataFrame(cand.attrs["steps"])["steps"].tolist() == [28.0] * 4
    assert any("per step" in n for n in base.attrs["notes"])
    v = compare(base, cand, test="t")
    sums = _sums(v)
    assert set(sums["metric"]) == {"category_total_ns", "computation_ns", "exposed_comm_ns"}
    assert sums["ratio"].between(0.97, 1.03).all(), sums[["kernel", "metric", "ratio"]]
    assert not sums["verdict"].isin(["improvement", "regression"]).any()
    # what the per-step values mean: one GEMM of ~100 µs per step (warm-up dispatches count at
    # the steady-state mean, so the value does not depend on the warm-up either)
    gemm = rows(base, "category_total_ns", "category:gemm")["value"]
    assert gemm.between(97_000, 103_000).all()


def test_per_step_values_still_catch_a_real_slowdown_of_the_totals():
    base = gate_samples(synthetic(0, steps=40, seed=13), kernels=["^Cijk_"])
    cand = gate_samples(synthetic(1, steps=28, gemm_us=120.0, seed=14), kernels=["^Cijk_"])
    gemm = one(compare(base, cand), "category_total_ns", "category:gemm")
    assert gemm["verdict"] == "regression" and gemm["ratio"] == pytest.approx(1.2, rel=0.02)


def test_profiler_steps_column_is_the_unit_of_work():
    d = synthetic(0, steps=40, seed=15)
    plain = gate_samples(d, kernels=["^Cijk_"])
    # a trace that says it ran 20 ProfilerSteps (two GEMMs per step, as far as the gate knows)
    d["profiler_steps"] = pd.array([20] * len(d), dtype="Int64")
    s = gate_samples(d, kernels=["^Cijk_"])
    assert set(pd.DataFrame(s.attrs["steps"])["source"]) == {"ProfilerStep ranges"} and not s.attrs["notes"]
    a = rows(plain, "category_total_ns").set_index(["kernel", "unit"])["value"]
    b = rows(s, "category_total_ns").set_index(["kernel", "unit"])["value"]
    pd.testing.assert_series_equal(b, a * 2)  # per ProfilerStep = twice per estimated step
    # a marker "step" column is used when there is no profiler_steps column
    m = synthetic(0, steps=40, seed=15)
    m["step"] = (m["start_ns"] // 2_000_000).astype("int64")  # 20 ranges of 2 ms
    sm = gate_samples(m, kernels=["^Cijk_"])
    assert set(pd.DataFrame(sm.attrs["steps"])["source"]) == {"step ranges"}
    assert pd.DataFrame(sm.attrs["steps"])["steps"].tolist() == [20.0] * 4


def test_torch_traces_carry_their_profiler_steps_and_fewer_steps_read_the_same(tmp_path):
    base = torch_point(tmp_path / "b", runs=2, seed=21, steps=6, profiler_steps=True)
    cand = torch_point(tmp_path / "c", runs=2, seed=22, steps=4, profiler_steps=True)
    assert set(base["profiler_steps"].dropna().astype(int)) == {6}
    assert set(cand["profiler_steps"].dropna().astype(int)) == {4}
    sb, sc = gate_samples(base), gate_samples(cand)
    assert set(pd.DataFrame(sb.attrs["steps"])["source"]) == {"ProfilerStep ranges"}
    v = _sums(compare(sb, sc))
    assert len(v) and v["ratio"].between(0.95, 1.05).all(), v[["kernel", "metric", "ratio"]]
    assert not v["verdict"].isin(["improvement", "regression"]).any()
