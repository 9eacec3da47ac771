"""The source-kind registry (traces/kinds.py): each kind claims its own files and no other
kind's; a kind registered in a test alone is found and read by discovery; decisions about a
source are taken from typed errors and typed skip records, never from the wording of a message."""

from __future__ import annotations

import csv
import os
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from conftest import FIXTURES
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.file_reduce import gate_inputs
from pytest_gemmperf.store.compare_inputs import load_side
from pytest_gemmperf.run.replay import trace_files
from pytest_gemmperf.traces import kinds
from pytest_gemmperf.traces.discover import discover, load
from pytest_gemmperf.traces.schema import Trace, finalize_dispatches
from pytest_gemmperf.traces.skipped import SkipReason

TORCH = FIXTURES / "torch" / "rocm_sdk_rank3.pt.trace.json"
ROCPROF_JSON = FIXTURES / "rocprof_json" / "v62_results.json"
KERNEL_TRACE = FIXTURES / "rocprof_csv" / "v7" / "mi350-n1" / "5358_kernel_trace.csv"


@pytest.fixture
def own_files(tmp_path) -> dict[str, Path]:
    """One file of every registered kind, named as its profiler names it."""
    db = tmp_path / "db" / "4242_results.db"
    db.parent.mkdir()
    sqlite3.connect(db).close()
    tables = tmp_path / "point" / "dispatches.parquet"
    tables.parent.mkdir()
    pd.DataFrame({"kernel": ["k"], "start_ns": [0], "end_ns": [1]}).to_parquet(tables)
    return {"rocprof-json": ROCPROF_JSON, "rocpd": db, "rocprof-csv": KERNEL_TRACE,
            "torch": TORCH, "tables": tables}


def test_every_kind_claims_its_own_file_and_no_other(own_files):
    assert [k.name for k in kinds.KINDS] == list(own_files), "a registered kind has no fixture here"
    for name, path in own_files.items():
        claims = [k.name for k in kinds.KINDS if k.sniff(kinds.Probe(path, given=True))]
        assert claims == [name], (path, claims)
        assert kinds.identify(path, given=True).name == name
        assert discover(path)[0].kind == name
    # in a walk the tables are claimed by their directory, and not read again file by file
    assert kinds.identify(own_files["tables"], given=False) is None
    assert kinds.directory_kind(os.listdir(own_files["tables"].parent)).name == "tables"


def test_content_decides_between_json_kinds(tmp_path):
    """A Kineto trace under a rocprofv3 name is a Kineto trace, and the other way round: the
    name only decides when no kind recognises the content."""
    as_rocprof = shutil.copy(TORCH, tmp_path / "7_results.json")
    as_torch = shutil.copy(ROCPROF_JSON, tmp_path / "x.pt.trace.json")
    assert kinds.identify(Path(as_rocprof), given=True).name == "torch"
    assert kinds.identify(Path(as_torch), given=True).name == "rocprof-json"
    broken = tmp_path / "9_results.json"
    broken.write_text("{ not json")
    assert kinds.identify(broken, given=True).name == "rocprof-json"  # its reader names the problem
    unnamed = tmp_path / "notes.json"
    unnamed.write_text('{"a": 1}')
    assert kinds.identify(unnamed, given=True) is None


# ---- a kind registered in a test is found and read without touching any other module ----

def _read_toy(src, notes):
    """``kernel start end`` per line."""
    rows = [line.split() for line in src.files[0].read_text().splitlines() if line.strip()]
    df = pd.DataFrame({"source": "toy", "kernel": [r[0] for r in rows],
                       "start_ns": [int(r[1]) for r in rows], "end_ns": [int(r[2]) for r in rows]})
    return Trace(dispatches=finalize_dispatches(df, str(src.files[0])), files=[str(src.files[0])])


def _sniff_toy(probe):
    return kinds.Match.STRONG if probe.name.endswith(".toy") else None


TOY = kinds.SourceKind(name="toy", sniff=_sniff_toy, read=_read_toy, layout_marks=("*.toy",),
                       output_names=("*.toy",), replay_globs=("**/*.toy",))


def _toy_tree(root: Path) -> Path:
    for rank in (0, 1):
        f = root / f"rank{rank}" / "gemm.toy"
        f.parent.mkdir(parents=True)
        f.write_text("Cijk_A 0 100\nCijk_A 200 310\nnccl_B 100 250\n")
    (root / "readme.txt").write_text("not a trace")
    return root


def test_a_registered_kind_is_discovered_and_read(tmp_path, monkeypatch):
    out = _toy_tree(tmp_path / "out")
    with pytest.raises(GemmperfInputError):  # unregistered: not a layout anything reads
        load(out)
    monkeypatch.setattr(kinds, "KINDS", [*kinds.KINDS, TOY])
    t = load(out, jobs=1)
    assert [s["kind"] for s in t.meta["sources"]] == ["toy", "toy"]
    assert len(t.dispatches) == 6
    assert sorted(t.dispatches["rank"].unique()) == [0, 1]  # path provenance, as for every kind
    assert set(t.dispatches["kernel"].astype(str)) == {"Cijk_A", "nccl_B"}
    assert len(trace_files(out)) == 2
    assert gate_inputs([out], jobs=1).reduced


def test_a_kind_that_is_not_reducible_is_gated_from_full_tables(tmp_path, monkeypatch):
    out = _toy_tree(tmp_path / "out")
    monkeypatch.setattr(kinds, "KINDS", [*kinds.KINDS, kinds.SourceKind(
        name="toy", sniff=_sniff_toy, read=_read_toy, reducible=False, layout_marks=("*.toy",))])
    inputs = gate_inputs([out], jobs=1)
    assert not inputs.reduced and inputs.n_dispatches == 6


# ---- decisions from types, never from message text ----------------------------------------

def test_a_broken_csv_is_an_error_whatever_its_text_says(tmp_path):
    """A value that reads "no kernel dispatch" is a broken file, not a launcher without GPU
    work: it must not be skipped with a note."""
    node = tmp_path / "out" / "node"
    node.mkdir(parents=True)
    rows = list(csv.reader(KERNEL_TRACE.open()))
    rows[2][rows[0].index("Start_Timestamp")] = "no kernel dispatch"
    with open(node / "5358_kernel_trace.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    shutil.copy(KERNEL_TRACE, node / "5359_kernel_trace.csv")
    with pytest.raises(GemmperfInputError, match=r"5358_kernel_trace\.csv.*'no kernel dispatch' is not a number"):
        load(tmp_path / "out")


def test_a_launcher_without_dispatches_is_skipped_with_a_note(tmp_path):
    node = tmp_path / "out" / "node"
    node.mkdir(parents=True)
    header = KERNEL_TRACE.read_text().splitlines()[0]
    (node / "5357_kernel_trace.csv").write_text(header + "\n")
    shutil.copy(KERNEL_TRACE, node / "5358_kernel_trace.csv")
    t = load(tmp_path / "out")
    assert t.meta["notes"] == [f"{node / '5357_kernel_trace.csv'}: no kernel dispatches (header only); "
                               "skipped (a process without GPU work, e.g. the launcher)"]


def test_a_path_that_reads_like_a_note_loses_nothing(tmp_path):
    """A directory whose name contains the words of a lost-input note (here in the note on a
    rank that the path and the file disagree on) is compared, not refused."""
    d = tmp_path / "a skipped, b"
    (d / "rank1").mkdir(parents=True)
    shutil.copy(TORCH, d / "rank1" / TORCH.name)
    out = load_side(str(d), jobs=1)
    assert len(out[""])


def test_skipped_inputs_are_typed_records(tmp_path):
    d = tmp_path / "out"
    (d / "rank0").mkdir(parents=True)
    shutil.copy(TORCH, d / "rank0" / TORCH.name)
    os.mkfifo(d / "rank1.pt.trace.json")
    (d / "gone_results.json").symlink_to(tmp_path / "missing")
    t = load(d)
    skipped = t.meta["skipped"]
    assert [(s.reason, s.lost) for s in skipped] == [(SkipReason.DANGLING_LINK, True),
                                                     (SkipReason.SPECIAL_FILE, True)]
    assert [s.note for s in skipped] == t.meta["notes"][:2]  # discovery's notes come first
    assert gate_inputs([d], jobs=1).skipped == skipped
    with pytest.raises(GemmperfInputError, match="part of the input could not be read"):
        load_side(str(d), jobs=1)


# ---- one vocabulary: the source column names the kind that read the row ----------------------

def test_the_source_column_and_format_are_the_name_of_the_kind_that_read_it(own_files, tmp_path):
    from test_rocpd import T0, UUID_A, _db  # here, not at module level: its tests stay its own

    files = {**own_files, "rocpd": _db(tmp_path, [(UUID_A, 1234, 3, T0, {})])}
    for kind in kinds.KINDS:
        if kind.name == "tables":  # keeps what the first reader wrote: below
            continue
        t = load(files[kind.name], jobs=1)
        assert set(t.dispatches["source"].astype(str)) == {kind.name}, kind.name
        assert {m.get("format") for m in t.meta["files"].values()} == {kind.name}, kind.name


def test_stored_tables_with_the_old_spellings_read_under_the_kinds_names(tmp_path):
    point = tmp_path / "point"
    point.mkdir()
    old = load(ROCPROF_JSON, jobs=1).dispatches.astype({"source": object})
    old["source"] = "rocprofv3-json"
    old.iloc[:1, old.columns.get_loc("source")] = "torch"
    old.to_parquet(point / "dispatches.parquet")
    d = load(point / "dispatches.parquet", jobs=1).dispatches
    assert d["source"].astype(str).value_counts().to_dict() == {"rocprof-json": len(d) - 1, "torch": 1}
