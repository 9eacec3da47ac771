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
from pytest_gemmperf.gate.confirm import (ConfirmConfig, apply_disturbance, judge, judge_round, reproduced,
                                          settled, suspicious)
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
    (1.3, 2.1, "inconclusive", "inconclusive", ""),
])
def test_disturbance_downgrades_unless_far_beyond(metric, lo_w, hi_w, verdict, after, note):
    r = {"metric": metric, "ratio": math.sqrt(lo_w * hi_w), "ci_low": lo_w, "ci_high": hi_w}
    if metric == BUSBW:  # the same change, stored the other way up
        r = {"metric": metric, "ratio": 1 / r["ratio"], "ci_low": 1 / hi_w, "ci_high": 1 / lo_w}
    v = rows(r | {"verdict": verdict, "note": ""})
    out = apply_disturbance(v, LOUD)
    assert out["verdict"].tolist() == [after]
    assert out["note"].tolist() == [note]
    assert v["verdict"].tolist() == [verdict]  # a copy


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
    assert out["note"].iloc[1] == "wide"
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
