"""Family-wide shifts (issue 11): per-process factors within each side, the shared movement
in every kernel's change with its own variance, the sampling floor at every count."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.gate import durations, noise_floors, stats
from pytest_gemmperf.gate.compare import GateConfig, compare
from pytest_gemmperf.gate.samples import compact_samples


def side(tag: str, seed: int, *, n_kernels: int = 10, units: int = 4, n: int = 40, sigma_process: float = 0.01,
         scale: float = 0.0, only: tuple[int, ...] | None = None) -> pd.DataFrame:
    """GEMM-only test: ``n_kernels`` kernels, a per-process factor shared by all of them,
    ``scale`` applied to every kernel (or to ``only``)."""
    rng = np.random.default_rng(seed)
    values = []  # one frame at the end, not one per kernel and process
    for u in range(units):
        a = rng.normal(0, sigma_process)
        for i in range(n_kernels):
            s = scale if only is None or i in only else 0.0
            values.append(2e4 * (i + 1) * (1 + s) * np.exp(a + rng.normal(0, 0.003) + 0.02 * rng.standard_normal(n)))
    names = [f"Cijk_k{i:02d}" for i in range(n_kernels)]
    return compact_samples(pd.DataFrame({"point": "p", "kernel": np.tile(np.repeat(names, n), units), "metric": "dur_ns",
                                         "unit": np.repeat([f"{tag}/{u}" for u in range(units)], n_kernels * n),
                                         "value": np.concatenate(values)}))


def kernel_rows(v: pd.DataFrame) -> pd.DataFrame:
    return v[(v["metric"] == "dur_ns") & (v["kernel"] != "*")]


def test_a_family_wide_slowdown_is_a_regression_of_every_kernel():
    v = compare(side("b", 1), side("c", 2, scale=0.07))
    k = kernel_rows(v)
    assert (k["verdict"] == "regression").mean() >= 0.8
    assert k["ratio"].to_numpy() == pytest.approx(1.07, abs=0.02)
    star = v[v["kernel"] == "*"].iloc[0]
    assert star["ratio"] == pytest.approx(1.07, abs=0.015) and "shared by all kernels" in star["note"]
    # at threshold 0 a 4 % family slowdown is found too (6 processes per side: with 4 and 1 %
    # process noise the sides' mean factors leave ~75 % power, benchmarks/gate_regimes.py)
    v0 = compare(side("b", 3, units=6), side("c", 4, units=6, scale=0.04), GateConfig(threshold=0.0))
    assert (kernel_rows(v0)["verdict"] == "regression").mean() >= 0.8


def test_the_shared_factor_widens_every_ci_instead_of_vanishing():
    # large process noise: the sides' mean factors differ by chance, and every kernel's CI
    # must carry that (it is the same term in every kernel's difference)
    quiet = compare(side("b", 5, sigma_process=0.001), side("c", 6, sigma_process=0.001))
    noisy = compare(side("b", 5, sigma_process=0.03), side("c", 6, sigma_process=0.03))
    width = lambda v: np.log(kernel_rows(v)["ci_high"] / kernel_rows(v)["ci_low"]).median()  # noqa: E731
    assert width(noisy) > 3 * width(quiet)
    for seed in range(8):  # A/A with 3 % process noise: no kernel may be called changed
        v = compare(side("b", 10 + seed, sigma_process=0.03), side("c", 50 + seed, sigma_process=0.03),
                    GateConfig(threshold=0.0))
        assert not v["verdict"].isin(["regression", "improvement"]).any(), seed


def test_one_kernel_among_steady_ones_keeps_the_within_process_precision():
    # the sides' mean factors differ by chance here (the others read -1.7 %): by default the
    # total's interval (+1.2 %, crossing 1) guards the verdict; sized by its change relative
    # to the other kernels (+2.9 %) it is a regression
    b, c = side("b", 7, sigma_process=0.015), side("c", 8, scale=0.03, only=(4,), sigma_process=0.015)
    k = kernel_rows(compare(b, c, GateConfig(threshold=0.0))).set_index("kernel")
    assert k.loc["Cijk_k04", "verdict"] == "inconclusive" and k.loc["Cijk_k04", "q_value"] <= 0.01
    k = kernel_rows(compare(b, c, GateConfig(threshold=0.0, size_by_relative=True))).set_index("kernel")
    assert k.loc["Cijk_k04", "verdict"] == "regression"
    assert "relative to the other kernels" in k.loc["Cijk_k04", "note"]
    assert not (k.drop("Cijk_k04")["verdict"] == "regression").any()
    # with the sides' factors alike the default finds it too
    k = kernel_rows(compare(side("b", 7, sigma_process=0.002),
                            side("c", 8, sigma_process=0.002, scale=0.03, only=(4,)), GateConfig(threshold=0.0)))
    assert k.set_index("kernel").loc["Cijk_k04", "verdict"] == "regression"


def test_offsets_are_centred_within_each_side_and_blind_to_a_shift_between_them():
    rng = np.random.default_rng(0)
    y = rng.normal(0, 0.01, (12, 8)) + rng.normal(0, 0.02, 8)[None, :]
    cnt = np.full(y.shape, 50)
    cfg = GateConfig()
    off, n = durations._shared_offsets(y, cnt, cfg, 4)
    assert n == 12 and off[:4].mean() == pytest.approx(0, abs=1e-12) and off[4:].mean() == pytest.approx(0, abs=1e-12)
    shifted = y.copy()
    shifted[:, 4:] += 0.07
    off2, _ = durations._shared_offsets(shifted, cnt, cfg, 4)
    np.testing.assert_allclose(off2, off, atol=1e-12)


def test_sampling_floor_holds_at_every_count_unless_the_kernel_contradicts_it():
    se = np.full((3, 8), 0.01)
    cnt = np.array([[10] * 8, [23] * 8, [500] * 8])
    df = np.array([6.0, 6.0, 36.0])
    s2 = np.array([1e-4, 1e-4, 1e-6])  # the third is 100x below its floor on 36 df: a fixed shape mix
    floor = noise_floors._sampling_floor(se, cnt, s2, df)
    assert floor[0] == pytest.approx(1e-4) and floor[1] == pytest.approx(1e-4)  # 23 > the old cut-off of 21
    assert np.isnan(floor[2])
    # on 6 df (a fresh 4-vs-4 comparison) a tiny variance is no evidence against the floor:
    # per-process medians of clumpy kernels are far from normal
    assert noise_floors._sampling_floor(se, cnt, s2, np.full(3, 6.0))[2] == pytest.approx(1e-4)


def test_kernel_pvalue_is_simes_of_total_and_relative_and_the_relative_one_needs_the_same_direction():
    p, by_rel = durations._kernel_pvalue(np.array([0.2, 0.2, 0.2]), np.array([0.001, 0.001, np.nan]),
                                         np.array([0.03, -0.03, 0.03]), np.array([0.03, 0.01, 0.03]))
    assert by_rel.tolist() == [True, False, False]
    assert p[0] == pytest.approx(0.002)  # min(2 * 0.001, 0.2)
    assert p[1] == pytest.approx(0.4)  # faster than the rest while the total rose: only the total counts
    assert p[2] == pytest.approx(0.4)


def test_two_processes_per_side_never_give_a_definite_verdict_on_noise():
    for seed in range(6):
        v = compare(side("b", 100 + seed, units=2), side("c", 200 + seed, units=2), GateConfig(threshold=0.0))
        assert not (v["verdict"] == "regression").any(), seed


def test_a_fixed_shape_mix_loses_the_floor_and_keeps_its_power(monkeypatch):
    # one kernel name covers two GEMM shapes in a fixed 50/50 mix: its median sits between
    # the modes, where the i.i.d. order-statistic noise is huge, but the mix (and so every
    # central quantile) is the same in every process
    def mixed(tag, seed, slow=0.0):
        rng = np.random.default_rng(seed)
        frames = [side(tag, seed)]
        for u in range(4):
            a = rng.normal(0, 0.001)  # steady apart from its shape mix
            shape = np.tile([1.0, 1.5], 30)
            v = 1e5 * shape * (1 + slow) * np.exp(a + rng.normal(0, 0.002) + 0.01 * rng.standard_normal(60))
            frames.append(compact_samples(pd.DataFrame({"point": "p", "kernel": "Cijk_mixed", "metric": "dur_ns",
                                                        "unit": f"{tag}/{u}", "value": v})))
        return pd.concat(frames, ignore_index=True)

    b, c = mixed("b", 1), mixed("c", 2, slow=0.05)
    v = compare(b, c, GateConfig(threshold=0.0)).set_index("kernel")
    assert v.loc["Cijk_mixed", "verdict"] == "regression"
    monkeypatch.setattr(noise_floors, "FLOOR_QUANTILE_P", 0.0)  # judged on the median alone
    v = compare(b, c, GateConfig(threshold=0.0)).set_index("kernel")
    assert v.loc["Cijk_mixed", "verdict"] != "regression"


def test_hierarchical_rule_gates_the_kernel_totals_on_the_shared_shift():
    from pytest_gemmperf.gate.compare import compare_stats

    cfg = GateConfig(threshold=0.0)
    # family shift: '*' is tested in its own family at shared_alpha * fdr, then opens the
    # kernels' totals (a second family at the full level); its own rejection stands
    st = compare_stats(side("b", 21), side("c", 22, scale=0.07), cfg)
    star = st[st["kernel"] == "*"].iloc[0]
    assert star["q_value"] == pytest.approx(min(star["p_value"] / cfg.shared_alpha, 1.0))
    k = kernel_rows(st)
    opened = stats.bh_qvalues(k["p_total"].to_numpy(float))
    assert star["q_value"] <= cfg.fdr
    if star["q_value"] <= cfg.fdr:
        assert (k["q_value"].to_numpy(float) <= opened + 1e-12).all()
    # one kernel among steady ones: '*' stays quiet, the kernel is found by its relative change
    st1 = compare_stats(side("b", 23), side("c", 24, scale=0.05, only=(3,)), cfg)
    assert st1.loc[st1["kernel"] == "*", "q_value"].item() > cfg.fdr
    row = st1[(st1["kernel"] == "Cijk_k03") & (st1["metric"] == "dur_ns")].iloc[0]
    assert row["q_value"] <= cfg.fdr and row["by_rel"] is True
    # the plain rule is still there
    plain = compare_stats(side("b", 23), side("c", 24, scale=0.05, only=(3,)), GateConfig(multiplicity="simes"))
    assert "by_rel" not in plain.columns or not plain["by_rel"].eq(True).all()
    with pytest.raises(ValueError):
        compare_stats(side("b", 23), side("c", 24), GateConfig(multiplicity="bonferroni"))


@pytest.mark.slow  # 30 simulated A/A tests
def test_hierarchical_rule_keeps_the_per_test_false_alarm_budget():
    # A/A, threshold 0: no '*' and no kernel rejected in 30 synthetic tests (the rate is
    # measured in benchmarks/gate_regimes.py; this guards against a gross error of the split)
    hits = 0
    for seed in range(30):
        v = compare(side("b", 100 + seed), side("c", 200 + seed), GateConfig(threshold=0.0))
        hits += int((v["verdict"] == "regression").any())
    assert hits <= 1
