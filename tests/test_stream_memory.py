"""How a streamed JSON read treats memory between runs of elements: one reused buffer for the
runs' text, never overwritten while a decoded value still views it, and the heap trimmed only
once the resident set grew (the pages the next run refills stay mapped)."""

from __future__ import annotations

import json
from collections import Counter

import msgspec
import numpy as np
import pytest

from pytest_gemmperf.analysis.source_totals import READ_COLUMNS
from pytest_gemmperf.traces import fileio, jsonstream, rocprof_json
from pytest_gemmperf.traces.jsonstream import FreeMemory, JsonSplitter
from pytest_gemmperf.traces.rocprof_json import read_rocprof_json
from pytest_gemmperf.traces.torch_decode import _Event, bucket_events
from pytest_gemmperf.traces.torch_trace import HOST_CATS, _NOT_ACTIVITY, read_torch_trace
from test_gate_slim_samples import write_rocprof_json

_ANY = msgspec.json.Decoder(list).decode


class _Timed(msgspec.Struct):
    name: str = ""
    ts: msgspec.Raw = msgspec.Raw(b"")


_TIMED = msgspec.json.Decoder(list[_Timed]).decode


def _blocks(data: bytes, n: int):
    for i in range(0, len(data), n):
        yield data[i:i + n]


def _doc(n: int) -> tuple[bytes, list[str]]:
    """A Kineto-like document of ``n`` events, and each event's ``ts`` as written (epoch-scale
    µs with 3 decimals: no float holds them)."""
    ts = [f"{1700000000000000 + i}.{i % 1000:03d}" for i in range(n)]
    events = ",\n  ".join(f'{{"ph": "X", "cat": "kernel", "name": "k{i % 7}", "ts": {t}}}'
                          for i, t in enumerate(ts))
    return f'{{"schemaVersion": 1, "traceEvents": [\n  {events}\n], "traceName": "t"}}'.encode(), ts


def _pieces(data: bytes, block: int, decode=_ANY):
    sp = JsonSplitter(_blocks(data, block), lambda p: decode if p == ("traceEvents",) else None, 1)
    return sp, sp.pieces()


def test_the_runs_text_is_written_into_one_reused_buffer():
    data, _ = _doc(3000)
    _, pieces = _pieces(data, 4096)
    buffers, items = [], []
    for piece in pieces:
        assert msgspec.json.decode(piece.data) == piece.items  # what was decoded, while in hand
        buffers.append(piece.data)
        items += piece.items
        del piece
    assert items == json.loads(data)["traceEvents"]
    assert len(buffers) > 20
    # every run but the first (cut from the frame's block) and the last (cut at the array's
    # end) is written into one buffer: no new object a run
    assert len({id(b) for b in buffers[1:-1]}) == 1


def test_a_buffer_a_decoded_value_still_views_is_never_overwritten():
    data, expected = _doc(3000)
    _, pieces = _pieces(data, 4096, _TIMED)
    kept = []  # every run's events kept: each msgspec.Raw views the text it was decoded from
    for piece in pieces:
        kept += piece.items
        del piece
    assert len(kept) == 3000
    assert [bytes(e.ts).decode() for e in kept] == expected
    assert [e.name for e in kept] == [f"k{i % 7}" for i in range(3000)]


def test_only_the_first_runs_values_kept_stay_intact_while_the_rest_reuse_a_buffer():
    data, expected = _doc(3000)
    _, pieces = _pieces(data, 4096, _TIMED)
    first = second = None
    later = []
    for piece in pieces:
        if first is None:
            first = piece.items
        elif second is None:
            second = piece.items  # holds the reused buffer: the next run takes a new one
        else:
            later.append((piece.first, [bytes(e.ts).decode() for e in piece.items], id(piece.data)))
        del piece  # as the readers do: the run's events go before the next run is read
    assert [bytes(e.ts).decode() for e in first] == expected[:len(first)]
    assert [bytes(e.ts).decode() for e in second] == expected[len(first):len(first) + len(second)]
    for at, values, _ in later:
        assert values == expected[at:at + len(values)]
    assert len({buf for _, _, buf in later[:-1]}) == 1  # the last: cut at the array's end


class _Heap:
    """A resident set that moves as told, and a trim that counts."""

    def __init__(self, sizes):
        self.sizes = iter(sizes)
        self.trims = 0

    def resident(self):
        return next(self.sizes)

    def trim(self):
        self.trims += 1


def test_the_heap_is_trimmed_only_once_the_resident_set_grew_past_the_slack():
    mib = 1 << 20
    # first run 100 MiB (the reference), steady, then growing past 4 MiB
    heap = _Heap([100 * mib, 100 * mib, 102 * mib, 104 * mib, 104 * mib + 1, 90 * mib, 93 * mib, 94 * mib])
    free = FreeMemory(slack=4 * mib, trim=heap.trim, resident=heap.resident)
    trims = []
    for _ in range(8):
        free.after_run()
        trims.append(heap.trims)
    # trimmed at the fifth run (grew 4 MiB + 1 byte), the sixth run is the new reference
    assert trims == [0, 0, 0, 0, 1, 1, 1, 1]
    free.finish()
    assert heap.trims == 2


def test_without_a_readable_resident_set_every_run_trims():
    heap = _Heap([None] * 5)
    free = FreeMemory(trim=heap.trim, resident=heap.resident)
    for _ in range(5):
        free.after_run()
    assert heap.trims == 5


def test_resident_bytes_reads_this_process():
    now = jsonstream.resident_bytes()
    assert now is None or now > 1 << 20


def _kineto(n: int) -> dict:
    events = []
    for i in range(n):
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                       "ts": 1700000000000000.5 + 10 * i, "dur": 5.25, "args": {"External id": i}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": 1700000000000001.5 + 10 * i, "dur": 1,
                       "args": {"External id": i, "correlation": i}})
        events.append({"ph": "X", "cat": "kernel", "name": f"gemm{i % 5}", "pid": 0, "tid": 7,
                       "ts": 1700000000000003.125 + 10 * i, "dur": 2.5,
                       "args": {"device": 0, "stream": 7, "correlation": i}})
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}


def _count_runs(monkeypatch) -> list:
    """A list that gets an item for every run of elements a JSON splitter hands out."""
    runs: list = []
    real = jsonstream.JsonSplitter.pieces

    def counted(self):
        for piece in real(self):
            runs.append(1)
            yield piece
    monkeypatch.setattr(jsonstream.JsonSplitter, "pieces", counted)
    return runs


@pytest.mark.parametrize("columns", [None, READ_COLUMNS], ids=["full", "slim"])
def test_a_kineto_read_trims_once_its_runs_leave_the_resident_set_flat(tmp_path, monkeypatch, columns):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_kineto(600)))
    whole = read_torch_trace(p, columns=columns)
    trims = []
    monkeypatch.setattr(jsonstream, "release_free_memory", lambda: trims.append(1))
    monkeypatch.setattr(jsonstream, "resident_bytes", lambda: 200 << 20)
    monkeypatch.setattr(fileio, "BLOCK_BYTES", 4096)
    again = read_torch_trace(p, columns=columns)
    assert again.dispatches.equals(whole.dispatches)
    assert len(trims) == 1  # at the stream's end only, though it was read in dozens of runs


def test_a_kineto_read_trims_as_its_resident_set_grows(tmp_path, monkeypatch):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_kineto(600)))
    trims = []
    sizes = iter(range(0, 10 ** 12, 3 << 19))  # 1.5 MiB more every run
    monkeypatch.setattr(jsonstream, "release_free_memory", lambda: trims.append(1))
    monkeypatch.setattr(jsonstream, "resident_bytes", lambda: next(sizes))
    monkeypatch.setattr(fileio, "BLOCK_BYTES", 4096)
    runs = _count_runs(monkeypatch)
    read_torch_trace(p, columns=READ_COLUMNS)
    assert len(runs) > 20
    assert len(trims) == len(runs) // 3 + 1  # every third run (reference, +1.5, +3 > 2 MiB), and the end


def test_activity_is_counted_only_when_asked():
    events = [_Event(ph="X", cat="kernel", name="k"), _Event(ph="X", cat="cuda_profiler_range", name="r"),
              _Event(ph="s", cat="ac2g", name="f"), _Event(ph="X", cat="cpu_op", name="aten::mm")]
    buckets, counted = bucket_events(events, HOST_CATS, _NOT_ACTIVITY)
    assert counted == Counter({"kernel": 1, "cuda_profiler_range": 1})
    same, none = bucket_events(events, HOST_CATS, _NOT_ACTIVITY, count=False)
    assert same == buckets and none == Counter()


@pytest.mark.parametrize("columns", [None, READ_COLUMNS], ids=["full", "slim"])
def test_a_rocprof_json_read_trims_once_its_runs_leave_the_resident_set_flat(tmp_path, monkeypatch, columns):
    """The rocprofv3 JSON reader keeps the pages its runs reuse as the Kineto reader does: read
    in dozens of runs with a flat resident set, it trims at the stream's end only."""
    p = write_rocprof_json(tmp_path / "a_results.json", np.random.default_rng(3), [1001, 1002], 400)
    whole = read_rocprof_json(p, columns=columns)
    trims = []
    runs = _count_runs(monkeypatch)
    monkeypatch.setattr(jsonstream, "release_free_memory", lambda: trims.append(1))
    monkeypatch.setattr(rocprof_json, "release_free_memory", lambda: trims.append(1), raising=False)
    monkeypatch.setattr(jsonstream, "resident_bytes", lambda: 200 << 20)
    monkeypatch.setattr(fileio, "BLOCK_BYTES", 4096)
    again = read_rocprof_json(p, columns=columns)
    assert again.dispatches.equals(whole.dispatches)
    assert len(runs) > 20 and len(trims) == 1, (len(runs), len(trims))
