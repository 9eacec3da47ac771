"""``history.html`` and the xlsx ``history`` sheet: per-run trends with their change points.

Inputs are the history store's table (``history.store.HISTORY_COLUMNS``: one value per run,
test, point, kernel, metric and *process unit*) and the change-point table
(``history.changepoints.CHANGE_COLUMNS``). Method:

* :func:`trend_table` reduces the history to one row per series and run — series = (hw_key,
  test, point, kernel, metric), because numbers from different hardware never share a line —
  with the median over the run's processes, their quartiles, min, max and count. Processes,
  not dispatches, are the independent units, so the spread shown is the spread the gate sees.
* Each change row is attached to the series whose run ``run_after`` belongs to (that fixes its
  hw_key); the series is cut at its change points and each stretch gets a level (median of its
  run medians), drawn as dotted segments and listed as "before -> after" in the table.
* Charts are capped (``max_charts``): series whose latest change is a regression first, then
  those whose latest change is an improvement, each by size of that change, then unchanged
  series by how far their last run sits from their own median. The rest are listed with their
  latest numbers, so nothing disappears silently.

The page is self-contained like report.html: inline CSS, SVG and one small script, a
Content-Security-Policy that forbids every fetch, Jinja2 autoescaping for every value (kernel
names are C++ templates with ``<``, ``>`` and ``&``). Bad input raises
:class:`~pytest_gemmperf.errors.GemmperfInputError` with one line naming what is wrong.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.version import __version__
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.report.history_svg import ChangeMark, SeriesChart, trend_chart
from pytest_gemmperf.analysis.kernel_names import short_names
from pytest_gemmperf.report.html import _env
from pytest_gemmperf.safe_io import write_text
from pytest_gemmperf.report.excel import write_book
from pytest_gemmperf.history.suspects import confirm_text

TEMPLATE = "history.html.j2"
SERIES_KEYS = ["hw_key", "test", "point", "kernel", "metric"]
#: history columns this module reads (the store's HISTORY_COLUMNS minus nothing optional)
NEEDED_HISTORY = ("run_id", "time", "commit", "branch", "hw_key", "test", "point", "kernel",
                  "metric", "unit", "value")
NEEDED_CHANGES = ("test", "point", "kernel", "metric", "run_before", "run_after", "ratio")
OPTIONAL_CHANGES = ("time_after", "commit_after", "ci_low", "ci_high", "q_value", "direction")
DEFAULT_MAX_CHARTS = 60
DEFAULT_MAX_CHANGE_ROWS = 1000
#: a change whose run_after is among the last RECENT_RUNS runs of its series counts as recent
#: (the default window of ``gemmperf history check`` / ``--gemmperf-history-window``)
RECENT_RUNS = 5


# ---------------------------------------------------------------------------------------------
# input checks


def _text(s: pd.Series, missing: Any = "") -> pd.Series:
    """Strings as Python ``str`` (object dtype); nulls become ``missing``."""
    ok = s.notna().to_numpy()
    out = np.full(len(s), missing, dtype=object)
    out[ok] = s[ok].astype(str).to_numpy(object)
    return pd.Series(out, index=s.index, dtype=object)


def _check_history(history: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(history, pd.DataFrame):
        raise GemmperfInputError("history", f"expected a DataFrame, got {type(history).__name__}")
    missing = [c for c in NEEDED_HISTORY if c not in history.columns]
    if missing:
        raise GemmperfInputError("history", f"not a history table (lacks {', '.join(missing)})")
    if len(history) == 0:
        raise GemmperfInputError("history", "the history holds no values: nothing to chart "
                                            "(run the tests with history recording first)")
    h = pd.DataFrame({c: _text(history[c]) for c in ("run_id", "hw_key", "test", "point", "kernel", "metric", "unit")})
    for c in ("commit", "branch"):
        h[c] = _text(history[c], None)
    try:
        h["time"] = pd.to_datetime(history["time"], utc=True, format="ISO8601")
    except (ValueError, TypeError) as exc:
        raise GemmperfInputError("history", f"column 'time' is not a timestamp ({exc})") from None
    if h["time"].isna().any():
        bad = h.loc[h["time"].isna(), "run_id"].iloc[0]
        raise GemmperfInputError("history", f"run {bad} has no time")
    h["value"] = pd.to_numeric(history["value"], errors="coerce").astype(np.float64)
    h = h[np.isfinite(h["value"].to_numpy())]
    if len(h) == 0:
        raise GemmperfInputError("history", "no finite value in column 'value'")
    per_run = h.groupby("run_id", sort=False)[["time", "hw_key"]].nunique()
    bad = per_run[(per_run > 1).any(axis=1)]
    if len(bad):
        raise GemmperfInputError("history", f"run {bad.index[0]} has several times or hardware keys")
    return h.reset_index(drop=True)


def _check_changes(changes: pd.DataFrame | None) -> pd.DataFrame:
    cols = [*NEEDED_CHANGES, *OPTIONAL_CHANGES]
    if changes is not None and not isinstance(changes, pd.DataFrame):
        raise GemmperfInputError("changes", f"expected a DataFrame, got {type(changes).__name__}")
    if changes is None or len(changes) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    missing = [c for c in NEEDED_CHANGES if c not in changes.columns]
    if missing:
        raise GemmperfInputError("changes", f"not a change-point table (lacks {', '.join(missing)})")
    c = pd.DataFrame({k: _text(changes[k]) for k in ("test", "point", "kernel", "metric", "run_before", "run_after")})
    for k in ("ratio", "ci_low", "ci_high", "q_value"):
        c[k] = (pd.to_numeric(changes[k], errors="coerce").astype(np.float64) if k in changes.columns
                else np.nan)
    c["commit_after"] = _text(changes["commit_after"], None) if "commit_after" in changes.columns else None
    c["time_after"] = (pd.to_datetime(changes["time_after"], utc=True, errors="coerce")
                       if "time_after" in changes.columns else pd.NaT)
    ratio = c["ratio"].to_numpy()
    if not (np.isfinite(ratio) & (ratio > 0)).all():
        i = int(np.flatnonzero(~(np.isfinite(ratio) & (ratio > 0)))[0])
        raise GemmperfInputError("changes", f"row {i} ({c['kernel'].iloc[i]}, {c['metric'].iloc[i]}): "
                                            f"ratio {changes['ratio'].iloc[i]} is not a positive number")
    # the change-point engineer orients direction like the gate; recompute only where absent
    worse = np.where(M.higher_is_better(c["metric"]), ratio < 1, ratio > 1)
    derived = np.where(worse, "regression", "improvement")
    given = _text(changes["direction"], None) if "direction" in changes.columns else pd.Series(None, index=c.index)
    c["direction"] = given.where(given.notna(), pd.Series(derived, index=c.index))
    return c.reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# tables


def trend_table(history: pd.DataFrame) -> pd.DataFrame:
    """One row per series and run: ``hw_key, test, point, kernel, metric, run_id, time, commit,
    branch, run_index, n_units, median, q1, q3, min, max`` (raw units of the metric; quartiles
    type 7 over the run's process units), sorted by series then time and run id.
    ``run_index`` is the run's 0-based position in its series."""
    return _trend(_check_history(history))


def _trend(h: pd.DataFrame) -> pd.DataFrame:
    """:func:`trend_table` of an already checked history."""
    keys = [*SERIES_KEYS, "run_id"]
    g = h.groupby(keys, sort=False, observed=True)["value"]
    out = g.agg(n_units="count", median="median", min="min", max="max")
    out["q1"] = g.quantile(0.25)
    out["q3"] = g.quantile(0.75)
    out = out.reset_index()
    runs = h.drop_duplicates("run_id")[["run_id", "time", "commit", "branch"]]
    out = out.merge(runs, on="run_id", how="left", validate="many_to_one")
    out = out.sort_values([*SERIES_KEYS, "time", "run_id"], kind="stable").reset_index(drop=True)
    out["run_index"] = out.groupby(SERIES_KEYS, sort=False).cumcount()
    cols = [*SERIES_KEYS, "run_id", "time", "commit", "branch", "run_index", "n_units",
            "median", "q1", "q3", "min", "max"]
    return out[cols]


def _attach_changes(trend: pd.DataFrame, changes: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Changes with their series (hw_key, index of run_after, runs since, levels before/after)
    and the trend with each run's ``segment`` and segment ``level``."""
    idx = trend[[*SERIES_KEYS, "run_id", "run_index"]].rename(columns={"run_id": "run_after"})
    n_runs = trend.groupby(SERIES_KEYS, sort=False).size().rename("n_runs").reset_index()
    c = changes.merge(idx, on=["test", "point", "kernel", "metric", "run_after"], how="left")
    c = c.merge(n_runs, on=SERIES_KEYS, how="left")
    c["charted_series"] = c["run_index"].notna()
    c["runs_since"] = c["n_runs"] - 1 - c["run_index"]  # 0: the change is the latest run
    # segments: a run starts a new one where a (matched) change point has its run_after
    starts = c.loc[c["charted_series"], [*SERIES_KEYS, "run_after"]].drop_duplicates()
    starts = starts.rename(columns={"run_after": "run_id"}).assign(_cut=1)
    t = trend.merge(starts, on=[*SERIES_KEYS, "run_id"], how="left")
    t["_cut"] = t["_cut"].fillna(0).astype(int)
    t["segment"] = t.groupby(SERIES_KEYS, sort=False)["_cut"].cumsum()
    t["level"] = t.groupby([*SERIES_KEYS, "segment"], sort=False)["median"].transform("median")
    t = t.drop(columns="_cut")
    lv = t.drop_duplicates([*SERIES_KEYS, "segment"])[[*SERIES_KEYS, "segment", "level"]]
    seg_after = t[[*SERIES_KEYS, "run_id", "segment"]].rename(columns={"run_id": "run_after"})
    c = c.merge(seg_after, on=[*SERIES_KEYS, "run_after"], how="left")
    c = c.merge(lv.rename(columns={"level": "level_after"}), on=[*SERIES_KEYS, "segment"], how="left")
    c = c.merge(lv.assign(segment=lv["segment"] + 1).rename(columns={"level": "level_before"}),
                on=[*SERIES_KEYS, "segment"], how="left")
    return c.drop(columns="segment"), t


def _series_order(trend: pd.DataFrame, changes: pd.DataFrame) -> pd.DataFrame:
    """One row per series with its chart priority (see the module docstring), best first."""
    last = trend.groupby(SERIES_KEYS, sort=False).agg(
        n_runs=("run_index", "size"), last_median=("median", "last"), series_median=("median", "median"),
        last_time=("time", "last"), last_run=("run_id", "last"), last_n_units=("n_units", "last")).reset_index()
    m = changes[changes["charted_series"]].sort_values("run_index", kind="stable")
    latest = m.groupby(SERIES_KEYS, sort=False).agg(
        n_changes=("ratio", "size"), latest_ratio=("ratio", "last"), latest_direction=("direction", "last"),
        latest_runs_since=("runs_since", "last")).reset_index()
    s = last.merge(latest, on=SERIES_KEYS, how="left")
    s["n_changes"] = s["n_changes"].fillna(0).astype(int)
    with np.errstate(divide="ignore", invalid="ignore"):
        drift = np.abs(np.log(s["last_median"] / s["series_median"]))
        size = np.abs(np.log(s["latest_ratio"].astype(float)))
    s["group"] = np.select([s["latest_direction"].eq("regression"), s["latest_direction"].eq("improvement")],
                           [0, 1], 2)
    s["score"] = np.where(s["group"] < 2, size, drift)
    s["score"] = s["score"].fillna(0.0)
    s = s.sort_values(["group", "score", *SERIES_KEYS], ascending=[True, False, True, True, True, True, True],
                      kind="stable").reset_index(drop=True)
    s["sid"] = [f"s{i}" for i in range(len(s))]
    return s


def history_sheet_table(history: pd.DataFrame, changes: pd.DataFrame | None = None) -> pd.DataFrame:
    """The numbers of the page as one flat table (the xlsx ``history`` sheet): one row per
    series and run with the process statistics, the level of the run's stretch and, on the
    first run after a change point, that change (``change_*`` columns). Duration metrics are
    in µs (``value_unit``), other metrics in their own unit."""
    ch, t = _attach_changes(trend_table(history), _check_changes(changes))
    m = ch[ch["charted_series"]].rename(columns={"run_after": "run_id"})
    m = m.drop_duplicates([*SERIES_KEYS, "run_id"], keep="last")
    m = m[[*SERIES_KEYS, "run_id", "direction", "ratio", "ci_low", "ci_high", "q_value", "run_before"]]
    m = m.rename(columns={"direction": "change_direction", "ratio": "change_ratio", "ci_low": "change_ci_low",
                          "ci_high": "change_ci_high", "q_value": "change_q_value",
                          "run_before": "change_run_before"})
    out = t.merge(m, on=[*SERIES_KEYS, "run_id"], how="left")
    is_ns = M.is_time(out["metric"])
    scale = np.where(is_ns, 1e-3, 1.0)
    for col in ("median", "q1", "q3", "min", "max", "level"):
        out[col] = out[col].to_numpy(float) * scale
    out.insert(out.columns.get_loc("median"), "value_unit", np.where(is_ns, "µs", out["metric"].map(_native_unit)))
    out["time"] = out["time"].dt.tz_convert("UTC").dt.tz_localize(None)
    return out.drop(columns="segment")


# ---------------------------------------------------------------------------------------------
# display helpers


def _native_unit(metric: str) -> str:
    return M.lookup(str(metric)).unit.name


def _display_scale(metric: str, typical: float) -> tuple[float, str]:
    """Scale and unit label for a series: ns metrics in ns, µs or ms by magnitude, others in
    the registry's unit."""
    if not M.lookup(str(metric)).unit.time:
        return 1.0, _native_unit(metric)
    for scale, unit in ((1e-6, "ms"), (1e-3, "µs")):
        if abs(typical) * scale >= 1:
            return scale, unit
    return 1.0, "ns"


def _fmt(x: float) -> str:
    if not np.isfinite(x):
        return "–"
    a = abs(x)
    return f"{x:,.1f}" if a >= 100 else f"{x:.3f}" if a >= 1 else f"{x:.4g}"


def _pct(r: float) -> str:
    return f"{100 * (r - 1):+.1f}%" if np.isfinite(r) else "–"


def kernel_short_names(names: Sequence[str]) -> dict[str, str]:
    """Short distinguishing display names (:func:`analysis.kernel_names.short_names`: one call
    per page keeps labels consistent and distinct); the full name stays on the page."""
    return {str(k): str(v) for k, v in short_names(list(dict.fromkeys(str(n) for n in names))).items()}


def _tip_time(t: pd.Timestamp) -> str:
    return t.strftime("%Y-%m-%d %H:%M UTC")


# ---------------------------------------------------------------------------------------------
# page


def _chart_for(series: dict, runs: pd.DataFrame, changes: pd.DataFrame, short: str) -> dict:
    """Context (including the SVG) of one charted series; ``runs`` is its trend rows in order."""
    scale, unit = _display_scale(series["metric"], float(np.nanmedian(runs["median"].to_numpy(float))))
    arr = {k: runs[k].to_numpy(float) * scale for k in ("median", "q1", "q3", "min", "max", "level")}
    # the (last) change point starting at each run index, for the hover text
    cuts = {int(i): (d, r) for i, d, r in zip(changes["run_index"], changes["direction"], changes["ratio"])}
    tips = []
    cols = (runs["run_id"].tolist(), runs["time"].tolist(), runs["commit"].tolist(), runs["branch"].tolist(),
            runs["n_units"].tolist())
    for i, (run_id, when, commit, branch, n_units) in enumerate(zip(*cols)):
        commit = f"commit {commit[:12]}" if commit else "commit unknown"
        branch = f" ({branch})" if branch else ""
        procs = f"{n_units} process{'es' if n_units != 1 else ''}"
        tip = (f"run {run_id}\n{_tip_time(when)}\n{commit}{branch}\n"
               f"median {_fmt(arr['median'][i])} {unit} over {procs}\n"
               f"IQR {_fmt(arr['q1'][i])} – {_fmt(arr['q3'][i])}, "
               f"range {_fmt(arr['min'][i])} – {_fmt(arr['max'][i])}")
        if i in cuts:
            tip += f"\nchange point: {cuts[i][0]} {_pct(cuts[i][1])}"
        tips.append(tip)
    marks = []
    for c in (changes.itertuples(index=False) if len(changes) else ()):
        ci = (f" [{_pct(c.ci_low)}, {_pct(c.ci_high)}]" if np.isfinite(c.ci_low) and np.isfinite(c.ci_high) else "")
        q = f", q = {c.q_value:.2g}" if np.isfinite(c.q_value) else ""
        tip = (f"{c.direction}: {_pct(c.ratio)}{ci}{q}\nlevel {_fmt(c.level_before * scale)} -> "
               f"{_fmt(c.level_after * scale)} {unit}\nruns {c.run_before} -> {c.run_after}"
               + (f"\ncommit {c.commit_after}" if c.commit_after else ""))
        marks.append(ChangeMark(int(c.run_index), str(c.direction), _pct(c.ratio), tip))
    seg = runs["segment"].to_numpy()
    bounds = np.flatnonzero(np.diff(seg)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds - 1, [len(seg) - 1]])
    levels = [(int(a), int(b), float(arr["level"][a])) for a, b in zip(starts, ends)] if len(marks) else []
    # within one day the date alone would label both ends the same
    fmt = "%Y-%m-%d" if runs["time"].iloc[-1] - runs["time"].iloc[0] > pd.Timedelta(days=2) else "%m-%d %H:%M"
    chart = SeriesChart(
        title=f"{series['kernel']} · {series['metric']} · {series['point']} · {series['test']}", unit=unit,
        median=arr["median"], q1=arr["q1"], q3=arr["q3"], lo=arr["min"], hi=arr["max"], tips=tips,
        few=runs["n_units"].to_numpy() < 3,
        first_label=runs["time"].iloc[0].strftime(fmt), last_label=runs["time"].iloc[-1].strftime(fmt),
        changes=marks, levels=levels)
    return {**_series_row(series, short, scale, unit), "svg": trend_chart(chart)}


def _series_row(s: dict, short: str, scale: float, unit: str) -> dict:
    d = s["latest_direction"] if isinstance(s["latest_direction"], str) else ""
    return {"sid": s["sid"], "hw_key": s["hw_key"], "test": s["test"], "point": s["point"], "kernel": s["kernel"],
            "short": short, "metric": s["metric"], "unit": unit, "n_runs": int(s["n_runs"]),
            "n_changes": int(s["n_changes"]), "last": _fmt(s["last_median"] * scale),
            "last_v": float(s["last_median"] * scale), "last_n_units": int(s["last_n_units"]),
            "direction": d, "latest": _pct(s["latest_ratio"]) if d else "",
            "latest_v": float(s["latest_ratio"]) if d else None,
            "runs_since": int(s["latest_runs_since"]) if d else None}


def _change_rows(changes: pd.DataFrame, order: pd.DataFrame, shorts: dict[str, str], charted: set[str],
                 limit: int) -> list[dict]:
    """The latest-changes table, default order: regressions first, most recent first."""
    c = changes.merge(order[[*SERIES_KEYS, "sid", "series_median"]], on=SERIES_KEYS, how="left")
    c["age_"] = c["runs_since"].fillna(np.inf)
    c["dir_"] = (c["direction"] != "regression").astype(int)
    c = c.sort_values(["dir_", "age_", "time_after"], ascending=[True, True, False], na_position="last",
                      kind="stable").head(limit)
    rows = []
    for r in c.itertuples(index=False):
        scale, unit = _display_scale(r.metric, float(r.series_median) if pd.notna(r.series_median) else np.nan)
        has_ci = np.isfinite(r.ci_low) and np.isfinite(r.ci_high)
        has_levels = pd.notna(r.level_before) and pd.notna(r.level_after)
        has_time = pd.notna(r.time_after)
        rows.append({
            "direction": r.direction, "test": r.test, "point": r.point, "kernel": r.kernel,
            "short": shorts.get(r.kernel, r.kernel), "metric": r.metric,
            "hw_key": r.hw_key if isinstance(r.hw_key, str) else "",
            "ratio": _pct(r.ratio), "ratio_v": float(r.ratio),
            "ci": f"{_pct(r.ci_low)} … {_pct(r.ci_high)}" if has_ci else "–",
            "q": f"{r.q_value:.2g}" if np.isfinite(r.q_value) else "–",
            "q_v": r.q_value if np.isfinite(r.q_value) else None,
            "levels": (f"{_fmt(r.level_before * scale)} → {_fmt(r.level_after * scale)} {unit}"
                       if has_levels else "–"),
            "run_before": r.run_before, "run_after": r.run_after,
            "time": _tip_time(r.time_after) if has_time else "",
            "time_v": r.time_after.timestamp() if has_time else None,
            "commit": r.commit_after or "", "runs_since": int(r.age_) if np.isfinite(r.age_) else None,
            "anchor": r.sid if isinstance(r.sid, str) and r.sid in charted else None})
    return rows


def render_history_page(history: pd.DataFrame, changes: pd.DataFrame | None, *,
                        title: str = "gemmperf run history", max_charts: int = DEFAULT_MAX_CHARTS,
                        max_change_rows: int = DEFAULT_MAX_CHANGE_ROWS, report_href: str | None = None,
                        recent_window: int = RECENT_RUNS, suspects: pd.DataFrame | None = None) -> str:
    """The HTML text of ``history.html`` (see the module docstring). ``recent_window``: a
    regression whose first run after is among the series' last that many runs is "recent".
    ``suspects``: newest runs flagged by ``history.suspects.newest_run_suspects``, named in the
    banner with how many more runs would confirm each."""
    h = _check_history(history)
    ch, t = _attach_changes(_trend(h), _check_changes(changes))
    order = _series_order(t, ch)
    shorts = kernel_short_names(order["kernel"].tolist())
    charted = order.head(max(0, int(max_charts)))
    t = t.merge(order[[*SERIES_KEYS, "sid"]], on=SERIES_KEYS, how="left")
    by_sid = dict(tuple(t.groupby("sid", sort=False)))
    ch_sid = ch[ch["charted_series"]].merge(order[[*SERIES_KEYS, "sid"]], on=SERIES_KEYS, how="left")
    ch_by = dict(tuple(ch_sid.sort_values("run_index").groupby("sid", sort=False)))
    empty = ch_sid.iloc[0:0]
    charts = [_chart_for(s, by_sid[s["sid"]], ch_by.get(s["sid"], empty), shorts[s["kernel"]])
              for s in charted.to_dict("records")]
    rest = []
    for s in order.iloc[len(charted):].to_dict("records"):
        scale, unit = _display_scale(s["metric"], float(s["series_median"]))
        rest.append(_series_row(s, shorts[s["kernel"]], scale, unit))
    runs = h.drop_duplicates("run_id").sort_values(["time", "run_id"])
    recent = ch[(ch["direction"] == "regression") & (ch["runs_since"] < int(recent_window))]
    ctx = {
        "title": title, "version": __version__,
        "generated": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "report_href": report_href,
        "n_runs": len(runs), "n_series": len(order), "n_charted": len(charts),
        "first_time": _tip_time(runs["time"].iloc[0]), "last_time": _tip_time(runs["time"].iloc[-1]),
        "hw_keys": sorted(h["hw_key"].unique()), "tests": sorted(h["test"].unique()),
        "points": sorted(h["point"].unique()), "metrics": sorted(h["metric"].unique()),
        "n_changes": len(ch), "n_regressions": int((ch["direction"] == "regression").sum()),
        "n_improvements": int((ch["direction"] == "improvement").sum()),
        "n_recent": len(recent), "recent_runs": int(recent_window),
        "n_unmatched": int((~ch["charted_series"]).sum()),
        "charts": charts, "rest": rest,
        "changes": _change_rows(ch, order, shorts, set(charted["sid"]), max_change_rows),
        "max_change_rows": max_change_rows,
        "suspects": _suspect_rows(suspects, shorts),
        "n_suspects": 0 if suspects is None else len(suspects),
    }
    return _env().get_template(TEMPLATE).render(**ctx)


def _suspect_rows(suspects: pd.DataFrame | None, shorts: dict[str, str], limit: int = 20) -> list[dict]:
    """The banner's suspect lines (the largest first, at most ``limit``; the count says the rest)."""
    if suspects is None or suspects.empty:
        return []
    rows = []
    for r in suspects.head(limit).itertuples(index=False):
        rows.append({"where": f"{r.test}[{r.point}]", "kernel": str(r.kernel),
                     "short": shorts.get(str(r.kernel), str(r.kernel)), "metric": str(r.metric),
                     "ratio": f"x{float(r.ratio):.3g}", "run": str(r.run_id), "runs_before": int(r.runs_before),
                     "spread": f"±{100 * float(r.spread):.3g}%", "threshold": f"{100 * float(r.threshold):g}%",
                     "confirm": confirm_text(r.confirm_runs)})
    return rows


def write_history_page(history: pd.DataFrame, changes: pd.DataFrame | None, out: Path, *,
                       title: str = "gemmperf run history", max_charts: int = DEFAULT_MAX_CHARTS,
                       report_href: str | None = None, recent_window: int = RECENT_RUNS,
                       suspects: pd.DataFrame | None = None) -> Path:
    """Write ``history.html`` atomically. ``out`` is the file (``*.html``) or its directory.
    ``report_href`` adds a link back to report.html (pass it only when that file exists)."""
    out = Path(out)
    path = out if out.suffix.lower() in (".html", ".htm") else out / "history.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text(path, render_history_page(history, changes, title=title, max_charts=max_charts,
                                                report_href=report_href, recent_window=recent_window,
                                                suspects=suspects))


# ---------------------------------------------------------------------------------------------
# xlsx


def write_history_sheet(book: Any, history: pd.DataFrame, changes: pd.DataFrame | None) -> None:
    """Add the ``history`` sheet (:func:`history_sheet_table`) and a ``history_changes`` sheet
    to a ``report.excel._Book`` (the workbook wrapper that writes text as text and converts
    units); report.xlsx can call this when it has a history to show."""
    table = history_sheet_table(history, changes)
    book.table("history", table,
               "run history: per series (hw_key, test, point, kernel, metric) and run, statistics over "
               "the run's process units (median, quartiles, min, max; value_unit says µs or the "
               "metric's own unit); level = median of run medians between change points; change_* on "
               "the first run after a change (ratio = after / before level)",
               widths={"kernel": 60, "test": 30, "run_id": 22})
    ch = _check_changes(changes)
    if len(ch):
        c, _ = _attach_changes(trend_table(history), ch)
        c = c.drop(columns=["charted_series"])
        c["time_after"] = c["time_after"].dt.tz_localize(None) if len(c) else c["time_after"]
        book.table("history_changes", c, "change points: ratio = after / before level (level = median of "
                   "run medians, raw metric unit), 95% CI, q value; runs_since = runs of the series after it",
                   widths={"kernel": 60, "test": 30})


def write_history_xlsx(history: pd.DataFrame, changes: pd.DataFrame | None, path: Path, *,
                       max_rows: int = 200_000) -> Path:
    """``history.xlsx`` with the ``history`` and ``history_changes`` sheets, written atomically;
    strings stay strings (formula injection neutralised by report.excel's workbook options)."""
    return write_book(path, max_rows, lambda book: write_history_sheet(book, history, changes))


def write_history_reports(history: pd.DataFrame, changes: pd.DataFrame | None, out_dir: Path, *,
                          title: str = "gemmperf run history", max_charts: int = DEFAULT_MAX_CHARTS,
                          recent_window: int = RECENT_RUNS, suspects: pd.DataFrame | None = None
                          ) -> dict[str, Path]:
    """Write ``history.html`` and ``history.xlsx`` into ``out_dir``; returns name -> path.
    The page links to a ``report.html`` already in ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    href = "report.html" if (out_dir / "report.html").is_file() else None
    return {"history.html": write_history_page(history, changes, out_dir / "history.html", title=title,
                                               max_charts=max_charts, report_href=href,
                                               recent_window=recent_window, suspects=suspects),
            "history.xlsx": write_history_xlsx(history, changes, out_dir / "history.xlsx")}


__all__ = ["history_sheet_table", "kernel_short_names", "render_history_page", "trend_table",
           "write_history_page", "write_history_reports", "write_history_sheet", "write_history_xlsx"]
