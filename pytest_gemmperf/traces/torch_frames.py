"""Typed Kineto events -> column frames (GPU activity, runtime calls, CPU ops, profiler steps).

Split from :mod:`pytest_gemmperf.traces.torch_trace` (the public entry). Every value is read
exactly or rejected with an error naming the event (``traceEvents[i]``, category and name):

* ``ts``/``dur`` are decimal µs text converted to int64 ns by
  :mod:`~pytest_gemmperf.traces.jsonnum` (``start_ns = ts * 1000``, ``end_ns = (ts + dur) *
  1000`` exactly; sub-ns digits rounded once, half to even, and counted in ``_Src.rounded``); a
  negative ``dur`` or an end outside int64 is an error;
* ids (pid, tid, device, stream, correlation, External id, collective sizes) must be int64
  JSON integers; ``pid``/``tid`` strings are Chrome trace lane labels and read as "no id";
* launch dimensions are lists of 1-3 integers in [0, 2**32).

Columns are built with list comprehensions over the events and numpy, one pass per field.
"""

from __future__ import annotations

import operator
import re
from itertools import chain, compress, repeat
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.jsonnum import (INT64_MAX, PROBLEMS, ROUNDED, exact_ints, first_problem,
                                            show, sum_us_to_ns, us_text_to_ns)
from pytest_gemmperf.traces.schema import INT, STR
from pytest_gemmperf.traces.torch_decode import _NO_ARGS, _Args, _Event

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_STEP_TEXT = "ProfilerStep#"  # in every name STEP_RE matches
PARAM_COMMS_OP = "record_param_comms"

#: extra dispatch columns (after the op columns): collective metadata, from the kernel's args or
#: its ``record_param_comms`` op
COLL_COLUMNS: dict[str, str] = {
    "coll_name": STR, "pg_name": STR, "pg_ranks": STR, "group_size": INT, "coll_dtype": STR,
    "in_nelems": INT, "out_nelems": INT, "in_split": STR, "out_split": STR,
}
#: collective column -> its key in the event's args (for error messages)
_COLL_JSON = dict(zip(_Args.__struct_fields__, _Args.__struct_encode_fields__))


class _Src:
    """The file being read: its path, and the run of its events in hand (``events``, the first
    being ``traceEvents[first]``) so that a bad one can be named by its index in the file."""

    __slots__ = ("path", "events", "first", "rounded", "strings")

    def __init__(self, path: str, events: list[_Event], first: int = 0,
                 strings: dict[str, str] | None = None) -> None:
        self.path = path
        self.events = events
        self.first = first
        self.rounded = 0  # ts/dur values with digits below 1 ns, rounded once (jsonnum)
        # one object per distinct name/shape text across the file: a few hundred names stand
        # for millions of events, so the columns hold references, not copies
        self.strings = {} if strings is None else strings

    def notes(self) -> list[str]:
        """What was read other than exactly as written (for reports): never silent."""
        if not self.rounded:
            return []
        return [f"{self.path}: {self.rounded} ts/dur value(s) had digits below 1 ns (float "
                "arithmetic by a tool that rewrote the trace?) and were rounded once, half to "
                "even, to integer ns"]

    def error(self, ev: _Event, message: str) -> GemmperfInputError:
        # error path only: a linear identity search is fine here
        idx = next((i for i, e in enumerate(self.events) if e is ev), None)
        name = ev.name if len(ev.name) <= 80 else ev.name[:77] + "..."
        where = "event" if idx is None else f"traceEvents[{self.first + idx}]"
        return GemmperfInputError(self.path, message, record=f"{where}, {ev.cat} {name!r}")

    def shapes(self, values: list) -> list:
        """Operator shapes/types (``Input Dims``: ``[[64, 4096], [4096, 64]]``) as their text
        (:func:`_shape_str`), None when absent. A trace repeats a few shapes millions of times:
        the text is made once per distinct value, found by the value's JSON encoding (which
        costs a tenth of ``str`` of nested lists)."""
        table = self.strings
        out: list = []
        for v in values:
            if v is None or type(v) is str:
                out.append(v if v is None else table.setdefault(v, v))
                continue
            key = _ENCODE(v)
            text = table.get(key)
            if text is None:
                text = table[key] = table.setdefault(_shape_str(v), _shape_str(v))
            out.append(text)
        return out

    def shared(self, texts: list) -> list:
        """``texts`` with each string replaced by the file's one object of that text."""
        table = self.strings
        return [t if type(t) is not str else table.setdefault(t, t) for t in texts]


def _us_field(src: _Src, events: list[_Event], field: str) -> tuple[np.ndarray, np.ndarray]:
    """Exact int64 ns of the ``ts`` or ``dur`` field of every event (any problem is an error),
    and a mask of the values that had digits below 1 ns and were rounded once."""
    # an attribute written out is read by the interpreter's specialised path, 3-4x faster
    # than getattr with a name (or attrgetter) on thousands of events a run
    tokens = [e.ts for e in events] if field == "ts" else [e.dur for e in events] if field == "dur" else \
        [getattr(e, field) for e in events]
    ns, status = us_text_to_ns(tokens)
    i = first_problem(status)
    if i is not None:
        raise src.error(events[i], f"{field} {PROBLEMS[int(status[i])]}: {show(tokens[i])}")
    rounded = status == ROUNDED
    src.rounded += int(rounded.sum())
    return ns, rounded


def _times(src: _Src, events: list[_Event]) -> tuple[np.ndarray, np.ndarray]:
    """(start_ns, end_ns) = (ts, ts + dur) in exact ns; durations non-negative, ends in int64."""
    start, r_start = _us_field(src, events, "ts")
    dur, r_dur = _us_field(src, events, "dur")
    bad = np.flatnonzero((dur < 0) | (start > INT64_MAX - np.maximum(dur, 0)))
    if len(bad):
        i = int(bad[0])
        what = (f"dur is negative: {show(events[i].dur)}" if dur[i] < 0 else
                "ts + dur is outside the int64 nanosecond range")
        raise src.error(events[i], what)
    end = start + dur
    # sub-ns digits (rare): the end is the exact decimal sum ts + dur, rounded once
    for i in np.flatnonzero(r_start | r_dur).tolist():
        end[i], st = sum_us_to_ns(bytes(events[i].ts), bytes(events[i].dur))
        if st > ROUNDED:
            raise src.error(events[i], "ts + dur is outside the int64 nanosecond range")
    return start, end


def _ids(src: _Src, events: list[_Event], values: list, field: str,
         labels_ok: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """int64 ids and their missing mask, exact; a value that is not an int64 JSON integer is
    an error."""
    v, missing, status = exact_ints(values, labels_ok)
    i = first_problem(status)
    if i is not None:
        raise src.error(events[i], f"{field} {PROBLEMS[int(status[i])]}: {show(values[i])}")
    return v, missing


def _idarray(src: _Src, events: list[_Event], values: list, field: str,
             labels_ok: bool = False) -> pd.arrays.IntegerArray:
    """Nullable Int64 ids (:func:`_ids`) as a column of a frame made by :func:`_frame`."""
    return pd.arrays.IntegerArray(*_ids(src, events, values, field, labels_ok))


def _idcol(src: _Src, events: list[_Event], values: list, field: str,
           labels_ok: bool = False) -> pd.Series:
    """Nullable Int64 ids, exact; a value that is not an int64 JSON integer is an error."""
    return pd.Series(_idarray(src, events, values, field, labels_ok))


def _frame(cols: dict[str, Any], n: int, objects: tuple[str, ...]) -> pd.DataFrame:
    """A frame of ``n`` rows made once from arrays and lists; the ``objects`` columns (lists or
    arrays) stay ``object`` (a bare array of strings would be inferred to ``str``). Every
    column shares one index: a frame made of Series with their own indexes aligns them first,
    which costs as much as the rest of the build on a table of tens of rows."""
    index = pd.RangeIndex(n)
    for c in objects:
        cols[c] = pd.Series(cols[c], dtype=object, index=index)
    return pd.DataFrame(cols, index=index)


def _lane(src: _Src, events: list[_Event], own: list, field: str, event: list,
          event_field: str) -> pd.arrays.IntegerArray:
    """Ids from the events' ``args`` (``own``), else from the event itself (a GPU event's pid
    or tid, labels read as missing); both checked, the args' first."""
    v, missing = _ids(src, events, own, field)
    v2, missing2 = _ids(src, events, event, event_field, labels_ok=True)
    return pd.arrays.IntegerArray(np.where(missing, v2, v), missing & missing2)


def _gpu_frame(gpu: list[_Event], src: _Src) -> pd.DataFrame:
    return gpu_frame_and_overflow(gpu, src)[0]


def gpu_frame_and_overflow(gpu: list[_Event], src: _Src) -> tuple[pd.DataFrame, np.ndarray]:
    """The GPU events' frame, and its rows whose launch dimensions overflow
    (:func:`grid_overflow`, found on the columns before the frame is made of them)."""
    args = [e.args or _NO_ARGS for e in gpu]
    start, end = _times(src, gpu)
    names = src.shared([e.name or e.cat for e in gpu])
    # GPU events carry the device in pid and the stream in tid when args lack them
    cols = {
        "agent": _lane(src, gpu, [a.device for a in args], "args.device", [e.pid for e in gpu], "pid"),
        "stream": _lane(src, gpu, [a.stream for a in args], "args.stream", [e.tid for e in gpu], "tid"),
        "correlation_id": _idarray(src, gpu, [a.correlation for a in args], "args.correlation"),
        "kernel": names,
        "start_ns": start,
        "end_ns": end,
        "_ext": _idarray(src, gpu, [a.external_id for a in args], "args.External id"),
        "_is_kernel": [e.cat in ("kernel", "Kernel") for e in gpu],
    }
    grid = _dim3(src, gpu, [a.grid for a in args], "args.grid")
    block = _dim3(src, gpu, [a.block for a in args], "args.block")
    for i, ax in enumerate("xyz"):
        cols[f"_grid_{ax}"] = grid[i]
        cols[f"_block_{ax}"] = block[i]
    over = dims_overflow(grid, block)
    # collective metadata a kernel carries itself (NCCL/RCCL kernels of newer PyTorch)
    carrying = [i for i, a in enumerate(args) if a.coll_name is not None or a.pg_name is not None]
    if carrying:  # else all None: left out while the runs are held (with_coll_columns)
        cols.update(_coll_values(src, gpu, args, carrying))
    # once: a column set on a frame costs a block copy per run
    return _frame(cols, len(gpu), ("kernel",)), over


def _coll_values(src: _Src, events: list[_Event], args: list[_Args],
                 rows: list[int]) -> dict[str, np.ndarray]:
    """COLL_COLUMNS of the ``rows`` that carry collective metadata (None elsewhere), the
    integer ones checked."""
    _check_coll_ints(src, [events[i] for i in rows], [args[i] for i in rows])
    out = {}
    for col in COLL_COLUMNS:
        values = np.full(len(events), None, dtype=object)
        if rows:
            values[rows] = [_plain(getattr(args[i], col)) for i in rows]
        out[col] = values
    return out


def grid_overflow(df: pd.DataFrame) -> np.ndarray:
    """Rows whose ``args.grid * args.block`` leaves int64 in some axis (each factor is below
    2**32, so the uint64 product is exact; the Int64 product would wrap silently)."""
    return dims_overflow([df[f"_grid_{a}"] for a in "xyz"], [df[f"_block_{a}"] for a in "xyz"])


def dims_overflow(grid: list, block: list) -> np.ndarray:
    """:func:`grid_overflow` of the x, y, z columns (Int64 arrays or Series) of both."""
    over = np.zeros(len(grid[0]), dtype=bool)
    for g, b in zip(grid, block):
        prod = g.to_numpy(np.uint64, na_value=0) * b.to_numpy(np.uint64, na_value=0)
        over |= prod > np.uint64(INT64_MAX)
    return over


_DIM_MAX = 2 ** 32 - 1  # launch APIs and AQL packets hold each dimension in 32 bits


def _dim3(src: _Src, events: list[_Event], values: list, field: str) -> list[pd.arrays.IntegerArray]:
    """x, y, z columns of ``[x, y, z]`` launch dimensions (shorter lists pad with 1).

    Fast path (every real trace): lists of three JSON integers, checked by C-level ``map``
    passes and one int64 conversion. Anything else goes through the per-event check, which
    names the first bad event."""
    n = len(values)
    none = np.fromiter(map(operator.is_, values, repeat(None)), dtype=bool, count=n)
    lists = list(compress(values, ~none))
    if (set(map(type, lists)) <= {list} and set(map(len, lists)) <= {3}
            and set(map(type, chain.from_iterable(lists))) <= {int}):
        try:
            arr = np.array(lists, dtype=np.int64).reshape(len(lists), 3)
        except OverflowError:
            arr = None
        if arr is not None and not ((arr < 0) | (arr > _DIM_MAX)).any():
            full = np.zeros((n, 3), dtype=np.int64)
            full[~none] = arr
            return [pd.arrays.IntegerArray(full[:, i].copy(), none.copy()) for i in range(3)]
    rows: list[Any] = []
    for ev, v in zip(events, values):
        if v is None or v == []:
            rows.append((None, None, None))
        elif (type(v) is list and len(v) <= 3
              and all(type(x) is int and 0 <= x <= _DIM_MAX for x in v)):
            rows.append((v + [1, 1])[:3])
        else:
            raise src.error(ev, f"{field} is not a list of 1-3 integers in [0, 2**32): {show(v)}")
    arr = pd.DataFrame(rows, columns=["x", "y", "z"], dtype=object)
    return [arr[c].astype(INT).array for c in ("x", "y", "z")]


def _runtime_frame(runtime: list[_Event], src: _Src) -> pd.DataFrame:
    """Runtime calls in event order (:func:`runtime_by_correlation` keeps one per correlation
    id once every run of events is in)."""
    args = [e.args or _NO_ARGS for e in runtime]
    return _frame({
        "name": src.shared([e.name for e in runtime]),
        "pid": _idarray(src, runtime, [e.pid for e in runtime], "pid", labels_ok=True),
        "tid": _idarray(src, runtime, [e.tid for e in runtime], "tid", labels_ok=True),
        "ts_ns": _us_field(src, runtime, "ts")[0],
        "correlation": _idarray(src, runtime, [a.correlation for a in args], "args.correlation"),
        "external_id": _idarray(src, runtime, [a.external_id for a in args], "args.External id"),
        "has_grid": [a.grid is not None for a in args],
    }, len(runtime), ("name",))


# --------------------------------------------------------------------------- checked runs
# A slim read of a run of events decoded with the checked types (``torch_decode.checked``):
# its ids are int64 integers (pid/tid: or labels) and its launch dimensions' products fit
# int64, so of the checks only the times' remain, in the order the frames above run them;
# what is kept comes out as numpy columns, without the frames.


def checked_ids(values: list, labels_ok: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """int64 values and missing mask of checked ids (labels, where ``labels_ok``, missing)."""
    v, missing, _ = exact_ints(values, labels_ok)
    return v, missing


def checked_gpu_columns(gpu: list[_Event], src: _Src) -> dict[str, Any]:
    """What a slim read keeps of checked GPU events, as :func:`_gpu_frame` makes it: kernel
    names, device and stream (each its ``args`` value, else the event's pid/tid), start and
    end (checked as there); ``collectives``: whether one carries collective metadata."""
    args = [e.args or _NO_ARGS for e in gpu]
    start, end = _times(src, gpu)
    lanes = {}
    for col, own, event in (("agent", [a.device for a in args], [e.pid for e in gpu]),
                            ("stream", [a.stream for a in args], [e.tid for e in gpu])):
        v, missing = checked_ids(own)
        if missing.any():  # GPU events carry the device in pid and the stream in tid
            v2, missing2 = checked_ids(event, labels_ok=True)
            v = np.where(missing, v2, v)
            missing &= missing2
        lanes[col] = (v, missing)
    return {"kernel": [e.name or e.cat for e in gpu], **lanes, "start_ns": start, "end_ns": end,
            "collectives": any(a.coll_name is not None or a.pg_name is not None for a in args)}


def checked_runtime_columns(runtime: list[_Event], src: _Src) -> dict[str, Any]:
    """What picks the host process of checked runtime calls (as :func:`_runtime_frame` makes
    it: pid, correlation id, launch dimensions or not), their starts read and checked."""
    _us_field(src, runtime, "ts")
    args = [e.args or _NO_ARGS for e in runtime]
    return {"pid": checked_ids([e.pid for e in runtime], labels_ok=True),
            "correlation": checked_ids([a.correlation for a in args]),
            "has_grid": np.array([a.grid is not None for a in args], dtype=bool)}


def checked_cpu_pids(cpu: list[_Event], src: _Src) -> tuple[tuple[np.ndarray, np.ndarray], bool]:
    """The pids of checked operators, their times read and checked (as :func:`_cpu_ops_frame`),
    and whether one is a ``record_param_comms`` (collective metadata)."""
    _times(src, cpu)
    return (checked_ids([e.pid for e in cpu], labels_ok=True),
            any(e.name == PARAM_COMMS_OP for e in cpu))


def runtime_by_correlation(rt: pd.DataFrame) -> pd.DataFrame:
    """One runtime call per correlation id. ROCm Kineto can emit two records per id (e.g. a
    spurious hipArray3DCreate beside hipMemsetAsync); the one carrying launch dimensions wins.
    Calls without a correlation id link nothing and are dropped."""
    has_id = rt["correlation"].notna().to_numpy()
    grid = rt["has_grid"].to_numpy(dtype=bool)
    # those with launch dimensions first, each group in event order (a stable sort, descending)
    order = np.concatenate([np.flatnonzero(has_id & grid), np.flatnonzero(has_id & ~grid)])
    _, first = np.unique(rt["correlation"].to_numpy(dtype=np.int64, na_value=0)[order], return_index=True)
    # one take of the first call per id, in that order (a filter, sort and drop each copied the frame)
    return rt.iloc[order[np.sort(first)]].reset_index(drop=True)


def _cpu_ops_frame(cpu: list[_Event], src: _Src, shapes: bool = True) -> pd.DataFrame:
    """The operators' columns, every value checked; ``shapes``: with their input shapes and
    types (text, never checked: a reader that does not link kernels to operators skips them)."""
    args = [e.args or _NO_ARGS for e in cpu]
    start, end = _times(src, cpu)
    names = src.shared([e.name for e in cpu])
    cols = {
        "name": names,
        "pid": _idarray(src, cpu, [e.pid for e in cpu], "pid", labels_ok=True),
        "tid": _idarray(src, cpu, [e.tid for e in cpu], "tid", labels_ok=True),
        "ts_ns": pd.arrays.IntegerArray(start, np.zeros(len(start), dtype=bool)),
        "dur_ns": pd.arrays.IntegerArray(end - start, np.zeros(len(start), dtype=bool)),
        **({"input_dims": src.shapes([a.input_dims for a in args]),
            "input_types": src.shapes([a.input_type for a in args])}
           if shapes else {}),
        "external_id": _idarray(src, cpu, [a.external_id for a in args], "args.External id"),
        "correlation": _idarray(src, cpu, [a.correlation for a in args], "args.correlation"),
    }
    # collective metadata lives on record_param_comms ops only
    comms = [i for i, n in enumerate(names) if n == PARAM_COMMS_OP]
    if comms:  # else all None: left out while the runs are held (with_coll_columns)
        cols.update(_coll_values(src, cpu, args, comms))
    return _frame(cols, len(cpu), ("name", "input_dims", "input_types") if shapes else ("name",))


def with_coll_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (a GPU or operator frame) with the COLL_COLUMNS a frame without collective
    metadata leaves out (all None, as the events have none), appended in their order. A run
    of events rarely holds any, and nine object columns are 72 bytes an event while the runs
    are held."""
    missing = [c for c in COLL_COLUMNS if c not in df.columns]
    if not missing:
        return df
    # one block of None joined once: a column set at a time costs a copy of the frame's blocks each
    nulls = pd.DataFrame(np.full((len(df), len(missing)), None, dtype=object), index=df.index, columns=missing)
    return pd.concat([df, nulls], axis=1)


def _check_coll_ints(src: _Src, events: list[_Event], args: list[_Args]) -> None:
    """Integer collective metadata (group size, element counts) must be int64 JSON integers."""
    for col, dtype in COLL_COLUMNS.items():
        if dtype == INT and events:
            _idcol(src, events, [getattr(a, col) for a in args], f"args.{_COLL_JSON[col]}")


def _coll_ints(values: list) -> pd.Series:
    """Int64 of collective metadata already checked by _check_coll_ints."""
    v, missing, _ = exact_ints(values)
    return pd.Series(pd.arrays.IntegerArray(v, missing))


def _shape_str(v: Any) -> str:
    return v if isinstance(v, str) else str(v)


_ENCODE = msgspec.json.Encoder().encode


def _plain(v: Any) -> Any:
    """Collective metadata: scalars stay, lists (ranks, split sizes) become their string."""
    return str(v) if isinstance(v, (list, tuple, dict)) else v


def step_ranges(annotations: list[_Event], src: _Src) -> pd.DataFrame:
    """``ProfilerStep#N`` user annotations: name, start_ns, end_ns."""
    steps = [e for e in annotations if STEP_RE.match(e.name)]
    start, end = _times(src, steps)
    return _frame({"name": [e.name for e in steps], "start_ns": start, "end_ns": end}, len(steps), ("name",))


def _steps_frame(annotated: pd.DataFrame | None, cpu_ops: pd.DataFrame) -> pd.DataFrame:
    """Profiler steps: the annotated ranges (:func:`step_ranges`; None: the trace has no
    annotations), then those some older traces record as cpu_op, ordered by start."""
    names: list = []
    starts, ends = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    if annotated is not None:
        names += list(annotated["name"])
        starts.append(annotated["start_ns"].to_numpy(dtype=np.int64))
        ends.append(annotated["end_ns"].to_numpy(dtype=np.int64))
    # the pattern tested on the names that hold its literal part only (usually none: a pass of
    # substring tests instead of a string column made of every operator's name)
    op_names = cpu_ops["name"].to_numpy(dtype=object)
    maybe = np.fromiter((_STEP_TEXT in (n if isinstance(n, str) else str(n)) for n in op_names), dtype=bool,
                        count=len(op_names))
    if maybe.any():
        old = cpu_ops[maybe]
        old = old[old["name"].astype(str).str.match(STEP_RE.pattern)]
        old_start = old["ts_ns"].to_numpy(dtype=np.int64)
        names += list(old["name"])
        starts.append(old_start)
        ends.append(old_start + old["dur_ns"].to_numpy(dtype=np.int64))
    start, end = np.concatenate(starts), np.concatenate(ends)
    step = np.array([int(STEP_RE.match(n).group(1)) for n in names], dtype=np.int64)
    order = np.argsort(start, kind="stable")  # by start, as a stable sort of the frame would
    return _frame({"name": [names[i] for i in order.tolist()], "step": step[order],
                   "start_ns": start[order], "end_ns": end[order]}, len(names), ("name",))
