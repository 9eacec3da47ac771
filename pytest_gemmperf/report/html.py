"""``report.html``: one self-contained page (inline CSS, inline SVG, a few lines of inline JS).

The page loads nothing: a Content-Security-Policy meta tag forbids every network fetch, so it
opens the same from disk, from a CI artefact or offline. Jinja2 autoescaping is on for the
whole template; data never reaches the page through ``|safe`` — only the SVG produced by
:mod:`pytest_gemmperf.report.plots`, which escapes its own text.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pandas as pd
from markupsafe import Markup

from pytest_gemmperf.version import __version__
from pytest_gemmperf.analysis.kernel_names import short_names
from pytest_gemmperf.analysis.small_tables import descending_order, one_row_per_key
from pytest_gemmperf.analysis.variance import parse_point_axes
from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.gate.headline import change_text, headline, notable, raw_detail
from pytest_gemmperf.gate.verdict import MISSING, NEW, shorten_kernel
from pytest_gemmperf.report import plots
from pytest_gemmperf.report.data import (HTML_MAX_ROWS, ReportData, page_kernel_labels,  # noqa: F401 - public here too
                                         report_kernel_labels, sweep_fact, verdict_counts)
from pytest_gemmperf.gate.outcome import counts_text
from pytest_gemmperf.report.tables import STATUS_TEXT
from pytest_gemmperf.report.telemetry import telemetry_context
from pytest_gemmperf.safe_io import write_text
from pytest_gemmperf.textsafe import printable_lines

TEMPLATE = "report.html.j2"


class _TemplateCache(jinja2.FileSystemBytecodeCache):
    """Jinja's per-user cache of compiled templates (a directory of the user's own, mode 0700,
    under the temporary directory; an entry is keyed by the template's name and the checksum of
    its text and of what compiled it (:func:`compiled_by`), and written whole or not at all):
    compiling report.html.j2 costs about 0.1 CPU-s, a tenth of writing a small sweep's reports.
    A cache that cannot be read or written is skipped: the template is compiled as without one."""

    def get_bucket(self, environment: jinja2.Environment, name: str, filename: str | None,
                   source: str) -> jinja2.bccache.Bucket:
        # Jinja checks the template's text only: code compiled by another version of Jinja or of
        # this package, or under other options, would be served as if current
        return super().get_bucket(environment, name, filename, compiled_by(environment) + "\0" + source)

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError):
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def compiled_by(env: jinja2.Environment) -> str:
    """What a template's compiled code depends on besides its text: the versions of Jinja and of
    this package, and the environment's compile-time options (the lexer's, autoescaping,
    ``finalize``, the undefined type, extensions, the optimizer, the filter and test names the
    compiler checks). Callables by their qualified names: stable from one process to the next."""

    def named(x: Any) -> str:
        if not callable(x):
            return repr(x)
        return f"{getattr(x, '__module__', None) or type(x).__module__}." \
               f"{getattr(x, '__qualname__', type(x).__qualname__)}"

    options = (env.block_start_string, env.block_end_string, env.variable_start_string,
               env.variable_end_string, env.comment_start_string, env.comment_end_string,
               env.line_statement_prefix, env.line_comment_prefix, env.trim_blocks, env.lstrip_blocks,
               env.newline_sequence, env.keep_trailing_newline, env.optimized, env.is_async)
    return repr((jinja2.__version__, __version__, options, named(env.autoescape), named(env.finalize),
                 named(env.undefined), sorted(env.extensions), sorted(env.filters), sorted(env.tests)))


def _template_cache() -> jinja2.BytecodeCache | None:
    try:
        return _TemplateCache()
    except (OSError, RuntimeError):  # no private temporary directory to be had: no cache
        return None


@functools.cache
def _env() -> jinja2.Environment:
    """The page's Jinja environment, one per process: it keeps the compiled templates, so a
    second page, or :func:`prepare_template` run earlier, does not load them again."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_gemmperf.report", "templates"), bytecode_cache=_template_cache(),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        finalize=_visible)
    env.filters.update(num=fmt_num, us=fmt_us, ratio=fmt_ratio, pct=fmt_pct, sortkey=sort_key,
                       intf=fmt_int, p=fmt_p)
    # ``{% if r.metric is time_metric %}``: nanosecond metrics are shown in µs
    env.tests["time_metric"] = lambda name: M.lookup(str(name)).unit.time
    return env


def prepare_template() -> None:
    """Compile the page's template now (kept by :func:`_env`), e.g. while worker processes still
    read the inputs, instead of when the page is written."""
    _env().get_template(TEMPLATE)


def _visible(value: Any) -> Any:
    """Every ``{{ }}`` output: text shows control and bidi characters as escapes (a U+202E in a
    kernel name would reverse the rest of its table cell); newlines are whitespace in HTML and
    stay; markup built by ``plots`` is kept."""
    return printable_lines(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def _ok(x: Any) -> bool:
    try:
        return x is not None and x is not pd.NA and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def fmt_num(x: Any, digits: int = 3) -> str:
    return f"{float(x):,.{digits}f}" if _ok(x) else "–"


def fmt_us(x: Any, scale: float = 1.0) -> str:
    """Microseconds with 3 decimals (``scale=1e-3`` for ns input)."""
    return f"{float(x) * scale:,.3f}" if _ok(x) else "–"


def fmt_int(x: Any) -> str:
    return f"{int(x):,}" if _ok(x) else "–"


def fmt_ratio(x: Any) -> str:
    return f"{float(x):.4f}" if _ok(x) else "–"


def fmt_pct(x: Any) -> str:
    return f"{100 * (float(x) - 1):+.1f}%" if _ok(x) else "–"


def fmt_p(x: Any) -> str:
    return f"{float(x):.2g}" if _ok(x) else "–"


def sort_key(x: Any) -> str:
    """``data-v`` attribute for numeric sorting (empty: sorts after numbers)."""
    return repr(float(x)) if _ok(x) else ""


def _records(df: pd.DataFrame, limit: int = HTML_MAX_ROWS) -> list[dict]:
    """The first ``limit`` rows as dicts of Python values, None for missing: what
    ``df.astype(object).where(df.notna(), None).to_dict("records")`` gives, from one object
    array (pandas' ``where`` on an object frame alone costs more than this whole function)."""
    head = df.head(limit) if len(df) > limit else df  # head() copies even a frame it keeps whole
    values = head.to_numpy(dtype=object, copy=True)  # a single object block would be a read-only view
    values[head.isna().to_numpy(dtype=bool)] = None
    columns = head.columns.tolist()
    return [dict(zip(columns, map(_native, row))) for row in values.tolist()]


def _native(x: Any) -> Any:
    """A NumPy scalar as the Python value ``to_dict`` gives for it; anything else as it is."""
    if isinstance(x, (np.integer, np.floating, np.bool_)):
        return x.item()
    if isinstance(x, np.datetime64):
        return pd.Timestamp(x)
    if isinstance(x, np.timedelta64):
        return pd.Timedelta(x)
    return x


def _axes(data: ReportData) -> dict[str, str]:
    """Sweep axes seen in the data (from point ids and ranks)."""

    k = data.kernels
    facts: dict[str, str] = {}
    if "point" in k.columns and k["point"].notna().any():
        points = sorted({str(p) for p in k["point"].dropna()})
        facts["points"] = ", ".join(points)
        ax = parse_point_axes(pd.Series(points, dtype=object))
        for col, name in (("threads", "threads"), ("channel", "channels")):
            vals = sorted({int(v) for v in ax[col].dropna()})
            if vals:
                facts[name] = ", ".join(map(str, vals))
    if "rank" in k.columns and k["rank"].notna().any():
        ranks = sorted({int(r) for r in k["rank"].dropna()})
        facts["ranks"] = ", ".join(map(str, ranks))
    return facts


def _meta_rows(data: ReportData) -> list[tuple[str, str]]:
    m = data.meta
    sweeps = sweep_fact(data)
    rows: list[tuple[str, str]] = []
    if sweeps:
        rows.append((sweeps[0], ", ".join(sweeps[1]) + (" (first = baseline)" if data.multi else "")))
    for key, title in (("hardware", "hardware"), ("rocm_version", "ROCm"),
                       ("rocprofv3_version", "rocprofv3"), ("torch_version", "PyTorch"),
                       ("commit", "commit"), ("working_tree", "working tree"), ("host", "host"),
                       ("created", "run started"),
                       ("baseline", "baseline"), ("inputs", "inputs"), ("command", "command")):
        v = m.get(key)
        if v not in (None, "", [], {}):
            rows.append((title, ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)))
    rows += [(f"sweep axis: {k}", v) for k, v in _axes(data).items()]
    rows += [(f"dispatches ({lab})" if data.multi else "dispatches", f"{n:,}")
             for lab, n in data.n_dispatches.items()]
    return rows


def _distribution_panels(data: ReportData, short: dict[str, str] | None = None) -> list[dict]:
    """One section per axis, one SVG panel per plotted kernel (titled by its page label)."""
    short = short or {}
    sections = []
    titles = {"label": "per sweep" if data.multi else "whole run",
              "threads": "by threads", "channel": "by channels", "rank": "by rank"}
    for axis in ("label", "threads", "channel", "rank"):
        b = data.boxes.get(axis)
        if b is None or len(b) == 0:
            continue
        group_cols = ["label"] if axis == "label" else (["label", axis] if data.multi else [axis])
        if axis == "threads":
            b = b.assign(threads=["th" + str(int(x)) for x in b["threads"]])
        if axis == "channel":
            b = b.assign(channel=["ch" + str(int(x)) for x in b["channel"]])
        if axis == "rank":
            b = b.assign(rank=[int(x) for x in b["rank"]])
        panels = [plots.box_rows_panel(rows, group_cols, str(kernel), label=short.get(str(kernel)))
                  for kernel, rows in _per_kernel_rows(b, group_cols)]
        sections.append({"title": titles[axis], "panels": panels})
    return sections


def _per_kernel(boxes: pd.DataFrame, group_cols: list[str]) -> list[tuple[Any, pd.DataFrame]]:
    """Each kernel's boxes sorted by ``group_cols``, kernels in order of appearance: one row a
    kernel (one sweep's boxes per kernel) is its own group, sorted as it is (no grouping)."""
    kernels = boxes["kernel"].tolist()
    if all(isinstance(k, str) for k in kernels) and len(set(kernels)) == len(kernels):
        return [(k, boxes.iloc[i:i + 1]) for i, k in enumerate(kernels)]
    return [(k, grp.sort_values(group_cols)) for k, grp in boxes.groupby("kernel", sort=False)]


def _per_kernel_rows(boxes: pd.DataFrame, group_cols: list[str]) -> list[tuple[Any, list[dict]]]:
    """:func:`_per_kernel` with each kernel's boxes as rows (``plots.frame_rows``): one row a
    kernel, the rows of the whole frame read at once, no frame per kernel."""
    if one_row_per_key(boxes, ("kernel",)):
        return [(k, [row]) for k, row in zip(boxes["kernel"].tolist(), plots.frame_rows(boxes))]
    return [(k, plots.frame_rows(grp)) for k, grp in _per_kernel(boxes, group_cols)]


def _kernel_overview(data: ReportData, limit: int = 60) -> pd.DataFrame:
    """Per sweep and kernel, over all points and ranks: the kernels table of the page."""
    k = data.kernels
    if len(k) == 0:
        return k
    cells = _one_cell_totals(k)
    if cells is None:
        return _kernel_totals(k).sort_values("total_ns", ascending=False).head(limit)
    total = cells["total_ns"]
    if total.dtype.kind == "f" and np.isnan(total).any():  # pandas sorts NaN last: its own way
        return pd.DataFrame(cells).sort_values("total_ns", ascending=False).head(limit)
    order = descending_order(total)[:limit]  # sort_values' order, its first ``limit`` rows
    return pd.DataFrame({c: v[order] for c, v in cells.items()})


_TOTALS = ("count", "total_ns", "median_ns", "p95_ns", "cv")


def _kernel_totals(k: pd.DataFrame) -> pd.DataFrame:
    """Per (label, kernel), in order of appearance: category, dispatches, time and the median
    cell's median, p95 and CV."""
    cells = _one_cell_totals(k)
    if cells is not None:
        return pd.DataFrame(cells)
    g = k.groupby(["label", "kernel"], sort=False)
    return pd.DataFrame({"category": g["category"].first(), "count": g["count"].sum(),
                         "total_ns": g["total_ns"].sum(), "median_ns": g["median_ns"].median(),
                         "p95_ns": g["p95_ns"].median(), "cv": g["cv"].median(),
                         "cells": g.size()}).reset_index()


def _one_cell_totals(k: pd.DataFrame) -> dict[str, np.ndarray] | None:
    """:func:`_kernel_totals`'s columns where each (label, kernel) has one cell (one point and
    rank): its sums and medians are the cell's values; None otherwise."""
    kinds = [k[c].dtype.kind if isinstance(k[c].dtype, np.dtype) else "" for c in _TOTALS]
    if kinds[:2] not in (["i", "i"], ["i", "f"]) or kinds[2:] != ["f"] * 3 or k["category"].dtype != object \
            or not one_row_per_key(k, ("label", "kernel")):
        return None
    category = k["category"].to_numpy(dtype=object, copy=True)
    category[k["category"].isna().to_numpy(dtype=bool)] = np.nan  # first(): no value -> NaN
    return {"label": k["label"].to_numpy(), "kernel": k["kernel"].to_numpy(), "category": category,
            **{c: k[c].to_numpy() for c in _TOTALS}, "cells": np.ones(len(k), dtype=np.int64)}


def _collective_context(data: ReportData) -> dict[str, Any]:
    """The collectives section: bus bandwidth vs message size per point (one panel per
    collective), mean wait per rank as a heat map, the summary and best-point tables."""
    if not data.has_collectives:
        return {"has_collectives": False}
    c = data.collectives
    series = (c["label"].astype(str) + ": " + c["point"].astype(str)) if data.multi else c["point"].astype(str)
    rows = pd.DataFrame({"series": series, "coll_name": c["coll_name"].astype(str),
                         "msg_bytes": pd.to_numeric(c["msg_bytes_min"], errors="coerce"),
                         "busbw_gbps": pd.to_numeric(c["busbw_median (GB/s)"], errors="coerce"),
                         "count": pd.to_numeric(c["count"], errors="coerce")})
    panels = [plots.bandwidth_panel(grp, str(name)) for name, grp in rows.groupby("coll_name", sort=True)]
    st = data.stragglers
    heat = None
    if len(st):
        row = (st["label"].astype(str) + ": " + st["point"].astype(str)) if data.multi else st["point"].astype(str)
        wait_us = pd.to_numeric(st["mean_wait_ns"], errors="coerce") / 1e3
        tips = [f"{r}, rank {k}: mean wait {w:,.2f} µs, max {m / 1e3:,.2f} µs, arrived last in "
                f"{p:.0f}% of {int(n)} collectives"
                for r, k, w, m, p, n in zip(row, st["rank"], wait_us, st["max_wait_ns"].astype(float),
                                            st["arrived_last (%)"].astype(float), st["n_collectives"])]
        heat = plots.heat_map(pd.DataFrame({"row": row, "col": st["rank"].astype(object),
                                            "value": wait_us, "tip": tips}),
                              "mean wait for the last rank to arrive, per point (rows) and rank (columns)",
                              value_label="µs", col_label="rank")
    return {"has_collectives": True, "collective_panels": panels, "skew_svg": heat,
            "collective_rows": _records(c, 500), "collective_best": _records(data.collective_best, 200)}


def _metric_axis(metric: str) -> tuple[float, str, str]:
    """(display scale, axis label, unit after a value) of one metric's per-process values."""
    if metric == "dur_ns":
        return 1e-3, "median dispatch duration per process (µs)", " µs"
    if metric == "cv_robust":
        return 1.0, "robust CV of the dispatch durations per process", ""
    if metric.endswith("_ns") or metric.startswith("category_total_ns"):
        return 1e-3, f"{metric.replace('_ns', '')} per process (µs)", " µs"
    if metric.endswith("_gbps"):
        return 1.0, f"{metric} per process (GB/s)", " GB/s"
    return 1.0, f"{metric} per process", ""


def _empty_side(side: int, frame: pd.DataFrame | None, row: dict[str, Any], name: str) -> str:
    """What an empty side of a before/after panel says: which side is empty, and why."""
    if frame is None:
        return f"the {name} samples did not reach this report"
    if side == 0 and row["verdict"] == NEW:
        return "none: new in the candidate, no baseline process has it"
    if side == 1 and row["verdict"] == MISSING:
        return "none: missing from the candidate, only the baseline has it"
    return "no per-process values for this row"


def _change_text(row: dict[str, Any]) -> str:
    if row["verdict"] == NEW:
        return "new: the baseline side is empty"
    if row["verdict"] == MISSING:
        return "missing: the candidate side is empty"
    text = change_text(row["ratio"], row["ci_low"], row["ci_high"])  # as every headline shows it
    return "" if text == "-" else text


def _before_after_context(data: ReportData, short: dict[str, str]) -> dict[str, Any]:
    """The before/after panels beside the forest plot: one per notable verdict row (worst
    first), the rows beyond them by name."""
    ba = data.before_after
    panels = []
    for p in ba.panels:
        r = p.row
        scale, axis, unit = _metric_axis(r["metric"])
        names = ("baseline", r["label"] if data.multi and r["label"] else "candidate")
        kernel = r["kernel"]
        svg = plots.before_after_panel(
            p.base, p.cand, title=f"before and after: {kernel} ({r['point']}, {r['metric']})", sides=names,
            empty=(_empty_side(0, p.base, r, "baseline"), _empty_side(1, p.cand, r, "candidate")),
            value_label=axis, unit=unit, scale=scale)
        swapped = r["swapped_to"]
        panels.append({**r, "short": short.get(kernel, shorten_kernel(kernel, 60)), "svg": svg,
                       "change": _change_text(r),
                       "swapped_short": short.get(swapped, shorten_kernel(swapped, 60)) if swapped else ""})
    rest = [{**r, "short": short.get(r["kernel"], shorten_kernel(r["kernel"], 60)), "change": _change_text(r)}
            for r in ba.rest]
    return {"panels": panels, "rest": rest, "n_notable": ba.n_notable,
            "n_beyond": ba.n_notable - len(panels) - len(rest), "notes": list(ba.notes),
            "have_samples": ba.have_samples}


#: optional verdict-table columns, shown only when some row has a value
OPTIONAL_VERDICT_COLUMNS = ("test", "point", "reason")
#: rows listed with their reason under the banner (the verdict table has them all)
HEADER_ROWS = 10


def _with_headlines(rows: list[dict]) -> list[dict]:
    """Each verdict row with its headline (``change``, ``reason``: the text every other output
    shows, :func:`~pytest_gemmperf.gate.headline.headline`) and its ``details`` (medians, raw
    ratio and, where that ratio lies outside the tested CI, why)."""
    out = []
    for r in rows:
        h = headline(r)
        out.append({**r, "change": h.change, "reason": h.reason, "details": raw_detail(r)})
    return out


def _header_rows(v: pd.DataFrame | None, short: dict[str, str]) -> tuple[list[dict], int]:
    """The rows listed under the banner: the worst :data:`HEADER_ROWS` that are not unchanged,
    each with its headline, and how many more there are."""
    rows = notable(v)
    listed = _with_headlines(_records(rows, HEADER_ROWS))
    for r in listed:
        r["short"] = short.get(str(r["kernel"]), shorten_kernel(r["kernel"], 60))
    return listed, max(len(rows) - len(listed), 0)


def _blank(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or str(x).strip() in ("", "-", "nan", "None")


def visible_columns(rows: list[dict], columns: tuple[str, ...] = OPTIONAL_VERDICT_COLUMNS) -> set[str]:
    """The columns among ``columns`` that have at least one non-empty (not blank, not ``-``) value."""
    return {c for c in columns if any(not _blank(r.get(c)) for r in rows)}


def render_html(data: ReportData, *, history_href: str | None = None) -> str:

    env = _env()
    tmpl = env.get_template(TEMPLATE)
    v = data.verdicts
    verdict_rows = _with_headlines(_records(v)) if v is not None else []
    kernel_rows = _records(_kernel_overview(data))
    top_rows = _records(data.top_variance, 200)
    overlap_rows = (_records(data.overlap.sort_values("total_overlap_ns", ascending=False), 200)
                    if len(data.overlap) else [])
    cat = data.by_category
    cat_series = (cat.groupby("category")["total_ns"].sum() / 1e6) if len(cat) else pd.Series(dtype=float)
    counters = data.counters if len(data.counters.columns) > 1 else pd.DataFrame()
    counter_cols = [c for c in ("cu_utilization", "active_cus", "waves", "mfma_insts", "valu_insts",
                                "wave_cycles_per_wave", "median_dur_us") if c in counters.columns]
    counter_rows = _records(counters, 500)
    short = report_kernel_labels(data)
    why, why_more = _header_rows(v, short)
    ctx = {
        "why": why,
        "why_more": why_more,
        "version": __version__,
        "generated": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "status": data.status,
        "status_text": STATUS_TEXT[data.status],
        "counts": verdict_counts(v),
        "points": counts_text(data.outcome_counts) if data.outcome_counts else "",
        "labels": data.labels,
        "multi": data.multi,
        "meta_rows": _meta_rows(data),
        "has_verdicts": v is not None,
        "verdicts": verdict_rows,
        "vcols": visible_columns(verdict_rows),
        "short": short,
        "n_verdicts": 0 if v is None else len(v),
        "verdict_names": sorted({r["verdict"] for r in verdict_rows}),
        "max_rows": HTML_MAX_ROWS,
        "forest": plots.forest_plot(v, short=short) if v is not None and len(v) else None,
        "before_after": _before_after_context(data, short),
        "distributions": _distribution_panels(data, short),
        "interaction": plots.interaction_plot(data.interaction),
        "timeline_svg": plots.stacked_timeline(data.timeline_by_point, multi=data.multi),
        "timeline_rows": _records(data.timeline_by_point),
        "overlap_svg": plots.overlap_scatter(data.overlap),
        "overlap_rows": overlap_rows,
        "category_svg": plots.hbar(cat_series, "kernel time by category (ms)", "ms"),
        "counters": counter_rows,
        "counter_cols": counter_cols,
        "top": top_rows,
        "top_k": data.top_k,
        "kernels": kernel_rows,
        "notes": data.notes,
        **_collective_context(data),
        "telemetry": telemetry_context(data.telemetry, data.telemetry_summary, data.telemetry_meta),
    }
    ctx["history_href"] = history_href  # link to history.html (report/history_page.py)
    return tmpl.render(**ctx)


def write_html(data: ReportData, path: Path) -> Path:

    # link the trend page when one was written beside this report
    href = "history.html" if Path(path).with_name("history.html").is_file() else None
    return write_text(path, render_html(data, history_href=href))


__all__ = ["compiled_by", "page_kernel_labels", "prepare_template", "render_html", "report_kernel_labels",
           "visible_columns", "write_html"]
