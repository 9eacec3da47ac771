"""rocpd SQLite (``--output-format rocpd`` -> ``<prefix>_results.db``, ROCm 7.x default) -> Trace.

Schema facts used here (rocprofv3-formats.md §5; upstream ``rocpd_tables.sql``,
``rocpd_views.sql``, ``data_views.sql`` and the writer ``generateRocpd.cpp``):

* every table carries a per-run suffix ``_<uuid>`` (dashes turned into underscores); views with
  the plain names select from one run's tables, and ``kernels`` / ``counters_collection`` join
  them;
* ``rocpd_kernel_dispatch.queue_id`` / ``stream_id`` are the raw queue/stream handles (the same
  numbers as the JSON), ``agent_id`` is the agent's node id (= ``rocpd_info_agent.id``),
  ``kernel_id`` is the symbol's ``kernel_id`` (= ``rocpd_info_kernel_symbol.id``);
* ``rocpd_event.stack_id`` holds the *internal* correlation id and ``correlation_id`` the external
  one, so ``correlation_id`` here is read from ``stack_id`` to match the JSON/CSV readers;
* ``display_name`` is ``formatted_kernel_name`` (the name the JSON reader uses for ``kernel``), and
  the symbol's ``extdata`` JSON has ``truncated_kernel_name``; the agent's ``extdata`` has the full
  agent record (``gpu_index``, ``cu_count``, ...).

Reading order: the ``kernels`` view when it exists and covers every run's dispatch table;
otherwise each run's suffixed tables directly (one run = one profiled process).
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd
from pandas.api.types import infer_dtype

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.schema import (
    AGENT_SCHEMA,
    COUNTER_SCHEMA,
    Trace,
    empty,
    finalize_agents,
    finalize_counters,
    finalize_dispatches,
    short_name,
)

SOURCE = "rocpd"
_DISPATCH_TABLE_RX = re.compile(r"^rocpd_kernel_dispatch(_[0-9A-Za-z_]+)?$")
_SQLITE_MAGIC = b"SQLite format 3\x00"

# Output columns shared by the view query and the direct-table query.
_DISPATCH_COLS = ("guid", "pid", "tid", "agent_node", "kernel_id", "dispatch_id", "queue",
                  "stream", "start_ns", "end_ns", "grid_x", "grid_y", "grid_z", "wg_x", "wg_y",
                  "wg_z", "lds_bytes", "scratch_bytes", "correlation_id")

_KERNELS_VIEW_SQL = """
SELECT guid, pid, tid, agent_abs_index, kernel_id, dispatch_id, queue_id, stream_id, start, "end",
       grid_x, grid_y, grid_z, workgroup_x, workgroup_y, workgroup_z, lds_size, scratch_size,
       stack_id
FROM kernels
"""

_DISPATCH_TABLE_SQL = """
SELECT K.guid, K.pid, T.tid, K.agent_id, K.kernel_id, K.dispatch_id, K.queue_id, K.stream_id,
       K.start, K."end", K.grid_size_x, K.grid_size_y, K.grid_size_z,
       K.workgroup_size_x, K.workgroup_size_y, K.workgroup_size_z,
       K.group_segment_size, K.private_segment_size, E.stack_id
FROM "rocpd_kernel_dispatch{s}" K
LEFT JOIN "rocpd_event{s}" E ON E.id = K.event_id AND E.guid = K.guid
LEFT JOIN "rocpd_info_thread{s}" T ON T.id = K.tid AND T.guid = K.guid
"""

_SYMBOL_SQL = """
SELECT guid, id, display_name, kernel_name, arch_vgpr_count, accum_vgpr_count, sgpr_count,
       json_extract(extdata, '$.truncated_kernel_name')
FROM "rocpd_info_kernel_symbol{s}"
"""

_PROCESS_SQL = """
SELECT P.guid, P.pid, N.hostname, P.init, P.fini, P.command
FROM "rocpd_info_process{s}" P
LEFT JOIN "rocpd_info_node{s}" N ON N.id = P.nid AND N.guid = P.guid
"""

_AGENT_SQL = """
SELECT guid, pid, id, type, absolute_index, logical_index, type_index, name, product_name,
       json_extract(extdata, '$.id.handle'), json_extract(extdata, '$.gpu_index'),
       json_extract(extdata, '$.gfx_target_version'), json_extract(extdata, '$.cu_count'),
       json_extract(extdata, '$.simd_per_cu'), json_extract(extdata, '$.wave_front_size'),
       json_extract(extdata, '$.max_engine_clk_fcompute'), json_extract(extdata, '$.num_xcc')
FROM "rocpd_info_agent{s}"
"""
_AGENT_COLS = ("guid", "pid", "node_id", "type", "abs", "logical_id", "type_index", "name",
               "product", "handle", "gpu_index_json", "gfx_target_version", "cu_count",
               "simd_per_cu", "wave_size", "max_clock_mhz", "xcc_count")

_COUNTERS_VIEW_SQL = """
SELECT guid, pid, agent_abs_index, dispatch_id, kernel_id, stack_id, start, "end", counter_name,
       value
FROM counters_collection
"""

_COUNTERS_TABLE_SQL = """
SELECT K.guid, K.pid, K.agent_id, K.dispatch_id, K.kernel_id, E.stack_id, K.start, K."end",
       I.name, SUM(V.value)
FROM "rocpd_pmc_event{s}" V
JOIN "rocpd_info_pmc{s}" I ON I.id = V.pmc_id AND I.guid = V.guid
JOIN "rocpd_kernel_dispatch{s}" K ON K.event_id = V.event_id AND K.guid = V.guid
LEFT JOIN "rocpd_event{s}" E ON E.id = V.event_id AND E.guid = V.guid
GROUP BY K.guid, K.dispatch_id, I.name, K.agent_id
"""
_COUNTER_COLS = ("guid", "pid", "agent_node", "dispatch_id", "kernel_id", "correlation_id",
                 "start_ns", "end_ns", "counter", "value")


def read_rocpd_db(path: str | os.PathLike) -> Trace:
    """Read a rocpd ``*_results.db``; every run (UUID) in it becomes its own process rows."""
    path_s = os.fspath(path)
    _check_sqlite_file(path_s)
    try:
        conn = sqlite3.connect(f"file:{quote(str(Path(path_s).resolve()))}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise GemmperfInputError(path_s, f"cannot open SQLite database: {exc}") from None
    try:
        return _read(conn, path_s)
    except sqlite3.Error as exc:
        raise GemmperfInputError(path_s, f"cannot read rocpd database: {exc}") from None
    finally:
        conn.close()


def _check_sqlite_file(path: str) -> None:
    from pytest_gemmperf.traces.csv_layouts import check_regular_file
    check_regular_file(path)  # never open a FIFO or device named *_results.db
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read file: {exc.strerror or exc}") from None
    if head != _SQLITE_MAGIC:
        raise GemmperfInputError(path, "not an SQLite database (rocpd output is SQLite 3)")


def _read(conn: sqlite3.Connection, path: str) -> Trace:
    objects = dict(conn.execute("SELECT name, type FROM sqlite_master").fetchall())
    suffixes = sorted(m.group(1) or "" for name, kind in objects.items()
                      if kind == "table" and (m := _DISPATCH_TABLE_RX.match(name)))
    if not suffixes and objects.get("kernels") != "view":
        raise GemmperfInputError(path, "not a rocpd database: no rocpd_kernel_dispatch table and "
                                       "no kernels view")
    table_rows = sum(conn.execute(f'SELECT COUNT(*) FROM "rocpd_kernel_dispatch{s}"').fetchone()[0]
                     for s in suffixes)

    via = "tables"
    raw = None
    if objects.get("kernels") == "view":
        try:
            raw = _frame(conn.execute(_KERNELS_VIEW_SQL).fetchall(), _DISPATCH_COLS, path,
                         "kernels view")
        except sqlite3.Error:
            raw = None  # a view over tables that this file lacks: read the tables instead
        # The plain-name views select from one run only; when the file holds several runs (or
        # the view's inner joins dropped rows) the tables are the complete source.
        if raw is not None and (not suffixes or len(raw) == table_rows):
            via = "kernels view"
        else:
            raw = None
    meta_sources = [""] if via == "kernels view" else suffixes
    if raw is None:
        raw = pd.concat([_frame(conn.execute(_DISPATCH_TABLE_SQL.format(s=s)).fetchall(),
                                _DISPATCH_COLS, path, f"rocpd_kernel_dispatch{s}")
                         for s in suffixes], ignore_index=True)

    symbols = pd.concat([_frame(conn.execute(_SYMBOL_SQL.format(s=s)).fetchall(),
                                ("guid", "kernel_id", "display_name", "kernel_name", "vgpr", "agpr",
                                 "sgpr", "truncated"), path, f"rocpd_info_kernel_symbol{s}")
                         for s in meta_sources], ignore_index=True)
    procs = pd.concat([_frame(conn.execute(_PROCESS_SQL.format(s=s)).fetchall(),
                              ("guid", "pid", "host", "init", "fini", "command"), path,
                              f"rocpd_info_process{s}")
                       for s in meta_sources], ignore_index=True)
    agents = pd.concat([_frame(conn.execute(_AGENT_SQL.format(s=s)).fetchall(), _AGENT_COLS,
                               path, f"rocpd_info_agent{s}")
                        for s in meta_sources], ignore_index=True)
    agents = _with_gpu_index(agents)
    counters_raw = _read_counters(conn, objects, suffixes, via, path)

    if len(raw) == 0 and len(counters_raw) == 0:
        raise GemmperfInputError(path, f"no kernel dispatches in {max(len(suffixes), 1)} run(s)")

    dispatches = _dispatch_table(raw, symbols, procs, agents, path)
    counters = _counter_table(counters_raw, symbols, procs, agents, path)
    meta = {
        "format": SOURCE,
        "read_via": via,
        "runs": [s.lstrip("_") for s in suffixes],
        "agent_numbering": "gpu_index",
        "processes": [
            {"guid": r.guid, "pid": _opt_int(r.pid), "host": r.host, "init_time_ns": _opt_int(r.init),
             "fini_time_ns": _opt_int(r.fini), "command": r.command}
            for r in procs.itertuples(index=False)],
        "counters_only": len(raw) == 0,
    }
    meta["init_time_ns"] = {p["pid"]: p["init_time_ns"] for p in meta["processes"]}
    meta["fini_time_ns"] = {p["pid"]: p["fini_time_ns"] for p in meta["processes"]}
    return Trace(dispatches=dispatches, counters=counters,
                 agents=_agent_table(agents, procs, path), files=[path], meta=meta)


#: query columns holding numbers; all integers except the summed counter ``value``
_INT_COLS = frozenset({"pid", "tid", "agent_node", "kernel_id", "dispatch_id", "queue", "stream",
                       "start_ns", "end_ns", "grid_x", "grid_y", "grid_z", "wg_x", "wg_y", "wg_z",
                       "lds_bytes", "scratch_bytes", "correlation_id", "vgpr", "agpr", "sgpr",
                       "init", "fini", "node_id", "abs", "logical_id", "type_index"})
_FLOAT_COLS = frozenset({"value"})
#: our query column -> the rocpd column it reads (for messages)
_STORED_NAME = {"start_ns": "start", "end_ns": "end", "queue": "queue_id", "stream": "stream_id",
                "agent_node": "agent_id", "grid_x": "grid_size_x", "grid_y": "grid_size_y",
                "grid_z": "grid_size_z", "wg_x": "workgroup_size_x", "wg_y": "workgroup_size_y",
                "wg_z": "workgroup_size_z", "lds_bytes": "group_segment_size",
                "scratch_bytes": "private_segment_size", "correlation_id": "stack_id",
                "vgpr": "arch_vgpr_count", "agpr": "accum_vgpr_count", "sgpr": "sgpr_count",
                "node_id": "id", "abs": "absolute_index", "logical_id": "logical_index"}
_INT64_MAX_FLOAT = 2.0 ** 63  # float64 values at or above this are outside int64


def _frame(rows: list[tuple], cols: tuple[str, ...], path: str = "", what: str = "") -> pd.DataFrame:
    """Query rows -> DataFrame, every number column converted exactly and checked.

    SQLite stores each cell with its own type whatever the column declares, so a "BIGINT"
    column can hold REAL ``1.5``, TEXT ``'abc'`` or a BLOB. Integer columns accept INTEGER and
    NULL, and REAL only when integral and inside int64 (``CAST`` would truncate a fraction
    silently); ``value`` accepts finite numbers. Anything else is a
    :class:`GemmperfInputError` naming the column, the value and its storage class. Columns are
    built without ``from_records``: it turns an integer column with one NULL or one REAL into
    float64, which loses nanoseconds above 2**53.
    """
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    data: dict[str, Any] = {}
    for name, values in zip(cols, zip(*rows)):
        col = np.empty(len(values), dtype=object)
        col[:] = values
        if name in _INT_COLS:
            data[name] = _exact_ints(col, name, path, what)
        elif name in _FLOAT_COLS:
            data[name] = _finite_floats(col, name, path, what)
        else:
            data[name] = col
    return pd.DataFrame(data)


def _bad_cell(col: np.ndarray, bad: np.ndarray, name: str, path: str, what: str, reason: str):
    i = int(np.flatnonzero(bad)[0])
    v = col[i]
    storage = {int: "INTEGER", float: "REAL", str: "TEXT", bytes: "BLOB"}.get(type(v), type(v).__name__)
    shown = repr(v) if len(repr(v)) <= 60 else repr(v)[:60] + "..."
    stored = _STORED_NAME.get(name, name)
    return GemmperfInputError(path, f"column {stored!r}: {shown} (stored as {storage}) {reason}",
                              record=f"{what} row {i + 1}")


def _exact_ints(col: np.ndarray, name: str, path: str, what: str) -> pd.api.extensions.ExtensionArray:
    kind = infer_dtype(col, skipna=True)
    missing = pd.isna(col)
    if kind not in ("integer", "empty", "floating", "mixed-integer-float"):
        is_num = np.fromiter((type(v) in (int, float) for v in col), dtype=bool, count=len(col))
        raise _bad_cell(col, ~is_num & ~missing, name, path, what, "is not a number")
    if kind in ("floating", "mixed-integer-float"):
        is_float = np.fromiter((type(v) is float for v in col), dtype=bool, count=len(col))
        f = np.where(is_float & ~missing, col, 0.0).astype(np.float64)
        with np.errstate(invalid="ignore"):
            out_of_range = ~np.isfinite(f) | (np.abs(f) >= _INT64_MAX_FLOAT)
            fraction = ~out_of_range & (f != np.trunc(f))
        if (out_of_range | fraction).any():
            first = int(np.flatnonzero(out_of_range | fraction)[0])
            reason = ("is outside the signed 64-bit integer range" if out_of_range[first]
                      else "is not an integer (a fraction would be truncated)")
            raise _bad_cell(col, out_of_range | fraction, name, path, what, reason)
    values = np.zeros(len(col), dtype=np.int64)
    values[~missing] = col[~missing].astype(np.int64)  # Python int / integral float: exact
    return pd.arrays.IntegerArray(values, missing)


def _finite_floats(col: np.ndarray, name: str, path: str, what: str) -> np.ndarray:
    kind = infer_dtype(col, skipna=True)
    missing = pd.isna(col)
    if kind not in ("integer", "empty", "floating", "mixed-integer-float"):
        is_num = np.fromiter((type(v) in (int, float) for v in col), dtype=bool, count=len(col))
        raise _bad_cell(col, ~is_num & ~missing, name, path, what, "is not a number")
    f = np.where(missing, np.nan, col).astype(np.float64)
    bad = ~np.isfinite(f) & ~missing
    if bad.any():
        raise _bad_cell(col, bad, name, path, what, "is not a finite number")
    return f


def _opt_int(v: Any) -> int | None:
    return None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else int(v)


def _with_gpu_index(agents: pd.DataFrame) -> pd.DataFrame:
    """gpu_index from the agent record; else the GPU's type-relative index (same numbering)."""
    agents = agents.copy()
    is_gpu = agents["type"] == "GPU"
    gi = pd.to_numeric(agents["gpu_index_json"], errors="coerce")
    gi = gi.where(gi.notna() & (gi >= 0), pd.to_numeric(agents["type_index"], errors="coerce"))
    agents["gpu_index"] = gi.where(is_gpu).astype("Int64")
    return agents


def _read_counters(conn: sqlite3.Connection, objects: dict[str, str], suffixes: list[str],
                   via: str, path: str) -> pd.DataFrame:
    for s in suffixes:  # SQL SUM() reads TEXT as 0 and hides it: check the stored cells first
        if objects.get(f"rocpd_pmc_event{s}") == "table":
            bad = conn.execute(f'SELECT id, value, typeof(value) FROM "rocpd_pmc_event{s}" '
                               "WHERE typeof(value) NOT IN ('integer', 'real') LIMIT 1").fetchone()
            if bad is not None:
                raise GemmperfInputError(path, f"column 'value': {str(bad[1])[:60]!r} (stored as "
                                               f"{bad[2].upper()}) is not a number",
                                         record=f"rocpd_pmc_event{s} id {bad[0]}")
    if via == "kernels view" and objects.get("counters_collection") == "view":
        return _frame(conn.execute(_COUNTERS_VIEW_SQL).fetchall(), _COUNTER_COLS, path,
                      "counters_collection view")
    parts = [_frame(conn.execute(_COUNTERS_TABLE_SQL.format(s=s)).fetchall(), _COUNTER_COLS, path,
                    f"rocpd_pmc_event{s}")
             for s in suffixes if objects.get(f"rocpd_pmc_event{s}") == "table"]
    return pd.concat(parts, ignore_index=True) if parts else _frame([], _COUNTER_COLS)


def _join_symbols(raw: pd.DataFrame, symbols: pd.DataFrame, path: str, what: str) -> pd.DataFrame:
    sym = symbols.drop_duplicates(["guid", "kernel_id"])
    out = raw.merge(sym, on=["guid", "kernel_id"], how="left", validate="many_to_one",
                    indicator=True)
    missing = (out["_merge"] == "left_only").to_numpy()
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise GemmperfInputError(
            path, f"kernel_id {out['kernel_id'].iloc[i]} is not in rocpd_info_kernel_symbol "
                  f"({int(missing.sum())} row(s) affected)",
            record=f"{what} dispatch_id {out['dispatch_id'].iloc[i]}")
    names = out["display_name"].where(out["display_name"].notna() & (out["display_name"] != ""),
                                      out["kernel_name"].fillna("").map(_strip_kd))
    out["kernel"] = names
    out["kernel_short"] = out["truncated"].where(out["truncated"].notna() & (out["truncated"] != ""))
    no_short = out["kernel_short"].isna()
    if no_short.any():
        out.loc[no_short, "kernel_short"] = out.loc[no_short, "kernel"].map(short_name)
    return out.drop(columns=["_merge", "display_name", "kernel_name", "truncated"])


def _strip_kd(name: str) -> str:
    return name.removesuffix(" [clone .kd]").removesuffix(".kd")


def _join_process_agent(df: pd.DataFrame, procs: pd.DataFrame, agents: pd.DataFrame, path: str,
                        what: str) -> pd.DataFrame:
    df = df.merge(procs[["guid", "pid", "host"]].drop_duplicates(["guid", "pid"]),
                  on=["guid", "pid"], how="left")
    ag = agents[["guid", "abs", "gpu_index", "name"]].drop_duplicates(["guid", "abs"])
    df = df.merge(ag.rename(columns={"abs": "agent_node", "name": "agent_name"}),
                  on=["guid", "agent_node"], how="left", indicator=True)
    missing = (df["_merge"] == "left_only").to_numpy()
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise GemmperfInputError(path, f"agent {df['agent_node'].iloc[i]} is not in rocpd_info_agent",
                                 record=f"{what} dispatch_id {df['dispatch_id'].iloc[i]}")
    df["agent"] = df["gpu_index"]
    df["gpu_arch"] = df["agent_name"].where(df["gpu_index"].notna())
    return df.drop(columns=["_merge", "gpu_index", "agent_name"])


def _dispatch_table(raw: pd.DataFrame, symbols: pd.DataFrame, procs: pd.DataFrame,
                    agents: pd.DataFrame, path: str) -> pd.DataFrame:
    if len(raw) == 0:
        return finalize_dispatches(pd.DataFrame({"start_ns": [], "end_ns": [], "kernel": []}), path,
                                   allow_empty=True)
    df = _join_symbols(raw, symbols, path, "rocpd_kernel_dispatch")
    df = _join_process_agent(df, procs, agents, path, "rocpd_kernel_dispatch")
    df = df.rename(columns={"tid": "thread_id"})
    df["source"] = SOURCE
    return finalize_dispatches(df.drop(columns=["guid", "agent_node"]), path)


def _counter_table(raw: pd.DataFrame, symbols: pd.DataFrame, procs: pd.DataFrame,
                   agents: pd.DataFrame, path: str) -> pd.DataFrame:
    if len(raw) == 0:
        return finalize_counters(empty(COUNTER_SCHEMA), path)
    df = _join_symbols(raw, symbols, path, "counters")
    df = _join_process_agent(df, procs, agents, path, "counters")
    df["source"] = SOURCE
    keep = [c for c in COUNTER_SCHEMA if c in df.columns]
    return finalize_counters(df[keep], path)


def _agent_table(agents: pd.DataFrame, procs: pd.DataFrame, path: str) -> pd.DataFrame:
    if len(agents) == 0:
        return finalize_agents(empty(AGENT_SCHEMA), path)
    df = agents.merge(procs[["guid", "pid", "host"]].drop_duplicates(["guid", "pid"]),
                      on=["guid", "pid"], how="left")
    is_gpu = df["type"] == "GPU"
    df["type"] = df["type"].where(df["type"].isin(["CPU", "GPU"]), "UNK")
    df["gpu_arch"] = df["name"].where(is_gpu)
    for c in ("gfx_target_version", "cu_count", "simd_per_cu", "wave_size", "xcc_count",
              "max_clock_mhz"):
        df[c] = pd.to_numeric(df[c], errors="coerce").where(is_gpu)
    df["source"] = SOURCE
    return finalize_agents(df[[c for c in AGENT_SCHEMA if c in df.columns]], path)

