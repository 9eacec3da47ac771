"""The confirmation rules (gate/confirm.py) pinned on hand-made verdict rows, on both metric
orientations: the FDR shares of the rounds, which rows make a point suspicious (at the edges of
the threshold and the q screen), when a re-run reproduces a first look, the notes a judged
round writes, and the disturbance downgrade with its "far beyond" exceptions either way."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from pytest_gemmperf.gate.compare import GateConfig
from pytest_gemmperf.gate.confirm import (CONFIRM, DECIDE, ConfirmConfig, PointJudge, apply_disturbance, judge,
                                          judge_round, reproduced, settled, suspicious)
from pytest_gemmperf.gate.outcome import point_outcome
from pytest_gemmperf.run.environment import Disturbance

NAN = math.nan
BUSBW = "coll_busbw_gbps"  # higher is better
Z95 = float(sps.norm.ppf(0.975))


def rows(*specs: dict) -> pd.DataFrame:
    """Verdict rows; every field not given takes a neutral default."""
    base = {"point": "p", "kernel": "k", "metric": "dur_ns", "n_base": 4, "n_cand": 4, "ratio": 1.0,
            "ci_low": 0.99, "ci_high": 1.01, "q_value": 0.9, "verdict": "unchanged", "threshold": 0.25,
            "note": ""}
    return pd.DataFrame([base | s for s in specs])


def est(d: float, se: float, metric: str = "dur_ns", **kw) -> dict:
    """A row whose worse-oriented log ratio is ``d`` with standard error ``se`` (95 % CI)."""
    lo, hi = math.exp(d - Z95 * se), math.exp(d + Z95 * se)
    if metric == BUSBW:  # stored the other way up: a fall is the regression
        return {"metric": metric, "ratio": math.exp(-d), "ci_low": 1 / hi, "ci_high": 1 / lo} | kw
    return {"metric": metric, "ratio": math.exp(d), "ci_low": lo, "ci_high": hi} | kw


# -- FDR shares ----------------------------------------------------------------------------------

def test_fdr_shares_spend_little_early_and_the_rest_last():
    assert [ConfirmConfig().fdr_share(i) for i in (1, 2, 3)] == pytest.approx([0.1, 0.1, 0.8])  # the default
    assert ConfirmConfig(rounds=1).fdr_share(1) == 1.0
    assert ConfirmConfig(rounds=0).fdr_share(1) == 1.0  # confirmation off: one look, whole budget
    three = ConfirmConfig(rounds=3)
    assert [three.fdr_share(i) for i in (1, 2, 3)] == pytest.approx([0.1, 0.1, 0.8])
    two = ConfirmConfig(rounds=2, early_share=0.7)  # capped at 1/2 over the early rounds
    assert [two.fdr_share(i) for i in (1, 2)] == pytest.approx([0.5, 0.5])
    eleven = ConfirmConfig(rounds=11)  # 0.1 each would leave nothing: 0.5 / 10 each
    assert eleven.fdr_share(1) == pytest.approx(0.05) and eleven.fdr_share(11) == pytest.approx(0.5)
    assert sum(eleven.fdr_share(i) for i in range(1, 12)) == pytest.approx(1.0)


@pytest.mark.parametrize("rounds, round_no", [(3, 0), (3, 4), (1, 2), (0, 0), (0, 2)])
def test_a_round_outside_the_rounds_is_refused(rounds, round_no):
    with pytest.raises(ValueError, match=f"round {round_no} outside 1..{rounds}"):
        ConfirmConfig(rounds=rounds).fdr_share(round_no)


def test_gate_config_cuts_the_fdr_to_the_round_share():
    cfg = GateConfig()
    got = ConfirmConfig(rounds=3).gate_config(cfg, 3)
    assert got.fdr == pytest.approx(cfg.fdr * 0.8)
    assert got.threshold == cfg.threshold


# -- suspicious / settled ------------------------------------------------------------------------

@pytest.mark.parametrize("spec, expect", [
    ({"verdict": "regression", "ratio": 1.0, "q_value": 1.0}, True),  # always re-run
    ({"verdict": "unchanged", "ratio": 1.3, "q_value": 0.5}, True),  # beyond, q at the screen
    ({"verdict": "inconclusive", "ratio": 1.3, "q_value": 0.1}, True),
    ({"verdict": "inconclusive", "ratio": 1.3, "q_value": 0.51}, False),  # q above the screen
    ({"verdict": "inconclusive", "ratio": 1.3, "q_value": NAN}, False),
    ({"verdict": "unchanged", "ratio": 1.25, "q_value": 0.1}, False),  # at the threshold: not beyond
    ({"verdict": "unchanged", "ratio": 1.2, "q_value": 0.1}, False),
    ({"verdict": "unchanged", "ratio": 0.7, "q_value": 0.01}, False),  # beyond on the better side
    ({"verdict": "improvement", "ratio": 1.3, "q_value": 0.01}, False),
    ({"verdict": "new", "ratio": 1.3, "q_value": 0.01}, False),
    ({"verdict": "inconclusive", "ratio": NAN, "q_value": 0.01}, False),
    # higher is better: a fall is the worse side
    ({"verdict": "inconclusive", "metric": BUSBW, "ratio": 0.75, "q_value": 0.1}, True),  # 1/0.75 = 1.33
    ({"verdict": "inconclusive", "metric": BUSBW, "ratio": 0.8, "q_value": 0.1}, False),  # 1/0.8 = 1.25
    ({"verdict": "inconclusive", "metric": BUSBW, "ratio": 1.4, "q_value": 0.1}, False),
])
def test_suspicious_rows(spec, expect):
    v = rows(spec)
    assert suspicious(v).tolist() == [expect]
    assert settled(v) is (spec["verdict"] == "regression" or not expect)


def test_the_screen_q_and_a_missing_threshold():
    v = rows({"verdict": "unchanged", "ratio": 1.3, "q_value": 0.3})
    assert suspicious(v, ConfirmConfig(screen_q=0.3)).tolist() == [True]
    assert suspicious(v, ConfirmConfig(screen_q=0.29)).tolist() == [False]
    # no threshold recorded: any estimate on the worse side counts
    small = rows({"verdict": "unchanged", "ratio": 1.01, "q_value": 0.1})
    assert suspicious(small.assign(threshold=NAN)).tolist() == [True]
    assert suspicious(small.assign(ratio=1.0, threshold=NAN)).tolist() == [False]
    # a table without the column reads the same as empty cells
    assert suspicious(small.drop(columns="threshold")).tolist() == [True]
    assert suspicious(small.assign(ratio=1.0).drop(columns="threshold")).tolist() == [False]
    assert suspicious(rows().iloc[:0]).tolist() == []


def test_settled_after_a_round():
    assert settled(rows({"verdict": "regression"}, {"verdict": "inconclusive", "ratio": 1.5, "q_value": 0.01}))
    assert not settled(rows({"verdict": "inconclusive", "ratio": 1.5, "q_value": 0.01}))
    assert settled(rows({"verdict": "unchanged"}, {"verdict": "improvement", "ratio": 0.5}))


# -- reproduced ----------------------------------------------------------------------------------

@pytest.mark.parametrize("metric", ["dur_ns", BUSBW])
def test_a_rerun_that_leans_worse_and_agrees_reproduces(metric):
    first = rows(est(0.10, 0.02, metric))
    out = reproduced(first, rows(est(0.08, 0.03, metric)))
    r = out.iloc[0]
    assert r["d_first"] == pytest.approx(0.10) and r["d_rerun"] == pytest.approx(0.08)
    assert r["z_rerun"] == pytest.approx(0.08 / 0.03)
    assert r["z_het"] == pytest.approx(0.02 / math.hypot(0.02, 0.03))
    assert bool(r["reproduced"]) is True
    assert list(out.index.names) == ["point", "kernel", "metric"]


@pytest.mark.parametrize("metric", ["dur_ns", BUSBW])
def test_the_rerun_must_lean_worse_at_the_reproduce_level(metric):
    z = float(sps.norm.ppf(0.8))  # one-sided p = 0.2
    first = rows(est(0.02, 0.02, metric))
    just_above = reproduced(first, rows(est(0.02 * (z + 0.01), 0.02, metric)))
    just_below = reproduced(first, rows(est(0.02 * (z - 0.01), 0.02, metric)))
    assert just_above["reproduced"].tolist() == [True]
    assert just_below["reproduced"].tolist() == [False]
    better = reproduced(first, rows(est(-0.05, 0.02, metric)))
    assert better["reproduced"].tolist() == [False]
    assert reproduced(first, rows(est(0.05, 0.02, metric)), ConfirmConfig(reproduce_p=0.001)
                      )["reproduced"].tolist() == [False]


def test_a_rerun_that_contradicts_the_first_look_is_not_reproduced():
    z = float(sps.norm.ppf(1 - 0.01 / 2))
    se = 0.02
    # first look far above the re-run: heterogeneous at two-sided p < 0.01
    far = reproduced(rows(est(0.04 + (z + 0.05) * se * math.sqrt(2), se)), rows(est(0.04, se)))
    near = reproduced(rows(est(0.04 + (z - 0.05) * se * math.sqrt(2), se)), rows(est(0.04, se)))
    assert far["reproduced"].tolist() == [False] and abs(far["z_het"].iloc[0]) > z
    assert near["reproduced"].tolist() == [True]
    # only a first look worse than the re-run is a transient: a re-run as slow or slower reproduces
    below = reproduced(rows(est(0.04, se)), rows(est(0.04 + (z + 0.05) * se * math.sqrt(2), se)))
    assert below["reproduced"].tolist() == [True] and below["z_het"].iloc[0] < -z


def test_a_rerun_beyond_the_threshold_on_its_own_reproduces_a_bigger_first_look():
    # tight CIs: first look +40 %, re-runs +20 %: heterogeneous, but the re-runs alone are a
    # regression beyond the 25 % threshold? No (+20 %): transient. At +30 % they are.
    se = 0.01
    first = rows(est(math.log(1.4), se))
    small = reproduced(first, rows(est(math.log(1.2), se)))
    big = reproduced(first, rows(est(math.log(1.3), se)))
    assert small["z_het"].iloc[0] > 3 and big["z_het"].iloc[0] > 3
    assert small["reproduced"].tolist() == [False] and big["reproduced"].tolist() == [True]
    # the threshold is the row's own: at 35 % the +30 % re-runs no longer reproduce it alone
    assert reproduced(first.assign(threshold=0.35), rows(est(math.log(1.3), se)))["reproduced"].tolist() == [False]


def test_the_reruns_alone_must_lie_beyond_the_threshold_at_the_ci_level():
    # re-runs at +25 % plus 1.4 of their standard errors: beyond the threshold as an estimate,
    # not with 95 % confidence; the first look (+60 %) is far worse than them: a transient
    se = 0.02
    first = rows(est(math.log(1.6), 0.01))
    alone = rows(est(math.log(1.25) + 1.4 * se, se))
    out = reproduced(first, alone)
    assert out["z_het"].iloc[0] > 5 and out["reproduced"].tolist() == [False]
    assert reproduced(first, rows(est(math.log(1.25) + 2.1 * se, se)))["reproduced"].tolist() == [True]


def test_without_a_threshold_reruns_worse_at_the_ci_level_reproduce():
    # no threshold (NaN, or no column) reads as 0, as for suspicious(): any significant slowdown
    se = 0.01
    first = rows(est(math.log(1.4), se, threshold=NAN))
    alone = rows(est(math.log(1.1), se))
    assert reproduced(first, alone)["reproduced"].tolist() == [True]
    assert reproduced(first.drop(columns=["threshold"]), alone)["reproduced"].tolist() == [True]
    assert reproduced(first.assign(threshold=0.25), alone)["reproduced"].tolist() == [False]


def test_a_rerun_without_the_row_or_its_ci_is_not_reproduced():
    first = rows(est(0.1, 0.02), est(0.1, 0.02, kernel="k2"), est(0.1, 0.02, kernel="k3"))
    # k3: a CI of no width (one process) gives no standard error, however far the estimate leans
    alone = rows(est(0.1, 0.02, kernel="k2", ci_low=NAN),
                 est(0.1, 0.02, kernel="k3", ci_low=math.exp(0.1), ci_high=math.exp(0.1)))
    out = reproduced(first, alone)
    assert out["reproduced"].tolist() == [False, False, False]
    # the first look without a CI or a finite estimate: the re-run alone decides
    first_nan = rows(est(0.1, 0.02, ci_low=NAN))
    assert reproduced(first_nan, rows(est(0.1, 0.02)))["reproduced"].tolist() == [True]
    first_inf = rows(est(0.1, 0.02, ratio=math.inf))
    assert reproduced(first_inf, rows(est(0.1, 0.02)))["reproduced"].tolist() == [True]
    first_flat = rows(est(0.2, 0.02, ci_low=math.exp(0.2), ci_high=math.exp(0.2)))  # no width: no error
    out = reproduced(first_flat, rows(est(0.1, 0.02)))
    assert out["reproduced"].tolist() == [True] and math.isnan(out["z_het"].iloc[0])


# -- judge ---------------------------------------------------------------------------------------

def test_judge_keeps_a_reproduced_regression_with_its_note():
    first = rows(est(0.1, 0.02, verdict="regression", n_cand=4))
    combined = rows(est(0.1, 0.015, verdict="regression", n_cand=8, note="floor 2%"))
    out, changes = judge(first, combined, rows(est(0.1, 0.02)))
    assert out["verdict"].tolist() == ["regression"]
    assert out["note"].tolist() == ["floor 2%; confirmed by a re-run (8 candidate processes)"]
    assert changes == []
    assert combined["note"].tolist() == ["floor 2%"]  # a copy is judged


@pytest.mark.parametrize("metric, first_pct, rerun_pct", [("dur_ns", "+22.1%", "-1.0%"),
                                                           (BUSBW, "+22.1%", "-1.0%")])
def test_judge_turns_a_regression_the_rerun_does_not_reproduce_inconclusive(metric, first_pct, rerun_pct):
    first = rows(est(0.2, 0.03, metric, verdict="regression", n_cand=4))
    combined = rows(est(0.09, 0.02, metric, verdict="regression", n_cand=8))
    out, changes = judge(first, combined, rows(est(-0.01, 0.03, metric)))
    assert out["verdict"].tolist() == ["inconclusive"]
    assert out["note"].iloc[0] == (
        f"not reproduced by the re-run (first look {first_pct}, re-run alone {rerun_pct}): transient?; "
        "confirmation: regression -> inconclusive with 8 candidate processes (first look 4)")
    assert changes == [{"point": "p", "kernel": "k", "metric": metric, "before": "regression",
                        "after": "inconclusive"}]


def test_judge_uses_the_given_rules():
    first = rows(est(0.1, 0.02, verdict="regression"))
    combined, alone = rows(est(0.1, 0.015, verdict="regression", n_cand=8)), rows(est(0.05, 0.03))
    assert judge(first, combined, alone)[0]["verdict"].tolist() == ["regression"]
    strict = ConfirmConfig(reproduce_p=0.01)  # z 1.67 of the re-run is not enough at 0.01
    assert judge(first, combined, alone, strict)[0]["verdict"].tolist() == ["inconclusive"]


def test_judge_names_every_change_of_verdict_and_unknown_numbers():
    first = rows(est(0.05, 0.03, verdict="unchanged", n_cand=NAN),
                 est(0.0, 0.01, kernel="k2", verdict="unchanged", n_cand=NAN))
    combined = rows(est(0.05, 0.01, verdict="regression", n_cand=NAN),
                    est(0.0, 0.01, kernel="k2", verdict="unchanged", n_cand=NAN),
                    est(0.3, 0.01, kernel="k9", verdict="inconclusive", n_cand=NAN))
    alone = rows(est(0.05, 0.02), est(0.0, 0.01, kernel="k2"), est(0.3, 0.01, kernel="k9"))
    out, changes = judge(first, combined, alone)
    assert out["verdict"].tolist() == ["regression", "unchanged", "inconclusive"]
    assert out["note"].tolist() == [
        "confirmation: unchanged -> regression with ? candidate processes (first look ?)", "",
        "confirmation: - -> inconclusive with ? candidate processes (first look ?)"]
    assert [(c["kernel"], c["before"], c["after"]) for c in changes] == [
        ("k", "unchanged", "regression"), ("k9", "-", "inconclusive")]


def test_judge_without_a_rerun_estimate_says_n_a():
    first = rows(est(0.2, 0.03, verdict="regression"))
    out, _ = judge(first, rows(est(0.2, 0.02, verdict="regression", n_cand=8)), rows(est(0.2, 0.03, kernel="other")))
    assert out["note"].iloc[0].startswith(
        "not reproduced by the re-run (first look +22.1%, re-run alone n/a): transient?; confirmation: "
        "regression -> inconclusive with 8 candidate processes (first look 4)")


def test_judge_round_relabels_a_confirmed_round_at_the_whole_budget():
    seen = []
    first = rows(est(0.2, 0.03, verdict="regression"))

    def compare_with(cand, cfg):
        seen.append((len(cand), round(cfg.fdr, 6)))
        verdict = "regression" if cfg.fdr >= 0.01 else "inconclusive"
        return rows(est(0.2, 0.02, verdict=verdict, n_cand=len(cand)))

    cfg = GateConfig(fdr=0.05)
    both, alone = pd.DataFrame({"x": range(8)}), pd.DataFrame({"x": range(4)})
    out, _ = judge_round(first, compare_with, both, alone, cfg, ConfirmConfig(rounds=3), 3)
    # alone at the whole budget, the combined sample at the round's share, then again at the whole
    assert seen == [(4, 0.05), (8, 0.04), (8, 0.05)]
    assert out["verdict"].tolist() == ["regression"]
    seen.clear()
    out, _ = judge_round(first, compare_with, both, alone, cfg, ConfirmConfig(rounds=3), 1)
    assert seen == [(4, 0.05), (8, 0.005)]  # nothing confirmed at 0.1 of it: no relabelling
    assert out["verdict"].tolist() == ["inconclusive"]
    seen.clear()
    judge_round(first, compare_with, both, alone, cfg, ConfirmConfig(rounds=1), 1)
    assert seen == [(4, 0.05), (8, 0.05)]  # the whole budget already


# -- apply_disturbance ---------------------------------------------------------------------------

LOUD = Disturbance(True, ("load 9.0 on 2 CPUs", "2 other points"), 1.5)
DOWN = ("noisy environment: load 9.0 on 2 CPUs; 2 other points (was {v}, within the x1.50 the contention "
        "can explain; rerun on a quiet machine)")
KEEP = "far beyond the noise of a disturbed environment (x1.50: load 9.0 on 2 CPUs; 2 other points)"
MASKED = ("noisy environment: load 9.0 on 2 CPUs; 2 other points (the CI reaches beyond the threshold on a "
          "disturbed machine; rerun on a quiet machine)")


@pytest.mark.parametrize("metric", ["dur_ns", BUSBW])
@pytest.mark.parametrize("lo_w, hi_w, verdict, after, note", [
    # threshold 0.25, factor 1.5: worse beyond 1.25 * 1.5 = 1.875, better below 0.75 / 1.5 = 0.5
    (1.9, 2.1, "regression", "regression", KEEP),
    (1.875, 2.1, "regression", "inconclusive", DOWN.format(v="regression")),  # at the edge: explained
    (1.3, 2.1, "regression", "inconclusive", DOWN.format(v="regression")),
    (0.3, 0.49, "improvement", "improvement", KEEP),  # far better: the improvement is kept
    (0.3, 0.5, "improvement", "inconclusive", DOWN.format(v="improvement")),
    (0.3, 0.7, "improvement", "inconclusive", DOWN.format(v="improvement")),
    (1.9, 2.1, "unchanged", "unchanged", ""),
    (1.3, 2.1, "inconclusive", "inconclusive", MASKED),  # could hide a regression: says so
    (0.6, 2.1, "inconclusive", "inconclusive", MASKED),
    (0.6, 1.25, "inconclusive", "inconclusive", ""),  # reaches the threshold, not beyond
    (0.5, 1.1, "inconclusive", "inconclusive", ""),  # crosses on the better side only
])
def test_disturbance_downgrades_unless_far_beyond(metric, lo_w, hi_w, verdict, after, note):
    _check_rule(apply_disturbance, LOUD, metric, lo_w, hi_w, verdict, after, note)


def _check_rule(rule, disturbance, metric, lo_w, hi_w, verdict, after, note) -> pd.DataFrame:
    """``rule(row, disturbance)`` of one row whose worse-oriented CI is [lo_w, hi_w] (stored the
    other way up for a higher-is-better metric) gives ``after`` with ``note``, on a copy."""
    r = {"metric": metric, "ratio": math.sqrt(lo_w * hi_w), "ci_low": lo_w, "ci_high": hi_w}
    if metric == BUSBW:  # the same change, stored the other way up
        r = {"metric": metric, "ratio": 1 / r["ratio"], "ci_low": 1 / hi_w, "ci_high": 1 / lo_w}
    v = rows(r | {"verdict": verdict, "note": ""})
    out = rule(v, disturbance)
    assert out["verdict"].tolist() == [after]
    assert out["note"].tolist() == [note]
    assert v["verdict"].tolist() == [verdict]  # a copy
    return out


def test_disturbance_joins_notes_and_reads_a_missing_threshold_as_zero():
    v = rows({"verdict": "regression", "ratio": 1.6, "ci_low": 1.55, "ci_high": 1.65, "threshold": NAN,
              "note": "first"},
             {"verdict": "regression", "ratio": 1.4, "ci_low": 1.35, "ci_high": 1.45, "threshold": NAN,
              "note": None})
    out = apply_disturbance(v, LOUD)
    assert out["verdict"].tolist() == ["regression", "inconclusive"]  # beyond 1.5 * (1 + 0)
    assert out["note"].tolist() == [f"first; {KEEP}", DOWN.format(v="regression")]


def test_disturbance_leaves_quiet_and_empty_tables_alone():
    v = rows({"verdict": "regression", "ratio": 1.3, "ci_low": 1.26, "ci_high": 1.4})
    assert apply_disturbance(v, None) is v
    assert apply_disturbance(v, Disturbance(False, ("x",), 3.0)) is v
    empty = v.iloc[:0]
    assert apply_disturbance(empty, LOUD) is empty
    one = Disturbance(True, ("busy",), 1.0)  # factor 1: only beyond the threshold itself
    assert apply_disturbance(v, one)["verdict"].tolist() == ["regression"]
    assert apply_disturbance(v.assign(ci_low=1.25), one)["note"].tolist() == [
        "noisy environment: busy (was regression, within the x1.00 the contention can explain; rerun on a "
        "quiet machine)"]


def test_a_transient_on_a_disturbed_point_names_the_quiet_machine_too():
    v = rows({"verdict": "inconclusive", "ratio": 1.4, "ci_low": 1.3, "ci_high": 1.5,
              "note": "not reproduced by the re-run (first look +40.0%, re-run alone +10.0%): transient?"},
             {"verdict": "inconclusive", "ratio": 1.4, "ci_low": 0.9, "ci_high": 2.0, "note": "wide"})
    out = apply_disturbance(v, LOUD)
    assert out["verdict"].tolist() == ["inconclusive", "inconclusive"]
    assert out["note"].iloc[0].endswith("transient?; noisy environment: load 9.0 on 2 CPUs; 2 other points "
                                        "(rerun on a quiet machine)")
    assert out["note"].iloc[1] == f"wide; {MASKED}"  # a CI beyond the threshold on a busy host
    assert point_outcome(out).decide.startswith("a re-run on a quiet machine or another run")


def test_a_quiet_round_does_not_clean_a_disturbed_first_looks_processes():
    """The combined sample holds the first look's processes: its contention still applies when
    a later round ran on a quieter machine (an A/A on a busy host failed that way)."""
    from pytest_gemmperf.gate.confirm import PointJudge, worst_disturbance

    def compare_with(cand, cfg):  # +75 % [+50, +104] whatever the sample: a regression
        return rows({"verdict": "regression", "ratio": 1.75, "ci_low": 1.5, "ci_high": 2.04, "q_value": 1e-7,
                     "n_cand": len(cand)})

    busy = Disturbance(True, ("5.2 runnable threads on 2 cores",), 2.6)
    calmer = Disturbance(True, ("other processes used 0.7 of 2 cores",), 1.0)
    judge = PointJudge(compare_with, pd.DataFrame({"unit": range(6)}), GateConfig(), ConfirmConfig(rounds=3), busy)
    assert judge.verdicts["verdict"].tolist() == ["inconclusive"]
    out = judge.add_round(pd.DataFrame({"unit": range(6, 12)}), calmer)
    assert out["verdict"].tolist() == ["inconclusive"]  # within 1.25 x 2.6: not "far beyond"
    assert "x2.60" in out["note"].iloc[0] and "0.7 of 2 cores" in out["note"].iloc[0]
    assert judge.add_round(pd.DataFrame({"unit": range(12, 18)}), None)["verdict"].tolist() == ["inconclusive"]
    # the rule: the larger factor, every reason once; an undisturbed side adds nothing
    w = worst_disturbance(calmer, busy)
    assert (w.disturbed, w.factor, w.reasons) == (True, 2.6, calmer.reasons + busy.reasons)
    assert worst_disturbance(None, calmer) is calmer and worst_disturbance(busy, Disturbance(False)) is busy
    assert worst_disturbance(None, None) is None
    assert not worst_disturbance(Disturbance(False), None).disturbed


def test_a_disturbed_point_whose_ci_reaches_beyond_the_threshold_is_undecided():
    # a +50 % change measured +7 % [-38, +83] on a busy host: not a pass
    v = rows({"verdict": "inconclusive", "ratio": 1.07, "ci_low": 0.62, "ci_high": 1.83,
              "note": "CI crosses the 25% threshold: needs >= 105 processes per side"},
             {"verdict": "unchanged", "metric": "dispatch_count", "ratio": 1.0, "ci_low": 0.5, "ci_high": 2.0})
    assert point_outcome(v).outcome == "passed"  # quiet: the estimate lies inside the threshold
    out = apply_disturbance(v, LOUD)
    o = point_outcome(out)
    assert o.outcome == "undecided" and o.rows == 1 and o.decide.startswith("a re-run on a quiet machine")
    assert out["note"].iloc[1] == ""  # context rows are not gated


# -- apply_baseline_disturbance --------------------------------------------------------------------

SLOW_BASE = Disturbance(True, ("5.0 runnable threads on 2 cores",), 2.0)
HIDDEN = ("disturbed baseline: recorded while 5.0 runnable threads on 2 cores ({was}its processes may have "
          "run up to x2.00 slower, so the CI reaches beyond the threshold; re-record the baseline on a quiet "
          "machine)")
FAKED = "was improvement, within the x2.00 the baseline's contention can explain (5.0 runnable threads on 2 cores)"


@pytest.mark.parametrize("metric", ["dur_ns", BUSBW])
@pytest.mark.parametrize("lo_w, hi_w, verdict, after, note", [
    # threshold 0.25, baseline factor 2: hidden when hi_w x 2 > 1.25 (hi_w > 0.625); an
    # improvement is real only below 0.75 / 2 = 0.375
    (1.3, 2.1, "regression", "regression", ""),  # a slow baseline never makes a candidate slower
    (0.9, 1.1, "unchanged", "inconclusive", HIDDEN.format(was="was unchanged, ")),
    (0.5, 0.63, "unchanged", "inconclusive", HIDDEN.format(was="was unchanged, ")),
    (0.5, 0.62, "unchanged", "unchanged", ""),  # x2 stays inside the threshold
    (0.6, 1.5, "inconclusive", "inconclusive", HIDDEN.format(was="")),
    (0.4, 0.7, "improvement", "inconclusive", HIDDEN.format(was="was improvement, ")),
    (0.4, 0.6, "improvement", "inconclusive", FAKED),  # not hidden, but the baseline explains it
    (0.3, 0.37, "improvement", "improvement", ""),  # far better than the contention explains
    (0.3, 0.38, "improvement", "inconclusive", FAKED),
])
def test_a_disturbed_baseline_hides_a_slower_candidate(metric, lo_w, hi_w, verdict, after, note):
    from pytest_gemmperf.gate.confirm import apply_baseline_disturbance

    out = _check_rule(apply_baseline_disturbance, SLOW_BASE, metric, lo_w, hi_w, verdict, after, note)
    o = point_outcome(out)
    assert o.outcome == ("failed" if after == "regression" else "undecided" if note.startswith("disturbed") else
                         "passed")
    if o.outcome == "undecided":
        assert o.decide == "the baseline re-recorded on a quiet machine (--gemmperf-update-baselines)"


def test_a_disturbed_baseline_leaves_context_rows_quiet_baselines_and_empty_tables_alone():
    from pytest_gemmperf.gate.confirm import apply_baseline_disturbance

    v = rows({"verdict": "unchanged", "metric": "dispatch_count", "ratio": 1.0, "ci_low": 0.9, "ci_high": 1.1},
             {"verdict": "unchanged", "ratio": 1.0, "ci_low": 0.9, "ci_high": 1.1, "note": "first"},
             {"verdict": "new", "ratio": NAN, "ci_low": NAN, "ci_high": NAN})
    out = apply_baseline_disturbance(v, SLOW_BASE)
    assert out["verdict"].tolist() == ["unchanged", "inconclusive", "new"]
    assert out["note"].tolist() == ["", "first; " + HIDDEN.format(was="was unchanged, "), ""]
    assert apply_baseline_disturbance(v, None) is v
    assert apply_baseline_disturbance(v, Disturbance(False, ("x",), 3.0)) is v
    assert apply_baseline_disturbance(v.iloc[:0], SLOW_BASE).empty
    # factor 1 (disturbed, e.g. a GPU clock note): only rows beyond the threshold itself
    one = Disturbance(True, ("busy",), 1.0)
    assert apply_baseline_disturbance(v, one)["verdict"].tolist() == ["unchanged", "unchanged", "new"]


def test_a_point_judge_applies_the_baselines_contention_after_the_candidates():
    from pytest_gemmperf.gate.confirm import PointJudge

    def compare_with(cand, cfg):  # +3 % [-5, +12]: passes on a quiet baseline
        return rows({"verdict": "unchanged", "ratio": 1.03, "ci_low": 0.95, "ci_high": 1.12, "q_value": 0.6})

    quiet = PointJudge(compare_with, pd.DataFrame({"unit": range(4)}), GateConfig(), ConfirmConfig(rounds=0))
    assert point_outcome(quiet.verdicts).outcome == "passed"
    judge = PointJudge(compare_with, pd.DataFrame({"unit": range(4)}), GateConfig(), ConfirmConfig(rounds=0),
                       None, SLOW_BASE)
    assert point_outcome(judge.verdicts).outcome == "undecided"
    # every round keeps it: re-running the candidate cannot clean the baseline
    judge.add_round(pd.DataFrame({"unit": range(4, 8)}), None, kind=DECIDE)
    assert point_outcome(judge.verdicts).outcome == "undecided"
    assert "disturbed baseline" in judge.verdicts["note"].iloc[0]


# -- PointJudge ----------------------------------------------------------------------------------

def _processes(d: float, n: int = 4) -> pd.DataFrame:
    """``n`` processes, each ``d`` slower (log ratio) than the baseline, a little spread."""
    return pd.DataFrame({"d": [d + 0.01 * (i - (n - 1) / 2) for i in range(n)]})


def _judge(first: pd.DataFrame, rounds: int = 3, disturbance=None):
    """A PointJudge over a comparison whose verdict follows the mean slowdown of the processes
    (regression beyond +25 % when significant at the gate's FDR); it records each call."""
    calls: list[tuple[int, float]] = []

    def compare_with(samples, cfg):
        calls.append((len(samples), round(cfg.fdr, 6)))
        d, se = float(samples["d"].mean()), 0.05 / math.sqrt(len(samples))
        z = (d - math.log(1.25)) / se
        verdict = "regression" if z > sps.norm.ppf(1 - cfg.fdr) else "unchanged"
        return rows(est(d, se, verdict=verdict, n_cand=len(samples), q_value=0.001 if z > 0 else 0.9))

    return PointJudge(compare_with, first, GateConfig(fdr=0.05), ConfirmConfig(rounds=rounds), disturbance), calls


def test_a_point_judge_starts_from_the_first_look():
    first = _processes(math.log(1.5))
    j, calls = _judge(first, disturbance=LOUD)
    assert calls == [(4, 0.05)] and j.first["verdict"].tolist() == ["regression"]
    # the verdicts shown carry the first look's disturbance; the rounds go from the first look
    assert j.verdicts["verdict"].tolist() == ["inconclusive"]
    assert j.verdicts["note"].tolist() == [DOWN.format(v="regression")]
    assert j.combined is first and j.reruns.empty and list(j.reruns.columns) == ["d"]
    assert (j.rounds, j.decide_rounds, j.changes) == (0, 0, [])
    assert j.trigger()["verdict"].tolist() == ["regression"]


def test_a_confirmation_round_is_owed_for_a_suspicious_first_look_until_settled_or_the_rounds_run_out():
    j, _ = _judge(_processes(math.log(1.5)))
    assert j.confirm_owed() is True
    quiet, _ = _judge(_processes(0.0))
    assert quiet.confirm_owed() is False and quiet.trigger().empty
    assert _judge(_processes(math.log(1.5)), rounds=0)[0].confirm_owed() is False  # confirmation off
    assert _judge(_processes(math.log(1.5)), rounds=1)[0].confirm_owed() is True
    unsettled = rows({"verdict": "inconclusive", "ratio": 1.4, "q_value": 0.1})
    j.rounds, j.verdicts = 1, unsettled
    assert j.confirm_owed() is True
    j.verdicts = rows({"verdict": "regression", "ratio": 1.4})
    assert j.confirm_owed() is False  # a confirmed regression
    j.verdicts = rows({"verdict": "inconclusive", "ratio": 1.1})
    assert j.confirm_owed() is False  # nothing suspicious any more
    j.rounds, j.verdicts = 3, unsettled
    assert j.confirm_owed() is False  # every round done


def test_confirmation_rounds_judge_the_combined_sample_at_their_share_and_the_reruns_alone():
    first = _processes(math.log(1.5))
    j, calls = _judge(first)
    r1, r2 = _processes(math.log(1.5)), _processes(math.log(1.45))
    out = j.add_round(r1)
    assert j.rounds == 1 and j.decide_rounds == 0 and out is j.verdicts
    # alone at the whole budget, combined at round 1's share (0.1), then relabelled at the whole
    assert calls[1:] == [(4, 0.05), (8, 0.005), (8, 0.05)]
    assert out["verdict"].tolist() == ["regression"] and j.changes == []
    assert out["note"].iloc[0] == "confirmed by a re-run (8 candidate processes)"
    j.add_round(r2, kind=CONFIRM)
    assert j.rounds == 2 and calls[4][0] == 8 and calls[5] == (12, 0.005)
    pd.testing.assert_frame_equal(j.combined, pd.concat([first, r1, r2], ignore_index=True))
    pd.testing.assert_frame_equal(j.reruns, pd.concat([r1, r2], ignore_index=True))


def test_a_transient_first_look_is_not_confirmed_and_the_change_is_named():
    j, _ = _judge(_processes(math.log(1.5)))
    out = j.add_round(_processes(0.0))
    assert out["verdict"].tolist() == ["unchanged"]
    assert j.changes == [{"point": "p", "kernel": "k", "metric": "dur_ns", "before": "regression",
                          "after": "unchanged"}]


def test_a_decide_round_is_judged_at_the_whole_budget_with_the_rounds_disturbance():
    first = _processes(math.log(1.5))
    j, calls = _judge(first)
    out = j.add_round(_processes(math.log(1.5)), disturbance=LOUD, kind=DECIDE)
    assert (j.rounds, j.decide_rounds) == (0, 1)
    assert calls[1:] == [(8, 0.05), (4, 0.05)]
    assert out["verdict"].tolist() == ["inconclusive"] and "noisy environment" in out["note"].iloc[0]
    # a quiet round after it: the combined sample still holds the disturbed round's processes
    j.add_round(_processes(math.log(1.5)), kind=DECIDE)
    assert j.decide_rounds == 2 and j.verdicts["verdict"].tolist() == ["inconclusive"]
    assert "noisy environment" in j.verdicts["note"].iloc[0]
