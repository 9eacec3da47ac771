"""Per-kernel duration statistics of the gate (the ``dur_ns`` rows of a samples table).

``gate/compare.py`` keeps the public API (``compare``, ``compare_stats``, ``assign_verdicts``,
``GateConfig``) and the unit-level metrics; this module turns each kernel's dispatches into one
test of its change. The independent unit is one process: per (kernel, process) the median log
duration; a per-process factor shared by all kernels is estimated within each side and removed;
each kernel's between-process variance is moderated towards a cross-kernel empirical-Bayes prior
stratified by what predicts a kernel's noise (floored by the median's own sampling variance,
pooled with the baseline's variance history);
the test is a moderated t with a t interval on the log scale. Why each step is as it is, and
what it was measured against, is in ``docs/statistics.md`` ("The method in detail").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from pytest_gemmperf.traces.categories import category_of, compile_rules
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.gate_config import GateConfig
from pytest_gemmperf.gate.arrays import _as_category, _codes, _nanmean_rows, _nanmedian_rows  # noqa: F401 - re-exported
from pytest_gemmperf.gate.noise_floors import _central_quantile_var, _resolution_var, _sampling_floor
from pytest_gemmperf.gate import stats
from pytest_gemmperf.gate.metrics import (CATEGORY_TOTAL_NS, CONTROL_NS, CV_ROBUST, DISPATCH_COUNT, DUR_NS,
                                         category_totals_of)
from pytest_gemmperf.gate.verdict import MISSING, NEW


SAMPLE_COLUMNS = ("point", "kernel", "metric", "unit", "value")
DUR = DUR_NS
CV = CV_ROBUST
#: optional rows (one per point, kernel, unit): the number of ``dur_ns`` dispatches before a
#: samples table was compacted to quantiles. Used for the variance prior's trend, never gated.
COUNT = DISPATCH_COUNT
SHARED = "*"
_MAD_TO_SD = 1.4826
#: a kernel whose variance now is this improbable under its history's F distribution ignores it
HISTORY_OUTLIER_P = 1e-3
#: log-scale variance parts of a tested row's interval, for gate/power.py to redo it at another
#: process count; internal to the statistics, so never in the verdicts a user reads
VARIANCE_PARTS = ("own_var", "prior_var", "floor_var", "resolution_var")
#: the controls are not used where their own shift between the sides is this improbable under
#: "they did not change" (a t-test on their within-side spread): the code change moved them,
#: and a kernel's change measured against them would carry theirs. The check costs no
#: calibration: either way the '*' row is tested as it is, and the kernels' totals either on
#: their own (controls used; ANCOVA is exact given the controls) or only after the '*' row
#: (not used). Under no change it drops the controls in 5 % of tests, which then have the
#: gated-kernel test's power (docs/statistics.md, "Within-process controls")
CONTROLS_MOVED_P = 0.05

# ---------------------------------------------------------------------------------------------
# input checks


def check_samples(df: pd.DataFrame, what: str = "samples") -> pd.DataFrame:
    missing = [c for c in SAMPLE_COLUMNS if c not in df.columns]
    if missing:
        raise GemmperfInputError(what, f"samples table lacks column(s) {', '.join(missing)}")
    # categoricals: a samples table has ~10^5-10^6 rows but only ~10^2 distinct names
    out = pd.DataFrame({c: _as_category(df[c]) for c in ("point", "kernel", "metric", "unit")})
    out["value"] = pd.to_numeric(df["value"], errors="coerce").to_numpy(float)
    if out["value"].isna().any():
        i = int(np.flatnonzero(out["value"].isna().to_numpy())[0])
        raise GemmperfInputError(what, "non-numeric or missing sample value", record=f"row {i + 1}")
    return out


# ---------------------------------------------------------------------------------------------
# per-point duration statistics


def _matrix(d: pd.DataFrame, kernels: pd.Index, counts: pd.DataFrame | None = None
            ) -> tuple[np.ndarray, ...]:
    """Per (kernel, unit): median and MAD of log values, counts; raw logs, group ids; the
    order-statistic SE of the median for the stored values and for the true dispatch count
    (``counts`` rows of a compacted table, else the stored count)."""
    units = pd.Index([str(x) for x in pd.unique(d["unit"])])
    k = _codes(d["kernel"], kernels)
    u = _codes(d["unit"], units)
    n_k, n_u = len(kernels), len(units)
    logv = np.log(d["value"].to_numpy(float))
    gid = k * n_u + u
    med, mad, cnt, se = stats.group_median_mad(logv, gid, n_k * n_u, with_se=True)
    n_true = cnt.astype(float)
    if counts is not None and len(counts):
        ck, cu = _codes(counts["kernel"], kernels), _codes(counts["unit"], units)
        hit = (ck >= 0) & (cu >= 0)
        n_true[ck[hit] * n_u + cu[hit]] = np.fmax(n_true[ck[hit] * n_u + cu[hit]],
                                                  counts["value"].to_numpy(float)[hit])
    se_true = stats.group_median_se(logv, gid, n_k * n_u, n_true)
    shape = (n_k, n_u)
    med = med.reshape(shape)
    return (med, mad.reshape(shape), cnt.reshape(shape), logv, gid, se.reshape(shape),
            se_true.reshape(shape))


def _pooled_var(zb: np.ndarray, zc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    nb = np.isfinite(zb).sum(1)
    nc = np.isfinite(zc).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mb = np.nanmean(np.where(nb[:, None] > 0, zb, 0.0), axis=1) if zb.size else np.zeros(len(zb))
        mc = np.nanmean(np.where(nc[:, None] > 0, zc, 0.0), axis=1) if zc.size else np.zeros(len(zc))
        ss = np.nansum((zb - mb[:, None]) ** 2, 1) + np.nansum((zc - mc[:, None]) ** 2, 1)
        df = (nb + nc - 2).astype(float)
        s2 = np.where(df > 0, ss / np.maximum(df, 1), np.nan)
    mb = np.where(nb > 0, mb, np.nan)
    mc = np.where(nc > 0, mc, np.nan)
    return mc - mb, s2, df, np.stack([nb, nc])


def _moderated(diff, s2, df, nb, nc, covariate, moderate: bool, level: float, floor=None,
               prior: str = "robust", max_d0: float | None = None, prior_out: dict | None = None):
    """Moderated t per kernel; returns (se, total df, p, prior df summary, moderated variance).

    ``max_d0``: an upper bound on the robust prior's df (``GateConfig.prior_df_cap``);
    ``prior_out``: receives the prior's location per kernel (``s0_2``)."""
    if not moderate:
        d0, d0_k, s0_2 = 0.0, np.zeros(len(s2)), np.full(len(s2), np.nan)
    else:
        d0, d0_k, s0_2 = _variance_prior(s2, df, covariate, prior, max_d0)
    if prior_out is not None:
        prior_out["s0_2"] = np.broadcast_to(np.asarray(s0_2, float), np.shape(s2))
    s2m = stats.moderate_variance(s2, df, d0_k, s0_2)
    if floor is not None:
        s2m = np.where(np.isfinite(floor), np.fmax(s2m, floor), s2m)
    df_tot = np.where(np.isfinite(d0_k), df + d0_k, np.inf)
    if d0 > 0:  # limma caps the total df at the pooled residual df
        df_tot = np.minimum(df_tot, np.nansum(np.where(df > 0, df, 0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(s2m * (1.0 / nb + 1.0 / nc))
        t = diff / se
    p = stats.t_pvalue(t, df_tot)
    return se, df_tot, p, d0, s2m


def _variance_prior(s2: np.ndarray, df: np.ndarray, covariate, prior: str = "robust",
                    max_d0: float | None = None) -> tuple[float, np.ndarray, np.ndarray]:
    """The empirical-Bayes prior of the kernels' variances: ``(d0, d0 per kernel, s0^2 per
    kernel)``. ``covariate``: the trend's design (:func:`_prior_covariate`; a list: one trend
    per design, the smaller location wins); ``max_d0`` bounds the robust prior's df."""
    if prior == "robust" and isinstance(covariate, list):
        # "capped": the smaller of the trends' locations, its df matched to that location
        s0_2 = np.fmin.reduce([stats.fit_f_dist_robust(s2, df, c)[1] for c in covariate])
        d0 = _capped(stats.prior_df_at_location(s2, df, s0_2), max_d0)
        return d0, stats.robust_prior_df(s2, df, d0, s0_2), s0_2
    if prior == "robust":
        d0, s0_2 = stats.fit_f_dist_robust(s2, df, covariate)
        d0 = _capped(d0, max_d0)
        return d0, stats.robust_prior_df(s2, df, d0, s0_2), s0_2
    if isinstance(covariate, list):
        covariate = covariate[0]
    cov1 = None if covariate is None else np.asarray(covariate, float).reshape(len(s2), -1)[:, 0]
    d0, s0_2 = stats.fit_f_dist(s2, df, cov1)
    return d0, np.full(len(s2), d0), np.broadcast_to(np.asarray(s0_2, float), np.shape(s2))


def _capped(d0: float, max_d0: float | None) -> float:
    return d0 if max_d0 is None or not np.isfinite(max_d0) else float(min(d0, max_d0))


def _shared_offsets(y: np.ndarray, cnt: np.ndarray, cfg: GateConfig, n_first: int | None = None
                    ) -> tuple[np.ndarray, int]:
    """Per-unit log offset (the shared per-process factor) and the number of kernels behind it
    (:func:`_shared_kernels` says which).

    ``y`` holds the per (kernel, unit) log medians (NaN where absent), ``cnt`` the dispatch
    counts. With ``n_first`` the first ``n_first`` columns are one side (baseline) and the rest
    the other: the offsets are then estimated and centred *within* each side (median over
    kernels of a unit's deviation from the kernel's median over that side's units, minus the
    side's mean offset). They absorb process-to-process noise only; a movement shared by every
    kernel between the sides stays in each kernel's difference (section 2 of the module
    docstring). Without ``n_first`` all columns are one group (one run,
    :func:`variance_contribution`). Zero offsets when fewer than ``min_kernels_for_shared``
    kernels are seen in every unit (or ``shared_factor`` is off)."""
    offsets = np.zeros(y.shape[1])
    eligible = _shared_kernels(y, cnt, cfg)
    if not eligible.any():
        return offsets, 0
    ye = y[eligible]
    groups = [slice(0, y.shape[1])] if n_first is None else [slice(0, n_first), slice(n_first, y.shape[1])]
    for g in groups:
        part = ye[:, g]
        if part.shape[1] < 2:
            continue  # one process: nothing to separate from the side's own level
        # centre each kernel on its side's mean (complete kernels only): with 3 units a median
        # centre puts one residual of every kernel at exactly 0 and the offsets collapse
        off = np.median(part - part.mean(axis=1, keepdims=True), axis=0)
        offsets[g] = off - off.mean()
    return offsets, int(eligible.sum())


def _shared_kernels(y: np.ndarray, cnt: np.ndarray, cfg: GateConfig) -> np.ndarray:
    """Kernels the shared factor is estimated from: seen in every unit, with >= 5 dispatches
    per unit when at least ``min_kernels_for_shared`` such kernels exist; none when fewer than
    that many kernels are complete or ``shared_factor`` is off."""
    if not y.shape[1] or not cfg.shared_factor:
        return np.zeros(len(y), bool)
    complete = np.isfinite(y).all(axis=1)
    eligible = complete & (cnt.min(axis=1, initial=0) >= 5)
    if eligible.sum() < cfg.min_kernels_for_shared:
        eligible = complete
    return eligible if eligible.sum() >= cfg.min_kernels_for_shared else np.zeros(len(y), bool)


def _with_history(s2: np.ndarray, df: np.ndarray, kernels: pd.Index, history: pd.DataFrame | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pool each kernel's between-process variance with what earlier runs measured.

    ``history`` holds (kernel, df, ss) rows of :func:`variance_contribution` for this point,
    summed over the runs kept in the baseline. The pooled estimate is
    ``(ss_hist + df s^2) / (df_hist + df)`` on ``df_hist + df`` degrees of freedom. A kernel
    whose variance in this comparison is far above its history (upper tail of
    ``F(df, df_hist)`` below ``HISTORY_OUTLIER_P``) keeps its own estimate: its noise changed,
    and an old, smaller variance would turn that change into false alarms. Returns
    ``(s2, df, df_hist used)``."""
    hist_df = np.zeros(len(s2))
    if history is None or not len(history):
        return s2, df, hist_df
    h = history.groupby(history["kernel"].astype(str), observed=True)[["df", "ss"]].sum()
    h = h.reindex(kernels)
    dh = np.nan_to_num(h["df"].to_numpy(float))
    ssh = np.nan_to_num(h["ss"].to_numpy(float))
    df = np.asarray(df, float)
    ok = (dh > 0) & (ssh > 0) & np.isfinite(s2) & (df > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        s2h = np.where(ok, ssh / np.where(dh > 0, dh, 1), np.nan)
        p_up = np.where(ok, sps.f.sf(s2 / s2h, np.where(ok, df, 1), np.where(ok, dh, 1)), 0.0)
    use = ok & (p_up >= HISTORY_OUTLIER_P)
    pooled = np.where(use, (ssh + np.where(use, s2 * df, 0.0)) / np.where(use, dh + df, 1), s2)
    return pooled, np.where(use, df + dh, df), np.where(use, dh, 0.0)


def variance_contribution(samples: pd.DataFrame, config: GateConfig | None = None) -> pd.DataFrame:
    """What one run's processes say about each kernel's between-process variance.

    Per (point, kernel) of the ``dur_ns`` rows: the sum of squared deviations of the per-process
    log medians from their mean, after removing the shared per-process factor (as the gate
    does), and its degrees of freedom (processes - 1). Within one run a regression moves every
    process alike, so this is valid whatever the run is later judged to be. The baseline store
    keeps these for earlier runs (:mod:`pytest_gemmperf.store.baselines`) and
    :func:`compare_stats` pools them with the comparison's own variance. Columns
    ``point, kernel, metric, df, ss``; kernels seen in fewer than two processes are left out."""
    cfg = config or GateConfig()
    s = check_samples(samples)
    s = s[(s["metric"] == DUR) & (s["value"] > 0)]
    frames = []
    for point, g in s.groupby("point", sort=True, observed=True):
        kernels = pd.Index(sorted({str(x) for x in pd.unique(g["kernel"])}))
        y, _, cnt, *_ = _matrix(g, kernels)
        y = np.where(cnt > 0, y, np.nan)
        offsets, n_shared = _shared_offsets(y, cnt, cfg)
        z = y - offsets[None, :]
        n = np.isfinite(z).sum(axis=1)
        with np.errstate(invalid="ignore"):
            mean = np.nansum(z, axis=1) / np.maximum(n, 1)
        ss = np.nansum((z - mean[:, None]) ** 2, axis=1)
        keep = n >= 2
        if n_shared and len(offsets) >= 2:
            # the shared factor's own spread (kernel '*', first: it sorts first in the store):
            # the offsets are centred, so their sum of squares is the run's, on processes - 1
            # df; it gives the '*' row its history
            frames.append(pd.DataFrame({"point": [str(point)], "kernel": [SHARED], "metric": [DUR],
                                        "df": [float(len(offsets) - 1)], "ss": [float((offsets ** 2).sum())]}))
        frames.append(pd.DataFrame({"point": str(point), "kernel": kernels[keep], "metric": DUR,
                                    "df": (n[keep] - 1).astype(float), "ss": ss[keep]}))
    cols = ["point", "kernel", "metric", "df", "ss"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def _duration_rows(point: str, b: pd.DataFrame, c: pd.DataFrame, cfg: GateConfig,
                   side_counts: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                   history: pd.DataFrame | None = None,
                   controls: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> list[dict]:
    kernels = pd.Index(sorted({str(x) for x in pd.unique(b["kernel"])} | {str(x) for x in pd.unique(c["kernel"])}))
    # unit names may repeat across the sides (same hosts and ranks): counts stay per side
    cb, cc = side_counts if side_counts is not None else (None, None)
    counts = pd.concat([cb, cc]) if side_counts is not None else None
    yb, madb, nb_disp, logb, gidb, seb, vb = _matrix(b, kernels, cb) if len(b) else _empty(len(kernels))
    yc, madc, nc_disp, logc, gidc, sec, vc = _matrix(c, kernels, cc) if len(c) else _empty(len(kernels))
    ub, uc = yb.shape[1], yc.shape[1]
    y = np.concatenate([yb, yc], axis=1)
    cnt = np.concatenate([nb_disp, nc_disp], axis=1)
    present = cnt > 0
    y = np.where(present, y, np.nan)

    offsets, n_shared = _shared_offsets(y, cnt, cfg, ub) if ub >= 1 and uc >= 1 else (np.zeros(ub + uc), 0)
    z = y - offsets[None, :]
    zb, zc = z[:, :ub], z[:, ub:]
    diff, s2, df, (nb, nc) = _pooled_var(zb, zc)
    s2, df, hist_df = _with_history(s2, df, kernels, history)

    # The offsets are centred within each side, so ``diff`` keeps the movement shared by every
    # kernel between the sides (a family-wide slowdown is a change of each of its kernels).
    # What the centred offsets cannot remove is the mean per-process factor of each side: the
    # same random term in every kernel's difference, of variance sigma_f^2 (1/ub + 1/uc), with
    # sigma_f^2 estimated by the within-side spread of the offsets (ub + uc - 2 df). It enters
    # every kernel's variance (t and CI); the kernels' tests are then positively correlated,
    # under which Benjamini-Hochberg keeps its level (Benjamini & Yekutieli 2001, PRDS).
    ctl: ControlFit | None = None
    moved: ControlFit | None = None
    if n_shared:
        ob, oc = offsets[:ub], offsets[ub:]
        df_o = ub + uc - 2
        s2_o = (((ob - ob.mean()) ** 2).sum() + ((oc - oc.mean()) ** 2).sum()) / df_o if df_o > 0 else np.nan
        # the shared factor's variance history (kernel '*' of the history): more df for the
        # '*' row, as a kernel's history gives its own row
        s2_o, df_o = _shared_with_history(s2_o, df_o, history)
        var_shift = s2_o * (1 / ub + 1 / uc) if df_o > 0 else np.nan
        # within-process controls (the point's ungated kernels): the sides' mean factor of the
        # gated kernels, predicted from the controls' and taken out of every kernel's total
        fit = _control_fit(offsets, _control_matrix(controls, b, c, kernels), ub, uc)
        if fit is not None and fit.p_moved >= CONTROLS_MOVED_P:
            ctl = fit
        elif fit is not None:
            moved = fit
        # the summary of the common movement (kernel '*'): median over the kernels behind the
        # offsets of their between-side difference (robust to a few kernels that changed alone)
        shared = _shared_kernels(y, cnt, cfg) & np.isfinite(diff)
        shift = float(np.median(diff[shared])) if shared.any() else 0.0
        # var_shift is the whole variance of ``shift``: each offset is itself a median over
        # the same kernels, so s_o^2 already holds the kernels' independent noise as well as
        # the shared factor. Adding the median's own noise again (pi/2 MAD^2 / kernels) counted
        # that part twice: the implied SE of the '*' row was above the spread of its
        # estimate over 200 A/A tests of the real 908 kernels (4 % above), and without it
        # matches it within 1 % (0.755 % vs 0.763 %; heavy 0.739 / 0.690 %, bimodal 0.697 / 0.665 %), which
        # lifted a 4 % family slowdown at threshold 0 from 53 % to 62 % of tests.
    else:
        shift, df_o, s2_o, var_shift = 0.0, np.inf, 0.0, 0.0
    if not np.isfinite(var_shift):
        var_shift, df_o = 0.0, np.inf

    disp_per_unit = np.where(present, cnt, np.nan)
    n_disp = _nanmedian_rows(disp_per_unit)
    if counts is not None and len(counts):
        # compacted samples: the dispatch count recorded before compaction, per kernel
        true_n = counts.groupby("kernel", observed=True)["value"].median()
        true_n.index = true_n.index.astype(str)
        n_true = true_n.reindex(kernels).to_numpy(float)
        n_disp = np.where(np.isfinite(n_true), np.fmax(n_true, n_disp), n_disp)
    s2_q = _central_quantile_var(logb, gidb, ub, logc, gidc, uc, len(kernels), offsets)
    floor = _sampling_floor(np.concatenate([vb, vc], axis=1), cnt, s2, df, s2_q)

    # the prior's trend (GateConfig.prior_trend) and its df cap: the real trace's step-clustered
    # kernels vary 5-25x more between processes than their sampling noise predicts, and only
    # their own variance can say so (docs/statistics.md, "Moderated t")
    testable = (nb >= cfg.min_units) & (nc >= cfg.min_units)
    cov = _prior_covariate(cfg.prior_trend, n_disp, np.concatenate([vb, vc], axis=1), s2, testable,
                           kernels=kernels, log_dur=_nanmedian_rows(y))
    s2_fit = np.where(testable, s2, np.nan)
    rel = diff - shift
    prior_out: dict = {}
    se_rel, df_rel, p_rel, d0, s2m = _moderated(rel, s2_fit, np.where(testable, df, 0.0), nb, nc,
                                                cov, cfg.moderate, cfg.level, floor=floor, prior=cfg.prior,
                                                max_d0=_prior_df_cap(df, testable, cfg), prior_out=prior_out)
    var_q = _resolution_var(b, c, kernels)
    if np.any(var_q > 0):
        se_rel = np.sqrt(se_rel ** 2 + var_q)
        with np.errstate(invalid="ignore", divide="ignore"):
            p_rel = stats.t_pvalue(rel / se_rel, df_rel)
    # with controls, a kernel's total is its change net of the controls' predicted share of the
    # sides' mean factor (slope x the controls' shift), and the shared part of its variance is
    # the regression's residual one; without, the whole of the sides' mean factor
    adj = ctl.slope * ctl.shift if ctl is not None else 0.0
    var_part, df_part = (ctl.var, ctl.df) if ctl is not None else (var_shift, df_o)
    total = diff - adj
    var_tot = se_rel ** 2 + var_part
    # df of the total: Welch-Satterthwaite over the kernel's part and the shared part, at least
    # the smaller of the two. Without controls the total is tested only once the '*' row is
    # rejected (hierarchical multiplicity), so a Welch df that is too large when s_o^2 is small
    # by chance adds no A/A alarm; it sizes a family-wide shift (docs/statistics.md, "First look")
    df_tot = np.where(var_part > 0, np.fmin(df_rel, df_part), df_rel).astype(float)
    if var_part > 0:
        df_tot = np.fmax(df_tot, stats.welch_df(se_rel ** 2, df_rel, var_part, df_part))
    with np.errstate(invalid="ignore", divide="ignore"):
        p_tot = stats.t_pvalue(total / np.sqrt(var_tot), df_tot)
    p_k, by_rel = _kernel_pvalue(p_tot, p_rel, rel, total)
    p_rel_dir = np.where((np.sign(rel) == np.sign(total)) & np.isfinite(p_rel), p_rel, 1.0)
    half_rel = stats.t_quantile(cfg.level, df_rel) * se_rel
    half = stats.t_quantile(cfg.level, df_tot) * np.sqrt(var_tot)
    lo, hi = total - half, total + half
    if cfg.ci_method == "bootstrap":
        lo, hi = _bootstrap_ci(kernels, logb, gidb, ub, logc, gidc, uc, offsets, -adj, testable, lo, hi, cfg)
    _, rank_p = stats.mannwhitney_matrix(zc, zb) if len(kernels) else (None, np.zeros(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        unit_sd = np.sqrt(var_tot / (1.0 / nb + 1.0 / nc))
    base_med = _nanmedian_rows(np.where(nb_disp > 0, np.exp(yb), np.nan))
    cand_med = _nanmedian_rows(np.where(nc_disp > 0, np.exp(yc), np.nan))

    rows: list[dict] = []
    for i, kern in enumerate(kernels):
        row = dict(point=point, kernel=kern, metric=DUR, n_base=int(nb[i]), n_cand=int(nc[i]),
                   base_median_ns=base_med[i], cand_median_ns=cand_med[i],
                   prior_df=d0, history_df=float(hist_df[i]), shared_shift=math.exp(shift), unit_sd_log=unit_sd[i])
        if nb[i] == 0 or nc[i] == 0:
            row["verdict"] = NEW if nb[i] == 0 else MISSING
            rows.append(row)
            continue
        row.update(ratio=math.exp(total[i]), df_t=float(df_tot[i]),
                   ci_low=math.exp(lo[i]) if np.isfinite(lo[i]) else np.nan,
                   ci_high=math.exp(hi[i]) if np.isfinite(hi[i]) else np.nan,
                   p_value=p_k[i] if testable[i] else np.nan,
                   rank_p_value=rank_p[i])
        if testable[i]:
            # the two tests behind p_value, for the hierarchical multiplicity rule of
            # compare_stats (p_relative: 1 where the relative change runs against the total)
            row.update(p_total=float(p_tot[i]), p_relative=float(p_rel_dir[i]))
            # the shared part of the total's variance, per process, and its df (the plan redoes
            # it at another count); controls: how many series the total was measured against
            row.update(shared_sd_log=math.sqrt(var_part / (1 / ub + 1 / uc)) if var_part > 0 else 0.0,
                       shared_df=float(df_part), controls=ctl.n if ctl is not None else 0)
        if testable[i] and (by_rel[i] or cfg.multiplicity == "hierarchical"):
            # decided by the change relative to the other kernels (compare_stats may set
            # by_rel): assign_verdicts sizes it against the threshold with this interval
            row.update(by_rel=bool(by_rel[i]), rel_ratio=math.exp(rel[i]), rel_ci_low=math.exp(rel[i] - half_rel[i]),
                       rel_ci_high=math.exp(rel[i] + half_rel[i]), df_rel=float(df_rel[i]))
            # the parts of that interval's variance, for gate/power.py to redo it at another
            # count: the kernel's own between-process variance (on df, history pooled), the
            # prior's location, the sampling floor (NaN: none) and the timer's term
            row.update(own_var=float(s2[i]), prior_var=float(prior_out["s0_2"][i]), floor_var=float(floor[i]),
                       resolution_var=float(var_q[i]))
        rows.append(row)
    if n_shared:
        t_q = stats.t_quantile(cfg.level, np.array([df_o], float))[0]
        se_s = math.sqrt(var_shift) if np.isfinite(var_shift) else np.nan
        p_s = float(stats.t_pvalue(np.array([shift / se_s]), np.array([df_o], float))[0]) if se_s and np.isfinite(se_s) and se_s > 0 else np.nan
        rows.append(dict(point=point, kernel=SHARED, metric=DUR, n_base=ub, n_cand=uc,
                         ratio=math.exp(shift), df_t=float(df_o), ci_low=math.exp(shift - t_q * se_s) if np.isfinite(se_s) else np.nan,
                         ci_high=math.exp(shift + t_q * se_s) if np.isfinite(se_s) else np.nan,
                         p_value=p_s, shared_shift=math.exp(shift),
                         unit_sd_log=math.sqrt(s2_o) if np.isfinite(s2_o) else np.nan,
                         note=_shared_note(n_shared, ctl, moved)))
    if cfg.gate_dispersion:
        rows += _dispersion_rows(point, kernels, madb, nb_disp, madc, nc_disp, cfg)
    return rows


def _shared_note(n_shared: int, ctl: ControlFit | None, moved: ControlFit | None) -> str:
    text = f"movement shared by all kernels (median over {n_shared} kernels; "
    if ctl is not None:
        return text + (f"each kernel's change is measured against {ctl.n} within-process controls, "
                       f"which moved {100 * math.expm1(ctl.shift):+.1f}%, slope {ctl.slope:.2f})")
    if moved is not None:
        return text + (f"included in each kernel's change; the {moved.n} within-process controls moved "
                       f"{100 * math.expm1(moved.shift):+.1f}% themselves, so they are not used)")
    return text + "included in each kernel's change)"


def _shared_with_history(s2_o: float, df_o: float, history: pd.DataFrame | None) -> tuple[float, float]:
    """The shared factor's within-side variance pooled with its history (the ``*`` rows of
    :func:`variance_contribution`), unless it is an upper outlier of that history's F
    distribution, as for a kernel (:func:`_with_history`)."""
    if history is None or not len(history) or not (df_o > 0) or not np.isfinite(s2_o):
        return s2_o, df_o
    pooled, df, _ = _with_history(np.array([s2_o]), np.array([float(df_o)]), pd.Index([SHARED]), history)
    return float(pooled[0]), float(df[0])


@dataclass(frozen=True)
class ControlFit:
    """The gated kernels' per-process factor regressed on the controls' (within each side,
    through the origin: both are centred per side). ``slope``: the regression's; ``shift``:
    the controls' own shift between the sides (log, median over the series as the ``*`` row
    takes it); ``var``: the variance of the sides' mean gated factor left after the controls
    predicted it (``s_r^2 (1/n_b + 1/n_c + shift^2 / S_cc)``, ANCOVA), on ``df`` = processes
    - 3; ``p_moved``: the two-sided p of "the controls did not change"; ``n``: control series."""

    slope: float
    shift: float
    var: float
    df: float
    p_moved: float
    n: int


#: the least df of the residual variance with which the controls are used (3 + 3 processes)
MIN_CONTROL_DF = 3


def _control_matrix(controls: tuple[pd.DataFrame, pd.DataFrame] | None, b: pd.DataFrame, c: pd.DataFrame,
                    gated: pd.Index) -> np.ndarray | None:
    """Log values (control series x the units of ``b`` then ``c``, in :func:`_matrix`'s order)
    of the series seen in every unit of both sides: the ``control_ns`` kernels that are not
    gated here, and the category totals of categories that hold no gated kernel. None when a
    side has no ``control_ns`` rows (a record stored before controls: today's rule)."""
    if controls is None or not len(b) or not len(c) \
            or not all(d is not None and (d["metric"] == CONTROL_NS).any() for d in controls):
        return None
    sides = []
    gated_names = {str(k) for k in gated}
    gated_cats = category_totals_of(gated_names)
    for d, dur in zip(controls, (b, c)):
        units = pd.Index([str(x) for x in pd.unique(dur["unit"])])
        kern = d["kernel"].astype(str)
        is_ctl = (d["metric"] == CONTROL_NS).to_numpy() & ~kern.isin(gated_names).to_numpy()
        is_tot = (d["metric"] == CATEGORY_TOTAL_NS).to_numpy() & ~kern.isin(gated_cats).to_numpy()
        keep = (is_ctl | is_tot) & (d["value"].to_numpy(float) > 0)
        t = pd.DataFrame({"key": (d["metric"].astype(str) + "\x1f" + kern).to_numpy(object)[keep],
                          "unit": d["unit"].astype(str).to_numpy(object)[keep],
                          "v": np.log(d["value"].to_numpy(float)[keep])})
        sides.append(t.groupby(["key", "unit"], sort=False)["v"].median().unstack("unit").reindex(columns=units))
    keys = sides[0].index.intersection(sides[1].index)
    x = np.hstack([sides[0].loc[keys].to_numpy(float), sides[1].loc[keys].to_numpy(float)]) if len(keys) else None
    if x is None:
        return None
    x = x[np.isfinite(x).all(axis=1)]
    return x if len(x) else None


def _control_fit(offsets: np.ndarray, x: np.ndarray | None, ub: int, uc: int) -> ControlFit | None:
    """ANCOVA of the gated kernels' within-side offsets on the controls' (``x``: the control
    series' log values, :func:`_control_matrix`); None without controls, with too few
    processes (:data:`MIN_CONTROL_DF`) or with controls that do not vary."""
    df = ub + uc - 3
    if x is None or df < MIN_CONTROL_DF or ub < 2 or uc < 2:
        return None
    ctl = np.zeros(ub + uc)
    for g in (slice(0, ub), slice(ub, ub + uc)):
        part = x[:, g]
        off = np.median(part - part.mean(axis=1, keepdims=True), axis=0)
        ctl[g] = off - off.mean()
    s_cc = float((ctl ** 2).sum())
    if not s_cc > 0:
        return None
    shift = float(np.median(x[:, ub:].mean(axis=1) - x[:, :ub].mean(axis=1)))
    se_moved = math.sqrt(s_cc / (ub + uc - 2) * (1 / ub + 1 / uc))
    p_moved = float(stats.t_pvalue(np.array([shift / se_moved]), np.array([ub + uc - 2.0]))[0])
    slope = float((offsets * ctl).sum() / s_cc)
    s2_r = float(((offsets - slope * ctl) ** 2).sum() / df)
    var = s2_r * (1 / ub + 1 / uc + shift ** 2 / s_cc)
    return ControlFit(slope, shift, var, float(df), p_moved, int(len(x)))


def _prior_df_cap(df: np.ndarray, testable: np.ndarray, cfg: GateConfig) -> float | None:
    """Largest prior df: ``prior_df_cap`` times the testable kernels' median own df (processes
    and variance history), so a kernel's own variance always keeps that share of its estimate."""
    own = df[testable & (df > 0)]
    if cfg.prior_df_cap is None or not len(own):
        return None
    return float(cfg.prior_df_cap * np.median(own))


def _kernel_pvalue(p_tot: np.ndarray, p_rel: np.ndarray, rel: np.ndarray, total: np.ndarray) -> np.ndarray:
    """One p-value per kernel from two tests of "this kernel changed", combined by Simes
    (and whether the relative test was the stronger: its interval then sizes the change)
    (``min(2 min(p1, p2), max(p1, p2))``, valid under positive dependence).

    * ``p_tot``: its total change between the sides (shared movement included, with the
      variance of the sides' mean per-process factors): what detects a family-wide shift.
    * ``p_rel``: its change relative to the movement shared by all kernels, without that
      variance: what detects one kernel moving while the rest stay, at the precision of a
      within-process comparison. It only counts in the direction of the total change: a kernel
      that stayed while its family slowed is "faster than the rest", not improved.
    """
    same_dir = np.sign(rel) == np.sign(total)
    p_r = np.where(same_dir & np.isfinite(p_rel), p_rel, 1.0)
    lo = np.fmin(p_tot, p_r)
    hi = np.fmax(p_tot, p_r)
    out = np.minimum(np.minimum(2 * lo, hi), 1.0)
    return np.where(np.isfinite(p_tot), out, np.nan), p_r < p_tot


def _prior_covariate(trend: str, n_disp: np.ndarray, se_true: np.ndarray, s2: np.ndarray,
                     testable: np.ndarray, *, kernels: pd.Index | None = None,
                     log_dur: np.ndarray | None = None) -> np.ndarray | list[np.ndarray]:
    """Covariate column(s) of the variance prior's trend (see ``GateConfig.prior_trend``);
    "capped" gives a list of designs, one trend each (the prior takes the smaller location)."""
    if trend == "stratified":
        add = _prior_covariate("additive", n_disp, se_true, s2, testable)
        cols = [add, _stratum_columns(kernels, testable)]
        cols.append(np.log(n_disp)[:, None])
        if log_dur is not None:
            cols.append(np.asarray(log_dur, float)[:, None])
        return np.column_stack(cols)
    if trend == "count":
        return np.log(n_disp)[:, None]
    if trend == "capped":
        return [np.log(n_disp)[:, None], _prior_covariate("additive", n_disp, se_true, s2, testable)]
    if trend not in ("noise", "additive"):
        raise ValueError(f"prior_trend must be count, noise, additive or capped, not {trend!r}")
    v = _nanmean_rows(np.where(np.isfinite(se_true) & (se_true > 0), se_true ** 2, np.nan))
    if trend == "noise":
        return np.log(v)[:, None]
    # "additive": between-process variance = kernel-specific process noise + the median's own
    # sampling noise; the common part is the median excess of s^2 over the sampling noise
    ok = testable & np.isfinite(s2) & np.isfinite(v)
    excess = float(np.median(s2[ok] - v[ok])) if ok.sum() >= 3 else 0.0
    floor = float(np.nanmedian(v[ok])) * 1e-2 if ok.any() else 0.0
    return np.log(v + max(excess, floor))[:, None]


#: a category gets a stratum of its own in the prior with at least this many testable kernels
MIN_STRATUM = 4
_RULES = compile_rules()  # the default category rules: strata of the variance prior


def _stratum_columns(kernels: pd.Index | None, testable: np.ndarray) -> np.ndarray:
    """Indicator columns of the kernels' categories (``analysis/categories.py`` default rules):
    one per category with at least ``MIN_STRATUM`` testable kernels inside and outside it, the
    rest is the reference stratum."""
    if kernels is None or not len(kernels):
        return np.zeros((len(testable), 0))
    cats = np.array([category_of(str(k), _RULES) for k in kernels])
    cols = []
    names, counts = np.unique(cats[testable], return_counts=True)
    for name, n in sorted(zip(names, counts), key=lambda x: -x[1])[1:]:
        if n >= MIN_STRATUM and testable.sum() - n >= MIN_STRATUM:
            cols.append((cats == name).astype(float))
    return np.column_stack(cols) if cols else np.zeros((len(kernels), 0))


def _empty(n_k: int):
    z = np.zeros((n_k, 0))
    return z, z, z.astype(int), np.zeros(0), np.zeros(0, int), z, z


def _bootstrap_ci(kernels, logb, gidb, ub, logc, gidc, uc, offsets, shift, testable, lo, hi, cfg):
    """Hierarchical-bootstrap CI per testable kernel (only with ``ci_method="bootstrap"``)."""
    lo, hi = lo.copy(), hi.copy()
    for i in np.flatnonzero(testable):
        base = [logb[gidb == i * ub + u] - offsets[u] for u in range(ub)]
        cand = [logc[gidc == i * uc + u] - offsets[ub + u] for u in range(uc)]
        _, l, h = stats.hierarchical_bootstrap_log_ratio(base, cand, n_boot=cfg.n_boot, level=cfg.level,
                                                         seed=cfg.seed + i)
        lo[i], hi[i] = l + shift, h + shift
    return lo, hi


def _dispersion_rows(point, kernels, madb, nb_disp, madc, nc_disp, cfg) -> list[dict]:
    m = cfg.dispersion_min_dispatches
    with np.errstate(divide="ignore", invalid="ignore"):
        cvb = np.where((nb_disp >= m) & (madb > 0), np.log(_MAD_TO_SD * madb), np.nan)
        cvc = np.where((nc_disp >= m) & (madc > 0), np.log(_MAD_TO_SD * madc), np.nan)
    diff, s2, df, (nb, nc) = _pooled_var(cvb, cvc)
    keep = (nb >= cfg.min_units) & (nc >= cfg.min_units)
    if not keep.any():
        return []
    se, df_t, p, d0, _ = _moderated(diff, np.where(keep, s2, np.nan), np.where(keep, df, 0.0), nb, nc,
                                    None, cfg.moderate, cfg.level, prior=cfg.prior)
    half = stats.t_quantile(cfg.level, df_t) * se
    rows = []
    for i in np.flatnonzero(keep):
        rows.append(dict(point=point, kernel=kernels[i], metric=CV, n_base=int(nb[i]), n_cand=int(nc[i]),
                         base_median_ns=float(np.exp(np.nanmedian(cvb[i]))),
                         cand_median_ns=float(np.exp(np.nanmedian(cvc[i]))),
                         ratio=math.exp(diff[i]), df_t=float(df_t[i]), ci_low=math.exp(diff[i] - half[i]),
                         ci_high=math.exp(diff[i] + half[i]), p_value=p[i], prior_df=d0,
                         unit_sd_log=se[i] / math.sqrt(1 / nb[i] + 1 / nc[i])))
    return rows


