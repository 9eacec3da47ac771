"""The work of ``gemmperf analyze``. Its parser is :mod:`pytest_gemmperf.commands.analyze`, which
imports this module only when the command runs, so ``gemmperf --help`` loads neither pandas
nor scipy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from pytest_gemmperf.commands.argtypes import add_allow_partial
from pytest_gemmperf.commands.helpfmt import command_description
from pytest_gemmperf.config import add_cli_option
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.jsonsafe import clean
from pytest_gemmperf.textsafe import printable
from pytest_gemmperf.workdir import TOOL_DIR, default_output_dir
from pytest_gemmperf.commands.defaults import ANALYZE_OUT as DEFAULT_OUT
from pytest_gemmperf.traces.discover import load
from pytest_gemmperf.traces.parallel import Beside, beside
from pytest_gemmperf.traces.schema import Trace
from pytest_gemmperf.safe_io import write_csv, write_text
from pytest_gemmperf.run.results import run_parts
from pytest_gemmperf.traces.skipped import check_lost_inputs
from pytest_gemmperf.traces.categories import load_rules
from pytest_gemmperf.analysis.kernel_stats import DurationRows, kernel_stats, rows_group_statistics, rows_kernel_stats
from pytest_gemmperf.analysis.source_totals import (AGENT_COLUMNS, TOTAL_COLUMNS, dispatch_totals, recategorize,
                                                     reduce_or_read)
from pytest_gemmperf.analysis.report_parts import SweepReduction
from pytest_gemmperf.analysis.small_tables import SMALL_TABLE_ROWS, descending_order


STAT_COLUMNS = ("count", "total_ns", "mean_ns", "median_ns", "std_ns", "min_ns", "max_ns",
                "p05_ns", "p95_ns", "iqr_ns", "mad_ns", "cv", "range_ns", "category")


KEYS = ("point", "rank", "kernel")


STR_DTYPE = "category"


def run(args: argparse.Namespace) -> int:
    with input_errors():
        return _run(args)


@contextlib.contextmanager
def input_errors() -> Iterator[None]:
    """What the OS raises while reading, as one line naming the file: the readers convert what
    they know; anything else the OS raises still gets one line."""
    try:
        yield
    except (OSError, UnicodeError) as exc:
        where = getattr(exc, "filename", None)
        reason = getattr(exc, "strerror", None) or exc
        raise GemmperfInputError(where, f"{type(exc).__name__}: {reason}") from None


def _run(args: argparse.Namespace) -> int:
    report = getattr(args, "report", True)
    with contextlib.ExitStack() as stack:
        # where a pool reads the inputs, a process forked beside this one writes report.xlsx; forked
        # now, it imports the workbook's modules while the pool reads
        beside = _beside(stack) if report else None
        result = analyze(args, full=False, reports=report, beside=beside)
        if report and beside is None:  # the pool started after all (prestart's guess was serial)
            beside = _beside(stack)
        write_outputs(args, result, Path(args.out) if args.out else None, report=report, beside=beside)
    for note in result.inputs.notes:
        print(printable(f"note: {note}"), file=sys.stderr)
    return 0


#: what the process writing report.xlsx imports (``report/__init__.py``'s ``_write_excel``)
XLSX_MODULES = ("pytest_gemmperf.report.excel",)


def _beside(stack: contextlib.ExitStack) -> Beside | None:
    """A process beside this one for report.xlsx where this process's fork server runs (the
    inputs are read on a pool: forking from it costs some 20 ms), else None (written here)."""
    helper = beside(XLSX_MODULES)
    return stack.enter_context(helper) if helper is not None else None


def preload(args: argparse.Namespace) -> None:
    """Imports the command will make once it runs: with its reports, the report layer and the
    workbook's writer (the caller pauses the cyclic collector and then freezes what they made)."""
    if getattr(args, "report", True):
        # lazy: --no-report never loads the report layer
        from pytest_gemmperf.report import excel  # noqa: F401


def _prepare_reports() -> None:
    """What writing the reports needs first, done while the pool reads (``meanwhile``)."""
    # lazy: --no-report never loads the report layer
    from pytest_gemmperf.report import prepare_template

    prepare_template()


@dataclass(frozen=True)
class Analyzed:
    """What ``gemmperf analyze`` computed before writing anything: kernels.csv's rows, summary.json's
    content and, when read in full (``full``), the trace and its recategorized dispatches."""

    kernels: pd.DataFrame
    summary: dict
    inputs: "Inputs"
    trace: Trace | None = None
    dispatches: pd.DataFrame | None = None
    sweep: SweepReduction | None = None   # reduced with reports: what the reports read instead


def analyze(args: argparse.Namespace, *, full: bool, reports: bool = False,
            beside: Beside | None = None) -> Analyzed:
    """The command's tables from its arguments (``paths``, ``warmup``, ``categories``, ``jobs``,
    ``allow_partial``). ``full``: hold every dispatch; else each source is reduced in a worker
    (kernels.csv and summary.json alike, bounded memory), with ``reports`` what the reports read
    too (``analysis/report_parts.py``), unless a view needs several sources' dispatches at once
    (``source_totals.reduce_or_read``): then every dispatch is held, no source read twice where
    it can be. ``beside``: a process that computes the reports' GEMM views of a reduced sweep
    while this one computes kernels.csv's rows, summary.json and the other tables
    (``report.data.views_beside``)."""
    args.warmup = args.warmup or 0  # unset: none dropped, as the gate's default
    extra_rules = _rules(args.categories)
    paths = _complete_parts(args.paths, getattr(args, "allow_partial", False))
    jobs = getattr(args, "jobs", 0)
    # None: a warm-up that cannot be dropped source by source (one process split over sources),
    # or a report view that reads dispatches of several sources together
    reduced = load(paths, jobs=jobs) if full else reduce_or_read(
        paths, jobs=jobs, warmup=args.warmup, rules=extra_rules, reports=reports,
        meanwhile=_prepare_reports if reports else None)
    if isinstance(reduced, Trace):  # the sources that forced it are not read again
        trace = reduced
        d = recategorize(trace.dispatches, extra_rules)
        inputs = Inputs(totals=dispatch_totals(d), agents=trace.agents, notes=trace.meta.get("notes", []),
                        sources=trace.meta.get("sources", []))
        kernels = kernel_table(d, warmup=args.warmup)
        _check_lost(args, trace.meta.get("skipped", []))
        return Analyzed(kernels, build_summary(args, inputs, kernels), inputs, trace, d)
    inputs = Inputs(totals=reduced.totals, agents=reduced.agents, notes=reduced.notes,
                    sources=reduced.sources)
    _check_lost(args, reduced.skipped)
    sweep = reduced.sweep() if reports else None
    if sweep is not None and beside is not None:
        # lazy: --no-report never loads the report layer
        from pytest_gemmperf.report.data import views_beside

        sweep = views_beside(sweep, beside)  # started first: computed while the rest is
    # the warm-up was dropped where each source was read; the totals count every dispatch
    kernels = rows_kernel_table(reduced.rows, mixed=reduced.totals["source"].nunique(dropna=True) > 1)
    return Analyzed(kernels, build_summary(args, inputs, kernels), inputs, sweep=sweep)


def _check_lost(args: argparse.Namespace, skipped: list) -> None:
    # a rank or process that could not be read would be missing from every total, unseen
    check_lost_inputs(", ".join(args.paths), skipped, getattr(args, "allow_partial", False),
                      use="analyze", result="the analysis")


def write_outputs(args: argparse.Namespace, result: Analyzed, out: Path | None, *, report: bool,
                  beside: Beside | None = None) -> Path:
    """kernels.csv and summary.json into ``out`` (None: a new default output directory), then, when
    ``report``, the reports (``beside``: a process that writes report.xlsx meanwhile); returns the
    directory."""
    try:
        out = out or default_output_dir(DEFAULT_OUT)
        out.mkdir(parents=True, exist_ok=True)

        write_csv(result.kernels, out / "kernels.csv")  # formulas neutralised, no link followed
        write_text(out / "summary.json", json.dumps(clean(result.summary), indent=2, allow_nan=False) + "\n")
    except OSError as exc:
        raise GemmperfInputError(out or TOOL_DIR, f"cannot write output: {exc.strerror or exc}") from None
    print(printable(f"gemmperf analyze: {result.summary['n_dispatches']} dispatches, {len(result.kernels)} "
                    f"kernel rows -> {out / 'kernels.csv'}, {out / 'summary.json'}"))
    if report and result.trace is not None and result.dispatches is not None:
        _write_reports(args, result.dispatches, result.trace.counters, result.trace.agents, out, beside)
    elif report and result.sweep is not None:
        _write_reports(args, result.sweep, None, result.inputs.agents, out, beside)
    return out


@dataclass(frozen=True)
class Inputs:
    """What summary.json reads besides the kernel rows, from either path."""

    totals: pd.DataFrame   # source_totals.dispatch_totals of every dispatch
    agents: pd.DataFrame
    notes: list[str]
    sources: list[dict]


def _complete_parts(paths: list[str], allow_partial: bool) -> list[str]:
    """Results runs among ``paths`` narrowed to what finished: an interrupted run is refused
    (or, with ``allow_partial``, only its complete points read); a parent of runs gives its
    complete runs, never pooling an interrupted one with them."""

    def note(text: str) -> None:
        print(text, file=sys.stderr)

    out: list[str] = []
    for path in paths:
        p = Path(path)
        out += [str(x) for x in run_parts(p, allow_partial, note)] if p.is_dir() else [path]
    return out


def _write_reports(args: argparse.Namespace, d: pd.DataFrame | SweepReduction, counters: pd.DataFrame | None,
                   agents: pd.DataFrame, out: Path, beside: Beside | None = None) -> None:
    """report.html, report.xlsx, summary.md and the aorta variance CSVs beside our own files
    (kernels.csv and summary.json stay this command's), from the dispatches or their reduction."""
    # lazy: --no-report never loads the report layer and the statistics libraries it imports
    from pytest_gemmperf.report import write_reports

    files = write_reports(out, dispatches=d, counters=counters, agents=agents,
                          meta={"inputs": [str(p) for p in args.paths]}, warmup=args.warmup,
                          skip={"kernels.csv", "summary.json"}, beside=beside)
    if "report.html" in files:
        print(printable(f"report: {files['report.html']}"))


def _rules(path: str | None) -> list[tuple[str, str]]:
    if not path:
        return []
    return load_rules(path)


def kernel_table(d: pd.DataFrame, *, warmup: int = 0, mixed: bool | None = None) -> pd.DataFrame:
    """kernels.csv rows: statistics per (point, rank, kernel) (and source when mixed: the
    inputs mix profilers; None: as ``d`` does)."""

    by = KEYS
    if d["source"].nunique(dropna=True) > 1 if mixed is None else mixed:
        by = ("source",) + KEYS
    return _ordered(_restore_keys(kernel_stats(_fill_keys(d), by=by, warmup=warmup)), by, d)


def rows_kernel_table(rows: DurationRows, *, mixed: bool) -> pd.DataFrame:
    """``kernel_table`` of the table ``rows`` stands for (``analysis/kernel_stats.DurationRows``),
    warm-up already dropped: the keys' nulls filled on the keys alone."""
    by = ("source",) + KEYS if mixed else KEYS
    # the same rows: the reports' statistics of them (nulls kept) reuse these (kernel_stats)
    filled = DurationRows(_fill_keys(rows.keys), rows.group, rows.dur_ns, rows.stats_cache)
    if 0 < len(rows) and len(rows.keys) <= SMALL_TABLE_ROWS:
        return _small_kernel_table(filled, by)
    return _ordered(_restore_keys(rows_kernel_stats(filled, by=by)), by, rows.keys)


def _small_kernel_table(filled: DurationRows, by: tuple[str, ...]) -> pd.DataFrame:
    """``_ordered(_restore_keys(rows_kernel_stats(filled, by)))`` made as one frame: the key
    columns of each group's first key, the sentinels back to nulls, the statistics beside
    them, sorted as ``_ordered`` sorts (pandas' ``lexsort_indexer``: each key's codes, nulls
    last, the total time descending, ties in group order)."""
    rep, stats = rows_group_statistics(filled, by)
    keys = filled.keys
    cols: dict[str, Any] = {c: keys[c].array.take(rep) for c in by}
    point = np.asarray(cols["point"].astype(object), dtype=object)
    point[pd.isna(point) | (point == _NA_POINT)] = None
    cols["point"] = point
    rank = pd.array(cols["rank"], dtype="Int64").to_numpy(dtype=np.int64, na_value=_NA_RANK)
    cols["rank"] = pd.arrays.IntegerArray(rank, rank == _NA_RANK)
    for c in ("count", "total_ns", "mean_ns", "median_ns", "std_ns", "min_ns", "max_ns", "p05_ns", "p95_ns",
              "iqr_ns", "mad_ns", "cv"):
        cols[c] = stats[c]
    cols["range_ns"] = stats["max_ns"] - stats["min_ns"]
    cols["category"] = (keys["category"].array.take(rep) if "category" in keys.columns
                        else pd.Series([pd.NA] * len(rep), dtype="category").array)
    cols["n_outliers"] = stats["n_outliers"]
    labels = [~cols["total_ns"]] + [_sort_codes(cols[c]) for c in reversed(by) if c != "kernel"]
    order = np.lexsort(labels)
    # an object column stays one (a frame would infer strings of an object array)
    return pd.DataFrame({c: pd.Series(v[order], dtype=object) if v.dtype == object else v[order]
                         for c, v in cols.items()}, copy=False)


def _sort_codes(values: Any) -> np.ndarray:
    """A key column's codes as ``DataFrame.sort_values`` orders it (``Categorical(values,
    ordered=True)``: a categorical's own categories, else its sorted values; nulls last)."""
    if isinstance(values, np.ndarray) and values.dtype == object:
        values = pd.array(values, dtype=object)  # as pandas reads an object column: no inference
    cat = pd.Categorical(values, ordered=True)
    codes = cat.codes.astype(np.int64)
    return np.where(codes < 0, len(cat.categories), codes)


def _ordered(stats: pd.DataFrame, by: tuple[str, ...], d: pd.DataFrame) -> pd.DataFrame:
    """kernels.csv's columns and row order: by ``by`` but the kernel, then total time, largest
    first."""
    if "category" not in stats.columns:
        cat = d.drop_duplicates("kernel")[["kernel", "category"]]
        stats = stats.merge(cat, on="kernel", how="left")
    first = list(by) + [c for c in STAT_COLUMNS if c in stats.columns]
    rest = [c for c in stats.columns if c not in first]
    stats = stats[first + rest]
    order = [c for c in by if c != "kernel"]
    stats = stats.sort_values(order + ["total_ns"], ascending=[True] * len(order) + [False],
                              kind="stable", na_position="last")
    return stats.reset_index(drop=True)


# Null group keys (no point, no rank) are common (a single trace, rocprofv3 without rank), and
# grouped quantiles misalign on NaN index labels; sentinels keep those groups intact.
_NA_POINT = "\x00no-point"


_NA_RANK = -1


def _fill_keys(d: pd.DataFrame) -> pd.DataFrame:
    d = d.copy(deep=False)
    if d["point"].isna().any():
        pt = d["point"]
        if not isinstance(pt.dtype, pd.CategoricalDtype):
            pt = pt.astype(STR_DTYPE)
        d["point"] = pt.cat.add_categories([_NA_POINT]).fillna(_NA_POINT)
    d["rank"] = d["rank"].fillna(_NA_RANK)
    return d


def _restore_keys(stats: pd.DataFrame) -> pd.DataFrame:
    stats = stats.copy()
    point = stats["point"].astype(object)
    stats["point"] = point.where(point != _NA_POINT, None)
    stats["rank"] = stats["rank"].astype("Int64").mask(stats["rank"] == _NA_RANK)
    return stats


def build_summary(args: argparse.Namespace, inputs: Inputs, kernels: pd.DataFrame) -> dict:
    t = inputs.totals
    per_rows, by_source = (_small_summary_groups(t) if _small_totals(t) else _summary_groups(t))
    agents = inputs.agents
    agent_cols = [c for c in AGENT_COLUMNS if c in agents.columns]
    return {
        "inputs": [str(p) for p in args.paths],
        "warmup": args.warmup,
        "categories_file": args.categories,
        "sources": inputs.sources,
        "notes": inputs.notes,
        "n_dispatches": int(t["n_dispatches"].sum()),
        "n_kernel_rows": int(len(kernels)),
        "dispatches_by_source": by_source,
        "flags": {"zero_dur": int(t["zero_dur"].sum()),
                  "queue_overlap": int(t["queue_overlap"].sum())},
        "per_point_rank": per_rows,
        "total_ns_by_category_note": "sums of dur_ns over all dispatches (warm-up included)",
        # most traces list no agents (Kineto, a CSV without agent_info): no table to dedupe
        "agents": agents[agent_cols].drop_duplicates().to_dict("records") if len(agents) else [],
    }


def _summary_groups(t: pd.DataFrame) -> tuple[list[dict], dict[str, int]]:
    """summary.json's per (point, rank) records (totals, flags, duration by category) and its
    dispatches per source (largest first) of the dispatch totals ``t``."""
    keys = ["point", "rank"]
    g = t.groupby(keys, dropna=False, observed=True, sort=True)
    per = g.agg(n_dispatches=("n_dispatches", "sum"), total_ns=("total_ns", "sum"),
                first_start_ns=("first_start_ns", "min"), last_end_ns=("last_end_ns", "max"),
                zero_dur=("zero_dur", "sum"), queue_overlap=("queue_overlap", "sum")).reset_index()
    by_cat = (t.groupby(keys + ["category"], dropna=False, observed=True)["total_ns"].sum()
              .reset_index())
    per_rows = []
    for rec in per.to_dict("records"):
        sel = by_cat
        for k in keys:
            sel = sel[_same(sel[k], rec[k])]
        rec["total_ns_by_category"] = {str(c): int(v) for c, v in zip(sel["category"], sel["total_ns"])}
        per_rows.append(rec)
    # as value_counts orders them: by count, largest first, from the categories' order
    by_source = (t.groupby("source", dropna=False, observed=False, sort=True)["n_dispatches"].sum()
                 .sort_values(ascending=False))
    return per_rows, {str(k): int(v) for k, v in by_source.items()}


def _small_totals(t: pd.DataFrame) -> bool:
    """Whether ``t`` takes :func:`_small_summary_groups`: a few rows, with the canonical key
    dtypes (categorical point, category and source, nullable integer rank)."""
    return (0 < len(t) <= SMALL_TABLE_ROWS and str(t["rank"].dtype) == "Int64"
            and all(isinstance(t[c].dtype, pd.CategoricalDtype) for c in ("point", "category", "source")))


def _small_summary_groups(t: pd.DataFrame) -> tuple[list[dict], dict[str, int]]:
    """:func:`_summary_groups` of a small ``t`` in NumPy: the same groups in the same order
    (pandas' ``groupby(sort=True, dropna=False)``: categories in their order, ranks ascending,
    nulls last), integer sums, minima and maxima, exact as pandas'."""
    point, point_values = _category_keys(t["point"])
    category, category_values = _category_keys(t["category"])
    category_names = _labels(category_values)
    rank_na = t["rank"].isna().to_numpy()
    rank = t["rank"].to_numpy(dtype=np.int64, na_value=0)
    numbers = {c: t[c].to_numpy(dtype=np.int64) for c in TOTAL_COLUMNS}

    groups, of_row = np.unique(np.column_stack([point, rank_na, rank]), axis=0, return_inverse=True)
    of_row = of_row.reshape(-1)
    n = len(groups)
    acc = {}
    for c in TOTAL_COLUMNS:
        reduce, start = _REDUCERS.get(c, (np.add, 0))
        acc[c] = np.full(n, start, dtype=np.int64)
        reduce.at(acc[c], of_row, numbers[c])
    # (group, category) cells sorted: each group's categories lie together, in category order
    cells, of_cell = np.unique(np.column_stack([of_row, category]), axis=0, return_inverse=True)
    by_cat = np.zeros(len(cells), dtype=np.int64)
    np.add.at(by_cat, of_cell.reshape(-1), numbers["total_ns"])
    bounds = np.searchsorted(cells[:, 0], np.arange(n + 1)).tolist()
    cell_category, by_cat = cells[:, 1].tolist(), by_cat.tolist()
    per_rows = []
    for i, (p, r_na, r) in enumerate(groups.tolist()):
        rec = {"point": point_values[p], "rank": None if r_na else r}
        rec.update((c, int(acc[c][i])) for c in TOTAL_COLUMNS)
        cut = slice(bounds[i], bounds[i + 1])
        rec["total_ns_by_category"] = {category_names[c]: v for c, v in zip(cell_category[cut], by_cat[cut])}
        per_rows.append(rec)
    return per_rows, _small_by_source(t["source"], numbers["n_dispatches"])


#: how the summary reduces each totals column per group (else summed)
_REDUCERS = {"first_start_ns": (np.minimum, np.iinfo(np.int64).max),
             "last_end_ns": (np.maximum, np.iinfo(np.int64).min)}


def _category_keys(s: pd.Series) -> tuple[np.ndarray, list]:
    """Per row of the categorical ``s`` its group number in pandas' sorted grouping (its
    category's position, nulls last), and per number the value: the category (the last, for
    nulls: None, as summary.json writes a null key value; pandas' label ``str()`` is "nan")."""
    codes = s.cat.codes.to_numpy().astype(np.int64)
    n_cat = len(s.cat.categories)
    return np.where(codes < 0, n_cat, codes), [*s.cat.categories.tolist(), None]


def _labels(values: list) -> list[str]:
    """:func:`_category_keys`' values as pandas' group labels print (``str()``; the null: "nan")."""
    return [str(c) for c in values[:-1]] + ["nan"]


def _small_by_source(source: pd.Series, n: np.ndarray) -> dict[str, int]:
    """Dispatches per source as ``groupby(observed=False, dropna=False).sum().sort_values(
    ascending=False)`` gives them (every category, and a null group where a row has no source;
    in the order of pandas' ``nargsort``: the reversed sums sorted, then reversed)."""
    codes, names = _category_keys(source)
    sums = np.zeros(len(names), dtype=np.int64)
    np.add.at(sums, codes, n)
    labels = _labels(names)
    if not (codes == len(names) - 1).any():  # a null group only where a row has no source
        labels.pop()
    sums = sums[:len(labels)]
    return {labels[i]: int(sums[i]) for i in descending_order(sums).tolist()}


def _same(col: pd.Series, value: Any) -> pd.Series:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return col.isna()
    return col.astype(object) == value

