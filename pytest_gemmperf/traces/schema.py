"""The canonical tables every reader produces (DESIGN.md section 3).

Times are integer nanoseconds. Identifier-like integers that a format may lack are pandas
nullable ``Int64``; strings are ``category`` because a trace holds millions of dispatches but
only tens to hundreds of distinct kernel names, hosts or points.

Every reader ends with :func:`finalize_dispatches` (and the counter/agent equivalents): it adds
missing columns, coerces dtypes, derives ``dur_ns``, the category and the artefact flags, and
rejects what cannot be analysed (negative durations, no rows) with a
:class:`~pytest_gemmperf.errors.GemmperfInputError` naming the file. A file that holds no
dispatches at all raises :class:`NoDispatches`, so that discovery can tell a process that did
no GPU work (the launcher) from a broken file by the error's type, never by its wording.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable

import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.categorical import map_categories  # noqa: F401 - re-exported
from pytest_gemmperf.traces.categories import categorize


class NoDispatches(GemmperfInputError):
    """The file is readable and holds no kernel dispatch (nor counter record) at all."""


class NoGpuEvents(NoDispatches):
    """A PyTorch profiler trace without GPU activity: a CPU-only run, read as CPU operators."""

#: Values of the ``source`` column: the name of the source kind (``traces/kinds.py``) whose
#: reader made the row, so notes, summaries and tables name a format one way. Our stored tables
#: (the ``tables`` kind) keep the value of the reader that first made them.
SOURCES = ("rocprof-csv", "rocprof-json", "rocpd", "torch")
#: ``source`` values of results written before the column took the kinds' names -> the name
OLD_SOURCE_NAMES = {"rocprofv3-csv": "rocprof-csv", "rocprofv3-json": "rocprof-json"}

STR = "category"
INT = "Int64"  # nullable
NS = "int64"  # timestamps and durations are always present

#: dispatches: column -> dtype, in canonical order.
DISPATCH_SCHEMA: dict[str, str] = {
    "source": STR,
    "file": STR,  # path of the file the row came from (provenance, error messages)
    "host": STR,
    "pid": INT,
    "rank": INT,  # explicit only, never guessed from file order
    "point": STR,  # sweep point id, e.g. "ch28-th256"
    "run": INT,  # repeat index
    "pass": INT,  # rocprofv3 pass_N / pmc_N
    "agent": INT,  # GPU index on the host (node id for 6.x CSV, logical index for 7.x)
    "gpu_arch": STR,
    "queue": INT,
    "stream": INT,
    "thread_id": INT,
    "dispatch_id": INT,
    "correlation_id": INT,
    "kernel_id": INT,
    "kernel": STR,  # full demangled name
    "kernel_short": STR,  # truncated name (template args and parameters removed)
    "category": STR,
    "start_ns": NS,
    "end_ns": NS,
    "dur_ns": NS,
    "grid_x": INT, "grid_y": INT, "grid_z": INT,  # work-items, not workgroups
    "wg_x": INT, "wg_y": INT, "wg_z": INT,
    "lds_bytes": INT,
    "scratch_bytes": INT,
    "vgpr": INT,
    "agpr": INT,
    "sgpr": INT,
    # artefact flags: kept, never silently dropped
    "zero_dur": "bool",  # end == start (firmware timestamp artefact)
    "queue_overlap": "bool",  # starts before the previous dispatch on the same (pid, agent, queue) ended
}
DISPATCH_COLUMNS = tuple(DISPATCH_SCHEMA)

#: Columns that identify one dispatch across the dispatches and counters tables.
DISPATCH_KEY = ("source", "file", "host", "pid", "rank", "point", "run", "pass", "agent",
                "dispatch_id", "correlation_id")

COUNTER_SCHEMA: dict[str, str] = {
    **{c: DISPATCH_SCHEMA[c] for c in DISPATCH_KEY},
    "kernel_id": INT,
    "kernel": STR,
    "start_ns": INT,  # 6.2 counter CSVs carry no timestamps
    "end_ns": INT,
    "counter": STR,
    "value": "float64",  # summed over dimensions/instances, as rocprofv3's CSV does
}
COUNTER_COLUMNS = tuple(COUNTER_SCHEMA)

AGENT_SCHEMA: dict[str, str] = {
    "source": STR,
    "file": STR,
    "host": STR,
    "pid": INT,
    "handle": INT,  # JSON agent handle (run-specific, never a device number)
    "node_id": INT,
    "logical_id": INT,
    "gpu_index": INT,
    "type": STR,  # CPU | GPU | UNK
    "gpu_arch": STR,  # gfx942, gfx950, ...
    "gfx_target_version": INT,
    "product": STR,  # AMD Instinct MI350X
    "cu_count": INT,
    "simd_per_cu": INT,
    "wave_size": INT,
    "max_clock_mhz": INT,
    "xcc_count": INT,
}
AGENT_COLUMNS = tuple(AGENT_SCHEMA)


#: a :class:`Trace` argument not given
_UNSET: Any = object()


class Trace:
    """What one reader returns for one input file (or one rocprofv3 output prefix): its
    ``dispatches``, ``counters`` and ``agents`` tables (empty ones where not given), its
    ``files``, and ``meta``: free-form facts about the input (format version, rocprofv3
    version guess, command line, recorded environment, torch ops: ``meta["cpu_ops"]``
    DataFrame for torch traces, ...). A plain class: a dataclass of these fields costs about
    half a millisecond to make, in every program that imports the readers' schema."""

    def __init__(self, dispatches: pd.DataFrame, counters: pd.DataFrame = _UNSET,
                 agents: pd.DataFrame = _UNSET, files: list[str] = _UNSET,
                 meta: dict[str, Any] = _UNSET) -> None:
        self.dispatches = dispatches
        self.counters = empty(COUNTER_SCHEMA) if counters is _UNSET else counters
        self.agents = empty(AGENT_SCHEMA) if agents is _UNSET else agents
        self.files = [] if files is _UNSET else files
        self.meta = {} if meta is _UNSET else meta


def empty(schema: dict[str, str]) -> pd.DataFrame:
    """A table of ``schema``'s columns and dtypes without rows: a copy of one built once per
    schema (building one takes about 100 times as long as copying it, and every trace without
    counters or agents makes two)."""
    key = tuple(schema.items())
    template = _EMPTY_TABLES.get(key)
    if template is None:
        # from arrays: a frame of empty Series aligns their indexes, several times the cost
        template = _EMPTY_TABLES[key] = pd.DataFrame({c: missing_array(t, 0) for c, t in schema.items()})
    return template.copy()


_EMPTY_TABLES: dict[tuple[tuple[str, str], ...], pd.DataFrame] = {}


def _constant_categorical(value: str, n: int) -> pd.Categorical:
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=pd.Index([value], dtype=object))


def missing_array(dtype: str, n: int):
    """An all-missing column built without per-row Python objects."""
    if dtype == INT:
        return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    if dtype == STR:
        return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), dtype=no_categories(object))
    return np.zeros(n, dtype=dtype)


@functools.cache
def no_categories(dtype: Any) -> pd.CategoricalDtype:
    """The categorical dtype without categories whose (empty) categories have ``dtype``, made
    once: an empty index of strings costs a fifth of a millisecond to build, several times
    in every read of a small table (dtypes are immutable, so one serves every column)."""
    return pd.CategoricalDtype(pd.Index([], dtype=dtype), ordered=False)


def repeated_category(value: Any, n: int) -> pd.Categorical:
    """``value`` (not missing) ``n`` times (``n`` >= 1): the categorical :func:`as_category`
    makes of such a column, its one category inferred as it infers them, without the pass
    over the rows."""
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=pd.Index([value]))


def as_category(s: pd.Series) -> pd.Series:
    """``s.astype(object).where(s.notna(), None).astype("category")``: missing values (None,
    NaN, NA) become missing codes, the categories inferred from the rest. An object column
    takes the cast directly (it reads every missing value as missing already): one step
    instead of three, which on a trace of tens of dispatches are most of the cost."""
    if s.dtype == object:
        if pd.isna(s.to_numpy()).all():  # all missing (most collective columns): no inference
            return pd.Series(missing_array(STR, len(s)), index=s.index, name=s.name)
        return s.astype(STR)
    return s.astype("object").where(s.notna(), None).astype(STR)


def coerce_columns(df: pd.DataFrame, schema: dict[str, str], path: str | None) -> pd.DataFrame:
    """``df`` with the columns of ``schema`` (missing ones all-missing) in its dtypes and order,
    then its other columns; a value that cannot take its column's dtype is an error."""
    return _coerce({c: df[c] for c in df.columns}, df.index, schema, path)


def _coerce(columns: dict[str, Any], index: pd.Index, schema: dict[str, str],
            path: str | None) -> pd.DataFrame:
    """:func:`coerce_columns` of a frame given as its ``columns`` (each indexed by ``index``,
    or an array of its length as the frame would hold it), made into a frame once."""
    return _frame_of(_coerced(columns, index, schema, path), index)


def _frame_of(columns: dict[str, Any], index: pd.Index) -> pd.DataFrame:
    """The table of :func:`_coerced` columns, on the default index."""
    if any(isinstance(v, pd.Series) for v in columns.values()):  # aligned on ``index`` first
        return pd.DataFrame(columns, index=index, copy=False).reset_index(drop=True)
    return pd.DataFrame(columns, index=pd.RangeIndex(len(index)), copy=False)  # arrays: by position


def _coerced(columns: dict[str, Any], index: pd.Index, schema: dict[str, str],
             path: str | None) -> dict[str, Any]:
    """:func:`_coerce`'s columns before its frame: the schema's in its order and dtypes, then
    the others, each as the frame takes it (:func:`_unwrapped`)."""
    n = len(index)
    out: dict[str, Any] = {}
    for col, dtype in schema.items():
        if col not in columns:  # all missing, in its dtype already: nothing to coerce
            out[col] = missing_array(dtype, n)
            continue
        s = columns[col]
        try:
            if dtype == STR:
                if not isinstance(s.dtype, pd.CategoricalDtype):
                    s = as_category(_as_series(s, index))
            elif dtype == INT:
                if str(s.dtype) != INT:
                    s = pd.to_numeric(_as_series(s, index), errors="raise").astype(INT)
            elif str(s.dtype) != dtype:
                s = _as_series(s, index).astype(dtype)
        except (ValueError, TypeError) as exc:
            raise GemmperfInputError(path, f"column {col!r} cannot be read as {dtype}: {exc}") from None
        out[col] = _unwrapped(s, index)
    # readers may carry extra provenance columns; kept after the canon, in the one constructor
    # (a column inserted afterwards costs a block copy each)
    for c, s in columns.items():
        if c not in schema:
            out[c] = _unwrapped(s, index)
    return out


def _unwrapped(s: Any, index: pd.Index) -> Any:
    """A column for :func:`_coerce`'s frame: a Series on ``index`` as its array where the frame
    takes that as it is (an extension array, or numpy values other than object, which a frame
    would infer to ``str``): a frame of tens of Series costs several times one of arrays."""
    if not isinstance(s, pd.Series) or not _same_rows(s.index, index):
        return s  # an array, or a Series the frame aligns on ``index``
    if isinstance(s.dtype, np.dtype):
        return s if s.dtype == object else s.to_numpy()
    return s.array


def _same_rows(own: pd.Index, index: pd.Index) -> bool:
    """Whether a Series on ``own`` is aligned on ``index`` as it stands (the index itself, or
    the same range: a reader's columns made apart, each with its own default index)."""
    return own is index or (isinstance(own, pd.RangeIndex) and isinstance(index, pd.RangeIndex)
                            and own.equals(index))


def finalize_dispatches(df: pd.DataFrame, path: str | None, *, allow_empty: bool = False,
                        categorize_fn=None, in_order: str = "queue") -> pd.DataFrame:
    """Coerce a reader's frame to the canonical dispatches table and validate it.

    ``df`` must contain ``start_ns`` and ``end_ns``; ``dur_ns``, ``category``, ``kernel_short``
    and the flags are derived here when absent. ``in_order``: the column naming the in-order
    unit of ``queue_overlap`` (:func:`lane_ids`).
    """
    return finalize_dispatch_columns(dict(df.items()), df.index, path, allow_empty=allow_empty,
                                     categorize_fn=categorize_fn, in_order=in_order)


def finalize_dispatch_columns(columns: dict[str, Any], index: pd.Index, path: str | None, *,
                              allow_empty: bool = False, categorize_fn=None,
                              in_order: str = "queue") -> pd.DataFrame:
    """:func:`finalize_dispatches` of a reader's ``columns`` (Series on ``index``, or arrays of
    its length, each as a frame would hold it) before any frame is made of them: a reader
    that collects its columns makes the table once instead of a frame of them first."""
    if len(index) == 0 and not allow_empty:
        raise NoDispatches(path, "no kernel dispatches found")
    for col in ("start_ns", "end_ns", "kernel"):
        if col not in columns:
            raise GemmperfInputError(path, f"missing required column {col!r}")
    start_na, end_na = pd.isna(columns["start_ns"]), pd.isna(columns["end_ns"])
    if start_na.any() or end_na.any():
        bad = int(np.flatnonzero(np.asarray(start_na) | np.asarray(end_na))[0])
        raise GemmperfInputError(path, "missing timestamp", record=f"dispatch row {bad + 1}")
    # the columns set here are made into the table once (coerce_columns' frame): on a frame
    # each column set costs a copy of its blocks, most of the cost on a table of tens of rows
    cols = dict(columns)
    start = exact_ns(cols["start_ns"], path, "start_ns")
    end = exact_ns(cols["end_ns"], path, "end_ns")
    dur = end - start
    negative = dur < 0
    if negative.any():
        i = int(np.flatnonzero(negative)[0])
        ids = _as_series(cols["dispatch_id"], index) if "dispatch_id" in cols else None
        has_id = ids is not None and pd.notna(ids.iloc[i])
        refuse_negative_durations(path, int(negative.sum()), i, ids.iloc[i] if has_id else None,
                                  start[i], end[i])
    cols.update(start_ns=start, end_ns=end, dur_ns=dur)
    if "kernel_short" not in cols:
        cols["kernel_short"] = shorten_names(_as_series(cols["kernel"], index))
    if "category" not in cols:
        if categorize_fn is None:
            categorize_fn = categorize
        cols["category"] = categorize_fn(_as_series(cols["kernel"], index))
    if path is not None and "file" not in cols:
        cols["file"] = _constant_categorical(str(path), len(index))
    given = "zero_dur" in cols  # a reader's own flags are coerced, then replaced
    if not given:
        cols["zero_dur"] = dur == 0
    out = _coerced(cols, index, DISPATCH_SCHEMA, path)
    if given:
        out["zero_dur"] = dur == 0
    lanes = {c: out[c] for c in ("file", "pid", "agent", in_order, "stream") if c in out}
    if any(isinstance(v, pd.Series) for v in lanes.values()):  # aligned by the frame first
        table = _frame_of(out, index)
        table["queue_overlap"] = flag_queue_overlap(table, in_order)
        return table
    # the flags made before the table (a column set on it costs a copy of its blocks)
    out["queue_overlap"] = _queue_overlap({c: pd.Series(v) for c, v in lanes.items()}, len(index), start, end,
                                          in_order)
    return _frame_of(out, index)


def _as_series(values: Any, index: pd.Index) -> pd.Series:
    """A column as a Series on ``index``: an array as a frame of it would hold it."""
    return values if isinstance(values, pd.Series) else pd.Series(values, index=index)


def constant_column(value: Any, dtype: str, n: int) -> Any:
    """``value`` ``n`` times (``n`` >= 1) in ``dtype`` (``INT`` or ``STR``), as
    :func:`_coerce` makes such a column of a frame (None: all missing)."""
    if value is None:
        return missing_array(dtype, n)
    if dtype == INT:
        return pd.arrays.IntegerArray(np.full(n, value, dtype=np.int64), np.zeros(n, dtype=bool))
    return repeated_category(value, n)


def refuse_negative_durations(path: str | None, count: int, row: int, dispatch_id: Any,
                              start_ns: int, end_ns: int) -> None:
    """The error for ``count`` dispatches that end before they start, the first at table row
    ``row`` (0-based; its ``dispatch_id``, None where it has none)."""
    rec = f"dispatch row {row + 1}" + (f", dispatch_id {dispatch_id}" if dispatch_id is not None else "")
    raise GemmperfInputError(
        path, f"{count} dispatch(es) end before they start (first: start {start_ns} > end {end_ns})",
        record=rec)


def exact_ns(s: pd.Series, path: str | None, col: str) -> np.ndarray:
    """A timestamp column as int64 nanoseconds, exactly, or a one-line error.

    Integer columns pass unchanged. A float column (a reader or a parquet table that went
    through float64) is accepted only where every value is finite, integral and inside int64:
    ``astype`` would truncate fractions and turn ``inf`` into INT64_MIN with a RuntimeWarning.
    Object columns must hold Python/NumPy integers.
    """
    values = s if isinstance(s, np.ndarray) else s.to_numpy()
    if values.dtype.kind in "iu" and values.dtype != np.uint64:
        return values.astype(np.int64, copy=False)
    if values.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(values) | (np.abs(values) >= 2.0 ** 63) | (values != np.trunc(values))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise GemmperfInputError(path, f"{col} {float(values[i])!r} is not an integer number of "
                                           "nanoseconds in the int64 range", record=f"dispatch row {i + 1}")
        return values.astype(np.int64)
    out = np.zeros(len(values), dtype=np.int64)
    for i, v in enumerate(values):  # object/uint64 columns: rare (error paths, small tables)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) \
                or not -(2 ** 63) <= int(v) < 2 ** 63:
            raise GemmperfInputError(path, f"{col} {v!r} is not an integer number of nanoseconds "
                                           "in the int64 range", record=f"dispatch row {i + 1}")
        out[i] = int(v)
    return out


def flag_queue_overlap(df: pd.DataFrame, in_order: str = "queue") -> np.ndarray:
    """True where a dispatch starts before the previous one on the same queue has ended.

    A hardware queue executes in order, so such pairs are timestamp artefacts (real 7.x data
    shows 1-568 ns), not concurrency. Vectorized: one stable sort, one shifted compare.
    """
    return _queue_overlap(df, len(df), df["start_ns"].to_numpy(), df["end_ns"].to_numpy(), in_order)


def _queue_overlap(columns: pd.DataFrame | dict[str, pd.Series], n: int, start: np.ndarray, end: np.ndarray,
                   in_order: str) -> np.ndarray:
    """:func:`flag_queue_overlap` of a frame or of its columns by name (``n`` rows, their
    ``start`` and ``end``)."""
    if n < 2:
        return np.zeros(n, dtype=bool)
    return overlap_in_lanes(_lane_ids(columns, n, in_order), start, end)


def lane_ids(df: pd.DataFrame, in_order: str = "queue") -> np.ndarray:
    """One integer per row of ``df`` naming its in-order lane (:func:`flag_queue_overlap`):
    ``file``, ``pid``, ``agent`` and ``queue`` (else ``stream``) together; ``in_order``
    another column than ``queue`` (a reader whose format has no queues: Kineto's ``stream``)
    is the in-order unit alone, with no fallback."""
    return _lane_ids(df, len(df), in_order)


def _lane_ids(df: pd.DataFrame | dict[str, pd.Series], n: int, in_order: str) -> np.ndarray:
    """:func:`lane_ids` of a frame or of its columns by name (``n`` rows)."""
    codes = [_lane_codes(df[c]) for c in ("file", "pid", "agent") if c in df]
    # the in-order unit is the hardware queue; sources without queues (torch) order by stream
    if in_order in df:
        queue = _lane_codes(df[in_order], na=-1)
        if in_order == "queue" and "stream" in df and (queue < 0).any():
            queue = np.where(queue >= 0, queue, -1 - _lane_codes(df["stream"]))
            queue = queue - queue.min()
        codes.append(np.maximum(queue, 0))
    gid = np.zeros(n, dtype=np.int64)
    for c in codes:  # one integer lane id instead of a many-key sort
        gid = gid * (int(c.max()) + 1) + c
    return gid


def overlap_in_lanes(gid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """:func:`flag_queue_overlap` of rows whose lanes are ``gid`` (non-negative integers)."""
    n = len(gid)
    if n < 2:
        return np.zeros(n, dtype=bool)
    # rocprofv3 writes rows in completion-buffer order, which is nearly sorted: a stable sort on
    # start (timsort runs) then a radix sort on the small lane id beats a two-key lexsort
    order = np.argsort(start, kind="stable")
    if gid.max() > 0:
        small = gid[order].astype(np.int16 if gid.max() < 2**15 else np.int64)
        order = order[np.argsort(small, kind="stable")]
    gs = gid[order]
    same = gs[1:] == gs[:-1]
    s_start, s_end = start[order], end[order]
    if np.any(same & (s_end[1:] < s_end[:-1])):
        # a dispatch ends before an earlier one on its lane: compare with the running max end
        seg_id = np.concatenate([[0], np.cumsum(~same)])
        prev_end = _segmented_cummax(s_end, seg_id)[:-1]
    else:
        prev_end = s_end[:-1]
    flagged_sorted = np.zeros(n, dtype=bool)
    flagged_sorted[1:] = same & (s_start[1:] < prev_end)
    out = np.zeros(n, dtype=bool)
    out[order] = flagged_sorted
    return out


def overlap_lane_by_lane(gid: np.ndarray, start: np.ndarray, end: np.ndarray | None = None, *,
                         dur: np.ndarray | None = None) -> np.ndarray:
    """:func:`overlap_in_lanes`, one lane at a time: the same flags, with the sort's arrays as
    long as one lane rather than all rows (a reader that holds millions of dispatches in a
    few columns keeps its peak near them). The ends are ``end``, or ``start + dur`` made a lane
    at a time."""
    out = np.zeros(len(gid), dtype=bool)
    if not len(gid):
        return out
    present = (np.flatnonzero(np.bincount(gid)) if gid.min() >= 0 and gid.max() < _FEW_LANES_MAX_ID
               else None)
    if present is not None and len(present) <= _FEW_LANES:
        # a few lanes (streams, queues): each one's rows found by a pass over the ids, so that
        # no index as long as all rows is made
        groups = (np.flatnonzero(gid == lane) for lane in present.tolist())
    else:
        order = np.argsort(gid, kind="stable")  # each lane's rows in their order
        lanes = gid[order]
        groups = np.split(order, np.flatnonzero(lanes[1:] != lanes[:-1]) + 1)
        del lanes
    for rows in groups:
        if len(rows) > 1:
            out[rows] = _lane_overlap(rows, start, end, dur)
    return out


def _lane_overlap(rows: np.ndarray, start: np.ndarray, end: np.ndarray | None,
                  dur: np.ndarray | None) -> np.ndarray:
    """:func:`overlap_in_lanes` of one lane's ``rows``: in the stable order of their starts
    (the row order itself where the starts already rise, as a profiler writes a stream), a
    row overlaps when it starts before the latest end of the rows above it. Found a block at a
    time with that end carried, so that beside the row index and its start order no array as
    long as the lane is made (a lane of a million dispatches costs a block's few MiB, not the
    whole sort's tens)."""
    lane_start = start[rows]
    order = np.argsort(lane_start, kind="stable") if np.any(lane_start[1:] < lane_start[:-1]) else None
    del lane_start
    flags = np.zeros(len(rows), dtype=bool)
    latest_end = None
    for at in range(0, len(rows), _LANE_BLOCK):
        block = slice(at, at + _LANE_BLOCK)
        idx = rows[block] if order is None else rows[order[block]]
        s = start[idx]
        e = end[idx] if end is not None else s + dur[idx].astype(np.int64)
        running = np.maximum.accumulate(e)
        found = np.zeros(len(idx), dtype=bool)
        if latest_end is not None:
            np.maximum(running, latest_end, out=running)
            found[0] = s[0] < latest_end
        found[1:] = s[1:] < running[:-1]
        if order is None:
            flags[block] = found
        else:
            flags[order[block]] = found
        latest_end = running[-1]
    return flags


#: :func:`overlap_lane_by_lane` passes over the lane ids once per lane up to this many lanes
_FEW_LANES = 64
_FEW_LANES_MAX_ID = 1 << 20
#: rows of a lane flagged this many at a time, in the order of their starts
_LANE_BLOCK = 1 << 16


def _lane_codes(col: pd.Series, na: int | None = None) -> np.ndarray:
    """Small non-negative integer codes of a key column (missing values: their own code, or
    ``na``). Constant columns, the common case for file/pid/agent, skip the hash table."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy().astype(np.int64)
        return np.where(codes < 0, na if na is not None else len(col.cat.categories), codes)
    missing = col.isna().to_numpy()
    if not missing.any():
        values = col.to_numpy(dtype=np.int64, copy=False) if col.dtype.kind in "iu" or str(col.dtype) == INT \
            else None
        if values is not None and len(values):
            lo, hi = values.min(), values.max()
            if lo == hi:
                return np.zeros(len(col), dtype=np.int64)
            if hi - lo < 1 << 12:
                # small ids (CSV queue/stream ids 1..N): an offset, no hash table; the bound
                # keeps combined lane ids small enough for flag_queue_overlap's 16-bit sort
                return values - lo
    elif missing.all():
        return np.full(len(col), na if na is not None else 0, dtype=np.int64)
    codes = pd.factorize(col, use_na_sentinel=True)[0].astype(np.int64)
    return np.where(codes < 0, na if na is not None else codes.max() + 1, codes)


def _segmented_cummax(values: np.ndarray, seg_id: np.ndarray) -> np.ndarray:
    """Running maximum that restarts at each segment (``seg_id`` ascending)."""
    lo = values.min() if len(values) else 0
    rel = values - lo
    span = int(rel.max()) + 1 if len(values) else 1
    if int(seg_id[-1]) < (np.iinfo(np.int64).max // span) - 1:
        # lift each segment above all earlier ones so one accumulate never crosses a boundary
        offset = seg_id.astype(np.int64) * span
        return np.maximum.accumulate(rel + offset) - offset + lo
    return pd.Series(values).groupby(seg_id).cummax().to_numpy()


def finalize_counters(df: pd.DataFrame, path: str | None, *, allow_empty: bool = True) -> pd.DataFrame:
    if len(df) == 0 and not allow_empty:
        raise GemmperfInputError(path, "no counter records found")
    df = df.copy(deep=False)
    if path is not None and "file" not in df.columns:
        df["file"] = path
    if "value" in df.columns:
        v = pd.to_numeric(df["value"], errors="coerce")
        if v.isna().any():
            i = int(np.flatnonzero(v.isna().to_numpy())[0])
            raise GemmperfInputError(path, f"counter value {df['value'].iloc[i]!r} is not a number",
                                     record=f"counter row {i + 1}")
        finite = np.isfinite(v.to_numpy(dtype="float64"))
        if not finite.all():
            i = int(np.flatnonzero(~finite)[0])
            raise GemmperfInputError(path, f"counter value {float(v.iloc[i])!r} is not a finite "
                                           "number", record=f"counter row {i + 1}")
        df["value"] = v.astype("float64")
    return coerce_columns(df, COUNTER_SCHEMA, path)


def finalize_agents(df: pd.DataFrame, path: str | None) -> pd.DataFrame:
    df = df.copy(deep=False)
    if path is not None and "file" not in df.columns:
        df["file"] = path
    return coerce_columns(df, AGENT_SCHEMA, path)


def validate_dispatches(df: pd.DataFrame, path: str | None = None) -> None:
    """Assert that ``df`` follows DISPATCH_SCHEMA (used by tests and after concatenation)."""
    missing = [c for c in DISPATCH_COLUMNS if c not in df.columns]
    if missing:
        raise GemmperfInputError(path, f"dispatch table lacks columns {missing}")
    for col, dtype in DISPATCH_SCHEMA.items():
        actual = df[col].dtype
        ok = isinstance(actual, pd.CategoricalDtype) if dtype == STR else str(actual) == dtype
        if not ok:
            raise GemmperfInputError(path, f"column {col!r} has dtype {actual}, expected {dtype}")
    if (df["dur_ns"] < 0).any():
        raise GemmperfInputError(path, "negative durations in dispatch table")
    if not (df["dur_ns"] == df["end_ns"] - df["start_ns"]).all():
        raise GemmperfInputError(path, "dur_ns != end_ns - start_ns")


def _string_categorical(s: pd.Series) -> pd.Categorical:
    """A categorical with string categories (numeric categories become their text), so that
    every frame's column combines with the others'."""
    if not isinstance(s.dtype, pd.CategoricalDtype):
        s = as_category(s)
    cats = s.cat.categories
    if len(cats) == 0 or cats.dtype.kind in "OSU" or pd.api.types.is_string_dtype(cats.dtype):
        if len(cats) == 0:
            return pd.Categorical.from_codes(np.full(len(s), -1), categories=pd.Index([], dtype=object))
        return pd.Categorical.from_codes(s.cat.codes.to_numpy(), categories=pd.Index(cats.astype(str), dtype=object))
    return pd.Categorical.from_codes(s.cat.codes.to_numpy(), categories=pd.Index([str(c) for c in cats], dtype=object))


def _union_categorical(columns: list[pd.Series | int]) -> pd.Categorical:
    """``union_categoricals(ignore_order=True)`` of the columns as string categoricals (an int:
    that many missing values), each column's codes recoded by one lookup: a table of many small
    frames (one per trace file) would otherwise pay pandas' per-frame recoding for every
    column. The categories are the ones pandas gives: the first column's when every column has
    the same set, else the union in order of first appearance, as ``Index.append().unique()``
    types it."""
    index: dict[str, int] = {}
    codes: list[np.ndarray] = []
    names: list[list[str]] = []
    for col in columns:
        if isinstance(col, int):
            codes.append(np.full(col, -1, dtype=np.int64))
            names.append([])
            continue
        cat = col.array if isinstance(col.dtype, pd.CategoricalDtype) else _string_categorical(col)
        own = [str(v) for v in cat.categories.tolist()]
        lut = np.array([index.setdefault(v, len(index)) for v in own], dtype=np.int64)
        c = np.asarray(cat.codes, dtype=np.int64)
        codes.append(np.where(c >= 0, lut[np.maximum(c, 0)], -1) if len(lut) else np.full(len(c), -1))
        names.append(own)
    first = pd.Index(names[0], dtype=object)
    if all(len(n) == len(first) and set(n) == set(names[0]) for n in names[1:]):
        categories = first
    else:
        categories = first.append([pd.Index(n, dtype=object) for n in names[1:]]).unique()
    return pd.Categorical.from_codes(np.concatenate(codes), dtype=pd.CategoricalDtype(categories, ordered=False))


def _concat_columns(parts: list[pd.Series]) -> pd.Series:
    """``pd.concat(parts, ignore_index=True)``: a new index, the values in order; columns of
    one dtype joined as arrays, without ``pd.concat``'s per-frame steps (many small frames)."""
    first = parts[0].dtype
    if not all(p.dtype == first for p in parts[1:]):
        return pd.concat(parts, ignore_index=True)
    if isinstance(first, np.dtype):
        return pd.Series(np.concatenate([p.to_numpy() for p in parts]), dtype=first)
    arrays = [p.array for p in parts]
    return pd.Series(type(arrays[0])._concat_same_type(arrays))


def concat_tables(frames: Iterable[pd.DataFrame], schema: dict[str, str]) -> pd.DataFrame:
    """Concatenate canonical tables, keeping category dtypes (pandas would fall back to object).

    Columns beyond the schema (reader extras such as torch collective metadata) are kept even
    when only some frames have them.
    """
    frames = [f for f in frames if f is not None]
    if not frames:
        return empty(schema)
    if len(frames) == 1:
        return frames[0]
    cols: list[str] = []
    for f in frames:
        cols.extend(c for c in f.columns if c not in cols)
    out: dict[str, Any] = {}
    for c in cols:
        present = [f[c] if c in f.columns else None for f in frames]
        is_cat = schema.get(c) == STR or any(
            s is not None and isinstance(s.dtype, pd.CategoricalDtype) for s in present)
        if is_cat:
            out[c] = pd.Series(_union_categorical([len(f) if s is None else s for f, s in zip(frames, present)]))
        else:
            dtype = schema.get(c)
            parts = [s if s is not None
                     else pd.Series([pd.NA] * len(f), dtype=dtype if dtype in (INT, None) and dtype else "object")
                     for f, s in zip(frames, present)]
            out[c] = _concat_columns(parts)
    return pd.DataFrame(out)


def set_columns(df: pd.DataFrame, **values: Any) -> pd.DataFrame:
    """Return ``df`` with scalar provenance columns (point, rank, run, pass, host, pid) set."""
    df = df.copy(deep=False)
    for col, val in values.items():
        dtype = DISPATCH_SCHEMA.get(col) or COUNTER_SCHEMA.get(col) or AGENT_SCHEMA.get(col)
        if dtype == STR:
            df[col] = pd.Categorical([val] * len(df)) if val is not None else pd.Categorical([None] * len(df))
        elif dtype == INT:
            df[col] = pd.array([val] * len(df), dtype=INT)
        else:
            df[col] = val
    return df


_SHORT_CACHE: dict[str, str] = {}


def short_name(name: str) -> str:
    """Truncate a demangled kernel name to its base name, as rocprofv3's ``-T`` does.

    ``void at::native::foo<float, 4>(float*, int)`` -> ``foo``; C-named kernels such as
    ``Cijk_...`` are returned unchanged (minus a trailing ``.kd``).
    """
    s = name.strip()
    if s.endswith(" [clone .kd]"):
        s = s[: -len(" [clone .kd]")]
    if s.endswith(".kd"):
        s = s[:-3]
    # cut the parameter list: the last top-level '(' (names may contain '(anonymous namespace)')
    depth = 0
    cut = len(s)
    for i in range(len(s) - 1, -1, -1):
        ch = s[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    head = s[:cut] if cut > 0 else s
    # strip template arguments at top level
    out = []
    depth = 0
    for ch in head:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    head = "".join(out).strip()
    # drop return type / qualifiers ("void ns::kernel" -> "kernel")
    head = head.split(" ")[-1] if " " in head else head
    head = head.rsplit("::", 1)[-1]
    return head or name


def shorten_names(names: pd.Series) -> pd.Series:
    return map_categories(names, short_name)
