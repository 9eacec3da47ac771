"""rocprofv3 ``kernel_trace.csv`` and legacy rocprof v1 ``results.csv`` -> canonical dispatches.

Split from :mod:`pytest_gemmperf.traces.rocprof_csv` (the public entry; see its docstring for the
formats and the input contract). This is the hot path: a million dispatches per process is
ordinary, so the file is parsed by pyarrow with explicit column types, string columns arrive
dictionary-encoded (pandas categoricals for free), and every canonical column is built here
with its final dtype, so :func:`~pytest_gemmperf.traces.schema.finalize_dispatches` has
nothing left to convert.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces import csv_slim
from pytest_gemmperf.traces.coded import CodedDispatches, as_asked
from pytest_gemmperf.traces.csv_columns import (_STRING_COLS, SOURCE, _agent_column, _cat_col,
                                                _column_types, _const_cat, _const_int, _int_col,
                                                _ns_col, host_pid_from_path, map_category_values,
                                                sibling_file)
from pytest_gemmperf.traces.csv_layouts import CsvKind, detect_csv
from pytest_gemmperf.traces.csv_parse import _DICT, _Source, _at_row, _prepare_source, _read_typed
from pytest_gemmperf.traces.csv_tables import read_agent_info_csv
from pytest_gemmperf.traces.schema import (
    AGENT_SCHEMA,
    DISPATCH_SCHEMA,
    STR,
    NoDispatches,
    Trace,
    empty,
    finalize_dispatch_columns,
    short_name,
)
from pytest_gemmperf.traces.categories import category_of

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
    cols = _typed_columns(cols, n, path, host, pid)
    order = [c for c in DISPATCH_SCHEMA if c in cols] + [c for c in cols if c not in DISPATCH_SCHEMA]
    return finalize_dispatch_columns({c: cols[c] for c in order}, pd.RangeIndex(n), path)


def _typed_columns(cols: dict[str, Any], n: int, path: str, host: str | None, pid: int | None,
                   only: Sequence[str] | None = None) -> dict[str, Any]:
    """``cols`` with every canonical column but those ``finalize_dispatches`` derives (``only``:
    those of them among ``only``) as a cheap, correctly typed array: what the finalized table
    holds of them (it coerces none of these dtypes)."""
    def wanted(col: str) -> bool:
        return only is None or col in only

    for col, made in (("source", lambda: _const_cat(SOURCE, n)), ("file", lambda: _const_cat(path, n)),
                      ("host", lambda: _const_cat(host, n)), ("pid", lambda: _const_int(pid, n))):
        if col not in cols and wanted(col):
            cols[col] = made()
    kern = cols["kernel"]
    for col, fn in (("kernel_short", short_name), ("category", category_of)):
        if wanted(col):
            cols[col] = map_category_values(kern, fn)
    for col, dtype in DISPATCH_SCHEMA.items():
        if col in cols or col in ("dur_ns", "zero_dur", "queue_overlap") or not wanted(col):
            continue
        cols[col] = _const_cat(None, n) if dtype == STR else _const_int(None, n)
    return cols


def read_kernel_trace_csv(path: str | os.PathLike, *, agents: pd.DataFrame | None = None,
                          columns: Sequence[str] | None = None, coded: bool = False) -> Trace:
    """Read a rocprofv3 ``kernel_trace.csv`` (16/18/19/22 columns or rocpd-convert) or a legacy
    rocprof v1 ``results.csv`` into the canonical dispatches table.

    ``agents`` (a finalized agents table) maps ``Agent_Id`` to the 0-based GPU index; when it is
    None, an ``<prefix>agent_info.csv`` beside the file is used if present.
    ``columns``: the dispatch columns the caller reads (None: all). Where they are among
    :data:`~pytest_gemmperf.traces.csv_slim.SLIM_COLUMNS` the file is read a block at a time
    (``traces/csv_slim.py``: the same checks and errors, the columns equal to the full table's);
    ``coded``: then the dispatches as :class:`~pytest_gemmperf.traces.coded.CodedDispatches`.
    """
    path = os.fspath(path)
    kind = detect_csv(path)
    if kind.kind == "legacy_v1_kernel":
        return as_asked(_read_v1_kernel(path, kind), columns, coded)
    if kind.kind != "kernel_trace":
        raise GemmperfInputError(path, f"expected a kernel_trace.csv, found a {kind.kind} CSV "
                                       f"({kind.version}, {kind.n_cols} columns)")
    src = _prepare_source(path)
    wanted = [c for c in kind.known if c.lower() in _KT_MAP]
    names = {c: _KT_MAP[c.lower()] for c in wanted}
    types = {c: t for c, t in _column_types(kind.known).items() if c in names}
    if csv_slim.can_slim(columns):
        rows = csv_slim.read_rows(src, wanted, names, types)
        if rows is not None:
            t = _slim_trace(rows, path, kind, src, agents, columns)
            if t is not None:
                return as_asked(t, columns, coded)
    table = _read_typed(src, kind, _column_types(kind.known), include=wanted)
    n = table.num_rows
    if n == 0:
        raise NoDispatches(path, "no kernel dispatches (header only)")
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

    agents, agent_file = _agents_beside(path, agents)
    cols["agent"], agent_meta, arch = _agent_column(cols.pop("_agent"), agents, path)
    if arch is not None:
        cols["gpu_arch"] = arch
    host, pid = host_pid_from_path(path, kind.version)
    dispatches = _finish_dispatches(cols, n, path, host, pid)
    return as_asked(_kernel_trace(dispatches, path, kind, src, agents, agent_file, agent_meta), columns, coded)


def _agents_beside(path: str, agents: pd.DataFrame | None) -> tuple[pd.DataFrame | None, str | None]:
    """``agents``, else the ``agent_info.csv`` beside the file (and its path) where there is one."""
    if agents is not None:
        return agents, None
    sib = sibling_file(path, "agent_info")
    if sib is None:
        return None, None
    return read_agent_info_csv(sib), os.fspath(sib)


def _kernel_trace(dispatches: pd.DataFrame | CodedDispatches, path: str, kind: CsvKind, src: _Source,
                  agents: pd.DataFrame | None, agent_file: str | None, agent_meta: dict[str, Any]) -> Trace:
    """The Trace of a kernel trace's dispatches: its agents, files and meta."""
    meta: dict[str, Any] = {"format": SOURCE, "csv_kind": kind.kind,
                            "csv_version": kind.version, "n_cols": kind.n_cols,
                            "truncated_marker": src.truncated_marker, **agent_meta}
    if src.truncated_marker:
        meta["truncated_marker_line"] = src.marker_line
    if any(v is not None for v in host_pid_from_path(path, kind.version)):
        meta["host_pid_from"] = "path"
    if agent_file:
        meta["agent_info_file"] = agent_file
    notes = kind.notes(path) + (list(agents.attrs.get("notes", [])) if agent_file else [])
    if notes:
        meta["notes"] = notes
    files = [path] + ([agent_file] if agent_file else [])
    agents_df = agents if agents is not None else empty(AGENT_SCHEMA)
    return Trace(dispatches=dispatches, agents=agents_df, files=files, meta=meta)


def _slim_trace(rows: csv_slim.SlimRows, path: str, kind: CsvKind, src: _Source,
                agents: pd.DataFrame | None, columns: Sequence[str]) -> Trace | None:
    """The Trace of a slim read's rows (``traces/csv_slim.py``), its dispatches coded; None
    where an Agent_Id cannot be mapped (the full read's error)."""
    agents, agent_file = _agents_beside(path, agents)
    try:
        agent, agent_meta, _ = _agent_column(_cat_col(pa.chunked_array([pa.array(list(rows.labels))
                                                                        .dictionary_encode()])), agents, path)
    except GemmperfInputError:
        return None
    host, pid = host_pid_from_path(path, kind.version)
    agent_of = agent.to_numpy(dtype=np.int64, na_value=0)
    agent_na = np.asarray(agent.isna())

    def key_table(names: list[str], key_columns: Sequence[str]) -> pd.DataFrame:
        # the full read's columns of one row per name, only those asked for: made as
        # _finish_dispatches makes them, which finalize_dispatches keeps as they are
        kernel = _cat_col(pa.chunked_array([pa.array(names, pa.string()).dictionary_encode()]))
        cols = _typed_columns({"kernel": kernel}, len(names), path, host, pid, only=key_columns)
        return pd.DataFrame({c: cols[c] for c in key_columns if c in cols}, copy=False)

    def lane_table(labels: list[str], lanes: list[tuple]) -> pd.DataFrame:
        m = len(lanes)
        label = np.array([lab for lab, _, _ in lanes], dtype=np.int64)
        return pd.DataFrame({"file": _const_cat(path, m), "pid": _const_int(pid, m),
                             "agent": pd.arrays.IntegerArray(agent_of[label], agent_na[label]),
                             "queue": _nullable([q for _, q, _ in lanes]),
                             "stream": _nullable([s for _, _, s in lanes])})

    dispatches = csv_slim.coded_dispatches(rows, columns, key_table, lane_table)
    return _kernel_trace(dispatches, path, kind, src, agents, agent_file, agent_meta)


def _nullable(values: list[int | None]) -> pd.api.extensions.ExtensionArray:
    return pd.arrays.IntegerArray(np.array([0 if v is None else v for v in values], dtype=np.int64),
                                  np.array([v is None for v in values], dtype=bool))


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
        raise NoDispatches(path, "no kernel dispatches (header only)")
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
    meta = {"format": SOURCE, "legacy": "rocprof-v1", "csv_kind": kind.kind,
            "csv_version": kind.version, "n_cols": kind.n_cols,
            "truncated_marker": src.truncated_marker, "agent_numbering": "gpu-id (rocprof v1)"}
    return Trace(dispatches=dispatches, files=[path], meta=meta)


_V1_MAP = {"index": "dispatch_id", "kernelname": "kernel", "gpu-id": "agent", "queue-id": "queue",
           "pid": "pid", "tid": "thread_id", "grd": "grid_x", "wgr": "wg_x", "lds": "lds_bytes",
           "scr": "scratch_bytes", "arch_vgpr": "vgpr", "accum_vgpr": "agpr", "sgpr": "sgpr",
           "beginns": "start_ns", "endns": "end_ns"}
