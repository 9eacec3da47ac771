"""A Kineto trace read for a per-source reduction: only the dispatch columns it reads, in memory
that does not grow with the trace's CPU side.

``gemmperf analyze --no-report`` reduces each source to duration rows and totals
(``analysis/source_totals.py``): per dispatch it reads the kernel, the times and two flags,
and per trace a few constants (source, host, pid, rank). The full reader
(:func:`~pytest_gemmperf.traces.torch_trace.read_torch_trace`) keeps every run of events as
column frames (GPU events with some 30 columns, runtime calls, CPU operators with their input
shapes) to link each kernel to its operator: about a kilobyte a dispatch. A slim read
(``read_torch_trace(path, columns=...)`` with ``columns`` among :data:`SLIM_COLUMNS`) runs the
same checks on every run of events and keeps of it:

* per GPU event its kernel name's code (one string per distinct name), the code of its
  ``(device, stream)`` lane, its start and its duration in ns (:class:`GpuRuns`): 16 bytes
  (each in the narrowest integer type that holds a run's values);
* per runtime call with a correlation id that id, its pid's code and whether it carries launch
  dimensions (:class:`RuntimeRuns`: what picks the host process when calls share an id): 11
  bytes;
* of CPU operators and annotations only how often each pid occurs (:class:`PidCounts`).

Each is kept per category, so that the runs joined category by category are in a whole-file
read's row order without a sort. The columns it returns equal the full table's, values, dtypes
and categories alike (the kernel categorical lists its names sorted, as ``astype("category")``
does), and so do the host process, the errors and the notes.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.traces.categories import categorize
from pytest_gemmperf.traces.coded import CodedDispatches, first_positions
from pytest_gemmperf.traces.schema import (DISPATCH_SCHEMA, INT, STR, coerce_columns, lane_ids, missing_array,
                                           overlap_lane_by_lane, repeated_category)
from pytest_gemmperf.traces.slim_arrays import join_releasing, narrow
from pytest_gemmperf.traces.torch_frames import COLL_COLUMNS

#: the dispatch columns a slim read makes, each equal to the full read's
SLIM_COLUMNS = ("source", "file", "host", "pid", "rank", "point", "run", "pass", "agent", "kernel", "category",
                "start_ns", "end_ns", "dur_ns", "zero_dur", "queue_overlap")
#: the collective metadata columns (``torch_frames.COLL_COLUMNS``): a slim read gives them
#: where no event carries any (all null, as the full table's are then), else it raises
#: :class:`~pytest_gemmperf.traces.coded.NotSlim`
SLIM_IF_NO_COLLECTIVES = tuple(COLL_COLUMNS)
#: the columns of the full table (the canonical ones, the launching op's, the collectives')
_FULL_COLUMNS = frozenset((*DISPATCH_SCHEMA, "op_name", "op_input_dims", "op_input_types", *COLL_COLUMNS))


def can_slim(columns: Iterable[str] | None) -> bool:
    """Whether a slim read gives ``columns`` (None: every column, which it does not): each is
    one of :data:`SLIM_COLUMNS`, a collective column (:data:`SLIM_IF_NO_COLLECTIVES`), or one the
    full table never has (the dispatches' table holds the columns the file has)."""
    return columns is not None and all(c in SLIM_COLUMNS or c in SLIM_IF_NO_COLLECTIVES or c not in _FULL_COLUMNS
                                       for c in columns)


def wants_collectives(columns: Iterable[str] | None) -> bool:
    """Whether a slim read of ``columns`` must give collective columns (:class:`~pytest_gemmperf.
    traces.coded.NotSlim` where the trace carries collective metadata)."""
    return columns is not None and any(c in SLIM_IF_NO_COLLECTIVES for c in columns)


class PidCounts:
    """How often each pid occurs among some events, in the order a whole-file read lists them
    (category by category in ``rank`` order, each in file order): what
    :func:`~pytest_gemmperf.traces.torch_meta.process_pid` counts, without the pid columns."""

    def __init__(self) -> None:
        self.by_rank: dict[int, dict[int, int]] = {}

    def add(self, pids: pd.Series, rank: np.ndarray | None = None) -> None:
        self.add_values(pids.to_numpy(dtype=np.int64, na_value=0), pids.isna().to_numpy(), rank)

    def add_values(self, pids: np.ndarray, missing: np.ndarray, rank: np.ndarray | None = None) -> None:
        """:meth:`add` of int64 ``pids`` with their ``missing`` mask."""
        valid = ~missing
        values = pids[valid]
        ranks = np.zeros(len(values), np.int64) if rank is None else np.asarray(rank)[valid]
        for r in np.unique(ranks).tolist():
            counts = self.by_rank.setdefault(r, {})
            uniq, first, n = np.unique(values[ranks == r], return_index=True, return_counts=True)
            for i in np.argsort(first, kind="stable").tolist():  # first appearance first
                pid = int(uniq[i])
                counts[pid] = counts.get(pid, 0) + int(n[i])

    def add_codes(self, code: np.ndarray, pids: Sequence[int | None]) -> None:
        """:meth:`add` of the pids ``pids[code[i]]`` (None: missing), all of one rank, counted
        on the codes: no column as long as ``code`` is made."""
        n = np.bincount(code, minlength=len(pids))
        first = first_positions(code, len(pids))
        counts = self.by_rank.setdefault(0, {})
        for k in np.argsort(first, kind="stable").tolist():  # first appearance first
            pid = pids[k]
            if first[k] >= 0 and pid is not None:
                counts[pid] = counts.get(pid, 0) + int(n[k])

    def ordered(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for r in sorted(self.by_rank):
            for pid, n in self.by_rank[r].items():
                out[pid] = out.get(pid, 0) + n
        return out


def most_frequent_pid(counts: Sequence[PidCounts]) -> int | None:
    """``process_pid`` of the columns ``counts`` stand for, in that order: the most frequent
    pid, the first listed on a tie (pandas' ``value_counts`` sorts stably)."""
    merged: dict[int, int] = {}
    for c in counts:
        for pid, n in c.ordered().items():
            merged[pid] = merged.get(pid, 0) + n
    return max(merged, key=merged.__getitem__) if merged else None


class _ByRank:
    """Columns of numpy arrays appended a run at a time, kept per category rank: joined rank by
    rank, each in the order its runs came, they are in a whole-file read's row order."""

    def __init__(self) -> None:
        self.parts: dict[int, dict[str, list[np.ndarray]]] = {}

    def append(self, rank: np.ndarray, columns: dict[str, np.ndarray]) -> None:
        ranks = np.unique(rank).tolist()
        for r in ranks:
            rows = slice(None) if len(ranks) == 1 else rank == r
            part = self.parts.setdefault(r, {c: [] for c in columns})
            for c, values in columns.items():
                part[c].append(values[rows])

    def pop(self, column: str, dtype: type) -> np.ndarray:
        """One column of every run, joined; each part is let go once it is copied, so that the
        column is held about once, not twice."""
        arrays = [a for r in sorted(self.parts) for a in self.parts[r].pop(column)]
        if not arrays:
            return np.zeros(0, dtype=dtype)
        return join_releasing(arrays)


class GpuRuns:
    """The GPU events of each run, compact: kernel names and lanes numbered across the file."""

    def __init__(self) -> None:
        self.kernels: dict[str, int] = {}   # kernel name -> code, in order of appearance
        self.lanes: dict[tuple, int] = {}   # (device, stream), None for missing -> code
        self.runs = _ByRank()

    def add(self, df: pd.DataFrame, rank: np.ndarray) -> None:
        """Keep of a run's GPU frame (``torch_frames._gpu_frame``) what a slim read returns."""
        self.add_columns({"kernel": df["kernel"].tolist(), "start_ns": df["start_ns"].to_numpy(dtype=np.int64),
                          "end_ns": df["end_ns"].to_numpy(dtype=np.int64),
                          **{c: (df[c].to_numpy(dtype=np.int64, na_value=0), df[c].isna().to_numpy())
                             for c in ("agent", "stream")}}, rank)

    def add_columns(self, cols: dict, rank: np.ndarray) -> None:
        """:meth:`add` of a run's columns (``torch_frames.checked_gpu_columns``: kernel names, device
        and stream as int64 values and missing masks, start and end)."""
        # numbered in a dict: each name is a new string whose hash is computed once either way,
        # and a dict lookup costs a third of pandas' factorize of an object array
        kernels = self.kernels
        code = np.array([kernels.setdefault(k, len(kernels)) for k in cols["kernel"]], dtype=np.int64)
        lane = first_seen_codes(self.lanes, *_id_pairs(*cols["agent"], *cols["stream"]))
        start = cols["start_ns"]
        self.runs.append(rank, {"code": narrow(code), "lane": narrow(lane), "start_ns": start,
                                "dur_ns": narrow(cols["end_ns"] - start)})

    def coded(self, path: str, facts: dict, columns: Sequence[str]) -> CodedDispatches:
        """The dispatches' ``columns`` (in a whole-file read's row order), with the trace's
        constants (``facts``: pid, host, rank), as ``finalize_dispatches`` and the torch reader
        make them, coded: one key row per kernel name (its name, category and the constants),
        and per dispatch its kernel's code, start, duration and in-order flag. No column is
        made per dispatch but the in-order check's, and the runs' parts are let go as their
        columns are joined."""
        columns = [c for c in columns if c in SLIM_COLUMNS or c in SLIM_IF_NO_COLLECTIVES]  # the table's
        start = self.runs.pop("start_ns", np.int64)
        dur = self.runs.pop("dur_ns", np.uint32)
        lane = self.runs.pop("lane", np.int16)
        overlap = (overlap_lane_by_lane(self._lane_ids(lane), start, dur=dur) if "queue_overlap" in columns
                   else np.zeros(len(start), dtype=bool))
        code = self.runs.pop("code", np.int16)
        names = pd.Series(list(self.kernels), dtype=object).astype(STR)
        agent = None
        if "agent" in columns:  # a key row per (kernel, device) the events show
            code, of_key, agent = self._by_device(code, lane)
            names = names.iloc[of_key].reset_index(drop=True)
        del lane
        # only the key columns asked for are made (a reduction reads seven of some twenty)
        keys = {"kernel": names}
        if "category" in columns:
            keys["category"] = categorize(names)
        if agent is not None:
            keys["agent"] = agent
        keys.update(_constants(path, facts, [c for c in _CONSTANT_SCHEMA if c in columns], len(names)))
        for c in SLIM_IF_NO_COLLECTIVES:  # no event carried any (else NotSlim was raised)
            if c in columns:
                keys[c] = _nulls(COLL_COLUMNS[c], len(names))
        key_columns = [c for c in columns if c in keys]
        return CodedDispatches(keys=pd.DataFrame({c: keys[c] for c in key_columns},
                                                 index=pd.RangeIndex(len(names)), copy=False),
                               code=code, start_ns=start, dur_ns=dur,
                               queue_overlap=overlap, columns=tuple(columns))

    def _by_device(self, code: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, pd.arrays.IntegerArray]:
        """Per dispatch the code of its (kernel, device) pair, and per pair its kernel's code
        and its device (the full table's ``agent``)."""
        devices = [a for a, _ in self.lanes]  # per lane code
        known = sorted({a for a in devices if a is not None})
        number = {a: i for i, a in enumerate(known)}
        n_dev = len(known) + 1  # the last: no device
        of_lane = np.array([number.get(a, len(known)) if a is not None else len(known) for a in devices],
                           dtype=np.int64)
        pair, per_dispatch = np.unique(code.astype(np.int64) * n_dev + of_lane[lane], return_inverse=True)
        device = pair % n_dev
        values = np.array(known + [0], dtype=np.int64)[device]
        return (narrow(per_dispatch.reshape(-1)), pair // n_dev,
                pd.arrays.IntegerArray(values, device == len(known)))

    def _lane_ids(self, lane: np.ndarray) -> np.ndarray:
        """Per dispatch, the in-order lane the torch reader checks (``schema.lane_ids`` of its
        ``agent`` and ``stream`` as the queue; file and pid are one value per trace). Those ids
        depend on which values the rows show first, so they are found on one row per
        ``(device, stream)`` pair, taken in the order the rows first show them."""
        if not len(lane):
            return np.zeros(0, dtype=np.int32)
        seen, first = np.unique(lane, return_index=True)
        seen = seen[np.argsort(first)]
        pairs = list(self.lanes)
        cols = {}
        for i, name in ((0, "agent"), (1, "queue")):
            values = [pairs[k][i] for k in seen.tolist()]
            cols[name] = pd.arrays.IntegerArray(np.array([0 if v is None else v for v in values], dtype=np.int64),
                                                np.array([v is None for v in values], dtype=bool))
        ids = np.zeros(len(pairs), dtype=np.int64)
        ids[seen] = lane_ids(pd.DataFrame(cols))
        return narrow(ids)[lane]


class RuntimeRuns:
    """The runtime calls of each run that carry a correlation id: the id, the pid's code and
    whether the call carries launch dimensions."""

    def __init__(self) -> None:
        self.pids: dict[int | None, int] = {}  # pid (None: missing) -> code
        self.runs = _ByRank()

    def add(self, rt: pd.DataFrame, rank: np.ndarray) -> None:
        """Keep of a run's runtime frame (``torch_frames._runtime_frame``) what picks the host
        process (``runtime_by_correlation`` drops the calls without a correlation id)."""
        self.add_columns({c: (rt[c].to_numpy(dtype=np.int64, na_value=0), rt[c].isna().to_numpy())
                          for c in ("pid", "correlation")}
                         | {"has_grid": np.asarray(rt["has_grid"].to_numpy(), dtype=bool)}, rank)

    def add_columns(self, cols: dict, rank: np.ndarray) -> None:
        """:meth:`add` of a run's columns (``torch_frames.checked_runtime_columns``: pid and
        correlation id as int64 values and missing masks, launch dimensions or not)."""
        keep = ~cols["correlation"][1]
        pid_v, pid_missing = cols["pid"]
        pid = first_seen_codes(self.pids, *_ids(pid_v[keep], pid_missing[keep]))
        self.runs.append(rank[keep], {"correlation": narrow(cols["correlation"][0][keep]),
                                      "pid": narrow(pid), "has_grid": cols["has_grid"][keep]})

    def host_pids(self) -> PidCounts:
        """The pids ``process_pid`` counts of the runtime calls: one call per correlation id, the
        one carrying launch dimensions first (``torch_frames.runtime_by_correlation``). Counted
        on the pid codes; the calls are reordered (an index per call) only where some carry
        launch dimensions and others do not, or an id repeats."""
        has_grid = self.runs.pop("has_grid", bool)
        order = (None if has_grid.all() or not has_grid.any()  # a stable sort would keep them
                 else np.concatenate([np.flatnonzero(has_grid), np.flatnonzero(~has_grid)]))
        del has_grid
        corr = self.runs.pop("correlation", np.int64)
        if order is not None:
            corr = corr[order]
        if len(corr) > 1 and not (corr[1:] > corr[:-1]).all():  # an id twice: its first call
            first = np.sort(np.unique(corr, return_index=True)[1])
            order = first if order is None else order[first]
        del corr
        code = self.runs.pop("pid", np.int32)
        counts = PidCounts()
        counts.add_codes(code if order is None else code[order], list(self.pids))
        return counts


def first_seen_codes(known: dict, codes: np.ndarray, uniques: Sequence) -> np.ndarray:
    """Per item its key's number in ``known`` (key -> number, in order of first appearance
    across runs), given the run's ``codes`` into its distinct keys ``uniques`` (numbered in
    the order the run first shows them): new keys are numbered as one item at a time would."""
    lut = np.fromiter((known.setdefault(k, len(known)) for k in uniques), dtype=np.int64,
                      count=len(uniques))
    return lut[codes] if len(codes) else np.zeros(0, dtype=np.int64)


def _id_pairs(a: np.ndarray, a_missing: np.ndarray, b: np.ndarray,
              b_missing: np.ndarray) -> tuple[np.ndarray, list[tuple]]:
    """Codes of the ``(a, b)`` id pairs (None for missing), numbered in order of first
    appearance, and the pairs (Python ints) in that order: each column numbered on its own,
    then the pairs of numbers (hash tables, no sort)."""
    ca, ua = _ids(a, a_missing)
    cb, ub = _ids(b, b_missing)
    codes, pairs = pd.factorize(ca * len(ub) + cb)
    return codes, [(ua[p // len(ub)], ub[p % len(ub)]) for p in pairs.tolist()]


def _ids(v: np.ndarray, missing: np.ndarray) -> tuple[np.ndarray, list]:
    """Codes of the ids (None for missing), numbered in order of first appearance, and the ids
    (Python ints) in that order."""
    codes, uniques = pd.factorize(pd.arrays.IntegerArray(v, missing), use_na_sentinel=False)
    return codes.astype(np.int64), [None if x is pd.NA else int(x) for x in uniques]


#: the dispatch columns that hold one value per Kineto trace
_CONSTANT_SCHEMA = {c: DISPATCH_SCHEMA[c] for c in ("source", "file", "host", "pid", "rank", "point",
                                                      "run", "pass")}


def _nulls(dtype: str, n: int) -> object:
    """``n`` nulls of a column of ``dtype`` (STR or INT), as the full table holds them (the
    cast of an all-None column to categories: none, of the object dtype)."""
    return missing_array(dtype, n)


def _constants(path: str, facts: dict, columns: Sequence[str], n: int) -> dict[str, object]:
    """The ``columns`` of :data:`_CONSTANT_SCHEMA` (the source, the file and ``facts``' host,
    pid and rank; no point, run or pass), each value ``n`` times, as ``coerce_columns`` makes
    them of the one-row table of those values and :func:`_repeated` repeats them. Made from
    the values themselves where each is a string, an int64 integer or None (a table of one row
    costs more than the read of a small trace's kernels); any other value takes the table's
    way, whose errors are the full read's."""
    values = {"source": "torch", "file": path, **{c: facts[c] for c in ("host", "pid", "rank")}}
    if not all(_plain(v, _CONSTANT_SCHEMA[c]) for c, v in values.items()):
        one = pd.DataFrame({c: [v] for c, v in values.items()})
        made = _repeated(coerce_columns(one, _CONSTANT_SCHEMA, path), n)
        return {c: made[c] for c in columns}
    out: dict[str, object] = {}
    for c in columns:
        v = values.get(c)
        if v is None:  # point, run and pass too
            out[c] = missing_array(_CONSTANT_SCHEMA[c], n)
        elif _CONSTANT_SCHEMA[c] == STR:
            out[c] = repeated_category(v, n)
        else:
            out[c] = pd.arrays.IntegerArray(np.full(n, v, dtype=np.int64), np.zeros(n, dtype=bool))
    return out


def _plain(value: object, dtype: str) -> bool:
    """Whether a constant is None, or a string of a STR column, or an int64 integer of an INT one."""
    if value is None:
        return True
    if dtype == STR:
        return type(value) is str
    return type(value) is int and -(2 ** 63) <= value < 2 ** 63


def _repeated(one: pd.DataFrame, n: int) -> dict[str, object]:
    """The columns of the one-row frame ``one``, its value repeated ``n`` times, dtypes kept."""
    out: dict[str, object] = {}
    for c in one.columns:
        s = one[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            codes = s.cat.codes.to_numpy()
            out[c] = pd.Categorical.from_codes(np.full(n, codes[0], dtype=codes.dtype), dtype=s.dtype)
        elif str(s.dtype) == INT:
            out[c] = pd.arrays.IntegerArray(np.full(n, s.to_numpy(dtype=np.int64, na_value=0)[0]),
                                            np.full(n, bool(s.isna().iloc[0])))
        else:
            out[c] = np.full(n, s.to_numpy()[0], dtype=s.dtype)
    return out
