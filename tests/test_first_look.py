"""The first look (one comparison, as ``gemmperf compare`` gives it): what ``unchanged`` may
mean, the stratified variance prior, and the same variance history for the CLI as for pytest.

* ``assign_verdicts``: ``unchanged`` says the change is smaller than the threshold, so a row
  whose CI lies wholly beyond the threshold is never ``unchanged`` (``regression`` when
  significant, else ``inconclusive`` with the reason), a CI that straddles the band's edge is
  ``inconclusive`` however wide it is, and at threshold 0 an ``unchanged`` row says why.
* the variance prior is stratified (category, dispatch count, duration and sampling noise are
  covariates of its trend): a quiet stratum keeps its own level beside a noisy one.
* a compacted group (``compact_samples``) has its dispatches' median of log durations, so a
  run with more iterations is not a change of a kernel that covers two shapes.
* ``gemmperf compare BASELINES RESULTS`` pools the same variance history as the pytest gate
  step that produced RESULTS, and gives the same verdict rows.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.gate import durations
from pytest_gemmperf.gate.compare import GateConfig, assign_verdicts, compare
from pytest_gemmperf.gate.samples import compact_samples
from pytest_gemmperf.run import backend as be
from pytest_gemmperf.run import environment

pytest_plugins = ["pytester"]

# the modules the inner sessions use are imported once there (pytester drops them afterwards)
from gemmperf_pytester_support import FAKE, PLUGIN_ARGS  # noqa: E402

# ---------------------------------------------------------------------------------------------
# assign_verdicts: unchanged means "inside the band"


def _row(ratio: float, lo: float, hi: float, q: float, *, p: float | None = None,
         kernel: str = "k0", n: int = 4) -> dict:
    """One compare_stats row (the columns assign_verdicts reads); df 6 as with 4 processes."""
    return dict(test="t", point="p", kernel=kernel, metric="dur_ns", n_base=n, n_cand=n,
                base_median_ns=1000.0, cand_median_ns=1000.0 * ratio, ratio=ratio, ci_low=lo,
                ci_high=hi, p_value=q / 10 if p is None else p, q_value=q, df_t=6.0,
                unit_sd_log=0.01, verdict="", note="")


def _verdicts(rows: list[dict], threshold: float, fdr: float = 0.01) -> pd.DataFrame:
    return assign_verdicts(pd.DataFrame(rows), GateConfig(threshold=threshold, fdr=fdr))


THRESHOLDS = [0.0, 0.02, 0.05, 0.10]


@pytest.mark.parametrize("thr", THRESHOLDS)
@pytest.mark.parametrize("side", [+1, -1])
@pytest.mark.parametrize("width", [0.002, 0.02, 0.2])
def test_a_ci_wholly_beyond_the_threshold_is_never_unchanged(thr: float, side: int, width: float) -> None:
    # the CI starts just beyond the band's edge on either side; not significant after BH
    edge = 1 + side * thr
    lo, hi = sorted((edge + side * 0.001, edge + side * (0.001 + width)))
    v = _verdicts([_row(float(np.sqrt(lo * hi)), lo, hi, q=0.022)], thr).iloc[0]
    assert v["verdict"] == "inconclusive"
    assert "beyond the" in v["note"] and "not significant" in v["note"] and "q 0.022" in v["note"]
    # significant: a definite verdict
    v = _verdicts([_row(float(np.sqrt(lo * hi)), lo, hi, q=0.001)], thr).iloc[0]
    assert v["verdict"] == ("regression" if side > 0 else "improvement")


def test_the_reported_case_is_inconclusive_not_unchanged() -> None:
    # +5.7 % [+3.6, +7.7], p 0.0004, q 0.022 at FDR 0.01, threshold 0
    v = _verdicts([_row(1.057, 1.036, 1.077, q=0.022, p=0.0004)], 0.0).iloc[0]
    assert v["verdict"] == "inconclusive"
    assert v["note"] == ("CI beyond the 0% threshold but not significant after the multiple-testing "
                         "correction (q 0.022 > FDR 0.01)")


STRADDLING = [(thr, ci) for thr in THRESHOLDS if thr > 0
              for ci in [(0.07, 17.16), (0.99, 1.5), (0.5, 1.01), (0.93, 1.07)]
              if not (ci[0] >= 1 - thr and ci[1] <= 1 + thr)]


@pytest.mark.parametrize(("thr", "ci"), STRADDLING)
def test_a_ci_that_straddles_the_band_edge_is_inconclusive_with_a_reason(thr: float, ci: tuple) -> None:
    lo, hi = ci
    # the estimate inside the band and nothing significant: was "unchanged" however wide the CI
    v = _verdicts([_row(1.0 + thr / 2, lo, hi, q=0.9)], thr).iloc[0]
    assert v["verdict"] == "inconclusive"
    assert f"CI crosses the {100 * thr:g}% threshold: needs >=" in v["note"]


def test_a_wide_ci_is_not_unchanged_where_a_narrower_one_is_inconclusive() -> None:
    rows = [_row(1.02, 0.07, 17.16, q=1.0, kernel="wide"), _row(1.06, 1.01, 1.11, q=0.5, kernel="narrow")]
    v = _verdicts(rows, 0.05).set_index("kernel")["verdict"]
    assert v.to_dict() == {"wide": "inconclusive", "narrow": "inconclusive"}


@pytest.mark.parametrize("thr", THRESHOLDS)
def test_unchanged_inside_the_band(thr: float) -> None:
    if thr == 0:
        # no band: unchanged = not significant with a CI that holds 1, and the row says so
        v = _verdicts([_row(1.01, 0.98, 1.04, q=0.6)], thr).iloc[0]
        assert v["verdict"] == "unchanged"
        assert v["note"] == "threshold 0: no significant change (q 0.6 > FDR 0.01)"
        return
    lo, hi = 1 - 0.9 * thr, 1 + 0.9 * thr
    for q in (0.9, 0.001):  # significant or not: smaller than the threshold
        v = _verdicts([_row(1.0 + thr / 3, lo, hi, q=q)], thr).iloc[0]
        assert v["verdict"] == "unchanged"
        assert (v["note"] == "") == (q > 0.01)


def test_unchanged_always_has_its_ci_inside_the_band_or_says_why() -> None:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(400):
        r = float(np.exp(rng.normal(0, 0.08)))
        half = float(np.exp(rng.uniform(np.log(0.002), np.log(2.0))))
        rows.append(_row(r, r / (1 + half), r * (1 + half), q=float(rng.uniform(0, 1) ** 3), kernel=f"k{i}"))
    for thr in THRESHOLDS:
        v = _verdicts(rows, thr)
        u = v[v["verdict"] == "unchanged"]
        inside = (u["ci_low"] >= 1 - thr) & (u["ci_high"] <= 1 + thr)
        assert (inside | u["note"].str.startswith("threshold 0: no significant change")).all()
        beyond = (v["ci_low"] > 1 + thr) | (v["ci_high"] < 1 - thr)
        assert not (beyond & (v["verdict"] == "unchanged")).any()


# ---------------------------------------------------------------------------------------------
# the stratified variance prior

QUIET, NOISY = 0.002, 0.03  # per-process sd of the GEMMs and of the elementwise kernels
GEMMS = [f"Cijk_Ailk_Bljk_MT64x{16 * (i + 1)}x256" for i in range(24)]
ELEMENTWISE = [f"void at::native::vectorized_elementwise_kernel<{i}>" for i in range(40)]


def _side(rng: np.random.Generator, tag: str, slow: dict[str, float] | None = None) -> pd.DataFrame:
    """4 processes: 24 quiet GEMMs and 40 elementwise kernels 15x noisier between processes,
    alike in everything else (40 dispatches per process, 1 % dispatch noise, same duration)."""
    names, values = GEMMS + ELEMENTWISE, []  # one frame at the end, not one per kernel and process
    for _ in range(4):
        shared = rng.normal(0, 0.002)
        for name in names:
            sd = QUIET if name in GEMMS else NOISY
            level = 1e4 * np.exp(shared + rng.normal(0, sd)) * (1 + (slow or {}).get(name, 0.0))
            values.append(level * np.exp(rng.normal(0, 0.01, 40)))
    return pd.DataFrame({"point": "p", "kernel": np.tile(np.repeat(names, 40), 4), "metric": "dur_ns",
                         "unit": np.repeat([f"{tag}/{u}" for u in range(4)], len(names) * 40),
                         "value": np.concatenate(values)})


def test_a_quiet_stratum_keeps_its_own_prior_beside_a_noisy_one() -> None:
    rng = np.random.default_rng(0)
    names = pd.Index(GEMMS + ELEMENTWISE)
    is_gemm = np.arange(len(names)) < len(GEMMS)
    df = np.full(len(names), 6.0)
    s2 = np.where(is_gemm, QUIET ** 2, NOISY ** 2) * rng.chisquare(6, len(names)) / 6
    n_disp = np.full(len(names), 40.0)
    se_true = np.full((len(names), 8), 0.01 * 1.25 / np.sqrt(40))  # the median's own noise
    testable = np.ones(len(names), bool)
    cov = durations._prior_covariate("stratified", n_disp, se_true, s2, testable, kernels=names,
                                     log_dur=np.full(len(names), np.log(1e4)))
    _, _, s0_2 = durations._variance_prior(s2, df, cov)
    level = np.median(np.sqrt(s0_2[is_gemm]))
    assert 0.5 * QUIET < level < 2 * QUIET  # its own level, not pulled towards the noisy kernels
    assert np.median(np.sqrt(s0_2[~is_gemm])) > 5 * QUIET
    # without strata the same kernels share one location, far above the quiet ones
    cov = durations._prior_covariate("count", n_disp, se_true, s2, testable)
    _, _, s0_2 = durations._variance_prior(s2, df, cov)
    assert np.median(np.sqrt(s0_2[is_gemm])) > 3 * QUIET


def test_a_small_change_of_a_quiet_gemm_is_found_beside_noisy_kernels() -> None:
    # 1.5 % in one GEMM, threshold 0: the stratified prior (the default) finds it in every
    # seed; one trend for all kernels ("capped", the default before) in at most one (none at
    # the relative tests' level of shared_alpha 0.5)
    found = {"stratified": 0, "capped": 0}
    for seed in range(3):
        rng = np.random.default_rng(seed)
        base, cand = _side(rng, "b"), _side(rng, "c", {GEMMS[3]: 0.015})
        for trend in found:
            v = compare(base, cand, GateConfig(threshold=0.0, prior_trend=trend)).set_index("kernel")
            found[trend] += v.loc[GEMMS[3], "verdict"] == "regression"
            assert not (v.drop(index=GEMMS[3])["verdict"] == "regression").any()
    assert found["stratified"] == 3 and found["capped"] <= 1


# ---------------------------------------------------------------------------------------------
# a compacted group's median is the median of its dispatches


def _two_shapes(rng: np.random.Generator, tag: str, steps: int) -> pd.DataFrame:
    """4 processes of a kernel name that covers two GEMM shapes, one dispatch of each per step
    (a fixed 50/50 mix, the second shape 80 % slower), plus 30 steady kernels for the shared
    per-process factor."""
    frames = []
    for u in range(4):
        shared = rng.normal(0, 0.01)
        mix = np.tile([1e4, 1.8e4], steps) * np.exp(shared + rng.normal(0, 0.01, 2 * steps))
        frames.append(pd.DataFrame({"point": "p", "kernel": "Cijk_two_shapes", "metric": "dur_ns",
                                    "unit": f"{tag}/{u}", "value": mix}))
        for i in range(30):
            frames.append(pd.DataFrame({"point": "p", "kernel": f"k{i}", "metric": "dur_ns", "unit": f"{tag}/{u}",
                                        "value": 1e4 * np.exp(shared + rng.normal(0, 0.01, steps))}))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("n", [20, 21, 22, 30, 31, 200, 201])
def test_a_compacted_group_keeps_its_median(n: int) -> None:
    values = np.random.default_rng(n).lognormal(9, 0.5, n)
    raw = pd.DataFrame({"point": "p", "kernel": "k", "metric": "dur_ns", "unit": "u", "value": values})
    kept = compact_samples(raw)
    kept = kept[kept["metric"] == "dur_ns"]["value"]
    assert len(kept) == min(n, 21)
    # the gate's per-process summary: the median of the log durations
    assert np.median(np.log(kept)) == pytest.approx(np.median(np.log(values)), rel=1e-12)


def test_a_run_with_more_iterations_is_not_a_change_of_a_two_shape_kernel() -> None:
    # 10 steps in the baseline (20 dispatches, kept whole), 15 in the candidate (30, compacted
    # to 21 quantiles): the same mix, so the same per-process medians. Compaction kept the
    # upper middle value of 30, the slower shape: a 40 % "regression" on every seed before.
    for seed in range(3):
        rng = np.random.default_rng(seed)
        base = compact_samples(_two_shapes(rng, "b", 10))
        cand = compact_samples(_two_shapes(rng, "c", 15))
        for thr in (0.0, 0.05):
            v = compare(base, cand, GateConfig(threshold=thr)).set_index("kernel")
            assert v.loc["Cijk_two_shapes", "ratio"] == pytest.approx(1.0, abs=0.02)
            assert not v["verdict"].isin(["regression", "improvement"]).any()


# ---------------------------------------------------------------------------------------------
# gemmperf compare pools the variance history as the pytest gate step does

SLUG = "test_gpsweep.py__test_gpsweep"
ONE_POINT_TEST = f"""
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28], threads=[256], kernels=[r"^aten::"])
def test_gpsweep(gemmperf):
    result = gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "30"], repeats=2)
    gemmperf.assert_no_regression(result)
"""


@pytest.fixture
def one_point(pytester, monkeypatch):
    """A one-point sweep gating ``aten::mm`` and ``aten::add`` (4 processes: 2 runs x 2 ranks)."""
    monkeypatch.setattr(be, "rocm_gpu_present", lambda *a: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    monkeypatch.delenv("FAKE_SCALE", raising=False)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)  # no contention notes
    pytester.makepyfile(test_gpsweep=ONE_POINT_TEST)

    def run(*args, results: str):
        return pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
                                  "--gemmperf-telemetry", "off", f"--gemmperf-results-dir={results}",
                                  "--gemmperf-baseline-dir=base", *args)

    return run


@pytest.mark.usefixtures("without_session_reports")  # no session report is read here
def test_compare_pools_the_same_history_as_the_pytest_gate_step(one_point, pytester, monkeypatch) -> None:
    from pytest_gemmperf.cli import main

    one_point(results="r1").assert_outcomes(passed=1)  # records the baseline
    for r in ("r2", "r3"):  # two runs' between-process variance into its history
        one_point("--gemmperf-learn-variance", results=r).assert_outcomes(passed=1)
    # the first look of pytest's gate step (no confirmation re-runs)
    one_point("--gemmperf-confirm", "0", results="r4")
    for r in ("r2", "r3", "r4"):  # this machine's load is kept out (one_point): no run is disturbed
        point = json.loads((pytester.path / r / SLUG / "ch28-th256" / "point.json").read_text())
        assert not point["gate"]["first"]["disturbance"]["disturbed"], (r, point["environment"])
    by_pytest = pd.read_csv(pytester.path / "r4" / SLUG / "verdicts.csv")
    monkeypatch.chdir(pytester.path)
    assert main(["compare", "base", "r4", "--out", "cmp", "--no-report", "--jobs", "1"]) in (0, 1)
    by_cli = pd.read_csv(pytester.path / "cmp" / "verdicts.csv")

    key = ["test", "point", "kernel", "metric"]
    a = by_pytest.set_index(key).sort_index()
    b = by_cli.set_index(key).sort_index()
    assert list(a.index) == list(b.index)
    dur = a.index.get_level_values("metric") == "dur_ns"
    # two earlier runs of 4 processes, pooled. Not by every kernel on every run: a kernel whose
    # variance in this comparison is improbably far above its history (p < 1e-3,
    # gate.durations.HISTORY_OUTLIER_P) ignores it, and the stand-in workload's noise is random,
    # so one of the two kernels does so on about 0.18 % of runs, both on 0.003 % (the rule
    # simulated with the workload's noise, 200,000 runs). The CLI must then ignore it too (the
    # columns below are compared whole).
    hist = a.loc[dur, "history_df"]
    assert hist.isin([0, 6]).all() and (hist == 6).any(), hist
    for col in ("ratio", "ci_low", "ci_high", "p_value", "q_value", "history_df", "prior_df"):
        np.testing.assert_allclose(b[col].to_numpy(float), a[col].to_numpy(float), rtol=1e-12, err_msg=col)
    for col in ("verdict", "note"):
        assert b[col].astype(object).fillna("").tolist() == a[col].astype(object).fillna("").tolist(), col
