"""`gemmperf analyze`: in-process through cli.main and as a subprocess (console entry point)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import FIXTURES, REPO, shared_file
from pytest_gemmperf.cli import main

ROCM = FIXTURES / "torch" / "rocm_sdk_rank3.pt.trace.json"
CUDA = FIXTURES / "torch" / "gpuhost-01_777.1700000001000000000.pt.trace.json.gz"
HEADER = ["point", "rank", "kernel", "count", "total_ns", "mean_ns", "median_ns", "std_ns", "min_ns",
          "max_ns", "p05_ns", "p95_ns", "iqr_ns", "mad_ns", "cv", "range_ns", "category"]
CIJK = "Cijk_Ailk_Bljk_S_B_Bias_HA_S_SAV_UserArgs_MT64x64x16_MI16x16x1_SN_ISA942_WG16_16_1"


def _sweep(root: Path) -> Path:
    for t, c in ((256, 28), (512, 56)):
        for r in (0, 1):
            doc = json.loads(ROCM.read_text())
            doc["distributedInfo"]["rank"] = r
            f = root / f"{t}thread" / f"nccl_{c}channels" / "torch_profiler" / f"rank{r}" / "trace_step5.json"
            f.parent.mkdir(parents=True)
            f.write_text(json.dumps(doc))
    return root


def _read(out: Path) -> tuple[pd.DataFrame, dict]:
    k = pd.read_csv(out / "kernels.csv", keep_default_na=True)
    return k, json.loads((out / "summary.json").read_text())


def test_analyze_sweep(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["analyze", str(_sweep(tmp_path / "sweep")), "--out", str(out)]) == 0
    k, s = _read(out)
    assert list(k.columns[: len(HEADER)]) == HEADER and "n_outliers" in k.columns
    assert len(k) == 2 * 2 * 6  # points x ranks x distinct kernels
    row = k[(k["point"] == "ch28-th256") & (k["rank"] == 1) & (k["kernel"] == CIJK)].iloc[0]
    assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == (2, 41456, 20456, 21000)
    assert row["median_ns"] == 20728.0 and row["category"] == "gemm"
    # within a (point, rank) the heaviest kernel comes first
    first = k[(k["point"] == "ch28-th256") & (k["rank"] == 0)].iloc[0]
    assert first["kernel"].startswith("ncclDevKernel") and first["total_ns"] == 330000
    assert s["n_dispatches"] == 4 * 8 and s["n_kernel_rows"] == 24
    assert s["dispatches_by_source"] == {"torch": 32}
    assert s["flags"] == {"zero_dur": 0, "queue_overlap": 0}
    per = {(p["point"], p["rank"]): p for p in s["per_point_rank"]}
    assert set(per) == {("ch28-th256", 0), ("ch28-th256", 1), ("ch56-th512", 0), ("ch56-th512", 1)}
    cats = per[("ch56-th512", 1)]["total_ns_by_category"]
    assert cats == {"collective": 330000, "gemm": 91456, "memory": 11500, "elementwise": 3000}
    assert per[("ch56-th512", 1)]["n_dispatches"] == 8
    assert {a["product"] for a in s["agents"]} == {"AMD Instinct MI300X"}
    assert len(s["sources"]) == 4 and all(src["kind"] == "torch" for src in s["sources"])
    assert "kernels.csv" in capsys.readouterr().out


def test_warmup_and_categories(tmp_path):
    rules = tmp_path / "cats.yaml"
    rules.write_text("fill: [FillFunctor]\nmygemm: ['^Cijk_Alik']\n")
    out = tmp_path / "out"
    assert main(["analyze", str(ROCM), "--out", str(out), "--warmup", "1",
                 "--categories", str(rules)]) == 0
    k, s = _read(out)
    # one dispatch per kernel dropped: only the kernels seen twice remain
    assert sorted(k["count"]) == [1, 1]
    assert set(k["category"]) == {"gemm", "collective"}
    assert k["point"].isna().all() and set(k["rank"]) == {3}
    assert s["warmup"] == 1
    cats = s["per_point_rank"][0]["total_ns_by_category"]
    assert cats["fill"] == 3000 and cats["mygemm"] == 50000  # totals use the user's rules


def test_mixed_sources_are_kept_apart(tmp_path):
    cell = tmp_path / "s" / "256thread" / "nccl_28channels"
    (cell / "a").mkdir(parents=True)
    shutil.copy(ROCM, cell / "a" / "t.json")
    rj = shared_file("rocprofv3/AMD-AGI_TraceLens/908_results.TRIMMED_DERIVED.json")
    (cell / "rocprof_traces" / "h").mkdir(parents=True)
    shutil.copy(rj, cell / "rocprof_traces" / "h" / "908_results.json")
    out = tmp_path / "out"
    assert main(["analyze", str(tmp_path / "s"), "--out", str(out)]) == 0
    k, s = _read(out)
    assert k.columns[0] == "source" and set(k["source"]) == {"torch", "rocprof-json"}
    assert s["dispatches_by_source"] == {"rocprof-json": 355, "torch": 8}
    # one name per format: the sources discovery read are listed by the same names
    assert {src["kind"] for src in s["sources"]} == set(s["dispatches_by_source"])


@pytest.mark.parametrize("make", ["missing", "truncated", "empty_dir", "rocprof_as_torch_name"])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, make):
    if make == "missing":
        bad = tmp_path / "absent.json"
    elif make == "truncated":
        bad = tmp_path / "t.pt.trace.json"
        bad.write_bytes(ROCM.read_bytes()[:700])
    elif make == "empty_dir":
        bad = tmp_path / "empty"
        bad.mkdir()
    else:
        bad = tmp_path / "x.pt.trace.json"
        bad.write_text('{"rocprofiler-sdk-tool": [')
    assert main(["analyze", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and err.startswith("gemmperf: error:")
    assert not (tmp_path / "out" / "kernels.csv").exists()


def test_unwritable_out_exits_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["analyze", str(ROCM), "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    exe = REPO / ".venv" / "bin" / "python"
    return subprocess.run([str(exe if exe.exists() else sys.executable), "-m", "pytest_gemmperf.cli",
                           "analyze", *args], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120)


@pytest.mark.slow  # a real gemmperf process
def test_console_entry_point(tmp_path):
    out = tmp_path / "out"
    ok = _cli(str(CUDA), str(ROCM), "--out", str(out))
    assert ok.returncode == 0, ok.stderr
    k, s = _read(out)
    assert s["n_dispatches"] == 10 and len(k) == 6 + 2
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(CUDA.read_bytes()[:100])
    r = _cli(str(bad), "--out", str(tmp_path / "o2"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and str(bad) in r.stderr


def test_real_aorta_trace(tmp_path):
    src = shared_file("aorta/smci350-zts-gtu-c6-25_200691.1758927066581847260.pt.trace.json")
    out = tmp_path / "out"
    assert main(["analyze", str(src), "--out", str(out), "--warmup", "1"]) == 0
    k, s = _read(out)
    assert s["n_dispatches"] == 20 and s["flags"]["queue_overlap"] == 1
    assert k["rank"].isna().all()
    gemm = k[k["category"] == "gemm"]
    assert len(gemm) == 3 and set(gemm["count"]) == {1}  # three Tensile kernels, 2 calls each
