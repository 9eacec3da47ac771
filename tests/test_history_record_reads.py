"""``gemmperf history record`` reads what it records and no more: the gate's samples and the
agents that name the hardware, never the reports' reductions (it writes no report); the
hardware key is the one the full read names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gemmperf.analysis import source_totals
from pytest_gemmperf.cli import main
from pytest_gemmperf.history.store import HistoryStore
from pytest_gemmperf.store.hardware import hardware_key
from pytest_gemmperf.traces.discover import load
from test_gate_slim_samples import _tree


@pytest.fixture
def no_report_reduction(monkeypatch):
    """Any reduction for the reports fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("history record reduced a source for the reports")

    monkeypatch.setattr(source_totals, "report_part", refuse)


def _record(path: Path, hist: Path) -> str:
    assert main(["history", "record", str(path), "--history", str(hist), "--run-id", "r1"]) == 0
    return HistoryStore(hist).runs()["hw_key"].iloc[0]


@pytest.mark.parametrize("kind", ["torch", "rocprof-json", "tables"])
def test_a_trace_input_is_read_for_its_samples_and_agents_only(tmp_path, capsys, no_report_reduction, kind):
    root = _tree(kind, tmp_path / "in", 3)
    agents = load([root]).agents
    # tables without agents.parquet list none: no hardware named
    want = hardware_key(agents) if len(agents) else "unknown"
    assert _record(root, tmp_path / "hist") == want
    assert want.startswith("gfx") or kind == "tables"


def _results(root: Path, with_key: bool) -> Path:
    """A finished pytest run of one point (its tables from a generated Kineto trace), its
    run.json with or without the hardware key."""
    src = _tree("torch", root.parent / "src", 4)
    trace = load(sorted(src.rglob("*.pt.trace.json")))
    pdir = root / "perf_tests__test_gemm.py__test_mm" / "th256"
    pdir.mkdir(parents=True)
    run = {"start_time": "2026-11-20T10:00:00+00:00", **({"hardware_key": "gfx942-recorded-x8"} if with_key else {})}
    (root / "run.json").write_text(json.dumps(run))
    (pdir / "point.json").write_text(json.dumps({"test_id": "perf_tests/test_gemm.py::test_mm", "point": "th256",
                                                 "status": "ok"}))
    trace.dispatches.to_parquet(pdir / "dispatches.parquet")
    trace.agents.to_parquet(pdir / "agents.parquet")
    return root


def test_a_results_run_names_its_hardware_as_before(tmp_path, capsys, no_report_reduction):
    """run.json's key where it has one; else its complete points' agents (read without the
    reports' reductions)."""
    assert _record(_results(tmp_path / "a" / "run", with_key=True), tmp_path / "h1") == "gfx942-recorded-x8"
    root = _results(tmp_path / "b" / "run", with_key=False)
    want = hardware_key(source_totals.reduce_sources([root]).agents)
    assert want.startswith("gfx")
    assert _record(root, tmp_path / "h2") == want
