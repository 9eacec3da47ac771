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

Input contract (issue 10): every number is read exactly or rejected - integers beyond int64,
``inf``/``nan``/``1e400``, fractions in integer columns, text in numeric columns and NUL
characters are a :class:`~pytest_gemmperf.errors.GemmperfInputError` naming the file, line,
data row and column; no value passes through float64. Unknown extra columns are ignored with a
note in ``meta["notes"]`` (or ``attrs["notes"]`` for the table readers). Layout detection lives
in :mod:`~pytest_gemmperf.traces.csv_layouts`, parsing in :mod:`~pytest_gemmperf.traces.csv_parse`,
cell conversion in :mod:`~pytest_gemmperf.traces.csv_values`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.csv_layouts import (  # noqa: F401  (re-exported API)
    _STATS,
    CsvKind,
    check_regular_file,
    detect_csv,
    file_type,
)
from pytest_gemmperf.traces.csv_parse import (
    _DICT,
    _Source,
    _at_row,
    _check_cells,
    _prepare_source,
    _read_table,
    _read_typed,
    _shown,
)
from pytest_gemmperf.traces.csv_values import floats_from_text, ints_from_text
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

#: integer columns of the CSVs kept as raw tables (API, scratch, allocation, PC sampling)
_RAW_INTS = frozenset({"start_timestamp", "end_timestamp", "correlation_id", "thread_id",
                       "process_id", "queue_id", "dispatch_id", "sample_timestamp",
                       "allocation_size", "stream_id"})


def _read_raw(path: str, kind: CsvKind) -> pd.DataFrame:
    """A CSV kept as a table: its integer columns exact and checked (nullable ``Int64``),
    every other column as text (flags and masks such as ``0x%016x`` stay as written)."""
    src = _prepare_source(path)
    types = {c: (pa.int64() if c.lower() in _RAW_INTS else pa.string()) for c in kind.known}
    table = _read_typed(src, kind, types, list(types))
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


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
