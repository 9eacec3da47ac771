"""A rocprofv3 JSON read for a per-source reduction: per dispatch record a few compact numbers.

The full read (:func:`~pytest_gemmperf.traces.rocprof_json.read_rocprof_json`) keeps each run of
``kernel_dispatch`` records as a matrix of its 17 integer fields (136 bytes a dispatch) until the
file's end, where the kernel symbols and agents it refers to are known, and then builds a table
of some 40 columns. ``gemmperf analyze --no-report`` reads ten of them (``analysis/
source_totals.READ_COLUMNS``). A slim read (``read_rocprof_json(path, columns=...)`` with the
columns among :data:`SLIM_COLUMNS`) keeps per record (:class:`SlimRuns`, per process):

* its ``kernel_id``'s code and its lane's code (one per distinct ``(agent handle, queue handle,
  stream handle)``: what the in-order check groups by), each numbered within the process;
* its start and its duration (``end - start``), in the narrowest integer types that hold a run's
  values: 16 bytes a dispatch;
* of a record that ends before it starts only the first one (row, ``dispatch_id``, times) and
  how many there are: what the full read's error names.

At the file's end every check of the full read runs on the codes, in its order (a kernel id not
in ``kernel_symbols``, an agent handle not in ``agents``: the same first record and count; then a
dispatch ending before its start), and the dispatches come out as
:class:`~pytest_gemmperf.traces.coded.CodedDispatches`: one key row per (process, kernel name),
built by the full read's own column code, so the table they stand for equals the full table's
columns (values, dtypes, categories, row order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.categories import categorize
from pytest_gemmperf.traces.coded import CodedDispatches
from pytest_gemmperf.traces.schema import (DISPATCH_SCHEMA, coerce_columns, overlap_lane_by_lane,
                                           refuse_negative_durations)
from pytest_gemmperf.traces.slim_arrays import MISSING as _MISSING
from pytest_gemmperf.traces.slim_arrays import join_releasing, narrow, release_free_memory

#: the dispatch columns a slim read makes, each equal to the full read's
SLIM_COLUMNS = ("source", "file", "host", "pid", "rank", "point", "run", "pass", "agent", "kernel", "category",
                "start_ns", "end_ns", "dur_ns", "zero_dur", "queue_overlap")

#: the record fields a slim read pulls out of the decoded records (all of ``DISPATCH_FIELDS``
#: are still decoded and checked): pulling the seven costs under half of the seventeen
SLIM_FIELDS = ("start_timestamp", "end_timestamp", "dispatch_info.agent_id.handle",
               "dispatch_info.queue_id.handle", "stream_id.handle", "dispatch_info.kernel_id",
               "dispatch_info.dispatch_id")
_START, _END, _AGENT, _QUEUE, _STREAM, _KERNEL, _DISPATCH_ID = range(len(SLIM_FIELDS))


def can_slim(columns: Iterable[str] | None, gives: Sequence[str] = SLIM_COLUMNS) -> bool:
    """Whether a slim read that ``gives`` these columns (this reader's: :data:`SLIM_COLUMNS`)
    serves ``columns`` (None: every column, which it does not): each is one it gives or one the
    full table never has (the dispatches' table holds the columns the file has, as
    ``table[columns]`` keeps them)."""
    return columns is not None and all(c in gives or c not in DISPATCH_SCHEMA for c in columns)


def lookup_sorted(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``keys`` in ``sorted_keys`` and a mask of keys that were found."""
    pos = np.searchsorted(sorted_keys, keys)
    pos_c = np.minimum(pos, max(len(sorted_keys) - 1, 0))
    found = (pos < len(sorted_keys)) & (sorted_keys[pos_c] == keys) if len(sorted_keys) else \
        np.zeros(len(keys), dtype=bool)
    return pos_c, found


def value_codes(table: dict, values: np.ndarray) -> np.ndarray:
    """Per row of ``values`` (1-D, or 2-D rows), its code in ``table`` (new values numbered on).
    Rows are numbered through their columns' own codes (a sort of each column, then one of
    the few combinations), not by a sort of whole rows."""
    if values.ndim == 1:
        uniq, inverse = np.unique(values, return_inverse=True)
        keys = uniq.tolist()
    else:
        columns = [np.unique(values[:, j], return_inverse=True) for j in range(values.shape[1])]
        combined = np.zeros(len(values), dtype=np.int64)
        for u, inv in columns:  # a few distinct handles a column: the product stays small
            combined *= len(u)
            combined += inv.reshape(-1)
        uniq, inverse = np.unique(combined, return_inverse=True)
        digits = []
        for u, _ in reversed(columns):
            uniq, digit = np.divmod(uniq, len(u))
            digits.append(u[digit].tolist())
        keys = list(zip(*reversed(digits)))
    codes = np.fromiter((table.setdefault(k, len(table)) for k in keys), dtype=np.int64, count=len(keys))
    return narrow(codes[inverse.reshape(-1)])


class Starts:
    """Start times kept a run of rows at a time as offsets from the run's earliest (a run spans
    well under 4 s: 32 bits a row), joined back to int64 ns once (modular arithmetic: exact
    for any int64 values)."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray | None] = []
        self.bases: list[int] = []
        self.n = 0

    def add(self, start: np.ndarray) -> None:
        base = int(start.min()) if len(start) else 0
        self.bases.append(base)
        with np.errstate(over="ignore"):
            self.parts.append(narrow(start - np.int64(base)))
        self.n += len(start)

    def join(self) -> np.ndarray:
        """Every run's starts in int64 ns, each part let go once it is copied."""
        out = np.empty(self.n, dtype=np.int64)
        at = 0
        for i, base in enumerate(self.bases):
            part, self.parts[i] = self.parts[i], None
            with np.errstate(over="ignore"):
                np.add(part, np.int64(base), out=out[at:at + len(part)], casting="unsafe")
            at += len(part)
        return out


def pop_column(parts: dict[str, list[np.ndarray]], starts: Starts, column: str) -> np.ndarray:
    """One column a slim read kept a block at a time, joined (``start_ns`` from ``starts``), its
    parts let go and their heap pages given back (freed small arrays otherwise stay resident
    beside the joined column)."""
    if column == "start_ns":
        out = starts.join()
    else:
        out = _joined(parts.pop(column))
    release_free_memory()
    return out


class SlimRuns:
    """One process's ``kernel_dispatch`` records, compact (see the module docstring)."""

    FIELDS = SLIM_FIELDS

    def __init__(self) -> None:
        self.kernel_ids: dict[int, int] = {}   # kernel_id -> code, in order of appearance
        self.lanes: dict[tuple[int, int, int], int] = {}  # (agent, queue, stream handle) -> code
        self.parts: dict[str, list[np.ndarray]] = {"kernel": [], "lane": [], "dur_ns": []}
        self.starts = Starts()
        self.n = 0
        self.streams = False  # some record carries a stream id (a 7.x file)
        self.negative: tuple[int, int, int, int] | None = None  # first: row, dispatch_id, start, end
        self.n_negative = 0

    def add(self, m: np.ndarray) -> None:
        """Keep what a slim read needs of a run's record matrix (``SLIM_FIELDS`` columns)."""
        start, end = m[:, _START], m[:, _END]
        dur = end - start  # both in [0, 2**63): no overflow
        bad = np.flatnonzero(dur < 0)
        if len(bad):
            if self.negative is None:
                i = int(bad[0])
                self.negative = (self.n + i, int(m[i, _DISPATCH_ID]), int(start[i]), int(end[i]))
            self.n_negative += len(bad)
        self.streams = self.streams or bool((m[:, _STREAM] != _MISSING).any())
        self.parts["kernel"].append(value_codes(self.kernel_ids, m[:, _KERNEL]))
        self.parts["lane"].append(value_codes(self.lanes, m[:, [_AGENT, _QUEUE, _STREAM]]))
        self.starts.add(start)
        self.parts["dur_ns"].append(narrow(dur))
        self.n += len(m)

    def kernel_id_values(self) -> np.ndarray:
        """The kernel ids the records use."""
        return np.fromiter(self.kernel_ids, dtype=np.int64, count=len(self.kernel_ids))

    def pop(self, column: str) -> np.ndarray:
        return pop_column(self.parts, self.starts, column)

    def resolve(self, agents, symbols, path: str, p_idx: int) -> SlimProcess:
        """The full read's ``_resolve`` checks on the codes (the first record naming a kernel id
        or agent handle the process does not list, and how many do), and the process's
        records with their kernels' name codes and their lanes' ``(agent, queue, stream)``."""
        ids = self.kernel_id_values()
        spos, sfound = lookup_sorted(symbols.sorted_ids, ids)
        kernel = self.pop("kernel")
        if not sfound.all():
            self._refuse(kernel, ~sfound, "kernel_id {} is not in kernel_symbols", ids, path, p_idx)
        lanes = np.array(list(self.lanes), dtype=np.int64).reshape(-1, 3)
        apos, afound = lookup_sorted(agents.sorted_handles, lanes[:, 0])
        lane = self.pop("lane")
        if not afound.all():
            self._refuse(lane, ~afound, "agent handle {} is not in agents[]", lanes[:, 0], path, p_idx,
                         count=False)
        gpu = agents.gpu_index[apos].tolist()
        return SlimProcess(p_idx=p_idx, name=symbols.kernel[spos], kernel=kernel, lane=lane,
                           lane_values=[(None if g == _MISSING else g, q, s)
                                        for g, (_, q, s) in zip(gpu, lanes.tolist())],
                           start_ns=self.pop("start_ns"), dur_ns=self.pop("dur_ns"), n=self.n,
                           streams=self.streams, negative=self.negative, n_negative=self.n_negative)

    @staticmethod
    def _refuse(codes: np.ndarray, bad_code: np.ndarray, message: str, values: np.ndarray,
                path: str, p_idx: int, count: bool = True) -> None:
        """The full read's error for the first record whose code is ``bad_code``."""
        rows = bad_code[codes]
        i = int(np.flatnonzero(rows)[0])
        text = message.format(values[codes[i]])
        if count:
            text += f" ({int(rows.sum())} record(s) affected)"
        raise GemmperfInputError(path, text, record=f"process {p_idx}, buffer_records.kernel_dispatch[{i}]")


@dataclass
class SlimProcess:
    """One process's records after the checks: per record its kernel's name code (``name`` of
    its kernel code), its lane code (``lane_values``: gpu index or None, queue and stream handle of
    each), start and duration."""

    p_idx: int
    name: np.ndarray
    kernel: np.ndarray
    lane: np.ndarray
    lane_values: list[tuple]
    start_ns: np.ndarray
    dur_ns: np.ndarray
    n: int
    streams: bool
    negative: tuple[int, int, int, int] | None
    n_negative: int


def coded_dispatches(parts: list[SlimProcess], path: str, columns: Sequence[str], pids: list,
                     key_columns: Callable[[np.ndarray, np.ndarray], dict[str, Any]]) -> CodedDispatches:
    """The processes' records (in file order) as the full table's ``columns``, coded: the full
    read's ``finalize_dispatches`` check of records that end before they start (the first one
    in the table's order, and how many), then one key row per (process, kernel name) whose
    columns ``key_columns(process index, kernel name code)`` makes as the full read makes its
    rows', the in-order flags of the lanes (pid, gpu index, queue, else stream) as
    ``flag_queue_overlap`` groups the table's rows."""
    offsets = np.cumsum([0] + [p.n for p in parts])
    bad = [(offsets[i] + p.negative[0], p) for i, p in enumerate(parts) if p.negative is not None]
    if bad:
        row, first = bad[0]
        _, dispatch_id, start, end = first.negative
        refuse_negative_durations(path, sum(p.n_negative for p in parts), int(row),
                                  None if dispatch_id == _MISSING else dispatch_id, start, end)
    columns = [c for c in columns if c in SLIM_COLUMNS]  # those the table has
    key_proc, key_name, key_agent, codes, lanes = [], [], [], [], []
    lane_of: dict[tuple, int] = {}
    n_keys = 0
    for p in parts:
        used = np.unique(p.name)  # the name codes of the process's kernels: its key rows
        name_key = np.searchsorted(used, p.name)
        if "agent" in columns:  # a key row per (kernel name, GPU) the records show
            gpus, gpu_of_lane = np.unique(np.array([_MISSING if g is None else g for g, _, _ in p.lane_values],
                                                   dtype=np.int64), return_inverse=True)
            pair, code = np.unique(name_key[p.kernel].astype(np.int64) * len(gpus)
                                   + gpu_of_lane.reshape(-1)[p.lane], return_inverse=True)
            codes.append(narrow(n_keys + code.reshape(-1)))
            key_name.append(used[pair // len(gpus)])
            key_agent.append(gpus[pair % len(gpus)])
            n_used = len(pair)
        else:
            codes.append(narrow((n_keys + name_key)[p.kernel]))
            key_name.append(used)
            n_used = len(used)
        n_keys += n_used
        key_proc.append(np.full(n_used, p.p_idx, dtype=np.int64))
        pid = pids[p.p_idx]
        lane_codes = np.fromiter(
            (lane_of.setdefault((pid, gpu, ("q", q) if q != _MISSING else
                                 ("s", None if s == _MISSING else s)), len(lane_of))
             for gpu, q, s in p.lane_values), dtype=np.int64, count=len(p.lane_values))
        lanes.append(narrow(lane_codes[p.lane]))
    start = _joined([p.start_ns for p in parts])
    dur = _joined([p.dur_ns for p in parts])
    for p in parts:  # their columns now live in the joined ones
        p.start_ns = p.dur_ns = p.kernel = p.lane = None
    overlap = (overlap_lane_by_lane(_joined(lanes), start, dur=dur)
               if "queue_overlap" in columns else np.zeros(len(start), dtype=bool))
    del lanes
    key_proc = np.concatenate(key_proc)
    cols = key_columns(key_proc, np.concatenate(key_name))
    cols["category"] = categorize(pd.Series(cols["kernel"]))
    if key_agent:
        agent = np.concatenate(key_agent)
        cols["agent"] = pd.arrays.IntegerArray(agent, agent == _MISSING)
    keys = coerce_columns(pd.DataFrame({c: cols[c] for c in columns if c in cols},
                                       index=pd.RangeIndex(len(key_proc)), copy=False),
                          {c: DISPATCH_SCHEMA[c] for c in columns if c in cols}, path)
    return CodedDispatches(keys=keys, code=_joined(codes), start_ns=start, dur_ns=dur,
                           queue_overlap=overlap, columns=tuple(columns))


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else join_releasing(arrays)
