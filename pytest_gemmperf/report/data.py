"""Everything the reports show, computed once from the canonical tables.

The HTML, Excel, CSV/JSON and Markdown writers only format what :func:`build_report_data`
returns; they never touch dispatches. Every frame carries a leading ``label`` column (the
sweep it came from; one label for a plain run, several for ``gemmperf compare``); writers drop
it when there is a single label.

Units are part of the column names (``*_ns``, ``*_us``, ``*_ms``); conversions happen here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.kernel_names import short_names
from pytest_gemmperf.analysis.kernel_stats import kernel_stats, rows_kernel_stats
from pytest_gemmperf.analysis.intervals import sorted_group_codes
from pytest_gemmperf.analysis.small_tables import SMALL_TABLE_ROWS, descending_order, one_row_per_key, plain_index
from pytest_gemmperf.analysis.overlap import group_medians, overlap_by_kernel, plain_group_key
from pytest_gemmperf.analysis.report_parts import (DEFAULT_SHORT_KERNEL_US, DETAIL_COLUMNS, KERNEL_DETAILS_TOP,
                                                   CommRows, GemmRows, ReportParts, SweepReduction,
                                                   as_objects, collective_frame, decategorized, gemm_frame, merge_parts,
                                                   report_part, short_edges, taken)
from pytest_gemmperf.analysis.timeline import PYTORCH_TYPES
from pytest_gemmperf.analysis.variance import (collective_overlap_columns, parse_point_axes, timestamp_columns,
                                               top_variance, with_columns)
from pytest_gemmperf.gate.metrics import ALL_KERNELS, DUR_NS
from pytest_gemmperf.gate.outcome import OUTCOMES, outcome_counts, overall, point_outcomes
from pytest_gemmperf.gate.verdict import (IMPROVEMENT, INCONCLUSIVE, MISSING, NEW, REGRESSION,
                                          UNCHANGED, VERDICT_COLUMNS)
from pytest_gemmperf.redact import redact_record
from pytest_gemmperf.gate.headline import SEVERITY
from pytest_gemmperf.report.before_after import BeforeAfter, ComparedSamples, before_after
from pytest_gemmperf.analysis import collectives as C
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.analysis.counters import counter_summary, join_counters

if TYPE_CHECKING:
    from pytest_gemmperf.traces.parallel import Beside

#: kernels drawn in the per-kernel distribution plots
PLOT_KERNELS = 6
#: rows of the verdicts / kernels tables embedded in the HTML (the files hold everything)
HTML_MAX_ROWS = 3000

#: the label of a single sweep nobody named (a pytest session, `gemmperf analyze`)
DEFAULT_LABEL = "run"

BOX_COLUMNS = ("count", "min_us", "p05_us", "q1_us", "median_us", "q3_us", "p95_us", "max_us")


@dataclass
class ReportData:
    """Frames and facts shared by all report writers."""

    labels: list[str]
    kernels: pd.DataFrame
    kernel_summary: pd.DataFrame
    by_category: pd.DataFrame
    short_kernels: pd.DataFrame
    short_histogram: pd.DataFrame
    kernel_details: pd.DataFrame
    top_variance: pd.DataFrame
    overlap: pd.DataFrame
    timeline: pd.DataFrame
    timeline_by_point: pd.DataFrame
    counters: pd.DataFrame
    boxes: dict[str, pd.DataFrame]
    interaction: pd.DataFrame
    verdicts: pd.DataFrame | None
    meta: dict[str, Any]
    short_kernel_us: float
    top_k: int
    notes: list[str] = field(default_factory=list)
    n_dispatches: dict[str, int] = field(default_factory=dict)
    #: per (point, collective, size bucket) over matched collectives (empty without torch
    #: collective metadata); latencies/skews ``*_ns``, bandwidths ``(GB/s)`` with GB = 2**30 B
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: aorta's best point per (collective, size bucket) by mean latency
    collective_best: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: per (point, rank): waits and arrival order (the skew heat map)
    stragglers: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: aorta's ``nccl_master_all_configs`` sheet
    nccl_master: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: telemetry samples (``run/telemetry.py`` long format + ``test``/``point``), empty when none
    telemetry: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: per (test, point, process, device) telemetry summary (clocks, power, temperatures, throttling)
    telemetry_summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: per ``test[point]``: process windows, interval, sources, clock, notes
    telemetry_meta: dict[str, dict] = field(default_factory=dict)
    #: per notable verdict row, both sides' per-process values (report/before_after.py)
    before_after: BeforeAfter = field(default_factory=BeforeAfter)
    #: :func:`report_kernel_labels` once computed (every writer reads the same labels)
    _kernel_labels: dict[str, str] | None = field(default=None, repr=False, compare=False)

    @property
    def has_collectives(self) -> bool:
        return len(self.collectives) > 0

    @property
    def multi(self) -> bool:
        return len(self.labels) > 1

    @property
    def status(self) -> str:
        """The run's outcome: ``failed`` / ``error`` / ``undecided`` / ``passed``, ``analysis``."""
        counts = self.outcome_counts
        return overall(counts) if counts else "analysis"

    @property
    def outcome_counts(self) -> dict[str, int]:
        """``{outcome: points}``: the compared points' outcomes, and as ``error`` the points
        that could not be run or read (``meta["point_errors"]``: a results directory's failed
        points)."""
        counts = point_outcome_counts(self.verdicts)
        errors = self.meta.get("point_errors") if isinstance(self.meta, dict) else None
        if errors:
            counts = {**counts, "error": counts.get("error", 0) + len(errors)}
        return {k: counts[k] for k in OUTCOMES if counts.get(k)}


def sweep_fact(data: ReportData) -> tuple[str, list[str]] | None:
    """The run-metadata row naming a report's sweeps, as (title, labels): ``sweeps`` of a
    comparison (the first is the baseline), ``sweep`` for one named sweep; None for a single
    run nobody named, whose placeholder label would read as a sweep called "run"."""
    if data.multi:
        return "sweeps", list(data.labels)
    if data.labels == [DEFAULT_LABEL]:
        return None
    return "sweep", list(data.labels)


def overall_status(verdicts: pd.DataFrame | None) -> str:
    """The run's outcome over its points (``gate/outcome.py``): ``failed`` > ``error`` >
    ``undecided`` > ``passed``; ``analysis`` when nothing was compared."""
    if verdicts is None or len(verdicts) == 0:
        return "analysis"
    return overall(point_outcome_counts(verdicts))


def point_outcome_counts(verdicts: pd.DataFrame | None) -> dict[str, int]:
    """``{outcome: points}`` of a verdicts table (each (sweep,) test and point judged by
    ``gate.outcome.point_outcome``, as pytest and ``gemmperf compare`` judge it)."""
    if verdicts is None or len(verdicts) == 0:
        return {}
    return outcome_counts(o for _, o in point_outcomes(verdicts))


def verdict_counts(verdicts: pd.DataFrame | None) -> dict[str, int]:
    if verdicts is None or len(verdicts) == 0:
        return {}
    counts = verdicts["verdict"].astype(str).value_counts()
    order = [REGRESSION, INCONCLUSIVE, MISSING, NEW, IMPROVEMENT, UNCHANGED]
    return {k: int(counts.get(k, 0)) for k in order if counts.get(k, 0)}


# ---------------------------------------------------------------------------------------------
# helpers


def _with_label(df: pd.DataFrame, label: str) -> pd.DataFrame:
    df = df.reset_index(drop=True)
    df.insert(0, "label", label)
    return df


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and len(f.columns)]
    if not frames:
        return pd.DataFrame({"label": pd.Series(dtype=object)})
    # categoricals of different sweeps have different categories; text is what reports need
    frames = [decategorized(f) for f in frames]
    if len(frames) == 1 and plain_index(frames[0]):
        return frames[0]  # one sweep's table is already what concat would copy it to
    return pd.concat(frames, ignore_index=True)


def _object_keys(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Key columns as object with None for missing, so all-null keys of any dtype still join."""
    df = df.copy()
    for k in keys:
        df[k] = as_objects(df[k])
    return df


def box_stats(values: np.ndarray, gid: np.ndarray, n_groups: int) -> pd.DataFrame:
    """Box-plot quantiles (type 7) of ``values`` (ns) per group id, in µs."""
    count = np.bincount(gid, minlength=n_groups)
    order = np.lexsort((values, gid))
    sv = values[order].astype(np.float64)
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    ok = count > 0

    def q(p: float) -> np.ndarray:
        pos = first + p * np.maximum(count - 1, 0)
        lo = np.floor(pos).astype(np.int64)
        hi = np.ceil(pos).astype(np.int64)
        out = np.full(n_groups, np.nan)
        lo_v, hi_v = sv[np.minimum(lo, len(sv) - 1)], sv[np.minimum(hi, len(sv) - 1)]
        out[ok] = (lo_v + (hi_v - lo_v) * (pos - lo))[ok]
        return out / 1e3

    return pd.DataFrame({"count": count, "min_us": q(0.0), "p05_us": q(0.05), "q1_us": q(0.25),
                         "median_us": q(0.5), "q3_us": q(0.75), "p95_us": q(0.95),
                         "max_us": q(1.0)})


def _grouped_boxes(d: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    if len(d) == 0:
        return pd.DataFrame(columns=by + list(BOX_COLUMNS))
    gid = sorted_group_codes(d, by) if len(d) <= SMALL_TABLE_ROWS else None
    if gid is None:
        gid = d.groupby(by, dropna=False, observed=True, sort=True).ngroup().to_numpy()
    n = int(gid.max()) + 1
    stats = box_stats(d["dur_ns"].to_numpy(np.int64), gid, n)
    _, first = np.unique(gid, return_index=True)  # a row of each group, in the groups' order
    # the keys taken from those rows (text as text) and the statistics beside them, one frame
    keys = {c: taken(d[c], first, text=True) for c in by}
    return pd.DataFrame({**keys, **{c: s.to_numpy() for c, s in stats.items()}})


def _axes_of(points: pd.Series) -> pd.DataFrame:
    """threads / channel per row, parsed once per distinct point id."""
    cat = points if isinstance(points.dtype, pd.CategoricalDtype) else points.astype("category")
    cats = pd.Series(list(cat.cat.categories) + [None], dtype=object)
    parsed = parse_point_axes(cats)
    codes = cat.cat.codes.to_numpy()  # -1 picks the trailing None row
    return pd.DataFrame({"threads": parsed["threads"].array.take(codes),
                         "channel": parsed["channel"].array.take(codes)}, index=points.index)


# ---------------------------------------------------------------------------------------------
# per-sweep tables


def _kernel_summary(kern: pd.DataFrame) -> pd.DataFrame:
    """TraceLens rocprof ``kernel_summary`` with correct units, from per-cell statistics.

    Count, total, mean, min, max and the sample std are exact (pooled from per-cell sums and
    sums of squares); the median is the dispatch-weighted median of the cell medians.
    """
    one = _one_cell_per_kernel(kern)
    return _kernel_summary_of_cells(*one) if one is not None else _kernel_summary_pooled(kern)


def _kernel_summary_pooled(k: pd.DataFrame) -> pd.DataFrame:
    """:func:`_kernel_summary` through pandas' grouping (any number of cells per kernel)."""
    n = k["count"].astype(float)
    ss = (n - 1).clip(lower=0) * k["std_ns"].fillna(0.0) ** 2 + n * k["mean_ns"] ** 2
    frame = pd.DataFrame({"kernel": k["kernel"].astype(object), "category": k["category"].astype(object),
                          "n": n, "total": k["total_ns"].astype(float), "ss": ss,
                          "min": k["min_ns"].astype(float), "max": k["max_ns"].astype(float),
                          "median": k["median_ns"].astype(float)})
    g = frame.groupby("kernel", sort=True)
    out = pd.DataFrame({"Count": g["n"].sum(), "total": g["total"].sum(), "ss": g["ss"].sum(),
                        "min": g["min"].min(), "max": g["max"].max(),
                        "Category": g["category"].first()})
    mean = out["total"] / out["Count"]
    with np.errstate(invalid="ignore", divide="ignore"):
        var = (out["ss"] - out["Count"] * mean ** 2) / (out["Count"] - 1)
    frame = frame.sort_values(["kernel", "median"], kind="stable")
    frame["cum"] = frame.groupby("kernel", sort=False)["n"].cumsum()
    half = frame["kernel"].map(out["Count"] / 2)
    wmed = frame[frame["cum"] >= half].groupby("kernel", sort=True)["median"].first()
    total_all = float(out["total"].sum()) or 1.0
    res = pd.DataFrame({
        "name": out.index.astype(str),
        "Count": out["Count"].astype("int64").to_numpy(),
        "Mean Kernel Time (µs)": (mean / 1e3).to_numpy(),
        "Median Kernel Time (µs)": (wmed.reindex(out.index) / 1e3).to_numpy(),
        "Std Kernel Time (µs)": (np.sqrt(var.clip(lower=0)) / 1e3).to_numpy(),
        "Min Kernel Time (µs)": (out["min"] / 1e3).to_numpy(),
        "Max Kernel Time (µs)": (out["max"] / 1e3).to_numpy(),
        "Percentage (%)": (out["total"] / total_all * 100).to_numpy(),
        "Total Kernel Time (ms)": (out["total"] / 1e6).to_numpy(),
        "Category": out["Category"].astype(object).to_numpy(),
    })
    res = res.sort_values("Total Kernel Time (ms)", ascending=False, kind="stable")
    # cumulative share after sorting (TraceLens computes it before, so it is not monotone)
    res.insert(8, "Cumulative Percentage (%)", res["Percentage (%)"].cumsum())
    return res.reset_index(drop=True)


_SUMMARY_NUMBERS = ("count", "total_ns", "mean_ns", "std_ns", "min_ns", "max_ns", "median_ns")


def _one_cell_per_kernel(k: pd.DataFrame) -> tuple[list[str], list[str], dict[str, np.ndarray]] | None:
    """Kernel names, categories and the numbers of ``k`` (per-cell statistics) where each kernel
    name has one cell (one point and rank: a single trace), every name and category text and
    every number a NumPy number; else None."""
    if not len(k) or not one_row_per_key(k, ("kernel",)):
        return None
    names, cats = k["kernel"].tolist(), k["category"].astype(object).tolist()
    if not all(isinstance(x, str) for x in cats):
        return None
    numbers = {c: k[c] for c in _SUMMARY_NUMBERS}
    if not all(isinstance(s.dtype, np.dtype) and s.dtype.kind in "iuf" for s in numbers.values()):
        return None
    return names, cats, {c: s.to_numpy(dtype=np.float64) for c, s in numbers.items()}


def _kernel_summary_of_cells(names: list[str], cats: list[str], v: dict[str, np.ndarray]) -> pd.DataFrame:
    """:func:`_kernel_summary` of one cell per kernel, value for value: each kernel's pooled
    count, total, extremes and sum of squares are its cell's, its weighted median the cell's
    median; the same float operations, in the same order, on the kernels sorted by name."""
    order = np.asarray(sorted(range(len(names)), key=names.__getitem__), dtype=np.int64)
    n, total = v["count"][order], v["total_ns"][order]
    std, mean_ns = v["std_ns"][order], v["mean_ns"][order]
    ss = np.maximum(n - 1, 0) * np.where(np.isnan(std), 0.0, std) ** 2 + n * mean_ns ** 2
    mean = total / n
    with np.errstate(invalid="ignore", divide="ignore"):
        var = (ss - n * mean ** 2) / (n - 1)
    total_all = float(total.sum()) or 1.0
    percent = total / total_all * 100
    by_total = np.argsort(-(total / 1e6), kind="stable")  # largest first, ties by name
    cols = {
        "name": pd.Index([names[i] for i in order], dtype=object).astype(str)[by_total],
        "Count": n.astype("int64")[by_total],
        "Mean Kernel Time (µs)": (mean / 1e3)[by_total],
        "Median Kernel Time (µs)": (v["median_ns"][order] / 1e3)[by_total],
        "Std Kernel Time (µs)": (np.sqrt(np.where(var < 0, 0.0, var)) / 1e3)[by_total],
        "Min Kernel Time (µs)": (v["min_ns"][order] / 1e3)[by_total],
        "Max Kernel Time (µs)": (v["max_ns"][order] / 1e3)[by_total],
        "Percentage (%)": percent[by_total],
        "Cumulative Percentage (%)": np.cumsum(percent[by_total]),
        "Total Kernel Time (ms)": (total / 1e6)[by_total],
        "Category": np.asarray([cats[i] for i in order], dtype=object)[by_total],
    }
    return pd.DataFrame(cols)


def _by_category(d: pd.DataFrame) -> pd.DataFrame:
    g = d.groupby(["point", "rank", "category"], dropna=False, observed=True, sort=True)
    return _category_shares(g["dur_ns"].agg(["size", "sum"]).reset_index()
                            .rename(columns={"size": "count", "sum": "total_ns"}))


def _by_category_of_totals(totals: pd.DataFrame) -> pd.DataFrame:
    """:func:`_by_category` from ``source_totals.dispatch_totals`` rows (integer sums: exact)."""
    small = _small_category_totals(totals)
    if small is not None:
        return small
    g = totals.groupby(["point", "rank", "category"], dropna=False, observed=True, sort=True)
    return _category_shares(pd.DataFrame({"count": g["n_dispatches"].sum(), "total_ns": g["total_ns"].sum()})
                            .reset_index())


def _small_category_totals(totals: pd.DataFrame) -> pd.DataFrame | None:
    """:func:`_by_category_of_totals` of a small table of categorical or integer keys without
    pandas' groupings: the groups numbered as they number them, integer sums, one frame; None
    where it does not apply."""
    keys = ["point", "rank", "category"]
    if not 0 < len(totals) <= SMALL_TABLE_ROWS or not all(plain_group_key(totals[c].dtype) for c in keys) or \
            not all(isinstance(totals[c].dtype, np.dtype) and totals[c].dtype.kind == "i"
                    for c in ("n_dispatches", "total_ns")):
        return None
    gid, cell_of_row = sorted_group_codes(totals, keys), sorted_group_codes(totals, keys[:2])
    _, first = np.unique(gid, return_index=True)
    count = np.zeros(len(first), dtype=np.int64)
    total = np.zeros(len(first), dtype=np.int64)
    np.add.at(count, gid, totals["n_dispatches"].to_numpy(np.int64))
    np.add.at(total, gid, totals["total_ns"].to_numpy(np.int64))
    cell = cell_of_row[first]
    per_cell = np.zeros(int(cell.max()) + 1, dtype=np.int64)
    np.add.at(per_cell, cell, total)
    cell_total = per_cell[cell]
    key_values = {c: totals[c].array.take(first) for c in keys}
    with np.errstate(divide="ignore", invalid="ignore"):
        percent = np.where(cell_total > 0, total / cell_total * 100, np.nan)
    return pd.DataFrame({c: as_objects(pd.Series(v)) if isinstance(v.dtype, pd.CategoricalDtype) else v
                         for c, v in key_values.items()} |
                        {"count": count, "total_ns": total, "total_ms": total / 1e6, "percent": percent})


def _category_shares(out: pd.DataFrame) -> pd.DataFrame:
    """Count and total per (point, rank, category) with its ms and its share of the cell."""
    cell = out.groupby(["point", "rank"], dropna=False, sort=False)["total_ns"].transform("sum")
    out["total_ms"] = out["total_ns"] / 1e6
    out["percent"] = np.where(cell > 0, out["total_ns"] / cell * 100, np.nan)
    return decategorized(out)


def _short_kernels(parts: ReportParts, threshold_us: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """TraceLens's short-kernel summary and histogram from the per-name counts and sums."""
    total = float(parts.total_ns) or 1.0
    sk = parts.short
    sums = sk["sum_ns"].to_numpy(np.int64).astype(np.float64)  # integers below 2**53: exact
    count = sk["count"].to_numpy(np.int64)
    names = sk["name"].to_numpy(dtype=object).astype(str)
    columns = {
        "name": names,
        "Short Kernel count": count,
        "Short Kernel duration (µs) sum": sums / 1e3,
        "Short Kernel duration (µs) mean": sums / count / 1e3,
        "Short Kernel duration (µs) percent of total time": sums / total * 100,
    }
    edges = short_edges(threshold_us)
    hist = pd.DataFrame({"bin_start_us": edges[:-1], "bin_end_us": edges[1:], "count": parts.short_hist})
    if len(names) <= SMALL_TABLE_ROWS:
        # the sort below, in Python: largest sum first, then by name, ties as they came (no NaN:
        # the sums are of integers)
        key, text = (-columns["Short Kernel duration (µs) sum"]).tolist(), names.tolist()
        order = sorted(range(len(text)), key=lambda i: (key[i], text[i]))
        return pd.DataFrame({c: v[order] for c, v in columns.items()}), hist
    summary = pd.DataFrame(columns).sort_values(["Short Kernel duration (µs) sum", "name"],
                                                ascending=[False, True], kind="stable")
    return summary.reset_index(drop=True), hist


def _kernel_details(d: pd.DataFrame) -> pd.DataFrame:
    """The longest dispatches of ``d`` (a sweep's rows, or a subsequence holding its longest:
    ``ReportParts.details``), ties in row order."""
    cols = [c for c in DETAIL_COLUMNS if c in d.columns]
    dur = d["dur_ns"]
    if len(d) <= KERNEL_DETAILS_TOP and plain_index(d) and isinstance(dur.dtype, np.dtype) and dur.dtype.kind == "i":
        # every row, longest first (nlargest's stable descending sort), built as one frame
        v = dur.to_numpy()
        order = descending_order(v, kind="stable")
        columns: dict[str, Any] = {}
        for c in cols:
            columns[c] = taken(d[c], order, text=True)
            if c == "dur_ns":
                columns["dur_us"] = v[order] / 1e3
        return pd.DataFrame(columns)
    top = dur.nlargest(KERNEL_DETAILS_TOP).index
    out = decategorized(d.loc[top, cols].reset_index(drop=True))
    out.insert(out.columns.get_loc("dur_ns") + 1, "dur_us", out["dur_ns"] / 1e3)
    return out


def _timeline_by_point(tl: pd.DataFrame) -> pd.DataFrame:
    """Mean over the process-GPU groups of each point (aorta averages ranks), in ms."""
    ns_cols = [f"{t}_ns" for t in PYTORCH_TYPES]
    one = _one_group_per_point(tl, ns_cols)
    if one is not None:
        return one
    g = tl.groupby("point", dropna=False, sort=True)
    out = g[ns_cols].mean() / 1e6
    out.columns = [c[:-3] + "_ms" for c in ns_cols]
    out.insert(0, "num_ranks", g["rank"].nunique(dropna=True).clip(lower=1) if "rank" in tl.columns
               else g.size())
    out.insert(1, "n_groups", g.size())
    return out.reset_index()


def _one_group_per_point(tl: pd.DataFrame, ns_cols: list[str]) -> pd.DataFrame | None:
    """:func:`_timeline_by_point` of a small timeline whose every point (a missing one too) has
    one process-GPU group (a single trace): each mean is the group's value, one rank, one group;
    None otherwise."""
    if not 0 < len(tl) <= SMALL_TABLE_ROWS or not all(
            isinstance(tl[c].dtype, np.dtype) and tl[c].dtype.kind in "iuf" for c in ns_cols):
        return None
    points = tl["point"].tolist()
    named = [p for p in points if p is not None]
    if not all(isinstance(p, str) for p in named) or len(set(points)) != len(points):
        return None
    order = sorted(range(len(points)), key=lambda i: (points[i] is None, points[i] or ""))
    # the grouping's keys: the names sorted, the missing one last as NaN (pandas infers the dtype)
    index = pd.Index(sorted(named) + [np.nan] * (len(named) < len(points)), name="point")
    ones = np.ones(len(points), dtype=np.int64)
    return pd.DataFrame({"point": index, "num_ranks": ones, "n_groups": ones,
                         **{c[:-3] + "_ms": tl[c].to_numpy(np.float64)[order] / 1e6 for c in ns_cols}})


def _collective_table(summary: pd.DataFrame) -> pd.DataFrame:
    """``collective_summary`` with unit-suffixed names the writers convert (``*_ns`` -> µs)."""
    ren = {}
    for stat in ("mean", "median", "min", "max"):
        for base in ("latency", "start_skew", "end_skew"):
            ren[f"{base}_ns_{stat}"] = f"{base}_{stat}_ns"
        ren[f"algbw_gbps_{stat}"] = f"algbw_{stat} (GB/s)"
        ren[f"busbw_gbps_{stat}"] = f"busbw_{stat} (GB/s)"
    return summary.rename(columns=ren)


def _analyse_collectives(label: str, d: pd.DataFrame, warmup: int, notes: list[str]) -> dict[str, pd.DataFrame]:
    """Cross-rank collective tables when the dispatches carry torch collective metadata."""
    if "coll_name" not in d.columns or not d["coll_name"].notna().any():
        return {}

    try:
        match = C.match_collectives(d, warmup=warmup, strict=False)
        summary = C.collective_summary(match.collectives)
        out = {"collectives": _with_label(decategorized(_collective_table(summary)), label),
               "stragglers": _with_label(decategorized(C.straggler_summary(match).rename(
                   columns={"pct_arrived_last": "arrived_last (%)"})), label),
               "nccl_master": _with_label(C.nccl_master_table(match), label)}
        try:
            best = C.best_points(summary)
            out["collective_best"] = _with_label(best, label)
        except GemmperfInputError:
            pass
    except GemmperfInputError as exc:
        notes.append(f"{label}: collectives not analysed: {exc}")
        return {}
    notes.extend(f"{label}: {n}" for n in match.notes)
    return out


def _analyse_one(label: str, d: pd.DataFrame | SweepReduction, counters: pd.DataFrame | None,
                 agents: pd.DataFrame | None, *, warmup: int, top_k: int, short_us: float,
                 notes: list[str]) -> dict[str, pd.DataFrame]:
    """Every per-sweep table of the reports from its dispatches, or from their reduction
    (``analysis/report_parts.py``: what ``gemmperf analyze`` sends back from its workers). A
    table of dispatches is reduced as one part, so both give the same bytes."""
    out: dict[str, pd.DataFrame] = {}
    if isinstance(d, SweepReduction):
        if (d.parts.warmup, d.parts.short_us) != (warmup, short_us):
            raise ValueError(f"{label}: reduced with warm-up {d.parts.warmup} and short kernels below "
                             f"{d.parts.short_us} µs, reported with {warmup} and {short_us}")
        kern = rows_kernel_stats(d.rows, by=("point", "rank", "kernel"))  # warm-up dropped where read
        by_category = _by_category_of_totals(d.totals)
        parts = d.parts
    else:
        kern = kernel_stats(d, by=("point", "rank", "kernel"), warmup=warmup)
        by_category = _by_category(d)
        parts = merge_parts([report_part(d, warmup=warmup, short_us=short_us)])
    out["kernels"] = _with_label(decategorized(kern), label)
    out["kernel_summary"] = _with_label(_kernel_summary(kern), label)
    out["by_category"] = _with_label(by_category, label)
    sk, hist = _short_kernels(parts, short_us)
    out["short_kernels"] = _with_label(sk, label)
    out["short_histogram"] = _with_label(hist, label)
    out["kernel_details"] = _with_label(_kernel_details(parts.details), label)
    if parts.gemm is not None:
        ahead = d.ahead if isinstance(d, SweepReduction) else None
        views = ahead[1]() if ahead is not None and ahead[0] == top_k else \
            gemm_views(parts.gemm, parts.comm, parts.has_comm, top_k)
        out.update({k: v if k == "_gemm" else _with_label(v, label) for k, v in views.items()})
    else:
        notes.append(f"{label}: no GEMM dispatches (category 'gemm'): variance, overlap and "
                     "distribution views are empty")
    tl = decategorized(parts.timeline)
    out["timeline"] = _with_label(tl, label)
    out["timeline_by_point"] = _with_label(_timeline_by_point(tl), label)
    if isinstance(d, SweepReduction):
        return out  # a sweep with counters or collective metadata is reported from its dispatches
    if counters is not None and len(counters):
        out["counters"] = _with_label(_counter_table(d, counters, agents), label)
    out.update(_analyse_collectives(label, d, warmup, notes))
    return out


def views_beside(sweep: SweepReduction, beside: Beside, top_k: int = 5) -> SweepReduction:
    """``sweep`` with its GEMM views (:func:`gemm_views`, the largest share of the report's
    tables) started in the process ``beside`` (``traces.parallel.beside``): this process builds
    the other tables meanwhile, and :func:`build_report_data` (with the same ``top_k``) takes
    them from there. The same tables as computed here."""
    parts = sweep.parts
    if parts.gemm is None:
        return sweep
    return replace(sweep, ahead=(top_k, beside.submit(gemm_views, parts.gemm, parts.comm, parts.has_comm, top_k)))


def gemm_views(gemm: GemmRows, comm: CommRows | None, has_comm: bool, top_k: int) -> dict[str, pd.DataFrame]:
    """Top variance, overlap per kernel (without their label column) and the plotted GEMM
    durations, from the GEMM rows (the variance's warm-up was dropped where each source was
    read) and the collectives beside them. A module-level function of picklable arguments: it
    also runs in a process beside this one (:func:`views_beside`)."""
    out: dict[str, pd.DataFrame] = {}
    g = gemm_frame(gemm)
    top = top_variance(g[gemm.warm], k=top_k, category=None)
    added = timestamp_columns(top, g)
    if has_comm:
        # the overlap reads each row's longest instance and the collectives, none of the other
        # GEMM dispatches: the table it searches holds only those (the same rows, in row order)
        longest = g.loc[np.unique(top["max_row"].to_numpy(np.int64))]
        both, comm_mask = collective_frame(longest, comm)
        added |= collective_overlap_columns(top, both, comm_mask, keys=("gpu",))
    out["top_variance"] = _top_table(top, added)
    keys = [c for c in ("point", "rank", "kernel") if c in g.columns]
    out["overlap"] = _overlap_table(g, keys)
    axes = _axes_of(g["point"])
    # extension arrays, not to_numpy(): kernel stays categorical, rank nullable (no object copies)
    out["_gemm"] = pd.DataFrame({"kernel": g["kernel"].array, "threads": axes["threads"].array,
                                 "channel": axes["channel"].array, "rank": g["rank"].array,
                                 "dur_ns": g["dur_ns"].to_numpy()})
    return out


def _top_table(top: pd.DataFrame, added: dict[str, Any]) -> pd.DataFrame:
    """The report's top-variance table: ``top`` with the ``added`` columns, without its row
    labels, text as objects (:func:`decategorized`), numbered from 0, built as one frame."""
    if not plain_index(top) or top.columns.has_duplicates:
        return decategorized(with_columns(top, added).drop(columns=["min_row", "max_row"])).reset_index(drop=True)
    columns = {c: as_objects(s) if isinstance(s.dtype, pd.CategoricalDtype) else s
               for c, s in top.items() if c not in ("min_row", "max_row")}
    return pd.DataFrame(columns | added, index=top.index)


def _overlap_table(g: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Overlap per kernel (``overlap_by_kernel``) with each group's median duration, keys and
    text as objects (None for missing: keys of any dtype join), built as one frame."""
    table = overlap_by_kernel(None, overlap=g, by=keys)
    # its rows are the groups of this same grouping, in the same (sorted) order: each row's
    # median lines up without a join
    dur = g["dur_ns"]
    exact = len(g) <= SMALL_TABLE_ROWS and isinstance(dur.dtype, np.dtype) and dur.dtype.kind == "i" \
        and (len(g) == 0 or int(np.abs(dur.to_numpy()).max()) < 2**52)
    gid = sorted_group_codes(g, keys) if exact and all(plain_group_key(g[c].dtype) for c in keys) else None
    if gid is not None:  # integers below 2**52: the two middle values' mean is exact either way
        med = group_medians(gid, dur.to_numpy(np.float64), len(table))
    else:
        med = g.groupby(keys, dropna=False, observed=True, sort=True)["dur_ns"].median().to_numpy(dtype=np.float64)
    columns = {c: as_objects(s) if c in keys or isinstance(s.dtype, pd.CategoricalDtype) else s
               for c, s in table.items()}
    return pd.DataFrame({**columns, "median_dur_us": med / 1e3})


def _counter_table(d: pd.DataFrame, counters: pd.DataFrame, agents: pd.DataFrame | None) -> pd.DataFrame:
    names = set(counters["kernel"].dropna().astype(str).unique())
    sub = d[d["kernel"].astype(object).isin(names).to_numpy()]
    if len(sub) == 0:  # a counter-only run: no timing dispatches to join with
        sub = counters.drop_duplicates([c for c in ("point", "rank", "run", "host", "agent",
                                                    "kernel", "dispatch_id") if c in counters.columns])
        sub = sub.assign(dur_ns=(sub["end_ns"] - sub["start_ns"]).astype("Float64"))
    joined = join_counters(sub, counters, agents=agents)
    summ = counter_summary(joined, by=("point", "kernel"))
    if "dur_ns" in summ.columns:
        summ["median_dur_us"] = summ.pop("dur_ns").astype(float) / 1e3
    return decategorized(summ)


# ---------------------------------------------------------------------------------------------
# cross-sweep views


def _plot_kernels(kernels: pd.DataFrame, top: pd.DataFrame, verdicts: pd.DataFrame | None) -> list[str]:
    """GEMM kernels worth a distribution plot: regressions first, then top variance, then time."""
    picked: list[str] = []
    if verdicts is not None and len(verdicts):
        v = verdicts[(verdicts["metric"] == DUR_NS) & (verdicts["kernel"] != ALL_KERNELS)]
        v = v.assign(_o=v["verdict"].map(SEVERITY).fillna(9)).sort_values(["_o", "ratio"], ascending=[True, False])
        picked += [k for k in v.loc[v["_o"] <= 1, "kernel"].astype(str)]
    if len(top) and "kernel_name" in top.columns:
        picked += list(top["kernel_name"].astype(str))
    g = kernels[kernels["category"].astype(str) == "gemm"]
    if len(g):
        picked += _kernels_by_time(g)
    seen: dict[str, None] = {}
    for k in picked:
        seen.setdefault(k, None)
    return list(seen)[:PLOT_KERNELS]


def _kernels_by_time(g: pd.DataFrame) -> list[str]:
    """Kernel names by their total time, largest first (pandas' grouped sum, then its default
    quicksort descending: ties as it leaves them). One row per kernel (a single trace): the
    rows' own totals, sorted by name as the grouping sorts them and then by the same NumPy call
    pandas' sort makes."""
    total = g["total_ns"]
    if isinstance(total.dtype, np.dtype) and total.dtype.kind == "i" and one_row_per_key(g, ("kernel",)):
        names = g["kernel"].tolist()
        by_name = sorted(range(len(names)), key=names.__getitem__)
        return [names[by_name[i]] for i in descending_order(total.to_numpy()[by_name])]
    return list(g.groupby("kernel")["total_ns"].sum().sort_values(ascending=False).index.astype(str))


def _boxes(gemm_parts: list[pd.DataFrame], plot_kernels: list[str]) -> dict[str, pd.DataFrame]:
    """Quantile boxes of the plotted GEMM kernels per axis value (and per sweep)."""
    if not gemm_parts or not plot_kernels:
        return {}
    picked = []
    for g in gemm_parts:
        # recode onto the plotted names: one shared categorical, no per-row strings
        names = g["kernel"] if isinstance(g["kernel"].dtype, pd.CategoricalDtype) else g["kernel"].astype("category")
        index = {k: i for i, k in enumerate(plot_kernels)}
        per_cat = np.asarray([index.get(str(c), -1) for c in names.cat.categories] + [-1], dtype=np.int64)
        codes = per_cat[names.cat.codes.to_numpy()]
        keep = codes >= 0
        picked.append(g[keep].assign(kernel=pd.Categorical.from_codes(codes[keep], categories=plot_kernels)))
    # the boxes read their rows by position: one sweep's are not copied into a new frame
    g = pd.concat(picked, ignore_index=True) if len(picked) > 1 else picked[0]
    if len(g) == 0:
        return {}
    out = {"label": _grouped_boxes(g, ["kernel", "label"])}
    for axis in ("threads", "channel", "rank"):
        if g[axis].notna().any():
            out[axis] = _grouped_boxes(g[g[axis].notna()], ["kernel", "label", axis])
    return out


def _interaction(top: pd.DataFrame) -> pd.DataFrame:
    """aorta's thread × channel interaction: mean ``time_diff_us`` of the top-K rows per cell,
    with the robust ``mad_cv`` beside it."""
    if len(top) == 0 or "threads" not in top.columns:
        return pd.DataFrame()
    t = top[top["threads"].notna() & top["channel"].notna()]
    if len(t) == 0:
        return pd.DataFrame()
    g = t.groupby(["label", "threads", "channel"], sort=True)
    return pd.DataFrame({"time_diff_us": g["time_diff_us"].mean(),
                         "mad_cv": g["mad_cv"].median(), "rows": g.size()}).reset_index()


def normalize_verdicts(verdicts: pd.DataFrame | None, labels: list[str]) -> pd.DataFrame | None:
    """Verdicts with a ``label`` column (candidate sweep), sorted by severity then ratio."""
    if verdicts is None:
        return None
    v = verdicts.copy()
    for c in VERDICT_COLUMNS:
        if c not in v.columns:
            v[c] = np.nan
    if "label" not in v.columns:
        v.insert(0, "label", labels[-1] if labels else "")
    v = v.assign(_o=v["verdict"].astype(str).map(SEVERITY).fillna(9),
                 _r=-pd.to_numeric(v["ratio"], errors="coerce").fillna(0))
    v = v.sort_values(["_o", "_r"], kind="stable").drop(columns=["_o", "_r"])
    cols = ["label"] + [c for c in VERDICT_COLUMNS] + [c for c in v.columns
                                                       if c not in VERDICT_COLUMNS and c != "label"]
    return v[cols].reset_index(drop=True)


def _as_list(x: Any, n: int) -> list:
    if x is None:
        return [None] * n
    if isinstance(x, pd.DataFrame):
        return [x] * n if n == 1 else [x] + [None] * (n - 1)
    x = list(x)
    if len(x) != n:
        raise ValueError(f"expected {n} tables (one per label), got {len(x)}")
    return x


def build_report_data(dispatches: pd.DataFrame | Sequence[pd.DataFrame] | Mapping[str, pd.DataFrame], *,
                      verdicts: pd.DataFrame | None = None,
                      counters: pd.DataFrame | Sequence[pd.DataFrame | None] | None = None,
                      agents: pd.DataFrame | Sequence[pd.DataFrame | None] | None = None,
                      meta: Mapping[str, Any] | None = None, labels: Sequence[str] | None = None,
                      warmup: int = 0, top_k: int = 5,
                      short_kernel_us: float = DEFAULT_SHORT_KERNEL_US,
                      telemetry: tuple[pd.DataFrame, pd.DataFrame, dict] | None = None,
                      compared: Sequence[ComparedSamples] = ()) -> ReportData:
    """Analyse one sweep (a dispatches table) or several (a list with ``labels``, or a mapping
    label -> table; the first is the baseline of an N-way comparison). ``telemetry``: (samples,
    summary, per-point metadata) of ``report.telemetry.read_results_telemetry``, shown as is.
    ``compared``: the samples tables the gate compared, for the before/after panels."""
    if isinstance(dispatches, Mapping):
        labels = list(dispatches)
        frames = list(dispatches.values())
    elif isinstance(dispatches, (pd.DataFrame, SweepReduction)):
        frames = [dispatches]
    else:
        frames = list(dispatches)
    if labels is None:
        labels = [str((meta or {}).get("label") or DEFAULT_LABEL)] if len(frames) == 1 else \
            [f"sweep{i}" for i in range(len(frames))]
    labels = [str(x) for x in labels]
    if len(labels) != len(frames):
        raise ValueError(f"{len(labels)} labels for {len(frames)} dispatch tables")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct: {labels}")
    counters_l = _as_list(counters, len(frames))
    agents_l = _as_list(agents, len(frames))
    notes: list[str] = []
    parts: dict[str, list[pd.DataFrame]] = {}
    n_disp: dict[str, int] = {}
    for label, d, c, a in zip(labels, frames, counters_l, agents_l):
        if d is None or len(d) == 0:
            raise ValueError(f"sweep {label!r} has no dispatches")
        n_disp[label] = int(len(d))
        res = _analyse_one(label, d, c, a, warmup=warmup, top_k=top_k, short_us=short_kernel_us,
                           notes=notes)
        for k, v in res.items():
            if k == "_gemm":
                v = v.assign(label=label)
            parts.setdefault(k, []).append(v)
    get = lambda k: _concat(parts.get(k, []))  # noqa: E731
    kernels = get("kernels")
    top = get("top_variance")
    verdicts_n = normalize_verdicts(verdicts, labels)
    plot_kernels = _plot_kernels(kernels, top, verdicts_n)
    return ReportData(
        labels=labels, kernels=kernels, kernel_summary=get("kernel_summary"),
        by_category=get("by_category"), short_kernels=get("short_kernels"),
        short_histogram=get("short_histogram"), kernel_details=get("kernel_details"),
        top_variance=top, overlap=get("overlap"), timeline=get("timeline"),
        timeline_by_point=get("timeline_by_point"), counters=get("counters"),
        boxes=_boxes(parts.get("_gemm", []), plot_kernels), interaction=_interaction(top), verdicts=verdicts_n,
        meta=redact_record(dict(meta or {})), short_kernel_us=float(short_kernel_us), top_k=int(top_k),
        notes=notes, n_dispatches=n_disp, collectives=get("collectives"),
        collective_best=get("collective_best"), stragglers=get("stragglers"),
        nccl_master=get("nccl_master"), before_after=before_after(verdicts_n, compared),
        **_telemetry_fields(telemetry))


def _telemetry_fields(telemetry) -> dict[str, Any]:
    if not telemetry:
        return {}
    samples, summary, meta = telemetry
    return {"telemetry": samples if samples is not None else pd.DataFrame(),
            "telemetry_summary": summary if summary is not None else pd.DataFrame(),
            "telemetry_meta": dict(meta or {})}


def finite(x: Any) -> bool:
    try:
        return x is not None and x is not pd.NA and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def page_kernel_labels(names_per_table: list[Any]) -> dict[str, str]:
    """One :func:`short_names` call over every kernel the page shows, so each label is
    distinct across the whole page (tables and plots alike)."""
    names: set[str] = set()
    for col in names_per_table:
        names.update(str(x) for x in col if x is not None and not (isinstance(x, float) and math.isnan(x)))
    return short_names(names)


def report_kernel_labels(data: ReportData) -> dict[str, str]:
    """Short labels for every kernel of the report (verdicts, kernel statistics, variance,
    overlap, counters, plotted boxes): one mapping for report.html and report.xlsx alike, so a
    kernel reads the same in both and no two kernels share a label anywhere. Computed once per
    report (the page, the workbook and summary.md each ask)."""
    if data._kernel_labels is None:
        data._kernel_labels = _kernel_labels(data)
    return dict(data._kernel_labels)


def _kernel_labels(data: ReportData) -> dict[str, str]:
    cols: list[Any] = []
    if data.verdicts is not None and "kernel" in data.verdicts.columns:
        cols.append(data.verdicts["kernel"])
        if "swapped_to" in data.verdicts.columns:  # a kernel swap's new name, in its before/after panel
            cols.append(data.verdicts["swapped_to"].dropna().astype(str).loc[lambda x: x != ""])
    for df, c in ((data.kernels, "kernel"), (data.top_variance, "kernel_name"), (data.overlap, "kernel"),
                  (data.counters, "kernel")):
        if df is not None and c in df.columns:
            cols.append(df[c])
    cols += [b["kernel"] for b in data.boxes.values() if b is not None and "kernel" in b.columns]
    return page_kernel_labels([_present_text(c) for c in cols])


def _present_text(col: pd.Series) -> list:
    """``col``'s values that are not missing, for :func:`page_kernel_labels` (which makes text of
    them and keeps each once): a column of text (object, string or categorical) read as Python
    values once; any other through pandas' ``dropna().astype(str)``, as its text is written."""
    if isinstance(col.dtype, np.dtype) and col.dtype != object:
        return list(pd.unique(col.dropna().astype(str)))
    # ``x == x``: false for NaN and NaT; pd.NA, which has no truth value, is checked first
    return [x for x in col.tolist() if x is not None and x is not pd.NA and x == x]


__all__ = ["BOX_COLUMNS", "DEFAULT_LABEL", "DEFAULT_SHORT_KERNEL_US", "ReportData", "box_stats",
           "build_report_data", "finite", "gemm_views", "normalize_verdicts", "overall_status", "page_kernel_labels",
           "point_outcome_counts",
           "report_kernel_labels", "sweep_fact",
           "verdict_counts", "views_beside"]
