"""``gemmperf compare --history`` keys a trace candidate's run by the hardware its own agents
name, with or without ``--no-report``; "unknown" only when nothing says.

The traces are written here in rocprofv3's documented CSV layout (``../shared/docs/rocprofv3-formats.md``
3.4 ``agent_info.csv``, 53 columns, CPUs first; 7.x ``kernel_trace.csv`` with ``Agent_Id`` =
``"Agent <logical node id>"``)."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from pytest_gemmperf.cli import main
from pytest_gemmperf.gate.file_reduce import gate_inputs
from pytest_gemmperf.history.store import HistoryStore
from pytest_gemmperf.store.hardware import cpu_hardware_key, hardware_key, trace_hardware_key
from pytest_gemmperf.traces.discover import load

AGENT_COLUMNS = (
    "Node_Id,Logical_Node_Id,Agent_Type,Cpu_Cores_Count,Simd_Count,Cpu_Core_Id_Base,Simd_Id_Base,"
    "Max_Waves_Per_Simd,Lds_Size_In_Kb,Gds_Size_In_Kb,Num_Gws,Wave_Front_Size,Num_Xcc,Cu_Count,Array_Count,"
    "Num_Shader_Banks,Simd_Arrays_Per_Engine,Cu_Per_Simd_Array,Simd_Per_Cu,Max_Slots_Scratch_Cu,"
    "Gfx_Target_Version,Vendor_Id,Device_Id,Location_Id,Domain,Drm_Render_Minor,Num_Sdma_Engines,"
    "Num_Sdma_Xgmi_Engines,Num_Sdma_Queues_Per_Engine,Num_Cp_Queues,Max_Engine_Clk_Ccompute,"
    "Max_Engine_Clk_Fcompute,Sdma_Fw_Version,Fw_Version,Capability,Cu_Per_Engine,Max_Waves_Per_Cu,Family_Id,"
    "Workgroup_Max_Size,Grid_Max_Size,Local_Mem_Size,Hive_Id,Gpu_Id,Workgroup_Max_Dim_X,Workgroup_Max_Dim_Y,"
    "Workgroup_Max_Dim_Z,Grid_Max_Dim_X,Grid_Max_Dim_Y,Grid_Max_Dim_Z,Name,Vendor_Name,Product_Name,Model_Name"
).split(",")
KERNEL_COLUMNS = (
    "Kind,Agent_Id,Queue_Id,Stream_Id,Thread_Id,Dispatch_Id,Kernel_Id,Kernel_Name,Correlation_Id,"
    "Start_Timestamp,End_Timestamp,LDS_Block_Size,Scratch_Size,VGPR_Count,Accum_VGPR_Count,SGPR_Count,"
    "Workgroup_Size_X,Workgroup_Size_Y,Workgroup_Size_Z,Grid_Size_X,Grid_Size_Y,Grid_Size_Z"
).split(",")
MI300X = "gfx942-AMD_Instinct_MI300X-x2"


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, quoting=csv.QUOTE_NONNUMERIC, restval=0)
        w.writeheader()
        w.writerows(rows)


def rocprofv3_csv_dir(d: Path, *, scale: float = 1.0, gpus: int = 2, agent_info: bool = True,
                      pid: int = 4242) -> Path:
    """One rocprofv3 process: ``<pid>_agent_info.csv`` (one CPU, ``gpus`` MI300X) and
    ``<pid>_kernel_trace.csv`` (40 GEMM dispatches on the first GPU)."""
    d.mkdir(parents=True)
    cpu = {"Node_Id": 0, "Logical_Node_Id": 0, "Agent_Type": "CPU", "Cpu_Cores_Count": 64, "Cu_Count": 64,
           "Name": "AMD EPYC 9654 96-Core Processor", "Vendor_Name": "CPU",
           "Product_Name": "AMD EPYC 9654 96-Core Processor", "Model_Name": ""}
    gpu_rows = [{"Node_Id": 1 + g, "Logical_Node_Id": 1 + g, "Agent_Type": "GPU", "Simd_Count": 1216,
                 "Wave_Front_Size": 64, "Num_Xcc": 8, "Cu_Count": 304, "Simd_Per_Cu": 4,
                 "Gfx_Target_Version": 90402, "Vendor_Id": 4098, "Device_Id": 29857, "Gpu_Id": 1000 + g,
                 "Max_Engine_Clk_Fcompute": 2100, "Name": "gfx942", "Vendor_Name": "AMD",
                 "Product_Name": "AMD Instinct MI300X", "Model_Name": "ip discovery"} for g in range(gpus)]
    if agent_info:
        _write_csv(d / f"{pid}_agent_info.csv", AGENT_COLUMNS, [cpu, *gpu_rows])
    rows, t = [], 1_000_000
    for i in range(40):
        dur = int(10_000 * scale) + (i % 7) * 10
        rows.append({"Kind": "KERNEL_DISPATCH", "Agent_Id": "Agent 1", "Queue_Id": 1, "Stream_Id": 1,
                     "Thread_Id": pid, "Dispatch_Id": i + 1, "Kernel_Id": 10,
                     "Kernel_Name": "Cijk_Alik_Bljk_HHS_BH_MT256x256x64", "Correlation_Id": i + 1,
                     "Start_Timestamp": t, "End_Timestamp": t + dur, "Workgroup_Size_X": 256,
                     "Workgroup_Size_Y": 1, "Workgroup_Size_Z": 1, "Grid_Size_X": 1048576,
                     "Grid_Size_Y": 1, "Grid_Size_Z": 1})
        t += dur + 500
    _write_csv(d / f"{pid}_kernel_trace.csv", KERNEL_COLUMNS, rows)
    return d


def _compare_hw(tmp_path: Path, base: Path, cand: Path, *extra: str, capsys) -> str:
    hist = tmp_path / f"hist{len(list(tmp_path.glob('hist*')))}"
    rc = main(["compare", str(base), str(cand), "--out", str(tmp_path / "cmp"), "--history", str(hist),
               "--run-id", "pr-7", "--jobs", "1", "--undecided", "pass", *extra])  # one process a side
    out = capsys.readouterr()
    assert rc == 0, out.err
    runs = HistoryStore(hist).runs()
    assert runs["run_id"].tolist() == ["pr-7"]
    key = str(runs["hw_key"].iloc[0])
    assert f"history: run pr-7 (hw {key}) recorded" in out.out
    return key


def test_compare_history_keys_trace_runs_by_their_agents(tmp_path, capsys):
    base = rocprofv3_csv_dir(tmp_path / "base")
    cand = rocprofv3_csv_dir(tmp_path / "cand", scale=1.01)
    # --no-report keeps no Trace: the agents come back from the per-file reduction
    assert _compare_hw(tmp_path, base, cand, "--no-report", capsys=capsys) == MI300X
    assert _compare_hw(tmp_path, base, cand, capsys=capsys) == MI300X   # the report path agrees
    # a process without agent_info.csv names no hardware: "unknown", not this machine's CPU
    bare = rocprofv3_csv_dir(tmp_path / "bare", scale=1.01, agent_info=False, pid=4343)
    assert _compare_hw(tmp_path, base, bare, "--no-report", capsys=capsys) == "unknown"


@pytest.mark.parametrize("jobs", [1, 2])
def test_reduced_inputs_carry_the_agents_load_reads(tmp_path, jobs, monkeypatch):
    from pytest_gemmperf.traces import parallel

    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)  # the pool path on small files too
    root = tmp_path / "two"
    rocprofv3_csv_dir(root / "n0")
    rocprofv3_csv_dir(root / "n1", pid=4343, gpus=4)
    got = gate_inputs([root], jobs=jobs, compact=False, stats=False).agents
    want = load([root], jobs=1).agents
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    # two hosts (the directories n0, n1), the larger with 4 GPUs
    assert trace_hardware_key(got) == hardware_key(want) == "gfx942-AMD_Instinct_MI300X-x4-n2"


def test_trace_hardware_key_never_names_this_machine():
    assert trace_hardware_key(None) is None
    assert trace_hardware_key(pd.DataFrame({"type": pd.Series([], dtype="string")})) is None
    cpu_only = pd.DataFrame({"type": ["CPU"], "gpu_arch": [None], "product": ["AMD EPYC 9654"]})
    assert trace_hardware_key(cpu_only) is None and hardware_key(cpu_only) == cpu_hardware_key()
    gpus = pd.DataFrame({"type": ["CPU", "GPU"], "gpu_arch": [None, "gfx950"],
                         "product": ["EPYC", "AMD Instinct MI350X"], "node_id": [0, 1]})
    assert trace_hardware_key(gpus) == hardware_key(gpus) == "gfx950-AMD_Instinct_MI350X-x1"
