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

Every query runs under a budget, because a view is code: ``CREATE VIEW kernels AS WITH RECURSIVE
...`` never ends, and read naively it fills memory (7 GB in a minute). A progress handler stops
a file's queries after :data:`DEFAULT_BUDGET_S` seconds of wall time or :data:`STEPS_PER_BYTE`
SQLite VM instructions per byte of the file, SQLite's own heap is capped for the duration of
the read, and results are fetched in bounded batches: a query may return no more rows than
the file can hold (one row per :data:`MIN_ROW_BYTES` bytes of the database file). Each limit is
one :class:`GemmperfInputError` line naming the file, the query and the environment variable
that raises it (``GEMMPERF_ROCPD_BUDGET_S``, ``GEMMPERF_ROCPD_MAX_STEPS``,
``GEMMPERF_ROCPD_MAX_HEAP_BYTES``).
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd
from pandas.api.types import infer_dtype

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces import rocpd_slim
from pytest_gemmperf.traces.coded import as_asked
from pytest_gemmperf.traces.schema import (
    AGENT_SCHEMA,
    COUNTER_SCHEMA,
    NoDispatches,
    Trace,
    empty,
    finalize_agents,
    finalize_counters,
    finalize_dispatches,
    short_name,
)
from pytest_gemmperf.traces.csv_layouts import check_regular_file

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


#: wall-clock seconds all queries of one file may take. A real rocpd file of a million
#: dispatches reads in a few seconds; 300 s leaves two orders of magnitude for slow disks.
DEFAULT_BUDGET_S = 300.0
#: SQLite VM instructions all queries of one file may execute, per byte of the file, and at
#: least :data:`MIN_MAX_STEPS`. Reading a 172 MB file of 1M dispatches (kernels view, symbols,
#: agents) takes 7.7e7 instructions, under half a step per byte: 64 per byte is a 140x margin,
#: while an endless view in a small file stops within a second or two (5e7 instructions:
#: 100x what a 1 MB file of 6,000 dispatches needs).
STEPS_PER_BYTE = 64
MIN_MAX_STEPS = 50_000_000
#: bytes SQLite may allocate while one file is read (sorters, GROUP BY, temporary tables)
DEFAULT_MAX_HEAP_BYTES = 2 * 1024 ** 3
#: a dispatch row stores at least this many bytes, so a file of N bytes holds < N / 16 rows;
#: a query returning more is generating rows (a recursive view), not reading them
MIN_ROW_BYTES = 16
ENV_BUDGET_S = "GEMMPERF_ROCPD_BUDGET_S"
ENV_MAX_STEPS = "GEMMPERF_ROCPD_MAX_STEPS"
ENV_MAX_HEAP = "GEMMPERF_ROCPD_MAX_HEAP_BYTES"
_CHECK_EVERY = 10_000  # VM instructions between two budget checks
_FETCH_BATCH = 65_536


@dataclass(frozen=True)
class QueryBudget:
    """Limits on the work the queries of one rocpd file may do (module docstring)."""

    seconds: float = DEFAULT_BUDGET_S
    steps: int | None = None  # None: STEPS_PER_BYTE * file size, at least MIN_MAX_STEPS
    heap_bytes: int = DEFAULT_MAX_HEAP_BYTES

    @classmethod
    def from_env(cls, path: str | None = None) -> QueryBudget:
        """The defaults, each overridden by its environment variable (a malformed value is an
        error: a typo must not lift the bound silently)."""
        return cls(seconds=_env_number(ENV_BUDGET_S, DEFAULT_BUDGET_S, float, path),
                   steps=_env_number(ENV_MAX_STEPS, None, int, path),
                   heap_bytes=_env_number(ENV_MAX_HEAP, DEFAULT_MAX_HEAP_BYTES, int, path))


def _env_number(name: str, default, kind, path: str | None):
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = kind(text.strip())
    except ValueError:
        value = 0
    if not value > 0:
        raise GemmperfInputError(path, f"{name}={text!r} is not a positive number")
    return value


class _Budgeted:
    """The connection's queries, stopped when the file's budget is spent (one line naming it)."""

    def __init__(self, conn: sqlite3.Connection, path: str, budget: QueryBudget) -> None:
        self.conn = conn
        self.path = path
        self.budget = budget
        self.deadline = time.monotonic() + budget.seconds
        self.steps = 0
        self.spent: str | None = None
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        self.max_rows = max(size // MIN_ROW_BYTES, 1_000)
        self.max_steps = (budget.steps if budget.steps is not None
                          else max(STEPS_PER_BYTE * size, MIN_MAX_STEPS))
        conn.set_progress_handler(self._tick, _CHECK_EVERY)

    def _tick(self) -> int:
        self.steps += _CHECK_EVERY
        if self.steps > self.max_steps:
            self.spent = f"{self.max_steps:,} SQLite VM steps ({ENV_MAX_STEPS} raises the limit)"
        elif time.monotonic() > self.deadline:
            self.spent = f"{self.budget.seconds:g} s ({ENV_BUDGET_S} raises the limit)"
        return 1 if self.spent else 0

    def rows(self, sql: str, what: str, limit: int | None = None) -> list[tuple]:
        """All rows of ``sql``; more than ``limit`` (default: what the file can hold) is an
        error, found after reading at most one batch beyond it."""
        out: list[tuple] = []
        for batch in self.batches(sql, what, limit):
            out.extend(batch)
        return out

    def batches(self, sql: str, what: str, limit: int | None = None,
                size: int | None = None) -> Iterator[list[tuple]]:
        """The rows of ``sql`` ``size`` (default :data:`_FETCH_BATCH`) at a time, with
        :meth:`rows`' limit."""
        cap = self.max_rows if limit is None else limit
        seen = 0
        try:
            cur = self.conn.execute(sql)
            while batch := cur.fetchmany(size or _FETCH_BATCH):
                seen += len(batch)
                if seen > cap:
                    raise GemmperfInputError(
                        self.path, f"{what} returns more than {cap:,} rows, more than this "
                                   f"{os.path.getsize(self.path):,}-byte file can hold (a view "
                                   "that never ends, or joins that multiply rows?)")
                yield batch
        except (sqlite3.Error, MemoryError) as exc:
            raise self.error(exc, what) from None

    def error(self, exc: BaseException, what: str) -> GemmperfInputError:
        if self.spent is not None:
            return GemmperfInputError(self.path, f"{what}: query stopped after {self.spent}; a "
                                                 "view that never ends?")
        if isinstance(exc, MemoryError) or "out of memory" in str(exc).lower():
            return GemmperfInputError(self.path, f"{what}: query needs more than "
                                                 f"{self.budget.heap_bytes:,} bytes of SQLite "
                                                 f"memory ({ENV_MAX_HEAP} raises the limit)")
        return QueryFailed(self.path, f"cannot read rocpd database ({what}): {exc}")


class QueryFailed(GemmperfInputError):
    """SQLite refused a query (a missing table, a malformed view), within the budget."""


def read_rocpd_db(path: str | os.PathLike, budget: QueryBudget | None = None,
                  columns: Sequence[str] | None = None, coded: bool = False) -> Trace:
    """Read a rocpd ``*_results.db``; every run (UUID) in it becomes its own process rows.

    ``budget`` bounds the queries' work (default: :meth:`QueryBudget.from_env`).
    ``columns``: the dispatch columns the caller reads (None: all). Where they are among
    :data:`~pytest_gemmperf.traces.rocpd_slim.SLIM_COLUMNS` the dispatch rows are fetched and
    kept a batch at a time (``traces/rocpd_slim.py``: the same queries, checks and errors, the
    columns equal to the full table's); ``coded``: then the dispatches as
    :class:`~pytest_gemmperf.traces.coded.CodedDispatches`."""
    path_s = os.fspath(path)
    _check_sqlite_file(path_s)
    budget = budget if budget is not None else QueryBudget.from_env(path_s)
    if rocpd_slim.can_slim(columns):
        try:
            t = _with_db(path_s, budget, lambda db: _read(db, path_s, columns))
        except rocpd_slim.FullReadDecides:
            pass
        else:
            return as_asked(t, columns, coded)
    return as_asked(_with_db(path_s, budget, lambda db: _read(db, path_s)), columns, coded)


def _with_db(path: str, budget: QueryBudget, read: Callable[[_Budgeted], Trace]) -> Trace:
    """``read`` of the database opened read-only, every query under ``budget``."""
    try:
        conn = sqlite3.connect(f"file:{quote(str(Path(path).resolve()))}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise GemmperfInputError(path, f"cannot open SQLite database: {exc}") from None
    db = _Budgeted(conn, path, budget)
    heap_before = None
    try:
        # process-wide in SQLite, so the previous value is put back below
        heap_before = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
        conn.execute(f"PRAGMA hard_heap_limit={int(budget.heap_bytes)}")
        conn.execute("PRAGMA temp_store=MEMORY")  # temporary b-trees count against the heap cap
        return read(db)
    except (sqlite3.Error, MemoryError) as exc:
        raise db.error(exc, "reading") from None
    finally:
        if heap_before is not None:
            conn.set_progress_handler(None, 0)
            conn.execute(f"PRAGMA hard_heap_limit={int(heap_before)}")
        conn.close()


def _check_sqlite_file(path: str) -> None:
    check_regular_file(path)  # never open a FIFO or device named *_results.db
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read file: {exc.strerror or exc}") from None
    if head != _SQLITE_MAGIC:
        raise GemmperfInputError(path, "not an SQLite database (rocpd output is SQLite 3)")


def _dispatch_rows(db: _Budgeted, sql: str, what: str, path: str, limit: int | None = None,
                   slim: rocpd_slim.SlimRows | None = None) -> pd.DataFrame | rocpd_slim.SlimRows:
    """The rows of a kernel dispatch query as a frame, or kept in ``slim`` a batch at a time
    (a batch the full read would refuse: :class:`~pytest_gemmperf.traces.rocpd_slim.FullReadDecides`)."""
    if slim is None:
        return _frame(db.rows(sql, what, limit), _DISPATCH_COLS, path, what)
    # a batch of rows as Python tuples is about 550 bytes a row: the slim read's working memory
    for batch in db.batches(sql, what, limit, size=_FETCH_BATCH // 4):
        try:
            df = _frame(batch, _DISPATCH_COLS, path, what)
        except GemmperfInputError:
            raise rocpd_slim.FullReadDecides from None  # its row is counted over all batches
        slim.add(df)
    return slim


def _read(db: _Budgeted, path: str, columns: Sequence[str] | None = None) -> Trace:
    """The Trace of the database; with ``columns`` (a slim read) its dispatches coded."""
    objects = dict(db.rows("SELECT name, type FROM sqlite_master", "sqlite_master"))
    suffixes = sorted(m.group(1) or "" for name, kind in objects.items()
                      if kind == "table" and (m := _DISPATCH_TABLE_RX.match(name)))
    if not suffixes and objects.get("kernels") != "view":
        raise GemmperfInputError(path, "not a rocpd database: no rocpd_kernel_dispatch table and "
                                       "no kernels view")
    table_rows = sum(db.rows(f'SELECT COUNT(*) FROM "rocpd_kernel_dispatch{s}"',
                             f"rocpd_kernel_dispatch{s}")[0][0] for s in suffixes)

    via = "tables"
    raw = None
    if objects.get("kernels") == "view":
        try:
            # more rows than the dispatch tables hold is generated, not read: an error
            raw = _dispatch_rows(db, _KERNELS_VIEW_SQL, "kernels view", path,
                                 limit=table_rows if suffixes else None,
                                 slim=None if columns is None else rocpd_slim.SlimRows())
        except QueryFailed:
            if db.spent is not None:
                raise
            raw = None  # a view over tables that this file lacks: read the tables instead
        # The plain-name views select from one run only; when the file holds several runs (or
        # the view's inner joins dropped rows) the tables are the complete source.
        if raw is not None and (not suffixes or len(raw) == table_rows):
            via = "kernels view"
        else:
            raw = None
    meta_sources = [""] if via == "kernels view" else suffixes
    if raw is None and columns is None:
        raw = pd.concat([_dispatch_rows(db, _DISPATCH_TABLE_SQL.format(s=s), f"rocpd_kernel_dispatch{s}", path)
                         for s in suffixes], ignore_index=True)
    elif raw is None:
        raw = rocpd_slim.SlimRows()  # every run's rows, in the order of the table
        for s in suffixes:
            _dispatch_rows(db, _DISPATCH_TABLE_SQL.format(s=s), f"rocpd_kernel_dispatch{s}", path, slim=raw)

    symbols = pd.concat([_frame(db.rows(_SYMBOL_SQL.format(s=s), f"rocpd_info_kernel_symbol{s}"),
                                ("guid", "kernel_id", "display_name", "kernel_name", "vgpr", "agpr",
                                 "sgpr", "truncated"), path, f"rocpd_info_kernel_symbol{s}")
                         for s in meta_sources], ignore_index=True)
    procs = pd.concat([_frame(db.rows(_PROCESS_SQL.format(s=s), f"rocpd_info_process{s}"),
                              ("guid", "pid", "host", "init", "fini", "command"), path,
                              f"rocpd_info_process{s}")
                       for s in meta_sources], ignore_index=True)
    agents = pd.concat([_frame(db.rows(_AGENT_SQL.format(s=s), f"rocpd_info_agent{s}"), _AGENT_COLS,
                               path, f"rocpd_info_agent{s}")
                        for s in meta_sources], ignore_index=True)
    agents = _with_gpu_index(agents)
    counters_raw = _read_counters(db, objects, suffixes, via, path)

    if len(raw) == 0 and len(counters_raw) == 0:
        raise NoDispatches(path, f"no kernel dispatches in {max(len(suffixes), 1)} run(s)")

    if isinstance(raw, rocpd_slim.SlimRows):
        if not len(raw):
            raise rocpd_slim.FullReadDecides  # a table without rows, or NoDispatches: the full read's
        dispatches = raw.coded(columns, lambda first: _first_rows_table(first, symbols, procs, agents, path))
    else:
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


def _read_counters(db: _Budgeted, objects: dict[str, str], suffixes: list[str],
                   via: str, path: str) -> pd.DataFrame:
    for s in suffixes:  # SQL SUM() reads TEXT as 0 and hides it: check the stored cells first
        if objects.get(f"rocpd_pmc_event{s}") == "table":
            found = db.rows(f'SELECT id, value, typeof(value) FROM "rocpd_pmc_event{s}" '
                            "WHERE typeof(value) NOT IN ('integer', 'real') LIMIT 1",
                            f"rocpd_pmc_event{s}")
            bad = found[0] if found else None
            if bad is not None:
                raise GemmperfInputError(path, f"column 'value': {str(bad[1])[:60]!r} (stored as "
                                               f"{bad[2].upper()}) is not a number",
                                         record=f"rocpd_pmc_event{s} id {bad[0]}")
    if via == "kernels view" and objects.get("counters_collection") == "view":
        return _frame(db.rows(_COUNTERS_VIEW_SQL, "counters_collection view"), _COUNTER_COLS,
                      path, "counters_collection view")
    parts = [_frame(db.rows(_COUNTERS_TABLE_SQL.format(s=s), f"rocpd_pmc_event{s}"),
                    _COUNTER_COLS, path, f"rocpd_pmc_event{s}")
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


def _first_rows_table(first: pd.DataFrame, symbols: pd.DataFrame, procs: pd.DataFrame,
                      agents: pd.DataFrame, path: str) -> pd.DataFrame:
    """:func:`_dispatch_table` of a slim read's first rows; where it refuses them (a kernel id
    or agent the run does not list) the full read names the first such row of the table."""
    try:
        return _dispatch_table(first, symbols, procs, agents, path)
    except GemmperfInputError:
        raise rocpd_slim.FullReadDecides from None


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

