"""The gate's statistics against scipy / brute force on fixed seeds."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats as sps

from pytest_gemmperf.gate import stats


def test_bh_qvalues_match_scipy_and_keep_nan():
    rng = np.random.default_rng(1)
    p = np.concatenate([rng.uniform(size=40), rng.uniform(0, 1e-3, size=5)])
    q = stats.bh_qvalues(p)
    np.testing.assert_allclose(q, sps.false_discovery_control(p, method="bh"), rtol=1e-12)
    with_nan = np.append(p, np.nan)
    q2 = stats.bh_qvalues(with_nan)
    assert np.isnan(q2[-1])
    np.testing.assert_allclose(q2[:-1], q)
    assert np.isnan(stats.bh_qvalues(np.array([np.nan]))).all()


@pytest.mark.parametrize("m,n", [(4, 4), (3, 5), (2, 6), (8, 7)])
def test_mannwhitney_exact_matches_scipy(m, n):
    rng = np.random.default_rng(m * 10 + n)
    x = rng.normal(size=(30, m))
    y = rng.normal(0.7, 1, size=(30, n))
    u, p = stats.mannwhitney_matrix(x, y)
    for i in range(30):
        ref = sps.mannwhitneyu(x[i], y[i], alternative="two-sided", method="exact")
        assert u[i] == ref.statistic
        assert p[i] == pytest.approx(ref.pvalue, rel=1e-9)


def test_mannwhitney_smallest_p_four_vs_four():
    # complete separation of 4 vs 4: the smallest attainable two-sided p is 2/70
    _, p = stats.mannwhitney_matrix(np.array([[1.0, 2, 3, 4]]), np.array([[5.0, 6, 7, 8]]))
    assert p[0] == pytest.approx(2 / 70)


def test_mannwhitney_matrix_handles_absent_values_and_large_samples():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 25))
    y = rng.normal(0.3, 1, size=(2, 30))
    x[1, 20:] = np.nan  # 20 present vs 30: normal approximation (exact only up to 20 each)
    u, p = stats.mannwhitney_matrix(x, y)
    ref0 = sps.mannwhitneyu(x[0], y[0], method="asymptotic")
    ref1 = sps.mannwhitneyu(x[1, :20], y[1], method="asymptotic")
    assert p[0] == pytest.approx(ref0.pvalue, rel=1e-9)
    assert p[1] == pytest.approx(ref1.pvalue, rel=1e-9)


def test_grouped_mannwhitney_matches_scipy_with_ties():
    rng = np.random.default_rng(4)
    vals, groups, is_y = [], [], []
    for g in range(5):
        x = rng.integers(0, 30, size=40 + g)  # integer ns -> ties, as in real traces
        y = rng.integers(g, 30 + g, size=55)
        vals += [x, y]
        groups += [np.full(len(x), g), np.full(len(y), g)]
        is_y += [np.zeros(len(x), bool), np.ones(len(y), bool)]
    v, gr, yy = map(np.concatenate, (vals, groups, is_y))
    u, p = stats.grouped_mannwhitney(v.astype(float), gr, yy, 5)
    for g in range(5):
        ref = sps.mannwhitneyu(v[(gr == g) & ~yy], v[(gr == g) & yy], method="asymptotic")
        assert u[g] == pytest.approx(ref.statistic)
        assert p[g] == pytest.approx(ref.pvalue, rel=1e-9)


def test_group_median_and_mad_match_numpy():
    rng = np.random.default_rng(5)
    g = rng.integers(0, 7, size=500)
    v = rng.lognormal(size=500)
    med, mad, cnt = stats.group_median_mad(v, g, 8)
    for k in range(7):
        x = v[g == k]
        assert med[k] == pytest.approx(np.median(x))
        assert mad[k] == pytest.approx(np.median(np.abs(x - np.median(x))))
        assert cnt[k] == len(x)
    assert np.isnan(med[7]) and cnt[7] == 0
    np.testing.assert_allclose(stats.group_median(v, g, 8)[:7], med[:7])


def test_trigamma_inverse_round_trip():
    y = np.array([0.05, 0.7, 3.0, 40.0, 900.0])
    x = special.polygamma(1, y)
    np.testing.assert_allclose(stats.trigamma_inverse(x), y, rtol=1e-6)


def test_fit_f_dist_recovers_the_prior():
    rng = np.random.default_rng(6)
    d0, s0_2, df = 8.0, 1e-4, 6.0
    sigma2 = s0_2 * d0 / rng.chisquare(d0, size=4000)  # true per-kernel variances
    s2 = sigma2 * rng.chisquare(df, size=4000) / df  # what 4 vs 4 processes estimate
    d0_hat, s0_hat = stats.fit_f_dist(s2, np.full(4000, df))
    assert d0_hat == pytest.approx(d0, rel=0.3)
    assert s0_hat == pytest.approx(s0_2, rel=0.1)


def test_fit_f_dist_trend_follows_covariate():
    rng = np.random.default_rng(7)
    n = np.exp(rng.uniform(np.log(5), np.log(500), 3000))
    true = 1e-4 * 50 / n  # median noise falls with the number of dispatches
    s2 = true * rng.chisquare(6, size=3000) / 6
    d0, s0 = stats.fit_f_dist(s2, np.full(3000, 6.0), np.log(n))
    assert d0 > 50  # no extra dispersion around the trend
    np.testing.assert_allclose(s0, true, rtol=0.15)


def test_fit_f_dist_needs_three_kernels_and_equal_variances_give_inf():
    assert stats.fit_f_dist(np.array([1.0, 2.0]), np.array([6.0, 6.0])) == (0.0, pytest.approx(np.nan, nan_ok=True))
    d0, s0 = stats.fit_f_dist(np.full(50, 2.0), np.full(50, 6.0))
    # limma's location: bias-corrected mean of log s^2 (chi^2 sampling with 6 df)
    assert np.isinf(d0) and s0 == pytest.approx(2.0 * np.exp(np.log(3.0) - special.digamma(3.0)))


def test_moderated_t_without_prior_is_student_t():
    rng = np.random.default_rng(8)
    x, y = rng.normal(size=4), rng.normal(1, 1, size=4)
    s2 = (x.var(ddof=1) * 3 + y.var(ddof=1) * 3) / 6
    s2m = stats.moderate_variance(np.array([s2]), np.array([6.0]), 0.0, np.nan)
    t = (y.mean() - x.mean()) / np.sqrt(s2m * (1 / 4 + 1 / 4))
    p = stats.t_pvalue(t, np.array([6.0]))
    assert p[0] == pytest.approx(sps.ttest_ind(y, x).pvalue, rel=1e-10)
    # shrinkage: the posterior lies between the kernel's variance and the prior
    post = stats.moderate_variance(np.array([1.0, 9.0]), np.array([6.0, 6.0]), 4.0, 4.0)
    np.testing.assert_allclose(post, [(16 + 6) / 10, (16 + 54) / 10])


def test_t_helpers_match_scipy():
    np.testing.assert_allclose(stats.t_quantile(0.95, np.array([6.0, np.inf])),
                               [sps.t.ppf(0.975, 6), sps.norm.ppf(0.975)])
    np.testing.assert_allclose(stats.t_pvalue(np.array([2.5, -2.5]), np.array([9.0, np.inf])),
                               [2 * sps.t.sf(2.5, 9), 2 * sps.norm.sf(2.5)])
    # Welch-Satterthwaite of two equal variances with equal df doubles the df
    assert stats.welch_df(np.array([1.0]), np.array([5.0]), np.array([1.0]), np.array([5.0]))[0] == pytest.approx(10)


def test_bootstrap_median_index_distribution_is_exact():
    rng = np.random.default_rng(9)
    n = 7
    x = np.arange(n, dtype=float)
    draws = np.median(rng.choice(x, size=(100_000, n)), axis=1)
    emp = np.array([(draws <= j).mean() for j in range(n)])
    np.testing.assert_allclose(stats._median_index_cdf(n), emp, atol=0.005)


def test_hierarchical_bootstrap_interval_is_fixed_seed_and_has_process_level_width():
    rng = np.random.default_rng(10)
    base = [np.log(1000) + rng.normal(0, 0.005) + rng.normal(0, 0.02, 60) for _ in range(6)]
    cand = [np.log(1100) + rng.normal(0, 0.005) + rng.normal(0, 0.02, 60) for _ in range(6)]
    est, lo, hi = stats.hierarchical_bootstrap_log_ratio(base, cand, n_boot=4000, seed=3)
    mb = np.array([np.median(b) for b in base])
    mc = np.array([np.median(c) for c in cand])
    assert est == pytest.approx(mc.mean() - mb.mean())
    assert lo < est < hi
    # the width comes from the spread of the per-process medians, not from 360 "independent"
    # dispatches: compare with the normal interval of the difference of process means
    se = np.sqrt(mb.var(ddof=1) / 6 + mc.var(ddof=1) / 6)
    naive_se = np.sqrt(np.concatenate(base).var() / 360 + np.concatenate(cand).var() / 360)
    assert 0.5 < (hi - lo) / (2 * 1.96 * se) < 1.5
    assert hi - lo > 2 * 1.96 * naive_se
    assert (est, lo, hi) == stats.hierarchical_bootstrap_log_ratio(base, cand, n_boot=4000, seed=3)


# ---------------------------------------------------------------------------------------------
# robust empirical-Bayes prior


def _log_f_iqr(df, d0):
    return np.diff(np.log(sps.f.ppf([0.25, 0.75], df, d0)))[0]


def test_fit_f_dist_robust_recovers_the_prior_and_ignores_outlier_kernels():
    rng = np.random.default_rng(11)
    d0, s0_2, df, n = 8.0, 1e-4, 6.0, 4000
    s2 = s0_2 * d0 / rng.chisquare(d0, n) * rng.chisquare(df, n) / df
    d_hat, s0_hat = stats.fit_f_dist_robust(s2, np.full(n, df))
    assert d_hat == pytest.approx(d0, rel=0.3)
    np.testing.assert_allclose(s0_hat, s0_2, rtol=0.1)
    # 5 % of kernels with 30x the variance: the moment fit collapses, the robust one does not
    bad = s2.copy()
    bad[: n // 20] *= 30
    d_mom, _ = stats.fit_f_dist(bad, np.full(n, df))
    d_rob, s0_rob = stats.fit_f_dist_robust(bad, np.full(n, df))
    assert d_mom < 0.45 * d0 and d_rob > 0.65 * d0  # 3.2 and 5.8 of the true 8
    assert np.median(s0_rob) == pytest.approx(s0_2, rel=0.25)


def test_fit_f_dist_robust_matches_the_quartile_spread_by_hand():
    # residual IQR of log s^2 equals the IQR of log F(6, d0) at the returned d0
    rng = np.random.default_rng(12)
    s2 = 2e-4 / rng.chisquare(5.0, 300) * 5.0 * rng.chisquare(6, 300) / 6
    d_hat, s0 = stats.fit_f_dist_robust(s2, np.full(300, 6.0))
    q25, q75 = np.quantile(np.log(s2), [0.25, 0.75])
    assert _log_f_iqr(6.0, d_hat) == pytest.approx(q75 - q25, rel=1e-6)
    # location: the median of log(s^2 / s0^2) is the median of log F(6, d0)
    assert np.median(np.log(s2 / s0)) == pytest.approx(np.log(sps.f.ppf(0.5, 6.0, d_hat)), abs=1e-9)


def test_fit_f_dist_robust_trend_and_fallbacks():
    rng = np.random.default_rng(13)
    n = np.exp(rng.uniform(np.log(5), np.log(500), 2000))
    true = 1e-4 * 50 / n
    s2 = true * rng.chisquare(6, 2000) / 6
    d0, s0 = stats.fit_f_dist_robust(s2, np.full(2000, 6.0), np.log(n)[:, None])
    assert d0 > 50
    np.testing.assert_allclose(s0, true, rtol=0.15)
    # equal variances: sampling explains everything
    d_inf, s0_inf = stats.fit_f_dist_robust(np.full(40, 2.0) * rng.chisquare(6, 40) / 6, np.full(40, 6.0))
    assert d_inf > 20
    # a covariate that does not vary is dropped; too few kernels fall back to the moment fit
    d_c, _ = stats.fit_f_dist_robust(s2[:100], np.full(100, 6.0), np.full((100, 1), 3.0))
    assert d_c == stats.fit_f_dist_robust(s2[:100], np.full(100, 6.0))[0]
    d_few, s_few = stats.fit_f_dist_robust(np.array([1.0, 2.0, 3.0]), np.full(3, 6.0))
    assert (d_few, s_few[0]) == stats.fit_f_dist(np.array([1.0, 2.0, 3.0]), np.full(3, 6.0))


def test_robust_prior_df_lowers_only_upper_outliers():
    s0 = np.full(4, 1.0)
    df = np.full(4, 6.0)
    ratio = np.array([0.2, 1.0, sps.f.isf(0.01, 6, 10.0), sps.f.isf(1e-6, 6, 10.0)])
    d0k = stats.robust_prior_df(ratio, df, 10.0, s0, alpha=0.05)
    assert d0k[0] == d0k[1] == 10.0  # small or typical variances keep the full prior
    # tail probability 0.01 lies log(0.01/5e-4)/log(100) of the way from alpha/100 to alpha
    assert d0k[2] == pytest.approx(10.0 * np.log(0.01 / 5e-4) / np.log(100))
    assert d0k[3] == 0.0  # far outlier: its own variance only


def test_moderate_variance_with_per_kernel_prior_df():
    s2 = np.array([1.0, 9.0, 4.0, np.nan])
    df = np.array([6.0, 6.0, 6.0, 0.0])
    post = stats.moderate_variance(s2, df, np.array([4.0, 0.0, np.inf, 4.0]), 4.0)
    np.testing.assert_allclose(post, [(16 + 6) / 10, 9.0, 4.0, 4.0])


def test_group_median_se_matches_hazen_quantiles_and_survives_compaction():
    rng = np.random.default_rng(11)
    sizes = [500, 37, 2]
    vals = [rng.standard_t(5, n) for n in sizes]
    v = np.concatenate(vals)
    g = np.repeat(np.arange(3), sizes)
    se = stats.group_median_se(v, g, 4, np.array([500, 37, 2, 0]))
    for i, x in enumerate(vals):
        h = 0.5 / np.sqrt(len(x))
        hi, lo = np.quantile(x, [0.5 + h, 0.5 - h], method="hazen")
        assert se[i] == pytest.approx((hi - lo) / 2, rel=1e-12)
    assert np.isnan(se[3])
    # 21 stored quantiles of 2000 normal draws, told the true count: the SE of 2000 values
    # (sqrt(pi/2) / sqrt(n) for a standard normal), not of 21
    x = np.sort(rng.standard_normal(2000))
    kept = x[((np.arange(21) + 0.5) * 2000 / 21).astype(int)]
    se_c = stats.group_median_se(kept, np.zeros(21, int), 1, np.array([2000]))[0]
    assert se_c == pytest.approx(np.sqrt(np.pi / 2 / 2000), rel=0.35)
    se_21 = stats.group_median_se(kept, np.zeros(21, int), 1, np.array([21]))[0]
    assert se_21 > 5 * se_c


def test_prior_df_at_location_matches_the_robust_fit_and_widens_off_trend():
    rng = np.random.default_rng(14)
    d0, df, n = 8.0, 6.0, 3000
    n_disp = np.exp(rng.uniform(np.log(5), np.log(500), n))
    true = 1e-4 * 50 / n_disp
    s2 = true * d0 / rng.chisquare(d0, n) * rng.chisquare(df, n) / df
    dfs = np.full(n, df)
    # at the robust fit's own location (no trend) the IQR match gives the same df
    d_fit, s0_fit = stats.fit_f_dist_robust(s2[:400] / true[:400], dfs[:400])
    assert stats.prior_df_at_location(s2[:400] / true[:400], dfs[:400], s0_fit) == pytest.approx(d_fit, rel=1e-9)
    # at the true trend the prior df is recovered; a location that ignores the trend
    # leaves the trend in the residuals, so the prior is judged far less informative
    assert stats.prior_df_at_location(s2, dfs, true) == pytest.approx(d0, rel=0.3)
    assert stats.prior_df_at_location(s2, dfs, np.full(n, np.median(true))) < 2.0
    # too few usable kernels: the moment fit's df
    few = np.array([1.0, 2.0, 3.0])
    assert stats.prior_df_at_location(few, np.full(3, 6.0), np.ones(3)) == stats.fit_f_dist(few, np.full(3, 6.0))[0]


def test_prior_df_from_an_iqr_between_the_largest_finite_df_and_infinity_is_infinite():
    # regression: brentq had no sign change for an IQR in (IQR(inf), IQR(max_d0)] and raised
    # (3 processes per side, 4 df, real trace)
    from pytest_gemmperf.gate.stats import _d0_from_iqr, _log_f_quantiles

    d_ref = 4.0
    lo_inf, hi_inf = _log_f_quantiles(np.array([0.25, 0.75]), d_ref, np.inf)
    lo_max, hi_max = _log_f_quantiles(np.array([0.25, 0.75]), d_ref, 1e4)
    between = ((hi_inf - lo_inf) + (hi_max - lo_max)) / 2
    assert _d0_from_iqr(between, d_ref) == np.inf
    assert 0.2 < _d0_from_iqr(1.5 * (hi_inf - lo_inf), d_ref) < 1e4
