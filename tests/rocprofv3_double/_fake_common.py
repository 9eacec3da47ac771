"""Shared parts of the rocprofv3 test double: impersonated versions, the fake counter catalog,
output-name placeholders and the CSV dialect/headers of each version.

Facts follow /work/shared/docs/rocprofv3-cli.md and rocprofv3-formats.md (section numbers are
given where a choice comes from them) and the tool-library excerpts in
../shared/data/rocprofv3/frontend/<release>/cpp/. Stdlib only: the double must run under any python3.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Version:
    major: int
    minor: int

    @property
    def key(self) -> tuple[int, int]:
        return (self.major, self.minor)


def parse_version(raw: str) -> Version | None:
    m = re.match(r"^\s*(\d+)\.(\d+)", raw or "")
    return Version(int(m.group(1)), int(m.group(2))) if m else None


def current_version() -> Version:
    """Version the fake ``rocprofv3-avail`` impersonates (FAKE_ROCPROFV3_VERSION, default 7.0)."""
    raw = os.environ.get("FAKE_ROCPROFV3_VERSION", "7.0")
    v = parse_version(raw)
    if v is None:
        sys.stderr.write(f"fake rocprofv3: bad FAKE_ROCPROFV3_VERSION {raw!r}\n")
        sys.exit(97)
    return v


# --- counters ---------------------------------------------------------------------------------

#: Counters the fake CDNA GPU knows (names from the aorta rocprof YAMLs and the docs).
CATALOG = frozenset("""
SQ_WAVES SQ_BUSY_CYCLES SQ_BUSY_CU_CYCLES SQ_WAVE_CYCLES SQ_INSTS_MFMA SQ_INSTS_VALU
SQ_INSTS_SALU SQ_ACTIVE_INST_ANY SQ_WAVES_RESTORED SQ_INSTS_LDS SQ_INSTS_SMEM SQ_INSTS_VMEM
SQ_WAIT_INST_LDS SQ_INSTS_VSKIPPED SQ_THREAD_CYCLES_VALU SQ_INSTS_VALU_MFMA_MOPS_F16
GRBM_COUNT GRBM_GUI_ACTIVE TCC_HIT_sum TCC_MISS_sum TCC_EA0_RDREQ_sum TCC_EA0_WRREQ_sum
TA_BUSY_avr TA_TA_BUSY_sum
""".split())

#: Counters one pass can hold per hardware block (block = name prefix before the first "_").
BLOCK_LIMITS = {"SQ": 8, "GRBM": 2, "TCC": 4, "TA": 2}
DEFAULT_BLOCK_LIMIT = 2

#: Consumer RDNA parts whose counters the tool cannot read (aqlprofile abort).
COUNTERLESS_ARCHS = ("gfx1150", "gfx1151", "gfx1152")


def bare(counter: str) -> str:
    return counter.split(":", 1)[0]     # NAME:device=N


def block_of(counter: str) -> str:
    return counter.split("_", 1)[0]


def over_limit(counters: list[str]) -> dict[str, int]:
    """Blocks whose counter count exceeds what one pass can collect."""
    per_block: dict[str, int] = {}
    for c in counters:
        per_block[block_of(c)] = per_block.get(block_of(c), 0) + 1
    return {b: n for b, n in per_block.items() if n > BLOCK_LIMITS.get(b, DEFAULT_BLOCK_LIMIT)}


def split_counters(text: str | list[str]) -> list[str]:
    items = text if isinstance(text, list) else [text]
    out: list[str] = []
    for item in items:
        out.extend(t for t in re.split(r"[,\s]+", str(item)) if t)
    return out


def gpu_arch() -> str:
    return os.environ.get("FAKE_ROCPROFV3_ARCH", "gfx942")


# --- placeholders: output_key.cpp / format_path.cpp / config.cpp of each release ----------------

def _int_env(env: dict, name: str, default: int) -> int:
    try:
        return int(env.get(name, ""))
    except ValueError:
        return default


def mpi_rank(v: Version, env: dict) -> int:
    """6.x: first of OMPI_COMM_WORLD_RANK, MV2_COMM_WORLD_RANK, MPI_RANK (else -1); 7.x: the
    last set of MPI_RANK, MPI_LOCALRANKID, MPI_RANKID, MV2_COMM_WORLD_RANK, OMPI_COMM_WORLD_RANK
    (else 0). PMI_RANK (MPICH/Hydra) is read by no release."""
    if v.major >= 7:
        val = 0
        for name in ("MPI_RANK", "MPI_LOCALRANKID", "MPI_RANKID", "MV2_COMM_WORLD_RANK",
                     "OMPI_COMM_WORLD_RANK"):
            val = _int_env(env, name, val)
        return val
    return _int_env(env, "OMPI_COMM_WORLD_RANK",
                    _int_env(env, "MV2_COMM_WORLD_RANK", _int_env(env, "MPI_RANK", -1)))


def output_keys(v: Version, pid: int, ppid: int, env: dict, argv: list[str]) -> list[tuple[str, str]]:
    """(key, value) in the order the tool replaces them (long keys before shorthands)."""
    rank = mpi_rank(v, env)
    dmp_rank = str(rank if rank > 0 else 0)
    slurm_rank = env.get("SLURM_PROCID") or dmp_rank
    size = _int_env(env, "OMPI_COMM_WORLD_SIZE", _int_env(env, "MV2_COMM_WORLD_SIZE",
                                                         _int_env(env, "MPI_SIZE", 0)))
    dmp_size = str(size if size > 0 else 1)
    job = env.get("SLURM_JOB_ID") or "0"
    argt = "_".join([os.path.basename(argv[0])] + argv[1:]) if argv else ""
    keys = [("%argv%", "_".join(argv)), ("%argt%", argt), ("%pid%", str(pid)),
            ("%ppid%", str(ppid)), ("%job%", job), ("%rank%", slurm_rank), ("%size%", dmp_size)]
    if v.key >= (6, 3):      # 6.2's output keys have no hostname
        keys.append(("%hostname%", socket.gethostname()))
    keys += [("%p", str(pid)), ("%j", job), ("%r", slurm_rank), ("%s", dmp_size)]
    if v.key >= (6, 3):
        keys.append(("%h", socket.gethostname()))
    return keys


_ENV_RES = (re.compile(r"(.*)%(env|ENV)\{([A-Z0-9_]+)\}%(.*)", re.S),
            re.compile(r"(.*)\$(env|ENV)\{([A-Z0-9_]+)\}(.*)", re.S))


def expand(v: Version, template: str, pid: int, ppid: int, env: dict, argv: list[str]) -> str:
    """Expand ``-d``/``-o`` placeholders as the tool does in each process: plain replacement
    of every key in order, then ``%env{NAME}%``/``$env{NAME}`` (NAME upper-case, missing -> "")."""
    if "%" not in template and "$" not in template:
        return template
    for key, val in output_keys(v, pid, ppid, env, argv):
        template = template.replace(key, val)
    for rx in _ENV_RES:
        while True:
            m = rx.search(template)
            if not m:
                break
            template = f"{m.group(1)}{env.get(m.group(3), '')}{m.group(4)}"
    return template


# --- CSV dialect (formats §2) ------------------------------------------------------------------

def cell(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'           # quoted, no escaping: exactly what rocprofv3 writes
    if isinstance(value, float):
        return f"{value:.6f}" if abs(value) >= 1 else f"{value:.8e}"
    return str(int(value))


def csv_text(header: list[str], rows: list[list]) -> str:
    lines = [",".join(f'"{h}"' for h in header)]
    lines += [",".join(cell(v) for v in row) for row in rows]
    return "\n".join(lines) + "\n"


KERNEL_TRACE_HEADER = {
    (6, 2): ["Kind", "Agent_Id", "Queue_Id", "Kernel_Id", "Kernel_Name", "Correlation_Id",
             "Start_Timestamp", "End_Timestamp", "Private_Segment_Size", "Group_Segment_Size",
             "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X",
             "Grid_Size_Y", "Grid_Size_Z"],
    (6, 4): ["Kind", "Agent_Id", "Queue_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
             "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp",
             "Private_Segment_Size", "Group_Segment_Size", "Workgroup_Size_X", "Workgroup_Size_Y",
             "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"],
    (7, 0): ["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
             "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size",
             "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X",
             "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z"],
}

COUNTER_HEADER = {
    (6, 2): ["Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id",
             "Grid_Size", "Kernel_Name", "Workgroup_Size", "LDS_Block_Size", "Scratch_Size",
             "VGPR_Count", "SGPR_Count", "Counter_Name", "Counter_Value"],
    (6, 4): ["Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id",
             "Grid_Size", "Kernel_Id", "Kernel_Name", "Workgroup_Size", "LDS_Block_Size",
             "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Counter_Name",
             "Counter_Value", "Start_Timestamp", "End_Timestamp"],
}
COUNTER_HEADER[(7, 0)] = COUNTER_HEADER[(6, 4)]
#: 6.3: Kernel_Id and timestamps, but no Accum_VGPR_Count yet (formats §3.2, 18 columns)
COUNTER_HEADER[(6, 3)] = [c for c in COUNTER_HEADER[(6, 4)] if c != "Accum_VGPR_Count"]

STATS_HEADER = ["Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage", "MinNs", "MaxNs",
                "StdDev"]

AGENT_INFO_HEADER = (
    "Node_Id Logical_Node_Id Agent_Type Cpu_Cores_Count Simd_Count Cpu_Core_Id_Base Simd_Id_Base "
    "Max_Waves_Per_Simd Lds_Size_In_Kb Gds_Size_In_Kb Num_Gws Wave_Front_Size Num_Xcc Cu_Count "
    "Array_Count Num_Shader_Banks Simd_Arrays_Per_Engine Cu_Per_Simd_Array Simd_Per_Cu "
    "Max_Slots_Scratch_Cu Gfx_Target_Version Vendor_Id Device_Id Location_Id Domain "
    "Drm_Render_Minor Num_Sdma_Engines Num_Sdma_Xgmi_Engines Num_Sdma_Queues_Per_Engine "
    "Num_Cp_Queues Max_Engine_Clk_Ccompute Max_Engine_Clk_Fcompute Sdma_Fw_Version Fw_Version "
    "Capability Cu_Per_Engine Max_Waves_Per_Cu Family_Id Workgroup_Max_Size Grid_Max_Size "
    "Local_Mem_Size Hive_Id Gpu_Id Workgroup_Max_Dim_X Workgroup_Max_Dim_Y Workgroup_Max_Dim_Z "
    "Grid_Max_Dim_X Grid_Max_Dim_Y Grid_Max_Dim_Z Name Vendor_Name Product_Name Model_Name"
).split()
assert len(AGENT_INFO_HEADER) == 53

_PRODUCTS = {"gfx942": ("AMD Instinct MI300X", 304, 8, 90402),
             "gfx950": ("AMD Instinct MI350X", 256, 8, 90500),
             "gfx90a": ("AMD Instinct MI210", 104, 1, 90010),
             "gfx1151": ("AMD Radeon 8060S Graphics", 40, 1, 110501)}


def header_key(v: Version, table: str = "kernel") -> tuple[int, int]:
    if v.major >= 7:
        return (7, 0)
    if v.key == (6, 2):
        return (6, 2)
    return (6, 3) if (table == "counter" and v.key == (6, 3)) else (6, 4)


def agent_info_rows(arch: str, n_gpus: int) -> list[list]:
    product, cus, xcc, gfx_ver = _PRODUCTS.get(arch, (f"AMD GPU {arch}", 64, 1, 0))
    rows = []
    cpu = {h: 0 for h in AGENT_INFO_HEADER}
    cpu.update(Node_Id=0, Logical_Node_Id=0, Agent_Type="CPU", Cpu_Cores_Count=16,
               Name="AMD EPYC 9454 48-Core Processor", Vendor_Name="CPU",
               Product_Name="AMD EPYC 9454 48-Core Processor", Model_Name="")
    rows.append([cpu[h] for h in AGENT_INFO_HEADER])
    for g in range(n_gpus):
        gpu = {h: 0 for h in AGENT_INFO_HEADER}
        gpu.update(Node_Id=1 + g, Logical_Node_Id=1 + g, Agent_Type="GPU", Simd_Count=cus * 4,
                   Max_Waves_Per_Simd=8, Lds_Size_In_Kb=64, Wave_Front_Size=64 if arch.startswith("gfx9") else 32,
                   Num_Xcc=xcc, Cu_Count=cus, Simd_Per_Cu=4, Gfx_Target_Version=gfx_ver,
                   Vendor_Id=4098, Max_Engine_Clk_Fcompute=2100, Workgroup_Max_Size=1024,
                   Name=arch, Vendor_Name="AMD", Product_Name=product, Model_Name="")
        rows.append([gpu[h] for h in AGENT_INFO_HEADER])
    return rows
