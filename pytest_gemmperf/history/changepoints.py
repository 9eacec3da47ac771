"""Change points in the run history: level shifts of every (test, point, kernel, metric) series.

Method (``benchmarks/history_detection.py`` measures it against Apache Otava and ruptures):

* **Scale.** A series whose values are all positive is analysed on ``log(value)`` (a slowdown is
  a ratio, and run-to-run noise is multiplicative); one with a zero or negative value on the
  value itself (``note`` says "linear scale").
* **Per run.** The history keeps one value per unit (process) and run. Each run gives the mean
  ``y_r`` of its units, their count ``n_r`` and their within-run sum of squares. Runs are the
  replicate: ``y_r = level_segment + b_r + e_r`` with a between-run effect ``b_r`` (variance
  ``tau2``: drift of the kernel from run to run) and the process noise ``e_r`` (variance
  ``s_w2 / n_r``, ``s_w2`` pooled within runs over the whole series). ``tau2`` is estimated
  robustly from the MAD of consecutive run differences (a step or an odd run does not inflate
  it) minus the within part; each run is weighted by ``1 / (tau2 + s_w2 / n_r)``, so a run with
  fewer processes counts less. The variance scale ``phi`` that the tests use is re-estimated
  from the residuals around the segment means (``t`` with the residual df), floored at what the
  within-run spread alone implies: run means cannot be steadier than their processes say.
* **Segmentation.** Binary segmentation, vectorised over all series and segments at once: in
  each segment the split maximising the two-segment ``t`` statistic (segments of at least
  ``min_segment`` runs: a single odd run is an outlier, not a change), its two-sided p-value
  multiplied by the number of admissible splits (Bonferroni for the maximum over positions),
  kept while below ``split_alpha``; at most ``max_changes`` per series.
* **Significance.** Each candidate is re-tested between its neighbouring candidates with the
  variance pooled over all segments of the series (more df), again Bonferroni-corrected for
  the positions it was chosen among. Benjamini-Hochberg runs across ALL series of a test (one
  hypothesis per series without candidate, one per candidate), so a flat test of 80 kernels x
  several metrics raises any change with probability <= ``fdr``. Candidates whose q-value
  fails are dropped and their neighbours re-tested (Otava's merge step), until all stand.
* **Effect.** ``ratio`` = after / before level (geometric means on the log scale), with a
  ``level`` confidence interval from the run-level ``t`` (df = runs - segments). ``direction``
  is "regression" when the metric got worse: a rise, or a fall for
  higher-is-better metrics (the metric registry, ``gate/metrics.py``).

A slow creep appears as one or more level shifts inside the ramp (a mean-shift segmentation
sees a trend as a change); its first reported change is where the cumulative drift was first
distinguishable from the run noise. Series with fewer than ``min_runs`` runs are not tested
(``changes.attrs["short_series"]`` counts them).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.gate.stats import bh_qvalues, t_pvalue, t_quantile
from pytest_gemmperf.safe_io import write_csv
from pytest_gemmperf.textsafe import printable

CHANGE_COLUMNS = ("test", "point", "kernel", "metric", "run_before", "run_after", "time_after",
                  "commit_after", "ratio", "ci_low", "ci_high", "q_value", "direction")
#: Diagnostics appended after the contract columns.
EXTRA_COLUMNS = ("hw_key", "p_value", "level_before", "level_after", "runs_before", "runs_after",
                 "index_after", "note")
REGRESSION = "regression"
IMPROVEMENT = "improvement"
SERIES_KEY = ("hw_key", "test", "point", "kernel", "metric")
_REQUIRED = ("run_id", "time", "test", "point", "kernel", "metric", "unit", "value")
#: Resolution of the analysed scale: differences below it (1e-9 relative) are rounding.
_EPS = 1e-9


@dataclass(frozen=True)
class ChangeConfig:
    """Tuning of :func:`detect_changes` (keyword arguments of the same names)."""

    fdr: float = 0.01  #: Benjamini-Hochberg level across all series of one test
    min_runs: int = 6  #: shorter series are not tested
    min_segment: int = 2  #: runs on each side of a change
    split_alpha: float = 0.05  #: binary segmentation goes on splitting while p < this
    max_changes: int = 8  #: candidates per series
    level: float = 0.95  #: confidence level of ``ci_low``/``ci_high``
    min_ratio: float = 0.0  #: report only changes with ``|ratio - 1| >= min_ratio``


# ---------------------------------------------------------------------------------------------
# input


def _prepare(history: pd.DataFrame, source: str | os.PathLike | None) -> pd.DataFrame:
    """Validated copy with string keys, float values and UTC times; raises one-line errors."""
    where = source if source is not None else "history"
    missing = [c for c in _REQUIRED if c not in history.columns]
    if missing:
        raise GemmperfInputError(where, f"not a run-history table (lacks {', '.join(missing)})")
    df = pd.DataFrame({c: history[c].astype(str).to_numpy(object)
                       for c in ("run_id", "test", "point", "kernel", "metric", "unit")})
    df["hw_key"] = history["hw_key"].astype(str).to_numpy(object) if "hw_key" in history.columns else ""
    value = pd.to_numeric(history["value"], errors="coerce").to_numpy(float)
    bad = ~np.isfinite(value)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raw = history["value"].iloc[i]
        raise GemmperfInputError(
            where, f"{int(bad.sum())} value(s) are not finite numbers (first: {raw!r} at run "
                   f"{df['run_id'].iat[i]}, test {df['test'].iat[i]}, point {df['point'].iat[i]}, "
                   f"kernel {df['kernel'].iat[i]}, metric {df['metric'].iat[i]}, unit {df['unit'].iat[i]})")
    df["value"] = value
    try:
        with warnings.catch_warnings():  # "could not infer format": element-wise parsing is fine
            warnings.simplefilter("ignore", UserWarning)
            ts = pd.to_datetime(history["time"], utc=True)
    except (ValueError, TypeError) as e:
        raise GemmperfInputError(where, f"column time is not a timestamp ({e})") from None
    if ts.isna().any():
        raise GemmperfInputError(where, f"{int(ts.isna().sum())} row(s) have no time")
    # int64 ns since the epoch (UTC): numpy datetimes carry no time zone
    df["time"] = ts.dt.tz_convert(None).dt.as_unit("ns").to_numpy().view(np.int64)
    df["commit"] = (history["commit"].to_numpy(object) if "commit" in history.columns
                    else np.full(len(df), None, object))
    return df


# ---------------------------------------------------------------------------------------------
# per-series run matrices


@dataclass
class _Series:
    """Series x run-position matrices, left-aligned (run ``j`` of a series at column ``j``)."""

    keys: pd.DataFrame  # one row per series: SERIES_KEY + log_scale
    n_runs: np.ndarray  # runs per series
    y: np.ndarray  # run means (S, L), NaN past n_runs
    w: np.ndarray  # run weights 1 / (tau2 + s_w2 / n_r), 0 past n_runs
    phi_floor: np.ndarray  # (S,) least variance scale the within-run spread implies
    eps2: np.ndarray  # (S,) squared resolution of the analysed scale
    run_ids: np.ndarray  # (S, L) object
    times: np.ndarray  # (S, L) int64 ns since the epoch (UTC)
    commits: np.ndarray  # (S, L) object
    cw: np.ndarray = None  # cumulative sums with a leading 0 column, (S, L + 1)
    cwy: np.ndarray = None
    cwyy: np.ndarray = None


def _series(df: pd.DataFrame) -> _Series:
    """Aggregate units into runs and lay the series out as matrices (vectorised)."""
    # global run order: by time, then run id (runs of one time stamp stay in a stable order)
    runs = df.groupby("run_id", sort=False)["time"].min().reset_index().sort_values(["time", "run_id"])
    run_rank = pd.Series(np.arange(len(runs)), index=runs["run_id"].to_numpy())
    sid = df.groupby(list(SERIES_KEY), sort=True).ngroup().to_numpy()
    keys = df.groupby(list(SERIES_KEY), sort=True).agg(vmin=("value", "min")).reset_index()
    log_scale = keys["vmin"].to_numpy() > 0
    keys = keys.drop(columns="vmin")
    keys["log_scale"] = log_scale
    s_n = len(keys)
    v = df["value"].to_numpy(float)
    y_unit = np.where(log_scale[sid], np.log(np.where(log_scale[sid], v, 1.0)), v)
    rr = run_rank.loc[df["run_id"].to_numpy()].to_numpy()
    # one cell per (series, run)
    cell = sid.astype(np.int64) * len(runs) + rr
    uc, inv = np.unique(cell, return_inverse=True)
    n = np.bincount(inv).astype(float)
    mean = np.bincount(inv, weights=y_unit) / n
    ss = np.bincount(inv, weights=(y_unit - mean[inv]) ** 2)
    c_sid, c_run = np.divmod(uc, len(runs))
    n_runs = np.bincount(c_sid, minlength=s_n)
    # position of each cell within its series (cells are sorted by series, then run rank)
    first = np.concatenate([[0], np.cumsum(n_runs)[:-1]])
    pos = np.arange(len(uc)) - first[c_sid]
    width = max(int(n_runs.max()), 1) if s_n else 1
    y = np.full((s_n, width), np.nan)
    nn = np.zeros((s_n, width))
    y[c_sid, pos] = mean
    nn[c_sid, pos] = n
    # within-run variance pooled over the series' runs
    ss_s = np.bincount(c_sid, weights=ss, minlength=s_n)
    df_s = np.bincount(c_sid, weights=n - 1, minlength=s_n)
    with np.errstate(invalid="ignore", divide="ignore"):
        s_w2 = np.where(df_s > 0, ss_s / df_s, 0.0)
        within = np.where(nn > 0, s_w2[:, None] / np.maximum(nn, 1), np.nan)  # s_w2 / n_r
        # between-run variance from consecutive differences: MAD is blind to a step or an odd run
        dif = np.diff(y, axis=1)
        mad = np.nanmedian(np.abs(dif - np.nanmedian(dif, axis=1, keepdims=True)), axis=1) if width > 1 \
            else np.full(s_n, np.nan)
    v_run = (1.4826 * np.nan_to_num(mad)) ** 2 / 2
    tau2 = np.maximum(v_run - np.nanmean(np.where(nn > 0, within, np.nan), axis=1), 0.0)
    var_r = tau2[:, None] + np.nan_to_num(within)
    scale = np.nanmax(np.abs(np.where(nn > 0, y, np.nan)), axis=1, initial=0.0)
    eps2 = np.where(log_scale, _EPS, _EPS * np.maximum(scale, 1e-300)) ** 2
    const = ~(var_r.max(axis=1, initial=0.0) > 0)
    var_r = np.where(const[:, None], 1.0, np.maximum(var_r, eps2[:, None]))
    w = np.where(nn > 0, 1.0 / var_r, 0.0)
    # phi >= E[within / var_r]: the run means are at least as noisy as their processes
    with np.errstate(invalid="ignore"):
        phi_floor = np.where(const, 0.0, np.nansum(np.where(nn > 0, within * w, np.nan), axis=1)
                             / np.maximum(n_runs, 1))
    run_id = runs["run_id"].to_numpy(object)
    time = runs["time"].to_numpy(np.int64)
    commit = df.groupby("run_id", sort=False)["commit"].first().reindex(runs["run_id"]).to_numpy(object)
    run_ids = np.full((s_n, width), None, object)
    times = np.zeros((s_n, width), np.int64)
    commits = np.full((s_n, width), None, object)
    run_ids[c_sid, pos] = run_id[c_run]
    times[c_sid, pos] = time[c_run]
    commits[c_sid, pos] = commit[c_run]
    out = _Series(keys, n_runs, y, w, phi_floor, eps2, run_ids, times, commits)
    yz = np.nan_to_num(y)
    zero = np.zeros((s_n, 1))
    out.cw = np.hstack([zero, np.cumsum(w, axis=1)])
    out.cwy = np.hstack([zero, np.cumsum(w * yz, axis=1)])
    out.cwyy = np.hstack([zero, np.cumsum(w * yz * yz, axis=1)])
    return out


def _moments(s: _Series, row: np.ndarray, a: np.ndarray, b: np.ndarray):
    """Weight, weighted mean and weighted residual sum of squares of runs ``[a, b)`` of ``row``."""
    W = s.cw[row, b] - s.cw[row, a]
    S = s.cwy[row, b] - s.cwy[row, a]
    Q = s.cwyy[row, b] - s.cwyy[row, a]
    with np.errstate(invalid="ignore", divide="ignore"):
        m = S / W
        rss = np.maximum(Q - S * m, 0.0)
    return W, m, rss


# ---------------------------------------------------------------------------------------------
# segmentation


def _scan(s: _Series, row: np.ndarray, lo: np.ndarray, hi: np.ndarray, cfg: ChangeConfig
          ) -> tuple[np.ndarray, np.ndarray]:
    """Best split of each segment ``[lo, hi)`` and its scan p-value (vectorised over segments).

    The statistic at split ``k`` is the two-segment ``t`` with the residual variance of that
    split (df = runs - 2); the p-value of the maximum is the best split's two-sided p times the
    number of admissible splits (Bonferroni).
    """
    m = cfg.min_segment
    width = s.y.shape[1]
    k = lo[:, None] + np.arange(1, width)[None, :]
    ok = (k - lo[:, None] >= m) & (hi[:, None] - k >= m)
    kc = np.where(ok, k, lo[:, None] + 1)
    r = row[:, None]
    w1, m1, q1 = _moments(s, r, lo[:, None], kc)
    w2, m2, q2 = _moments(s, r, kc, hi[:, None])
    dfree = (hi - lo - 2).astype(float)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        phi = np.maximum((q1 + q2) / dfree, s.phi_floor[row][:, None])
        t = (m2 - m1) / np.sqrt(phi * (1 / w1 + 1 / w2) + s.eps2[row][:, None])
    t = np.where(ok & np.isfinite(t), np.abs(t), -1.0)
    best = np.argmax(t, axis=1)
    tb = t[np.arange(len(row)), best]
    n_ok = ok.sum(axis=1)
    p = np.where(tb >= 0, np.minimum(t_pvalue(np.maximum(tb, 0), np.maximum(dfree[:, 0], 1)) * n_ok, 1.0), np.nan)
    return kc[np.arange(len(row)), best], p


def _candidates(s: _Series, rows: np.ndarray, cfg: ChangeConfig) -> tuple[dict[int, list[int]], np.ndarray]:
    """Binary segmentation of every tested series; returns candidates per row and each row's
    first-round scan p-value (the hypothesis a series without candidates contributes)."""
    cands: dict[int, list[int]] = {}
    first_p = np.full(len(s.n_runs), np.nan)
    row, lo, hi = rows, np.zeros(len(rows), np.int64), s.n_runs[rows].astype(np.int64)
    first = True
    while len(row):
        enough = hi - lo >= 2 * cfg.min_segment
        row, lo, hi = row[enough], lo[enough], hi[enough]
        if not len(row):
            break
        k, p = _scan(s, row, lo, hi, cfg)
        if first:
            first_p[row] = p
            first = False
        split = p < cfg.split_alpha
        nxt = []
        for r, a, b, kk in zip(row[split], lo[split], hi[split], k[split]):
            c = cands.setdefault(int(r), [])
            if len(c) >= cfg.max_changes:
                continue
            c.append(int(kk))
            nxt += [(r, a, kk), (r, kk, b)]
        if not nxt:
            break
        row, lo, hi = (np.array(x, np.int64) for x in zip(*nxt))
    return cands, first_p


def _test_candidates(s: _Series, r: int, cps: list[int], cfg: ChangeConfig) -> dict:
    """Re-test each candidate between its neighbours with the variance pooled over segments."""
    cps = sorted(cps)
    n = int(s.n_runs[r])
    b = np.array([0] + cps + [n])
    rows = np.full(len(b) - 1, r)
    _, _, rss = _moments(s, rows, b[:-1], b[1:])
    dfree = float(n - (len(b) - 1))
    phi = max(rss.sum() / dfree, s.phi_floor[r]) if dfree > 0 else np.inf
    a, c, e = b[:-2], b[1:-1], b[2:]
    rr = np.full(len(c), r)
    w1, m1, _ = _moments(s, rr, a, c)
    w2, m2, _ = _moments(s, rr, c, e)
    se = np.sqrt(phi * (1 / w1 + 1 / w2) + s.eps2[r])
    d = m2 - m1
    n_pos = np.maximum((e - a) - 2 * cfg.min_segment + 1, 1)
    p = np.minimum(t_pvalue(d / se, np.full(len(c), dfree)) * n_pos, 1.0)
    return {"index": c, "start": a, "end": e, "d": d, "se": se, "m1": m1, "m2": m2, "p": p, "df": dfree}


def _significant(s: _Series, cands: dict[int, list[int]], first_p: np.ndarray, rows: np.ndarray,
                 cfg: ChangeConfig) -> list[tuple[int, dict]]:
    """BH across all series of each (hw_key, test) family; drop failing candidates, re-test."""
    family = s.keys.groupby(["hw_key", "test"], sort=False).ngroup().to_numpy()
    live = {r: list(c) for r, c in cands.items()}
    while True:
        tested = {r: _test_candidates(s, r, c, cfg) for r, c in live.items() if c}
        p_all, owner = [], []
        for r in rows:
            if r in tested:
                p_all.append(tested[r]["p"])
                owner += [(int(r), j) for j in range(len(tested[r]["p"]))]
            else:
                p_all.append(np.array([first_p[r]]))
                owner.append((int(r), -1))
        p_all = np.concatenate(p_all) if p_all else np.zeros(0)
        fam = np.array([family[o[0]] for o in owner], np.int64)
        q = np.full(len(p_all), np.nan)
        for f in np.unique(fam):
            sel = fam == f
            q[sel] = bh_qvalues(np.where(np.isfinite(p_all[sel]), p_all[sel], 1.0))
        drop = {}
        for (r, j), qq in zip(owner, q):
            if j >= 0:
                tested[r].setdefault("q", np.full(len(tested[r]["p"]), np.nan))[j] = qq
                if not qq <= cfg.fdr:
                    drop.setdefault(r, []).append(j)
        if not drop:
            return [(r, t) for r, t in tested.items()]
        for r, js in drop.items():
            # drop the weakest failing candidate only: its neighbours' tests change without it
            worst = max(js, key=lambda j: tested[r]["p"][j])
            live[r] = [x for i, x in enumerate(sorted(live[r])) if i != worst]


# ---------------------------------------------------------------------------------------------
# API


def detect_changes(history: pd.DataFrame, *, source: str | os.PathLike | None = None,
                   **tuning) -> pd.DataFrame:
    """Change points of every (test, point, kernel, metric) series of a run history.

    ``history``: the run-history table (``history/store.py`` ``HISTORY_COLUMNS``; needs
    ``run_id, time, test, point, kernel, metric, unit, value``; ``hw_key`` and ``commit`` are
    used when present, and series of different ``hw_key`` are never mixed). ``tuning``: the
    fields of :class:`ChangeConfig`. Returns one row per detected change point with
    :data:`CHANGE_COLUMNS` first and :data:`EXTRA_COLUMNS` after, sorted by test, point, kernel,
    metric, time. ``attrs``: ``series`` (tested), ``short_series`` (too few runs to test).
    Raises :class:`GemmperfInputError` (one line, naming ``source``) for a missing column, a
    non-finite value or a bad time.
    """
    cfg = ChangeConfig(**tuning)
    if cfg.min_segment < 1 or cfg.min_runs < 2 * cfg.min_segment:
        raise ValueError("need min_segment >= 1 and min_runs >= 2 * min_segment")
    df = _prepare(history, source)
    empty = pd.DataFrame({c: pd.Series(dtype=object) for c in CHANGE_COLUMNS + EXTRA_COLUMNS})
    if df.empty:
        empty.attrs.update(series=0, short_series=0)
        return empty
    s = _series(df)
    rows = np.flatnonzero(s.n_runs >= cfg.min_runs)
    cands, first_p = _candidates(s, rows, cfg)
    found = _significant(s, cands, first_p, rows, cfg)
    out = _frame(s, found, cfg) if found else empty
    out.attrs.update(series=int(len(rows)), short_series=int(len(s.n_runs) - len(rows)))
    return out


def _frame(s: _Series, found: list[tuple[int, dict]], cfg: ChangeConfig) -> pd.DataFrame:
    """The changes table from the tested candidates (all of which passed BH)."""
    r = np.concatenate([np.full(len(t["index"]), r) for r, t in found])
    cat = {k: np.concatenate([np.broadcast_to(np.asarray(t[k], float), t["index"].shape) for _, t in found])
           for k in ("index", "start", "end", "d", "se", "m1", "m2", "p", "q", "df")}
    idx = cat["index"].astype(int)
    keys = s.keys.iloc[r].reset_index(drop=True)
    log = keys["log_scale"].to_numpy(bool)
    tq = t_quantile(cfg.level, cat["df"])
    d, se, m1, m2 = cat["d"], cat["se"], cat["m1"], cat["m2"]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        # np.where evaluates both branches: exp of a linear-scale level may overflow, unused
        ratio = np.where(log, np.exp(d), m2 / m1)
        lo = np.where(log, np.exp(d - tq * se), (m1 + d - tq * se) / m1)
        hi = np.where(log, np.exp(d + tq * se), (m1 + d + tq * se) / m1)
        level_before, level_after = np.where(log, np.exp(m1), m1), np.where(log, np.exp(m2), m2)
    bad_base = ~log & ~(m1 > 0)
    ratio, lo, hi = (np.where(bad_base, np.nan, x) for x in (ratio, lo, hi))
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    better_up = M.higher_is_better(keys["metric"])
    worse = np.where(better_up, d < 0, d > 0)
    note = np.where(log, "", "linear scale")
    note = np.where(bad_base, "linear scale; level before <= 0, no ratio", note)
    out = pd.DataFrame({
        "test": keys["test"], "point": keys["point"], "kernel": keys["kernel"], "metric": keys["metric"],
        "run_before": s.run_ids[r, idx - 1], "run_after": s.run_ids[r, idx],
        "time_after": pd.to_datetime(s.times[r, idx], unit="ns", utc=True), "commit_after": s.commits[r, idx],
        "ratio": ratio, "ci_low": lo, "ci_high": hi, "q_value": cat["q"],
        "direction": np.where(worse, REGRESSION, IMPROVEMENT),
        "hw_key": keys["hw_key"], "p_value": cat["p"],
        "level_before": level_before, "level_after": level_after,
        "runs_before": (cat["index"] - cat["start"]).astype(int), "runs_after": (cat["end"] - cat["index"]).astype(int),
        "index_after": idx, "note": note})
    if cfg.min_ratio > 0:
        keep = np.abs(np.log(np.where(ratio > 0, ratio, 1.0))) >= np.log1p(cfg.min_ratio)
        out = out[keep | ~(ratio > 0)]
    return out.sort_values(["test", "point", "kernel", "metric", "time_after"], kind="stable").reset_index(drop=True)


def recent_regressions(changes: pd.DataFrame, history: pd.DataFrame, window: int) -> pd.DataFrame:
    """The regression rows of ``changes`` whose ``run_after`` is among the last ``window`` runs
    of their own series in ``history`` (runs ordered by time, then run id)."""
    if window < 1:
        raise ValueError("window must be >= 1")
    reg = changes[changes["direction"] == REGRESSION]
    if reg.empty or history.empty:
        return reg.iloc[0:0].copy()
    key = ["test", "point", "kernel", "metric"] + (["hw_key"] if "hw_key" in history.columns
                                                   and "hw_key" in changes.columns else [])
    h = history[key + ["run_id", "time"]].astype({c: str for c in key + ["run_id"]})
    h = h.groupby(key + ["run_id"], sort=False, observed=True)["time"].min().reset_index()
    h = h.sort_values(key + ["time", "run_id"], kind="stable")
    h = h[h.groupby(key, sort=False).cumcount(ascending=False) < window]
    recent = h[key + ["run_id"]].rename(columns={"run_id": "run_after"})
    probe = reg[key + ["run_after"]].astype(str)
    hit = probe.merge(recent.assign(_hit=True), how="left", on=key + ["run_after"])["_hit"].fillna(False)
    return reg[hit.to_numpy(bool)].reset_index(drop=True)


def write_changes_csv(changes: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write ``changes.csv`` (contract columns first, extras after; times ISO 8601 UTC) atomically,
    with formula cells neutralised (``safe_io.write_csv``). Returns the path."""
    out = changes.copy()
    if "time_after" in out.columns and len(out):
        out["time_after"] = pd.to_datetime(out["time_after"], utc=True).dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cols = [c for c in CHANGE_COLUMNS + EXTRA_COLUMNS if c in out.columns]
    return write_csv(out[cols + [c for c in out.columns if c not in cols]], path)


def format_changes(rows: pd.DataFrame, max_rows: int = 30) -> str:
    """One line per change point: where, how much (after/before, CI, q), between which runs
    and at which commit."""
    lines = []
    for r in rows.head(max_rows).itertuples(index=False):
        commit = f" commit {str(r.commit_after)[:12]}" if isinstance(r.commit_after, str) and r.commit_after else ""
        kernel = printable(r.kernel)  # trace text: escaped before it is cut to the column
        kernel = kernel if len(kernel) <= 60 else kernel[:57] + "..."
        lines.append(f"  {printable(r.test)}[{printable(r.point)}] {kernel} {printable(r.metric)}: x{_fmt(r.ratio)} "
                     f"[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}] q={_fmt(r.q_value)} "
                     f"between runs {r.run_before} -> {r.run_after}{commit}")
    if len(rows) > max_rows:
        lines.append(f"  ... {len(rows) - max_rows} more")
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return "-"
    return f"{x:.4g}" if x == x and abs(x) != float("inf") else "-"
