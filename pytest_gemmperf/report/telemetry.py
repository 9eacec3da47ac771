"""Telemetry in the reports: read per point, one panel per point (inline SVG), summary rows.

:func:`read_results_telemetry` collects ``<test>/<point>/telemetry.parquet`` and the
per-process summaries of ``point.json["telemetry"]`` of a results directory.
:func:`telemetry_panel` draws one point: GFX clock (per GPU; the host's CPU frequency or busy
fraction when no GPU was sampled), power and the hottest temperature against seconds since
the point started, each process's window as a labelled band (so a slow process can be read
against the clocks it ran at) and throttle intervals shaded red. Every text goes through
``markupsafe.escape`` (``_Svg``), like the other plots.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from markupsafe import Markup, escape

from pytest_gemmperf.paths import contained, contained_glob
from pytest_gemmperf.report.plots import _Svg, _num, _ticks, empty_note

#: points drawn per series (samples are bucketed by time beyond this)
MAX_POINTS = 400
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
#: telemetry devices that are the host (its aggregate and per-core rows), not a GPU
_HOST_DEVICE = re.compile(r"^(host|cpu\d+)$")
SUMMARY_COLUMNS = ("test", "point", "process", "device", "clock_min_mhz", "clock_median_mhz",
                   "clock_max_mhz", "power_median_w", "temp_edge_max_c", "temp_hotspot_max_c",
                   "temp_mem_max_c", "throttle_s", "throttle_reasons_s", "throttle_clock_mhz",
                   "reasons_seen", "cpu_busy_median", "samples")


def read_results_telemetry(root: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, dict]]:
    """(samples with ``test``/``point`` columns, per-process summary rows, per-point metadata
    keyed ``test[point]``) of a pytest results directory; empty when nothing was sampled. The
    reasons' {name: seconds} fields become text, as the verdict notes write them."""
    # lazy: the sampler's module (its device sources, sockets, threads) only where a run sampled
    from pytest_gemmperf.run.telemetry import MIN_THROTTLE_S, read_telemetry, reasons_text

    # summary fields holding {reason: seconds}, shown as text ("power cap 0.4 s"), with the
    # shortest time shown: the judged ones as the verdict notes name them, every reason seen
    reason_columns = {"throttle_reasons_s": MIN_THROTTLE_S, "reasons_seen": 0.0}
    frames, rows, meta = [], [], {}
    for path in contained_glob(Path(root), "*/*/telemetry.parquet"):
        pj = contained(path.parent, "point.json")
        try:
            rec = json.loads(pj.read_text(encoding="utf-8")) if pj.is_file() else {}
        except (OSError, ValueError):
            rec = {}
        test = str(rec.get("test_id") or path.parent.parent.name)
        point = str(rec.get("point") or path.parent.name)
        tele = rec.get("telemetry") if isinstance(rec.get("telemetry"), dict) else {}
        df = read_telemetry(path)
        frames.append(df.assign(test=test, point=point))
        for r in tele.get("summary") or []:
            r = {**r, **{k: reasons_text(r[k], min_s=m) for k, m in reason_columns.items() if k in r}}
            rows.append({"test": test, "point": point, **r})
        meta[f"{test}[{point}]"] = {k: tele.get(k) for k in ("processes", "interval_s", "sources",
                                                            "clock", "notes", "sampler_cpu_fraction")}
    samples = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    summary = pd.DataFrame(rows)
    if len(summary):
        summary = summary.reindex(columns=[c for c in SUMMARY_COLUMNS if c in summary.columns or
                                           c in ("test", "point", "process", "device")])
    return samples, summary, meta


def is_gpu_device(device: pd.Series) -> pd.Series:
    """Which telemetry rows are a GPU's (``gpu0``...), not the host's (``host``, ``cpuN``)."""
    return ~device.astype(str).str.match(_HOST_DEVICE)


def sampled_points(samples: pd.DataFrame, summary: pd.DataFrame) -> int:
    """Points the telemetry sampler ran for: those with samples or summary rows. A point whose
    processes were all shorter than the sampling interval has samples (the sampler reads once
    at start and once at stop) but no per-process summary row, and still counts."""
    keys = [df[["test", "point"]] for df in (samples, summary)
            if df is not None and len(df) and {"test", "point"} <= set(df.columns)]
    return len(pd.concat(keys).drop_duplicates()) if keys else 0


def gpu_seen(samples: pd.DataFrame, summary: pd.DataFrame) -> bool:
    """Did the sampler see a GPU in any point (a sample or summary row of a GPU device)?"""
    return any(bool(is_gpu_device(df["device"]).any()) for df in (samples, summary)
               if df is not None and len(df) and "device" in df.columns)


def _bucket(t: np.ndarray, v: np.ndarray, n: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ``n`` points: the mean of each time bucket (keeps dips of throttling visible
    better than striding)."""
    if len(t) <= n:
        return t, v
    edges = np.linspace(t[0], t[-1], n + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    cnt = np.bincount(idx, minlength=n)
    keep = cnt > 0
    return (np.bincount(idx, t, n)[keep] / cnt[keep], np.bincount(idx, v, n)[keep] / cnt[keep])


def _intervals(t: np.ndarray, on: np.ndarray, step: float) -> list[tuple[float, float]]:
    """[start, end) runs of ``on`` samples (each lasting until the next sample, <= 2 steps)."""
    if not on.any():
        return []
    ends = np.minimum(np.append(t[1:], t[-1] + step), t + 2 * step)
    d = np.diff(np.concatenate([[0], on.astype(int), [0]]))
    starts, stops = np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1
    return [(float(t[a]), float(ends[b])) for a, b in zip(starts, stops)]


def telemetry_panel(samples: pd.DataFrame, processes: dict[str, list[int]] | None, title: str, *,
                    interval_s: float = 0.1, width: int = 900) -> Markup:
    """Three stacked strips (clock, power, temperature) of one point; see the module doc."""
    if samples is None or samples.empty:
        return empty_note(f"{title}: no telemetry samples")
    gpu = samples[is_gpu_device(samples["device"])]
    strips: list[tuple[str, str, pd.DataFrame]] = []
    if len(gpu):
        clk = gpu[gpu["metric"] == "gfx_clock_mhz"]
        strips.append(("GFX/SM clock", "MHz", clk))
        strips.append(("power", "W", gpu[gpu["metric"] == "power_w"]))
        temp = gpu[gpu["metric"].isin(["temp_edge_c", "temp_hotspot_c", "temp_mem_c"])]
        temp = temp.groupby(["device", "time_ns"], as_index=False)["value"].max()
        strips.append(("hottest temperature", "°C", temp))
    else:
        host = samples[samples["device"] == "host"]
        freq = host[host["metric"] == "cpu_freq_mhz"]
        if len(freq):
            strips.append(("CPU frequency", "MHz", freq))
        strips.append(("host CPU busy", "fraction", host[host["metric"] == "cpu_busy_frac"]))
        strips.append(("load per core", "1", host[host["metric"] == "load_per_core"]))
    strips = [s for s in strips if len(s[2])]
    if not strips:
        return empty_note(f"{title}: no clock, power or temperature samples")
    t0 = int(samples["time_ns"].min())
    t_end = (int(samples["time_ns"].max()) - t0) / 1e9
    devices = sorted(samples["device"].astype(str).unique())
    # each line is named in a margin right of the plot, never on top of a line
    right = 12 + 7 * max(len(d) for d in devices)
    left, strip_h, gap, top = 70, 90, 26, 30
    height = top + len(strips) * (strip_h + gap) + 30
    svg = _Svg(width, height, f"telemetry of {title}")
    svg.text(left, 16, f"telemetry: {title}", weight="bold")
    x1 = width - right
    span = max(t_end, 1e-6)

    def X(s: float) -> float:
        return left + s / span * (x1 - left)

    # process windows and throttle intervals span all strips
    y_all0, y_all1 = top, top + len(strips) * (strip_h + gap) - gap
    for i, (run, (a, b)) in enumerate(sorted((processes or {}).items(), key=lambda kv: kv[1][0])):
        xa, xb = X((a - t0) / 1e9), X((b - t0) / 1e9)
        svg.rect(xa, y_all0, xb - xa, y_all1 - y_all0, "#dde6f0" if i % 2 == 0 else "#eef2f7",
                 tip=f"process {run}: {(b - a) / 1e9:.2f} s")
        svg.text((xa + xb) / 2, y_all0 - 3, f"p{run}", anchor="middle")
    th = samples[samples["metric"] == "throttle_active"].sort_values("time_ns")
    for dev, g in th.groupby("device", sort=True):
        t = (g["time_ns"].to_numpy() - t0) / 1e9
        for a, b in _intervals(t, g["value"].to_numpy() > 0, interval_s):
            svg.rect(X(a), y_all0, max(X(b) - X(a), 1.0), y_all1 - y_all0, "#d62728", opacity=0.25,
                     tip=f"{dev} throttled {b - a:.2f} s")
    for k, (name, unit, df) in enumerate(strips):
        y0 = top + k * (strip_h + gap)
        y1 = y0 + strip_h
        lo, hi = float(df["value"].min()), float(df["value"].max())
        if hi - lo < 1e-9:
            lo, hi = lo - 1, hi + 1
        pad = 0.05 * (hi - lo)
        lo, hi = lo - pad, hi + pad

        def Y(v: float, lo=lo, hi=hi, y0=y0, y1=y1) -> float:
            return y1 - (v - lo) / (hi - lo) * (y1 - y0)

        svg.line(left, y1, x1, y1)
        svg.line(left, y0, left, y1)
        for tv in _ticks(lo, hi, 3):
            if lo <= tv <= hi:
                svg.line(left - 4, Y(tv), left, Y(tv))
                svg.text(left - 6, Y(tv) + 4, _num(tv), anchor="end")
        svg.text(left + 4, y0 + 10, f"{name} ({unit})")
        ends: list[tuple[float, str, str]] = []
        for dev, g in df.groupby("device", sort=True):
            g = g.sort_values("time_ns")
            t, v = _bucket((g["time_ns"].to_numpy() - t0) / 1e9, g["value"].to_numpy(float))
            color = COLORS[devices.index(str(dev)) % len(COLORS)] if str(dev) in devices else COLORS[0]
            svg.polyline(((X(a), Y(b)) for a, b in zip(t, v)), color)
            ends.append((Y(float(v[-1])), str(dev), color))
        for y, dev, color in label_rows(ends, y0, y1):
            svg.text(x1 + 4, y + 4, dev, anchor="start", fill=color)
    yb = top + len(strips) * (strip_h + gap) - gap
    for tv in _ticks(0.0, span):
        svg.line(X(tv), yb, X(tv), yb + 4)
        svg.text(X(tv), yb + 15, _num(tv), anchor="middle")
    svg.text((left + x1) / 2, yb + 28, "seconds since the point started (shaded red: throttled)",
             anchor="middle")
    return svg.markup()


def label_rows(ends: list[tuple[float, str, str]], top: float, bottom: float,
               line_h: float = 11.0) -> list[tuple[float, str, str]]:
    """Labels ``(y of the line's last value, text, colour)`` moved apart vertically to at least
    ``line_h`` from each other, as near their lines as that allows, kept within
    ``[top, bottom]`` where they fit."""
    out = sorted(ends)
    ys = [y for y, _, _ in out]
    for i in range(1, len(ys)):
        ys[i] = max(ys[i], ys[i - 1] + line_h)
    shift = ys[-1] - bottom if ys and ys[-1] > bottom else 0.0
    ys = [max(top, y - shift) for y in ys] if shift else ys
    for i in range(1, len(ys)):
        ys[i] = max(ys[i], ys[i - 1] + line_h)
    return [(y, text, colour) for y, (_, text, colour) in zip(ys, out)]


def telemetry_context(samples: pd.DataFrame, summary: pd.DataFrame, meta: dict[str, dict]) -> list[dict[str, Any]]:
    """Template rows: one panel + summary rows + notes per point."""
    if samples is None or samples.empty:
        return []
    out = []
    for (test, point), g in samples.groupby(["test", "point"], sort=True):
        key = f"{test}[{point}]"
        m = meta.get(key) or {}
        rows = summary[(summary["test"] == test) & (summary["point"] == point)] if len(summary) else summary
        if len(rows):
            temps = [c for c in ("temp_edge_max_c", "temp_hotspot_max_c", "temp_mem_max_c") if c in rows]
            rows = rows.assign(temp_max_c=rows[temps].max(axis=1) if temps else np.nan)
        out.append({"key": key, "test": test, "point": point,
                    "svg": telemetry_panel(g, m.get("processes"), f"{test.rsplit('::', 1)[-1]}[{point}]",
                                           interval_s=float(m.get("interval_s") or 0.1)),
                    "rows": rows.replace({np.nan: None}).to_dict("records") if len(rows) else [],
                    "notes": [str(n) for n in (m.get("notes") or [])],
                    "clock": str(m.get("clock") or "")})
    return out


__all__ = ["gpu_seen", "is_gpu_device", "read_results_telemetry", "sampled_points", "telemetry_context", "telemetry_panel", "escape"]
