"""The first look (one comparison, as ``gemmperf compare`` gives it): what ``unchanged`` may
mean, the stratified variance prior, and the same variance history for the CLI as for pytest.

* ``assign_verdicts``: ``unchanged`` says the change is smaller than the threshold, so a row
  whose CI lies wholly beyond the threshold is never ``unchanged`` (``regression`` when
  significant, else ``inconclusive`` with the reason), a CI that straddles the band's edge is
  ``inconclusive`` however wide it is, and at threshold 0 an ``unchanged`` row says why.
* the variance prior is fitted per stratum of kernels (category, dispatch count, duration,
  sampling noise): a quiet stratum keeps its own level beside a noisy one.
* ``gemmperf compare BASELINES RESULTS`` pools the same variance history as the pytest gate
  step that produced RESULTS, and gives the same verdict rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.gate.compare import GateConfig, assign_verdicts, compare

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


@pytest.mark.parametrize("thr", [t for t in THRESHOLDS if t > 0])
@pytest.mark.parametrize("ci", [(0.07, 17.16), (0.99, 1.0 + 0.5), (0.5, 1.01), (0.93, 1.07)])
def test_a_ci_that_straddles_the_band_edge_is_inconclusive_with_a_reason(thr: float, ci: tuple) -> None:
    lo, hi = ci
    if lo >= 1 - thr and hi <= 1 + thr:
        pytest.skip("inside this band")
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
