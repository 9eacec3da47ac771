"""Inline SVG charts for report.html: no matplotlib, no JavaScript library, no network.

Each function takes a small summary frame (quantiles, medians, ratios — never raw dispatches)
and returns :class:`markupsafe.Markup`. Every piece of text that comes from data (kernel names,
labels, point ids) goes through :func:`escape`, so ``<``, ``>``, ``&`` and quotes in C++
template names render as text, and control or bidi characters show as escapes.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from markupsafe import Markup
from markupsafe import escape as _markup_escape

from pytest_gemmperf.analysis.small_tables import one_row_per_key
from pytest_gemmperf.gate.metrics import DUR_NS
from pytest_gemmperf.gate.verdict import shorten_kernel
from pytest_gemmperf.textsafe import printable_lines

PALETTE = ("#4472c4", "#ed7d31", "#70ad47", "#7f3fbf", "#c00000", "#2f9e9e", "#bf9000", "#7f7f7f")
FONT = 'font-family="system-ui,Segoe UI,Helvetica,Arial,sans-serif" font-size="11"'


def escape(value: object) -> Markup:
    """:func:`markupsafe.escape` after :func:`printable_lines`: a U+202E or ESC in a kernel name
    is shown, not obeyed; newlines stay (harmless in HTML, and the hover texts use them);
    markup already built is kept as it is."""
    if isinstance(value, str) and not isinstance(value, Markup):
        value = printable_lines(value)
    return _markup_escape(value)


def _f(x: float) -> str:
    return f"{x:.1f}"


def _num(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


class _Svg:
    def __init__(self, width: int, height: int, title: str) -> None:
        self.w, self.h = width, height
        self.parts: list[str] = [
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}" {FONT}>',
            f"<title>{escape(title)}</title>"]

    def text(self, x: float, y: float, s: str, *, anchor: str = "start", cls: str = "",
             weight: str = "", rotate: bool = False, tip: str | None = None, fill: str = "",
             prefix: str = "") -> None:
        """Escaped text; ``prefix`` (e.g. sweep and point) goes before ``s``, which is then
        wrapped in ``<tspan class="name">`` so the name itself can be found in the page."""
        extra = f' font-weight="{weight}"' if weight else ""
        extra += f' fill="{fill}"' if fill else ""
        extra += f' transform="rotate(-90 {_f(x)} {_f(y)})"' if rotate else ""
        extra += f' class="{cls}"' if cls else ""
        body = escape(prefix) + Markup('<tspan class="name">') + escape(s) + Markup("</tspan>") if prefix else escape(s)
        inner = body + (Markup(f"<title>{escape(tip)}</title>") if tip else "")
        self.parts.append(f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}"{extra}>{inner}</text>')

    def line(self, x1, y1, x2, y2, stroke="#333", width=1.0, dash: str | None = None) -> None:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" '
                          f'stroke="{stroke}" stroke-width="{width}"{d}/>')

    def rect(self, x, y, w, h, fill, *, stroke: str = "none", tip: str | None = None,
             opacity: float = 1.0) -> None:
        t = f"<title>{escape(tip)}</title>" if tip else ""
        o = f' fill-opacity="{opacity}"' if opacity < 1 else ""
        self.parts.append(f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(max(w, 0))}" height="{_f(max(h, 0))}" '
                          f'fill="{fill}" stroke="{stroke}"{o}>{t}</rect>')

    def circle(self, x, y, r, fill, tip: str | None = None, cls: str = "") -> None:
        t = f"<title>{escape(tip)}</title>" if tip else ""
        c = f' class="{cls}"' if cls else ""
        self.parts.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{r}" fill="{fill}"{c}>{t}</circle>')

    def polyline(self, pts: Iterable[tuple[float, float]], stroke: str) -> None:
        p = " ".join(f"{_f(x)},{_f(y)}" for x, y in pts)
        self.parts.append(f'<polyline points="{p}" fill="none" stroke="{stroke}" stroke-width="2"/>')

    def markup(self) -> Markup:
        return Markup("".join(self.parts) + "</svg>")


def _x_axis(svg: _Svg, x0: float, x1: float, y: float, lo: float, hi: float, label: str,
            log: bool = False) -> None:
    svg.line(x0, y, x1, y)
    if log:
        mult = (1, 2, 5) if hi - lo < 2.5 else (1,)
        ticks = [m * 10 ** e for e in range(math.floor(lo), math.ceil(hi) + 1) for m in mult]
        pos = [math.log10(t) for t in ticks]
    else:
        ticks = _ticks(lo, hi)
        pos = ticks
    for t, p in zip(ticks, pos):
        if hi > lo and lo <= p <= hi:
            x = x0 + (p - lo) / (hi - lo) * (x1 - x0)
            svg.line(x, y, x, y + 4)
            svg.text(x, y + 15, _num(t), anchor="middle")
    svg.text((x0 + x1) / 2, y + 30, label, anchor="middle")


def frame_rows(df: pd.DataFrame) -> list[dict]:
    """``df``'s rows as dicts of the values ``iterrows`` gives per cell (the frame's values, one
    array for all its columns: numbers as Python numbers, text as text), without a Series per row."""
    return [dict(zip(df.columns.tolist(), row)) for row in df.to_numpy().tolist()]


def empty_note(message: str) -> Markup:
    return Markup(f'<p class="empty">{escape(message)}</p>')


# ---------------------------------------------------------------------------------------------


def box_rows_panel(rows: list[dict], group_cols: Sequence[str], title: str, *,
                   width: int = 560, label: str | None = None) -> Markup:
    """Horizontal box plots (whiskers p05-p95, box Q1-Q3, median line, min/max dots) of one
    kernel, one row per group: ``rows`` the boxes as :func:`frame_rows` gives them.

    ``title`` is the full kernel name (the SVG ``<title>`` and the heading's tooltip);
    ``label`` the short distinguishing name shown as the heading (``short_names``), else
    the full name elided in the middle.
    """
    if len(rows) == 0:
        return empty_note("no data")
    left, right, top = 150, 20, 26
    row_h = 22
    height = top + row_h * len(rows) + 44
    lo = float(np.nanmin([r["min_us"] for r in rows]))
    hi = float(np.nanmax([r["max_us"] for r in rows]))
    p_lo = float(np.nanmin([r["p05_us"] for r in rows]))
    p_hi = float(np.nanmax([r["p95_us"] for r in rows]))
    # outliers far out would squash the boxes: scale to the whiskers, clip min/max markers
    span = max(p_hi - p_lo, 1e-9)
    lo_s, hi_s = max(lo, p_lo - 0.15 * span), min(hi, p_hi + 0.15 * span)
    if hi_s <= lo_s:
        lo_s, hi_s = lo_s - 1, hi_s + 1
    svg = _Svg(width, height, title)
    svg.text(8, 15, label or shorten_kernel(title, int(width / 7.4)), weight="600", tip=title,
             cls="kernel-title")
    x0, x1 = left, width - right

    def X(v: float) -> float:
        v = min(max(v, lo_s), hi_s)
        return x0 + (v - lo_s) / (hi_s - lo_s) * (x1 - x0)

    for i, r in enumerate(rows):
        y = top + i * row_h + row_h / 2
        label = " ".join(str(r[c]) if c != "rank" else f"rank {r[c]}" for c in group_cols)
        label = label.replace("threads ", "th").strip()
        colour = PALETTE[i % len(PALETTE)] if len(group_cols) > 1 else PALETTE[0]
        tip = (f"{label}: n={int(r['count'])}, min {_num(r['min_us'])}, p05 {_num(r['p05_us'])}, "
               f"Q1 {_num(r['q1_us'])}, median {_num(r['median_us'])}, Q3 {_num(r['q3_us'])}, "
               f"p95 {_num(r['p95_us'])}, max {_num(r['max_us'])} µs")
        svg.text(left - 6, y + 4, shorten_kernel(label, 24), anchor="end", tip=label)
        svg.line(X(r["p05_us"]), y, X(r["p95_us"]), y, stroke="#555")
        svg.line(X(r["p05_us"]), y - 5, X(r["p05_us"]), y + 5, stroke="#555")
        svg.line(X(r["p95_us"]), y - 5, X(r["p95_us"]), y + 5, stroke="#555")
        svg.rect(X(r["q1_us"]), y - 7, X(r["q3_us"]) - X(r["q1_us"]), 14, colour, stroke="#222",
                 tip=tip, opacity=0.55)
        svg.line(X(r["median_us"]), y - 7, X(r["median_us"]), y + 7, stroke="#000", width=2)
        svg.circle(X(r["min_us"]), y, 2, "#777", tip=f"min {_num(r['min_us'])} µs")
        svg.circle(X(r["max_us"]), y, 2, "#777", tip=f"max {_num(r['max_us'])} µs")
    _x_axis(svg, x0, x1, top + row_h * len(rows) + 4, lo_s, hi_s, "dispatch duration (µs)")
    return svg.markup()


def forest_plot(verdicts: pd.DataFrame, *, max_rows: int = 30, width: int = 900,
                short: dict[str, str] | None = None) -> Markup:
    """The tested change (the gate's ratio, candidate / baseline) with its CI per kernel;
    threshold band around 1.

    Rows are labelled by ``short`` (full kernel name -> page label) when given; the full
    name is in each label's tooltip.
    """
    v = verdicts[(verdicts["metric"] == DUR_NS) & np.isfinite(verdicts["ratio"].astype(float))]
    if len(v) == 0:
        return empty_note("no per-kernel duration comparisons")
    v = v.assign(_d=np.abs(np.log(v["ratio"].astype(float))))
    v = v.sort_values("_d", ascending=False).head(max_rows).reset_index(drop=True)
    left, right, top, row_h = 380, 90, 20, 20
    height = top + row_h * len(v) + 46
    lows = v["ci_low"].astype(float).where(np.isfinite(v["ci_low"].astype(float)), v["ratio"])
    highs = v["ci_high"].astype(float).where(np.isfinite(v["ci_high"].astype(float)), v["ratio"])
    thr = float(np.nanmax(v["threshold"].astype(float))) if v["threshold"].notna().any() else 0.05
    lo = min(float(lows.min()), 1 - thr) * 0.98
    hi = max(float(highs.max()), 1 + thr) * 1.02
    svg = _Svg(width, height, "tested change of each kernel's duration, candidate vs baseline, with its 95% CI")
    x0, x1 = left, width - right

    def X(r: float) -> float:
        return x0 + (min(max(r, lo), hi) - lo) / (hi - lo) * (x1 - x0)

    svg.rect(X(1 - thr), top - 6, X(1 + thr) - X(1 - thr), row_h * len(v) + 6, "#eeeeee",
             tip=f"threshold band ±{100 * thr:g}%")
    svg.line(X(1), top - 6, X(1), top + row_h * len(v), stroke="#888", dash="4 3")
    colours = {"regression": "#c00000", "improvement": "#2e7d32", "inconclusive": "#bf9000",
               "unchanged": "#4472c4"}
    for i, r in v.iterrows():
        y = top + i * row_h + row_h / 2
        name = str(r["kernel"])
        lab = (f"{r['label']} " if "label" in v.columns and verdicts["label"].nunique() > 1 else "")
        lab += f"{r['point']} " if r.get("point") not in (None, "", "-") else ""
        shown = (short or {}).get(name)
        if shown:
            svg.text(left - 8, y + 4, shown, prefix=lab, anchor="end", tip=lab + name, cls="kernel-label")
        else:
            svg.text(left - 8, y + 4, shorten_kernel(lab + name, 58), anchor="end", tip=lab + name)
        c = colours.get(str(r["verdict"]), "#555")
        svg.line(X(lows[i]), y, X(highs[i]), y, stroke=c, width=2)
        svg.circle(X(float(r["ratio"])), y, 4, c,
                   tip=f"{name}: ratio {float(r['ratio']):.4f} [{lows[i]:.4f}, {highs[i]:.4f}], {r['verdict']}")
        svg.text(x1 + 6, y + 4, f"{100 * (float(r['ratio']) - 1):+.1f}%")
    _x_axis(svg, x0, x1, top + row_h * len(v) + 4, lo, hi, "ratio (candidate / baseline)")
    return svg.markup()


def _precise(x: float) -> str:
    """A value in a hover text: enough digits to tell two processes apart."""
    a = abs(x)
    if a >= 100:
        return f"{x:,.1f}"
    if a >= 1:
        return f"{x:.3f}"
    return f"{x:.4g}"


#: baseline, candidate: box and dot colours of the before/after panels
SIDE_COLOURS = ("#4472c4", "#ed7d31")
SIDE_CLASSES = ("dot base", "dot cand")


def before_after_panel(base: pd.DataFrame | None, cand: pd.DataFrame | None, *, title: str,
                       sides: tuple[str, str] = ("baseline", "candidate"),
                       empty: tuple[str, str] = ("no processes", "no processes"),
                       value_label: str = "", unit: str = "", scale: float = 1.0, width: int = 460) -> Markup:
    """One verdict row's per-process values, baseline above candidate on one x axis.

    ``base`` / ``cand``: ``unit``, ``value`` and ``dispatches`` (NaN for unit-level metrics),
    one row per process. Each process is a dot (class ``dot base`` / ``dot cand``; its unit and
    value on hover) over a box spanning the middle half of the processes, with a thick line at
    their median; a dashed line carries the baseline median down to the candidate. A side that
    is ``None`` or empty shows its ``empty`` text instead. ``scale`` multiplies the values for
    display (1e-3: ns to µs); ``value_label`` names the axis, ``unit`` follows each value.
    """
    frames = [base, cand]
    vals = [np.asarray(f["value"], float) * scale if f is not None and len(f) else np.zeros(0) for f in frames]
    finite_vals = np.concatenate([v[np.isfinite(v)] for v in vals])
    left, right, top, row_h = 118, 16, 6, 36
    has_axis = len(finite_vals) > 0
    height = top + 2 * row_h + (40 if has_axis else 8)
    svg = _Svg(width, height, title)
    x0, x1 = left, width - right
    if has_axis:
        lo, hi = float(finite_vals.min()), float(finite_vals.max())
        span = hi - lo
        pad = 0.08 * span if span > 0 else (0.05 * abs(hi) or 1.0)
        lo, hi = lo - pad, hi + pad
    else:
        lo, hi = 0.0, 1.0

    def X(v: float) -> float:
        return x0 + (v - lo) / (hi - lo) * (x1 - x0)

    medians = [float(np.median(v[np.isfinite(v)])) if np.isfinite(v).any() else math.nan for v in vals]
    if math.isfinite(medians[0]) and math.isfinite(medians[1]):
        svg.line(X(medians[0]), top + 4, X(medians[0]), top + 2 * row_h - 4, stroke="#999", dash="3 3")
    for side, (frame, v) in enumerate(zip(frames, vals)):
        y = top + side * row_h + row_h / 2
        ok = np.isfinite(v)
        svg.text(left - 8, y - 1, sides[side], anchor="end", weight="600")
        n = int(ok.sum())
        svg.text(left - 8, y + 12, f"{n} process{'es' if n != 1 else ''}", anchor="end", fill="#666")
        if n == 0:
            svg.text(x0, y + 4, empty[side], fill="#666", cls="empty-side")
            continue
        colour = SIDE_COLOURS[side]
        q1, med, q3 = (float(q) for q in np.percentile(v[ok], [25, 50, 75]))
        svg.rect(X(q1), y - 10, X(q3) - X(q1), 20, colour, stroke=colour, opacity=0.2,
                 tip=f"{sides[side]}: middle half of {n} processes, {_precise(q1)} to {_precise(q3)}{unit}")
        svg.line(X(med), y - 12, X(med), y + 12, stroke="#000", width=2.5)
        names = frame["unit"].astype(str).to_numpy()
        disp = np.asarray(frame["dispatches"], float) if "dispatches" in frame.columns else np.full(len(v), np.nan)
        for i in np.flatnonzero(ok):
            # a fixed spread (golden-ratio steps) so equal values stay countable
            dy = ((i * 0.618034) % 1 - 0.5) * 16
            extra = f", {int(disp[i]):,} dispatches" if math.isfinite(disp[i]) else ""
            svg.circle(X(v[i]), y + dy, 3.2, colour, cls=SIDE_CLASSES[side],
                       tip=f"{sides[side]} process {names[i]}: {_precise(v[i])}{unit}{extra}")
        svg.text(X(med), y - 14, f"median {_num(med)}", anchor="middle", fill="#333")
    if has_axis:
        _x_axis(svg, x0, x1, top + 2 * row_h + 2, lo, hi, value_label)
    return svg.markup()


def stacked_timeline(tp: pd.DataFrame, *, multi: bool, width: int = 900) -> Markup:
    """Per point: computation / exposed communication / exposed memcpy / idle (ms)."""
    if len(tp) == 0:
        return empty_note("no timeline")
    parts = (("computation_time_ms", "computation", "#4472c4"),
             ("exposed_comm_time_ms", "exposed communication", "#ed7d31"),
             ("exposed_memcpy_time_ms", "exposed memcpy", "#a5a5a5"),
             ("idle_time_ms", "idle", "#e4e4e4"))
    rows = tp.reset_index(drop=True)
    left, right, top, row_h = 170, 30, 30, 24
    height = top + row_h * len(rows) + 50
    total = float(rows["total_time_ms"].max()) or 1.0
    svg = _Svg(width, height, "kernel time per point (mean over ranks, ms)")
    x0, x1 = left, width - right
    lx = x0
    for _, name, colour in parts:  # legend
        svg.rect(lx, 8, 10, 10, colour, stroke="#999")
        svg.text(lx + 14, 17, name)
        lx += 30 + 7 * len(name)
    for i, r in enumerate(frame_rows(rows)):
        y = top + i * row_h
        point = r["point"] if isinstance(r["point"], str) else "all"
        label = f"{r['label']}: {point}" if multi else point
        svg.text(left - 6, y + 15, shorten_kernel(label, 26), anchor="end", tip=label)
        x = x0
        for col, name, colour in parts:
            w = float(r[col]) / total * (x1 - x0)
            pct = 100 * float(r[col]) / float(r["total_time_ms"]) if r["total_time_ms"] else 0
            svg.rect(x, y + 3, w, row_h - 6, colour, stroke="#999",
                     tip=f"{label}: {name} {float(r[col]):,.3f} ms ({pct:.1f}%)")
            x += w
    _x_axis(svg, x0, x1, top + row_h * len(rows) + 4, 0, total, "time (ms)")
    return svg.markup()


def _scatter_points(overlap: pd.DataFrame) -> pd.DataFrame:
    """Per (label, kernel): the dispatches, mean overlap fraction and the medians of the
    median duration and slowdown (sorted by the keys, as pandas' grouping sorts them)."""
    values = ("count", "mean_overlap_fraction", "median_dur_us", "interference_slowdown")
    kinds = [overlap[c].dtype.kind if isinstance(overlap[c].dtype, np.dtype) else "" for c in values]
    if kinds == ["i", "f", "f", "f"] and one_row_per_key(overlap, ("label", "kernel")):
        # one row per group: the group's sum, mean and medians are that row's values
        labels, kernels = overlap["label"].tolist(), overlap["kernel"].tolist()
        order = sorted(range(len(labels)), key=lambda i: (labels[i], kernels[i]))
        return pd.DataFrame({"label": [labels[i] for i in order], "kernel": [kernels[i] for i in order],
                             **{name: overlap[c].to_numpy()[order]
                                for name, c in zip(("count", "frac", "dur", "slow"), values)}})
    return overlap.groupby(["label", "kernel"], sort=True).agg(
        count=("count", "sum"), frac=("mean_overlap_fraction", "mean"),
        dur=("median_dur_us", "median"), slow=("interference_slowdown", "median")).reset_index()


def overlap_scatter(overlap: pd.DataFrame, *, width: int = 900, height: int = 340) -> Markup:
    """Per GEMM kernel: mean overlap fraction with collectives vs median duration (log x)."""
    if len(overlap) == 0:
        return empty_note("no GEMM dispatches")
    points = _scatter_points(overlap)
    dur = points["dur"].to_numpy(dtype=np.float64)
    g = [r for r, ok in zip(frame_rows(points), (np.isfinite(dur) & (dur > 0)).tolist()) if ok]
    if len(g) == 0:
        return empty_note("no GEMM durations")
    if len(g) == 1:  # one point is no chart: said in words
        r = g[0]
        frac = float(r["frac"]) if math.isfinite(r["frac"]) else 0.0
        who = f"{r['label']}: " if r["label"] != "run" else ""
        return Markup('<p class="note">') + escape(
            f"One GEMM kernel ({who}{r['kernel']}): median {r['dur']:.3g} µs over {int(r['count'])} dispatch(es), "
            + ("never overlapping a collective." if frac == 0 else
               f"on average {100 * frac:.0f} % of each dispatch overlapping a collective.")) + Markup("</p>")
    left, right, top, bottom = 60, 20, 20, 50
    lo, hi = math.log10(min(r["dur"] for r in g)) - 0.1, math.log10(max(r["dur"] for r in g)) + 0.1
    svg = _Svg(width, height, "GEMM overlap with collectives vs duration")
    x0, x1, y0, y1 = left, width - right, height - bottom, top
    for t in (0, 0.25, 0.5, 0.75, 1.0):
        y = y0 + t * (y1 - y0)
        svg.line(x0, y, x1, y, stroke="#e5e5e5")
        svg.text(x0 - 6, y + 4, f"{t:.2f}", anchor="end")
    svg.text(14, (y0 + y1) / 2, "mean overlap fraction", anchor="middle", rotate=True)
    labels = list(dict.fromkeys(r["label"] for r in g))
    for r in g:
        x = x0 + (math.log10(r["dur"]) - lo) / (hi - lo) * (x1 - x0)
        frac = float(r["frac"]) if math.isfinite(r["frac"]) else 0.0
        y = y0 + frac * (y1 - y0)
        colour = PALETTE[labels.index(r["label"]) % len(PALETTE)]
        slow = f", interference slowdown {r['slow']:.3f}" if math.isfinite(r["slow"]) else ""
        svg.circle(x, y, 4 + min(6, math.log10(max(r["count"], 1))), colour,
                   tip=f"{r['label']}: {r['kernel']} — median {r['dur']:.2f} µs, overlap "
                       f"{frac:.2f}, {int(r['count'])} dispatches{slow}")
    _x_axis(svg, x0, x1, y0, lo, hi, "median GEMM duration (µs, log scale)", log=True)
    if len(labels) > 1:
        for i, lab in enumerate(labels):
            svg.circle(x1 - 140, y1 + 8 + 14 * i, 4, PALETTE[i % len(PALETTE)])
            svg.text(x1 - 130, y1 + 12 + 14 * i, lab)
    return svg.markup()


def interaction_plot(inter: pd.DataFrame, *, width: int = 560, height: int = 300) -> Markup:
    """aorta's thread × channel interaction: x channels, one line per threads value."""
    if len(inter) == 0:
        return empty_note("needs points with both a threads and a channels axis (ids like ch28-th256)")
    left, right, top, bottom = 60, 120, 20, 50
    chans = sorted(inter["channel"].astype(int).unique())
    vmax = float(inter["time_diff_us"].max()) * 1.1 or 1.0
    svg = _Svg(width, height, "thread x channel interaction (mean time_diff_us of top-K rows)")
    x0, x1, y0, y1 = left, width - right, height - bottom, top

    def X(c: int) -> float:
        return x0 + (chans.index(c) + 0.5) / len(chans) * (x1 - x0)

    for t in _ticks(0, vmax):
        y = y0 + t / vmax * (y1 - y0)
        svg.line(x0, y, x1, y, stroke="#e5e5e5")
        svg.text(x0 - 6, y + 4, _num(t), anchor="end")
    svg.line(x0, y0, x1, y0)
    for c in chans:
        svg.text(X(c), y0 + 15, str(c), anchor="middle")
    svg.text((x0 + x1) / 2, y0 + 32, "channels", anchor="middle")
    svg.text(14, (y0 + y1) / 2, "time_diff_us (µs)", anchor="middle", rotate=True)
    series = list(inter.groupby(["label", "threads"], sort=True))
    for i, ((lab, th), grp) in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        grp = grp.sort_values("channel")
        pts = [(X(int(c)), y0 + v / vmax * (y1 - y0)) for c, v in zip(grp["channel"], grp["time_diff_us"])]
        svg.polyline(pts, colour)
        for (x, y), v, c in zip(pts, grp["time_diff_us"], grp["channel"]):
            svg.circle(x, y, 3.5, colour, tip=f"{lab} th{th} ch{c}: {v:.2f} µs")
        name = f"th{th}" if inter["label"].nunique() == 1 else f"{lab} th{th}"
        svg.line(x1 + 10, y1 + 8 + 16 * i, x1 + 26, y1 + 8 + 16 * i, stroke=colour, width=2)
        svg.text(x1 + 30, y1 + 12 + 16 * i, name)
    return svg.markup()


def hbar(values: pd.Series, title: str, unit: str, *, width: int = 560, max_rows: int = 12) -> Markup:
    """Horizontal bars of a labelled series (e.g. time per category)."""
    v = values.sort_values(ascending=False).head(max_rows)
    if len(v) == 0:
        return empty_note("no data")
    left, right, top, row_h = 130, 90, 10, 20
    height = top + row_h * len(v) + 10
    svg = _Svg(width, height, title)
    vmax = float(v.max()) or 1.0
    for i, (k, x) in enumerate(v.items()):
        y = top + i * row_h
        svg.text(left - 6, y + 14, shorten_kernel(str(k), 20), anchor="end", tip=str(k))
        w = float(x) / vmax * (width - left - right)
        svg.rect(left, y + 3, w, row_h - 6, PALETTE[0], tip=f"{k}: {float(x):,.3f} {unit}")
        svg.text(left + w + 4, y + 14, f"{float(x):,.1f} {unit}")
    return svg.markup()


def _bytes(b: float) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if b >= scale:
            return f"{b / scale:g} {unit}"
    return f"{b:g} B"


def bandwidth_panel(rows: pd.DataFrame, title: str, *, width: int = 560, height: int = 300) -> Markup:
    """Bus bandwidth vs message size (log2 x) for one collective, one line per series.

    ``rows``: ``series`` (legend text), ``msg_bytes`` and ``busbw_gbps`` (median per series and
    size bucket), optional ``count``.
    """
    r = rows[np.isfinite(rows["msg_bytes"].astype(float)) & (rows["msg_bytes"].astype(float) > 0)
             & np.isfinite(rows["busbw_gbps"].astype(float))]
    if len(r) == 0:
        return empty_note(f"{title}: no message sizes or bandwidths")
    series = list(dict.fromkeys(r["series"].astype(str)))
    left, top, bottom = 60, 26, 50
    right = 20 + min(200, 7 * max(len(s) for s in series) + 30)
    x = np.log2(r["msg_bytes"].astype(float).to_numpy())
    lo, hi = float(x.min()), float(x.max())
    if hi - lo < 1:
        lo, hi = lo - 0.5, hi + 0.5
    vmax = float(r["busbw_gbps"].max()) * 1.1 or 1.0
    svg = _Svg(width, height, f"{title}: bus bandwidth vs message size")
    svg.text(8, 15, shorten_kernel(f"{title}: bus bandwidth vs message size", int(width / 7.4)),
             weight="600", tip=title)
    x0, x1, y0, y1 = left, width - right, height - bottom, top

    def X(v: float) -> float:
        return x0 + (v - lo) / (hi - lo) * (x1 - x0)

    for t in _ticks(0, vmax):
        y = y0 + t / vmax * (y1 - y0)
        svg.line(x0, y, x1, y, stroke="#e5e5e5")
        svg.text(x0 - 6, y + 4, _num(t), anchor="end")
    svg.line(x0, y0, x1, y0)
    step = max(1, math.ceil((hi - lo) / 8))
    for e in range(math.ceil(lo), math.floor(hi) + 1, step):
        svg.line(X(e), y0, X(e), y0 + 4)
        svg.text(X(e), y0 + 15, _bytes(2.0 ** e), anchor="middle")
    svg.text((x0 + x1) / 2, y0 + 32, "message size (log scale)", anchor="middle")
    svg.text(14, (y0 + y1) / 2, "bus bandwidth (GB/s)", anchor="middle", rotate=True)
    for i, name in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        grp = r[r["series"].astype(str) == name].sort_values("msg_bytes")
        pts = [(X(math.log2(float(b))), y0 + float(v) / vmax * (y1 - y0))
               for b, v in zip(grp["msg_bytes"], grp["busbw_gbps"])]
        if len(pts) > 1:
            svg.polyline(pts, colour)
        counts = grp["count"] if "count" in grp.columns else [None] * len(grp)
        for (px, py), b, v, n in zip(pts, grp["msg_bytes"], grp["busbw_gbps"], counts):
            extra = f", {int(n)} collectives" if n is not None and math.isfinite(float(n)) else ""
            svg.circle(px, py, 3.5, colour, tip=f"{name}: {_bytes(float(b))}: {float(v):.2f} GB/s{extra}")
        svg.line(x1 + 10, y1 + 8 + 16 * i, x1 + 26, y1 + 8 + 16 * i, stroke=colour, width=2)
        svg.text(x1 + 30, y1 + 12 + 16 * i, shorten_kernel(name, 24), tip=name)
    return svg.markup()


def heat_map(cells: pd.DataFrame, title: str, *, value_label: str, col_label: str = "",
             width: int = 900) -> Markup:
    """Rows x columns grid coloured white -> red by ``value`` (e.g. mean wait per rank).

    ``cells``: ``row`` (text), ``col`` (sortable), ``value`` and optional ``tip``.
    """
    c = cells[np.isfinite(cells["value"].astype(float))]
    if len(c) == 0:
        return empty_note(f"{title}: no data")
    rows = list(dict.fromkeys(c["row"].astype(str)))
    cols = sorted(c["col"].unique())
    left, top, right = 170, 46, 110
    cw = max(18.0, min(60.0, (width - left - right) / max(len(cols), 1)))
    ch = 22
    height = max(top + ch * len(rows), top + 3 * 18) + 20
    width = int(left + cw * len(cols) + right)
    vmax = float(c["value"].max()) or 1.0
    svg = _Svg(width, height, title)
    svg.text(8, 15, title, weight="600")
    if col_label:
        svg.text(left - 6, top - 6, col_label, anchor="end")
    for j, col in enumerate(cols):
        svg.text(left + (j + 0.5) * cw, top - 6, str(col), anchor="middle")
    lookup = {(str(a), b): (float(v), t) for a, b, v, t in
              zip(c["row"], c["col"], c["value"], c["tip"] if "tip" in c.columns else [None] * len(c))}
    for i, row in enumerate(rows):
        y = top + i * ch
        svg.text(left - 6, y + 15, shorten_kernel(row, 26), anchor="end", tip=row)
        for j, col in enumerate(cols):
            hit = lookup.get((row, col))
            if hit is None:
                svg.rect(left + j * cw, y, cw, ch, "#f4f4f4", stroke="#fff")
                continue
            v, tip = hit
            a = max(0.0, min(1.0, v / vmax))
            # white -> #c00000
            colour = f"#{255 - int(a * 63):02x}{255 - int(a * 255):02x}{255 - int(a * 255):02x}"
            svg.rect(left + j * cw, y, cw, ch, colour, stroke="#fff",
                     tip=tip or f"{row}, {col}: {_num(v)} {value_label}")
            if cw >= 34:
                svg.text(left + (j + 0.5) * cw, y + 15, _num(v), anchor="middle",
                         fill="#fff" if a > 0.6 else "")
    lx = left + cw * len(cols) + 12
    for k, a in enumerate((0.0, 0.5, 1.0)):
        colour = f"#{255 - int(a * 63):02x}{255 - int(a * 255):02x}{255 - int(a * 255):02x}"
        svg.rect(lx, top + 18 * k, 12, 12, colour, stroke="#999")
        svg.text(lx + 16, top + 10 + 18 * k, f"{_num(a * vmax)} {value_label}")
    return svg.markup()


__all__ = ["bandwidth_panel", "before_after_panel", "box_rows_panel", "empty_note", "forest_plot", "hbar", "heat_map",
           "interaction_plot", "overlap_scatter", "stacked_timeline"]
