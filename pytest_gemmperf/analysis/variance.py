"""Top-K variance ranking with aorta's columns plus robust dispersion (aorta-pipeline.md
§2.3-2.5).

aorta ranks op groups by the range ``max − min`` of their durations per trace. The range is kept
(``time_diff_us``) for continuity, but it is driven by one outlier and grows with the number of
invocations, so every row also carries robust, count-independent measures:

* ``mad_cv`` = 1.4826 · MAD / median — the MAD scaled to estimate σ under normality, relative
  to the median;
* ``iqr_cv`` = (Q3 − Q1) / 1.349 / median — the same idea from the interquartile range.

``sort_by="robust"`` ranks by ``mad_cv`` (then ``iqr_cv``) instead of the range.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.intervals import GPU_KEYS, group_codes, merge, sorted_group_codes
from pytest_gemmperf.analysis.kernel_stats import sorted_quantile
from pytest_gemmperf.analysis.small_tables import SMALL_TABLE_ROWS
from pytest_gemmperf.analysis.overlap import category_mask, display_values, plain_group_key

AORTA_COLUMNS = ("threads", "channel", "rank", "kernel_name", "kernel_time_min_us",
                 "kernel_time_max_us", "time_diff_us")
TIMESTAMP_COLUMNS = ("min_duration_timestamp_ms", "max_duration_timestamp_ms",
                     "time_between_min_max_ms", "min_duration_found_us", "max_duration_found_us")
OVERLAP_COLUMNS = ("overlapping_collective_count", "overlapping_collective_names",
                   "max_overlap_percentage", "max_overlap_collective", "total_overlap_duration_ms")
#: Process unit of the gate (ARCHITECTURE.md "The process unit").
PROCESS_KEYS = ("point", "host", "pid", "rank", "run")

_MAD_TO_SIGMA = 1.4826
_IQR_TO_SIGMA = 1.349
_KERNEL_KEYS = ("kernel", "kernel_short")


def select_samples(dispatches: pd.DataFrame, *, category: str | None = "gemm",
                   warmup: int = 0, keys: Sequence[str] = GPU_KEYS) -> pd.DataFrame:
    """Dispatches of ``category`` (all when None) without the first ``warmup`` invocations of
    each kernel in each process-GPU group (in start order). Index labels are kept."""
    d = dispatches
    if category is not None:
        d = d[category_mask(d, None, category)]
    if warmup > 0 and len(d):
        proc = group_codes(d, keys)
        kern = pd.factorize(d["kernel"], use_na_sentinel=False)[0]
        order = np.lexsort((d["start_ns"].to_numpy(), kern, proc))
        ps, ks = proc[order], kern[order]
        new = np.r_[True, (ps[1:] != ps[:-1]) | (ks[1:] != ks[:-1])]
        run_start = np.maximum.accumulate(np.where(new, np.arange(len(order)), 0))
        nth = np.empty(len(order), dtype=np.int64)
        nth[order] = np.arange(len(order)) - run_start
        d = d[nth >= warmup]
    return d


def _stats(d: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Duration statistics per ``by`` group, with the index labels of the min/max instances
    (ties: earliest start)."""
    frame = d[by + ["dur_ns", "start_ns"]].sort_values("start_ns", kind="stable")
    grp = frame.groupby(by, observed=True, dropna=False, sort=True)["dur_ns"]
    dur = frame["dur_ns"]
    if 0 < len(frame) <= SMALL_TABLE_ROWS and isinstance(dur.dtype, np.dtype) and dur.dtype.kind == "i" \
            and frame.index.dtype.kind == "i":
        return _stats_sorted(grp.size(), grp.ngroup().to_numpy(), dur.to_numpy(np.int64), frame.index.to_numpy())
    return _stats_pandas(frame, by, grp)


def _stats_sorted(size: pd.Series, gid: np.ndarray, dur: np.ndarray, labels: np.ndarray) -> pd.DataFrame:
    """:func:`_stats_pandas`'s table from one sort of integer durations by group (``gid``: the
    groups' numbers in ``size``'s order, rows in start order): the same values, bit for bit,
    without a grouped pass per statistic (a small report pays some milliseconds for each)."""
    return pd.DataFrame(_sorted_stats(size.to_numpy(np.int64), gid, dur, labels), index=size.index).reset_index()


def _sorted_stats(count: np.ndarray, gid: np.ndarray, dur: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`_stats_sorted`'s columns (``count``: the rows of each group)."""
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    last = first + count - 1
    order = np.lexsort((dur, gid))  # stable: equal durations stay in start order
    sv = dur[order].astype(np.float64)
    median = sorted_quantile(sv, first, count, 0.5)
    # the first instance (in start order) of each group's largest duration
    by_max = np.lexsort((-dur, gid))
    dev = np.abs(dur.astype(np.float64) - median[gid])  # each row's distance to its group's median
    mad = sorted_quantile(dev[np.lexsort((dev, gid))], first, count, 0.5)
    q1, q3 = sorted_quantile(sv, first, count, 0.25), sorted_quantile(sv, first, count, 0.75)
    with np.errstate(divide="ignore", invalid="ignore"):
        # the operations of :func:`_stats_pandas`'s two columns, in their order
        return {"count": count, "min_ns": dur[order[first]], "max_ns": dur[order[last]], "median_ns": median,
                "mad_ns": mad, "q1_ns": q1, "q3_ns": q3,
                "min_row": labels[order[first]], "max_row": labels[by_max[first]],
                "mad_cv": _MAD_TO_SIGMA * mad / median, "iqr_cv": (q3 - q1) / _IQR_TO_SIGMA / median}


def _stats_pandas(frame: pd.DataFrame, by: list[str], grp) -> pd.DataFrame:
    """:func:`_stats` of any duration column (nullable, float), one grouped pass per statistic."""
    med = grp.transform("median")
    dev = (frame["dur_ns"] - med).abs()
    out = pd.DataFrame({
        "count": grp.size(),
        "min_ns": grp.min(),
        "max_ns": grp.max(),
        "median_ns": grp.median(),
        "mad_ns": dev.groupby([frame[c] for c in by], observed=True, dropna=False).median(),
        "q1_ns": grp.quantile(0.25),
        "q3_ns": grp.quantile(0.75),
        "min_row": grp.idxmin(),
        "max_row": grp.idxmax(),
    })
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mad_cv"] = _MAD_TO_SIGMA * out["mad_ns"] / out["median_ns"]
        out["iqr_cv"] = (out["q3_ns"] - out["q1_ns"]) / _IQR_TO_SIGMA / out["median_ns"]
    return out.reset_index()


#: an axis value in a point id: ``th<T>`` / ``ch<C>`` between dashes (``ch2-th256``)
_AXIS_RX = {axis: re.compile(rf"(?:^|-){abbr}(\d+)(?:-|$)") for axis, abbr in (("threads", "th"), ("channel", "ch"))}
#: digits parsed as Python integers; longer ones take pandas' conversion (a float on the way)
_AXIS_MAX_DIGITS = 15


def parse_point_axes(points: pd.Series) -> pd.DataFrame:
    """``threads`` and ``channel`` from point ids ``ch<C>-th<T>`` (nullable Int64)."""
    parsed = _parse_text_axes(points)
    if parsed is not None:
        return pd.DataFrame({axis: pd.array(values, dtype="Int64") for axis, values in parsed.items()},
                            index=points.index)
    text = points.astype("object").where(points.notna(), "").astype(str)

    def grab(axis: str) -> pd.Series:
        found = text.str.extract(_AXIS_RX[axis].pattern, expand=False)
        return pd.to_numeric(found, errors="coerce").astype("Int64")

    return pd.DataFrame({axis: grab(axis) for axis in _AXIS_RX}, index=points.index)


def _parse_text_axes(points: pd.Series) -> dict[str, list[int | None]] | None:
    """:func:`parse_point_axes`'s values, each distinct point id searched once with ``re``
    (pandas' ``str.extract`` and ``to_numeric`` cost milliseconds whatever the length); None
    where pandas' conversion could read otherwise: an id that is not text, or a number of
    non-ASCII or many digits."""
    missing = points.isna().to_numpy(dtype=bool)
    values = points.to_numpy(dtype=object)
    seen: dict[str, tuple[int | None, ...]] = {}
    out: dict[str, list[int | None]] = {axis: [] for axis in _AXIS_RX}
    for value, gone in zip(values.tolist(), missing.tolist()):
        text = "" if gone else value
        if not isinstance(text, str):
            return None
        found = seen.get(text)
        if found is None:
            digits = [(m.group(1) if m else None) for m in (rx.search(text) for rx in _AXIS_RX.values())]
            if any(d is not None and not (d.isascii() and len(d) <= _AXIS_MAX_DIGITS) for d in digits):
                return None
            found = seen[text] = tuple(None if d is None else int(d) for d in digits)
        for axis, number in zip(out, found):
            out[axis].append(number)
    return out


def _attach_axes(top: pd.DataFrame, axes: pd.DataFrame | None) -> pd.DataFrame:
    if "point" not in top.columns:
        top["threads"] = pd.array([pd.NA] * len(top), dtype="Int64")
        top["channel"] = pd.array([pd.NA] * len(top), dtype="Int64")
        return top
    if axes is None:
        parsed = parse_point_axes(top["point"])
        return top.assign(threads=parsed["threads"], channel=parsed["channel"])
    ax = axes.rename(columns={"channels": "channel"})
    if "point" not in ax.columns:
        raise ValueError("axes must have a 'point' column")
    ax = ax.drop_duplicates("point").copy()
    ax["point"] = ax["point"].astype("object")
    left = top.assign(_point=top["point"].astype("object"))
    merged = left.merge(ax.rename(columns={"point": "_point"}), on="_point", how="left",
                        suffixes=("", "_axis")).drop(columns="_point")
    merged.index = top.index
    for col in ("threads", "channel"):
        if col not in merged.columns:
            merged[col] = pd.array([pd.NA] * len(merged), dtype="Int64")
    return merged


def top_variance(dispatches: pd.DataFrame, k: int = 5,
                 by: Sequence[str] = ("point", "rank", "kernel"), category: str | None = "gemm",
                 warmup: int = 0, axes: pd.DataFrame | None = None, *,
                 sort_by: str = "range") -> pd.DataFrame:
    """Top ``k`` kernels by spread in each cell (``by`` without the kernel column — one
    (point, rank) trace in aorta), concatenated and sorted descending.

    Columns: aorta's ``threads, channel, rank, kernel_name, kernel_time_min_us,
    kernel_time_max_us, time_diff_us``, then ``point, median_us, mad_cv, iqr_cv, count``, the
    other ``by`` keys, and ``min_row`` / ``max_row`` (index labels, in ``dispatches``, of the
    min- and max-duration instances; used by :func:`with_timestamps`).
    """
    if sort_by not in ("range", "robust"):
        raise ValueError(f"sort_by must be 'range' or 'robust', not {sort_by!r}")
    by = [c for c in by if c in dispatches.columns]
    samples = select_samples(dispatches, category=category, warmup=warmup)
    small = _small_top(samples, k, by) if sort_by == "range" and axes is None else None
    if small is not None:
        return small
    st = _stats(samples, by)
    st["time_diff_us"] = (st["max_ns"] - st["min_ns"]) / 1e3
    sort_cols = ["time_diff_us"] if sort_by == "range" else ["mad_cv", "iqr_cv"]
    cell = [c for c in by if c not in _KERNEL_KEYS]
    st = st.sort_values(sort_cols, ascending=False, kind="stable", na_position="last")
    if cell:
        rank_in_cell = st.groupby(cell, observed=True, dropna=False, sort=False).cumcount()
    else:
        rank_in_cell = pd.Series(np.arange(len(st)), index=st.index)
    top = st[rank_in_cell.to_numpy() < k].reset_index(drop=True)
    kernel_col = next((c for c in _KERNEL_KEYS if c in by), None)
    top["kernel_name"] = top[kernel_col].astype("object") if kernel_col else "*"
    top["kernel_time_min_us"] = top["min_ns"] / 1e3
    top["kernel_time_max_us"] = top["max_ns"] / 1e3
    top["median_us"] = top["median_ns"] / 1e3
    if "rank" not in top.columns:
        top["rank"] = pd.array([pd.NA] * len(top), dtype="Int64")
    top = _attach_axes(top, axes)
    first = list(AORTA_COLUMNS) + ["point", "median_us", "mad_cv", "iqr_cv", "count"]
    first = [c for c in first if c in top.columns]
    rest = [c for c in by if c not in first and c != kernel_col]
    extra = [c for c in top.columns if c.endswith("_axis") or
             (axes is not None and c in axes.columns and c not in first + rest)]
    return top[first + rest + extra + ["min_row", "max_row"]]


def _small_top(d: pd.DataFrame, k: int, by: list[str]) -> pd.DataFrame | None:
    """:func:`top_variance` (by range, points' own axes) of a small table, from one sort of its
    integer durations and NumPy passes, built as one frame: the same table, value for value, as
    pandas' grouped passes give (each costs milliseconds whatever the size). None where it does
    not apply: a large table, no kernel key, a key of another kind, durations not integers."""
    kernel_col = next((c for c in _KERNEL_KEYS if c in by), None)
    if not 0 < len(d) <= SMALL_TABLE_ROWS or kernel_col is None or d.index.dtype.kind != "i":
        return None
    cols = {c: d[c] for c in (*by, "dur_ns", "start_ns")}  # each taken out of the frame once
    if not all(isinstance(cols[c].dtype, np.dtype) and cols[c].dtype.kind == "i" for c in ("dur_ns", "start_ns")) or \
            not all(plain_group_key(cols[c].dtype) for c in by):
        return None
    rows_gid = sorted_group_codes(d, by)
    cell = [c for c in by if c not in _KERNEL_KEYS]
    rows_cell = sorted_group_codes(d, cell) if cell else np.zeros(len(d), dtype=np.int64)
    order = np.argsort(cols["start_ns"].to_numpy(), kind="stable")  # the rows in start order
    gid = rows_gid[order]
    count = np.bincount(gid)
    st = _sorted_stats(count, gid, cols["dur_ns"].to_numpy(np.int64)[order], d.index.to_numpy()[order])
    _, first_row = np.unique(rows_gid, return_index=True)  # a row of each group: its keys
    diff = (st["max_ns"] - st["min_ns"]) / 1e3
    ranked = np.argsort(-diff, kind="stable")  # sort_values(ascending=False, kind="stable")
    cells = rows_cell[first_row][ranked]
    by_cell = np.argsort(cells, kind="stable")
    new = np.r_[True, cells[by_cell][1:] != cells[by_cell][:-1]]
    nth = np.empty(len(cells), dtype=np.int64)  # each row's place in its cell (cumcount)
    nth[by_cell] = np.arange(len(cells)) - np.maximum.accumulate(np.where(new, np.arange(len(cells)), 0))
    keep = ranked[nth < k]
    rows = first_row[keep]
    keys = {c: cols[c].array.take(rows) for c in by}

    def missing() -> pd.api.extensions.ExtensionArray:
        return pd.array([pd.NA] * len(keep), dtype="Int64")

    threads, channel = _point_axes(keys["point"]) if "point" in keys else (missing(), missing())
    names = keys[kernel_col]
    out = {"threads": threads, "channel": channel, "rank": keys["rank"] if "rank" in keys else missing(),
           # a Series: kept as object; a categorical's values as its astype(object) gives them
           "kernel_name": pd.Series(np.asarray(names, dtype=object), dtype=object)
           if isinstance(names, pd.Categorical) else pd.Series(names).astype("object"),
           "kernel_time_min_us": st["min_ns"][keep] / 1e3, "kernel_time_max_us": st["max_ns"][keep] / 1e3,
           "time_diff_us": diff[keep]}
    if "point" in keys:
        out["point"] = keys["point"]
    out.update({"median_us": st["median_ns"][keep] / 1e3, "mad_cv": st["mad_cv"][keep],
                "iqr_cv": st["iqr_cv"][keep], "count": st["count"][keep]})
    out.update({c: keys[c] for c in by if c not in out and c != kernel_col})
    out.update({"min_row": st["min_row"][keep], "max_row": st["max_row"][keep]})
    return pd.DataFrame(out)


def _point_axes(points) -> tuple[pd.api.extensions.ExtensionArray, pd.api.extensions.ExtensionArray]:
    """:func:`parse_point_axes`' ``threads`` and ``channel`` of the point ids ``points`` (an
    array) as arrays, without the frame where the ids are text (:func:`_parse_text_axes`)."""
    series = pd.Series(points)
    parsed = _parse_text_axes(series)
    if parsed is None:
        frame = parse_point_axes(series)
        return frame["threads"].array, frame["channel"].array
    return pd.array(parsed["threads"], dtype="Int64"), pd.array(parsed["channel"], dtype="Int64")


def with_timestamps(top: pd.DataFrame, dispatches: pd.DataFrame) -> pd.DataFrame:
    """Add aorta's ``_with_timestamps`` columns from the min/max instances found by
    :func:`top_variance` (timestamps are the trace clock's ``start_ns`` in ms)."""
    return with_columns(top, timestamp_columns(top, dispatches))


def timestamp_columns(top: pd.DataFrame, dispatches: pd.DataFrame) -> dict[str, np.ndarray]:
    """:func:`with_timestamps`'s columns."""
    _require_rows(top)
    rows = (top["min_row"].to_numpy(), top["max_row"].to_numpy())
    at = _positions(dispatches.index, *rows)
    if at is not None:
        start, dur = dispatches["start_ns"].to_numpy(), dispatches["dur_ns"].to_numpy()
        (lo_start, hi_start), (lo_dur, hi_dur) = (start[at[0]], start[at[1]]), (dur[at[0]], dur[at[1]])
    else:
        lo, hi = dispatches.loc[rows[0]], dispatches.loc[rows[1]]
        lo_start, hi_start = lo["start_ns"].to_numpy(), hi["start_ns"].to_numpy()
        lo_dur, hi_dur = lo["dur_ns"].to_numpy(), hi["dur_ns"].to_numpy()
    lo_ms, hi_ms = lo_start / 1e6, hi_start / 1e6
    return {"min_duration_timestamp_ms": lo_ms, "max_duration_timestamp_ms": hi_ms,
            "time_between_min_max_ms": np.abs(hi_ms - lo_ms),
            "min_duration_found_us": lo_dur / 1e3, "max_duration_found_us": hi_dur / 1e3}


def _positions(index: pd.Index, *rows: np.ndarray) -> list[np.ndarray] | None:
    """The positions of each of the ``rows`` label arrays in ``index`` (unique, every label
    found), else None (``loc`` then finds them, or raises): a label lookup per frame and column
    costs more than the few rows it finds."""
    if not index.is_unique:
        return None
    found = [index.get_indexer(r) for r in rows]
    return found if all((p >= 0).all() for p in found) else None


def with_columns(top: pd.DataFrame, columns: dict[str, np.ndarray | pd.Series]) -> pd.DataFrame:
    """``top`` with ``columns`` set (a name it has keeps its place), built as one frame: a column
    set costs as much as building a small table."""
    if not top.index.is_unique or top.columns.has_duplicates:  # labels a dict cannot hold apart
        out = top.copy()
        for name, values in columns.items():
            out[name] = values
        return out
    return pd.DataFrame({**dict(top.items()), **columns}, index=top.index)


def _require_rows(top: pd.DataFrame) -> None:
    if "min_row" not in top.columns or "max_row" not in top.columns:
        raise ValueError("expected a top_variance() result (columns min_row, max_row)")


def with_collective_overlap(top: pd.DataFrame, dispatches: pd.DataFrame, comm_mask=None, *,
                            keys: Sequence[str] = GPU_KEYS,
                            name_col: str = "kernel_short") -> pd.DataFrame:
    """Add aorta's ``_with_collective_overlap`` columns for each row's max-duration instance.

    Collectives are those of the same process-GPU group; count and names are per overlapping
    collective dispatch (names ';'-joined in start order, as aorta lists instances);
    ``max_overlap_percentage`` is the largest single-collective overlap relative to the GEMM;
    ``total_overlap_duration_ms`` is the union of the overlaps (no double counting).
    """
    return with_columns(top, collective_overlap_columns(top, dispatches, comm_mask, keys=keys, name_col=name_col))


def collective_overlap_columns(top: pd.DataFrame, dispatches: pd.DataFrame, comm_mask=None, *,
                               keys: Sequence[str] = GPU_KEYS,
                               name_col: str = "kernel_short") -> dict[str, np.ndarray | pd.Series]:
    """:func:`with_collective_overlap`'s columns."""
    _require_rows(top)
    out = top
    d = dispatches
    codes = group_codes(d, keys)
    cm = category_mask(d, comm_mask, "collective")
    ci = np.flatnonzero(cm)
    c_code = codes[ci]
    c_s = d["start_ns"].to_numpy(np.int64)[ci]
    c_e = d["end_ns"].to_numpy(np.int64)[ci]
    c_name = display_values(d, ci, name_col)
    order = np.lexsort((c_s, c_code))
    c_code, c_s, c_e, c_name = c_code[order], c_s[order], c_e[order], c_name[order]
    longest = int((c_e - c_s).max()) if len(c_s) else 0

    rows = out["max_row"].to_numpy()
    at = _positions(d.index, rows)
    if at is not None:
        (at,) = at
        g_code, g_s, g_e = codes[at], d["start_ns"].to_numpy(np.int64)[at], d["end_ns"].to_numpy(np.int64)[at]
    else:
        g_code = pd.Series(codes, index=d.index).loc[rows].to_numpy()
        g_s = d.loc[rows, "start_ns"].to_numpy(np.int64)
        g_e = d.loc[rows, "end_ns"].to_numpy(np.int64)
    # candidates start in [g_s - longest, g_e) within the group: searchsorted on (code, start)
    lo = _search_pairs(c_code, c_s, g_code, g_s - longest)
    hi = _search_pairs(c_code, c_s, g_code, g_e)
    counts, names, best_pct, best_name, total_ms = [], [], [], [], []
    for i in range(len(out)):  # one iteration per reported row (top-K), not per dispatch
        sl = slice(lo[i], hi[i])
        ov_s = np.maximum(c_s[sl], g_s[i])
        ov_e = np.minimum(c_e[sl], g_e[i])
        hit = ov_e > ov_s
        dur = g_e[i] - g_s[i]
        if not hit.any() or dur <= 0:
            counts.append(0), names.append(""), best_pct.append(0.0), best_name.append("")
            total_ms.append(0.0)
            continue
        pct = (ov_e[hit] - ov_s[hit]) / dur * 100.0
        hn = c_name[sl][hit]
        j = int(np.argmax(pct))
        u = merge(ov_s[hit], ov_e[hit])
        counts.append(int(hit.sum()))
        names.append(";".join(map(str, hn)))
        best_pct.append(float(pct[j]))
        best_name.append(str(hn[j]))
        total_ms.append(float((u[1] - u[0]).sum()) / 1e6)
    return {"overlapping_collective_count": np.asarray(counts, dtype=np.int64),
            "overlapping_collective_names": pd.Series(names, index=out.index, dtype="object"),
            "max_overlap_percentage": np.asarray(best_pct, dtype=np.float64),
            "max_overlap_collective": pd.Series(best_name, index=out.index, dtype="object"),
            "total_overlap_duration_ms": np.asarray(total_ms, dtype=np.float64)}


def _search_pairs(codes: np.ndarray, times: np.ndarray, q_codes: np.ndarray,
                  q_times: np.ndarray) -> np.ndarray:
    """Left insertion points of (q_code, q_time) into rows sorted by (code, time)."""
    first = np.searchsorted(codes, q_codes, side="left")
    last = np.searchsorted(codes, q_codes, side="right")
    out = np.empty(len(q_codes), dtype=np.int64)
    for i in range(len(q_codes)):  # per reported row
        out[i] = first[i] + np.searchsorted(times[first[i]:last[i]], q_times[i], side="left")
    return out


def spread_across(dispatches: pd.DataFrame, across: Sequence[str] = ("rank", "point", "run"), *,
                  category: str | None = None, warmup: int = 0,
                  by: Sequence[str] = ("kernel",)) -> pd.DataFrame:
    """Per kernel, spread of per-process median durations across ranks / points / repeats.

    Each process unit (point, host, pid, rank, run) contributes its median; units are then
    pooled over the ``across`` dimensions (the remaining ones of point/rank/run stay in the
    key). Columns: ``n_units``, ``min_median_us``, ``median_median_us``, ``max_median_us``,
    ``range_us``, ``spread_ratio`` (max/min), ``cv`` (std/mean, ddof=1), ``mad_cv`` and
    ``slowest_<dim>`` (the unit with the largest median).
    """
    dims = ("point", "rank", "run")
    unknown = [a for a in across if a not in dims]
    if unknown:
        raise ValueError(f"across must be among {dims}, not {unknown}")
    d = select_samples(dispatches, category=category, warmup=warmup)
    unit = [c for c in PROCESS_KEYS if c in d.columns]
    by = [c for c in by if c in d.columns]
    per_unit = (d.groupby(by + unit, observed=True, dropna=False)["dur_ns"].median()
                .rename("unit_median_ns").reset_index())
    keep = [c for c in dims if c not in across and c in d.columns]
    key = by + keep
    grp = per_unit.groupby(key, observed=True, dropna=False, sort=True)["unit_median_ns"]
    med = grp.transform("median")
    dev = (per_unit["unit_median_ns"] - med).abs()
    out = pd.DataFrame({
        "n_units": grp.size(),
        "min_median_us": grp.min() / 1e3,
        "median_median_us": grp.median() / 1e3,
        "max_median_us": grp.max() / 1e3,
        "cv": grp.std(ddof=1) / grp.mean(),
    })
    out["range_us"] = out["max_median_us"] - out["min_median_us"]
    out["spread_ratio"] = out["max_median_us"] / out["min_median_us"]
    mad = dev.groupby([per_unit[c] for c in key], observed=True, dropna=False).median() / 1e3
    out["mad_cv"] = _MAD_TO_SIGMA * mad / out["median_median_us"]
    slowest = per_unit.loc[grp.idxmax().to_numpy()]
    for a in across:
        if a in slowest.columns:
            out[f"slowest_{a}"] = slowest[a].to_numpy()
    return out.reset_index()


__all__ = ["AORTA_COLUMNS", "OVERLAP_COLUMNS", "TIMESTAMP_COLUMNS", "collective_overlap_columns",
           "parse_point_axes", "select_samples", "spread_across", "timestamp_columns", "top_variance",
           "with_collective_overlap", "with_columns", "with_timestamps"]
