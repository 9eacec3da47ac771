"""A source's dispatches as codes, for a per-source reduction that never builds their table.

A reduction (``analysis/source_totals.py``) reads per dispatch a few key columns (source,
point, rank, kernel, category: a handful of distinct combinations per source) and a few
numbers (start, duration, the in-order flag). A reader that keeps its dispatches compact
(``traces/torch_slim.py``, the slim rocprofv3 JSON read) hands them over as
:class:`CodedDispatches`: each distinct combination of the key columns once, as a row of
:attr:`~CodedDispatches.keys` in the table's dtypes, and per dispatch the index of its row
there, its start, its duration and its flag, in the narrowest integer types that hold them
(about 15 bytes a dispatch instead of the table's 40, and no per-row column is made by the
reduction's grouping). :meth:`~CodedDispatches.frame` is the dispatches table they stand for:
what the reader returns to a caller that wants a table, so the two can never differ.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from pytest_gemmperf.traces.schema import Trace


class NotSlim(Exception):
    """A slim read cannot give the columns asked for exactly (a Kineto trace's collective
    metadata, which a slim read does not link): read the source whole instead. Never an
    input error: the full read of the same file says what, if anything, is wrong with it."""


#: the per-dispatch columns :class:`CodedDispatches` holds (as numbers, not via ``keys``)
NUMBER_COLUMNS = ("start_ns", "end_ns", "dur_ns", "zero_dur", "queue_overlap")


@dataclass
class CodedDispatches:
    """Dispatches as key rows and per-row numbers (see the module docstring)."""

    keys: pd.DataFrame          # one row per key code: the table's key columns, its dtypes
    code: np.ndarray            # per dispatch (table order): its row of ``keys``
    start_ns: np.ndarray        # int64
    dur_ns: np.ndarray          # non-negative integers (any width)
    queue_overlap: np.ndarray   # bool
    columns: tuple[str, ...]    # the table's columns, in order (key columns and NUMBER_COLUMNS)

    def __len__(self) -> int:
        return len(self.code)

    def select(self, columns: Sequence[str]) -> CodedDispatches:
        """Only ``columns`` (those it has, in that order), as ``table[columns]``."""
        keep = tuple(c for c in columns if c in self.columns)
        return replace(self, keys=self.keys[[c for c in keep if c in self.keys.columns]], columns=keep)

    def with_keys(self, keys: pd.DataFrame) -> CodedDispatches:
        """The same dispatches with ``keys`` (columns set or changed on every key row, e.g. the
        path's provenance: a constant column is the same on the key rows as on the rows); new
        columns go last, as ``DataFrame.__setitem__`` puts them."""
        added = tuple(c for c in keys.columns if c not in self.columns)
        return replace(self, keys=keys, columns=self.columns + added)

    def frame(self) -> pd.DataFrame:
        """The dispatches table: row ``i`` is key row ``code[i]`` with its numbers."""
        rows = self.keys.iloc[self.code.astype(np.intp, copy=False)].reset_index(drop=True)
        start = self.start_ns.astype(np.int64, copy=False)
        dur = self.dur_ns.astype(np.int64)
        numbers = {"start_ns": start, "end_ns": start + dur, "dur_ns": dur, "zero_dur": dur == 0,
                   "queue_overlap": self.queue_overlap.astype(bool, copy=False)}
        return pd.DataFrame({c: rows[c] if c in rows.columns else numbers[c] for c in self.columns},
                            copy=False)


#: values per slice of :func:`first_positions`
_SLICE = 1 << 18


def first_positions(values: np.ndarray, n_values: int) -> np.ndarray:
    """Per value 0 .. ``n_values`` - 1, the position of its first occurrence in ``values``
    (-1: none), a slice at a time (no array as long as ``values`` is made); the scan stops once
    every value was seen (a source shows its few kernels, lanes and pids early)."""
    first = np.full(n_values, -1, dtype=np.int64)
    todo = n_values
    for lo in range(0, len(values), _SLICE):
        if not todo:
            break
        seen, at = np.unique(values[lo:lo + _SLICE], return_index=True)
        new = first[seen] < 0
        first[seen[new]] = lo + at[new]
        todo -= int(new.sum())
    return first


def as_asked(trace: Trace, columns: Sequence[str] | None, coded: bool) -> Trace:
    """A reader's ``trace`` as its caller asked for it: a slim read's coded dispatches as their
    table unless ``coded``; a full table cut to ``columns`` (those it has, as ``table[columns]``)."""
    d = trace.dispatches
    if isinstance(d, CodedDispatches):
        if not coded:
            trace.dispatches = d.frame()
    elif columns is not None:
        trace.dispatches = d[[c for c in columns if c in d.columns]]
    return trace

