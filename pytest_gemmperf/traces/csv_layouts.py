"""rocprofv3 / rocprof-v1 CSV layouts: the header catalogue and :func:`detect_csv`.

Headers follow ``docs/rocprofv3-formats.md`` (shared docs) sections 2, 3, 7 and 9; they are
compared case-insensitively so that the ``rocpd convert`` spelling matches too. A header with
every column of a documented layout plus unknown ones is that layout with ``extra`` columns
(newer rocprofv3 releases add columns); a header short of a documented layout's columns is an
error naming them.
"""

from __future__ import annotations

import csv
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from pytest_gemmperf.errors import GemmperfInputError

# --------------------------------------------------------------------------------------------
# Header catalogue (verbatim from the formats doc; compared case-insensitively so that the
# rocpd-convert spelling matches too)
# --------------------------------------------------------------------------------------------

_KT_62 = ("Kind", "Agent_Id", "Queue_Id", "Kernel_Id", "Kernel_Name", "Correlation_Id",
          "Start_Timestamp", "End_Timestamp", "Private_Segment_Size", "Group_Segment_Size",
          "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X",
          "Grid_Size_Y", "Grid_Size_Z")
_KT_63 = ("Kind", "Agent_Id", "Queue_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
          "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Private_Segment_Size",
          "Group_Segment_Size", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
          "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")
_KT_19 = ("Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
          "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp",
          "Private_Segment_Size", "Group_Segment_Size", "Workgroup_Size_X", "Workgroup_Size_Y",
          "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")
_KT_7X = ("Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
          "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size",
          "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X",
          "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")
_CC_62 = ("Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id",
          "Grid_Size", "Kernel_Name", "Workgroup_Size", "LDS_Block_Size", "Scratch_Size",
          "VGPR_Count", "SGPR_Count", "Counter_Name", "Counter_Value")
_CC_16 = ("Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id",
          "Grid_Size", "Kernel_Id", "Kernel_Name", "Workgroup_Size", "LDS_Block_Size",
          "Scratch_Size", "VGPR_Count", "SGPR_Count", "Counter_Name", "Counter_Value")
_CC_63 = _CC_16 + ("Start_Timestamp", "End_Timestamp")
_CC_64 = ("Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id",
          "Grid_Size", "Kernel_Id", "Kernel_Name", "Workgroup_Size", "LDS_Block_Size",
          "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Counter_Name",
          "Counter_Value", "Start_Timestamp", "End_Timestamp")
_AGENT_INFO = ("Node_Id", "Logical_Node_Id", "Agent_Type", "Cpu_Cores_Count", "Simd_Count",
               "Cpu_Core_Id_Base", "Simd_Id_Base", "Max_Waves_Per_Simd", "Lds_Size_In_Kb",
               "Gds_Size_In_Kb", "Num_Gws", "Wave_Front_Size", "Num_Xcc", "Cu_Count",
               "Array_Count", "Num_Shader_Banks", "Simd_Arrays_Per_Engine", "Cu_Per_Simd_Array",
               "Simd_Per_Cu", "Max_Slots_Scratch_Cu", "Gfx_Target_Version", "Vendor_Id",
               "Device_Id", "Location_Id", "Domain", "Drm_Render_Minor", "Num_Sdma_Engines",
               "Num_Sdma_Xgmi_Engines", "Num_Sdma_Queues_Per_Engine", "Num_Cp_Queues",
               "Max_Engine_Clk_Ccompute", "Max_Engine_Clk_Fcompute", "Sdma_Fw_Version",
               "Fw_Version", "Capability", "Cu_Per_Engine", "Max_Waves_Per_Cu", "Family_Id",
               "Workgroup_Max_Size", "Grid_Max_Size", "Local_Mem_Size", "Hive_Id", "Gpu_Id",
               "Workgroup_Max_Dim_X", "Workgroup_Max_Dim_Y", "Workgroup_Max_Dim_Z",
               "Grid_Max_Dim_X", "Grid_Max_Dim_Y", "Grid_Max_Dim_Z", "Name", "Vendor_Name",
               "Product_Name", "Model_Name")
_STATS = ("Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage", "MinNs", "MaxNs",
          "StdDev")
_STATS_V1 = ("Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage")
_MEMCPY_6X = ("Kind", "Direction", "Source_Agent_Id", "Destination_Agent_Id", "Correlation_Id",
              "Start_Timestamp", "End_Timestamp")
_MEMCPY_7X = ("Kind", "Direction", "Stream_Id", "Source_Agent_Id", "Destination_Agent_Id",
              "Correlation_Id", "Start_Timestamp", "End_Timestamp")
_API = ("Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp",
        "End_Timestamp")
_SCRATCH = ("Kind", "Operation", "Agent_Id", "Queue_Id", "Thread_Id", "Alloc_Flags",
            "Start_Timestamp", "End_Timestamp")
_ALLOC = ("Kind", "Operation", "Agent_Id", "Allocation_Size", "Address", "Correlation_Id",
          "Start_Timestamp", "End_Timestamp")
_PC_HOST_TRAP = ("Sample_Timestamp", "Exec_Mask", "Dispatch_Id", "Instruction",
                 "Instruction_Comment", "Correlation_Id")
_V1_KERNEL_HEAD = ("Index", "KernelName")

_HEADERS: dict[tuple[str, ...], tuple[str, str]] = {}


_SPELLING: dict[str, str] = {}  # lower-case column -> as the formats doc spells it


def _register(cols: tuple[str, ...], kind: str, version: str) -> None:
    _HEADERS[tuple(c.lower() for c in cols)] = (kind, version)
    _SPELLING.update((c.lower(), c) for c in cols)


_register(_KT_62, "kernel_trace", "6.2")
_register(_KT_63, "kernel_trace", "6.3-6.4")
_register(_KT_19, "kernel_trace", "19col-transitional")
_register(_KT_7X, "kernel_trace", "7.x")
_register(_CC_62, "counter_collection", "6.2")
_register(_CC_16, "counter_collection", "16col-transitional")
_register(_CC_63, "counter_collection", "6.3")
_register(_CC_64, "counter_collection", "6.4-7.x")
_register(_AGENT_INFO, "agent_info", "6.2-7.x")
_register(_STATS, "kernel_stats", "6.2-7.x")
_register(_STATS_V1, "legacy_v1_stats", "rocprof-v1")
_register(_MEMCPY_6X, "memory_copy", "6.x")
_register(_MEMCPY_7X, "memory_copy", "7.x")
_register(_API, "api_trace", "6.2-7.x")
_register(_SCRATCH, "scratch_memory", "6.2-7.x")
_register(_SCRATCH + ("Allocation_Size",), "scratch_memory", "7.x-develop")
_register(_ALLOC, "memory_allocation", "6.3-7.x")
_register(_PC_HOST_TRAP, "pc_sampling", "6.4-7.x")

#: stats-file name suffix -> kind (the 8-column stats header is shared by all of them)
_STATS_SUFFIX = (("domain_stats.csv", "domain_stats"), ("api_stats.csv", "api_stats"),
                 ("hip_stats.csv", "api_stats"), ("hsa_stats.csv", "api_stats"),
                 ("marker_stats.csv", "api_stats"), ("memory_copy_stats.csv", "memory_copy_stats"),
                 ("memory_allocation_stats.csv", "memory_allocation_stats"),
                 ("scratch_memory_stats.csv", "scratch_memory_stats"))


@dataclass(frozen=True)
class CsvKind:
    """What :func:`detect_csv` learned from a file's header."""

    kind: str  # kernel_trace | counter_collection | agent_info | kernel_stats | api_stats | ...
    version: str  # "6.2", "6.3-6.4", "7.x", "19col-transitional", "rocpd-convert", ...
    n_cols: int
    columns: tuple[str, ...] = ()  # header cells as written
    rocpd_convert: bool = False
    #: header cells beyond the documented layout (a newer rocprofv3 adds columns); the readers
    #: skip them and say so in ``meta["notes"]``
    extra: tuple[str, ...] = ()

    @property
    def known(self) -> tuple[str, ...]:
        """Header cells of the documented layout, as written, in file order."""
        return tuple(c for c in self.columns if c not in self.extra)

    def notes(self, path: str) -> list[str]:
        if not self.extra:
            return []
        return [f"{path}: {len(self.extra)} column(s) not in the documented {self.version} "
                f"{self.kind} layout ignored: {', '.join(self.extra)}"]


def _read_head(path: str | os.PathLike, n_bytes: int = 65536) -> bytes:
    check_regular_file(path)
    try:
        with open(path, "rb") as fh:
            return fh.read(n_bytes)
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read file: {exc.strerror or exc}") from None


def check_regular_file(path: str | os.PathLike) -> None:
    """Refuse anything but a regular file (after following symlinks) before opening it: a FIFO
    named like a trace would block ``open`` forever, a device could stream without end."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read file: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise GemmperfInputError(path, f"not a regular file ({file_type(st.st_mode)}); "
                                       "refusing to read it")


def file_type(mode: int) -> str:
    """Words for a non-regular ``st_mode``."""
    for test, word in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "not a regular file"


def _parse_header(path, head: bytes) -> tuple[str, ...]:
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    if not text.strip():
        raise GemmperfInputError(path, "empty file (no CSV header)")
    first = text.splitlines()[0]
    if not first.strip():
        raise GemmperfInputError(path, "first line is blank, expected a CSV header", line=1)
    if "\x00" in first:
        raise GemmperfInputError(path, "NUL character in the CSV header", line=1)
    return tuple(c.strip() for c in next(csv.reader([first])))


def _layout_by_subset(key: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, str]] | None:
    """The largest documented layout whose columns all appear in ``key`` (any order)."""
    have = set(key)
    best = None
    for cols, hit in _HEADERS.items():
        if set(cols) <= have and (best is None or len(cols) > len(best[0])):
            best = (cols, hit)
    return best


def _closest_layout(key: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, str]] | None:
    """The documented layout sharing most columns with ``key`` (for a "missing column" error)."""
    have = set(key)
    best = max(_HEADERS.items(), key=lambda kv: (len(set(kv[0]) & have), -len(kv[0])))
    shared = len(set(best[0]) & have)
    return best if shared >= max(3, len(best[0]) // 2) else None


def detect_csv(path: str | os.PathLike) -> CsvKind:
    """Identify a rocprofv3 / rocprof-v1 CSV by its header row.

    A header that holds every column of a documented layout plus unknown ones is that layout
    with ``extra`` columns (future rocprofv3 releases add columns). Raises
    :class:`GemmperfInputError` (naming the file) for an empty file, a duplicated column, or a
    header that matches no documented layout (naming the missing columns when one is close).
    """
    cols = _parse_header(path, _read_head(path))
    low = tuple(c.lower() for c in cols)
    dup = sorted({c for c in low if low.count(c) > 1})
    if dup:
        raise GemmperfInputError(path, f"CSV header names column(s) {', '.join(dup)} twice", line=1)
    rocpd = bool(low) and low[0] == "guid"
    key = low[1:] if rocpd else low
    hit = _HEADERS.get(key)
    extra: tuple[str, ...] = ()
    if hit is None and not rocpd and key[:2] == tuple(c.lower() for c in _V1_KERNEL_HEAD):
        # rocprof v1 with pmc: input appends counter columns; accept any tail
        hit = ("legacy_v1_kernel", "rocprof-v1")
    if hit is None:
        sub = _layout_by_subset(key)
        if sub is not None and len(sub[0]) >= 5:
            known = set(sub[0]) | {"guid"}
            extra = tuple(c for c in cols if c.lower() not in known)
            # a column of a larger layout of the same kind means a damaged header of that
            # layout (a missing column), not a newer release adding columns
            same_kind = {c for cs, h in _HEADERS.items() if h[0] == sub[1][0] for c in cs}
            if not any(c.lower() in same_kind for c in extra):
                hit = sub[1]
    if hit is None:
        shown = ",".join(cols[:6]) + (",..." if len(cols) > 6 else "")
        close = _closest_layout(key)
        if close is not None and not (set(close[0]) - set(key)):
            close = None
        if close is not None:
            lowset = set(key)
            missing = [_SPELLING.get(c, c) for c in close[0] if c not in lowset]
            raise GemmperfInputError(path, f"CSV header lacks required column(s) "
                                           f"{', '.join(missing)} of the {close[1][1]} "
                                           f"{close[1][0]} layout", line=1)
        raise GemmperfInputError(path, f"unrecognised CSV header ({len(cols)} columns: {shown}); "
                                       "not a known rocprofv3/rocprof output", line=1)
    kind, version = hit
    if kind == "kernel_stats":
        name = Path(path).name.lower()
        kind = next((k for suf, k in _STATS_SUFFIX if name.endswith(suf)), kind)
    if rocpd:
        version = "rocpd-convert"
    return CsvKind(kind=kind, version=version, n_cols=len(cols), columns=cols, rocpd_convert=rocpd,
                   extra=extra)
