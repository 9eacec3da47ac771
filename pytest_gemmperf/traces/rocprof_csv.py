"""rocprofv3 CSV readers (ROCm 6.2 -> 7.x, ``rocpd convert`` output, legacy rocprof v1).

Formats follow ``docs/rocprofv3-formats.md`` (shared docs) sections 2, 3, 7 and 9:

* every header cell is double-quoted, string cells are quoted without escaping, numbers are
  bare; floats may be ``16384.000000`` or ``4.34259040e-02``;
* the version is told by the header: ``kernel_trace.csv`` has 16 (6.2), 18 (6.3/6.4),
  19 (unreleased transitional) or 22 (7.x) columns; a leading ``"Guid"`` is the ``rocpd convert``
  dialect (ROCm 7.1.1 spells ``Lds_Block_Size``/``Vgpr_Count``...);
* rows are in buffer order, not time order: this module keeps file order and never relies on it.

The kernel-trace path is the hot one (a million dispatches per process is ordinary), so it
parses with pyarrow using explicit column types, dictionary-encodes the string columns (they
become pandas categoricals for free) and builds every canonical column itself, so
:func:`~pytest_gemmperf.traces.schema.finalize_dispatches` has nothing left to convert.
"""

from __future__ import annotations

import csv
import io
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.csv_values import (
    first_non_finite,
    first_nul,
    floats_from_text,
    ints_from_text,
)
from pytest_gemmperf.traces.schema import (
    AGENT_SCHEMA,
    DISPATCH_SCHEMA,
    INT,
    STR,
    Trace,
    empty,
    finalize_agents,
    finalize_counters,
    finalize_dispatches,
    short_name,
)

SOURCE = "rocprofv3-csv"

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


# --------------------------------------------------------------------------------------------
# Low-level parsing helpers
# --------------------------------------------------------------------------------------------

_DICT = pa.dictionary(pa.int32(), pa.string())
_TRUNC_MARKER = b"..."


@dataclass
class _Source:
    """Where pyarrow reads from: the path itself, or the bytes before a ``...`` marker."""

    path: str
    data: bytes | None = None
    truncated_marker: bool = False
    marker_line: int | None = None

    def open(self):
        return io.BytesIO(self.data) if self.data is not None else self.path

    def lines(self):
        if self.data is not None:
            return io.StringIO(self.data.decode("utf-8", errors="replace"))
        return open(self.path, encoding="utf-8", errors="replace", newline="")


def _prepare_source(path: str) -> _Source:
    """Honour the docs' ``...`` truncation marker when it is the last non-blank line.

    Only documentation samples carry it, so the whole-file read below touches small files only.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        fh.seek(max(0, size - 4096))
        tail = fh.read()
    stripped = tail.rstrip()
    last_line = stripped.rsplit(b"\n", 1)[-1].strip()
    if last_line != _TRUNC_MARKER:
        return _Source(path)
    with open(path, "rb") as fh:
        data = fh.read()
    body = data.rstrip()
    cut = body.rfind(b"\n")
    marker_line = body[: cut + 1].count(b"\n") + 1
    return _Source(path, data=body[: cut + 1], truncated_marker=True, marker_line=marker_line)


def _records(src: _Source):
    """(first physical line, fields) of each non-blank CSV record, the header included.

    Error path only. ``csv.reader`` keeps a quoted newline inside its record, so line numbers
    stay right for kernel names that span lines.
    """
    with src.lines() as fh:
        reader = csv.reader(fh)
        prev = 0
        try:
            for fields in reader:
                start, prev = prev + 1, reader.line_num
                if not fields or (len(fields) == 1 and not fields[0].strip()):
                    continue
                yield start, fields
        except csv.Error:
            return


def _find_bad_row(src: _Source, n_cols: int) -> tuple[int, int] | None:
    """(line, n_fields) of the first non-blank record whose field count differs (error path)."""
    for lineno, fields in _records(src):
        if len(fields) != n_cols:
            return lineno, len(fields)
    return None


def _line_of_row(src: _Source, row: int) -> int | None:
    """Physical line number of data row ``row`` (0-based, after the header; error path only)."""
    for seen, (lineno, _) in enumerate(_records(src), -1):  # the header is row -1
        if seen == row:
            return lineno
    return None


def _at_row(src: _Source, row: int, message: str, *, record: str | None = None) -> GemmperfInputError:
    """An error for data row ``row`` (0-based): the file, its line and ``row N`` (1-based)."""
    where = f"row {row + 1}" + (f", {record}" if record else "")
    return GemmperfInputError(src.path, message, line=_line_of_row(src, row), record=where)


def _shown(text: str, limit: int = 60) -> str:
    """A cell for an error message: repr, cut to ``limit`` characters (cells can be 1 MB)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def _read_table(src: _Source, kind: CsvKind, types: dict[str, pa.DataType],
                include: list[str] | None = None, *, strings_null: bool = False,
                newlines: bool = False) -> pa.Table:
    """Parse with pyarrow; turn its errors into one-line messages with a line number.

    Fast path ``newlines_in_values=False`` (block splitting on any newline). A quoted newline
    in a kernel name either parses correctly inside a block or, where it straddles a block
    boundary, makes pyarrow fail (the cut record is short of fields: string columns are never
    last); any parse failure is therefore retried once with quote-aware splitting before it is
    reported.
    """
    ro = pacsv.ReadOptions(use_threads=True)
    po = pacsv.ParseOptions(newlines_in_values=newlines)
    # only an empty cell is missing: pyarrow's default null spellings ("nan", "NULL", "N/A",
    # ...) would turn text in a numeric column into a silent gap
    co = pacsv.ConvertOptions(column_types=types, include_columns=include, null_values=[""],
                              strings_can_be_null=strings_null, quoted_strings_can_be_null=False)
    try:
        return pacsv.read_csv(src.open(), read_options=ro, parse_options=po, convert_options=co)
    except pa.ArrowInvalid as exc:
        msg = str(exc)
        if _CONV_ERR.search(msg):
            raise  # _read_typed retries leniently
        if not newlines:
            return _read_table(src, kind, types, include, strings_null=strings_null, newlines=True)
        if "Expected" in msg and "columns" in msg:
            bad = _find_bad_row(src, kind.n_cols)
            if bad is not None:
                line, n = bad
                raise GemmperfInputError(src.path, f"row has {n} fields, the {kind.version} "
                                                   f"{kind.kind} header has {kind.n_cols}",
                                         line=line) from None
        raise GemmperfInputError(src.path, f"cannot parse CSV: {msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GemmperfInputError(src.path, f"cannot parse CSV: {exc}") from None


def _type_ok(got: pa.DataType, want: pa.DataType) -> bool:
    if got == want:
        return True
    if pa.types.is_floating(want):
        return pa.types.is_integer(got) or pa.types.is_floating(got)
    return False


_CONV_ERR = re.compile(r"In CSV column #(\d+): CSV conversion error to (\w+): invalid value '([^']*)'")


def _read_typed(src: _Source, kind: CsvKind, types: dict[str, pa.DataType],
                include: list[str] | None = None) -> pa.Table:
    """Parse numbers fast and exactly; reject what is not a number of the column's type.

    Fast path: string columns typed (dictionary-encoded), int64 columns left to pyarrow's
    inference, which measured faster than declaring them (pyarrow 26) and yields int64 for
    every well-formed rocprofv3 file. If a column comes back as anything else (``16384.000000``
    or ``1.6384e+04`` in an integer column, empty cells, integers beyond int64, which pyarrow
    infers as *double*), or a declared type fails, the numeric columns are re-read as text and
    converted exactly by :mod:`~pytest_gemmperf.traces.csv_values`, which names the first bad
    cell (row, line, column, reason). Float columns must be finite; no string cell may hold a
    NUL character.
    """
    types = {c: t for c, t in types.items() if c not in kind.extra}
    declared = {c: t for c, t in types.items() if t != pa.int64()}
    try:
        table = _read_table(src, kind, declared, include)
        if all(_type_ok(table.schema.field(c).type, t) for c, t in types.items()
               if c in table.column_names) and not _any_negative(table, types):
            _check_cells(src, table)
            return table
    except pa.ArrowInvalid as exc:
        if not _CONV_ERR.search(str(exc)):
            raise GemmperfInputError(src.path, f"cannot parse CSV: {exc}") from None
    loose = {c: (pa.string() if pa.types.is_integer(t) or pa.types.is_floating(t) else t)
             for c, t in types.items()}
    try:
        table = _read_table(src, kind, loose, include, strings_null=True)
    except pa.ArrowInvalid as exc:
        raise GemmperfInputError(src.path, f"cannot parse CSV: {exc}") from None
    cols = {}
    for name in table.column_names:
        t = types.get(name)
        col = table.column(name)
        problem = None
        if t is not None and pa.types.is_integer(t):
            col, problem = ints_from_text(col, t)
        elif t is not None and pa.types.is_floating(t):
            col, problem = floats_from_text(col)
        if problem is not None:
            row, text, reason = problem
            raise _at_row(src, row, f"column {name!r}: {_shown(text)} {reason}")
        cols[name] = col
    table = pa.table(cols)
    _check_cells(src, table)
    return table


def _any_negative(table: pa.Table, types: dict[str, pa.DataType]) -> bool:
    """Whether an inferred int64 column holds a negative value.

    pyarrow's inference reads hex literals and wraps ``0x8000000000000000`` and above to
    negative int64 values without a word; rocprofv3 writes no negative integers, so a negative
    value sends the file through the exact text path, which tells the two apart (one min per
    column, about a millisecond per million rows).
    """
    for name in table.column_names:
        if types.get(name) == pa.int64() and pa.types.is_integer(table.schema.field(name).type):
            low = pc.min(table.column(name)).as_py()
            if low is not None and low < 0:
                return True
    return False


def _check_cells(src: _Source, table: pa.Table) -> None:
    """Reject non-finite floats (pyarrow reads ``inf``/``nan``/``1e400`` silently) and NUL
    characters in strings (they would make a second, invisible spelling of a kernel name)."""
    for name in table.column_names:
        col = table.column(name)
        row = first_non_finite(col)
        if row is not None:
            raise _at_row(src, row, f"column {name!r}: {col[row].as_py()!r} is not a finite number")
        if pa.types.is_dictionary(col.type) or pa.types.is_string(col.type):
            row = first_nul(col)
            if row is not None:
                raise _at_row(src, row, f"column {name!r}: {_shown(str(col[row].as_py()))} "
                                        "contains a NUL character")


# --------------------------------------------------------------------------------------------
# Column builders (cheap pandas columns straight from arrow / numpy)
# --------------------------------------------------------------------------------------------

def _const_cat(value: Any, n: int) -> pd.Categorical:
    if value is None:
        return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), categories=pd.Index([], dtype="str"))
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[value])


def _const_int(value: int | None, n: int) -> pd.api.extensions.ExtensionArray:
    if value is None:
        return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    return pd.arrays.IntegerArray(np.full(n, value, dtype=np.int64), np.zeros(n, dtype=bool))


def _int_col(col: pa.ChunkedArray) -> pd.api.extensions.ExtensionArray:
    """Arrow int column -> pandas ``Int64`` without a float round trip."""
    if col.type != pa.int64():
        col = pc.cast(col, pa.int64())
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if arr.null_count == 0:
        values = arr.to_numpy(zero_copy_only=False)
        return pd.arrays.IntegerArray(values, np.zeros(len(values), dtype=bool))
    mask = arr.is_null().to_numpy(zero_copy_only=False)
    values = arr.fill_null(0).to_numpy(zero_copy_only=False)
    return pd.arrays.IntegerArray(values, mask)


def _ns_col(col: pa.ChunkedArray, src: _Source, name: str) -> np.ndarray:
    if col.null_count:
        i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise _at_row(src, i, f"column {name!r} is empty")
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return arr.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _cat_col(col: pa.ChunkedArray) -> pd.Categorical:
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    arr = col.unify_dictionaries().combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return arr.to_pandas().array


def map_category_values(cat: pd.Categorical | pd.Series, fn: Callable[[str], Any]) -> pd.Categorical:
    """Apply ``fn`` once per distinct category and remap codes (no per-row Python objects).

    ``fn`` returning None gives a missing value.
    """
    cat = cat.array if isinstance(cat, pd.Series) else cat
    mapped = [fn(str(c)) for c in cat.categories]
    uniq = sorted({str(v) for v in mapped if v is not None})
    index = {v: i for i, v in enumerate(uniq)}
    table = np.asarray([index[str(v)] if v is not None else -1 for v in mapped] + [-1], dtype=np.int32)
    codes = np.asarray(cat.codes)
    return pd.Categorical.from_codes(table[codes], categories=pd.Index(uniq, dtype="str"))


# --------------------------------------------------------------------------------------------
# Agent ids
# --------------------------------------------------------------------------------------------

_AGENT_RX = re.compile(r"^\s*(?:(Agent|GPU|CPU)\s+)?(\d+)\s*$", re.IGNORECASE)
_NUMBERING = {None: "node_id", "agent": "logical_node_id", "gpu": "gpu_index", "cpu": "cpu_index"}


def parse_agent_label(label: str) -> tuple[str | None, int] | None:
    """``"Agent 4"`` -> ("agent", 4); ``"GPU 0"`` -> ("gpu", 0); ``"3"`` -> (None, 3)."""
    m = _AGENT_RX.match(str(label))
    if not m:
        return None
    return (m.group(1).lower() if m.group(1) else None), int(m.group(2))


def _agent_column(labels: pd.Categorical, agents: pd.DataFrame | None, path: str
                  ) -> tuple[pd.api.extensions.ExtensionArray, dict[str, Any], pd.Categorical | None]:
    """Map ``Agent_Id`` labels to the canonical ``agent`` number (ARCHITECTURE "agent column").

    Returns (agent column, meta, gpu_arch column or None). Labels are parsed once per distinct
    value; rows only get their codes remapped.
    """
    cats = [str(c) for c in labels.categories]
    parsed = []
    for c in cats:
        p = parse_agent_label(c)
        if p is None:
            raise GemmperfInputError(path, f"Agent_Id {c!r} is neither an integer nor 'Agent N'/"
                                           "'GPU N'/'CPU N'")
        parsed.append(p)
    styles = {p[0] for p in parsed}
    numbering = _NUMBERING[next(iter(styles))] if len(styles) == 1 else "mixed"
    numbers = [p[1] for p in parsed]
    meta: dict[str, Any] = {"agent_labels": cats}
    archs: list[Any] | None = None
    if agents is not None and len(agents) and numbering in ("node_id", "logical_node_id", "gpu_index"):
        gpus = agents[agents["gpu_index"].notna()]
        key = {"node_id": "node_id", "logical_node_id": "logical_id", "gpu_index": "gpu_index"}[numbering]
        lookup = dict(zip(gpus[key].astype("int64"), gpus["gpu_index"].astype("int64")))
        arch_of = dict(zip(gpus["gpu_index"].astype("int64"), gpus["gpu_arch"].astype(object)))
        if all(n in lookup for n in numbers):
            numbers = [lookup[n] for n in numbers]
            archs = [arch_of.get(n) for n in numbers]
            meta["agent_numbering_in_file"] = numbering
            numbering = "gpu_index"
        else:
            missing = sorted(c for c, p in zip(cats, parsed) if p[1] not in lookup)
            meta["agent_map_warning"] = (f"Agent_Id {missing} not found among the GPU agents of "
                                         "the agent table; kept the numbers from the file")
    meta["agent_numbering"] = numbering
    table = np.asarray(numbers + [0], dtype=np.int64)
    codes = np.asarray(labels.codes)
    values = table[np.where(codes >= 0, codes, len(numbers))]
    arch_col = None
    if archs is not None:
        arch_col = map_category_values(labels, dict(zip(cats, archs)).get)
    return pd.arrays.IntegerArray(values, codes < 0), meta, arch_col


# --------------------------------------------------------------------------------------------
# Path conventions
# --------------------------------------------------------------------------------------------

_PID_PREFIX = re.compile(r"^(\d+)_[A-Za-z_]+\.csv$")
_PASS_DIR = re.compile(r"^(pass|pmc)_\d+$")


def host_pid_from_path(path: str | os.PathLike, version: str | None = None) -> tuple[str | None, int | None]:
    """``<host>/<pid>_kernel_trace.csv`` (6.3+ default prefix) -> (host, pid);
    ``<pid>_kernel_trace.csv`` (6.2 default, no host directory) -> (None, pid); else (None, None)."""
    p = Path(path)
    m = _PID_PREFIX.match(p.name)
    if not m:
        return None, None
    pid = int(m.group(1))
    parent = p.parent.name
    if version == "6.2" or not parent or _PASS_DIR.match(parent):
        return None, pid
    return parent, pid


def sibling_file(path: str | os.PathLike, suffix: str) -> Path | None:
    """``<prefix>kernel_trace.csv`` -> ``<prefix><suffix>.csv`` when it exists."""
    p = Path(path)
    for own in ("kernel_trace.csv", "counter_collection.csv", "kernel_stats.csv"):
        if p.name.endswith(own):
            cand = p.with_name(p.name[: -len(own)] + suffix + ".csv")
            return cand if cand.is_file() else None
    return None


# --------------------------------------------------------------------------------------------
# kernel_trace.csv
# --------------------------------------------------------------------------------------------

#: lower-case header name -> canonical column
_KT_MAP = {
    "agent_id": "_agent", "queue_id": "queue", "stream_id": "stream", "thread_id": "thread_id",
    "dispatch_id": "dispatch_id", "kernel_id": "kernel_id", "kernel_name": "kernel",
    "correlation_id": "correlation_id", "start_timestamp": "start_ns", "end_timestamp": "end_ns",
    # 7.x: LDS rounded up to 512 B granules; 6.x: raw group/private segment bytes
    "lds_block_size": "lds_bytes", "group_segment_size": "lds_bytes",
    "scratch_size": "scratch_bytes", "private_segment_size": "scratch_bytes",
    "vgpr_count": "vgpr", "accum_vgpr_count": "agpr", "sgpr_count": "sgpr",
    "workgroup_size_x": "wg_x", "workgroup_size_y": "wg_y", "workgroup_size_z": "wg_z",
    "grid_size_x": "grid_x", "grid_size_y": "grid_y", "grid_size_z": "grid_z",
    "guid": "guid",
}
_STRING_COLS = {"kind", "agent_id", "kernel_name", "guid", "counter_name", "direction",
                "source_agent_id", "destination_agent_id", "domain", "function", "name",
                "agent_type", "vendor_name", "product_name", "model_name", "operation",
                "address", "instruction", "instruction_comment", "kernelname", "sig", "obj"}


def _column_types(columns: tuple[str, ...], floats: set[str] = frozenset(),
                  uints: set[str] = frozenset()) -> dict[str, pa.DataType]:
    out: dict[str, pa.DataType] = {}
    for c in columns:
        lc = c.lower()
        if lc in _STRING_COLS:
            out[c] = _DICT
        elif lc in floats:
            out[c] = pa.float64()
        elif lc in uints:
            out[c] = pa.uint64()
        else:
            out[c] = pa.int64()
    return out


def _reject_negative(src: _Source, start: np.ndarray, end: np.ndarray, ids: Any = None) -> None:
    neg = end < start
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        rec = f"Dispatch_Id {ids[i]}" if ids is not None and not pd.isna(ids[i]) else None
        raise _at_row(src, i, f"{int(neg.sum())} dispatch(es) end before they start (first: "
                              f"start {start[i]} > end {end[i]})", record=rec)


def _finish_dispatches(cols: dict[str, Any], n: int, path: str, host: str | None,
                       pid: int | None) -> pd.DataFrame:
    """Fill every canonical column with a cheap, correctly typed array, then finalize."""
    from pytest_gemmperf.analysis.categories import category_of

    cols.setdefault("source", _const_cat(SOURCE, n))
    cols.setdefault("file", _const_cat(path, n))
    cols.setdefault("host", _const_cat(host, n))
    if "pid" not in cols:
        cols["pid"] = _const_int(pid, n)
    kern = cols["kernel"]
    cols["kernel_short"] = map_category_values(kern, short_name)
    cols["category"] = map_category_values(kern, category_of)
    for col, dtype in DISPATCH_SCHEMA.items():
        if col in cols or col in ("dur_ns", "zero_dur", "queue_overlap"):
            continue
        cols[col] = _const_cat(None, n) if dtype == STR else _const_int(None, n)
    order = [c for c in DISPATCH_SCHEMA if c in cols] + [c for c in cols if c not in DISPATCH_SCHEMA]
    df = pd.DataFrame({c: cols[c] for c in order}, copy=False)
    return finalize_dispatches(df, path)


def read_kernel_trace_csv(path: str | os.PathLike, *, agents: pd.DataFrame | None = None) -> Trace:
    """Read a rocprofv3 ``kernel_trace.csv`` (16/18/19/22 columns or rocpd-convert) or a legacy
    rocprof v1 ``results.csv`` into the canonical dispatches table.

    ``agents`` (a finalized agents table) maps ``Agent_Id`` to the 0-based GPU index; when it is
    None, an ``<prefix>agent_info.csv`` beside the file is used if present.
    """
    path = os.fspath(path)
    kind = detect_csv(path)
    if kind.kind == "legacy_v1_kernel":
        return _read_v1_kernel(path, kind)
    if kind.kind != "kernel_trace":
        raise GemmperfInputError(path, f"expected a kernel_trace.csv, found a {kind.kind} CSV "
                                       f"({kind.version}, {kind.n_cols} columns)")
    src = _prepare_source(path)
    wanted = [c for c in kind.known if c.lower() in _KT_MAP]
    table = _read_typed(src, kind, _column_types(kind.known), include=wanted)
    n = table.num_rows
    if n == 0:
        raise GemmperfInputError(path, "no kernel dispatches (header only)")
    names = {c: _KT_MAP[c.lower()] for c in wanted}
    cols: dict[str, Any] = {}
    for raw, canon in names.items():
        col = table.column(raw)
        if canon in ("start_ns", "end_ns"):
            cols[canon] = _ns_col(col, src, raw)
        elif canon in ("kernel", "guid"):
            cols[canon] = _cat_col(col)
        elif canon == "_agent":
            cols["_agent"] = _cat_col(col)
        else:
            cols[canon] = _int_col(col)
    del table
    _reject_negative(src, cols["start_ns"], cols["end_ns"], cols.get("dispatch_id"))

    agent_file = None
    if agents is None:
        sib = sibling_file(path, "agent_info")
        if sib is not None:
            agents = read_agent_info_csv(sib)
            agent_file = os.fspath(sib)
    cols["agent"], agent_meta, arch = _agent_column(cols.pop("_agent"), agents, path)
    if arch is not None:
        cols["gpu_arch"] = arch
    host, pid = host_pid_from_path(path, kind.version)
    dispatches = _finish_dispatches(cols, n, path, host, pid)

    meta: dict[str, Any] = {"format": "rocprofv3-csv", "csv_kind": kind.kind,
                            "csv_version": kind.version, "n_cols": kind.n_cols,
                            "truncated_marker": src.truncated_marker, **agent_meta}
    if src.truncated_marker:
        meta["truncated_marker_line"] = src.marker_line
    if host is not None or pid is not None:
        meta["host_pid_from"] = "path"
    if agent_file:
        meta["agent_info_file"] = agent_file
    notes = kind.notes(path) + (list(agents.attrs.get("notes", [])) if agent_file else [])
    if notes:
        meta["notes"] = notes
    files = [path] + ([agent_file] if agent_file else [])
    agents_df = agents if agents is not None else empty(AGENT_SCHEMA)
    return Trace(dispatches=dispatches, agents=agents_df, files=files, meta=meta)


def _read_v1_kernel(path: str, kind: CsvKind) -> Trace:
    """Legacy rocprof v1 ``results.csv`` (``"Index","KernelName",...,"BeginNs","EndNs"``)."""
    low = {c.lower(): c for c in kind.columns}
    if "beginns" not in low or "endns" not in low:
        raise GemmperfInputError(path, "rocprof v1 results.csv without BeginNs/EndNs columns")
    src = _prepare_source(path)
    types = {c: (_DICT if c.lower() in _STRING_COLS else pa.int64()) for c in kind.columns
             if c.lower() in _V1_MAP}
    table = _read_typed(src, kind, types, include=list(types))
    n = table.num_rows
    if n == 0:
        raise GemmperfInputError(path, "no kernel dispatches (header only)")
    cols: dict[str, Any] = {}
    for raw in types:
        canon = _V1_MAP[raw.lower()]
        col = table.column(raw)
        if canon in ("start_ns", "end_ns"):
            cols[canon] = _ns_col(col, src, raw)
        elif canon == "kernel":
            cols[canon] = _cat_col(col)
        else:
            cols[canon] = _int_col(col)
    _reject_negative(src, cols["start_ns"], cols["end_ns"], cols.get("dispatch_id"))
    dispatches = _finish_dispatches(cols, n, path, None, None)
    meta = {"format": "rocprof-v1-csv", "legacy": "rocprof-v1", "csv_kind": kind.kind,
            "csv_version": kind.version, "n_cols": kind.n_cols,
            "truncated_marker": src.truncated_marker, "agent_numbering": "gpu-id (rocprof v1)"}
    return Trace(dispatches=dispatches, files=[path], meta=meta)


_V1_MAP = {"index": "dispatch_id", "kernelname": "kernel", "gpu-id": "agent", "queue-id": "queue",
           "pid": "pid", "tid": "thread_id", "grd": "grid_x", "wgr": "wg_x", "lds": "lds_bytes",
           "scr": "scratch_bytes", "arch_vgpr": "vgpr", "accum_vgpr": "agpr", "sgpr": "sgpr",
           "beginns": "start_ns", "endns": "end_ns"}


# --------------------------------------------------------------------------------------------
# counter_collection.csv
# --------------------------------------------------------------------------------------------

_CC_MAP = {
    "correlation_id": "correlation_id", "dispatch_id": "dispatch_id", "agent_id": "_agent",
    "queue_id": "queue", "process_id": "pid", "thread_id": "thread_id", "grid_size": "grid_size",
    "kernel_id": "kernel_id", "kernel_name": "kernel", "workgroup_size": "wg_size",
    "lds_block_size": "lds_bytes", "scratch_size": "scratch_bytes", "vgpr_count": "vgpr",
    "accum_vgpr_count": "agpr", "sgpr_count": "sgpr", "counter_name": "counter",
    "counter_value": "value", "start_timestamp": "start_ns", "end_timestamp": "end_ns",
    "guid": "guid",
}


def read_counter_collection_csv(path: str | os.PathLike, *, agents: pd.DataFrame | None = None
                                ) -> pd.DataFrame:
    """Read ``counter_collection.csv`` (15/16/18/19 columns, rocpd-convert) into the finalized
    long counters table (one row per dispatch x counter; ``value`` is summed over dimensions by
    rocprofv3). Extra columns: thread_id, grid_size, wg_size, lds_bytes, scratch_bytes, vgpr,
    agpr, sgpr (agpr absent before 6.4)."""
    path = os.fspath(path)
    kind = detect_csv(path)
    if kind.kind != "counter_collection":
        raise GemmperfInputError(path, f"expected a counter_collection.csv, found a {kind.kind} CSV")
    src = _prepare_source(path)
    wanted = [c for c in kind.known if c.lower() in _CC_MAP]
    table = _read_typed(src, kind, _column_types(kind.known, floats={"counter_value"}), wanted)
    n = table.num_rows
    if n == 0:  # rocprofv3 writes no file when nothing was collected, so this is damage
        raise GemmperfInputError(path, "no counter records (header only)")
    cols: dict[str, Any] = {}
    for raw in wanted:
        canon = _CC_MAP[raw.lower()]
        col = table.column(raw)
        if canon in ("kernel", "counter", "guid", "_agent"):
            cols[canon] = _cat_col(col)
        elif canon == "value":
            cols[canon] = col.to_numpy().astype("float64", copy=False)
        else:
            cols[canon] = _int_col(col)
    if agents is None:
        sib = sibling_file(path, "agent_info")
        agents = read_agent_info_csv(sib) if sib is not None else None
    cols["agent"], _meta, arch = _agent_column(cols.pop("_agent"), agents, path)
    cols["source"] = _const_cat(SOURCE, n)
    cols["file"] = _const_cat(path, n)
    host, pid = host_pid_from_path(path, kind.version)
    cols["host"] = _const_cat(host, n)
    df = pd.DataFrame(cols, copy=False)
    out = finalize_counters(df, path)
    out.attrs.update(_meta)
    if kind.extra:
        out.attrs["notes"] = kind.notes(path)
    return out


# --------------------------------------------------------------------------------------------
# agent_info.csv
# --------------------------------------------------------------------------------------------

_AGENT_MAP = {"node_id": "node_id", "logical_node_id": "logical_id", "agent_type": "type",
              "name": "gpu_arch", "gfx_target_version": "gfx_target_version",
              "product_name": "product", "cu_count": "cu_count", "simd_per_cu": "simd_per_cu",
              "wave_front_size": "wave_size", "max_engine_clk_fcompute": "max_clock_mhz",
              "num_xcc": "xcc_count"}


def read_agent_info_csv(path: str | os.PathLike) -> pd.DataFrame:
    """Read ``agent_info.csv`` (53 columns, identical 6.2 -> 7.x) into the finalized agents table.

    ``gpu_index`` = 0-based position of the GPU among GPU agents in ``Node_Id`` order (CPUs and
    other agents: null). The remaining columns follow as lower-case extras; ``Hive_Id`` is
    unsigned 64-bit (``UInt64``).
    """
    path = os.fspath(path)
    kind = detect_csv(path)
    if kind.kind != "agent_info":
        raise GemmperfInputError(path, f"expected an agent_info.csv, found a {kind.kind} CSV")
    src = _prepare_source(path)
    types = {c: (pa.string() if c.lower() in _STRING_COLS else
                 pa.uint64() if c.lower() in ("hive_id", "location_id", "capability") else pa.int64())
             for c in kind.known}
    table = _read_typed(src, kind, types, list(types))
    if table.num_rows == 0:
        raise GemmperfInputError(path, "no agents (header only)")
    raw = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype(),
                                        pa.uint64(): pd.UInt64Dtype()}.get)
    df = pd.DataFrame({_AGENT_MAP.get(c.lower(), c.lower()): raw[c] for c in raw.columns})
    df = df.sort_values("node_id", kind="stable").reset_index(drop=True)
    is_gpu = (df["type"].astype(str) == "GPU").to_numpy()
    gpu_index = np.cumsum(is_gpu) - 1
    df["gpu_index"] = pd.array(np.where(is_gpu, gpu_index, 0), dtype=INT)
    df.loc[~is_gpu, "gpu_index"] = pd.NA
    for c in ("gpu_arch", "product"):
        df[c] = df[c].where(df[c].astype(str) != "", None)
    df["gpu_arch"] = df["gpu_arch"].where(is_gpu, None)  # a CPU agent's Name is its model
    df["source"] = SOURCE
    host, pid = host_pid_from_path(path)
    df["host"] = host
    df["pid"] = pid
    out = finalize_agents(df, path)
    if kind.extra:
        out.attrs["notes"] = kind.notes(path)
    return out


# --------------------------------------------------------------------------------------------
# stats files
# --------------------------------------------------------------------------------------------

STATS_COLUMNS = _STATS


def read_kernel_stats_csv(path: str | os.PathLike) -> pd.DataFrame:
    """Read a ``--stats`` file (``kernel_stats.csv``, ``*_api_stats.csv``, ``domain_stats.csv``)
    or a rocprof v1 ``results.stats.csv`` (5 columns: MinNs/MaxNs/StdDev come back as NA).

    Columns: Name, Calls, TotalDurationNs, AverageNs, Percentage, MinNs, MaxNs, StdDev.
    """
    path = os.fspath(path)
    kind = detect_csv(path)
    if kind.kind not in ("kernel_stats", "api_stats", "domain_stats", "memory_copy_stats",
                         "memory_allocation_stats", "scratch_memory_stats", "legacy_v1_stats"):
        raise GemmperfInputError(path, f"expected a stats CSV, found a {kind.kind} CSV")
    src = _prepare_source(path)
    types = {c: pa.string() for c in kind.known}  # numbers checked below, with their line
    table = _read_table(src, kind, types, list(types))
    if table.num_rows == 0:
        raise GemmperfInputError(path, "no stats rows (header only)")
    _check_cells(src, table)
    out: dict[str, Any] = {"Name": pd.array(table.column("Name").to_numpy(zero_copy_only=False),
                                            dtype="str")}
    for c in _STATS[1:]:
        if c not in types:
            out[c] = pd.array([pd.NA] * table.num_rows, dtype=INT if c in ("MinNs", "MaxNs") else "Float64")
            continue
        integral = c in ("Calls", "TotalDurationNs", "MinNs", "MaxNs")
        arr, problem = ints_from_text(table.column(c)) if integral else floats_from_text(table.column(c))
        if problem is None and arr.null_count:
            problem = (int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0]), "",
                       "is not a number")
        if problem is not None:
            row, text, reason = problem
            raise _at_row(src, row, f"column {c!r}: {_shown(text)} {reason}")
        values = arr.to_numpy(zero_copy_only=False)
        out[c] = pd.array(values, dtype=INT) if c in ("MinNs", "MaxNs") else values
    df = pd.DataFrame(out)
    df.attrs.update({"csv_kind": kind.kind, "csv_version": kind.version, "file": path,
                     "truncated_marker": src.truncated_marker})
    if kind.extra:
        df.attrs["notes"] = kind.notes(path)
    return df


# --------------------------------------------------------------------------------------------
# memory_copy_trace.csv
# --------------------------------------------------------------------------------------------

MEMORY_COPY_COLUMNS = ("kind", "direction", "stream", "src_agent", "dst_agent", "correlation_id",
                       "start_ns", "end_ns", "dur_ns", "file")


def read_memory_copy_csv(path: str | os.PathLike) -> pd.DataFrame:
    """Read ``memory_copy_trace.csv`` (7 columns 6.x, 8 with ``Stream_Id`` 7.x). ``direction``
    keeps the file's spelling (``HOST_TO_DEVICE`` in 6.2, ``MEMORY_COPY_HOST_TO_DEVICE`` later);
    agents are the numbers of ``N`` / ``"Agent N"`` (no byte counts exist in this CSV)."""
    path = os.fspath(path)
    kind = detect_csv(path)
    if kind.kind != "memory_copy":
        raise GemmperfInputError(path, f"expected a memory_copy_trace.csv, found a {kind.kind} CSV")
    src = _prepare_source(path)
    table = _read_typed(src, kind, _column_types(kind.known), list(kind.known))
    n = table.num_rows
    if n == 0:
        raise GemmperfInputError(path, "no memory copies (header only)")
    low = {c.lower(): c for c in kind.columns}
    start = _ns_col(table.column(low["start_timestamp"]), src, "Start_Timestamp")
    end = _ns_col(table.column(low["end_timestamp"]), src, "End_Timestamp")
    neg = end < start
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        raise _at_row(src, i, f"{int(neg.sum())} copies end before they start (first: start "
                              f"{start[i]} > end {end[i]})")
    src_agent, _, _ = _agent_column(_cat_col(table.column(low["source_agent_id"])), None, path)
    dst_agent, _, _ = _agent_column(_cat_col(table.column(low["destination_agent_id"])), None, path)
    df = pd.DataFrame({
        "kind": _cat_col(table.column(low["kind"])),
        "direction": _cat_col(table.column(low["direction"])),
        "stream": _int_col(table.column(low["stream_id"])) if "stream_id" in low else _const_int(None, n),
        "src_agent": src_agent,
        "dst_agent": dst_agent,
        "correlation_id": _int_col(table.column(low["correlation_id"])),
        "start_ns": start,
        "end_ns": end,
        "dur_ns": end - start,
        "file": _const_cat(path, n),
    })
    df.attrs.update({"csv_version": kind.version})
    if kind.extra:
        df.attrs["notes"] = kind.notes(path)
    return df


# --------------------------------------------------------------------------------------------
# Any rocprofv3 CSV
# --------------------------------------------------------------------------------------------

def _read_raw(path: str, kind: CsvKind) -> pd.DataFrame:
    src = _prepare_source(path)
    types = {c: pa.string() for c in kind.columns if c.lower() in _STRING_COLS}
    return _read_typed(src, kind, types).to_pandas()


def _empty_dispatches(path: str) -> pd.DataFrame:
    return finalize_dispatches(empty(DISPATCH_SCHEMA), path, allow_empty=True)


def read_rocprof_csv(path: str | os.PathLike) -> Trace:
    """Read any rocprofv3 CSV into a :class:`Trace`, dispatching on :func:`detect_csv`.

    kernel_trace / legacy v1 -> dispatches; counter_collection -> counters (dispatches empty);
    agent_info -> agents; stats files -> ``meta[<kind>]`` (e.g. ``meta["kernel_stats"]``);
    memory_copy -> ``meta["memory_copy"]``; other CSVs -> ``meta[<kind>]`` as parsed.
    """
    path = os.fspath(path)
    kind = detect_csv(path)
    base = {"format": "rocprofv3-csv", "csv_kind": kind.kind, "csv_version": kind.version,
            "n_cols": kind.n_cols}
    if kind.extra:
        base["notes"] = kind.notes(path)
    if kind.kind in ("kernel_trace", "legacy_v1_kernel"):
        return read_kernel_trace_csv(path)
    if kind.kind == "counter_collection":
        counters = read_counter_collection_csv(path)
        meta = {**base, **counters.attrs}
        counters.attrs = {}
        return Trace(dispatches=_empty_dispatches(path), counters=counters, files=[path], meta=meta)
    if kind.kind == "agent_info":
        return Trace(dispatches=_empty_dispatches(path), agents=read_agent_info_csv(path),
                     files=[path], meta=base)
    if kind.kind.endswith("_stats"):
        stats = read_kernel_stats_csv(path)
        return Trace(dispatches=_empty_dispatches(path), files=[path], meta={**base, kind.kind: stats})
    if kind.kind == "memory_copy":
        return Trace(dispatches=_empty_dispatches(path), files=[path],
                     meta={**base, "memory_copy": read_memory_copy_csv(path)})
    return Trace(dispatches=_empty_dispatches(path), files=[path],
                 meta={**base, kind.kind: _read_raw(path, kind)})
