"""``gemmperf compare`` with its reports (the default) reduces each source where it is read, for
the gate and for the reports in one pass (``gate/file_reduce.gate_inputs(reports=True)``,
``analysis/report_parts.py``): no process holds a side's full dispatches table, and every report
file is the one the full tables give, byte for byte, on random multi-source traces of every
input kind. Where a report view joins sources (collective metadata matched across ranks,
counters) the side is read in full for the reports, as before."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis.report_parts import SweepReduction
from pytest_gemmperf.commands import compare_impl
from pytest_gemmperf.gate import file_reduce
from pytest_gemmperf.store import compare_inputs
from pytest_gemmperf.store.compare_inputs import ReportInput
from pytest_gemmperf.traces.discover import load
from test_gate_slim_samples import KINDS, _tree
from test_parallel_reports import _report_files

#: kinds whose every report view is built from the per-source reductions
REDUCED = {"torch", "mixed-profilers", "rocprof-json", "rocprof-csv", "rocpd", "tables", "results"}


def _results(root: Path, seed: int) -> Path:
    """A finished pytest run (results layout) of two tests, its points' dispatch tables from
    generated Kineto traces."""
    src = _tree("torch", root.parent / f"{root.name}-src", seed)
    root.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"start_time": "2026-11-20T10:00:00+00:00"}))
    for i, f in enumerate(sorted(src.rglob("*.pt.trace.json"))):
        test = f"perf_tests/test_gemm.py::test_{i}"
        pdir = root / f"perf_tests__test_gemm.py__test_{i}" / "th256"
        pdir.mkdir(parents=True)
        (pdir / "point.json").write_text(json.dumps({"test_id": test, "point": "th256", "status": "ok"}))
        load([f]).dispatches.to_parquet(pdir / "dispatches.parquet")
    return root


def _input(kind: str, root: Path, seed: int) -> Path:
    return _results(root, seed) if kind == "results" else _tree(kind, root, seed)


def _compare(tmp_path: Path, inputs: list[Path], *extra: str) -> tuple[dict[str, bytes], list]:
    """The report files of ``gemmperf compare INPUTS``, and the dispatches each report side got
    (written into the same directory each time: summary.json names the files it lists)."""
    from pytest_gemmperf.cli import main

    out = tmp_path / "out"
    shutil.rmtree(out, ignore_errors=True)
    got: list = []
    real = compare_impl.write_reports

    def spy(out_dir, **kw):
        got.extend(kw["dispatches"])
        return real(out_dir, **kw)

    compare_impl.write_reports = spy
    try:
        assert main(["compare", *map(str, inputs), "--out", str(out), "--jobs", "1", *extra]) in (0, 1, 4)
    finally:
        compare_impl.write_reports = real
    return _report_files(out), got


def _full_tables(monkeypatch) -> None:
    """The reports and the gate's samples from each side's full tables, as ``gemmperf compare``
    built them before."""
    monkeypatch.setattr(compare_inputs, "gate_inputs",
                        lambda paths, **kw: file_reduce._full_path(paths, point=None, kernels=None, **kw))
    monkeypatch.setattr(compare_inputs, "_report_input",
                        lambda inputs, paths, jobs: ReportInput.of(load(paths, jobs=jobs)))
    monkeypatch.setattr(compare_inputs, "_complete_points_report",
                        lambda root, jobs, warmup: ReportInput.of(load([root], jobs=jobs)))


@pytest.mark.parametrize("kind", [*KINDS, "results"])
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])  # 1: three sides, a warm-up
def test_reports_of_reductions_equal_the_full_tables(tmp_path, monkeypatch, capsys, kind, seed):
    """Every report file of a compare (one or two candidates, with and without a warm-up) is
    the full tables' (the gate's samples and the reports' views) on random multi-source traces
    of each kind and of mixes (profilers in one side; Kineto ranks with and without collective
    metadata); a kind whose views join sources (Kineto with collective metadata) is reported
    from its full tables."""
    inputs = [_input(kind, tmp_path / f"in{i}", 10 * seed + i) for i in range(2 + seed)]
    # two candidates: labelled (the path names may repeat), a warm-up dropped
    extra = ("--warmup", "2", "--labels", "c1", "c2") if seed else ()
    reduced, sides = _compare(tmp_path, inputs, *extra)
    assert len(sides) == len(inputs)
    want = SweepReduction if kind in REDUCED else pd.DataFrame
    assert all(isinstance(s, want) for s in sides), [type(s) for s in sides]
    with monkeypatch.context() as m:
        _full_tables(m)
        full, sides = _compare(tmp_path, inputs, *extra)
    assert all(isinstance(s, pd.DataFrame) for s in sides)
    assert "report.html" in full and "summary.md" in full
    assert reduced.keys() == full.keys()
    assert [f for f in full if reduced[f] != full[f]] == []


# ------------------------------------------------------------------- bounded memory

def _tables(root: Path, sources: int, rows: int, seed: int) -> Path:
    """A side of ``sources`` processes (one dispatches table each) of ``rows`` dispatches,
    resampled from a generated rocprofv3 CSV process at new times."""
    from test_gate_slim_samples import write_csv_process

    rng = np.random.default_rng(seed)
    write_csv_process(root / "src", rng, 5358, 200)
    one = load([root / "src"]).dispatches
    side = root / "side"
    for i in range(sources):
        d = one.iloc[rng.integers(0, len(one), rows)].reset_index(drop=True)
        start = 1_700_000_000_000_000_000 + np.cumsum(rng.integers(1_000, 20_000, rows))
        dur = d["dur_ns"].to_numpy(np.int64) + rng.integers(0, 500, rows)
        d["start_ns"], d["end_ns"], d["dur_ns"] = start, start + dur, dur
        d["pid"] = pd.array([100 + i] * rows, dtype="Int64")
        # a text a dispatch beside the canonical columns, as real tables carry (launch args,
        # stacks): the full table holds it, no reduction does
        d["args"] = [f"{{'seq': {j}, 'stack': '{'x' * 500}'}}" for j in range(rows)]
        (side / f"rank{i}").mkdir(parents=True)
        d.to_parquet(side / f"rank{i}" / "dispatches.parquet")
    return side


_PEAK = """
import resource, sys
from pytest_gemmperf.cli import main
rc = main(["compare", *sys.argv[1:], "--jobs", "1"])
print(rc, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def _peak(tmp_path: Path, a: Path, b: Path) -> int:
    out = subprocess.run([sys.executable, "-c", _PEAK, str(a), str(b), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, check=True).stdout.splitlines()[-1].split()
    assert out[0] in ("0", "1", "4")
    return int(out[1])


#: sources a side, dispatches a source
SOURCES, ROWS = 3, 5_000


def test_compare_with_reports_holds_no_full_table(tmp_path, capsys):
    """The peak of a compare with its reports grows with what it keeps of each dispatch (the
    gate's samples and the reports' reductions, a few hundred bytes at most with the statistics'
    arrays), not with the dispatches table (here some 1,500 bytes a row with its text column,
    held for both sides before: about 2,400 bytes a dispatch of growth): sides of three sources
    against sides of one."""
    small = [_tables(tmp_path / f"s{s}", 1, ROWS, s) for s in (0, 1)]
    large = [_tables(tmp_path / f"l{s}", SOURCES, ROWS, s) for s in (0, 1)]
    added = 2 * (SOURCES - 1) * ROWS
    growth = _peak(tmp_path, *large) - _peak(tmp_path, *small)
    assert growth / added < 1200, f"{growth / 2**20:.0f} MiB more for {added:,} more dispatches"
