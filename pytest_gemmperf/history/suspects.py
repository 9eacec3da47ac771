"""The newest run of each history series, flagged at once when it lies far outside the series.

A change point (:mod:`pytest_gemmperf.history.changepoints`) needs runs on both sides of it, so
a run that is three times slower than everything before it is not a change point until more
runs confirm the new level. Waiting says nothing on screen; this module says "suspect" at once,
and how many more runs would make it a change point.

Rule, per (hw_key, test, point, kernel, metric) series:

* **Per run** the median over the run's processes (units) of the value, on the log scale when
  every value of the series is positive (a slowdown is a ratio), else on the value itself.
* **Reference**: the up to :data:`PAST_RUNS` runs before the newest one, since the series'
  latest change point when it has one (a level that already moved and was found is the
  series' level now); at least :data:`MIN_PAST` of them, else the series is not judged
  (said in ``attrs["short_series"]``).
  Their median is the level, ``1.4826 x MAD`` of their run medians the spread ``s``, floored
  at the spread a run median has from the processes alone (median within-run MAD, x 1.2533 /
  sqrt(processes)), so a series whose few runs happen to agree is not judged as noiseless.
* **Suspect** when the newest run is worse than the level (a rise; a fall for higher-is-better
  metrics, ``gate/metrics.py``) by both more than the threshold (the gate's rule: a ratio
  beyond ``1 + threshold``) and more than ``k(m) x s``, where ``k(m)`` is the 99.9 % quantile
  of ``(y - median) / (1.4826 MAD)`` for a new draw ``y`` against ``m`` earlier draws of a
  heavy-tailed distribution (t, 3 df; :data:`CRITICAL`): a prediction bound that accounts for the
  few runs the median and the MAD rest on and for outlying runs (k is 46 with 4 earlier runs, 23
  with 6, 14 with 10, 11 with 20). A flat series is flagged with probability <= 0.1 % under such
  noise before the threshold condition, far less under normal noise;
  ``benchmarks/history_detection.py --suspects`` measures it on flat histories.
* **Confirmation**: the smallest number ``N`` of further runs at the newest run's level (the
  most recent earlier runs' process values, shifted to that level, so they keep the series'
  own noise) with which :func:`~pytest_gemmperf.history.changepoints.detect_changes`, on this
  series alone, reports a regression change point at the newest run; "more than
  :data:`MAX_CONFIRM`" when none up to that does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.history.changepoints import REGRESSION, detect_changes
from pytest_gemmperf.textsafe import printable

SERIES_KEY = ["hw_key", "test", "point", "kernel", "metric"]
#: earlier runs the newest one is judged against (the most recent ones: the current level)
PAST_RUNS = 20
#: fewer earlier runs than this: not judged (with 3, k(3) is in the hundreds: nothing could be)
MIN_PAST = 4
#: further runs tried when counting what would confirm a suspect
MAX_CONFIRM = 10
#: k(m): 99.9 % quantile of (y - median(x)) / (1.4826 MAD(x)), y and x_1..x_m independent draws
#: of a t distribution with 3 degrees of freedom (heavy tails, as run-to-run noise on shared
#: machines has them: under normal noise the same bound is ~3x wider than it needs to be);
#: 300,000 draws per m (numpy default_rng(20261129)), m = earlier runs, made non-increasing in m
CRITICAL = {4: 46.4, 5: 46.4, 6: 22.9, 7: 22.6, 8: 17.4, 9: 15.9, 10: 14.3, 11: 14.1, 12: 13.1,
            13: 13.1, 14: 12.5, 15: 12.5, 16: 11.6, 17: 11.5, 18: 11.1, 19: 11.1, 20: 11.1}
SUSPECT_COLUMNS = ("hw_key", "test", "point", "kernel", "metric", "run_id", "time", "commit", "runs_before",
                   "level_before", "value", "ratio", "spread", "limit_ratio", "threshold", "confirm_runs")


def critical_value(m: int) -> float:
    """k(m) of :data:`CRITICAL` (``m`` earlier runs; above :data:`PAST_RUNS`, k(PAST_RUNS))."""
    if m < MIN_PAST:
        raise ValueError(f"need at least {MIN_PAST} earlier runs, got {m}")
    return CRITICAL[min(m, PAST_RUNS)]


def run_levels(history: pd.DataFrame) -> pd.DataFrame:
    """One row per series and run: ``y`` (median over the run's units, on the series' scale),
    ``n`` units, ``mad`` (their MAD on that scale), ``log_scale``, ``run_pos`` (0 = newest)."""
    h = history[[*SERIES_KEY, "run_id", "time", "unit", "value"]
                 + (["commit"] if "commit" in history.columns else [])].copy()
    for c in (*SERIES_KEY, "run_id"):
        h[c] = h[c].astype(str)
    h["value"] = pd.to_numeric(h["value"], errors="coerce")
    h = h[np.isfinite(h["value"].to_numpy(float))]
    positive = h.groupby(SERIES_KEY, sort=False)["value"].transform("min") > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        h["y"] = np.where(positive, np.log(h["value"].where(positive, 1.0)), h["value"])
    h["log_scale"] = positive
    g = h.groupby([*SERIES_KEY, "run_id"], sort=False, observed=True)
    runs = g.agg(time=("time", "min"), y=("y", "median"), n=("y", "size"), log_scale=("log_scale", "first"))
    if "commit" in h.columns:
        runs["commit"] = g["commit"].first()
    h["dev"] = (h["y"] - g["y"].transform("median")).abs()
    runs["mad"] = h.groupby([*SERIES_KEY, "run_id"], sort=False, observed=True)["dev"].median()
    runs = runs.reset_index().sort_values([*SERIES_KEY, "time", "run_id"], kind="stable")
    runs["run_pos"] = runs.groupby(SERIES_KEY, sort=False).cumcount(ascending=False)
    return runs.reset_index(drop=True)


def newest_run_suspects(history: pd.DataFrame, threshold: float, *, changes: pd.DataFrame | None = None,
                        confirm: bool = True) -> pd.DataFrame:
    """The series whose newest run is a suspected regression (:data:`SUSPECT_COLUMNS`, the
    largest change first). ``threshold``: the gate's relative threshold (0.05 = 5 %).
    ``changes``: the history's change points (``detect_changes``; computed here when None): a
    series that already changed level is judged against the runs since its latest change only.
    ``attrs``: ``series`` (judged), ``short_series`` (fewer than :data:`MIN_PAST` earlier runs)."""
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    empty = pd.DataFrame({c: pd.Series(dtype=object) for c in SUSPECT_COLUMNS})
    if history.empty:
        empty.attrs.update(series=0, short_series=0)
        return empty
    runs = run_levels(history)
    if changes is None:
        changes = detect_changes(history)
    runs["since"] = _runs_since_change(runs, changes)
    newest = runs[runs["run_pos"] == 0].set_index(SERIES_KEY)
    past = runs[(runs["run_pos"] >= 1) & (runs["run_pos"] <= np.minimum(PAST_RUNS, runs["since"]))]
    ref = past.groupby(SERIES_KEY, sort=False).agg(m=("y", "size"), level=("y", "median"), within=("mad", "median"))
    past = past.join(ref["level"], on=SERIES_KEY)
    ref["past_mad"] = (past["y"] - past["level"]).abs().groupby([past[c] for c in SERIES_KEY], sort=False).median()
    ref = ref[ref["m"] >= MIN_PAST]
    j = newest.join(ref, how="inner")
    short = int(len(newest) - len(j))
    if j.empty:
        empty.attrs.update(series=0, short_series=short)
        return empty
    k = np.array([critical_value(int(m)) for m in j["m"]])
    floor = 1.2533 * 1.4826 * j["within"].to_numpy(float) / np.sqrt(np.maximum(j["n"].to_numpy(float), 1))
    s = np.maximum(1.4826 * j["past_mad"].to_numpy(float), floor)
    log = j["log_scale"].to_numpy(bool)
    s = np.maximum(s, np.where(log, 1e-9, 1e-9 * np.abs(j["level"].to_numpy(float))))
    d = j["y"].to_numpy(float) - j["level"].to_numpy(float)
    up_bad = ~np.asarray(M.higher_is_better(pd.Series(j.index.get_level_values("metric"))), bool)
    worse = np.where(up_bad, d, -d)
    level = j["level"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(log, np.exp(d), j["y"].to_numpy(float) / level)
        beyond_threshold = np.where(log, worse > np.log1p(threshold),
                                    (level > 0) & (worse > threshold * np.abs(level)))
        limit = np.where(log, np.exp(np.where(up_bad, k * s, -k * s)), (level + np.where(up_bad, k, -k) * s) / level)
    flag = beyond_threshold & (worse > k * s)
    y = j["y"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # np.where computes both branches
        spread = np.where(log, np.expm1(s), s / np.abs(level))  # relative, as the lines show it
        j = j.assign(ratio=ratio, spread=spread, limit_ratio=limit, threshold=float(threshold),
                     level_before=np.where(log, np.exp(level), level), value=np.where(log, np.exp(y), y),
                     runs_before=j["m"].astype(int), _worse=worse)
    out = j[flag].reset_index().sort_values("_worse", ascending=False, kind="stable")
    if "commit" not in out.columns:
        out["commit"] = None
    out["confirm_runs"] = [confirm_runs(history, r) if confirm else None for r in out.itertuples(index=False)]
    out = out[list(SUSPECT_COLUMNS)].reset_index(drop=True)
    out.attrs.update(series=int(len(j)), short_series=short)
    return out


def _runs_since_change(runs: pd.DataFrame, changes: pd.DataFrame) -> np.ndarray:
    """Per row of ``runs``: the ``run_pos`` of its series' latest change point's first run
    (the earlier runs the newest one is judged against end there); a large number for a
    series without change point."""
    none = np.full(len(runs), np.iinfo(np.int64).max // 2, np.int64)
    if changes is None or changes.empty or "run_after" not in changes.columns:
        return none
    c = changes[[*SERIES_KEY, "run_after"]].astype(str) if "hw_key" in changes.columns else None
    if c is None:
        return none
    pos = runs[[*SERIES_KEY, "run_id", "run_pos"]].merge(c.rename(columns={"run_after": "run_id"}),
                                                         on=[*SERIES_KEY, "run_id"])
    latest = pos.groupby(SERIES_KEY, sort=False)["run_pos"].min()  # the change nearest the newest run
    got = runs.join(latest.rename("_since"), on=SERIES_KEY)["_since"]
    return np.where(got.notna(), got.fillna(0).to_numpy(), none).astype(np.int64)


def confirm_runs(history: pd.DataFrame, suspect, max_runs: int = MAX_CONFIRM) -> int | None:
    """The fewest further runs at the suspect's level with which change-point detection
    reports a regression at its run; None: more than ``max_runs``."""
    mine = history
    for c, v in zip(SERIES_KEY, (suspect.hw_key, suspect.test, suspect.point, suspect.kernel, suspect.metric)):
        mine = mine[mine[c].astype(str) == v]
    mine = mine[["run_id", "time", "hw_key", "test", "point", "kernel", "metric", "unit", "value"]].copy()
    mine["run_id"] = mine["run_id"].astype(str)
    mine["time"] = pd.to_datetime(mine["time"], utc=True)
    order = mine.groupby("run_id")["time"].min().sort_values(kind="stable")
    past_ids = [r for r in order.index if r != suspect.run_id][::-1]  # most recent first
    shift = float(suspect.ratio) if _log_scale(mine) else None
    newest_level = float(suspect.value)
    level = float(suspect.level_before)
    t0 = order.max()
    extra = []
    for i in range(max_runs):
        src = mine[mine["run_id"] == past_ids[i % len(past_ids)]]
        vals = src["value"].to_numpy(float) * shift if shift is not None else src["value"].to_numpy(float) + (
            newest_level - level)
        extra.append(src.assign(run_id=f"(future run {i + 1})", time=t0 + pd.Timedelta(seconds=i + 1), value=vals))
        found = detect_changes(pd.concat([mine, *extra], ignore_index=True))
        hit = found[(found["direction"] == REGRESSION) & (found["run_after"].astype(str) == suspect.run_id)]
        if len(hit):
            return i + 1
    return None


def _log_scale(h: pd.DataFrame) -> bool:
    return bool((pd.to_numeric(h["value"], errors="coerce") > 0).all())


def confirm_text(n: int | None) -> str:
    """"confirm with N more run(s)" as the suspect's lines say it."""
    if n is None:
        return f"more than {MAX_CONFIRM} more runs at this level would be needed to confirm it as a change point"
    return f"{n} more run{'s' if n != 1 else ''} at this level would confirm it as a change point"


def format_suspects(rows: pd.DataFrame, max_rows: int = 30) -> str:
    """One line per suspect: where, how far (x ratio vs the level of the earlier runs, their
    spread, the bound), which run, and how many more runs would confirm it."""
    lines = []
    for r in rows.head(max_rows).itertuples(index=False):
        kernel = printable(r.kernel)
        kernel = kernel if len(kernel) <= 60 else kernel[:57] + "..."
        lines.append(f"  suspect: {printable(r.test)}[{printable(r.point)}] {kernel} {printable(r.metric)}: "
                     f"x{_fmt(r.ratio)} at run {printable(r.run_id)} vs the median of its {r.runs_before} "
                     f"earlier runs (their spread ±{100 * float(r.spread):.3g}%; flagged beyond x{_fmt(r.limit_ratio)} "
                     f"and the {100 * float(r.threshold):g}% threshold): {confirm_text(r.confirm_runs)}")
    if len(rows) > max_rows:
        lines.append(f"  ... {len(rows) - max_rows} more")
    return "\n".join(lines)


def _fmt(v) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return "-"
    return f"{x:.4g}" if np.isfinite(x) else "-"
