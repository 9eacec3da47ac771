"""A Kineto trace read slim (``read_torch_trace(path, columns=...)``, ``traces/torch_slim.py``):
the columns ``gemmperf analyze --no-report`` reduces equal the full table's, with the full
read's process, notes and errors, while what the reader keeps grows by a few dozen bytes a
dispatch instead of the full read's kilobyte (docs/performance.md, "Large traces")."""

from __future__ import annotations

import gzip
import importlib.util
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_DATA

from pytest_gemmperf.analysis.source_totals import WARMUP_READ_COLUMNS, reduce_sources
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.fileio import BLOCK_BYTES
from pytest_gemmperf.traces.torch_meta import process_pid
from pytest_gemmperf.traces.torch_slim import SLIM_COLUMNS, PidCounts, most_frequent_pid
from pytest_gemmperf.traces.torch_trace import read_torch_trace

REPO = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures"
SHARED = SHARED_DATA


def _bench():
    spec = importlib.util.spec_from_file_location("bounded_memory", REPO / "benchmarks" / "bounded_memory.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kineto(tmp_path: Path, events: list[dict], name: str = "t.pt.trace.json", **top) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"schemaVersion": 1, **top, "traceEvents": events}))
    return p


def _x(cat: str, name: str, ts: str | float, dur: str | float, pid=1, tid=1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def _edge_cases(tmp_path: Path) -> list[Path]:
    """Traces whose slim read has something to get right: streams missing or shared between
    devices, kernels on one stream overlapping, memcpy/memset beside kernels in both category
    spellings, two runtime calls per correlation id with other pids, runtime calls without an id,
    sub-ns digits, a tie between pids, more events than one run of the stream decoder holds."""
    t0 = 1_700_000_000_000_000.125
    ev = [
        _x("cpu_op", "aten::mm", t0, 50, pid=7, External_id=1),
        _x("cuda_runtime", "cudaLaunchKernel", t0 + 1, 2, pid=9, correlation=11),
        _x("cuda_runtime", "cudaLaunchKernel", t0 + 1.5, 2, pid=9, correlation=12),
        _x("cuda_runtime", "hipArray3DCreate", t0 + 1.7, 2, pid=9, correlation=12),
        _x("cuda_runtime", "cudaMemsetAsync", t0 + 1.8, 2, pid=8, correlation=12, grid=[1, 1, 1]),
        _x("cuda_driver", "cuLaunchKernel", t0 + 2, 2, pid=7),
        _x("user_annotation", "ProfilerStep#3", t0, 100, pid=8),
        _x("kernel", "gemm_b", t0 + 10, 5.0005, pid=0, tid=7, device=0, stream=7, correlation=11),
        _x("kernel", "gemm_a", t0 + 12, 5, pid=0, tid=7, device=0, stream=7, correlation=12),
        _x("Kernel", "gemm_a", t0 + 11, 1, pid=1, tid=7, device=1, stream=7),
        _x("gpu_memcpy", "Memcpy HtoD (Host -> Device)", t0 + 3, 1, pid=0, tid=2, device=0),
        _x("Memset", "Memset (Device)", t0 + 3, 0, pid="GPU 0", tid="stream 2"),
        _x("kernel", "gemm_a", t0 + 3.5, 1, pid=0, tid="lane", device=0),
        _x("kernel", "", t0 + 4, 1, pid=0, tid=3, device=0, stream=3),
    ]
    for e in ev:  # "External id" is the key Kineto writes
        if "External_id" in e["args"]:
            e["args"]["External id"] = e["args"].pop("External_id")
    paths = [_kineto(tmp_path, ev, "edges.pt.trace.json", distributedInfo={"rank": 2})]
    tie = [_x("cpu_op", "aten::add", 10, 1, pid=5), _x("cpu_op", "aten::add", 12, 1, pid=4),
           _x("user_annotation", "x", 10, 1, pid=4), _x("Operator", "aten::add", 13, 1, pid=5),
           _x("kernel", "k", 20, 1, pid=0, tid=1, device=0, stream=1)]
    paths.append(_kineto(tmp_path, tie, "tie.pt.trace.json"))
    # more than one 4 MiB block of events: several runs, names and lanes numbered across them
    many = []
    for i in range(14_000):
        many.append(_x("cpu_op", f"aten::op{i % 7}", 1000 + 10 * i, 5, pid=3 + (i % 5 == 0),
                       **{"External id": i, "Input Dims": [[i % 13, 4]]}))
        many.append(_x("cuda_runtime", "hipLaunchKernel", 1001 + 10 * i, 1, pid=3, correlation=i))
        many.append(_x(["kernel", "gpu_memset", "Kernel"][i % 3], f"k{(i * 7919) % 97}",
                       2000 + 10 * i - (i % 11) * 30, (i * 37) % 23, pid=0, tid=i % 4,
                       device=i % 2, stream=(i % 4) if i % 9 else None, correlation=i,
                       grid=[i % 5 + 1, 1, 1], block=[64, 1, 1]))
    paths.append(_kineto(tmp_path, many, "many.pt.trace.json",
                         deviceProperties=[{"id": 0, "name": "NVIDIA H200", "computeMajor": 9}]))
    assert paths[-1].stat().st_size > 1.2 * BLOCK_BYTES  # runs of events in more than one block
    gz = tmp_path / "many.pt.trace.json.gz"
    gz.write_bytes(gzip.compress(paths[-1].read_bytes(), 1))
    paths.append(gz)
    return paths


def _traces(tmp_path: Path) -> list[Path]:
    shared = [SHARED / "aorta" / "smci350-zts-gtu-c6-25_200691.1758927066581847260.pt.trace.json",
              SHARED / "tracelens" / "traces" / "mi210" / "gpu_only_trace" / "gpu_only_trace.json.gz"]
    return sorted((FIX / "torch").glob("*.json*")) + [p for p in shared if p.exists()] + _edge_cases(tmp_path)


def test_slim_read_equals_the_full_tables_columns(tmp_path):
    """Values, dtypes, categories (and their order), row order, host process, agents and notes:
    for every fixture, the shared real traces and traces made to hit the corner cases."""
    for p in _traces(tmp_path):
        full = read_torch_trace(p)
        slim = read_torch_trace(p, columns=SLIM_COLUMNS)
        assert list(slim.dispatches.columns) == list(SLIM_COLUMNS)
        pd.testing.assert_frame_equal(slim.dispatches, full.dispatches[list(SLIM_COLUMNS)],
                                      check_exact=True, obj=str(p))
        pd.testing.assert_frame_equal(slim.agents, full.agents, obj=str(p))
        assert "cpu_ops" not in slim.meta and "steps" not in slim.meta
        assert {k: v for k, v in full.meta.items() if k in slim.meta} == slim.meta, p
        some = ["kernel", "dur_ns", "pid"]
        pd.testing.assert_frame_equal(read_torch_trace(p, columns=some).dispatches, full.dispatches[some])


def test_columns_beyond_the_slim_ones_are_the_full_tables(tmp_path):
    p = FIX / "torch" / "rocm_sdk_rank3.pt.trace.json"
    full = read_torch_trace(p)
    cols = ["kernel", "op_name", "grid_x"]
    got = read_torch_trace(p, columns=cols)
    pd.testing.assert_frame_equal(got.dispatches, full.dispatches[cols])
    assert "cpu_ops" in got.meta


def test_a_grid_beyond_int64_is_the_same_error(tmp_path):
    """The first overflowing dispatch in the table's order (category, then file order) is named,
    whichever run of events it was in; rocprofiler-sdk traces hold no such product."""
    big = [2 ** 32 - 1, 1, 1]
    ev = [_x("kernel", "k", 10, 1, pid=0, device=0, stream=1, grid=[1, 1, 1], block=[1, 1, 1]),
          _x("kernel", "k1", 11, 1, pid=0, device=0, stream=1, grid=big, block=big),
          _x("gpu_memcpy", "m", 9, 1, pid=0, device=0, stream=1, grid=big, block=big)]
    p = _kineto(tmp_path, ev)
    with pytest.raises(GemmperfInputError) as full:
        read_torch_trace(p)
    with pytest.raises(GemmperfInputError) as slim:
        read_torch_trace(p, columns=SLIM_COLUMNS)
    assert str(slim.value) == str(full.value) and "traceEvents[2]" in str(full.value)
    sdk = _kineto(tmp_path, ev, "sdk.pt.trace.json", **{"rocprofiler-sdk_version": "1.0"})
    assert len(read_torch_trace(sdk, columns=SLIM_COLUMNS).dispatches) == 3


pids = st.lists(st.one_of(st.none(), st.integers(0, 4), st.integers(2 ** 62, 2 ** 62 + 1)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(pids, st.lists(st.integers(0, 3), max_size=30)), min_size=1, max_size=4),
       pids)
def test_pid_counts_pick_the_pid_process_pid_picks(runs, other):
    """Counted run by run, category ranks interleaved, the most frequent pid and the tie-break
    (first in the whole-file order) are ``process_pid``'s on the columns."""
    counts, frames = PidCounts(), []
    for values, ranks in runs:
        ranks = (ranks * (len(values) + 1))[:len(values)] if ranks else [0] * len(values)
        col = pd.Series(pd.array(values, dtype="Int64"))
        counts.add(col, np.array(ranks, dtype=np.int64))
        frames.append(pd.DataFrame({"pid": col, "_rank": ranks}))
    whole = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({"pid": []})
    whole = whole.iloc[np.argsort(whole["_rank"].to_numpy(), kind="stable")]
    tail = PidCounts()
    tail.add(pd.Series(pd.array(other, dtype="Int64")))
    assert most_frequent_pid([counts, tail]) == process_pid(
        whole["pid"].astype("Int64"), pd.Series(pd.array(other, dtype="Int64")))


def _retained_bytes(path: Path) -> int:
    """Peak bytes Python and numpy allocate while the dispatches of ``path`` are read and
    reduced as ``gemmperf analyze --no-report --jobs 1`` does (tracemalloc)."""
    tracemalloc.start()
    try:
        got = reduce_sources([path], jobs=1)
        assert got is not None and len(got.rows) > 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow  # writes and reads two traces of 20 and 80 MB
def test_analyze_no_report_memory_grows_a_few_bytes_a_dispatch(tmp_path):
    """From a trace to one four times its size the reduction's peak grows by the dispatches'
    few columns (here under 100 bytes a dispatch), not by their CPU side, flows and argument
    dictionaries (the full read: about 1 KB a dispatch)."""
    bench = _bench()
    small, large = tmp_path / "s.pt.trace.json", tmp_path / "l.pt.trace.json"
    n = 12_000
    bench.write_trace(small, n)
    bench.write_trace(large, 4 * n)
    grow = (_retained_bytes(large) - _retained_bytes(small)) / (3 * n)
    assert grow < 100, f"{grow:.0f} bytes a dispatch"


def test_the_reduction_reads_the_columns_a_slim_read_makes():
    assert set(WARMUP_READ_COLUMNS) <= set(SLIM_COLUMNS)


def test_runs_without_collective_metadata_hold_no_collective_columns(tmp_path):
    """A run of events without collective metadata keeps no all-None collective columns (72
    bytes an event while the runs are held); the table has them, all None, as before."""
    from pytest_gemmperf.traces.torch_frames import COLL_COLUMNS, _cpu_ops_frame, _gpu_frame, _Src
    from pytest_gemmperf.traces.torch_decode import _EVENTS

    p = FIX / "torch" / "rocm_sdk_rank3.pt.trace.json"
    events = json.loads(p.read_text())["traceEvents"]
    for cats, frame in ((("kernel",), _gpu_frame), (("cpu_op",), _cpu_ops_frame)):
        picked = [e for e in events if e.get("ph") == "X" and e.get("cat") in cats
                  and "Collective name" not in e.get("args", {}) and e.get("name") != "record_param_comms"]
        got = frame(_EVENTS.decode(json.dumps(picked).encode()), _Src(str(p), []))
        assert len(got) and not set(COLL_COLUMNS) & set(got.columns)
    d = read_torch_trace(p).dispatches
    assert set(COLL_COLUMNS) <= set(d.columns)
