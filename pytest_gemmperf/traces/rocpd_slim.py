"""A rocpd SQLite read for a per-source reduction: the dispatch query fetched a batch at a time.

The full read (:func:`~pytest_gemmperf.traces.rocpd.read_rocpd_db`) fetches every row of the
kernel dispatch query (the ``kernels`` view or each run's tables) as Python tuples, then makes
a column of Python objects of each of its 19 fields, then joins symbols, processes and agents
onto every row: about a kilobyte a dispatch at its peak. ``gemmperf analyze --no-report`` reads
ten columns of the result (``analysis/source_totals.READ_COLUMNS``). A slim read
(``read_rocpd_db(path, columns=...)`` with the columns among :data:`SLIM_COLUMNS`) runs the
same queries in the same order under the same budget, converts and checks each batch of rows
as the full read converts its rows (``rocpd._frame``), and keeps per row (:class:`SlimRows`):

* the code of its combination of ``(guid, pid, kernel_id, agent, queue, stream)``: what its
  key columns (kernel name, host, pid) and its in-order lane follow from, and of each
  combination the first row that shows it, whole;
* its start (from its batch's earliest) and its duration, in the narrowest integer types that
  hold a batch's values: about 10 bytes a dispatch.

At the end the full read's own joins and ``finalize_dispatches`` run on the first rows of the
combinations (a few thousand rows), which gives the key rows and, through ``lane_ids``, each
combination's lane. A cell the full read refuses, a missing or negative duration, a kernel id
or agent the run does not list, or no dispatches at all stop the slim read
(:class:`FullReadDecides`) and the caller reads the file whole, so that the error (or the
table) is the full read's own; a query that exceeds its budget is the same line either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.traces.coded import NUMBER_COLUMNS, CodedDispatches
from pytest_gemmperf.traces import rocprof_slim
from pytest_gemmperf.traces.rocprof_slim import Starts, pop_column
from pytest_gemmperf.traces.schema import lane_ids, overlap_lane_by_lane
from pytest_gemmperf.traces.slim_arrays import narrow

__all__ = ["SLIM_COLUMNS", "FullReadDecides", "SlimRows", "can_slim"]

#: the dispatch columns this slim read makes, each equal to the full read's: the rocprofv3 JSON
#: slim read's but ``agent`` (a GPU a key row is not kept here: asked for it, the file is read whole)
SLIM_COLUMNS = tuple(c for c in rocprof_slim.SLIM_COLUMNS if c != "agent")


def can_slim(columns: Sequence[str] | None) -> bool:
    """Whether this slim read serves ``columns`` (:func:`~.rocprof_slim.can_slim`)."""
    return rocprof_slim.can_slim(columns, SLIM_COLUMNS)

#: the query columns a row's key columns and lane follow from
COMBINATION = ("guid", "pid", "kernel_id", "agent_node", "queue", "stream")


class FullReadDecides(Exception):
    """The full read might refuse the file or read it otherwise: it decides."""


class SlimRows:
    """The dispatch query's rows, compact (see the module docstring)."""

    def __init__(self) -> None:
        self.combinations: dict[tuple, int] = {}  # COMBINATION values -> code, in order of first row
        self.firsts: list[pd.DataFrame] = []      # each combination's first row, in code order
        self.parts: dict[str, list[np.ndarray]] = {"code": [], "dur_ns": []}
        self.starts = Starts()
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def add(self, df: pd.DataFrame) -> None:
        """Keep a batch of rows (``df``: the query's columns as the full read converts them)."""
        if not len(df):
            return
        if df["start_ns"].isna().any() or df["end_ns"].isna().any():
            raise FullReadDecides  # a missing timestamp: finalize_dispatches' error
        start = df["start_ns"].to_numpy(dtype=np.int64)
        dur = df["end_ns"].to_numpy(dtype=np.int64) - start  # wraps as the full read's does
        if dur.min() < 0:
            raise FullReadDecides
        try:
            local = df.groupby(list(COMBINATION), dropna=False, sort=False).ngroup().to_numpy()
        except (TypeError, ValueError):
            raise FullReadDecides from None  # values pandas cannot group (hostile cells)
        _, first = np.unique(local, return_index=True)  # groups are numbered by first row
        lookup = np.empty(len(first), dtype=np.int64)
        new = []
        for g, values in enumerate(df.iloc[first][list(COMBINATION)].itertuples(index=False, name=None)):
            key = tuple(None if v is pd.NA or v is None else v for v in values)
            code = self.combinations.get(key)
            if code is None:
                code = self.combinations[key] = len(self.combinations)
                new.append(int(first[g]))
            lookup[g] = code
        if new:
            self.firsts.append(df.iloc[new])
        self.parts["code"].append(narrow(lookup[local]))
        self.starts.add(start)
        self.parts["dur_ns"].append(narrow(dur))
        self.n += len(df)

    def pop(self, column: str) -> np.ndarray:
        return pop_column(self.parts, self.starts, column)

    def coded(self, columns: Sequence[str],
              table: Callable[[pd.DataFrame], pd.DataFrame]) -> CodedDispatches:
        """The rows as the full table's ``columns``, coded: ``table`` (the full read's joins and
        ``finalize_dispatches``) of each combination's first row gives the key rows and, by
        ``lane_ids``, the lanes of the in-order check."""
        first_rows = table(pd.concat(self.firsts, ignore_index=True))
        code = self.pop("code")
        start = self.pop("start_ns")
        dur = self.pop("dur_ns")
        overlap = (overlap_lane_by_lane(narrow(lane_ids(first_rows))[code], start, dur=dur)
                   if "queue_overlap" in columns else np.zeros(len(start), dtype=bool))
        keys = first_rows[[c for c in columns if c not in NUMBER_COLUMNS and c in first_rows.columns]]
        return CodedDispatches(keys=keys, code=code, start_ns=start, dur_ns=dur, queue_overlap=overlap,
                               columns=tuple(columns))
