"""Per-dispatch GEMM ∩ collective overlap on the same GPU.

Replaces aorta's one-instance check (aorta-pipeline.md §2.5) with every GEMM dispatch, from one
timeline. A GEMM's ``overlap_ns`` is its intersection with the *union* of collective intervals of
the same process-GPU group (so two concurrent collectives are not counted twice, as aorta's
"unique overlap"). "Overlapping" means a positive-length intersection of half-open intervals.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.intervals import (
    GPU_KEYS, GroupedTimeline, count_overlapping, covered_length, group_codes, grouped_union, sorted_group_codes,
)
from pytest_gemmperf.analysis.kernel_stats import sorted_quantile
from pytest_gemmperf.analysis.small_tables import SMALL_TABLE_ROWS



def category_mask(dispatches: pd.DataFrame, mask, category: str) -> np.ndarray:
    """``mask`` as a bool array, or ``category == <category>`` when ``mask`` is None."""
    if mask is None:
        col = dispatches["category"]
        if isinstance(col.dtype, pd.CategoricalDtype):  # one code compared (a missing value's is -1)
            cats = col.dtype.categories
            return col.array.codes == cats.get_loc(category) if category in cats else np.zeros(len(col), bool)
        return (col == category).to_numpy(dtype=bool, na_value=False)
    arr = np.asarray(mask.to_numpy() if isinstance(mask, pd.Series) else mask)
    if arr.dtype != bool or arr.shape != (len(dispatches),):
        raise ValueError(f"mask must be a boolean array of length {len(dispatches)}")
    return arr


def display_names(dispatches: pd.DataFrame, name_col: str = "kernel_short") -> pd.Series:
    """``name_col``, falling back to ``kernel`` where it is missing."""
    if name_col not in dispatches.columns:
        return dispatches["kernel"].astype("object")
    short = dispatches[name_col].astype("object")
    return short.where(short.notna(), dispatches["kernel"].astype("object"))


def display_values(dispatches: pd.DataFrame, rows: np.ndarray, name_col: str = "kernel_short") -> np.ndarray:
    """``display_names(dispatches.iloc[rows], name_col).to_numpy(dtype=object)``, from the two
    columns' values at ``rows`` (a frame of the rows, its object copies and ``where`` cost a
    millisecond whatever the size)."""
    names = _objects_at(dispatches["kernel"], rows)
    if name_col not in dispatches.columns:
        return names
    short = _objects_at(dispatches[name_col], rows)
    gone = pd.isna(short)
    short[gone] = names[gone]
    return short


def _objects_at(col: pd.Series, rows: np.ndarray) -> np.ndarray:
    """``col.iloc[rows].astype("object")``'s values as a new object array."""
    return np.array(col.array.take(rows), dtype=object)


def _name_sets(gs: np.ndarray, ge: np.ndarray, tl: GroupedTimeline, codes: np.ndarray,
               start: np.ndarray, end: np.ndarray, names: np.ndarray) -> np.ndarray:
    """';'-joined sorted names of the collective kernels each query overlaps.

    One union per distinct collective name (tens, not millions), then one covered-length query
    per name; the resulting bit rows are deduplicated before any string is built.
    """
    n = len(gs)
    uniq, inv = np.unique(names, return_inverse=True)
    if len(uniq) == 0 or n == 0:
        return np.full(n, "", dtype=object)
    hits = np.zeros((n, len(uniq)), dtype=bool)
    for k in range(len(uniq)):
        sel = inv == k
        u = grouped_union(tl, codes[sel], start[sel], end[sel])
        hits[:, k] = covered_length(gs, ge, u) > 0
    patterns, pattern_of = np.unique(hits, axis=0, return_inverse=True)
    labels = np.asarray([";".join(uniq[row]) for row in patterns], dtype=object)
    return labels[pattern_of.reshape(-1)]


def gemm_overlap(dispatches: pd.DataFrame, gemm_mask=None, comm_mask=None, *,
                 keys: Sequence[str] = GPU_KEYS, name_col: str = "kernel_short",
                 names: bool = True) -> pd.DataFrame:
    """One row per GEMM dispatch (index kept from ``dispatches``).

    Columns: the group keys present, ``kernel``, ``kernel_short``, ``dispatch_id``, ``start_ns``,
    ``end_ns``, ``dur_ns``, ``overlap_ns`` (∩ union of same-GPU collectives),
    ``overlap_fraction`` (NaN for zero-length GEMMs), ``overlapping_count`` (collective
    dispatches intersecting it) and ``overlapping_collectives`` (their distinct names,
    sorted, ';'-joined). ``names=False`` leaves that last column out: building it is one
    union and one query per distinct collective name, most of the cost on large traces, and
    the gate and the per-kernel tables never read it.
    """
    d = dispatches
    gm = category_mask(d, gemm_mask, "gemm")
    cm = category_mask(d, comm_mask, "collective")
    start = d["start_ns"].to_numpy(np.int64)
    end = d["end_ns"].to_numpy(np.int64)
    codes = group_codes(d, keys)
    tl, gs, ge = _gemm_axis(codes, start, end, gm, cm)
    gi = np.flatnonzero(gm)
    ci = np.flatnonzero(cm)
    overlap = covered_length(gs, ge, grouped_union(tl, codes[ci], start[ci], end[ci]))
    dur = end[gi] - start[gi]
    count = count_overlapping(gs, ge, tl.shift(codes[ci], start[ci]), tl.shift(codes[ci], end[ci]))

    cols = [c for c in (*keys, "kernel", "kernel_short", "dispatch_id", "start_ns", "end_ns")
            if c in d.columns]
    out = d[cols].iloc[gi].copy()
    out["dur_ns"] = dur
    out["overlap_ns"] = overlap
    out["overlap_fraction"] = overlap_fraction(overlap, dur)
    out["overlapping_count"] = count
    if names:
        coll_names = display_names(d.iloc[ci], name_col).to_numpy(dtype=object).astype(str)
        labels = _name_sets(gs, ge, tl, codes[ci], start[ci], end[ci], coll_names)
        out["overlapping_collectives"] = pd.Series(labels, index=out.index, dtype="object")
    return out


def _gemm_axis(codes: np.ndarray, start: np.ndarray, end: np.ndarray, gm: np.ndarray,
               cm: np.ndarray) -> tuple[GroupedTimeline, np.ndarray, np.ndarray]:
    """The groups' shared axis over the GEMM and collective intervals, and the GEMMs' shifted
    starts and ends."""
    n_groups = int(codes.max()) + 1 if len(codes) else 0
    sel = gm | cm
    tl = GroupedTimeline.build(codes[sel], start[sel], end[sel], n_groups=n_groups)
    gi = np.flatnonzero(gm)
    return tl, tl.shift(codes[gi], start[gi]), tl.shift(codes[gi], end[gi])


def gemm_overlap_ns(codes: np.ndarray, start: np.ndarray, end: np.ndarray, gm: np.ndarray,
                    cm: np.ndarray) -> np.ndarray:
    """``gemm_overlap``'s ``overlap_ns`` alone, per GEMM row (``gm``) in row order, from the
    rows' group codes and int64 intervals: the part of each GEMM the union of its group's
    collectives (``cm``) covers."""
    tl, gs, ge = _gemm_axis(codes, start, end, gm, cm)
    ci = np.flatnonzero(cm)
    return covered_length(gs, ge, grouped_union(tl, codes[ci], start[ci], end[ci]))


def overlap_fraction(overlap_ns: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
    """``overlap_ns / dur_ns``; NaN for a zero-length dispatch."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(dur_ns > 0, overlap_ns / np.where(dur_ns > 0, dur_ns, 1), np.nan)


def overlap_by_kernel(dispatches: pd.DataFrame, gemm_mask=None, comm_mask=None, *,
                      threshold: float = 0.0, by: Sequence[str] = ("point", "rank", "kernel"),
                      overlap: pd.DataFrame | None = None,
                      keys: Sequence[str] = GPU_KEYS) -> pd.DataFrame:
    """Per ``by`` group (default point, rank, kernel) of GEMM dispatches.

    A dispatch counts as overlapped when ``overlap_fraction > threshold``. Columns: ``count``,
    ``n_overlapped``, ``overlapped_share``, ``mean_overlap_fraction``, ``total_overlap_ns``,
    ``median_dur_overlapped_ns``, ``median_dur_isolated_ns`` and ``interference_slowdown`` =
    their ratio (NaN when either side is empty). Pass ``overlap`` (a :func:`gemm_overlap` result)
    to avoid recomputing it (built with ``names=False`` when not given).
    """
    ov = (overlap if overlap is not None
          else gemm_overlap(dispatches, gemm_mask, comm_mask, keys=keys, names=False))
    by = [c for c in by if c in ov.columns]
    cols = {c: ov[c] for c in (*by, "dur_ns", "overlap_ns", "overlap_fraction")}  # each taken out once
    fraction = cols["overlap_fraction"]
    if isinstance(fraction.dtype, np.dtype) and fraction.dtype.kind == "f":
        is_ov = fraction.to_numpy() > threshold  # NaN: not overlapped, as pandas compares it
    else:
        is_ov = (fraction > threshold).to_numpy(dtype=bool, na_value=False)
    if 0 < len(ov) <= SMALL_TABLE_ROWS and all(
            isinstance(cols[c].dtype, np.dtype) and cols[c].dtype.kind == k
            for c, k in (("dur_ns", "i"), ("overlap_ns", "i"), ("overlap_fraction", "f"))):
        gid = sorted_group_codes(ov, by) if all(plain_group_key(cols[c].dtype) for c in by) else None
        if gid is not None:  # no grouping at all: the keys' values from a row of each group
            _, first = np.unique(gid, return_index=True)
            table = _by_kernel_arrays(np.bincount(gid), gid, is_ov, cols["dur_ns"].to_numpy(),
                                      cols["overlap_ns"].to_numpy(),
                                      grouped_mean(gid, fraction.to_numpy(), len(first)))
            return pd.DataFrame({**{c: cols[c].array.take(first) for c in by}, **table})
        grp = ov[by + ["overlap_fraction"]].groupby(by, observed=True, dropna=False, sort=True)
        # the mean is pandas' own: its float sum's algorithm depends on the rows' order
        return _by_kernel_one_pass(grp.size(), grp.ngroup().to_numpy(), is_ov, ov["dur_ns"].to_numpy(),
                                   ov["overlap_ns"].to_numpy(), grp["overlap_fraction"].mean().to_numpy())
    frame = ov[by + ["dur_ns", "overlap_ns", "overlap_fraction"]].copy()
    frame["_ov"] = is_ov
    # Both medians come from the one grouping (NaN-masked durations; median skips NaN). Grouping
    # the overlapped and isolated subsets apart and reindexing onto this index fails in pandas
    # when a subset is empty and a categorical level has >= 127 categories (int8 vs int16 codes).
    dur = frame["dur_ns"].astype("float64")
    frame["_dur_ov"] = dur.where(is_ov)
    frame["_dur_iso"] = dur.where(~is_ov)
    grp = frame.groupby(by, observed=True, dropna=False, sort=True)
    out = pd.DataFrame({
        "count": grp.size(),
        "n_overlapped": grp["_ov"].sum().astype("int64"),
        "mean_overlap_fraction": grp["overlap_fraction"].mean(),
        "total_overlap_ns": grp["overlap_ns"].sum().astype("int64"),
    })
    out["overlapped_share"] = out["n_overlapped"] / out["count"]
    out["median_dur_overlapped_ns"] = grp["_dur_ov"].median().astype("float64")
    out["median_dur_isolated_ns"] = grp["_dur_iso"].median().astype("float64")
    out["interference_slowdown"] = out["median_dur_overlapped_ns"] / out["median_dur_isolated_ns"]
    return out.reset_index()


def _by_kernel_one_pass(size: pd.Series, gid: np.ndarray, is_ov: np.ndarray, dur: np.ndarray,
                        overlap_ns: np.ndarray, mean_fraction: np.ndarray) -> pd.DataFrame:
    """:func:`overlap_by_kernel`'s table from one pass over a small table's rows (``gid``: each
    row's group in ``size``'s order; ``mean_fraction`` per group): pandas' grouped integer sums
    and medians, value for value, without a grouped pass per column (each costs milliseconds
    whatever the size)."""
    table = _by_kernel_arrays(size.to_numpy(np.int64), gid, is_ov, dur, overlap_ns, mean_fraction)
    return pd.DataFrame(table, index=size.index).reset_index()


def _by_kernel_arrays(count: np.ndarray, gid: np.ndarray, is_ov: np.ndarray, dur: np.ndarray,
                      overlap_ns: np.ndarray, mean_fraction: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`_by_kernel_one_pass`'s columns (``count``: the rows of each group)."""
    n = len(count)
    n_over = np.bincount(gid[is_ov], minlength=n).astype(np.int64)
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, gid, overlap_ns.astype(np.int64))
    durf = dur.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        overlapped = group_medians(gid[is_ov], durf[is_ov], n)
        isolated = group_medians(gid[~is_ov], durf[~is_ov], n)
        return {"count": count, "n_overlapped": n_over, "mean_overlap_fraction": mean_fraction,
                "total_overlap_ns": total, "overlapped_share": n_over / count,
                "median_dur_overlapped_ns": overlapped, "median_dur_isolated_ns": isolated,
                "interference_slowdown": overlapped / isolated}


def plain_group_key(dtype) -> bool:
    """A key column whose every row of a group holds the group's key as pandas' grouping gives
    it: a categorical or an integer column (not text, whose key pandas infers again, nor a
    float, whose -0.0 and 0.0 share a group)."""
    return isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_integer_dtype(dtype)


def grouped_mean(gid: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per group (``gid``, ``n`` groups) the mean of its non-NaN float ``values`` as pandas'
    grouped mean computes it, whose sum depends on the rows' order: rows already in group order
    without NaN are summed per run by ``np.add.reduceat`` (pandas 3's own shortcut), otherwise a
    compensated (Kahan) sum in row order (its Cython kernel); each divided by the count, NaN for a
    group without values. The second is a loop over the rows: for small tables only."""
    if len(gid) and bool(np.all(gid[1:] >= gid[:-1])) and not np.isnan(values).any():
        starts = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])
        out = np.full(n, np.nan)
        sizes = np.diff(starts, append=len(gid)).astype(np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf: NaN, as pandas gives it
            out[gid[starts]] = np.add.reduceat(values.astype(np.float64), starts) / sizes
        return out
    sums, comp, nobs = [0.0] * n, [0.0] * n, [0] * n
    for g, v in zip(gid.tolist(), values.tolist()):
        if v != v:
            continue
        nobs[g] += 1
        y = v - comp[g]
        t = sums[g] + y
        c = t - sums[g] - y
        comp[g] = 0.0 if c != c else c  # an infinite value: no compensation (pandas GH#50367)
        sums[g] = t
    return np.asarray([s / k if k else np.nan for s, k in zip(sums, nobs)], dtype=np.float64)


def group_medians(gid: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per group, the median of its ``values`` (no NaN among them), as pandas' grouped median;
    NaN for a group without values."""
    out = np.full(n, np.nan)
    if len(values) == 0:
        return out
    order = np.lexsort((values, gid))
    g, v = gid[order], values[order]
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    out[g[first]] = sorted_quantile(v, first, np.diff(np.r_[first, len(g)]), 0.5)
    return out


__all__ = ["category_mask", "display_names", "display_values", "gemm_overlap", "gemm_overlap_ns", "group_medians", "grouped_mean",
           "overlap_by_kernel", "overlap_fraction", "plain_group_key"]
