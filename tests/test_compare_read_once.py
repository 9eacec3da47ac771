"""A ``gemmperf compare`` side whose reports need the full tables (collective metadata matched
across ranks, counters) reads each source once: the sources that force it hand their whole
reads back from the per-source pass, and only the others are read again; the tables are
``load(paths)``'s."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from pytest_gemmperf.analysis import source_totals
from pytest_gemmperf.store.compare_inputs import load_side
from pytest_gemmperf.traces import source_reader
from pytest_gemmperf.traces.discover import load
from test_gate_slim_samples import JSON_V7, _tree


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """How often each source (its first file) is read."""
    seen: Counter = Counter()
    inner = source_reader.read_source

    def counted(src, *args, **kwargs):
        seen[str(src.files[0])] += 1
        return inner(src, *args, **kwargs)

    monkeypatch.setattr(source_reader, "read_source", counted)
    return seen


def _results(root: Path, src: Path) -> Path:
    """A finished pytest run whose points' tables are the Kineto ranks under ``src``."""
    root.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"start_time": "2026-11-20T10:00:00+00:00"}))
    for i, f in enumerate(sorted(src.rglob("*.pt.trace.json"))):
        pdir = root / f"perf_tests__test_gemm.py__test_{i}" / "th256"
        pdir.mkdir(parents=True)
        (pdir / "point.json").write_text(json.dumps({"test_id": f"perf_tests/test_gemm.py::test_{i}",
                                                     "point": "th256", "status": "ok"}))
        load([f]).dispatches.to_parquet(pdir / "dispatches.parquet")
    return root


def _side(kind: str, tmp_path: Path) -> Path:
    if kind == "counters":
        (tmp_path / "c").mkdir()
        return Path(shutil.copy(JSON_V7, tmp_path / "c" / JSON_V7.name))
    if kind == "results-collectives":
        return _results(tmp_path / "run", _tree("torch-collectives", tmp_path / "src", 7))
    return _tree(kind, tmp_path / "in", 7)


def _tables_equal(got, want) -> None:
    for name in ("dispatches", "counters", "agents"):
        pd.testing.assert_frame_equal(getattr(got, name), getattr(want, name), check_exact=True)


@pytest.mark.parametrize("kind", ["torch-collectives", "counters", "results-collectives"])
def test_a_side_read_in_full_reads_each_source_once(tmp_path, reads, kind):
    side = _side(kind, tmp_path)
    traces: dict = {}
    load_side(str(side), traces=traces, jobs=1)
    assert reads and set(reads.values()) == {1}, reads
    assert isinstance(traces[str(side)].dispatches, pd.DataFrame)
    reads.clear()
    want = load([side])
    _tables_equal(traces[str(side)], want)


def test_only_the_sources_that_did_not_force_it_are_read_again(tmp_path, reads):
    """Ranks with and without collective metadata: those with it hand their reads back; those
    without are read once more, for the reports and the gate's collective matching alike."""
    side = _tree("torch-mixed-collectives", tmp_path / "in", 8)
    traces: dict = {}
    load_side(str(side), traces=traces, jobs=1)
    plain = {str(f) for f in side.rglob("*.pt.trace.json") if "record_param_comms" not in f.read_text()}
    assert plain and {f: n for f, n in reads.items() if n > 1} == dict.fromkeys(plain, 2), reads
    reads.clear()
    _tables_equal(traces[str(side)], load([side]))


def test_reduce_or_read_is_load_when_the_reductions_cannot_stand(tmp_path, reads):
    side = _tree("torch-collectives", tmp_path / "in", 9)
    got = source_totals.reduce_or_read([side], jobs=1)
    assert set(reads.values()) == {1}
    reads.clear()
    want = load([side])
    _tables_equal(got, want)
    assert [got.meta[k] for k in ("notes", "sources", "skipped")] == \
           [want.meta[k] for k in ("notes", "sources", "skipped")]
    assert got.files == want.files and got.meta["files"].keys() == want.meta["files"].keys()
