"""Inline SVG trend chart of one history series for ``history.html`` (no JS library, no network).

One chart = one (hw_key, test, point, kernel, metric) series. Method: x is the run's position in
the series (runs ordered by time, then run id; equal spacing, as asv plots commits), y the
per-run median over the run's processes (the gate's independent units), the shaded band the
processes' interquartile range and the thin whiskers their min-max. Change points are dashed
vertical lines between the last run before and the first run after the shift, coloured by
direction, labelled with the signed change; the dotted horizontal segments are the level
(median of run medians) between change points. Every run has a transparent hit column whose
``<title>`` is the hover text (run id, time, commit, median, spread, process count); a run
with fewer than three processes is drawn hollow, since its spread says little.

All text from data goes through :func:`pytest_gemmperf.report.plots.escape` (markup escaped,
control and bidi characters shown as escapes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from markupsafe import Markup

from pytest_gemmperf.report.plots import FONT, _num, _ticks, escape

COLOURS = {"regression": "#c00000", "improvement": "#1d7a28"}
LINE = "#2f5597"
BAND = "#9db7e0"


@dataclass
class ChangeMark:
    """One change point drawn on a chart; ``index`` is the series position of ``run_after``."""

    index: int
    direction: str
    label: str
    tip: str


@dataclass
class SeriesChart:
    """Display-scaled numbers of one series (arrays of equal length, one entry per run)."""

    title: str
    unit: str
    median: np.ndarray
    q1: np.ndarray
    q3: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    tips: Sequence[str]
    #: runs with fewer than 3 processes (drawn hollow: no spread to speak of)
    few: np.ndarray
    first_label: str
    last_label: str
    changes: list[ChangeMark] = field(default_factory=list)
    #: (first index, last index, level) of each stretch between change points
    levels: list[tuple[int, int, float]] = field(default_factory=list)


def _f(x: float) -> str:
    return f"{x:.1f}"


def trend_chart(s: SeriesChart, *, width: int = 440, height: int = 200) -> Markup:
    """The SVG of one series (see the module docstring for what each mark means)."""
    left, right, top, bottom = 62, 12, 24, 34
    pw, ph = width - left - right, height - top - bottom
    n = len(s.median)
    finite = np.concatenate([a[np.isfinite(a)] for a in (s.lo, s.hi, s.median)])
    y_lo = float(finite.min()) if finite.size else 0.0
    y_hi = float(finite.max()) if finite.size else 1.0
    pad = (y_hi - y_lo) * 0.06 or abs(y_hi) * 0.02 or 1.0
    y_lo, y_hi = y_lo - pad, y_hi + pad
    step = pw / max(n, 1)
    xs = left + step * (np.arange(n) + 0.5)

    def y(v):
        return top + ph - (np.asarray(v, dtype=float) - y_lo) / (y_hi - y_lo) * ph

    title = escape(s.title)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="trend" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-label="{title}" {FONT} '
             f'data-runs="{n}" data-changes="{len(s.changes)}">', f"<title>{title}</title>"]
    # y axis with ticks and light grid lines
    for t in _ticks(y_lo, y_hi, 4):
        if y_lo <= t <= y_hi:
            yy = float(y(t))
            parts.append(f'<line x1="{left}" y1="{_f(yy)}" x2="{left + pw}" y2="{_f(yy)}" stroke="#eceff4"/>'
                         f'<text x="{left - 4}" y="{_f(yy + 4)}" text-anchor="end">{escape(_num(t))}</text>')
    parts.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#888"/>'
                 f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#888"/>')
    parts.append(f'<text x="12" y="{_f(top + ph / 2)}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {_f(top + ph / 2)})">{escape(s.unit)}</text>')
    parts.append(f'<text x="{left}" y="{height - 6}">{escape(s.first_label)}</text>'
                 f'<text x="{left + pw}" y="{height - 6}" text-anchor="end">{escape(s.last_label)}</text>'
                 f'<text x="{_f(left + pw / 2)}" y="{height - 6}" text-anchor="middle" fill="#666">'
                 f'{n} run{"s" if n != 1 else ""}</text>')
    ok = np.isfinite(s.q1) & np.isfinite(s.q3)
    if ok.sum() >= 2:  # IQR band of the processes (one polygon: q3 forward, q1 back)
        up = " ".join(f"{_f(a)},{_f(b)}" for a, b in zip(xs[ok], y(s.q3[ok])))
        down = " ".join(f"{_f(a)},{_f(b)}" for a, b in zip(xs[ok][::-1], y(s.q1[ok])[::-1]))
        parts.append(f'<polygon class="iqr" points="{up} {down}" fill="{BAND}" fill-opacity="0.45"/>')
    ok = np.isfinite(s.lo) & np.isfinite(s.hi)
    if ok.any():  # min-max whiskers of the processes, one path for all runs
        d = "".join(f"M{_f(a)} {_f(b)}V{_f(c)}" for a, b, c in zip(xs[ok], y(s.lo[ok]), y(s.hi[ok])))
        parts.append(f'<path class="range" d="{d}" stroke="#7f8fa9" stroke-width="1"/>')
    for i0, i1, level in s.levels:
        if math.isfinite(level):
            yy = _f(float(y(level)))
            parts.append(f'<line class="level" x1="{_f(xs[i0] - step / 2)}" y1="{yy}" '
                         f'x2="{_f(xs[i1] + step / 2)}" y2="{yy}" stroke="#555" stroke-dasharray="2 3"/>')
    ok = np.isfinite(s.median)
    pts = " ".join(f"{_f(a)},{_f(b)}" for a, b in zip(xs[ok], y(s.median[ok])))
    parts.append(f'<polyline class="median" points="{pts}" fill="none" stroke="{LINE}" stroke-width="1.6"/>')
    parts.extend(f'<circle cx="{_f(a)}" cy="{_f(b)}" r="2.4" '
                 + (f'fill="#fff" stroke="{LINE}" class="few"/>' if few else f'fill="{LINE}"/>')
                 for a, b, few in zip(xs[ok], y(s.median[ok]), s.few[ok]))
    for c in s.changes:
        colour = COLOURS.get(c.direction, "#555")
        xx = _f(xs[c.index] - step / 2)
        parts.append(f'<g class="cp {escape(c.direction)}" data-index="{c.index}"><title>{escape(c.tip)}</title>'
                     f'<line x1="{xx}" y1="{top - 4}" x2="{xx}" y2="{top + ph}" stroke="{colour}" '
                     f'stroke-width="1.5" stroke-dasharray="4 2"/>'
                     f'<text x="{xx}" y="{top - 7}" text-anchor="middle" fill="{colour}" '
                     f'font-weight="600">{escape(c.label)}</text></g>')
    # hover columns last, so they are on top of everything they describe
    parts.extend(f'<rect class="hit" x="{_f(a - step / 2)}" y="{top}" width="{_f(step)}" height="{ph}" '
                 f'fill="#000" fill-opacity="0"><title>{escape(t)}</title></rect>'
                 for a, t in zip(xs, s.tips))
    parts.append("</svg>")
    return Markup("".join(parts))


__all__ = ["ChangeMark", "SeriesChart", "trend_chart"]
