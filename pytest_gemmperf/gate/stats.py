"""Pure, vectorized statistics for the regression gate (no pandas, no I/O).

Everything here works on numpy arrays and is checked against scipy on fixed seeds in
``tests/test_gate_stats.py``. The functions are deliberately small so that ``gate/compare.py``
reads as the recipe of ``docs/statistics.md``:

* grouped robust summaries (median, MAD) computed with one sort instead of a Python loop;
* Benjamini-Hochberg q-values;
* limma's empirical-Bayes variance moderation (Smyth 2004): the prior ``(d0, s0^2)`` is fitted to
  the per-kernel variances by matching the first two moments of ``log s^2``; each kernel's
  variance is then shrunk towards ``s0^2`` with weight ``d0``. This is how the gate "borrows
  strength" across ~80 kernels when each kernel has only 4 processes per side. The gate's
  default is the robust variant (bisquare trend, quantile-matched prior df, outlier kernels
  keep their own variance): :func:`fit_f_dist_robust` and :func:`robust_prior_df`;
* Mann-Whitney U, exact for small samples (the per-process summaries) and the tie-corrected
  normal approximation for large ones (pooled dispatches, used by the anchor rules);
* a hierarchical bootstrap of a log ratio of medians (resample processes, then dispatches).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import special, stats
from scipy.optimize import brentq

# ---------------------------------------------------------------------------------------------
# grouped summaries


def group_sort(values: np.ndarray, groups: np.ndarray, n_groups: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort ``values`` by (group, value); return sorted values, group starts and counts."""
    # value sort, then a stable sort by group: numpy radix-sorts 16-bit keys, ~10x faster
    # than np.lexsort for the usual few hundred (kernel, unit) groups
    by_value = np.argsort(values)
    gkey = groups.astype(np.int16 if n_groups < 2 ** 15 else np.int64)
    order = by_value[np.argsort(gkey[by_value], kind="stable")]
    counts = np.bincount(groups, minlength=n_groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return values[order], starts, counts


def _median_sorted(sorted_vals: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    out = np.full(len(counts), np.nan)
    ok = counts > 0
    lo = starts[ok] + (counts[ok] - 1) // 2
    hi = starts[ok] + counts[ok] // 2
    out[ok] = 0.5 * (sorted_vals[lo] + sorted_vals[hi])
    return out


def group_median(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Median of ``values`` per integer group id (NaN for empty groups)."""
    s, starts, counts = group_sort(np.asarray(values, float), np.asarray(groups), n_groups)
    return _median_sorted(s, starts, counts)


def group_median_mad(values: np.ndarray, groups: np.ndarray, n_groups: int, *, with_se: bool = False
                     ) -> tuple[np.ndarray, ...]:
    """Per-group median, raw MAD (median absolute deviation, unscaled) and count.

    With ``with_se`` also the order-statistic standard error of the median: half the distance
    between the order statistics at ``n/2 -+ sqrt(n)/2`` (the distribution-free +-1 SE
    interval of the median, binomial(n, 1/2) ranks). Unlike a MAD-based formula it stays small
    when the median sits inside one mode of a multimodal distribution (a kernel name covering
    several GEMM shapes in a fixed mix) and grows when the median falls between modes.
    """
    values = np.asarray(values, float)
    groups = np.asarray(groups)
    s, starts, counts = group_sort(values, groups, n_groups)
    med = _median_sorted(s, starts, counts)
    dev = np.abs(values - med[groups])
    sd, _, _ = group_sort(dev, groups, n_groups)
    mad = _median_sorted(sd, starts, counts)
    if not with_se:
        return med, mad, counts
    se = np.full(n_groups, np.nan)
    ok = counts > 1
    n = counts[ok].astype(float)
    lo = starts[ok] + np.floor(n / 2 - np.sqrt(n) / 2).astype(int)
    hi = starts[ok] + np.minimum(n - 1, np.ceil(n / 2 + np.sqrt(n) / 2) - 1).astype(int)
    se[ok] = (s[hi] - s[lo]) / 2
    return med, mad, counts, se


def group_median_se(values: np.ndarray, groups: np.ndarray, n_groups: int, n_true: np.ndarray
                    ) -> np.ndarray:
    """Order-statistic standard error of each group's median for ``n_true`` dispatches.

    The values of a group may be every dispatch or the quantiles a compacted baseline keeps
    (``compact_samples``: order statistics at probabilities ``(j + 1/2) / m``). Both read as a
    quantile function ``Q`` at those probabilities (linear in between); the SE is
    ``(Q(1/2 + 1/(2 sqrt n)) - Q(1/2 - 1/(2 sqrt n))) / 2`` with ``n = n_true`` (the
    distribution-free +-1 SE interval of the median, as :func:`group_median_mad`), so a
    compacted group of 500 dispatches gets the SE of 500 dispatches, not of its 21 quantiles.
    NaN for groups with fewer than two values.
    """
    s, starts, counts = group_sort(np.asarray(values, float), np.asarray(groups), n_groups)
    n = np.asarray(n_true, float)
    out = np.full(n_groups, np.nan)
    ok = (counts > 1) & np.isfinite(n) & (n > 1)
    m = counts[ok].astype(float)
    half = 0.5 / np.sqrt(np.maximum(n[ok], m))

    def q(p: np.ndarray) -> np.ndarray:
        pos = np.clip(p * m - 0.5, 0.0, m - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, m.astype(int) - 1)
        frac = pos - lo
        return (1 - frac) * s[starts[ok] + lo] + frac * s[starts[ok] + hi]

    out[ok] = (q(0.5 + half) - q(0.5 - half)) / 2
    return out


# ---------------------------------------------------------------------------------------------
# multiplicity


def bh_qvalues(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values); NaNs are ignored and stay NaN.

    ``q_(k) = min_{j >= k} m p_(j) / j``; rejecting ``q <= alpha`` is the BH step-up procedure
    at FDR ``alpha`` over the ``m`` finite p-values.
    """
    p = np.asarray(p, float)
    q = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    m = int(ok.sum())
    if m == 0:
        return q
    pv = p[ok]
    order = np.argsort(pv)
    ranked = pv[order] * m / np.arange(1, m + 1)
    ranked = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(ranked, 1.0)
    q[ok] = out
    return q


# ---------------------------------------------------------------------------------------------
# empirical-Bayes variance moderation (limma)


def trigamma_inverse(x: np.ndarray | float) -> np.ndarray:
    """Solve ``trigamma(y) = x`` for y > 0 (Newton iteration on 1/trigamma, as limma does)."""
    x = np.atleast_1d(np.asarray(x, float))
    y = 0.5 + 1.0 / x
    big, small = x > 1e7, x < 1e-6
    for _ in range(50):
        tri = special.polygamma(1, y)
        dif = tri * (1.0 - tri / x) / special.polygamma(2, y)
        y = y + dif
        if np.all(-dif / y < 1e-8):
            break
    y = np.where(big, 1.0 / np.sqrt(x), y)
    return np.where(small, 1.0 / x, y)


def fit_f_dist(s2: np.ndarray, df: np.ndarray, covariate: np.ndarray | None = None
               ) -> tuple[float, float | np.ndarray]:
    """Fit the scaled inverse-chi^2 prior ``s0^2 * d0 / chi^2_{d0}`` to sample variances.

    Moment matching on ``log s^2`` (Smyth 2004, limma ``fitFDist``): returns ``(d0, s0^2)``;
    ``d0 = inf`` when the variances are no more dispersed than sampling alone explains
    (every kernel then gets the pooled variance). Kernels with ``df <= 0`` or ``s2 <= 0`` are
    ignored. With fewer than 3 usable kernels there is nothing to borrow: ``(0, nan)``.

    With ``covariate`` (limma-trend) the prior location is a quadratic in the covariate
    and ``s0^2`` is returned per element (NaN where ``s2``/``df`` were unusable but the
    covariate is finite gets the trend value too). The gate uses ``log(dispatches per
    process)``: the noise of a per-process median falls with the number of dispatches, so a
    single prior would shrink well-sampled kernels towards the variance of poorly sampled
    ones and cost exactly the power the gate needs.
    """
    s2 = np.asarray(s2, float)
    df = np.asarray(df, float)
    ok = np.isfinite(s2) & (df > 0) & (s2 > 0)
    if covariate is not None:
        covariate = np.asarray(covariate, float)
        ok &= np.isfinite(covariate)
    if ok.sum() < 3:
        return 0.0, float("nan")
    z = np.log(s2[ok])
    e = z - special.digamma(df[ok] / 2) + np.log(df[ok] / 2)
    n = len(e)
    if covariate is not None and np.ptp(covariate[ok]) > 0 and n >= 6:
        # quadratic in the centred covariate (linear below 12 kernels): bends from the
        # sampling-noise slope to the flat process-level floor, like limma-trend's lowess
        centre = float(np.mean(covariate[ok]))
        degree = 2 if n >= 12 else 1
        x = covariate[ok] - centre
        design = np.vander(x, degree + 1, increasing=True)
        coef, *_ = np.linalg.lstsq(design, e, rcond=None)
        resid = e - design @ coef
        evar = float((resid ** 2).sum() / (n - degree - 1) - special.polygamma(1, df[ok] / 2).mean())
        xa = np.where(np.isfinite(covariate), covariate, np.nanmedian(covariate)) - centre
        lo_x, hi_x = x.min(), x.max()  # no extrapolation of the quadratic
        loc = np.vander(np.clip(xa, lo_x, hi_x), degree + 1, increasing=True) @ coef
    else:
        emean = float(e.mean())
        evar = float(((e - emean) ** 2).sum() / (n - 1) - special.polygamma(1, df[ok] / 2).mean())
        loc = emean if covariate is None else np.full(len(s2), emean)
    if evar > 0:
        d0 = float(2 * trigamma_inverse(evar)[0])
        s0_2 = np.exp(loc + special.digamma(d0 / 2) - np.log(d0 / 2))
    else:
        d0, s0_2 = float("inf"), np.exp(loc)
    return d0, (float(s0_2) if np.ndim(s0_2) == 0 else s0_2)


def moderate_variance(s2: np.ndarray, df: np.ndarray, d0: float | np.ndarray, s0_2: float | np.ndarray
                      ) -> np.ndarray:
    """Posterior variance ``(d0 s0^2 + d s^2) / (d0 + d)``; ``s2`` itself where ``d0 == 0``.

    ``d0`` may be per kernel (:func:`robust_prior_df`); ``d0 = inf`` gives ``s0^2``.
    """
    s2 = np.asarray(s2, float)
    df = np.asarray(df, float)
    s0_2 = np.broadcast_to(np.asarray(s0_2, float), s2.shape)
    d0 = np.broadcast_to(np.asarray(d0, float), s2.shape)
    if not (d0 > 0).any() or not np.isfinite(s0_2).any():
        return s2.copy()
    s2z = np.where(np.isfinite(s2) & (df > 0), s2, 0.0)
    dz = np.where(np.isfinite(s2) & (df > 0), df, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        finite = (np.where(np.isinf(d0), 0.0, d0) * s0_2 + dz * s2z) / (np.where(np.isinf(d0), 0.0, d0) + dz)
    out = np.where(np.isinf(d0), s0_2, finite)
    return np.where(np.isfinite(s0_2) & (d0 > 0), out, s2)


def t_pvalue(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Two-sided p-value of a t statistic; ``df = inf`` gives the normal limit."""
    t = np.asarray(t, float)
    df = np.broadcast_to(np.asarray(df, float), t.shape)
    p = np.where(np.isinf(df), 2 * stats.norm.sf(np.abs(t)), 2 * stats.t.sf(np.abs(t), np.where(np.isinf(df), 1.0, df)))
    return np.where(np.isfinite(t) & (df > 0), p, np.nan)


def t_quantile(level: float, df: np.ndarray) -> np.ndarray:
    """Two-sided critical value ``t_{1-(1-level)/2, df}`` (normal for ``df = inf``)."""
    df = np.asarray(df, float)
    a = 0.5 + level / 2
    out = np.where(np.isinf(df), stats.norm.ppf(a), stats.t.ppf(a, np.where(np.isinf(df) | (df <= 0), 1.0, df)))
    return np.where(df > 0, out, np.nan)


def welch_df(v1: np.ndarray, df1: np.ndarray, v2: np.ndarray, df2: np.ndarray) -> np.ndarray:
    """Welch-Satterthwaite degrees of freedom of ``v1 + v2`` (variances of two estimates)."""
    v1, v2 = np.asarray(v1, float), np.asarray(v2, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        den = np.where(np.isinf(df1), 0.0, v1 ** 2 / df1) + np.where(np.isinf(df2), 0.0, v2 ** 2 / df2)
        out = (v1 + v2) ** 2 / den
    return np.where(den > 0, out, np.inf)


# ---------------------------------------------------------------------------------------------
# Mann-Whitney U


@lru_cache(maxsize=256)
def _mwu_null_cdf(m: int, n: int) -> np.ndarray:
    """Exact null CDF of U (no ties) for sample sizes m, n: counts by dynamic programming."""
    # f[i][j][u] recursion flattened over j: number of arrangements with U = u
    f = np.zeros((n + 1, m * n + 1))
    f[:, 0] = 1.0  # with i = 0 x-values, U = 0 for any number of y-values
    for i in range(1, m + 1):
        g = np.zeros_like(f)
        g[0, 0] = 1.0
        for j in range(1, n + 1):
            # the largest of the i + j values is an x (adds j to U) or a y (adds nothing)
            g[j] = g[j - 1]
            g[j, j:] = g[j, j:] + f[j, : m * n + 1 - j]
        f = g
    counts = f[n]
    return np.cumsum(counts) / counts.sum()


def mannwhitney_exact_p(u: np.ndarray, m: int, n: int) -> np.ndarray:
    """Two-sided exact p of ``U`` (statistic of x) for sizes m, n: ``2 min(P(U<=u), P(U>=u))``."""
    cdf = _mwu_null_cdf(m, n)
    u = np.asarray(u, float)
    lo = np.floor(u).astype(int)
    hi = np.ceil(u).astype(int)
    p_le = cdf[np.clip(lo, 0, m * n)]
    p_ge = 1.0 - np.where(hi - 1 >= 0, cdf[np.clip(hi - 1, 0, m * n)], 0.0)
    return np.minimum(1.0, 2 * np.minimum(p_le, p_ge))


def mannwhitney_matrix(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise two-sided Mann-Whitney U of ``x[k]`` vs ``y[k]`` with NaN as "absent".

    ``U`` counts pairs with ``x > y`` (+1/2 for ties), the statistic scipy reports for its first
    sample. Exact p (no tie correction) where both rows are complete and small
    (``n_x, n_y <= 20``); otherwise the tie-corrected normal approximation with continuity
    correction. Rows with fewer than one value on a side get NaN.
    """
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    gt = (x[:, :, None] > y[:, None, :]).sum(axis=(1, 2))
    eq = (x[:, :, None] == y[:, None, :]).sum(axis=(1, 2))
    u = gt + 0.5 * eq
    m = np.isfinite(x).sum(1)
    n = np.isfinite(y).sum(1)
    p = np.full(len(x), np.nan)
    for (mi, ni) in set(zip(m.tolist(), n.tolist())):
        if mi < 1 or ni < 1:
            continue
        rows = (m == mi) & (n == ni)
        if mi <= 20 and ni <= 20:
            p[rows] = mannwhitney_exact_p(u[rows], mi, ni)
        else:
            mu = mi * ni / 2
            sd = np.sqrt(mi * ni * (mi + ni + 1) / 12)
            z = (np.abs(u[rows] - mu) - 0.5) / sd
            p[rows] = np.minimum(1.0, 2 * stats.norm.sf(z))
    return u, p


def grouped_mannwhitney(values: np.ndarray, groups: np.ndarray, is_y: np.ndarray, n_groups: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Mann-Whitney U per group on large samples (normal approximation, tie correction).

    ``values`` are pooled observations, ``groups`` their group id and ``is_y`` marks the
    second sample. Returns ``U`` of the first sample (x) and the two-sided p-value with
    continuity correction, as ``scipy.stats.mannwhitneyu(x, y, method="asymptotic")``.
    """
    values = np.asarray(values, float)
    groups = np.asarray(groups)
    is_y = np.asarray(is_y, bool)
    order = np.lexsort((values, groups))
    v, g, yy = values[order], groups[order], is_y[order]
    nobs = len(v)
    # runs of equal (group, value) share the average rank
    new_run = np.ones(nobs, bool)
    new_run[1:] = (v[1:] != v[:-1]) | (g[1:] != g[:-1])
    run_id = np.cumsum(new_run) - 1
    run_start = np.flatnonzero(new_run)
    run_len = np.diff(np.append(run_start, nobs))
    counts = np.bincount(g, minlength=n_groups)
    gstart = np.concatenate(([0], np.cumsum(counts)[:-1]))
    pos_in_group = run_start - gstart[g[run_start]]
    avg_rank = pos_in_group + (run_len + 1) / 2.0
    ranks = avg_rank[run_id]
    nx = np.bincount(g, weights=~yy, minlength=n_groups)
    ny = counts - nx
    rx = np.bincount(g, weights=ranks * ~yy, minlength=n_groups)
    u = rx - nx * (nx + 1) / 2
    tie_term = np.bincount(g[run_start], weights=run_len ** 3 - run_len, minlength=n_groups)
    n = nx + ny
    with np.errstate(divide="ignore", invalid="ignore"):
        var = nx * ny / 12 * ((n + 1) - tie_term / (n * (n - 1)))
        z = (np.abs(u - nx * ny / 2) - 0.5) / np.sqrt(var)
        p = np.minimum(1.0, 2 * stats.norm.sf(np.maximum(z, 0.0)))
    p = np.where((nx > 0) & (ny > 0) & (var > 0), p, np.nan)
    return u, p


# ---------------------------------------------------------------------------------------------
# hierarchical bootstrap


def _median_index_cdf(n: int) -> np.ndarray:
    """CDF over order statistics j = 0..n-1 of the median of a bootstrap resample of size n.

    The resampled (lower) median is ``x_(j)`` iff at least ``h = (n+1)//2`` draws fall at or
    below ``x_(j)`` and fewer at or below ``x_(j-1)``: ``P(med <= x_(j)) = P(Bin(n, (j+1)/n) >= h)``.
    Sampling j from this CDF replaces drawing n dispatches per unit and per replicate.
    """
    h = (n + 1) // 2
    return stats.binom.sf(h - 1, n, np.arange(1, n + 1) / n)


def hierarchical_bootstrap_log_ratio(base: list[np.ndarray], cand: list[np.ndarray], *,
                                     n_boot: int = 2000, level: float = 0.95, seed: int = 0
                                     ) -> tuple[float, float, float]:
    """Percentile CI of ``mean_c log median - mean_b log median`` over processes.

    ``base``/``cand`` hold one array of (log) dispatch values per process. Each replicate
    resamples processes with replacement, then dispatches within each drawn process (the
    within-process median is drawn exactly from its bootstrap distribution, see
    :func:`_median_index_cdf`). Returns ``(estimate, low, high)`` on the log scale.
    """
    rng = np.random.default_rng(seed)

    def side(units: list[np.ndarray]) -> tuple[float, np.ndarray]:
        srt = [np.sort(np.asarray(u, float)) for u in units if len(u)]
        k = len(srt)
        est = float(np.mean([np.median(s) for s in srt]))
        pick = rng.integers(0, k, size=(n_boot, k))
        draws = np.empty((n_boot, k))
        u01 = rng.random((n_boot, k))
        for i, s in enumerate(srt):  # loop over processes (a handful), not dispatches
            cdf = _median_index_cdf(len(s))
            sel = pick == i
            j = np.minimum(np.searchsorted(cdf, u01[sel], side="left"), len(s) - 1)
            draws[sel] = s[j]
        return est, draws.mean(axis=1)

    eb, bb = side(base)
    ec, bc = side(cand)
    diff = bc - bb
    a = (1 - level) / 2
    lo, hi = np.quantile(diff, [a, 1 - a])
    return ec - eb, float(lo), float(hi)


# ---------------------------------------------------------------------------------------------
# robust empirical-Bayes prior


def _log_f_quantiles(probs: np.ndarray, df: float, d0: float) -> np.ndarray:
    """Quantiles of ``log F(df, d0)`` (``d0 = inf``: ``log chi^2_df / df``)."""
    if np.isinf(d0):
        return np.log(stats.chi2.ppf(probs, df) / df)
    return np.log(stats.f.ppf(probs, df, d0))


def fit_f_dist_robust(s2: np.ndarray, df: np.ndarray, design: np.ndarray | None = None, *,
                      max_d0: float = 1e4) -> tuple[float, np.ndarray]:
    """Robust scaled inverse-chi^2 prior: ``(d0, s0^2 per element)``.

    The prior location is a linear model in ``design`` (columns of covariates; the intercept
    is added here) fitted to ``log s^2`` by Tukey-bisquare IRLS, so that a few kernels whose
    variance follows no trend (steps that switch mode, a median sitting between two GEMM shapes)
    neither bend the trend nor inflate the spread. ``d0`` then matches the interquartile range
    of the residuals to that of ``log F(df, d0)`` (quantile matching instead of limma's
    moments: moments over ~80 kernels are dominated by those same outliers and drive ``d0``
    towards 1, i.e. no borrowing at all); the location matches the residuals' median to the
    median of ``log F(df, d0)``. ``d0 = inf`` when the residuals are no more dispersed than
    chi^2 sampling alone explains. With fewer than 8 usable kernels: :func:`fit_f_dist` (moments,
    no trend). Kernels lacking a covariate get the trend at the covariates' median.
    """
    s2 = np.asarray(s2, float)
    df = np.asarray(df, float)
    ok = np.isfinite(s2) & (df > 0) & (s2 > 0)
    x = np.zeros((len(s2), 0)) if design is None else np.asarray(design, float).reshape(len(s2), -1)
    ok_x = np.isfinite(x).all(axis=1)
    if (ok & ok_x).sum() < 8:
        d0, s0 = fit_f_dist(s2, df)
        return d0, np.full(len(s2), s0)
    fit = ok & ok_x
    # drop covariate columns that do not vary (e.g. every kernel seen equally often)
    keep = np.ptp(x[fit], axis=0) > 0 if x.shape[1] else np.zeros(0, bool)
    # room for the coefficients: columns are kept in the design's order (most telling first)
    keep &= np.cumsum(keep) + 1 <= fit.sum() // 4
    x = x[:, keep]
    centre = x[fit].mean(axis=0) if x.shape[1] else np.zeros(0)
    xa = np.where(np.isfinite(x), x, np.nanmedian(x[fit], axis=0) if x.shape[1] else 0.0)
    # no extrapolation beyond the fitted covariate range
    if x.shape[1]:
        xa = np.clip(xa, x[fit].min(axis=0), x[fit].max(axis=0))
    design_all = np.column_stack([np.ones(len(s2)), xa - centre])
    a = design_all[fit]
    d_ref = float(np.median(df[fit]))
    # log s^2 on a common df scale: removes the df-dependent bias of log chi^2
    e = np.log(s2[fit]) - special.digamma(df[fit] / 2) + np.log(df[fit] / 2)
    w = np.ones(len(e))
    coef = np.linalg.lstsq(a, e, rcond=None)[0]
    for _ in range(6):
        r = e - a @ coef
        scale = 1.4826 * np.median(np.abs(r - np.median(r)))
        if not scale > 0:
            break
        u = (r - np.median(r)) / (4.685 * scale)
        w = np.where(np.abs(u) < 1, (1 - u ** 2) ** 2, 0.0)
        sw = np.sqrt(w)
        coef = np.linalg.lstsq(a * sw[:, None], e * sw, rcond=None)[0]
    r = e - a @ coef
    q25, q50, q75 = np.quantile(r, [0.25, 0.5, 0.75])
    d0 = _d0_from_iqr(q75 - q25, d_ref, max_d0)
    # e was put on the d_ref scale; undo the bias correction for the median match
    med_logf = float(_log_f_quantiles(np.array([0.5]), d_ref, d0)[0])
    loc = design_all @ coef + (q50 - med_logf) + special.digamma(d_ref / 2) - np.log(d_ref / 2)
    return d0, np.exp(loc)


def _d0_from_iqr(iqr: float, d_ref: float, max_d0: float = 1e4) -> float:
    """Prior df whose ``log F(d_ref, d0)`` has interquartile range ``iqr`` (0.2 .. inf)."""

    def iqr_of(d0: float) -> float:
        lo, hi = _log_f_quantiles(np.array([0.25, 0.75]), d_ref, d0)
        return float(hi - lo)

    if iqr <= iqr_of(max_d0):  # at or below the largest finite df: no bracket for the root
        return np.inf
    if iqr >= iqr_of(0.2):
        return 0.2
    d0 = float(np.exp(brentq(lambda t: iqr_of(np.exp(t)) - iqr, np.log(0.2), np.log(max_d0))))
    return np.inf if d0 >= max_d0 * 0.999 else d0


def prior_df_at_location(s2: np.ndarray, df: np.ndarray, s0_2: np.ndarray, *,
                         max_d0: float = 1e4) -> float:
    """Prior df for a given prior location ``s0_2`` (per element), by the same interquartile
    matching as :func:`fit_f_dist_robust`: the IQR of ``log(s^2 / s0^2)`` (on the common df
    scale) against that of ``log F(df, d0)``. For a location not fitted to these variances
    (e.g. the smaller of two trends), where the fitted trend's own df no longer applies."""
    s2 = np.asarray(s2, float)
    df = np.asarray(df, float)
    s0_2 = np.asarray(s0_2, float)
    ok = np.isfinite(s2) & (df > 0) & (s2 > 0) & np.isfinite(s0_2) & (s0_2 > 0)
    if ok.sum() < 8:
        return fit_f_dist(s2, df)[0]
    r = np.log(s2[ok] / s0_2[ok]) - special.digamma(df[ok] / 2) + np.log(df[ok] / 2)
    q25, q75 = np.quantile(r, [0.25, 0.75])
    return _d0_from_iqr(q75 - q25, float(np.median(df[ok])), max_d0)


def robust_prior_df(s2: np.ndarray, df: np.ndarray, d0: float, s0_2: np.ndarray, *,
                    alpha: float = 0.05) -> np.ndarray:
    """Per-kernel prior df: ``d0``, lowered for kernels whose variance is an upper outlier.

    A kernel whose ``s^2 / s0^2`` lies in the upper ``alpha`` tail of ``F(df, d0)`` is
    probably not drawn from the prior (limma's ``robust=TRUE`` reasoning): shrinking it would
    understate its variance and produce false alarms. Its prior df falls smoothly to 0 (its own
    variance only) as the tail probability falls from ``alpha`` to ``alpha / 100``. Lower
    outliers keep the full prior: trusting a variance that is small by chance is what turns
    four near-equal per-process medians into a false alarm.
    """
    s2 = np.asarray(s2, float)
    df = np.asarray(df, float)
    out = np.full(s2.shape, float(d0))
    ok = np.isfinite(s2) & (df > 0) & np.isfinite(s0_2) & (s0_2 > 0)
    if not ok.any() or d0 <= 0:
        return out
    ratio = s2[ok] / np.asarray(s0_2, float)[ok]
    p_up = stats.chi2.sf(ratio * df[ok], df[ok]) if np.isinf(d0) else stats.f.sf(ratio, df[ok], d0)
    frac = np.clip(np.log(np.maximum(p_up, 1e-300) / (alpha / 100)) / np.log(100.0), 0.0, 1.0)
    if np.isinf(d0):
        # an infinite prior df cannot be scaled: outliers keep a large finite one
        out[ok] = np.where(frac < 1, 50.0 * frac, np.inf)
    else:
        out[ok] = d0 * frac
    return out
