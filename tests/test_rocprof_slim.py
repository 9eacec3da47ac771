"""A rocprofv3 JSON read slim (``read_rocprof_json(path, columns=...)``, ``traces/rocprof_slim.py``):
the columns ``gemmperf analyze --no-report`` reduces equal the full table's, with the full read's
counters, agents, meta and errors, while what the reader keeps grows by a few bytes a dispatch
instead of the full read's 17 int64 fields and 40-column table."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import SHARED_DATA

from pytest_gemmperf.analysis.source_totals import READ_COLUMNS
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.coded import CodedDispatches
from pytest_gemmperf.traces import fileio
from pytest_gemmperf.traces.fileio import BLOCK_BYTES
from pytest_gemmperf.traces.rocprof_json import read_rocprof_json
from pytest_gemmperf.traces.rocprof_slim import SLIM_COLUMNS
from test_torch_slim import _bench, _retained_bytes

REPO = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures" / "rocprof_json"
V7 = FIX / "v7_two_processes_counters_results.json"
V62 = FIX / "v62_results.json"
SHARED = SHARED_DATA / "rocprofv3" / "AMD-AGI_TraceLens"
TOOL = "rocprofiler-sdk-tool"


def _write(tmp_path: Path, doc, name: str) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def _records(doc: dict, p: int) -> list[dict]:
    return doc[TOOL][p]["buffer_records"]["kernel_dispatch"]


def _edge_cases(tmp_path: Path) -> list[Path]:
    """Files whose slim read has something to get right: two processes of one pid (their lanes
    shared), records without a queue (the stream orders them) or without either, a dispatch on
    an agent without a gpu index, overlapping dispatches on one queue, more records than one run
    of the stream decoder holds, gzip."""
    v7 = json.loads(V7.read_text())
    same_pid = copy.deepcopy(v7)
    same_pid[TOOL][1]["metadata"]["pid"] = same_pid[TOOL][0]["metadata"]["pid"]
    lanes = copy.deepcopy(v7)
    recs = _records(lanes, 0)
    recs[0]["dispatch_info"].pop("queue_id")
    recs[1]["dispatch_info"].pop("queue_id")
    recs[1].pop("stream_id", None)
    recs[2]["start_timestamp"] = recs[1]["start_timestamp"]  # overlaps on its queue
    recs[2]["end_timestamp"] = recs[1]["end_timestamp"] + 10
    cpu = next(a for a in lanes[TOOL][0]["agents"] if a["type"] == 1)
    recs[-1]["dispatch_info"]["agent_id"] = {"handle": cpu["id"]["handle"]}
    paths = [_write(tmp_path, same_pid, "pid_results.json"), _write(tmp_path, lanes, "lanes_results.json")]
    many = tmp_path / "many_results.json"
    _bench().write_rocprof_json(many, 9_000)
    assert many.stat().st_size > 1.2 * BLOCK_BYTES  # runs of records in more than one block
    gz = tmp_path / "many_results.json.gz"
    gz.write_bytes(gzip.compress(many.read_bytes(), 1))
    return paths + [many, gz]


def _files(tmp_path: Path) -> list[Path]:
    shared = [SHARED / "908_results.TRIMMED_DERIVED.json",
              SHARED_DATA / "tracelens" / "908_results.json.gz"]
    return [V7, V62] + [p for p in shared if p.exists()] + _edge_cases(tmp_path)


def test_slim_read_equals_the_full_tables_columns(tmp_path):
    """Values, dtypes, categories (and their order), row order; counters, agents and meta."""
    for p in _files(tmp_path):
        full = read_rocprof_json(p)
        slim = read_rocprof_json(p, columns=SLIM_COLUMNS)
        assert list(slim.dispatches.columns) == list(SLIM_COLUMNS)
        pd.testing.assert_frame_equal(slim.dispatches, full.dispatches[list(SLIM_COLUMNS)],
                                      check_exact=True, obj=str(p))
        pd.testing.assert_frame_equal(slim.counters, full.counters, obj=str(p))
        pd.testing.assert_frame_equal(slim.agents, full.agents, obj=str(p))
        assert slim.meta == full.meta, p
        coded = read_rocprof_json(p, columns=READ_COLUMNS, coded=True).dispatches
        assert isinstance(coded, CodedDispatches)
        pd.testing.assert_frame_equal(coded.frame(), full.dispatches[list(READ_COLUMNS)], check_exact=True)
        some = ["kernel", "dur_ns", "grid_x"]  # not slim: the full read, cut
        pd.testing.assert_frame_equal(read_rocprof_json(p, columns=some).dispatches, full.dispatches[some])


def _unknown_kernel(d):
    _records(d, 1).clear()
    _records(d, 0)[2]["dispatch_info"]["kernel_id"] = 999
    _records(d, 0)[3]["dispatch_info"]["kernel_id"] = 999


def _unknown_agent(d):
    _records(d, 1)[1]["dispatch_info"]["agent_id"]["handle"] = 5


def _ends_first(d):
    for p, i in ((1, 2), (1, 0), (0, 3)):
        r = _records(d, p)[i]
        r["end_timestamp"] = r["start_timestamp"] - 1 - i


def _ends_first_no_id(d):
    _ends_first(d)
    _records(d, 0)[3]["dispatch_info"].pop("dispatch_id")


def _no_dispatches(d):
    for p in d[TOOL]:
        p["buffer_records"]["kernel_dispatch"] = []


@pytest.mark.parametrize("mutate", [_unknown_kernel, _unknown_agent, _ends_first, _ends_first_no_id,
                                    _no_dispatches])
def test_errors_are_the_full_reads(tmp_path, mutate):
    """The same line (message, record) for a kernel id or agent the process does not list (the
    first record, and how many), and for dispatches that end before they start (the first in
    the table's order across processes, and how many); the same table without dispatches."""
    doc = json.loads(V7.read_text())
    mutate(doc)
    p = _write(tmp_path, doc, "bad_results.json")
    try:
        full = read_rocprof_json(p)
    except GemmperfInputError as exc:
        with pytest.raises(GemmperfInputError) as slim:
            read_rocprof_json(p, columns=SLIM_COLUMNS)
        assert (slim.value.message, slim.value.record) == (exc.message, exc.record)
        return
    assert mutate is _no_dispatches and len(full.dispatches) == 0
    slim = read_rocprof_json(p, columns=SLIM_COLUMNS)
    pd.testing.assert_frame_equal(slim.dispatches, full.dispatches[list(SLIM_COLUMNS)])
    pd.testing.assert_frame_equal(slim.counters, full.counters)


@pytest.mark.slow  # writes and reads two files of 7 and 28 MB
def test_analyze_no_report_memory_grows_a_few_bytes_a_dispatch(tmp_path, monkeypatch):
    """From a file to one four times its size the reduction's peak grows by the records' few
    compact columns (here 14-23 bytes a dispatch; the full read's 136 bytes of fields a record,
    then its table: about 380).
    Blocks of 512 KiB make both files many runs, so that the peak of one run's work, which
    does not grow with the file, is not mistaken for growth."""
    monkeypatch.setattr(fileio, "BLOCK_BYTES", 1 << 19)
    bench = _bench()
    small, large = tmp_path / "s_results.json", tmp_path / "l_results.json"
    n = 12_000
    bench.write_rocprof_json(small, n)
    bench.write_rocprof_json(large, 4 * n)
    grow = (_retained_bytes(large) - _retained_bytes(small)) / (3 * n)
    assert grow < 60, f"{grow:.0f} bytes a dispatch"
