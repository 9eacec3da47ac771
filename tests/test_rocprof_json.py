"""rocprofv3 JSON reader.

Hand-made fixtures in tests/fixtures/rocprof_json/ follow rocprofv3-formats.md §4:
``v7_two_processes_counters_results.json`` (ROCm 7.x layout, two processes, non-positional
kernel_symbols, counter records with several dimension instances per counter) and
``v62_results.json`` (ROCm 6.2 layout: no stream_id, no metadata.node/command/config, no
gpu_index). Real-data tests use ../shared/data and skip without it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import shared_file
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.rocprof_json import read_rocprof_json
from pytest_gemmperf.traces.schema import validate_dispatches

FIX = Path(__file__).parent / "fixtures" / "rocprof_json"
V7 = FIX / "v7_two_processes_counters_results.json"
V62 = FIX / "v62_results.json"
CIJK = "Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB0_AFC0"


def _write(tmp_path: Path, doc, name="x_results.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


# ---------------------------------------------------------------- hand-made 7.x fixture


def test_v7_two_processes_table():
    t = read_rocprof_json(V7)
    d = t.dispatches
    validate_dispatches(d)
    assert len(d) == 10
    assert set(d["source"]) == {"rocprof-json"}
    assert d.groupby("pid", observed=True).size().to_dict() == {1001: 5, 1002: 5}
    assert set(d["host"]) == {"node-a"}
    # agent = gpu_index of the dispatch's agent handle, not the handle and not the node id
    assert d.groupby("pid", observed=True)["agent"].first().to_dict() == {1001: 0, 1002: 1}
    assert set(d["gpu_arch"]) == {"gfx950"}
    first = d[(d.pid == 1001) & (d.dispatch_id == 3)].iloc[0]
    assert first.kernel == "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"
    assert first.kernel_short == "ncclDevKernel_Generic_1"
    assert first.category == "collective"
    assert (first.queue, first.stream, first.thread_id, first.correlation_id) == (20, 565, 1066, 3)
    assert (first.grid_x, first.wg_x, first.lds_bytes, first.vgpr, first.sgpr) == (256, 256, 4096, 64, 96)
    assert first.dur_ns == 1217193


def test_v7_names_resolved_by_kernel_id_field_not_position():
    d = read_rocprof_json(V7).dispatches
    by_id = d.drop_duplicates("kernel_id").set_index("kernel_id")
    # kernel_symbols lists ids 7, 0, 3, 12, 5: position lookup would give other names
    assert by_id.loc[3, "kernel"] == CIJK  # formatted name: no ".kd"
    assert by_id.loc[3, "kernel_short"] == CIJK + ".kd"  # truncated name as the file gives it
    assert (by_id.loc[3, "vgpr"], by_id.loc[3, "agpr"]) == (128, 64)
    assert by_id.loc[12, "kernel"] == "__amd_rocclr_copyBuffer"
    assert by_id.loc[5, "kernel_short"] == "vectorized_elementwise_kernel"
    assert "[clone .kd]" not in " ".join(map(str, d["kernel"].cat.categories))


def test_v7_counters_summed_over_dimensions_and_named():
    c = read_rocprof_json(V7).counters
    assert len(c) == 4 and set(c["pid"]) == {1001}
    wide = c.pivot_table(index="dispatch_id", columns="counter", values="value", observed=True)
    assert wide.loc[4, "SQ_WAVES"] == 10.0  # 4 + 4 + 2 instance records
    assert wide.loc[4, "GRBM_GUI_ACTIVE"] == 1234.0
    assert wide.loc[3, "GRBM_GUI_ACTIVE"] == 99.5
    row = c[c.dispatch_id == 4].iloc[0]
    assert row.kernel == CIJK and row.agent == 0 and row.start_ns == 63855948171771


def test_v7_meta_and_agents():
    t = read_rocprof_json(V7)
    assert t.meta["layout"] == "7.x"
    assert t.meta["init_time_ns"] == {1001: 63855948165371, 1002: 63855949000000}
    procs = {p["pid"]: p for p in t.meta["processes"]}
    assert procs[1002]["fini_time_ns"] == 63855949000000 + 5_000_000
    assert procs[1001]["command"][:3] == ["python3", "-u", "train.py"]
    assert procs[1001]["config"]["raw_output_file"] == "%hostname%/%pid%"
    a = t.agents
    assert len(a) == 6
    gpus = a[a["type"] == "GPU"]
    assert gpus["gpu_index"].tolist() == [0, 1, 0, 1]
    assert set(gpus["product"]) == {"AMD Instinct MI350X"} and set(gpus["cu_count"]) == {256}
    assert a[a["type"] == "CPU"]["gpu_index"].isna().all()


def test_queue_overlap_flag_on_same_queue():
    d = read_rocprof_json(V7).dispatches
    flagged = d[d.queue_overlap]
    assert flagged["dispatch_id"].tolist() == [4, 4]  # starts 100 ns before dispatch 2 ends


def test_gzip_gives_same_table(tmp_path):
    gz = tmp_path / "v7_results.json.gz"
    gz.write_bytes(gzip.compress(V7.read_bytes()))
    a = read_rocprof_json(V7).dispatches.drop(columns="file")
    b = read_rocprof_json(gz).dispatches.drop(columns="file")
    pd.testing.assert_frame_equal(a, b)


# ---------------------------------------------------------------- 6.2 layout


def test_v62_layout():
    t = read_rocprof_json(V62)
    d = t.dispatches
    validate_dispatches(d)
    assert t.meta["layout"] == "6.2"
    assert len(d) == 3
    assert d["stream"].isna().all()
    assert d["host"].isna().all()
    assert d["pid"].tolist() == [238, 238, 238]
    # no gpu_index in 6.2: derived from ascending node_id among GPU agents
    assert d["agent"].tolist() == [0, 0, 1]
    assert d["queue"].iloc[0] == 139892123975680  # raw queue handle kept
    assert d["kernel"].iloc[1] == CIJK
    assert t.meta["processes"][0]["command"] is None


# ---------------------------------------------------------------- counters-only, errors


def test_counters_only_file_gives_empty_dispatches(tmp_path):
    doc = json.loads(V7.read_text())
    doc["rocprofiler-sdk-tool"] = doc["rocprofiler-sdk-tool"][:1]
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"] = []
    t = read_rocprof_json(_write(tmp_path, doc))
    assert len(t.dispatches) == 0 and len(t.counters) == 4
    assert t.meta["counters_only"]


@pytest.mark.parametrize("mutate, message, record", [
    (lambda d: d["rocprofiler-sdk-tool"][1]["buffer_records"].update(kernel_dispatch=[]) or
     d["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][2]["dispatch_info"].update(kernel_id=999),
     "kernel_id 999 is not in kernel_symbols", "process 0, buffer_records.kernel_dispatch[2]"),
    (lambda d: d["rocprofiler-sdk-tool"][1]["buffer_records"]["kernel_dispatch"][1]["dispatch_info"]
     ["agent_id"].update(handle=5),
     "agent handle 5 is not in agents[]", "process 1, buffer_records.kernel_dispatch[1]"),
    (lambda d: d["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][3].update(start_timestamp="x"),
     "field 'start_timestamp': Expected `int`, got `str`", "process 0, buffer_records.kernel_dispatch[3]"),
    (lambda d: [p["buffer_records"].update(kernel_dispatch=[]) or
                p["callback_records"].update(counter_collection=[]) for p in d["rocprofiler-sdk-tool"]],
     "no kernel dispatches in 2 process(es)", None),
    (lambda d: d["rocprofiler-sdk-tool"][0]["callback_records"]["counter_collection"][0]["records"][0]
     ["counter_id"].update(handle=77),
     "counter id 77", "process 0, callback_records.counter_collection[0]"),
])
def test_bad_content_names_file_and_record(tmp_path, mutate, message, record):
    doc = json.loads(V7.read_text())
    mutate(doc)
    p = _write(tmp_path, doc)
    with pytest.raises(GemmperfInputError) as ei:
        read_rocprof_json(p)
    assert ei.value.path == str(p)
    assert message in ei.value.message
    assert ei.value.record == record
    assert "\n" not in str(ei.value)


def test_truncated_json(tmp_path):
    p = tmp_path / "t_results.json"
    p.write_bytes(V7.read_bytes()[:5000])
    with pytest.raises(GemmperfInputError, match="not valid JSON.*truncated") as ei:
        read_rocprof_json(p)
    assert str(p) in str(ei.value)


def test_corrupt_gzip(tmp_path):
    p = tmp_path / "c_results.json.gz"
    p.write_bytes(gzip.compress(V7.read_bytes())[:300])
    with pytest.raises(GemmperfInputError, match="corrupt or truncated gzip"):
        read_rocprof_json(p)


def test_pytorch_trace_is_named(tmp_path):
    p = _write(tmp_path, {"schemaVersion": 1, "deviceProperties": [], "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "Cijk_x", "ts": 1.0, "dur": 2.0}]}, "rank0.pt.trace.json")
    with pytest.raises(GemmperfInputError, match="PyTorch profiler"):
        read_rocprof_json(p)


@pytest.mark.parametrize("content, message", [
    (b'{"foo": 1}', "no top-level 'rocprofiler-sdk-tool' key"),
    (b"[1, 2]", "not rocprofv3 JSON output"),
    (b'{"rocprofiler-sdk-tool": []}', "holds no process"),
    (b"   ", "empty file"),
])
def test_not_rocprof(tmp_path, content, message):
    p = tmp_path / "n.json"
    p.write_bytes(content)
    with pytest.raises(GemmperfInputError, match=message):
        read_rocprof_json(p)


def test_missing_file(tmp_path):
    with pytest.raises(GemmperfInputError, match="cannot read file"):
        read_rocprof_json(tmp_path / "absent_results.json")


# ---------------------------------------------------------------- real data (../shared/data)


def test_real_908_full():
    t = read_rocprof_json(shared_file("tracelens/908_results.json.gz"))
    d = t.dispatches
    validate_dispatches(d)
    assert len(d) == 43_915
    assert d["kernel_short"].nunique() == 44
    assert d["kernel_id"].nunique() == 80
    assert d["dispatch_id"].nunique() == 43_915
    assert d["dispatch_id"].head(3).tolist() == [1, 2, 10]  # file order kept (unsorted)
    assert d["agent"].unique().tolist() == [0]  # handle 37946 -> gpu_index 0
    gpu = t.agents[t.agents["handle"] == 37946].iloc[0]
    assert (gpu["gpu_arch"], gpu["product"], gpu["node_id"], gpu["gfx_target_version"]) == \
        ("gfx950", "AMD Instinct MI350X", 2, 90500)
    assert len(t.agents) == 10 and (t.agents["type"] == "GPU").sum() == 8
    nccl = d[d.kernel_short == "ncclDevKernel_Generic_1"]
    assert len(nccl) == 1310
    assert nccl["queue"].value_counts().to_dict() == {20: 1309, 16: 1}
    assert nccl["kernel"].iloc[0] == "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)"
    assert nccl["dur_ns"].median() == 1_217_193
    assert (nccl["dur_ns"].min(), nccl["dur_ns"].max()) == (70_280, 733_003_332)
    cijk = d[d.kernel.str.startswith("Cijk_")]
    assert len(cijk) == 5350 and set(cijk["queue"]) == {18}
    assert cijk["kernel_id"].nunique() == 14
    assert cijk["dur_ns"].median() == 11_720
    assert (cijk["dur_ns"].min(), cijk["dur_ns"].max()) == (5_680, 39_801)
    assert d["queue"].value_counts().to_dict() == {18: 38761, 19: 3034, 20: 1309, 17: 500, 16: 311}
    assert len(d[(d.queue == 18) & (d.stream == 567)]) == 37_300
    assert sorted(d["thread_id"].unique().tolist()) == [908, 973, 997, 1229]
    assert set(d["host"]) == {"smci350-zts-gtu-c6-25"} and set(d["pid"]) == {908}
    assert not d["zero_dur"].any()
    span = int(d["end_ns"].max() - d["start_ns"].min())
    assert span == 15_122_023_494
    assert t.meta["init_time_ns"] == {908: 63_855_948_165_371}
    assert t.meta["fini_time_ns"] == {908: 63_875_155_697_841}
    assert t.meta["processes"][0]["config"]["output_file"] == "smci350-zts-gtu-c6-25/908"
    assert len(t.counters) == 0


def test_real_908_busy_time_matches_catalog():
    """Union of all dispatch intervals = 4,233.112334 ms (data-catalog §1.1, = TraceLens busy)."""
    d = read_rocprof_json(shared_file("tracelens/908_results.json.gz")).dispatches
    s = d["start_ns"].to_numpy()
    e = d["end_ns"].to_numpy()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > run_end[:-1]])
    starts = s[new]
    ends = np.maximum.reduceat(e, np.flatnonzero(new))
    assert int((ends - starts).sum()) == 4_233_112_334


def test_real_trimmed_resolves_by_field():
    d = read_rocprof_json(shared_file("rocprofv3/AMD-AGI_TraceLens/908_results.TRIMMED_DERIVED.json")).dispatches
    assert len(d) == 355
    assert (d.kernel_short == "ncclDevKernel_Generic_1").sum() == 2
    assert d.kernel.str.startswith("Cijk_").sum() == 28
    assert d["kernel_short"].nunique() == 44
    # same id -> same names as in the full file (spot check of a late, non-positional symbol)
    assert set(d.loc[d.kernel_id == 251, "kernel_short"]) == {"ncclDevKernel_Generic_1"}


# ---------------------------------------------------------------- exact integers near 2**63


def test_timestamps_near_2p63_are_exact(tmp_path):
    """Timestamps just below 2**63 ns: start, end and duration exactly as written (no float
    path anywhere), including end = 2**63 - 1 itself."""
    doc = json.loads(V7.read_text())
    top = 2 ** 63 - 1
    want = []
    for p_idx, proc in enumerate(doc["rocprofiler-sdk-tool"]):
        for i, rec in enumerate(proc["buffer_records"]["kernel_dispatch"]):
            end = top - 3 * i - 1000 * p_idx
            start = end - (1 + 7919 * i)  # durations that are not multiples of anything
            rec["start_timestamp"], rec["end_timestamp"] = start, end
            want.append((rec["dispatch_info"]["dispatch_id"], p_idx, start, end))
        for j, rec in enumerate(proc["callback_records"]["counter_collection"]):
            rec["dispatch_data"]["start_timestamp"] = top - 10 ** 6 - j
            rec["dispatch_data"]["end_timestamp"] = top - j
    p = _write(tmp_path, doc)
    t = read_rocprof_json(p)
    d = t.dispatches
    assert sorted(zip(d["start_ns"].tolist(), d["end_ns"].tolist())) == sorted((s, e) for *_, s, e in want)
    assert d["end_ns"].max() == top
    assert (d["dur_ns"] == d["end_ns"] - d["start_ns"]).all()
    assert sorted(d["dur_ns"].tolist()) == sorted(e - s for *_, s, e in want)
    c = t.counters
    assert c["end_ns"].max() == top and (c["end_ns"] - c["start_ns"] >= 10 ** 6).all()


@pytest.mark.parametrize("value", [2 ** 63, 2 ** 64 - 1, 2 ** 64, 10 ** 30])
def test_integers_beyond_int64_are_errors(tmp_path, value):
    doc = json.loads(V7.read_text())
    doc["rocprofiler-sdk-tool"][1]["buffer_records"]["kernel_dispatch"][4]["end_timestamp"] = value
    p = _write(tmp_path, doc)
    with pytest.raises(GemmperfInputError) as ei:
        read_rocprof_json(p)
    assert ei.value.record == "process 1, buffer_records.kernel_dispatch[4]"
    assert "field 'end_timestamp': Expected `int` <= 9223372036854775807" in ei.value.message


@pytest.mark.parametrize("slim", [False, True], ids=["full", "slim"])
@pytest.mark.parametrize("where", ["one record", "every record", "the first record"])
@pytest.mark.parametrize("compact", [True, False], ids=["compact", "spaced"])
def test_a_key_written_twice_in_api_records_of_one_shape_is_found(tmp_path, slim, where, compact):
    """API record arrays (most of a file) are checked for a repeated key through one record when
    all read the same (jsonkeys' uniform arrays): the error must be the whole-document scan's,
    wherever the repeat is and however the file is spaced."""
    from pytest_gemmperf.jsonkeys import find_repeated_key

    sep = (",", ":") if compact else (", ", ": ")
    twice = {"one record": {41}, "every record": set(range(60)), "the first record": {0}}[where]

    def record(i: int) -> str:
        text = json.dumps({"size": 64, "kind": 3, "operation": 37 + i % 3, "thread_id": 1066,
                           "correlation_id": {"internal": 100 + i, "external": 0},
                           "start_timestamp": 63855948000000 + 997 * i,
                           "end_timestamp": 63855948000500 + 1003 * i}, separators=sep)
        key = f'"thread_id"{sep[1]}1066{sep[0]}'
        return text.replace(key, key + key) if i in twice else text

    doc = json.loads(V7.read_text())
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["hip_api"] = "API"
    raw = json.dumps(doc, separators=sep).replace('"API"', "[" + sep[0].join(map(record, range(60))) + "]")
    expected = find_repeated_key(raw.encode())
    assert expected is not None and expected.key == "thread_id"
    p = tmp_path / "x_results.json"
    p.write_text(raw)
    with pytest.raises(GemmperfInputError) as ei:
        read_rocprof_json(p, columns=["kernel", "dur_ns"] if slim else None)
    assert f"key 'thread_id' appears twice in one JSON object (byte {expected.offset:,})" in ei.value.message
    assert ei.value.record.startswith(f"process 0, buffer_records.hip_api[{min(twice)}]")
