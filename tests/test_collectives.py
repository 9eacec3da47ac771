"""Cross-rank collective analysis on hand-written 4-rank PyTorch traces and TraceLens's real
8-rank NCCL report. Every expected number below was computed by hand from the tables here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import shared_file
from pytest_gemmperf.analysis import collectives as C
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.rocprof_csv import read_kernel_trace_csv
from pytest_gemmperf.traces.schema import set_columns
from pytest_gemmperf.traces.torch_trace import read_torch_trace

NCCL_REPORT = "tracelens/traces/mi300/llama_70b_fsdp/nccl_analysis_report_csvs/nccl_summary_implicit_sync.csv"
NCCL_KERNEL = "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"
GEMM_KERNEL = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1_ISA942"

# (collective name, dtype, in nelems, out nelems, {rank: start us}, {rank: dur us})
# allreduce: 1048576 Float = 4 MiB; _allgather_base: out 1048576 BFloat16 = 2 MiB
COLLS = [
    ("allreduce", "Float", 1048576, 1048576, {0: 1000, 1: 1010, 2: 1030, 3: 1005},
     {0: 156, 1: 147, 2: 125, 3: 155}),
    ("_allgather_base", "BFloat16", 262144, 1048576, {0: 2000, 1: 2040, 2: 2010, 3: 2020},
     {0: 141, 1: 100, 2: 132, 3: 123}),
    ("allreduce", "Float", 1048576, 1048576, {0: 3000, 1: 3001, 2: 3002, 3: 3003},
     {0: 255, 1: 252, 2: 252, 3: 250}),
]


def write_rank_trace(path: Path, rank: int, *, dur_scale: float = 1.0, shift_us: float = 0.0,
                     with_pg: bool = True, stream: int = 7, skip: tuple[int, ...] = ()) -> Path:
    """One Kineto trace of ``rank`` as PyTorch writes it: record_param_comms + nccl op on the
    CPU, a hipLaunchKernel runtime call, the RCCL kernel with the collective metadata in its
    args, and a GEMM on another stream."""
    pid, ev, corr = 5000 + rank, [], 100
    for i, (name, dtype, n_in, n_out, starts, durs) in enumerate(COLLS):
        if i in skip:
            continue
        t = starts[rank] + shift_us
        ext, corr = 10 + 2 * i, corr + 1
        meta = {"Collective name": name, "dtype": dtype, "In msg nelems": n_in,
                "Out msg nelems": n_out, "Group size": 4, "In split size": "[]",
                "Out split size": "[]"}
        if with_pg:
            meta |= {"Process Group Name": "0", "Process Group Description": "default_pg",
                     "Process Group Ranks": "[0, 1, 2, 3]"}
        cpu_t = t - 200
        ev += [
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": pid,
             "ts": cpu_t, "dur": 30, "args": {"External id": ext, **meta, "Rank": rank}},
            {"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce" if "reduce" in name else "nccl:_all_gather_base",
             "pid": pid, "tid": pid, "ts": cpu_t + 2, "dur": 20, "args": {"External id": ext + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": pid, "tid": pid,
             "ts": cpu_t + 5, "dur": 8, "args": {"External id": ext + 1, "correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": NCCL_KERNEL, "pid": 0, "tid": stream,
             "ts": t, "dur": durs[rank] * dur_scale,
             "args": {"External id": ext + 1, "device": 0, "stream": stream, "correlation": corr,
                      "grid": [64, 1, 1], "block": [16384, 1, 1], **meta}},
            {"ph": "X", "cat": "kernel", "name": GEMM_KERNEL, "pid": 0, "tid": 3,
             "ts": t - 50, "dur": 40, "args": {"device": 0, "stream": 3, "correlation": corr + 1000,
                                                "grid": [256, 1, 1], "block": [65536, 1, 1]}},
        ]
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X",
                                                      "warpSize": 64, "numSms": 304}],
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4, "pg_count": 1},
           "rocprofiler-sdk_version": "1.0", "hip_runtime_version": 70051831,
           "traceEvents": ev, "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def load_point(root: Path, point: str, run: int, ranks=range(4), **kw) -> pd.DataFrame:
    frames = []
    for r in ranks:
        p = write_rank_trace(root / point / f"run{run}" / f"rank{r}" / "trace.json", r, **kw)
        frames.append(set_columns(read_torch_trace(p).dispatches, point=point, run=run))
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> pd.DataFrame:
    """Two points x two runs; ch56 runs every collective twice as long; run 1 is run 0 later."""
    root = tmp_path_factory.mktemp("coll")
    parts = [load_point(root, "ch28-th256", 0), load_point(root, "ch28-th256", 1, shift_us=1e5),
             load_point(root, "ch56-th256", 0, dur_scale=2.0),
             load_point(root, "ch56-th256", 1, dur_scale=2.0, shift_us=1e5)]
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def match(sweep) -> C.CollectiveMatch:
    return C.match_collectives(sweep)


def _one(coll: pd.DataFrame, point: str, run: int, seq: int) -> pd.Series:
    r = coll[(coll["point"] == point) & (coll["run"] == run) & (coll["seq"] == seq)]
    assert len(r) == 1
    return r.iloc[0]


# ------------------------------------------------------------------------------ formulas


def test_tracelens_real_report_bandwidths_reproduced():
    """algo/bus bw of TraceLens's 8-rank llama-70B report from its own latency and size columns:
    exact with MB = 2**20 B and GB = 2**30 B (1e6/1e9 would be 4.9 % / 7.4 % off)."""
    df = pd.read_csv(shared_file(NCCL_REPORT))
    kind = C.collective_kind(df["Collective name"])
    assert list(kind) == ["allgather", "reducescatter", "reducescatter", "allgather", "allreduce"]
    n = df["Group size"].to_numpy()
    out_nelems = np.where(kind == "allgather", df["In msg nelems"] * n, df["In msg nelems"])
    nbytes = C.msg_bytes(kind, df["In msg nelems"], out_nelems, df["dtype"])
    np.testing.assert_allclose(nbytes / C.MB_BYTES, df["Full msg size (MB)"], rtol=1e-15)
    lat_ns = lambda col: df[col].to_numpy() * 1000.0  # noqa: E731  (TraceLens latencies are us)
    # the fastest collective has the highest bandwidth
    np.testing.assert_allclose(C.algbw_gbps(nbytes, lat_ns("comm_latency_min")),
                               df["algo bw (GB/s)_max"], rtol=1e-12)
    np.testing.assert_allclose(C.algbw_gbps(nbytes, lat_ns("comm_latency_max")),
                               df["algo bw (GB/s)_min"], rtol=1e-12)
    # two instances: median bw = mean bw = mean of the bandwidths of the min and max latency
    two = (df["count"] == 2).to_numpy()
    mid = (C.algbw_gbps(nbytes, lat_ns("comm_latency_min")) + C.algbw_gbps(nbytes, lat_ns("comm_latency_max"))) / 2
    np.testing.assert_allclose(mid[two], df.loc[two, "algo bw (GB/s)_mean"], rtol=1e-12)
    factor = C.busbw_factor(kind, n)
    np.testing.assert_allclose(factor, [7 / 8, 7 / 8, 7 / 8, 7 / 8, 14 / 8])
    for s in ("mean", "median", "min", "max"):
        np.testing.assert_allclose(df[f"algo bw (GB/s)_{s}"] * factor, df[f"bus bw (GB/s)_{s}"], rtol=1e-12)
    # the decimal units do not reproduce it
    decimal = nbytes / 1e9 / (lat_ns("comm_latency_min") / 1e9)
    assert abs(decimal[0] / df["algo bw (GB/s)_max"][0] - 1) > 0.07
    # Total comm latency (ms) = count x mean latency (us) / 1000
    np.testing.assert_allclose(df["count"] * df["comm_latency_mean"] / 1000, df["Total comm latency (ms)"],
                               rtol=1e-9)


def test_formulas_by_hand():
    assert list(C.collective_kind(["allreduce", "_reduce_scatter_base", "all_gather_into_tensor_coalesced",
                                   "all_to_allv", "broadcast", "reduce", "send", "barrier", "gather"])) == \
        ["allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "reduce", "p2p", "barrier", "other"]
    f = C.busbw_factor(["allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "p2p"], [4] * 6)
    np.testing.assert_allclose(f, [1.5, 0.75, 0.75, 0.75, 1.0, np.nan])
    # 4 MiB in 125 us = 1/256 GiB / 1.25e-4 s = 31.25 GiB/s
    assert C.algbw_gbps([4 * 2 ** 20], [125_000])[0] == 31.25
    assert np.isnan(C.algbw_gbps([4 * 2 ** 20], [0])[0])
    assert list(C.size_bucket([0, 1, 1023, 1024, 4 * 2 ** 20, 8 * 2 ** 20 - 1, 2 ** 31, np.nan])) == \
        ["0B", "1B", "512B", "1KiB", "4MiB", "4MiB", "2GiB", "unknown"]


# ------------------------------------------------------------------------------ matching


def test_matched_collectives_by_hand(match):
    coll = match.collectives
    assert len(coll) == 12 and coll["valid"].all() and set(coll["match"]) == {C.MATCH_PG}
    assert set(coll["n_ranks"]) == {4}
    ar1 = _one(coll, "ch28-th256", 0, 0)
    assert (ar1["coll_name"], ar1["coll_kind"], ar1["coll_dtype"]) == ("allreduce", "allreduce", "Float")
    assert ar1["msg_bytes"] == 4 * 2 ** 20 and ar1["size_bucket"] == "4MiB"
    # starts 1000/1010/1030/1005, ends 1156/1157/1155/1160 us
    assert ar1["latency_ns"] == 125_000 and ar1["max_dur_ns"] == 156_000
    assert ar1["start_skew_ns"] == 30_000 and ar1["end_skew_ns"] == 5_000
    assert ar1["span_ns"] == 160_000 and ar1["avg_wait_ns"] == 18_750
    assert (ar1["last_rank"], ar1["first_rank"]) == (2, 0)
    assert ar1["algbw_gbps"] == pytest.approx(31.25, rel=1e-12)
    assert ar1["busbw_gbps"] == pytest.approx(46.875, rel=1e-12)  # x 2*3/4

    ag = _one(coll, "ch28-th256", 0, 1)
    assert ag["coll_kind"] == "allgather" and ag["msg_bytes"] == 2 * 2 ** 20  # out nelems x 2 B
    assert ag["latency_ns"] == 100_000 and ag["start_skew_ns"] == 40_000 and ag["end_skew_ns"] == 3_000
    assert ag["avg_wait_ns"] == 22_500 and ag["last_rank"] == 1
    assert ag["algbw_gbps"] == pytest.approx(19.53125) and ag["busbw_gbps"] == pytest.approx(14.6484375)

    ar2 = _one(coll, "ch28-th256", 0, 2)
    assert ar2["latency_ns"] == 250_000 and ar2["start_skew_ns"] == 3_000 and ar2["end_skew_ns"] == 2_000
    assert ar2["last_rank"] == 3 and ar2["busbw_gbps"] == pytest.approx(23.4375)

    # run 1 is the same run 100 ms later: identical metrics
    assert _one(coll, "ch28-th256", 1, 0)["latency_ns"] == 125_000
    # ch56: durations doubled -> ends 1312/1304/1280/1315
    b = _one(coll, "ch56-th256", 0, 0)
    assert b["latency_ns"] == 250_000 and b["end_skew_ns"] == 35_000 and b["start_skew_ns"] == 30_000
    assert b["busbw_gbps"] == pytest.approx(23.4375)


def test_per_rank_view(match):
    p = match.per_rank
    p = p[(p["point"] == "ch28-th256") & (p["run"] == 0) & (p["seq"] == 0)].set_index("rank")
    assert p["dur_ns"].to_dict() == {0: 156_000, 1: 147_000, 2: 125_000, 3: 155_000}
    assert p["wait_ns"].to_dict() == {0: 30_000, 1: 20_000, 2: 0, 3: 25_000}
    assert p["is_last"].to_dict() == {0: False, 1: False, 2: True, 3: False}
    assert not (match.per_rank["kernel"] == GEMM_KERNEL).any()  # GEMMs are not collectives


def test_straggler_summary_by_hand(match):
    s = C.straggler_summary(match, by=("point", "run"))
    s = s[(s["point"] == "ch28-th256") & (s["run"] == 0)].set_index("rank")
    assert s["total_wait_ns"].to_dict() == {0: 73_000, 1: 22_000, 2: 31_000, 3: 45_000}
    assert s["times_arrived_last"].to_dict() == {0: 0, 1: 1, 2: 1, 3: 1}
    assert s["times_arrived_first"].to_dict() == {0: 3, 1: 0, 2: 0, 3: 0}
    assert s["total_coll_dur_ns"].to_dict() == {0: 552_000, 1: 499_000, 2: 509_000, 3: 528_000}
    assert s.loc[1, "pct_arrived_last"] == pytest.approx(100 / 3)
    assert s.loc[0, "mean_wait_ns"] == pytest.approx(73_000 / 3)


def test_summary_and_best_point(match):
    s = C.collective_summary(match.collectives).set_index(["point", "coll_name", "size_bucket"])
    a = s.loc[("ch28-th256", "allreduce", "4MiB")]
    assert a["count"] == 4 and a["n_runs"] == 2
    assert (a["latency_ns_mean"], a["latency_ns_median"], a["latency_ns_min"], a["latency_ns_max"]) == \
        (187_500, 187_500, 125_000, 250_000)
    assert a["total_latency_ns"] == 750_000
    assert a["busbw_gbps_mean"] == pytest.approx((46.875 + 23.4375) / 2)
    assert a["start_skew_ns_max"] == 30_000
    best = C.best_points(s.reset_index()).set_index(["coll_name", "size_bucket"])
    assert best.loc[("allreduce", "4MiB"), "best_point"] == "ch28-th256"
    assert best.loc[("allreduce", "4MiB"), "worst_point"] == "ch56-th256"
    assert best.loc[("allreduce", "4MiB"), "worst_over_best"] == pytest.approx(2.0)
    assert best.loc[("_allgather_base", "2MiB"), "latency_ns_mean"] == 100_000


def test_fallback_without_process_group(tmp_path):
    # no PG metadata, and every rank's RCCL stream has a different id: order on the k-th stream
    frames = [set_columns(read_torch_trace(write_rank_trace(tmp_path / f"r{r}.json", r, with_pg=False,
                                                            stream=7 + r)).dispatches, point="p", run=0)
              for r in range(4)]
    m = C.match_collectives(pd.concat(frames, ignore_index=True))
    coll = m.collectives.sort_values("seq")
    assert set(coll["match"]) == {C.MATCH_STREAM} and coll["pg_name"].isna().all()
    assert list(coll["latency_ns"]) == [125_000, 100_000, 250_000]
    assert list(coll["last_rank"]) == [2, 1, 3]
    assert any("per-rank order" in n for n in m.notes)


def test_rank_missing_a_collective(tmp_path):
    frames = [set_columns(read_torch_trace(write_rank_trace(tmp_path / f"r{r}.json", r,
                                                            skip=(0,) if r == 3 else ())).dispatches,
                          point="p", run=0) for r in range(4)]
    d = pd.concat(frames, ignore_index=True)
    with pytest.raises(GemmperfInputError, match=r"r\d\.json.*ranks disagree.*allreduce"):
        C.match_collectives(d)
    m = C.match_collectives(d, strict=False)
    coll = m.collectives.sort_values("seq")
    assert list(coll["consistent"]) == [False, False, True]  # rank 3 is one behind
    assert list(coll["complete"]) == [True, True, False]
    assert not coll["valid"].any()
    with pytest.raises(GemmperfInputError, match="no complete, consistent"):
        C.collective_summary(coll)


def test_bad_inputs(sweep):
    one_rank = sweep[sweep["rank"] == 0]
    with pytest.raises(GemmperfInputError, match="not seen on all ranks|no collective was seen"):
        C.match_collectives(one_rank)
    with pytest.raises(GemmperfInputError, match="no collective kernels"):
        C.match_collectives(sweep[sweep["category"] == "gemm"])
    with pytest.raises(GemmperfInputError, match="warm-up"):
        C.match_collectives(sweep, warmup=3)


def test_warmup_keeps_alignment(sweep):
    coll = C.match_collectives(sweep, warmup=1).collectives
    assert len(coll) == 8 and set(coll["seq"]) == {1, 2}
    assert _one(coll, "ch28-th256", 0, 2)["latency_ns"] == 250_000


# ------------------------------------------------------------------------------ gate


def test_collective_samples(match):
    s = C.collective_samples(match)
    assert list(s.columns) == ["point", "kernel", "metric", "unit", "value"]
    assert set(s["metric"]) == {"coll_latency_ns", "coll_busbw_gbps"}
    assert set(s["unit"]) == {"-/-/-/0", "-/-/-/1"}
    assert set(s["kernel"]) == {"allreduce:4MiB", "_allgather_base:2MiB"}
    one = s.set_index(["point", "kernel", "metric", "unit"])["value"]
    # median of the two allreduces of the run: (125 + 250) / 2 us
    assert one[("ch28-th256", "allreduce:4MiB", "coll_latency_ns", "-/-/-/0")] == 187_500
    assert one[("ch28-th256", "allreduce:4MiB", "coll_busbw_gbps", "-/-/-/0")] == pytest.approx(35.15625)
    assert one[("ch56-th256", "_allgather_base:2MiB", "coll_busbw_gbps", "-/-/-/1")] == pytest.approx(7.32421875)
    assert len(s) == 2 * 2 * 2 * 2  # points x runs x keys x metrics


def test_lost_bandwidth_fails_the_gate(tmp_path):
    """An RCCL upgrade that makes ch28 collectives 30 % slower: latency and bus bandwidth
    regress (bandwidth is higher-is-better in the gate)."""
    from pytest_gemmperf.gate.compare import compare

    runs = pd.concat([load_point(tmp_path, "ch28-th256", k, dur_scale=1 + 0.01 * k, shift_us=1e5 * k)
                      for k in range(3)], ignore_index=True)

    def samples(scale: float) -> pd.DataFrame:
        d = runs.copy()
        coll = (d["category"] == "collective").to_numpy()
        d.loc[coll, "end_ns"] = d.loc[coll, "start_ns"] + (d.loc[coll, "dur_ns"] * scale).round().astype("int64")
        return C.collective_samples(C.match_collectives(d))

    v = compare(samples(1.0), samples(1.3)).set_index(["kernel", "metric"])
    assert v.loc[("allreduce:4MiB", "coll_busbw_gbps"), "verdict"] == "regression"
    assert v.loc[("allreduce:4MiB", "coll_latency_ns"), "verdict"] == "regression"
    assert v.loc[("allreduce:4MiB", "coll_busbw_gbps"), "ratio"] == pytest.approx(1 / 1.3, rel=1e-3)
    same = compare(samples(1.0), samples(1.0))
    assert set(same["verdict"]) == {"unchanged"}


# ------------------------------------------------------------------------------ excel sheet


def test_nccl_master_table(match):
    t = C.nccl_master_table(match)
    assert list(t.columns) == list(C.NCCL_MASTER_COLUMNS) + ["point"]
    assert len(t) == 4
    assert list(t["operation_id"]) == ["OP_01", "OP_01", "OP_02", "OP_02"]
    assert list(t["channels_num"]) == [28, 56, 28, 56] and set(t["threads_num"]) == {256}
    r = t[(t["operation_id"] == "OP_02") & (t["channels_num"] == 28)].iloc[0]
    assert r["operation_name"] == "medium_4.00MB" and r["Full msg size (MB)"] == 4.0
    assert r["full_config"] == "256thread_28ch" and r["In msg nelems"] == 1048576
    assert (r["Collective name"], r["dtype"], r["Group size"], r["count"]) == ("allreduce", "Float", 4, 4)
    assert r["comm_latency_mean"] == 187.5 and r["comm_latency_min"] == 125.0  # us
    assert r["Total comm latency (ms)"] == pytest.approx(0.75)
    assert r["bus bw (GB/s)_max"] == pytest.approx(46.875)
    assert r["skew in start time_max"] == 30.0 and r["Process Group Name"] == "0"
    assert r["source_file"].endswith("ch28-th256")


# ------------------------------------------------------------------------------ rocprofv3


KT_HEADER = ('"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id",'
             '"Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size",'
             '"Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X",'
             '"Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"')


def write_kernel_trace(path: Path, rows: list[tuple[str, int, int, int]]) -> Path:
    """rocprofv3 7.x kernel_trace.csv: (kernel, stream, start ns, end ns) per dispatch."""
    lines = [KT_HEADER]
    for i, (name, stream, s, e) in enumerate(rows, start=1):
        lines.append(f'"KERNEL_DISPATCH","Agent 4",{stream},{stream},900,{i},{10 + stream},"{name}",{i},'
                     f'{s},{e},0,0,8,0,16,256,1,1,65536,1,1')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rocprof_per_rank_and_order_alignment(tmp_path):
    nccl = "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"
    gemm = "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32"
    # rank 0: RCCL [1000, 2000) overlapped by GEMMs [1500, 1800) and [1900, 2500); RCCL [3000, 3400)
    # rank 1: RCCL [1100, 2050) and [3000, 3300), concurrent RCCL [3200, 3500); GEMM [0, 500)
    r0 = [(nccl, 2, 1000, 2000), (gemm, 1, 1500, 1800), (gemm, 1, 1900, 2500), (nccl, 2, 3000, 3400)]
    r1 = [(nccl, 2, 1100, 2050), (nccl, 2, 3000, 3300), (nccl, 3, 3200, 3500), (gemm, 1, 0, 500)]
    frames = [set_columns(read_kernel_trace_csv(write_kernel_trace(tmp_path / f"rank{r}" / "kernel_trace.csv",
                                                                   rows)).dispatches, rank=r, point="p", run=0)
              for r, rows in ((0, r0), (1, r1))]
    d = pd.concat(frames, ignore_index=True)
    per = C.collective_time_per_rank(d).set_index("rank")
    assert per["n_collectives"].to_dict() == {0: 2, 1: 3}
    assert per["coll_kernel_ns"].to_dict() == {0: 1400, 1: 1550}
    assert per["coll_busy_ns"].to_dict() == {0: 1400, 1: 1450}  # [3000, 3500) once
    assert per["coll_self_overlap_ns"].to_dict() == {0: 0, 1: 100}
    assert per["overlapped_ns"].to_dict() == {0: 400, 1: 0}  # 300 + 100
    assert per.loc[0, "exposed_ns"] == 1000 and per.loc[0, "overlap_fraction"] == pytest.approx(400 / 1400)

    m = C.rocprof_alignment(d)
    coll = m.collectives
    assert set(coll["match"]) == {C.MATCH_STREAM} and coll["busbw_gbps"].isna().all()
    first = coll[(coll["channel"] == "stream#1") & (coll["seq"] == 0)].iloc[0]
    assert first["n_ranks"] == 2 and first["complete"]
    assert first["latency_ns"] == 950 and first["start_skew_ns"] == 100 and first["end_skew_ns"] == 50
    assert first["last_rank"] == 1
    # rank 1's second stream has no partner on rank 0: flagged, not silently matched
    lone = coll[coll["channel"] == "stream#2"]
    assert len(lone) == 1 and lone.iloc[0]["n_ranks"] == 1 and not lone.iloc[0]["complete"]
    assert any("not seen on every rank" in n for n in m.notes)
