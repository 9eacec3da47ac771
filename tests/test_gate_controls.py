"""Within-process controls: the point's ungated kernels tell the gate each process's shared
factor, so a change of every gated kernel is no longer hidden by the sides' mean factor.

``gate_samples`` writes ``control_ns`` rows (per process, the median duration of every kernel
the regexes do not select); ``gate/durations.py`` regresses the gated kernels' per-process
factor on the controls' and takes the prediction out of each kernel's total; records without
controls are judged as before; controls that moved themselves are not used.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.gate import durations
from pytest_gemmperf.gate.compare import GateConfig, _beyond, compare, compare_stats, variance_contribution
from pytest_gemmperf.gate.metrics import CONTROL_NS
from pytest_gemmperf.gate.samples import gate_samples

GEMMS = 12
OTHERS = 40


def dispatches(rng: np.random.Generator, factors: np.ndarray, *, gemm_change: float = 0.0,
               other_change: float = 0.0, other_factors: np.ndarray | None = None, steps: int = 12,
               first_pid: int = 0) -> pd.DataFrame:
    """One side: a process per entry of ``factors`` (log per-process factor of every kernel;
    ``other_factors``: the ungated kernels' own, else the same), GEMMs and other kernels with
    0.3 % kernel-specific process noise and 1 % dispatch noise."""
    rows = []
    names = [f"Cijk_Ailk_Bljk_MT{64 + 16 * k}x128" for k in range(GEMMS)] + \
        [f"void elementwise_kernel_{k}<float>" for k in range(OTHERS)]
    base = np.exp(np.linspace(np.log(5e3), np.log(2e5), len(names)))
    for u, f in enumerate(factors):
        g = f if other_factors is None else other_factors[u]
        own = rng.normal(0, 0.003, len(names))
        t = 0
        for s in range(steps):
            for k, name in enumerate(names):
                gemm = k < GEMMS
                level = (f + np.log1p(gemm_change)) if gemm else (g + np.log1p(other_change))
                dur = int(base[k] * np.exp(level + own[k] + rng.normal(0, 0.01)))
                rows.append((name, "gemm" if gemm else "elementwise", t, dur, first_pid + u))
                t += dur + 100
    d = pd.DataFrame(rows, columns=["kernel", "category", "start_ns", "dur_ns", "pid"])
    return d.assign(point="p", host="h", rank=0, run=first_pid + d["pid"])


def side(rng, factors, **kw) -> pd.DataFrame:
    return gate_samples(dispatches(rng, np.asarray(factors, float), **kw), kernels=["^Cijk_"])


def without_controls(s: pd.DataFrame) -> pd.DataFrame:
    return s[s["metric"] != CONTROL_NS].reset_index(drop=True)


def test_gate_samples_write_the_ungated_kernels_as_controls() -> None:
    rng = np.random.default_rng(0)
    d = dispatches(rng, np.zeros(2), steps=3)
    s = gate_samples(d, kernels=["^Cijk_"])
    ctl = s[s["metric"] == CONTROL_NS]
    assert set(ctl["kernel"]) == {k for k in d["kernel"] if not k.startswith("Cijk_")}
    assert len(ctl) == OTHERS * 2  # one row per kernel and process
    one = d[(d["kernel"] == "void elementwise_kernel_3<float>") & (d["pid"] == 1)]["dur_ns"]
    got = ctl[(ctl["kernel"] == "void elementwise_kernel_3<float>") & ctl["unit"].str.contains("/1/")]["value"]
    assert got.iloc[0] == pytest.approx(np.median(one))
    assert not (gate_samples(d)["metric"] == CONTROL_NS).any()  # every kernel gated: no controls


def test_a_family_shift_hidden_by_the_process_factor_is_found_against_the_controls() -> None:
    # the candidate's processes happen to run 2 % fast (their shared factor, 1.5 % sd), every
    # GEMM is 4 % slower: the gated kernels alone see +2 %, not significant against the sides'
    # mean factor; the controls see -2 %, within what that factor does by chance
    rng = np.random.default_rng(1)
    fb = np.array([0.015, -0.015, 0.01, -0.01])
    fc = fb - 0.02
    base, cand = side(rng, fb), side(rng, fc, gemm_change=0.04)
    cfg = GateConfig(threshold=0.0)
    with_ctl = compare(base, cand, cfg)
    alone = compare(without_controls(base), without_controls(cand), cfg)
    gemm = lambda v: v[(v["metric"] == "dur_ns") & v["kernel"].str.startswith("Cijk_")]  # noqa: E731
    assert (gemm(with_ctl)["verdict"] == "regression").mean() >= 0.9
    assert np.allclose(gemm(with_ctl)["ratio"], 1.04, atol=0.015)
    assert not (gemm(alone)["verdict"] == "regression").any()
    assert "within-process controls" in with_ctl[with_ctl["kernel"] == "*"]["note"].iloc[0]


def test_a_record_without_controls_is_judged_as_before() -> None:
    rng = np.random.default_rng(2)
    base = side(rng, rng.normal(0, 0.01, 4))
    cand = side(rng, rng.normal(0, 0.01, 4), gemm_change=0.03)
    old = compare_stats(without_controls(base), without_controls(cand))
    for b, c in ((without_controls(base), cand), (base, without_controls(cand))):
        new = compare_stats(b, c)
        assert (new["controls"].fillna(0) == 0).all()
        pd.testing.assert_frame_equal(new[old.columns], old)


def test_controls_with_their_own_factor_raise_no_alarm() -> None:
    # the ungated kernels have a per-process factor of their own (1 %, independent of the
    # GEMMs'): the regression finds no relation and the gated kernels keep their noise
    alarms = 0
    for seed in range(12):
        rng = np.random.default_rng(100 + seed)
        base = side(rng, rng.normal(0, 0.01, 4), other_factors=rng.normal(0, 0.01, 4), steps=6)
        cand = side(rng, rng.normal(0, 0.01, 4), other_factors=rng.normal(0, 0.01, 4), steps=6)
        v = compare(base, cand, GateConfig(threshold=0.0))
        alarms += bool(v["verdict"].isin(["regression", "improvement"]).any())
    assert alarms <= 1


def test_controls_that_moved_themselves_are_not_used() -> None:
    # the code change made every ungated kernel 6 % faster and left the GEMMs alone: measured
    # against those controls every GEMM would read 6 % slower; the gate sees that the controls
    # moved and judges the GEMMs without them
    rng = np.random.default_rng(3)
    base = side(rng, rng.normal(0, 0.01, 4))
    cand = side(rng, rng.normal(0, 0.01, 4), other_change=-0.06)
    v = compare(base, cand, GateConfig(threshold=0.0))
    gemm = v[(v["metric"] == "dur_ns") & v["kernel"].str.startswith("Cijk_")]
    assert not (gemm["verdict"] == "regression").any()
    assert "moved" in v[v["kernel"] == "*"]["note"].iloc[0]


def test_a_whole_workload_slowdown_is_still_the_shared_rows() -> None:
    rng = np.random.default_rng(4)
    fb, fc = rng.normal(0, 0.01, 4), rng.normal(0, 0.01, 4)
    base = side(rng, fb)
    cand = side(rng, fc, gemm_change=0.08, other_change=0.08)
    v = compare(base, cand, GateConfig(threshold=0.0))
    assert v[v["kernel"] == "*"]["verdict"].iloc[0] == "regression"


def test_the_shared_factor_has_a_variance_history() -> None:
    rng = np.random.default_rng(5)
    runs = [without_controls(side(rng, rng.normal(0, 0.01, 4), steps=4)) for _ in range(4)]
    hist = pd.concat([variance_contribution(r) for r in runs], ignore_index=True)
    star = hist[hist["kernel"] == "*"]
    assert len(star) == 4 and (star["df"] == 3).all()
    base, cand = runs[0], without_controls(side(rng, rng.normal(0, 0.01, 4), steps=4))
    fresh = compare_stats(base, cand)
    held = compare_stats(base, cand, history=hist)
    df = lambda st: float(st[st["kernel"] == "*"]["df_t"].iloc[0])  # noqa: E731
    assert df(fresh) == 6 and df(held) == 6 + 12


def test_the_threshold_is_crossed_with_the_rows_corrected_together() -> None:
    # ten significant rows whose one-sided p of "within the threshold" are spread as those of
    # ten rows that all moved by less than the threshold: one of them alone clears its 80 %
    # bound, corrected over the ten it does not; a single such row still does
    thr = 0.05
    se = 0.01
    z = np.array([1.3, 0.2, -0.1, -0.3, -0.5, -0.7, -0.9, -1.1, -1.3, -1.5])
    r = np.exp(np.log1p(thr) + z * se)
    t = 2.0  # 95 % two-sided t quantile scale (large df)
    df = np.full(len(r), 1e6)
    half = 1.959964 * se
    lo, hi = r * np.exp(-half), r * np.exp(half)
    cfg = GateConfig(threshold=thr)
    up = np.ones(len(r), bool)
    reg, _ = _beyond(up, ~up, df, cfg, r, lo, hi, np.full(len(r), thr), np.zeros(len(r), bool))
    assert not reg.any()
    one = slice(0, 1)
    reg1, _ = _beyond(up[one], ~up[one], df[one], cfg, r[one], lo[one], hi[one], np.full(1, thr), np.zeros(1, bool))
    assert reg1.all()
    del t


def test_control_fit_by_hand() -> None:
    # offsets exactly twice the controls' (within each side), controls unchanged: slope 2,
    # no residual, nothing of the sides' mean factor left
    ctl = np.array([0.01, -0.01, 0.02, -0.02, 0.015, -0.015, 0.0, 0.0])
    x = np.vstack([5 + ctl, 7 + ctl + 1e-4 * np.arange(8) % 2])
    off = np.zeros(8)
    for g in (slice(0, 4), slice(4, 8)):
        c = np.median(x[:, g] - x[:, g].mean(axis=1, keepdims=True), axis=0)
        off[g] = 2 * (c - c.mean())
    fit = durations._control_fit(off, x, 4, 4)
    assert fit.slope == pytest.approx(2.0)
    assert fit.var == pytest.approx(0.0, abs=1e-12)
    assert fit.df == 5 and fit.n == 2
    assert durations._control_fit(off[:4], x[:, :4], 2, 2) is None  # 1 df: too few processes


def test_the_plan_sizes_a_kernel_with_what_the_controls_leave_of_the_shared_factor() -> None:
    from pytest_gemmperf.gate import power as pw

    rng = np.random.default_rng(6)
    record = side(rng, rng.normal(0, 0.015, 6), steps=6)
    with_ctl = pw.row_noise(record)[0]
    alone = pw.row_noise(without_controls(record))[0]
    k = lambda rows: [r for r in rows if r.metric == "dur_ns"]  # noqa: E731
    assert all(r.shared_params == 3 for r in k(with_ctl)) and all(r.shared_params == 2 for r in k(alone))
    assert np.median([r.shared_sd for r in k(with_ctl)]) < 0.5 * np.median([r.shared_sd for r in k(alone)])
    rule = pw.decision(GateConfig(), 20)
    p_ctl = pw.power(k(with_ctl), 0.08, 6, 6, rule)
    p_alone = pw.power(k(alone), 0.08, 6, 6, rule)
    assert np.median(p_ctl) > np.median(p_alone)
