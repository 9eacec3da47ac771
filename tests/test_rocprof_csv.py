"""rocprofv3 CSV readers: version detection, every documented layout, real files, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES, shared_file
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.rocprof_csv import (
    CsvKind,
    detect_csv,
    host_pid_from_path,
    parse_agent_label,
    read_agent_info_csv,
    read_counter_collection_csv,
    read_kernel_stats_csv,
    read_kernel_trace_csv,
    read_memory_copy_csv,
    read_rocprof_csv,
)
from pytest_gemmperf.traces.schema import DISPATCH_COLUMNS, validate_dispatches

FX = FIXTURES / "rocprof_csv"
KT62 = FX / "v6.2" / "3141_kernel_trace.csv"
KT63 = FX / "v6.3" / "node-a" / "5926_kernel_trace.csv"
KT7X = FX / "v7" / "mi350-n1" / "5358_kernel_trace.csv"

# Headers verbatim from the formats doc, section 3.1 / 3.2
H19 = ('"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
       '"Correlation_Id","Start_Timestamp","End_Timestamp","Private_Segment_Size","Group_Segment_Size",'
       '"Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"')
H22 = ('"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
       '"Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count",'
       '"Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z",'
       '"Grid_Size_X","Grid_Size_Y","Grid_Size_Z"')
HROCPD = ('"Guid","Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id",'
          '"Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","Lds_Block_Size",'
          '"Scratch_Size","Vgpr_Count","Accum_Vgpr_Count","Sgpr_Count","Workgroup_Size_X",'
          '"Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"')
HCC19 = ('"Correlation_Id","Dispatch_Id","Agent_Id","Queue_Id","Process_Id","Thread_Id","Grid_Size",'
         '"Kernel_Id","Kernel_Name","Workgroup_Size","LDS_Block_Size","Scratch_Size","VGPR_Count",'
         '"Accum_VGPR_Count","SGPR_Count","Counter_Name","Counter_Value","Start_Timestamp",'
         '"End_Timestamp"')

ADD = '"void addition_kernel<float>(float*, float const*, float const*, int, int)"'
SUB = '"subtract_kernel(float*, float const*, float const*, int, int)"'


def row22(agent='"Agent 4"', queue=1, dispatch=1, name=ADD, start=1000, end=2000, lds="0"):
    return (f'"KERNEL_DISPATCH",{agent},{queue},{queue},834304,{dispatch},10,{name},{dispatch},'
            f'{start},{end},{lds},0,8,0,16,64,1,1,1024,1024,1')


def write(tmp_path: Path, name: str, lines: list[str], end: str = "\n") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + end)
    return p


# ------------------------------------------------------------------------------------------
# detection
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, kind, version, n_cols", [
    (KT62, "kernel_trace", "6.2", 16),
    (KT63, "kernel_trace", "6.3-6.4", 18),
    (KT7X, "kernel_trace", "7.x", 22),
    (FX / "v7" / "mi350-n1" / "5358_agent_info.csv", "agent_info", "6.2-7.x", 53),
    (FX / "v7" / "mi350-n1" / "5358_kernel_stats.csv", "kernel_stats", "6.2-7.x", 8),
])
def test_detect_fixtures(path, kind, version, n_cols):
    k = detect_csv(path)
    assert isinstance(k, CsvKind)
    assert (k.kind, k.version, k.n_cols) == (kind, version, n_cols)


@pytest.mark.parametrize("header, kind, version", [
    (H19, "kernel_trace", "19col-transitional"),
    (HROCPD, "kernel_trace", "rocpd-convert"),
    (HCC19, "counter_collection", "6.4-7.x"),
    ('"Guid",' + HCC19, "counter_collection", "rocpd-convert"),
    ('"Name","Calls","TotalDurationNs","AverageNs","Percentage"', "legacy_v1_stats", "rocprof-v1"),
    ('"Kind","Direction","Stream_Id","Source_Agent_Id","Destination_Agent_Id","Correlation_Id",'
     '"Start_Timestamp","End_Timestamp"', "memory_copy", "7.x"),
    ('"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"',
     "api_trace", "6.2-7.x"),
])
def test_detect_headers(tmp_path, header, kind, version):
    p = write(tmp_path, "x.csv", [header])
    k = detect_csv(p)
    assert (k.kind, k.version) == (kind, version)
    assert k.n_cols == header.count(",") + 1


def test_detect_stats_kind_from_name(tmp_path):
    head = '"Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"'
    assert detect_csv(write(tmp_path, "1_domain_stats.csv", [head])).kind == "domain_stats"
    assert detect_csv(write(tmp_path, "1_hip_api_stats.csv", [head])).kind == "api_stats"
    assert detect_csv(write(tmp_path, "1_kernel_stats.csv", [head])).kind == "kernel_stats"


def test_unknown_header_names_file(tmp_path):
    p = write(tmp_path, "weird.csv", ['"Foo","Bar"', "1,2"])
    with pytest.raises(GemmperfInputError, match=r"weird\.csv:1: unrecognised CSV header"):
        detect_csv(p)
    with pytest.raises(GemmperfInputError, match="weird.csv"):
        read_kernel_trace_csv(p)


def test_agent_label_parsing():
    assert parse_agent_label("Agent 4") == ("agent", 4)
    assert parse_agent_label("GPU 0") == ("gpu", 0)
    assert parse_agent_label("CPU 1") == ("cpu", 1)
    assert parse_agent_label("7") == (None, 7)
    assert parse_agent_label("Agent") is None


def test_host_pid_from_path():
    assert host_pid_from_path("/o/node-a/5926_kernel_trace.csv", "6.3-6.4") == ("node-a", 5926)
    assert host_pid_from_path("/o/run/3141_kernel_trace.csv", "6.2") == (None, 3141)
    assert host_pid_from_path("/o/pass_1/77_counter_collection.csv", "6.4-7.x") == (None, 77)
    assert host_pid_from_path("/o/out_kernel_trace.csv", "7.x") == (None, None)
    assert host_pid_from_path("/o/kernel_trace.csv") == (None, None)


# ------------------------------------------------------------------------------------------
# kernel traces: hand-written fixtures per version
# ------------------------------------------------------------------------------------------

def test_62_fixture():
    t = read_kernel_trace_csv(KT62)
    d = t.dispatches
    validate_dispatches(d)
    assert list(d.columns[: len(DISPATCH_COLUMNS)]) == list(DISPATCH_COLUMNS)
    assert len(d) == 10 and t.meta["csv_version"] == "6.2"
    assert d["source"].unique().tolist() == ["rocprof-csv"]
    assert d["host"].isna().all() and (d["pid"] == 3141).all()
    assert (d["agent"] == 1).all() and t.meta["agent_numbering"] == "node_id"
    assert d["queue"].min() == 139_690_710_949_888  # raw 64-bit handle survives
    assert d["dispatch_id"].isna().all() and d["thread_id"].isna().all()
    assert d["stream"].isna().all() and d["vgpr"].isna().all()
    # 6.x LDS = Group_Segment_Size (raw bytes); kernel 12 is the OpenMP one with 4096
    omp = d[d["kernel"].astype(str).str.startswith("__omp")]
    assert (omp["lds_bytes"] == 4096).all() and (d["scratch_bytes"] == 0).all()
    assert (d["grid_x"] == 1024).all() and (d["wg_x"] == 4).all()
    assert not d["zero_dur"].any() and not d["queue_overlap"].any()
    # names with commas survive intact
    assert "matrixTranspose(float*, float*, int)" in set(d["kernel"].astype(str))
    assert isinstance(d["kernel"].dtype, pd.CategoricalDtype)


def test_63_fixture():
    t = read_kernel_trace_csv(KT63)
    d = t.dispatches
    validate_dispatches(d)
    assert len(d) == 14 and t.meta["csv_version"] == "6.3-6.4"
    assert (d["host"].astype(str) == "node-a").all() and (d["pid"] == 5926).all()
    assert (d["thread_id"] == 40021).all()
    assert sorted(d["dispatch_id"].tolist()) == list(range(1, 15))
    assert d["dispatch_id"].tolist() != sorted(d["dispatch_id"].tolist())  # unsorted kept
    assert (d["lds_bytes"] == 1024).all() and d["stream"].isna().all()
    names = set(d["kernel"].astype(str))
    assert any("(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float" in n for n in names)
    assert set(d["kernel_short"].astype(str)) >= {"cunn_SoftMaxForward", "subtract_kernel"}


def test_7x_fixture_with_agent_info_beside():
    t = read_kernel_trace_csv(KT7X)
    d = t.dispatches
    validate_dispatches(d)
    assert len(d) == 13 and t.meta["csv_version"] == "7.x"
    # "Agent 3" = logical node 3 = second GPU (nodes 0-1 are CPUs) -> gpu_index 1
    assert (d["agent"] == 1).all()
    assert t.meta["agent_numbering"] == "gpu_index"
    assert t.meta["agent_numbering_in_file"] == "logical_node_id"
    assert t.meta["agent_labels"] == ["Agent 3"]
    assert (d["gpu_arch"].astype(str) == "gfx950").all()
    assert len(t.agents) == 4 and t.files[1].endswith("5358_agent_info.csv")
    gemm = d[d["category"].astype(str) == "gemm"]
    assert len(gemm) == 5
    assert (gemm[["lds_bytes", "vgpr", "agpr", "sgpr"]].iloc[0].tolist() == [65536, 256, 128, 96])
    assert set(d["stream"].tolist()) == {1, 2}
    assert (d["host"].astype(str) == "mi350-n1").all() and (d["pid"] == 5358).all()


def test_7x_without_agent_info_keeps_file_numbering(tmp_path):
    p = tmp_path / "kernel_trace.csv"
    p.write_bytes(KT7X.read_bytes())
    t = read_kernel_trace_csv(p)
    assert (t.dispatches["agent"] == 3).all()
    assert t.meta["agent_numbering"] == "logical_node_id"
    assert t.dispatches["gpu_arch"].isna().all() and len(t.agents) == 0
    assert t.dispatches["host"].isna().all() and t.dispatches["pid"].isna().all()


def test_explicit_agents_and_type_relative_labels(tmp_path):
    agents = read_agent_info_csv(FX / "v7" / "mi350-n1" / "5358_agent_info.csv")
    p = write(tmp_path, "kernel_trace.csv",
              [H22, row22(agent='"GPU 1"', dispatch=1), row22(agent='"GPU 0"', dispatch=2,
                                                              start=3000, end=3500)])
    t = read_kernel_trace_csv(p, agents=agents)
    assert sorted(t.dispatches["agent"].tolist()) == [0, 1]
    assert t.meta["agent_numbering"] == "gpu_index"
    # a node id the agent table does not know: numbers kept, warning recorded
    p2 = write(tmp_path, "k2_kernel_trace.csv", [H22, row22(agent='"Agent 9"')])
    t2 = read_kernel_trace_csv(p2, agents=agents)
    assert (t2.dispatches["agent"] == 9).all() and "agent_map_warning" in t2.meta


def test_19col_transitional(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [
        H19,
        f'"KERNEL_DISPATCH",2,1,1,21228,2,14,{SUB},1945,2414192765424862,2414192765435326,0,0,64,1,1,1024,1024,1',
        f'"KERNEL_DISPATCH",2,1,1,21228,1,11,{ADD},1937,2414192765353337,2414192765369494,16,2048,64,1,1,1024,1024,1',
    ])
    t = read_kernel_trace_csv(p)
    d = t.dispatches
    assert t.meta["csv_version"] == "19col-transitional" and len(d) == 2
    assert (d["agent"] == 2).all() and t.meta["agent_numbering"] == "node_id"
    assert d["stream"].tolist() == [1, 1]
    assert d["scratch_bytes"].tolist() == [0, 16] and d["lds_bytes"].tolist() == [0, 2048]
    assert d["dur_ns"].tolist() == [10464, 16157]


def test_rocpd_convert_dialect(tmp_path):
    p = write(tmp_path, "out_kernel_trace.csv", [
        HROCPD,
        '"00006409-00d1-70d1-a5cb-b5ab88214544","KERNEL_DISPATCH","Agent 4",1,0,714789,1,3,'
        '"__omp_offloading_30_57b9f__QMnorm_modPnorm_l23",1,1678314002982197,1678314003082277,'
        '8456,0,16,0,32,256,1,1,233472,1,1',
    ])
    t = read_kernel_trace_csv(p)
    d = t.dispatches
    assert t.meta["csv_version"] == "rocpd-convert"
    assert d["lds_bytes"].tolist() == [8456] and d["vgpr"].tolist() == [16]
    assert d["sgpr"].tolist() == [32] and d["dur_ns"].tolist() == [100080]
    assert d["guid"].astype(str).tolist() == ["00006409-00d1-70d1-a5cb-b5ab88214544"]
    validate_dispatches(d)


# ------------------------------------------------------------------------------------------
# tolerance
# ------------------------------------------------------------------------------------------

def test_float_formatted_integers_and_missing_final_newline(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [
        H22,
        row22(start="1550151853029637.000000", end="1550151853042437", lds="1.6384e+04"),
        row22(dispatch=2, start="9007199254740993.000000", end="9007199254750993.0", lds="512"),
    ], end="")
    d = read_kernel_trace_csv(p).dispatches
    # 2**53 + 1 is not representable as float64: the ".000000" form is parsed exactly
    assert d["start_ns"].tolist() == [1550151853029637, 9007199254740993]
    assert d["dur_ns"].tolist() == [12800, 10000]
    assert d["lds_bytes"].tolist() == [16384, 512]


def test_trailing_blank_lines_and_truncation_marker(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [H22, row22(), row22(dispatch=2, start=2100, end=2600),
                                             "", ""])
    t = read_kernel_trace_csv(p)
    assert len(t.dispatches) == 2 and t.meta["truncated_marker"] is False
    p2 = write(tmp_path, "k2_kernel_trace.csv", [H22, row22(), row22(dispatch=2, start=2100, end=2600),
                                                 "...", ""])
    t2 = read_kernel_trace_csv(p2)
    assert len(t2.dispatches) == 2 and t2.meta["truncated_marker"] is True
    assert t2.meta["truncated_marker_line"] == 4


def test_truncation_marker_in_the_middle_is_an_error(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [H22, row22(), "...", row22(dispatch=2, start=2100, end=2600)])
    with pytest.raises(GemmperfInputError, match=r"kernel_trace\.csv:3: row has 1 fields"):
        read_kernel_trace_csv(p)


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------

def test_empty_file(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [], end="")
    with pytest.raises(GemmperfInputError, match=r"kernel_trace\.csv: empty file"):
        read_kernel_trace_csv(p)


def test_missing_file(tmp_path):
    with pytest.raises(GemmperfInputError, match=r"nope_kernel_trace\.csv: cannot read file"):
        read_kernel_trace_csv(tmp_path / "nope_kernel_trace.csv")


def test_header_only(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [H22])
    with pytest.raises(GemmperfInputError, match=r"kernel_trace\.csv: no kernel dispatches"):
        read_kernel_trace_csv(p)


def test_header_only_counters_and_agents(tmp_path):
    with pytest.raises(GemmperfInputError, match=r"counter_collection\.csv: no counter records"):
        read_counter_collection_csv(write(tmp_path, "counter_collection.csv", [HCC19]))
    head = (FX / "v7" / "mi350-n1" / "5358_agent_info.csv").read_text().splitlines()[0]
    with pytest.raises(GemmperfInputError, match=r"agent_info\.csv: no agents"):
        read_agent_info_csv(write(tmp_path, "agent_info.csv", [head]))


def test_wrong_column_count_names_line(tmp_path):
    bad = row22(dispatch=3).rsplit(",", 1)[0]  # 21 fields
    p = write(tmp_path, "kernel_trace.csv", [H22, row22(), row22(dispatch=2, start=2100, end=2600), bad])
    with pytest.raises(GemmperfInputError) as ei:
        read_kernel_trace_csv(p)
    msg = str(ei.value)
    assert "kernel_trace.csv:4:" in msg and "21 fields" in msg and "22" in msg
    assert "\n" not in msg


def test_negative_duration_names_line(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [H22, row22(), "", row22(dispatch=7, start=5000, end=4000)])
    with pytest.raises(GemmperfInputError, match=r"kernel_trace\.csv:4 \(row 2, Dispatch_Id 7\): 1 dispatch"):
        read_kernel_trace_csv(p)


def test_non_numeric_timestamp_names_line(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [H22, row22(), row22(dispatch=2, start="abc", end=4000)])
    with pytest.raises(GemmperfInputError, match=r"kernel_trace\.csv:3 \(row 2\): column 'Start_Timestamp'"):
        read_kernel_trace_csv(p)


def test_fractional_value_in_integer_column_names_line(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [H22, row22(), row22(dispatch=2, start=3000, end=4000,
                                                                 lds="12.5")])
    with pytest.raises(GemmperfInputError, match=r"kernel_trace\.csv:3 \(row 2\): column 'LDS_Block_Size': '12.5' is not an integer"):
        read_kernel_trace_csv(p)


def test_zero_duration_kept_and_flagged(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [H22, row22(start=1000, end=1000),
                                             row22(dispatch=2, start=1500, end=1900)])
    d = read_kernel_trace_csv(p).dispatches
    assert len(d) == 2 and d["zero_dur"].tolist() == [True, False]


def test_same_queue_overlap_flagged(tmp_path):
    # queue 1: second dispatch starts 139 ns before the first ends (firmware timestamp noise);
    # queue 2 overlaps queue 1 in time, which is real concurrency and must not be flagged
    p = write(tmp_path, "kernel_trace.csv", [
        H22,
        row22(queue=1, dispatch=2, start=2000 - 139, end=3000),
        row22(queue=1, dispatch=1, start=1000, end=2000),
        row22(queue=2, dispatch=3, start=1500, end=2500),
    ])
    d = read_kernel_trace_csv(p).dispatches
    flagged = d.loc[d["queue_overlap"], "dispatch_id"].tolist()
    assert flagged == [2]


def test_wrong_kind_for_reader(tmp_path):
    p = write(tmp_path, "1_kernel_stats.csv",
              ['"Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"',
               '"k",1,10,10.000000,100.00,10,10,0.00000000e+00'])
    with pytest.raises(GemmperfInputError, match="expected a kernel_trace.csv"):
        read_kernel_trace_csv(p)
    with pytest.raises(GemmperfInputError, match="expected a counter_collection.csv"):
        read_counter_collection_csv(p)


# ------------------------------------------------------------------------------------------
# counters, agents, stats, memory copies, dispatcher
# ------------------------------------------------------------------------------------------

def test_counter_collection_19col(tmp_path):
    p = write(tmp_path, "77_counter_collection.csv", [
        HCC19,
        '2,2,"Agent 1",2,3260601,3260601,512,3,"apply_reflect_bc",256,0,0,20,4,32,'
        '"OccupancyPercent",4.34259040e-02,1569078135498332,1569078135503821',
        '1,1,"Agent 1",2,3260601,3260601,262144,5,"init_gaussian",256,0,0,12,4,32,'
        '"OccupancyPercent",13.271172,1569078135380312,1569078135386762',
        '1,1,"Agent 1",2,3260601,3260601,262144,5,"init_gaussian",256,0,0,12,4,32,'
        '"SQ_WAVES",16384.000000,1569078135380312,1569078135386762',
    ], end="")
    c = read_counter_collection_csv(p)
    assert len(c) == 3
    assert c["value"].tolist() == [pytest.approx(0.0434259040), pytest.approx(13.271172), 16384.0]
    assert (c["pid"] == 3260601).all() and (c["agent"] == 1).all()
    assert c["counter"].astype(str).tolist() == ["OccupancyPercent", "OccupancyPercent", "SQ_WAVES"]
    assert c["start_ns"].tolist()[0] == 1569078135498332
    assert c["agpr"].tolist() == [4, 4, 4] and c["grid_size"].tolist()[0] == 512
    assert (c["source"].astype(str) == "rocprof-csv").all()


def test_counter_collection_rocpd_convert(tmp_path):
    p = write(tmp_path, "out_counter_collection.csv", [
        '"Guid",' + HCC19,
        '"0000ddb5-8903-7903-b269-cd8d3745bb8a",1,1,"Agent 2",1,34679,34679,1048576,19,'
        '"vectoradd_float(float*, float const*, float const*, int, int)",256,0,0,8,0,16,'
        '"SQ_INSTS_SALU",98304.000000,1209908919889,1209909170247',
    ])
    c = read_counter_collection_csv(p)
    assert c[["agent", "pid", "kernel_id", "value"]].iloc[0].tolist() == [2, 34679, 19, 98304.0]
    assert str(c["guid"].iloc[0]) == "0000ddb5-8903-7903-b269-cd8d3745bb8a"


def test_read_rocprof_csv_dispatches_on_kind(tmp_path):
    p = write(tmp_path, "77_counter_collection.csv", [
        HCC19, '1,1,"Agent 1",2,9,9,512,3,"k",256,0,0,20,4,32,"SQ_WAVES",8,100,200'])
    t = read_rocprof_csv(p)
    assert len(t.dispatches) == 0 and len(t.counters) == 1
    assert list(t.dispatches.columns[: len(DISPATCH_COLUMNS)]) == list(DISPATCH_COLUMNS)
    assert t.meta["csv_kind"] == "counter_collection"
    t2 = read_rocprof_csv(FX / "v7" / "mi350-n1" / "5358_agent_info.csv")
    assert len(t2.agents) == 4 and t2.agents["gpu_index"].tolist()[2:] == [0, 1]
    t3 = read_rocprof_csv(FX / "v7" / "mi350-n1" / "5358_kernel_stats.csv")
    assert len(t3.meta["kernel_stats"]) == 4
    t4 = read_rocprof_csv(KT7X)
    assert len(t4.dispatches) == 13


def test_agent_info_uint64_hive_id():
    a = read_agent_info_csv(FX / "v7" / "mi350-n1" / "5358_agent_info.csv")
    assert a["hive_id"].dtype == pd.UInt64Dtype()
    assert int(a["hive_id"].iloc[2]) == 17361641481138401520  # > 2**63
    assert a["type"].astype(str).tolist() == ["CPU", "CPU", "GPU", "GPU"]
    assert a["gpu_arch"].isna().tolist() == [True, True, False, False]
    assert a["cu_count"].tolist()[2:] == [256, 256] and a["xcc_count"].tolist()[2:] == [8, 8]


def test_memory_copy_7x(tmp_path):
    p = write(tmp_path, "memory_copy_trace.csv", [
        '"Kind","Direction","Stream_Id","Source_Agent_Id","Destination_Agent_Id","Correlation_Id",'
        '"Start_Timestamp","End_Timestamp"',
        '"MEMORY_COPY","MEMORY_COPY_HOST_TO_DEVICE",0,"Agent 0","Agent 4",1,1057963336487172,1057963336564212',
    ])
    m = read_memory_copy_csv(p)
    assert list(m.columns) == ["kind", "direction", "stream", "src_agent", "dst_agent",
                               "correlation_id", "start_ns", "end_ns", "dur_ns", "file"]
    assert m[["src_agent", "dst_agent", "dur_ns"]].iloc[0].tolist() == [0, 4, 77040]


# ------------------------------------------------------------------------------------------
# real files under ../shared/data (skipped when absent)
# ------------------------------------------------------------------------------------------

R = "rocprofv3/"
DOC7 = R + "ROCm_rocm-systems/rocprofiler-sdk_docs_data_2025-08/"
HIST = R + "ROCm_rocm-systems/rocprofiler-sdk_docs_data_history/"
S62 = R + "ROCm_rocprofiler-sdk/rocm-6.2.0/"
HPC = R + "amd_HPCTrainingExamples_README_excerpts/"
V1 = R + "ROCm_rocm-blogs_rocprof-v1-legacy/"


@pytest.mark.parametrize("rel, version, rows, agent", [
    (S62 + "extracted_199_kernel_trace.csv", "6.2", 1, 1),
    (HPC + "Rocprofv3__openmp__kernel_trace.HEAD.csv", "6.2", 9, 4),
    (HIST + "kernel_trace__2024-08-13_ecdc81553__18col.csv", "6.3-6.4", 7, 1),
    (HPC + "Rocprofv3__hip__kernel_trace.HEAD.csv", "6.3-6.4", 4, 8),
    (HIST + "kernel_trace__2025-03-14_7aeaffd87__19col_stream.csv", "19col-transitional", 8, 2),
    (DOC7 + "kernel_trace.csv", "7.x", 9, 4),
    (DOC7 + "kernel_trace_truncated.csv", "7.x", 4, 4),
    (HPC + "Rocprofv3__rocpd-output-data__out_kernel_trace.HEAD.csv", "rocpd-convert", 9, 4),
])
def test_real_kernel_traces(rel, version, rows, agent):
    t = read_kernel_trace_csv(shared_file(rel))
    d = t.dispatches
    validate_dispatches(d)
    assert t.meta["csv_version"] == version and len(d) == rows
    assert (d["agent"] == agent).all()
    assert (d["dur_ns"] > 0).all()


def test_real_7x_doc_sample_values():
    d = read_kernel_trace_csv(shared_file(DOC7 + "kernel_trace.csv")).dispatches
    assert d["dispatch_id"].tolist() == [1, 4, 3, 2, 5, 6, 13, 12, 11]  # buffer order kept
    first = d.iloc[0]
    assert first["kernel"] == "void addition_kernel<float>(float*, float const*, float const*, int, int)"
    assert (first["start_ns"], first["dur_ns"], first["vgpr"], first["sgpr"]) == (
        1550151853029637, 12800, 8, 16)


def test_real_legacy_v1_results():
    t = read_kernel_trace_csv(shared_file(V1 + "HSA_trace/results.csv"))
    d = t.dispatches
    assert t.meta["legacy"] == "rocprof-v1" and len(d) == 1
    row = d.iloc[0]
    assert row["kernel"] == "elementwise_kernel" and row["dur_ns"] == 7840  # == DurationNs
    assert (row["pid"], row["agent"], row["vgpr"], row["agpr"], row["sgpr"]) == (33, 2, 28, 4, 32)


@pytest.mark.parametrize("rel, version, rows, agent, counter", [
    (S62 + "extracted_pmc_1__218_counter_collection.csv", "6.2", 1, 1, "SQ_WAVES"),
    (DOC7 + "kernel_names.csv", "6.2", 4, 1, "SQ_WAVES"),
    (HIST + "counter_collection__2024-08-03_2dc1c0d9f.csv", "6.2", 1, 1, "SQ_WAVES"),
    (HIST + "counter_collection__2024-09-11_d0047fd96.csv", "16col-transitional", 7, 1, "SQ_WAVES"),
    (HIST + "counter_collection__2024-10-28_fa35b6270__18col.csv", "6.3", 7, 1, "SQ_WAVES"),
    (DOC7 + "counter_collection.csv", "6.4-7.x", 4, 1, "SQ_WAVES"),
    (HPC + "Profiling-by-example__shallow-water_0_baseline__shallow_counter_collection.HEAD9.csv",
     "6.4-7.x", 8, 1, "OccupancyPercent"),
])
def test_real_counter_collections(rel, version, rows, agent, counter):
    p = shared_file(rel)
    assert detect_csv(p).version == version
    c = read_counter_collection_csv(p)
    assert len(c) == rows and (c["agent"] == agent).all()
    assert set(c["counter"].astype(str)) == {counter}
    assert c["value"].notna().all() and c["pid"].notna().all()


def test_real_counter_values():
    c = read_counter_collection_csv(shared_file(DOC7 + "counter_collection.csv"))
    assert (c["value"] == 16384.0).all()
    c2 = read_counter_collection_csv(shared_file(
        HPC + "Profiling-by-example__shallow-water_0_baseline__shallow_counter_collection.HEAD9.csv"))
    assert c2["value"].iloc[1] == pytest.approx(4.34259040e-02)


@pytest.mark.parametrize("rel, rows, gpus, arch", [
    (R + "jhinpan_flydsl-rocprof-cli/big_out_agent_info.csv", 10, 8, "gfx950"),
    (HPC + "Rocprofv3__openmp__agent_info.csv", 8, 4, "gfx942"),
    (S62 + "extracted_238_agent_info.csv", 2, 1, "gfx900"),
])
def test_real_agent_info(rel, rows, gpus, arch):
    a = read_agent_info_csv(shared_file(rel))
    assert len(a) == rows
    g = a[a["type"].astype(str) == "GPU"]
    assert len(g) == gpus and g["gpu_index"].tolist() == list(range(gpus))
    assert set(g["gpu_arch"].astype(str)) == {arch}


def test_real_agent_info_mi350x():
    a = read_agent_info_csv(shared_file(R + "jhinpan_flydsl-rocprof-cli/big_out_agent_info.csv"))
    g = a[a["type"].astype(str) == "GPU"]
    assert g["node_id"].tolist() == list(range(2, 10))
    assert set(g["product"].astype(str)) == {"AMD Instinct MI350X"}
    assert (g["cu_count"] == 256).all() and (g["xcc_count"] == 8).all()
    assert (g["gfx_target_version"] == 90500).all()
    assert int(g["hive_id"].iloc[0]) == 8861873366774386336


@pytest.mark.parametrize("rel, rows, kind, first", [
    (DOC7 + "hip_api_stats.csv", 17, "api_stats", "hipStreamCreateWithFlags"),
    (DOC7 + "hip_domain_stats.csv", 1, "domain_stats", "HIP_API"),
    (S62 + "extracted_24189_hip_stats.csv", 10, "api_stats", "__hipPopCallConfiguration"),
    (HPC + "MLExamples__mpi__pidN_kernels_kernel_stats.HEAD10.csv", 9, "kernel_stats",
     "rccl_main_kernel(ncclDevComm*, unsigned long, ncclWork*)"),
    (V1 + "SYS_trace/results.stats.csv", 1, "legacy_v1_stats", "elementwise_kernel"),
    (V1 + "SYS_trace/results.hip_stats.csv", 14, "legacy_v1_stats", "hipMemcpyWithStream"),
    (V1 + "SYS_trace/results.copy_stats.csv", 2, "legacy_v1_stats", "CopyDeviceToHost"),
])
def test_real_stats(rel, rows, kind, first):
    p = shared_file(rel)
    assert detect_csv(p).kind == kind
    s = read_kernel_stats_csv(p)
    assert list(s.columns) == ["Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage",
                               "MinNs", "MaxNs", "StdDev"]
    assert len(s) == rows and s["Name"].iloc[0] == first
    np.testing.assert_allclose(s["AverageNs"], s["TotalDurationNs"] / s["Calls"], rtol=1e-6, atol=1)
    if kind == "legacy_v1_stats":
        assert s["MinNs"].isna().all() and s["StdDev"].isna().all()
    else:
        assert (s["MinNs"] <= s["AverageNs"]).all() and (s["AverageNs"] <= s["MaxNs"]).all()


def test_real_domain_stats_values():
    s = read_kernel_stats_csv(shared_file(DOC7 + "hip_domain_stats.csv"))
    assert s.iloc[0].tolist() == ["HIP_API", 13, 458514859, 35270373.769231, 100.0, 2300,
                                  352276613, 99315857.546240]


def test_real_stats_excerpt_artifact_is_reported_with_line():
    # The README excerpt ends in "2561.401809> " (a shell prompt cut into the block), which is
    # not rocprofv3 output: it must be rejected with its line, not read as a number.
    p = shared_file(HPC + "MLExamples__single_process__kernels_kernel_stats.HEAD10.csv")
    with pytest.raises(GemmperfInputError, match=r"HEAD10\.csv:10 \(row 9\): column 'StdDev'"):
        read_kernel_stats_csv(p)


@pytest.mark.parametrize("rel, rows, direction, agents", [
    (DOC7 + "memory_copy_trace.csv", 4, "MEMORY_COPY_HOST_TO_DEVICE", (0, 4)),
    (HIST + "memory_copy_trace__2024-10-08_b426c65c4__7col.csv", 2, "MEMORY_COPY_HOST_TO_DEVICE", (0, 1)),
    (S62 + "extracted_197_memory_copy_trace.csv", 2, "HOST_TO_DEVICE", (0, 1)),
])
def test_real_memory_copies(rel, rows, direction, agents):
    m = read_memory_copy_csv(shared_file(rel))
    assert len(m) == rows and str(m["direction"].iloc[0]) == direction
    assert (m["src_agent"].iloc[0], m["dst_agent"].iloc[0]) == agents
    assert (m["dur_ns"] > 0).all()


def test_real_api_trace_via_dispatcher():
    t = read_rocprof_csv(shared_file(DOC7 + "rocpd-to-csv.csv"))
    assert t.meta["csv_kind"] == "api_trace" and t.meta["csv_version"] == "rocpd-convert"
    assert len(t.meta["api_trace"]) == 13 and len(t.dispatches) == 0
    t2 = read_rocprof_csv(shared_file(DOC7 + "hip_compile_trace.csv"))  # trailing blank line
    assert len(t2.meta["api_trace"]) == 5


# ------------------------------------------------------------------------------------------
# exact cell conversion (csv_values), extra and missing columns
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("123", 123), ("-5", -5), ("+7", 7), ("16384.000000", 16384), ("1.6384e+04", 16384),
    ("0x1F", 31), (str(2 ** 63 - 1), 2 ** 63 - 1), (str(-2 ** 63), -2 ** 63),
    (str(2 ** 63), "is outside the signed 64-bit integer range"),
    ("1e400", "is outside the signed 64-bit integer range"), ("12.5", "is not an integer"),
    ("inf", "is not a finite number"), ("-NaN", "is not a finite number"),
    ("abc", "is not a number"), ("\u0661", "is not a number"), ("1_000", "is not a number"),
    ("a\x00", "contains a NUL character"),
])
def test_parse_int_exact(text, expected):
    from pytest_gemmperf.traces.csv_values import INT64_RANGE, parse_int
    assert parse_int(text, *INT64_RANGE) == expected


def test_ints_from_text_names_first_bad_row_and_stays_exact():
    import pyarrow as pa

    from pytest_gemmperf.traces.csv_values import ints_from_text
    arr, problem = ints_from_text(pa.array(["9007199254740993", "1.0e3", None, "0x10"]))
    assert problem is None and arr.to_pylist() == [9007199254740993, 1000, None, 16]
    _, problem = ints_from_text(pa.array(["1", "2", "3.5", "inf"]))
    assert problem == (2, "3.5", "is not an integer")
    arr, problem = ints_from_text(pa.array([str(2 ** 64 - 1)]), pa.uint64())
    assert problem is None and arr.to_pylist() == [2 ** 64 - 1]


def test_extra_unknown_column_is_read_with_a_note(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [H22 + ',"Future_Counter"', row22() + ",12.5",
                                             row22(dispatch=2, start=2100, end=2600) + ",x"])
    t = read_kernel_trace_csv(p)
    assert t.dispatches["dur_ns"].tolist() == [1000, 500]
    assert t.meta["notes"] == [f"{p}: 1 column(s) not in the documented 7.x kernel_trace layout "
                               "ignored: Future_Counter"]
    kind = detect_csv(p)
    assert kind.version == "7.x" and kind.extra == ("Future_Counter",) and len(kind.known) == 22


def test_missing_or_damaged_columns_are_named(tmp_path):
    p = write(tmp_path, "kernel_trace.csv", [H22.replace(',"SGPR_Count"', ""), row22()])
    with pytest.raises(GemmperfInputError, match=r"kernel_trace\.csv:1: CSV header lacks required "
                                                 r"column\(s\) SGPR_Count of the 7\.x kernel_trace"):
        read_kernel_trace_csv(p)
    # a 6.3 header short of Dispatch_Id is not "6.2 plus an extra Thread_Id column"
    h63 = ('"Kind","Agent_Id","Queue_Id","Thread_Id","Kernel_Id","Kernel_Name","Correlation_Id",'
           '"Start_Timestamp","End_Timestamp","Private_Segment_Size","Group_Segment_Size",'
           '"Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y",'
           '"Grid_Size_Z"')
    with pytest.raises(GemmperfInputError, match=r"lacks required column\(s\) Dispatch_Id of the 6\.3"):
        detect_csv(write(tmp_path, "k2_kernel_trace.csv", [h63]))


def test_pyarrow_null_spellings_are_not_missing_values(tmp_path):
    """pyarrow reads "NULL", "nan", "N/A" as nulls by default: here they are text errors."""
    for i, word in enumerate(("NULL", "N/A", "nan")):
        p = write(tmp_path, f"{i}_kernel_trace.csv", [H22, row22(), row22(dispatch=2, lds=word)])
        with pytest.raises(GemmperfInputError, match=r"\(row 2\): column 'LDS_Block_Size'"):
            read_kernel_trace_csv(p)
