"""Interval algebra on half-open ``[start, end)`` integer-nanosecond intervals, vectorized.

A *union* is a pair of int64 arrays ``(s, e)`` that is sorted and disjoint, with every interval
of positive length (:func:`merge` produces one). Zero-length intervals have no measure, so they
vanish from unions; touching intervals ``[a, b) [b, c)`` merge into ``[a, c)``.

Per-GPU work uses :class:`GroupedTimeline`: every (process, GPU) group is shifted onto its own
stretch of one global axis, with a gap between groups, so a single sort / cumulative max / sweep
handles all groups at once and intervals never interact across groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.small_tables import SMALL_TABLE_ROWS

Union_ = tuple[np.ndarray, np.ndarray]

#: Columns that make one process-GPU timeline ("same GPU"). point/rank/run/pass are constant
#: within a file; they are included so tables that lack ``file`` still separate processes.
GPU_KEYS: tuple[str, ...] = ("point", "rank", "run", "pass", "file", "host", "pid", "agent")


def _as_i64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.int64)


def merge(start, end) -> Union_:
    """Union of intervals as a sorted disjoint list (zero-length intervals dropped)."""
    s = _as_i64(start)
    e = _as_i64(end)
    keep = e > s
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return s.copy(), e.copy()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # a new run starts where the interval begins after everything before it has ended
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], reach[last]


def total_length(u: Union_) -> int:
    return int((u[1] - u[0]).sum())


def sweep(unions: Sequence[Union_]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Elementary segments of up to 62 unions: ``(seg_start, seg_end, mask)``.

    ``mask`` bit ``i`` is set where union ``i`` covers the segment; segments covered by no
    union are omitted. Each input must be a union (disjoint), so coverage per input is 0 or 1.
    """
    if len(unions) > 62:
        raise ValueError("sweep supports at most 62 unions")
    times = []
    weights = []
    for i, (s, e) in enumerate(unions):
        w = np.int64(1) << np.int64(i)
        times += [s, e]
        weights += [np.full(len(s), w, dtype=np.int64), np.full(len(e), -w, dtype=np.int64)]
    t = np.concatenate(times) if times else np.empty(0, np.int64)
    if len(t) == 0:
        z = np.empty(0, np.int64)
        return z, z.copy(), z.copy()
    w = np.concatenate(weights)
    order = np.argsort(t, kind="stable")
    t, w = t[order], w[order]
    level = np.cumsum(w)
    # coverage after the last event at each distinct time applies up to the next distinct time
    last_at_time = np.r_[t[1:] != t[:-1], True]
    bt = t[last_at_time]
    mask = level[last_at_time]
    seg_s, seg_e, seg_m = bt[:-1], bt[1:], mask[:-1]
    keep = seg_m != 0
    return seg_s[keep], seg_e[keep], seg_m[keep]


def _select(seg_s: np.ndarray, seg_e: np.ndarray, pick: np.ndarray) -> Union_:
    """Merge the picked elementary segments (adjacent ones touch) back into a union."""
    return merge(seg_s[pick], seg_e[pick])


def intersect(a: Union_, b: Union_) -> Union_:
    s, e, m = sweep([a, b])
    return _select(s, e, m == 3)


def subtract(a: Union_, b: Union_) -> Union_:
    """A − B."""
    s, e, m = sweep([a, b])
    return _select(s, e, m == 1)


def union_of(*unions: Union_) -> Union_:
    if not unions:
        z = np.empty(0, np.int64)
        return z, z.copy()
    return merge(np.concatenate([u[0] for u in unions]), np.concatenate([u[1] for u in unions]))


def intersection_length(a: Union_, b: Union_) -> int:
    return total_length(intersect(a, b))


def covered_before(t, u: Union_) -> np.ndarray:
    """Measure of ``u ∩ (-inf, t)`` for each ``t`` (prefix sums + searchsorted)."""
    t = _as_i64(t)
    us, ue = u
    cum = np.concatenate([[0], np.cumsum(ue - us)])
    j = np.searchsorted(us, t, side="right")  # intervals starting at or before t
    out = cum[j]
    has = j > 0
    prev_end = ue[np.maximum(j - 1, 0)] if len(ue) else np.zeros_like(t)
    # the last of those may extend past t; remove its part after t
    out = out - np.where(has, np.maximum(prev_end - t, 0), 0)
    return out


def covered_length(qs, qe, u: Union_) -> np.ndarray:
    """For each query interval ``[qs, qe)``, the length covered by the union ``u``."""
    qs = _as_i64(qs)
    qe = np.maximum(_as_i64(qe), qs)
    if len(u[0]) == 0:
        return np.zeros(len(qs), dtype=np.int64)
    return covered_before(qe, u) - covered_before(qs, u)


def count_overlapping(qs, qe, start, end) -> np.ndarray:
    """For each query, how many of the (possibly overlapping) intervals intersect it with
    positive length. Zero-length intervals and queries never count."""
    qs = _as_i64(qs)
    qe = _as_i64(qe)
    s = _as_i64(start)
    e = _as_i64(end)
    keep = e > s
    s = np.sort(s[keep])
    e = np.sort(e[keep])
    # for positive-length x and q: x ∩ q ≠ ∅  ⇔  x.s < q.e and not x.e <= q.s, and
    # {x.e <= q.s} ⊂ {x.s < q.e}
    n = np.searchsorted(s, qe, side="left") - np.searchsorted(e, qs, side="right")
    return np.where(qe > qs, n, 0)


# --------------------------------------------------------------------------------------------
# grouped timelines


def _key_codes(col: pd.Series, *, sort: bool) -> tuple[np.ndarray, int]:
    """A key column's integer codes (-1 for a null) and how many values they number: a
    categorical's own codes (its categories' order), else ``pd.factorize`` (first-seen order, or
    sorted with ``sort``). A categorical's codes are read off its array (the ``.cat`` accessor
    costs more than the few codes), and a small integer or text column is numbered by
    ``np.unique`` (ascending: ``pd.factorize(sort=True)``'s numbers, at a fraction of its fixed
    cost; for ``sort=False`` only which rows share a value matters, see :func:`group_codes`)."""
    dtype = col.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return col.array.codes.astype(np.int64), len(dtype.categories)
    if len(col) <= SMALL_TABLE_ROWS:
        if _signed_integers(dtype):
            return _unique_codes(np.asarray(col.array.to_numpy(dtype=np.int64, na_value=0)),
                                 np.asarray(col.array.isna(), dtype=bool))
        if isinstance(dtype, pd.StringDtype):  # text: sorted by code point, as pandas sorts it
            return _unique_codes(col.to_numpy(dtype=object, na_value=""), np.asarray(col.array.isna(), dtype=bool))
    codes, uniques = pd.factorize(col, sort=sort, use_na_sentinel=True)
    return codes.astype(np.int64), len(uniques)


def _unique_codes(values: np.ndarray, missing: np.ndarray) -> tuple[np.ndarray, int]:
    """Each of ``values``' index among its sorted distinct values, -1 where ``missing``, and how
    many distinct values there are (the missing ones' placeholders not counted)."""
    if not missing.any():
        uniques, codes = np.unique(values, return_inverse=True)
        return codes.reshape(-1).astype(np.int64), len(uniques)
    codes = np.full(len(values), -1, dtype=np.int64)
    uniques, codes[~missing] = np.unique(values[~missing], return_inverse=True)
    return codes, len(uniques)


#: pandas' nullable signed integer dtypes (values and a mask: NumPy integers where not missing)
_NULLABLE_SIGNED = (pd.Int8Dtype, pd.Int16Dtype, pd.Int32Dtype, pd.Int64Dtype)


def _signed_integers(dtype) -> bool:
    """A NumPy or nullable signed integer dtype: its values fit in int64 as they are."""
    return (isinstance(dtype, np.dtype) and dtype.kind == "i") or isinstance(dtype, _NULLABLE_SIGNED)


def group_codes(df: pd.DataFrame, keys: Sequence[str] = GPU_KEYS, rows: np.ndarray | None = None) -> np.ndarray:
    """Dense 0-based code per row for the combination of ``keys`` present in ``df`` (NA is a
    value of its own), numbered in the order the rows first show them: ``groupby(keys,
    sort=False, dropna=False).ngroup()``. ``rows``: of those positions alone, as of
    ``df.iloc[rows]`` (without making that frame).

    The columns' own integer codes (a categorical's codes, ``pd.factorize`` otherwise) are
    combined into one number per row and that is factorized: a groupby over eight key columns
    costs some ten times as much in fixed overhead at one trace file's size; ``groupby.ngroup``
    where the combined number would not fit in int64."""
    keys = [k for k in keys if k in df.columns]
    n = len(df) if rows is None else len(rows)
    if not keys or n == 0:
        return np.zeros(n, dtype=np.int64)
    combined = _combined_codes(df, keys, sort=False)
    if combined is None:
        sub = df if rows is None else df.iloc[rows]
        gid = sub.groupby(keys, dropna=False, observed=True, sort=False).ngroup().to_numpy()
        return pd.factorize(gid)[0].astype(np.int64)
    return pd.factorize(combined if rows is None else combined[rows])[0].astype(np.int64)


def sorted_group_codes(df: pd.DataFrame, keys: Sequence[str]) -> np.ndarray:
    """:func:`group_codes` numbered in the groups' sorted order instead: ``groupby(keys,
    sort=True, dropna=False, observed=True).ngroup()`` (each column's values ascending, a
    categorical's in its categories' order, nulls last; the first column first). Each column's
    sorted codes are combined into one number whose order is the columns' lexicographic one,
    and that is numbered by ``np.unique``; ``groupby.ngroup`` where it would not fit in int64."""
    if len(df) == 0:
        return np.zeros(0, dtype=np.int64)
    combined = _combined_codes(df, keys, sort=True)
    if combined is None:
        return df.groupby(list(keys), dropna=False, observed=True, sort=True).ngroup().to_numpy()
    return np.unique(combined, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _combined_codes(df: pd.DataFrame, keys: Sequence[str], *, sort: bool) -> np.ndarray | None:
    """One int64 per row standing for its combination of ``keys``' codes (:func:`_key_codes`,
    a null after every value), ordered as the keys are lexicographically; None where the
    combinations would not fit in int64."""
    combined = np.zeros(len(df), dtype=np.int64)
    size = 1
    for c in keys:
        codes, n = _key_codes(df[c], sort=sort)
        size *= n + 1
        if size >= 2**62:
            return None
        combined = combined * (n + 1) + np.where(codes < 0, n, codes)
    return combined


@dataclass
class GroupedTimeline:
    """Shift of each group's time axis onto a private stretch of one global axis.

    ``shifted = t - lo[g] + base[g]``; groups are ``span + 1`` apart, so touching never merges
    across groups. Built from all intervals that will be compared (every shifted value must come
    from a time inside its group's ``[lo, hi]``).
    """

    lo: np.ndarray
    hi: np.ndarray
    base: np.ndarray
    n_groups: int

    @classmethod
    def build(cls, codes: np.ndarray, start, end, n_groups: int | None = None) -> "GroupedTimeline":
        codes = np.asarray(codes, dtype=np.int64)
        s = _as_i64(start)
        e = _as_i64(end)
        g = int(codes.max()) + 1 if n_groups is None and len(codes) else (n_groups or 0)
        lo = np.full(g, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(g, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(lo, codes, s)
        np.maximum.at(hi, codes, e)
        empty = lo > hi
        lo[empty] = 0
        hi[empty] = 0
        span = hi - lo + 1
        base = np.concatenate([[0], np.cumsum(span)[:-1]]) if g else np.empty(0, np.int64)
        return cls(lo=lo, hi=hi, base=base.astype(np.int64), n_groups=g)

    def shift(self, codes: np.ndarray, t) -> np.ndarray:
        return _as_i64(t) - self.lo[codes] + self.base[codes]

    def group_of(self, shifted) -> np.ndarray:
        return np.searchsorted(self.base, _as_i64(shifted), side="right") - 1

    def sum_by_group(self, u_or_segments: Union_ | tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Total length per group of shifted intervals (exact int64)."""
        s, e = u_or_segments
        out = np.zeros(self.n_groups, dtype=np.int64)
        if len(s):
            np.add.at(out, self.group_of(s), e - s)
        return out


def grouped_union(tl: GroupedTimeline, codes: np.ndarray, start, end,
                  mask: np.ndarray | None = None) -> Union_:
    """Union per group, in shifted coordinates."""
    if mask is not None:
        codes, start, end = codes[mask], _as_i64(start)[mask], _as_i64(end)[mask]
    return merge(tl.shift(codes, start), tl.shift(codes, end))


__all__ = [
    "GPU_KEYS", "GroupedTimeline", "count_overlapping", "covered_before", "covered_length",
    "group_codes", "grouped_union", "intersect", "intersection_length", "merge",
    "subtract", "sweep", "total_length", "union_of",
]
