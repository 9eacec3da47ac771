"""``--gemmperf-benchmark-json PATH``: pytest-benchmark JSON of the session's gated points
(pytest_gemmperf/pytest_glue/benchmark_json.py), read back by pytest-benchmark itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gemmperf_pytester_support import FAKE, gp  # noqa: F401 - the fixture
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.pytest_glue.benchmark_json import write_session_benchmark_json

pytest_plugins = ["pytester"]
# no test here reads report.html / report.xlsx (conftest.py: without_session_reports)
pytestmark = pytest.mark.usefixtures("without_session_reports")

SLUG = "test_gpsweep.py__test_gpsweep"
FULLNAMES = ["test_gpsweep.py::test_gpsweep::aten::mm[ch28-th256]",
             "test_gpsweep.py::test_gpsweep::aten::mm[ch56-th256]"]


def _pytest_benchmark_compare(*files: Path) -> subprocess.CompletedProcess:
    """pytest-benchmark's own reader of saved runs (``pytest-benchmark compare``)."""
    pytest.importorskip("pytest_benchmark")
    exe = shutil.which("pytest-benchmark", path=str(Path(sys.executable).parent)) or shutil.which("pytest-benchmark")
    if exe is None:
        pytest.skip("the pytest-benchmark command is not installed")
    return subprocess.run([exe, "compare", *map(str, files)], capture_output=True, text=True, timeout=120)


def _mm_seconds(results: Path, point: str, warmup: int = 0) -> np.ndarray:
    d = pd.read_parquet(results / SLUG / point / "dispatches.parquet")
    d = d[d["kernel"].astype(str) == "aten::mm"].sort_values("start_ns")
    if warmup:
        d = d.groupby(["run", "rank"], observed=True).apply(lambda g: g.iloc[warmup:], include_groups=False)
    return np.sort(d["dur_ns"].to_numpy(float) * 1e-9)


def test_session_writes_pytest_benchmark_json_of_the_gated_points(gp):
    out = gp("--gemmperf-benchmark-json=out/bench.json", results="r1")
    out.assert_outcomes(passed=2)
    path = gp.path / "out" / "bench.json"
    out.stdout.fnmatch_lines([f"pytest-benchmark JSON: {path} (2 benchmark(s))"])
    doc = json.loads(path.read_text())
    assert set(doc) == {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    assert [b["fullname"] for b in doc["benchmarks"]] == FULLNAMES
    for b, point in zip(doc["benchmarks"], ("ch28-th256", "ch56-th256")):
        assert b["group"] == point and b["name"] == f"aten::mm[{point}]"
        assert b["extra_info"]["processes"] == 4            # 2 runs x 2 ranks
        x = _mm_seconds(gp.path / "r1", point)
        assert b["stats"]["rounds"] == len(x) == 2 * 2 * 40
        assert b["stats"]["median"] == pytest.approx(float(np.median(x)), rel=1e-12)
        assert b["stats"]["min"] == pytest.approx(x[0]) and b["stats"]["max"] == pytest.approx(x[-1])

    # a second session, then pytest-benchmark reads and compares both files
    out = gp("--gemmperf-benchmark-json=out/bench2.json", "--gemmperf-warmup", "5", results="r2")
    out.assert_outcomes(passed=2)
    doc2 = json.loads((gp.path / "out" / "bench2.json").read_text())
    # each benchmark carries its point's gate outcome (gate/outcome.py); recording one is none
    assert [b["extra_info"].get("gemmperf_outcome") for b in doc2["benchmarks"]] == ["passed", "passed"]
    assert all("gemmperf_outcome" not in b["extra_info"] for b in doc["benchmarks"])
    rounds = [b["stats"]["rounds"] for b in doc2["benchmarks"]]
    assert rounds == [2 * 2 * (40 - 5)] * 2                   # the gate's warm-up is applied
    x = _mm_seconds(gp.path / "r2", "ch28-th256", warmup=5)
    assert doc2["benchmarks"][0]["stats"]["median"] == pytest.approx(float(np.median(x)), rel=1e-12)
    proc = _pytest_benchmark_compare(path, gp.path / "out" / "bench2.json")
    assert proc.returncode == 0, proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("aten::mm[")]
    # one row per file and point; its label names the file, its rounds are each file's own
    assert sorted((r[0], r[1].rstrip(")").split("/")[-1], r[-2]) for r in rows) == [
        ("aten::mm[ch28-th256]", "bench", "160"), ("aten::mm[ch28-th256]", "bench2", "140"),
        ("aten::mm[ch56-th256]", "bench", "160"), ("aten::mm[ch56-th256]", "bench2", "140")], proc.stdout


def test_xdist_workers_contribute_their_points(xdist_sweep):
    out = xdist_sweep.out
    out.assert_outcomes(passed=2)
    doc = json.loads((xdist_sweep.path / "bx.json").read_text())
    assert [b["fullname"] for b in doc["benchmarks"]] == FULLNAMES
    workers = {json.loads((xdist_sweep.path / "resx" / SLUG / p / "point.json").read_text())["xdist_worker"]
               for p in ("ch28-th256", "ch56-th256")}
    assert workers == {"gw0", "gw1"}                          # both workers' points are in


def test_no_gated_point_writes_nothing_and_says_so(gp, pytester):
    pytester.makepyfile(test_ungated=f"""
import sys

def test_profile_only(gemmperf):
    gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "5"], repeats=1)
""")
    out = gp("test_ungated.py", "--gemmperf-benchmark-json=none.json", results="r0")
    out.assert_outcomes(passed=1)
    out.stdout.fnmatch_lines(["pytest-benchmark JSON not written: *none.json: no gated points in this session*"])
    assert not (gp.path / "none.json").exists()


def test_a_gated_point_without_its_table_is_named(tmp_path):
    gated = [{"test": "t.py::test_a", "point": "p1", "warmup": 0, "kernels": []}] * 2
    with pytest.raises(GemmperfInputError, match=r"t\.py__test_a/p1/dispatches\.parquet.*cannot read"):
        write_session_benchmark_json(tmp_path / "b.json", tmp_path / "res", gated)
    assert not (tmp_path / "b.json").exists()
