"""Per-kernel duration statistics from the canonical dispatches table.

Two views:

* :func:`kernel_stats` — what the gate and the reports use: per ``(point, rank, kernel)`` (or any
  ``by``) robust and classical summaries of ``dur_ns``, with optional warm-up removal.
* :func:`rocprof_style_stats` — the same numbers rocprofv3 ``--stats`` writes to
  ``kernel_stats.csv``, to cross-check a trace against the profiler's own summary.

:func:`rows_kernel_stats` gives :func:`kernel_stats`' table for dispatches that pool workers
sent back as :class:`DurationRows` (each source's distinct keys once, per dispatch a key index
and a duration): the group ids are found on the keys, not on millions of rows.

Definitions (vectorized: group ids plus one sort of ``group id x span + duration``, no loop over
groups; null keys such as a missing ``rank`` form their own group; the MAD and the outlier
counts are read off that sorted key by ``searchsorted``, not by sorting the deviations again):

* ``std_ns``: **sample** standard deviation (``ddof=1``), the estimator of the population spread
  from a finite set of dispatches, and the one rocprofv3 prints (so the two views agree); a
  group of one dispatch has ``std_ns`` = NaN (undefined) rather than 0.
* quantiles (``median_ns``, ``p05_ns``, ``p95_ns``, quartiles for ``iqr_ns``): linear
  interpolation between order statistics (numpy/pandas default, "type 7").
* ``mad_ns``: median absolute deviation from the median, unscaled (multiply by 1.4826 for a
  normal-consistent sigma).
* ``cv``: ``std_ns / mean_ns``.
* ``n_outliers``: dispatches above ``Q3 + 3 * IQR`` (Tukey's "far out" fence). They are counted,
  never removed: a slow tail is often the regression being looked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.intervals import group_codes, sorted_group_codes
from pytest_gemmperf.analysis.small_tables import taken
from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA, concat_tables

#: the unit whose dispatch sequence warm-up removal restarts in (ARCHITECTURE "process unit")
PROCESS_KEYS = ("host", "pid", "rank", "run", "point")

STATS_COLUMNS = ("count", "total_ns", "mean_ns", "median_ns", "std_ns", "min_ns", "max_ns",
                 "p05_ns", "p95_ns", "iqr_ns", "mad_ns", "cv", "range_ns", "n_outliers",
                 "category")

OUTLIER_IQR_FACTOR = 3.0


def _sort_within_groups(gid: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """``values`` (non-negative int64) sorted by (group id, value).

    One quicksort of ``gid * span + value`` when that fits in int64 (always, for realistic
    durations and group counts); otherwise a two-key lexsort.
    """
    span = int(values.max()) + 1 if len(values) else 1
    if n_groups * span < 2**62:
        key = gid.astype(np.int64) * span + values
        key.sort()
        return key - np.repeat(np.arange(n_groups, dtype=np.int64) * span,
                               np.bincount(gid, minlength=n_groups))
    return values[np.lexsort((values, gid))]


def drop_warmup(dispatches: pd.DataFrame, warmup: int) -> pd.DataFrame:
    """Drop the first ``warmup`` dispatches of every kernel in every process (start order)."""
    if warmup <= 0 or len(dispatches) == 0:
        return dispatches
    keys = [c for c in PROCESS_KEYS if c in dispatches.columns] + ["kernel"]
    gid = dispatches.groupby(keys, dropna=False, observed=True, sort=False).ngroup().to_numpy()
    start = dispatches["start_ns"].to_numpy(dtype=np.int64)
    start = start - start.min()
    count = np.bincount(gid)
    span = int(start.max()) + 1
    if len(count) * span < 2**62:  # one sort on a combined key instead of a two-pass lexsort
        order = np.argsort(gid.astype(np.int64) * span + start, kind="stable")
    else:
        order = np.lexsort((start, gid))
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    nth_sorted = np.arange(len(gid)) - first[gid[order]]
    keep = np.empty(len(gid), dtype=bool)
    keep[order] = nth_sorted >= warmup
    return dispatches[keep]


def kernel_stats(dispatches: pd.DataFrame, by: Sequence[str] = ("point", "rank", "kernel"),
                 warmup: int = 0) -> pd.DataFrame:
    """Duration statistics per group of ``by``.

    Returns columns ``*by, count, total_ns, mean_ns, median_ns, std_ns, min_ns, max_ns, p05_ns,
    p95_ns, iqr_ns, mad_ns, cv, range_ns, n_outliers, category``, one row per non-empty group in
    group-key order (category order for categorical keys). ``category`` is the group's kernel
    category (constant per kernel name).

    Implementation: one group id per row (``groupby(...).ngroup()``, null keys kept), one
    sort by (group, duration); every order statistic is then an index into that sorted array.
    """
    by = list(by)
    missing = [c for c in by + ["dur_ns"] if c not in dispatches.columns]
    if missing:
        raise KeyError(f"kernel_stats: dispatches lack columns {missing}")
    df = drop_warmup(dispatches, warmup)
    if len(df) == 0:
        return _empty_stats(df, by)
    gid = df.groupby(by, dropna=False, observed=True, sort=True).ngroup().to_numpy()
    rep = np.unique(gid, return_index=True)[1]  # first row of each group: keys, category
    return _stats_frame(df, rep, by, group_statistics(gid, df["dur_ns"].to_numpy(dtype=np.int64), len(rep)))


def group_statistics(gid: np.ndarray, dur: np.ndarray, n_groups: int) -> dict[str, np.ndarray]:
    """The :data:`STATS_COLUMNS` but ``category`` of the integer durations ``dur`` per group id
    ``gid`` (0 .. ``n_groups`` - 1, each non-empty), in group order. Both may come in any
    integer type (a narrow one keeps the rows small; the arithmetic is int64 and float64).

    Floating-point sums run over the rows in their given order (``np.bincount``), so the
    rows' order is part of the result's last bits: callers pass them in input order. The
    arrays as long as the rows are made one at a time where they can be (the order statistics
    before the deviations; the deviations squared in place), so that a few million dispatches
    cost a few of them at once, not seven.
    """
    count = np.bincount(gid, minlength=n_groups)
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    last = first + count - 1
    span = int(dur.max()) + 1
    keyed = n_groups * span < KEYED_LIMIT and int(dur.min()) >= 0
    if keyed:  # one sort of gid * span + dur: the groups' sorted durations and a searchable key
        key = np.multiply(gid, span, dtype=np.int64)
        key += dur
        key.sort()
        sdur = np.repeat(np.arange(n_groups, dtype=np.int64) * span, count)
        np.subtract(key, sdur, out=sdur)
    else:
        dur = dur.astype(np.int64, copy=False)
        sdur = _sort_within_groups(gid, dur, n_groups)

    def quantile(sorted_vals: np.ndarray, q: float) -> np.ndarray:
        return sorted_quantile(sorted_vals, first, count, q)

    total = np.add.reduceat(sdur, first)
    mean = total / count
    median = quantile(sdur, 0.5)
    q1, q3 = quantile(sdur, 0.25), quantile(sdur, 0.75)
    iqr = q3 - q1
    # |x - median| doubled, so that a median ending in .5 keeps the deviations integral
    median2 = np.rint(2 * median).astype(np.int64)
    fence = q3 + OUTLIER_IQR_FACTOR * iqr
    if keyed:
        mad = _mad_from_key(key, span, first, count, median2) / 2
        n_out = _count_above(key, span, first + count, fence)
        del key
    else:
        absdev2 = np.abs(2 * dur - median2[gid])
        mad = quantile(_sort_within_groups(gid, absdev2, n_groups), 0.5) / 2
        del absdev2
        n_out = np.bincount(gid, weights=dur > fence[gid], minlength=n_groups).astype(np.int64)
    out = {"min_ns": sdur[first], "max_ns": sdur[last], "p05_ns": quantile(sdur, 0.05),
           "p95_ns": quantile(sdur, 0.95)}
    del sdur
    dev = mean[gid]
    np.subtract(dur, dev, out=dev)  # dur - mean[gid], in place
    np.multiply(dev, dev, out=dev)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.sqrt(np.bincount(gid, weights=dev, minlength=n_groups) / (count - 1))
    del dev
    std[count < 2] = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        cv = std / mean
    return {"count": count.astype(np.int64), "total_ns": total.astype(np.int64), "mean_ns": mean,
            "median_ns": median, "std_ns": std, **out, "iqr_ns": iqr, "mad_ns": mad,
            "cv": cv, "n_outliers": n_out}


#: the sorted key ``gid * span + dur`` must stay below this (int64, and exact as float64 for
#: the outlier fence's comparison)
KEYED_LIMIT = 2**53


def sorted_quantile(sorted_vals: np.ndarray, first: np.ndarray, count: np.ndarray, q: float) -> np.ndarray:
    """Per group of ``sorted_vals`` (sorted within each group; group i at ``first[i]``, ``count[i]``
    values, none empty): its ``q`` quantile, linear ("type 7") as numpy's and pandas' default;
    the median is the middle value or the mean of the two middle ones."""
    return _interpolate(sorted_vals, first + q * (count - 1))


def _interpolate(sorted_vals: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Linear interpolation ("type 7") between the order statistics at ``floor(pos)`` and
    ``ceil(pos)`` of ``sorted_vals``."""
    lo = np.floor(pos).astype(np.int64)
    hi = np.ceil(pos).astype(np.int64)
    lo_v = sorted_vals[lo].astype("float64")
    return lo_v + (sorted_vals[hi] - lo_v) * (pos - lo)


def _count_within(key: np.ndarray, span: int, groups: np.ndarray, low: np.ndarray,
                  high: np.ndarray) -> np.ndarray:
    """Per entry i: how many durations of group ``groups[i]`` lie in [low[i], high[i]]
    (``key``: the sorted ``gid * span + dur``)."""
    base = groups * span
    low = np.clip(low, 0, span)
    high = np.clip(high, -1, span - 1)
    n = np.searchsorted(key, base + high, side="right") - np.searchsorted(key, base + low, side="left")
    return np.maximum(n, 0)


def _mad_from_key(key: np.ndarray, span: int, first: np.ndarray, count: np.ndarray,
                  median2: np.ndarray) -> np.ndarray:
    """Per group, the median of ``|2 x - median2|`` over its durations x, interpolated as
    :func:`_interpolate` does, without sorting the deviations: the k-th smallest deviation is
    the least D with at least k + 1 durations in [(median2 - D) / 2, (median2 + D) / 2],
    found by bisection on D, two ``searchsorted`` over the sorted key per step."""
    n_groups = len(first)
    pos = first + 0.5 * (count - 1)
    lo_i = np.floor(pos).astype(np.int64)
    need = np.concatenate([lo_i, np.ceil(pos).astype(np.int64)]) - np.concatenate([first, first]) + 1
    groups = np.tile(np.arange(n_groups, dtype=np.int64), 2)
    m2 = np.concatenate([median2, median2])
    lo = np.zeros(2 * n_groups, dtype=np.int64)
    hi = np.full(2 * n_groups, 2 * span, dtype=np.int64)  # above every deviation
    while (lo < hi).any():
        mid = (lo + hi) // 2
        ok = _count_within(key, span, groups, -((mid - m2) // 2), (m2 + mid) // 2) >= need
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid + 1)
    lo_v = lo[:n_groups].astype("float64")
    return lo_v + (lo[n_groups:] - lo_v) * (pos - lo_i)


def _count_above(key: np.ndarray, span: int, end: np.ndarray, fence: np.ndarray) -> np.ndarray:
    """Per group, how many durations exceed the float ``fence``: those from the least integer
    above it on (durations are below 2**53, exact as floats), counted on the sorted key."""
    start = np.clip(np.floor(fence) + 1, 0, span).astype(np.int64)
    base = np.arange(len(end), dtype=np.int64) * span
    return (end - np.searchsorted(key, base + start, side="left")).astype(np.int64)


def _empty_stats(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return (pd.DataFrame({c: pd.Series(dtype=df[c].dtype) for c in by}
                         | {c: pd.Series(dtype="float64") for c in STATS_COLUMNS}))


def _stats_frame(keys: pd.DataFrame, rep: np.ndarray, by: list[str], stats: dict[str, np.ndarray]) -> pd.DataFrame:
    """The statistics table: the ``by`` keys and ``category`` of ``keys``' rows ``rep`` (one
    per group, in group order) beside ``stats``, made into a frame once (each column set on a
    frame copies its blocks: most of the cost where there are a few groups)."""
    cols: dict[str, object] = {c: taken(keys[c], rep) for c in by}  # no frame of the picked rows
    for c in ("count", "total_ns", "mean_ns", "median_ns", "std_ns", "min_ns", "max_ns", "p05_ns",
              "p95_ns", "iqr_ns", "mad_ns", "cv"):
        cols[c] = stats[c]
    cols["range_ns"] = stats["max_ns"] - stats["min_ns"]
    cols["n_outliers"] = stats["n_outliers"]
    if "category" in keys.columns:
        cols["category"] = taken(keys["category"], rep)
    else:
        cols["category"] = pd.Series([pd.NA] * len(rep), dtype="category")
    # in the table's column order: ``by``, then STATS_COLUMNS (``category`` where ``by`` puts it)
    return pd.DataFrame(cols)


# ------------------------------------------------------------- durations reduced where read

#: the key columns of a worker's duration rows: every statistics table (``kernels.csv``, the
#: gate's) groups by some of them and reports ``category``
ROW_KEYS = ("source", "point", "rank", "kernel", "category")
#: their canonical dtypes, for :func:`concat_rows`
ROW_SCHEMA = {c: DISPATCH_SCHEMA[c] for c in ROW_KEYS}

@dataclass
class DurationRows:
    """Durations with their group keys, compact: what a worker sends back per dispatch.

    ``keys`` holds each distinct key of the rows once, in the order the rows first show it;
    ``group`` is each row's index into ``keys`` and ``dur_ns`` its duration, rows in input
    order. A worker packs both arrays into the smallest integer type that holds them
    (a few bytes per dispatch instead of the key columns' ~20); :func:`concat_rows` keeps
    them so.
    """

    keys: pd.DataFrame
    group: np.ndarray
    dur_ns: np.ndarray
    #: :func:`rows_kernel_stats`'s statistics by the group numbers of the keys they were computed
    #: for; rows sharing ``group`` and ``dur_ns`` may share it (the same rows under keys written
    #: differently, e.g. nulls filled), so that a grouping is computed once
    stats_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.dur_ns)


def duration_rows(d: pd.DataFrame, keys: Sequence[str]) -> DurationRows:
    """``d``'s ``dur_ns`` with its ``keys`` columns (those ``d`` has) as :class:`DurationRows`."""
    cols = [c for c in keys if c in d.columns]
    dur = d["dur_ns"].to_numpy(dtype=np.int64)
    if len(d) == 0:
        return DurationRows(d[cols].iloc[:0].reset_index(drop=True), np.empty(0, np.uint8), dur)
    group = group_codes(d, cols)
    # a key's first row is where its code first appears: codes are numbered as they appear
    seen = np.maximum.accumulate(np.concatenate(([-1], group[:-1])))
    first = np.flatnonzero(group > seen)
    # the keys' frame built once from each column's picked values (no frame of the rows on the way)
    return DurationRows(pd.DataFrame({c: taken(d[c], first) for c in cols}), packed(group), packed(dur))


def packed(values: np.ndarray) -> np.ndarray:
    """Non-negative int64 ``values`` in the narrowest unsigned type that holds them (as given
    when some is negative)."""
    if len(values) == 0 or values.min() < 0:
        return values
    top = values.max()
    for t in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(t).max:
            return values.astype(t)
    return values


def concat_rows(parts: Sequence[DurationRows]) -> DurationRows:
    """Several sources' rows as one, in order: keys concatenated (``concat_tables``, so
    categories combine as they do for the rows' own columns), ``group`` and ``dur_ns`` in the
    narrowest integer types that hold every part's (a few bytes a dispatch, as they came)."""
    keys = concat_tables([p.keys for p in parts], ROW_SCHEMA)
    n = sum(len(p) for p in parts)
    group = np.empty(n, dtype=packed(np.array([max(len(keys) - 1, 0)], dtype=np.int64)).dtype)
    dur = np.empty(n, dtype=np.result_type(*[p.dur_ns.dtype for p in parts]) if parts else np.int64)
    row = key = 0
    for p in parts:  # each source's key indices moved past the keys before it, in one pass
        rows = group[row:row + len(p)]
        rows[:] = p.group
        rows += group.dtype.type(key)
        dur[row:row + len(p)] = p.dur_ns
        row += len(p)
        key += len(p.keys)
    return DurationRows(keys, group, dur)


def rows_kernel_stats(rows: DurationRows, by: Sequence[str] = ("point", "rank", "kernel")) -> pd.DataFrame:
    """``kernel_stats`` of the table whose row i is ``rows.keys.iloc[rows.group[i]]`` with
    ``dur_ns`` = ``rows.dur_ns[i]``, computed on the keys (one row each) instead of per row:
    group ids of the few keys, mapped onto the rows by one gather."""
    by = list(by)
    keys = rows.keys
    missing = [c for c in by if c not in keys.columns]
    if missing:
        raise KeyError(f"kernel_stats: dispatches lack columns {missing}")
    if len(rows) == 0:
        return _empty_stats(keys, by)
    rep, stats = rows_group_statistics(rows, by)
    return _stats_frame(keys, rep, by, stats)


def rows_group_statistics(rows: DurationRows, by: Sequence[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """What :func:`rows_kernel_stats` makes its table of (``rows`` not empty): per group of
    ``by`` (in sorted order) the index of its first key in ``rows.keys``, and the
    :func:`group_statistics` of its durations."""
    key_gid = sorted_group_codes(rows.keys, by)  # groupby(by, sort=True).ngroup(), without its fixed costs
    # the first key of a group holds its first row: keys are in the rows' first-occurrence order
    rep = np.unique(key_gid, return_index=True)[1]
    return rep, _cached_statistics(rows, key_gid, len(rep))


def _cached_statistics(rows: DurationRows, key_gid: np.ndarray, n_groups: int) -> dict[str, np.ndarray]:
    """:func:`group_statistics` of ``rows`` grouped by ``key_gid`` (a group number per key),
    from ``rows.stats_cache`` where the same groups, numbered alike, were computed before (the
    numbers are part of the result: a quantile's position counts the rows of the groups before
    it, and its interpolation's last bits follow)."""
    key = key_gid.astype(np.int64).tobytes()
    stats = rows.stats_cache.get(key)
    if stats is None:
        gid = packed(key_gid)[rows.group]  # narrow: one of the few arrays as long as the rows
        stats = rows.stats_cache[key] = group_statistics(gid, rows.dur_ns, n_groups)
    return {c: v.copy() for c, v in stats.items()}  # never the cache's own arrays


#: columns of rocprofv3's kernel_stats.csv (formats doc 3.3)
ROCPROF_STATS_COLUMNS = ("Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage", "MinNs",
                         "MaxNs", "StdDev")


def rocprof_style_stats(dispatches: pd.DataFrame, name_col: str = "kernel") -> pd.DataFrame:
    """Per-kernel-name summary in rocprofv3's ``kernel_stats.csv`` layout and definitions.

    rocprofv3 (ROCm/rocprofiler-sdk ``source/lib/output/generateStats.cpp``, ``generate_stats``
    for kernel dispatch records) accumulates ``end_timestamp - start_timestamp`` per kernel
    name over the whole file; ``statistics.hpp`` (``statistics<uint64_t, double>``) gives
    ``get_mean() = sum / count`` and ``get_variance() = (sum_sq - sum*sum/count) / (count - 1)``,
    i.e. the **sample** variance, 0 for a single call, and ``get_stddev() = sqrt(|variance|)``;
    ``generateCSV.cpp`` ``write_stats`` sets ``Percentage = sum / total_of_all_sums * 100`` and
    sorts rows by total duration, largest first. Confirmed on the 6.2 sample ``hip_stats.csv``:
    ``hipFree`` (2 calls, 10900 and 54371 ns) prints StdDev 30738.638885 = |a-b|/sqrt(2).

    Differences kept on purpose: rocprofv3 forms ``sum*sum`` and ``sum_sq`` in uint64, which
    wraps once a kernel's total exceeds 2**32 ns (about 4.3 s); we compute the same estimator
    in floating point with pandas' numerically stable algorithm instead. Ties in total keep
    name order (rocprofv3's ``std::sort`` is unstable).
    """
    if name_col not in dispatches.columns:
        raise KeyError(f"rocprof_style_stats: dispatches lack column {name_col!r}")
    dur = dispatches["dur_ns"].astype("int64")
    g = dur.groupby(dispatches[name_col], observed=True, sort=True)
    out = pd.DataFrame({
        "Calls": g.count(),
        "TotalDurationNs": g.sum(),
        "MinNs": g.min(),
        "MaxNs": g.max(),
    })
    out["AverageNs"] = out["TotalDurationNs"] / out["Calls"]
    out["StdDev"] = g.std(ddof=1).fillna(0.0).to_numpy()
    total = float(out["TotalDurationNs"].sum())
    out["Percentage"] = out["TotalDurationNs"] / total * 100.0 if total > 0 else 0.0
    out.index.name = "Name"
    out = out.reset_index()
    out["Name"] = out["Name"].astype(str)
    out = out.sort_values(["TotalDurationNs", "Name"], ascending=[False, True], kind="stable")
    return out[list(ROCPROF_STATS_COLUMNS)].reset_index(drop=True)
