"""PyTorch profiler (Kineto) reader: fixtures in the Kineto layout plus the real MI350X / MI210 traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES, shared_file
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.schema import DISPATCH_COLUMNS, validate_dispatches
from pytest_gemmperf.traces.torch_trace import (COLL_COLUMNS, innermost_enclosing,
                                                read_torch_trace)

ROCM = FIXTURES / "torch" / "rocm_sdk_rank3.pt.trace.json"
CUDA = FIXTURES / "torch" / "gpuhost-01_777.1700000001000000000.pt.trace.json.gz"
AORTA = "aorta/smci350-zts-gtu-c6-25_200691.1758927066581847260.pt.trace.json"
MI210 = "tracelens/traces/mi210/gpu_only_trace/gpu_only_trace.json.gz"


@pytest.fixture(scope="module")
def rocm():
    return read_torch_trace(ROCM)


def _row(df: pd.DataFrame, corr: int) -> pd.Series:
    rows = df[df["correlation_id"] == corr]
    assert len(rows) == 1
    return rows.iloc[0]


def test_rocm_dispatch_columns_and_values(rocm):
    d = rocm.dispatches
    validate_dispatches(d)
    assert tuple(d.columns[: len(DISPATCH_COLUMNS)]) == DISPATCH_COLUMNS
    assert list(d.columns[len(DISPATCH_COLUMNS):]) == ["op_name", "op_input_dims", "op_input_types",
                                                        *COLL_COLUMNS]
    assert len(d) == 8
    assert set(d["source"]) == {"torch"}
    assert set(d["pid"]) == {4242}  # the host process, not the GPU "pid" lane (2)
    assert set(d["rank"]) == {3}  # distributedInfo.rank
    assert d["host"].isna().all()  # no host_name, file name is not the handler pattern
    assert set(d["agent"]) == {2} and set(d["gpu_arch"]) == {"gfx942"}
    gemm = _row(d, 101)
    # ts 1100.1236 us -> 1100123.6 ns -> 1100124 (half-even, once, on the decimal text);
    # dur 20.4564 us -> 20456 ns; end = round(1100.1236 + 20.4564 us) = 1120580 ns
    assert gemm["start_ns"] == 1100124 and gemm["dur_ns"] == 20456
    assert gemm["end_ns"] == 1120580 and gemm["dur_ns"] == 1120580 - 1100124
    assert gemm["category"] == "gemm" and gemm["stream"] == 3 and gemm["thread_id"] == 4242
    # rocprofiler-sdk Kineto: args.grid [256] is the workgroup, args.block [32768] the grid
    assert (gemm["grid_x"], gemm["grid_y"], gemm["wg_x"], gemm["wg_y"]) == (32768, 1, 256, 1)


def test_memcpy_memset_keep_their_names(rocm):
    d = rocm.dispatches
    memset, memcpy = _row(d, 103), _row(d, 104)
    assert memset["kernel"] == memset["kernel_short"] == "Memset (Device)"
    assert memcpy["kernel_short"] == "Memcpy HtoD (Host -> Device)"
    assert memset["category"] == memcpy["category"] == "memory"
    assert pd.isna(memcpy["grid_x"])
    assert memcpy["thread_id"] == 4300  # launched from the worker thread


def test_gpu_kernels_linked_to_launching_cpu_op(rocm):
    d = rocm.dispatches
    addmm = _row(d, 101)  # runtime has no External id: innermost enclosing cpu_op
    assert addmm["op_name"] == "aten::addmm"
    assert addmm["op_input_dims"] == "[[256], [128, 64], [64, 256], [], []]"
    assert addmm["op_input_types"] == "['float', 'float', 'float', 'Scalar', 'Scalar']"
    mm = _row(d, 102)  # runtime External id 11
    assert mm["op_name"] == "aten::mm" and mm["op_input_dims"] == "[[512, 1024], [1024, 2048]]"
    # two runtime records share correlation 103 (ROCm Kineto quirk); the memset still links
    assert _row(d, 103)["op_name"] == "aten::zero_"
    assert _row(d, 104)["op_name"] == "aten::copy_"
    assert _row(d, 105)["op_name"] == "nccl:all_reduce"  # innermost, not record_param_comms
    lost = _row(d, 999)  # no runtime record: nothing to link, nothing guessed
    assert pd.isna(lost["op_name"]) and pd.isna(lost["thread_id"])


def test_external_id_beats_time_enclosure(tmp_path):
    doc = json.loads(ROCM.read_text())
    for e in doc["traceEvents"]:
        if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == 102:
            e["args"]["External id"] = 10  # claims aten::addmm although aten::mm encloses it
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    assert _row(read_torch_trace(f).dispatches, 102)["op_name"] == "aten::addmm"


def test_collective_metadata(rocm):
    d = rocm.dispatches
    from_cpu_op = _row(d, 105)  # kernel args lack it: taken from the enclosing record_param_comms
    assert from_cpu_op["coll_name"] == "allreduce" and from_cpu_op["pg_name"] == "0"
    assert from_cpu_op["pg_ranks"] == "[0, 1, 2, 3]" and from_cpu_op["group_size"] == 4
    assert from_cpu_op["coll_dtype"] == "Float"
    assert from_cpu_op["in_nelems"] == 1048576 and from_cpu_op["out_nelems"] == 1048576
    assert from_cpu_op["in_split"] == "[]" and from_cpu_op["out_split"] == "[]"
    own = _row(d, 112)  # kernel args win over the enclosing op's
    assert own["coll_name"] == "_allgather_base" and own["pg_name"] == "7"
    assert own["in_nelems"] == 65664 and own["out_nelems"] == 262656 and own["coll_dtype"] == "BFloat16"
    assert d.loc[d["category"] != "collective", "coll_name"].isna().all()
    assert str(d["group_size"].dtype) == "Int64"


def test_meta_steps_cpu_ops(rocm):
    m = rocm.meta
    assert m["base_time_ns"] == 1700000000000000000
    assert m["flavor"] == "rocprofiler-sdk" and "workgroup" in m["grid_semantics"]
    assert m["rank"] == 3 and m["distributed"]["world_size"] == 4
    steps = m["steps"]
    assert list(steps["name"]) == ["ProfilerStep#5", "ProfilerStep#6"]
    assert list(steps["step"]) == [5, 6]
    assert list(steps["end_ns"] - steps["start_ns"]) == [500000, 400250]
    ops = m["cpu_ops"]
    assert list(ops.columns) == ["name", "pid", "tid", "ts_ns", "dur_ns", "input_dims", "input_types",
                                 "external_id", "correlation"]
    mm = ops[ops["name"] == "aten::mm"].iloc[0]
    assert mm["ts_ns"] == 1070000 and mm["dur_ns"] == 30000 and mm["external_id"] == 11
    assert list(rocm.agents["gpu_index"]) == [0, 1, 2, 3]
    assert set(rocm.agents["product"]) == {"AMD Instinct MI300X"}


def test_cuda_gzip_trace():
    t = read_torch_trace(CUDA)
    d = t.dispatches
    assert t.meta["flavor"] == "cupti"
    assert set(d["host"]) == {"gpuhost-01"} and set(d["pid"]) == {777}  # handler file name
    assert d["rank"].isna().all()  # no distributedInfo: unknown, not 0
    g = _row(d, 50)
    # CUPTI grid is in blocks: 4x8x2 blocks of 128 threads
    assert (g["grid_x"], g["grid_y"], g["grid_z"]) == (512, 8, 2)
    assert (g["wg_x"], g["wg_y"], g["wg_z"]) == (128, 1, 1)
    assert g["start_ns"] == 5100000 and g["dur_ns"] == 12000  # integer microseconds
    assert g["op_name"] == "aten::bmm" and g["op_input_dims"] == "[[8, 64, 32], [8, 32, 16]]"
    assert g["gpu_arch"] == "sm_90" and g["category"] == "gemm"
    c = _row(d, 51)
    assert c["coll_name"] == "allreduce" and c["pg_ranks"] == "[0, 1]" and c["group_size"] == 2


def test_queue_overlap_is_per_stream(tmp_path):
    doc = json.loads(ROCM.read_text())
    # the NCCL kernel (stream 7, 1400-1650 us) overlaps GEMMs on stream 3: concurrency, no artefact
    d = read_torch_trace(ROCM).dispatches
    assert not d["queue_overlap"].any()
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["args"].get("correlation") == 111:
            e["ts"] = 1170.0  # starts before the GEMM at 1130 + 50 us ends, same stream
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    d = read_torch_trace(f).dispatches
    assert list(d.loc[d["queue_overlap"], "correlation_id"]) == [111]


# --------------------------------------------------------------------------- real traces

def test_real_mi350x_aorta_trace():
    t = read_torch_trace(shared_file(AORTA))
    d = t.dispatches
    assert len(d) == 20
    assert set(d["host"]) == {"smci350-zts-gtu-c6-25"} and set(d["pid"]) == {200691}
    assert d["rank"].isna().all()
    gemm = d[d["category"] == "gemm"]
    assert len(gemm) == 6 and set(gemm["op_name"]) == {"aten::mm"}
    # WG32_8_1 Tensile kernel: 256 work-items per workgroup, 65536 work-items in the grid
    assert set(gemm["wg_x"]) == {256} and set(gemm["grid_x"]) == {65536}
    first = _row(d, 44)
    assert first["start_ns"] == 7516230579364424 and first["dur_ns"] == 24599
    assert set(d["gpu_arch"]) == {"gfx950"}
    steps = t.meta["steps"]
    assert list(steps["name"]) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert list(steps["end_ns"] - steps["start_ns"]) == [533506, 303962]
    assert t.meta["base_time_ns"] == 1751410836000000000
    assert len(t.meta["cpu_ops"]) == 84
    assert d["op_name"].notna().all()


def test_real_mi210_gpu_only_trace():
    t = read_torch_trace(shared_file(MI210))
    d = t.dispatches
    assert len(d) == 562 and d["kernel"].nunique() == 45
    assert t.meta["flavor"] == "roctracer" and len(t.meta["cpu_ops"]) == 0
    assert d["op_name"].isna().all() and set(d["stream"]) == {0}
    assert set(d["gpu_arch"]) == {"gfx90a"}
    # roctracer: hipExtModuleLaunchKernel passes work-items, hipLaunchKernel passes blocks
    ext = _row(d, 2)  # SubTensorOpWithScalar1d, grid [65536], block [256]
    assert (ext["grid_x"], ext["wg_x"]) == (65536, 256)
    launch = _row(d, 7)  # vectorized_elementwise_kernel via hipLaunchKernel, grid [1], block [256]
    assert (launch["grid_x"], launch["wg_x"]) == (256, 256)
    assert (d["category"] == "gemm").sum() > 0


# --------------------------------------------------------------------------- bad input

def _one_line_error(path: Path) -> str:
    with pytest.raises(GemmperfInputError) as ei:
        read_torch_trace(path)
    msg = str(ei.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_truncated_json(tmp_path):
    f = tmp_path / "cut.pt.trace.json"
    f.write_bytes(ROCM.read_bytes()[:3000])
    assert "not valid JSON" in _one_line_error(f)


def test_truncated_and_corrupt_gzip(tmp_path):
    raw = CUDA.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    assert "gzip" in _one_line_error(cut)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b" + b"\x00garbage" * 10)
    assert "gzip" in _one_line_error(bad)


def test_rocprofv3_json_is_rejected(tmp_path):
    f = tmp_path / "908_results.json"
    f.write_text(json.dumps({"rocprofiler-sdk-tool": [{"metadata": {"pid": 908}}]}))
    assert "rocprofv3" in _one_line_error(f)


def test_cpu_only_trace_is_rejected(tmp_path):
    doc = json.loads(ROCM.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    f = tmp_path / "cpu.json"
    f.write_text(json.dumps(doc))
    assert "no GPU kernel" in _one_line_error(f)


@pytest.mark.parametrize("content", [b"", b"42", b'{"foo": 1}', b'{"traceEvents": 5}'])
def test_not_a_trace(tmp_path, content):
    f = tmp_path / "x.json"
    f.write_bytes(content)
    _one_line_error(f)


def test_missing_file(tmp_path):
    assert "cannot read" in _one_line_error(tmp_path / "absent.json")


def test_gzip_detected_by_content_not_name(tmp_path):
    f = tmp_path / "trace.json"  # gzip bytes under a plain name
    f.write_bytes(CUDA.read_bytes())
    assert len(read_torch_trace(f).dispatches) == 2
    g = tmp_path / "plain.json.gz"  # plain JSON under a .gz name
    g.write_bytes(gzip.decompress(CUDA.read_bytes()))
    assert len(read_torch_trace(g).dispatches) == 2


# --------------------------------------------------------------------------- enclosure algebra

def test_innermost_enclosing_matches_brute_force():
    rng = np.random.default_rng(7)
    ops: list[tuple[int, int, int]] = []

    def nest(g: int, t0: int, t1: int, depth: int) -> None:
        t = t0
        while depth < 5:
            s = t + int(rng.integers(0, 4))
            e = s + int(rng.integers(1, 50))
            if e > t1:
                return
            ops.append((g, s, e))
            nest(g, s, e, depth + 1)
            t = e + int(rng.integers(0, 3))

    for g in range(3):
        nest(g, 0, 1500, 0)
    a = np.array(ops)
    pg = rng.integers(0, 4, 2000)
    pt = rng.integers(0, 1500, 2000)
    got = innermost_enclosing(a[:, 0], a[:, 1], a[:, 2], pg, pt)
    for i in range(len(pt)):
        inside = np.flatnonzero((a[:, 0] == pg[i]) & (a[:, 1] <= pt[i]) & (pt[i] < a[:, 2]))
        if len(inside) == 0:
            assert got[i] == -1
            continue
        assert got[i] >= 0
        best = inside[np.lexsort((a[inside, 2] - a[inside, 1], -a[inside, 1]))[0]]
        assert (a[got[i], 1], a[got[i], 2]) == (a[best, 1], a[best, 2])


# ----------------------------------------------------------------------------- exact time

def _epoch_trace(n: int, seed: int = 7) -> tuple[dict, list[tuple[str, str]]]:
    """``n`` kernels at Unix-epoch magnitude (ts ~ 1.7e15 us, 3 decimals, as Kineto writes).

    Kernel k is launched by a runtime call with no External id, placed 1 ns before the end of
    cpu_op ``op{k}``; the next op starts 1 ns after that end. Linking by time containment
    therefore needs 1 ns resolution at ~1.7e18 ns, where float64 only has 256 ns steps.
    """
    rng = np.random.default_rng(seed)
    t = 1_700_000_000_000_000_000 + int(rng.integers(0, 10 ** 9))  # ns
    events, texts = [], []

    def us(ns: int) -> str:
        return f"{ns // 1000}.{ns % 1000:03d}"

    for k in range(n):
        op_start, op_dur = t, 2000 + int(rng.integers(0, 1000))
        rt_ts = op_start + op_dur - 1  # inside op k by 1 ns
        k_start = rt_ts + 3000 + int(rng.integers(0, 1000))
        k_dur = int(rng.integers(1, 5000))
        texts.append((us(k_start), us(k_dur)))
        events += [
            {"ph": "X", "cat": "cpu_op", "name": f"op{k}", "pid": 11, "tid": 11,
             "ts": "@" + us(op_start), "dur": "@" + us(op_dur)},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 11,
             "ts": "@" + us(rt_ts), "dur": "@0.500", "args": {"correlation": k + 1}},
            {"ph": "X", "cat": "kernel", "name": f"kern{k % 7}", "pid": 0, "tid": 7,
             "ts": "@" + texts[-1][0], "dur": "@" + texts[-1][1],
             "args": {"device": 0, "stream": 7, "correlation": k + 1, "grid": [4, 1, 1],
                      "block": [64, 1, 1]}},
        ]
        t = op_start + op_dur + 1  # the next op opens 1 ns after this one closed
    doc = {"schemaVersion": 1, "traceEvents": events, "cuda_runtime_version": 12040}
    return doc, texts


def _dump_numbers(doc: dict) -> bytes:
    """json.dumps, then the "@<decimal>" strings become bare JSON numbers (exact text)."""
    import re
    return re.sub(r'"@(-?[0-9.]+)"', r"\1", json.dumps(doc)).encode()


@pytest.mark.filterwarnings("error")
def test_epoch_magnitude_times_are_exact(tmp_path):
    from decimal import Decimal
    doc, texts = _epoch_trace(3000)
    p = tmp_path / "epoch.pt.trace.json"
    p.write_bytes(_dump_numbers(doc))
    t = read_torch_trace(p)
    d = t.dispatches.sort_values("correlation_id").reset_index(drop=True)
    assert len(d) == len(texts)
    want_start = [int(Decimal(ts) * 1000) for ts, _ in texts]
    want_end = [int((Decimal(ts) + Decimal(dur)) * 1000) for ts, dur in texts]
    assert d["start_ns"].tolist() == want_start
    assert d["end_ns"].tolist() == want_end
    # every duration is the exact decimal difference (float64 would give 256 ns steps here)
    assert d["dur_ns"].tolist() == [int(Decimal(dur) * 1000) for _, dur in texts]
    assert (d["start_ns"] > 2 ** 53).all()
    # linkage by containment at 1 ns resolution: kernel k belongs to op k, never its neighbour
    assert d["op_name"].tolist() == [f"op{k}" for k in range(len(texts))]
    assert t.meta["subns_rounded"] == 0
    ops = t.meta["cpu_ops"]
    gaps = ops["ts_ns"].to_numpy()[1:] - (ops["ts_ns"] + ops["dur_ns"]).to_numpy()[:-1]
    assert (gaps == 1).all()  # ops 1 ns apart, as written


@pytest.mark.filterwarnings("error")
def test_epoch_ids_beyond_2p53_link_exactly(tmp_path):
    """Correlation ids above 2**53 differ in their last digits; in float64 they would be one
    value (spacing 256 at 2**60) and every kernel would find the same runtime call."""
    doc, _ = _epoch_trace(6)
    base = 2 ** 60
    for e in doc["traceEvents"]:
        k = int(e["name"][2:]) if e["name"].startswith("op") else None
        if "correlation" in e.get("args", {}):
            e["args"]["correlation"] += base
            k = e["args"]["correlation"] - base - 1
        if e["cat"] in ("cpu_op", "cuda_runtime"):
            e["tid"] = 100 + k  # each launch on its own thread: thread_id names the runtime call
    p = tmp_path / "ids.pt.trace.json"
    p.write_bytes(_dump_numbers(doc))
    d = read_torch_trace(p).dispatches.sort_values("correlation_id")
    assert d["correlation_id"].tolist() == [base + k + 1 for k in range(6)]
    assert d["thread_id"].tolist() == [100 + k for k in range(6)]
    assert d["op_name"].tolist() == [f"op{k}" for k in range(6)]


def test_innermost_enclosing_int64_epoch_ties():
    """Ops 1 ns apart at ~1.7e18 ns: containment must not be decided in float64."""
    t0 = 1_700_000_000_000_000_000
    op_group = np.zeros(3, dtype=np.int64)
    op_start = np.array([t0, t0 + 101, t0 + 102], dtype=np.int64)
    op_end = np.array([t0 + 100, t0 + 101 + 50, t0 + 102 + 10], dtype=np.int64)
    pts = np.array([t0 + 99, t0 + 101, t0 + 102, t0 + 113], dtype=np.int64)
    got = innermost_enclosing(op_group, op_start, op_end, np.zeros(4, dtype=np.int64), pts)
    assert got.tolist() == [0, 1, 2, 1]


def test_innermost_enclosing_same_start_1ns_apart_at_epoch():
    """Two ops open at the same ns and close 1 ns apart: the inner one (earlier end) holds the
    point. The tie-break on end time must be int64: in float64 both ends are one value and the
    outer op wins (what 34e623b returned: [1, 0])."""
    t0 = 1_700_000_000_000_000_000
    got = innermost_enclosing(np.zeros(2, dtype=np.int64), np.array([t0, t0], dtype=np.int64),
                              np.array([t0 + 100, t0 + 101], dtype=np.int64),
                              np.zeros(2, dtype=np.int64), np.array([t0 + 50, t0 + 100], dtype=np.int64))
    assert got.tolist() == [0, 1]  # at t0+100 the inner op has closed (closes sort first)
