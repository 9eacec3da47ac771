"""The other per-kind rocprofv3 CSV readers: ``counter_collection.csv``, ``agent_info.csv``,
``--stats`` files and ``memory_copy_trace.csv``, each into its finalized table.

Split from :mod:`pytest_gemmperf.traces.rocprof_csv` (the public entry; see its docstring for the
formats and the input contract: every number exact or a one-line error naming file, line and
column; unknown extra columns noted in ``attrs["notes"]``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.csv_columns import (_STRING_COLS, SOURCE, _agent_column, _cat_col,
                                                _column_types, _const_cat, _const_int, _int_col,
                                                _ns_col, host_pid_from_path, sibling_file)
from pytest_gemmperf.traces.csv_layouts import _STATS, detect_csv
from pytest_gemmperf.traces.csv_parse import (
    _at_row,
    _check_cells,
    _prepare_source,
    _read_table,
    _read_typed,
    _shown,
)
from pytest_gemmperf.traces.csv_values import floats_from_text, ints_from_text
from pytest_gemmperf.traces.schema import INT, finalize_agents, finalize_counters


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
