"""CSV, JSON and Markdown outputs.

* ``kernels.csv`` — per (point, rank, kernel) duration statistics (ns);
* ``verdicts.csv`` — the verdicts table (ARCHITECTURE.md columns first);
* ``top5_gemm_kernels_time_variance.csv`` and its ``_with_timestamps`` /
  ``_with_collective_overlap`` variants — aorta's column sets first, in aorta's order, so its
  plotting and HTML scripts read them unchanged; our robust columns follow;
* ``summary.json`` — machine-readable overview;
* ``summary.md`` — a short page for ``$GITHUB_STEP_SUMMARY`` (kernel names in code spans, so
  ``<``/``>``/``|`` cannot turn into markup).
"""

from __future__ import annotations

import json
import math
from itertools import islice
from pathlib import Path
from typing import Any

import pandas as pd

from pytest_gemmperf.analysis.variance import AORTA_COLUMNS, OVERLAP_COLUMNS, TIMESTAMP_COLUMNS
from pytest_gemmperf.gate.headline import headline, notable
from pytest_gemmperf.gate.verdict import REGRESSION, shorten_kernel
from pytest_gemmperf.jsonsafe import clean
from pytest_gemmperf.gate.outcome import counts_text
from pytest_gemmperf.report.data import ReportData, sweep_fact, verdict_counts
from pytest_gemmperf.report.telemetry import gpu_seen, sampled_points
from pytest_gemmperf.safe_io import csv_text, csv_texts, write_csv, write_text
from pytest_gemmperf.textsafe import printable
from pytest_gemmperf.report.data import report_kernel_labels

VARIANCE_CSV = "top5_gemm_kernels_time_variance.csv"
#: robust columns appended after aorta's (aorta ignores extra columns)
VARIANCE_EXTRA = ("point", "median_us", "mad_cv", "iqr_cv", "count")
#: GitHub rejects step summaries above 1 MiB; stay far below
MD_MAX_ROWS = 20

#: the run's outcome (``report.data.overall_status``) as the banners say it
STATUS_TEXT = {
    "failed": "FAILED: REGRESSION",
    "error": "ERROR",
    "undecided": "UNDECIDED",
    "passed": "PASSED",
    "analysis": "ANALYSIS ONLY (no baseline compared)",
}


def public(df: pd.DataFrame, data: ReportData) -> pd.DataFrame:
    """Drop the ``label`` column of a single-sweep report."""
    if data.multi or "label" not in df.columns:
        return df
    names = df.columns.tolist()
    if names[0] == "label" and names.count("label") == 1:
        # every report table has it first (``data._with_label``): a positional slice costs
        # less than half of ``drop``'s label lookup, for the same frame
        return df.iloc[:, 1:]
    return df.drop(columns="label")


def variance_tables(data: ReportData) -> dict[str, pd.DataFrame]:
    """The three aorta-compatible top-K variance tables (label last when several sweeps)."""
    top = data.top_variance
    if len(top) == 0:
        return _empty_variance_tables()
    return {name: top.reindex(columns=cols) for name, cols in _variance_columns(data).items()}


def _variance_columns(data: ReportData) -> dict[str, list[str]]:
    """Each variance table's columns: aorta's sets, our robust columns, the label."""
    tail = ["label"] if data.multi else []
    sets = {
        VARIANCE_CSV: list(AORTA_COLUMNS),
        VARIANCE_CSV.replace(".csv", "_with_timestamps.csv"): list(AORTA_COLUMNS) + list(TIMESTAMP_COLUMNS),
        VARIANCE_CSV.replace(".csv", "_with_collective_overlap.csv"):
            list(AORTA_COLUMNS) + list(TIMESTAMP_COLUMNS) + list(OVERLAP_COLUMNS),
    }
    extra = [c for c in VARIANCE_EXTRA if c in data.top_variance.columns]
    return {name: cols + extra + tail for name, cols in sets.items()}


def _variance_csv_texts(data: ReportData) -> dict[str, str]:
    """The variance tables' CSV texts. Each is a choice of the widest table's columns: that
    table's numbers are tidied and its cells neutralised once (``safe_io.csv_texts``)."""
    if len(data.top_variance) == 0:
        return {name: csv_text(df) for name, df in _empty_variance_tables().items()}
    sets = _variance_columns(data)
    widest = max(sets.values(), key=len)
    wide = data.top_variance.reindex(columns=widest)
    at = {c: i for i, c in enumerate(widest)}  # every table's columns are among the widest's
    return dict(zip(sets, csv_texts(wide, [[at[c] for c in cols] for cols in sets.values()])))


def _empty_variance_tables() -> dict[str, pd.DataFrame]:
    """The variance tables of a report without GEMM kernels: aorta's headers alone."""
    empty = pd.DataFrame(columns=list(AORTA_COLUMNS))
    return {VARIANCE_CSV: empty,
            VARIANCE_CSV.replace(".csv", "_with_timestamps.csv"): empty.reindex(
                columns=list(AORTA_COLUMNS) + list(TIMESTAMP_COLUMNS)),
            VARIANCE_CSV.replace(".csv", "_with_collective_overlap.csv"): empty.reindex(
                columns=list(AORTA_COLUMNS) + list(TIMESTAMP_COLUMNS) + list(OVERLAP_COLUMNS))}


def write_csvs(data: ReportData, out_dir: Path, skip: set[str] = frozenset()) -> dict[str, Path]:
    written: dict[str, Path] = {}

    def put(name: str, df: pd.DataFrame) -> None:
        if name in skip:
            return
        # formula cells neutralised; written via a private temp file + rename (safe_io)
        written[name] = write_csv(df, out_dir / name)

    if "kernels.csv" not in skip:  # gemmperf analyze writes its own
        put("kernels.csv", public(data.kernels, data))
    if data.verdicts is not None:
        put("verdicts.csv", public(data.verdicts, data))
    for name, text in _variance_csv_texts(data).items():
        if name not in skip:
            written[name] = write_text(out_dir / name, text)
    return written


# ---------------------------------------------------------------------------------------------
# JSON


def summary_dict(data: ReportData, files: dict[str, Path] | None = None) -> dict[str, Any]:
    v = data.verdicts
    regressions: list[dict] = []
    if v is not None and len(v):
        cols = [c for c in ("label", "test", "point", "kernel", "metric", "ratio", "ci_low",
                            "ci_high", "q_value", "note") if c in v.columns]
        regressions = v.loc[v["verdict"] == REGRESSION, cols].head(100).to_dict("records")
    tl = data.timeline_by_point
    return clean({
        "status": data.status,
        "labels": data.labels,
        "outcome_counts": data.outcome_counts,
        "verdict_counts": verdict_counts(v),
        "regressions": regressions,
        "n_dispatches": data.n_dispatches,
        "points": sorted({str(p) for p in data.kernels.get("point", pd.Series(dtype=object)).dropna()}),
        "n_kernels": int(data.kernels["kernel"].nunique()) if "kernel" in data.kernels else 0,
        "timeline_by_point_ms": tl.to_dict("records") if len(tl) else [],
        "top_variance": _head_records(data.top_variance,
                                      ("label", "point", "rank", "kernel_name", "time_diff_us", "mad_cv"), 20),
        "short_kernel_threshold_us": data.short_kernel_us,
        "meta": data.meta,
        "notes": data.notes,
        "files": {k: str(p) for k, p in (files or {}).items()},
    })


def _head_records(df: pd.DataFrame, columns: tuple[str, ...], n: int) -> list[dict]:
    """The first ``n`` rows of ``df``'s ``columns`` as dicts, each cell as iterating its column
    gives it (what ``itertuples`` yields, and ``to_dict("records")`` as :func:`clean` reads it);
    a column ``df`` lacks as NaN (``reindex``), of a repeated name the first. Read from those
    columns' first rows only: no frame of them, no row object for every column."""
    rows = min(n, len(df))
    first: dict[str, int] = {}
    for i, c in enumerate(df.columns.tolist()):
        first.setdefault(c, i)
    plain = not df.columns.has_duplicates
    cells = [list(islice(df[c] if plain else df.iloc[:, first[c]], rows)) if c in first else [math.nan] * rows
             for c in columns]
    return [dict(zip(columns, row)) for row in zip(*cells)]


def write_summary_json(data: ReportData, path: Path, files: dict[str, Path] | None = None) -> Path:
    return write_text(path, json.dumps(summary_dict(data, files), indent=2, allow_nan=False) + "\n")


# ---------------------------------------------------------------------------------------------
# Markdown


def md_code(text: Any) -> str:
    """Inline code span that survives any kernel name (backticks, pipes, angle brackets,
    terminal escapes and bidi overrides, which GitHub would pass to the page as they are)."""
    s = printable(" ".join(str(text).split())).replace("|", "\\|")
    ticks = "`"
    while ticks in s:
        ticks += "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def md_text(text: Any) -> str:
    """Plain table cell: control and bidi characters, Markdown/HTML metacharacters escaped."""
    s = printable(" ".join(str(text).split()))
    for ch in "\\`*_[]<>|#":
        s = s.replace(ch, "\\" + ch)
    return s.replace("&", "&amp;")


def summary_markdown(data: ReportData, report_name: str | None = "report.html") -> str:
    # the distinguishing labels of report.html (an elided middle made GEMMs read alike);
    # full names are in verdicts.csv and the variance CSVs
    labels = report_kernel_labels(data)
    lines = [f"## gemmperf: {STATUS_TEXT[data.status]}", ""]
    counts = verdict_counts(data.verdicts)
    points = data.outcome_counts
    sweeps = sweep_fact(data)
    facts = ([f"{sweeps[0]}: {', '.join(md_code(x) for x in sweeps[1])}"] if sweeps else []) + [
        f"dispatches: {sum(data.n_dispatches.values()):,}"]
    if points:
        facts.append("points: " + counts_text(points))
    if counts:
        facts.append("verdicts: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    for key in ("hardware", "rocm_version", "rocprofv3_version", "commit", "working_tree"):
        if data.meta.get(key):
            facts.append(f"{key.replace('_', ' ')}: {md_code(data.meta[key])}")
    lines += [f"* {f}" for f in facts] + [""]
    v = data.verdicts
    if v is not None and len(v):
        shown = notable(v).head(MD_MAX_ROWS)
        if len(shown):
            head = (["sweep"] if data.multi else []) + ["verdict", "point", "kernel", "metric",
                                                        "change [95% CI]", "q", "reason"]
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for r in shown.to_dict("records"):
                h = headline(r)
                q = r["q_value"] if isinstance(r["q_value"], float) and math.isfinite(r["q_value"]) else None
                cells = ([md_code(r["label"])] if data.multi else []) + [
                    md_text(h.verdict), md_code(r["point"] or "-"),
                    md_code(labels.get(str(r["kernel"])) or shorten_kernel(r["kernel"], 80)),
                    md_text(r["metric"]), h.change, "-" if q is None else f"{q:.2g}",
                    md_text(h.reason) if h.reason else ""]
                lines.append("| " + " | ".join(cells) + " |")
            more = int((v["verdict"] != "unchanged").sum()) - len(shown)
            if more > 0:
                lines.append(f"\n... {more} more non-unchanged rows in `verdicts.csv`")
        else:
            lines.append("All compared kernels are unchanged.")
        lines.append("")
    lines += _telemetry_md(data)
    top = data.top_variance
    if len(top):
        lines += [f"Top GEMM kernels by time variance (max - min, top {data.top_k} per cell):", "",
                  "| point | rank | kernel | min µs | max µs | diff µs | robust CV |", "|---|---|---|---|---|---|---|"]
        for r in _head_records(top, ("point", "rank", "kernel_name", "kernel_time_min_us",
                                     "kernel_time_max_us", "time_diff_us", "mad_cv"), 5):
            lines.append(f"| {md_code(r['point'] if isinstance(r['point'], str) else '-')} | "
                         f"{'-' if pd.isna(r['rank']) else int(r['rank'])} | "
                         f"{md_code(labels.get(str(r['kernel_name'])) or shorten_kernel(r['kernel_name'], 80))} | "
                         f"{r['kernel_time_min_us']:.2f} | {r['kernel_time_max_us']:.2f} | {r['time_diff_us']:.2f} | "
                         f"{r['mad_cv']:.3f} |")
        lines.append("")
    for note in data.notes:
        lines.append(f"> {md_text(note)}")
    if report_name:
        lines.append(f"Full report: `{report_name}` (HTML), `report.xlsx`, CSVs beside it.")
    return "\n".join(lines).rstrip() + "\n"


def _telemetry_md(data: ReportData) -> list[str]:
    """Machine state per point (run/telemetry.py): throttled processes and GPU clock drops.
    The count is of the points the sampler ran for, not only those with per-process rows."""
    s, samples = data.telemetry_summary, data.telemetry
    n = sampled_points(samples, s)
    if not n:
        return []
    # lazy: the sampler's module only for a run that sampled (most reports have no telemetry)
    from pytest_gemmperf.run.telemetry import evidence

    out = []
    for (test, point), g in (s.groupby(["test", "point"], sort=True) if len(s) else ()):
        reasons, _ = evidence(g.drop(columns=["test", "point"]).to_dict("records"))
        if reasons:
            out.append(f"* {md_code(str(test).rsplit('::', 1)[-1] + '[' + str(point) + ']')}: "
                       + md_text("; ".join(reasons[:4])))
    if not out and not gpu_seen(samples, s):  # a CPU run: no GPU to speak of
        return [f"Telemetry: host only (no GPU seen) in {n} point(s).", ""]
    if not out:
        return [f"Telemetry: no GPU throttling or clock drop in {n} point(s).", ""]
    return ["Telemetry (machine state while the points ran):", "", *out, ""]


def write_summary_md(data: ReportData, path: Path) -> Path:
    return write_text(path, summary_markdown(data))


__all__ = ["VARIANCE_CSV", "clean", "md_code", "md_text", "public", "summary_dict",
           "summary_markdown", "variance_tables", "write_csvs", "write_summary_json",
           "write_summary_md"]
