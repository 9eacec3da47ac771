"""Change-point detection over the run history (``pytest_gemmperf/history/changepoints.py``).

Synthetic histories with a known truth: 80 kernels, 4 processes per run, a per-process factor
shared by the kernels of a process (sd 1 %), a per-run kernel drift (sd 0.3 %) and a small
dispatch-median noise, as the benchmark's real-trace histories have
(``benchmarks/history_detection.py``). Seeds are fixed, so every assertion is deterministic.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.stats import bh_qvalues
from pytest_gemmperf.history.changepoints import (CHANGE_COLUMNS, EXTRA_COLUMNS, detect_changes,
                                                  recent_regressions)

T0 = pd.Timestamp("2026-03-01", tz="UTC")


def make_history(n_runs: int = 40, n_kernels: int = 80, units: int = 4, *, metric: str = "dur_ns",
                 test: str = "perf_tests/test_a.py::test_gemm", seed: int = 0, step: tuple | None = None,
                 creep: tuple | None = None, sd_process: float = 0.01, sd_run: float = 0.003,
                 hw_key: str = "mi300x") -> pd.DataFrame:
    """History rows (store layout). ``step=(kernel, first_run_index, factor)``;
    ``creep=(kernel, first_run_index, rate)``: factor (1 + rate)^(r - first + 1) from that run."""
    rng = np.random.default_rng(seed)
    base = np.exp(rng.uniform(8, 14, n_kernels))
    R, K, U = (a.ravel() for a in np.meshgrid(np.arange(n_runs), np.arange(n_kernels), np.arange(units),
                                              indexing="ij"))
    proc = rng.normal(0, sd_process, (n_runs, units))[R, U]
    drift = rng.normal(0, sd_run, (n_runs, n_kernels))[R, K]
    value = base[K] * np.exp(proc + drift + rng.normal(0, 0.003, len(R)))
    if step is not None:
        k, at, f = step
        value = value * np.where((K == k) & (R >= at), f, 1.0)
    if creep is not None:
        k, at, rate = creep
        value = value * np.where(K == k, (1 + rate) ** np.clip(R - at + 1, 0, None), 1.0)
    return pd.DataFrame({
        "run_id": [f"run{r:03d}" for r in R], "time": T0 + pd.to_timedelta(R, "D"),
        "commit": [f"c{r:03d}" for r in R], "branch": "main", "hw_key": hw_key, "test": test, "point": "ch28-th256",
        "kernel": [f"kernel_{k:02d}" for k in K], "metric": metric, "unit": [f"host/{u}/0/0" for u in U],
        "value": value})


def test_flat_histories_report_nothing():
    # 10 tests x 80 kernels x 40 runs: BH at 1 % across a test's series leaves flat tests silent
    for seed in range(10):
        out = detect_changes(make_history(seed=seed))
        assert out.empty, out
        assert out.attrs == {"series": 80, "short_series": 0}
    assert list(out.columns) == list(CHANGE_COLUMNS + EXTRA_COLUMNS)


def test_step_is_located_and_its_ratio_ci_contains_the_truth():
    h = make_history(step=(7, 24, 1.04), seed=1)
    out = detect_changes(h)
    assert list(out.columns[:len(CHANGE_COLUMNS)]) == list(CHANGE_COLUMNS)
    assert len(out) == 1
    row = out.iloc[0]
    assert row["kernel"] == "kernel_07" and row["metric"] == "dur_ns" and row["direction"] == "regression"
    assert (row["run_before"], row["run_after"], row["commit_after"]) == ("run023", "run024", "c024")
    assert row["time_after"] == T0 + pd.Timedelta(days=24)
    assert row["ci_low"] < 1.04 < row["ci_high"]
    assert row["ci_low"] > 1.0 and abs(row["ratio"] - 1.04) < 0.01
    assert row["q_value"] < 1e-6 and row["runs_before"] == 24 and row["runs_after"] == 16


def test_step_found_within_two_runs_after_it():
    h = make_history(step=(3, 24, 1.04), seed=2)
    first = None
    for n in range(25, 29):  # history as it grows: the step's first run is index 24
        out = detect_changes(h[h["time"] < T0 + pd.Timedelta(days=n)])
        if (out["kernel"] == "kernel_03").any():
            first = n - 24
            break
    # one odd run is not a change (min_segment=2): flagged once a second slow run confirms it
    assert first == 2


def test_a_single_odd_run_is_not_a_change():
    h = make_history(seed=3)
    odd = (h["kernel"] == "kernel_05") & (h["run_id"] == "run020")
    h.loc[odd, "value"] *= 1.08
    assert detect_changes(h).empty


def test_creep_is_flagged_as_a_regression():
    # 0.3 % per run for the last 20 runs: 6 % in all, never more than 0.3 % between two runs
    out = detect_changes(make_history(creep=(11, 20, 0.003), seed=4))
    assert set(out["kernel"]) == {"kernel_11"}
    assert (out["direction"] == "regression").all()
    assert out["index_after"].min() >= 20  # never before the creep began
    assert (out["ratio"] > 1).all()


def test_improvement_and_higher_is_better_direction():
    faster = detect_changes(make_history(step=(2, 20, 0.95), seed=5))
    assert faster["direction"].tolist() == ["improvement"] and faster["ratio"].iloc[0] < 1
    # overlap_fraction: higher is better, so a fall is the regression
    h = make_history(n_kernels=3, metric="overlap_fraction", step=(0, 20, 0.9), seed=6)
    h["value"] = h["value"] / h["value"].max() * 0.8
    fell = detect_changes(h)
    assert fell["direction"].tolist() == ["regression"] and fell["ratio"].iloc[0] < 1
    rose = detect_changes(make_history(n_kernels=3, metric="coll_busbw_gbps", step=(1, 20, 1.1), seed=7))
    assert rose["direction"].tolist() == ["improvement"]


def test_q_values_are_bh_across_all_series_of_a_test_and_only_that_test():
    h = make_history(step=(9, 20, 1.03), seed=8)
    one = detect_changes(h)
    assert len(one) == 1
    # the only candidate among 80 hypotheses (one per series): BH rank 1 -> q = 80 p
    assert one["q_value"].iloc[0] == pytest.approx(min(1.0, 80 * one["p_value"].iloc[0]), rel=1e-9)
    assert one["q_value"].iloc[0] == pytest.approx(bh_qvalues(np.r_[one["p_value"].to_numpy(), np.ones(79)])[0])
    # another test in the same history is its own family: q of the first is unchanged
    other = make_history(seed=9, test="perf_tests/test_b.py::test_other")
    both = detect_changes(pd.concat([h, other], ignore_index=True))
    assert len(both) == 1
    assert both["q_value"].iloc[0] == pytest.approx(one["q_value"].iloc[0])
    # the same history on another hw_key is another family and another series
    twin = detect_changes(pd.concat([h, h.assign(hw_key="mi355x")], ignore_index=True))
    assert sorted(twin["hw_key"]) == ["mi300x", "mi355x"]


def test_within_run_variance_sets_the_floor():
    """Run means that agree perfectly while the processes inside each run scatter by 5 %: a
    1 % step is within what 4 such processes can tell apart, so no change is claimed. With
    processes that agree too, the same 1 % step is certain."""
    runs, pattern = 40, np.exp(np.array([-0.075, -0.025, 0.025, 0.075]))
    level = np.where(np.arange(runs) >= 20, 1.01, 1.0) * 1e5
    rows = [{"run_id": f"r{r:02d}", "time": T0 + pd.Timedelta(days=r), "test": "t", "point": "p", "kernel": "k",
             "metric": "dur_ns", "unit": f"u{u}", "value": level[r] * pattern[(u + r) % 4]}
            for r in range(runs) for u in range(4)]
    scattered = pd.DataFrame(rows)
    assert detect_changes(scattered).empty
    steady = scattered.assign(value=np.repeat(level, 4))
    out = detect_changes(steady)
    assert len(out) == 1 and out["index_after"].iloc[0] == 20
    assert out["ratio"].iloc[0] == pytest.approx(1.01)


def test_fewer_processes_in_a_run_weigh_less():
    # the same run means after a 2 % step; in the second history each late run has 1 process
    # (holding its run's mean) instead of 4: those runs are noisier, the evidence weaker
    h = make_history(n_kernels=1, step=(0, 30, 1.02), seed=10)
    late = h["run_id"] >= "run030"
    lone = (h[late].groupby("run_id", as_index=False).agg({**{c: "first" for c in h.columns if c != "value"},
                                                           "value": "mean"}))[h.columns]
    four = detect_changes(h)
    one = detect_changes(pd.concat([h[~late], lone], ignore_index=True))
    assert len(four) == 1 and len(one) == 1
    assert four["ratio"].iloc[0] == pytest.approx(one["ratio"].iloc[0], rel=1e-3)
    assert one["p_value"].iloc[0] > 10 * four["p_value"].iloc[0]
    assert one["ci_high"].iloc[0] - one["ci_low"].iloc[0] > four["ci_high"].iloc[0] - four["ci_low"].iloc[0]


def test_short_series_claim_nothing():
    h = make_history(n_runs=5, step=(0, 3, 1.5), seed=11)
    out = detect_changes(h)
    assert out.empty and out.attrs == {"series": 0, "short_series": 80}
    assert len(detect_changes(make_history(n_runs=6, n_kernels=2, step=(0, 3, 1.5), seed=11))) == 1


def test_zero_values_use_the_linear_scale():
    h = make_history(n_kernels=2, metric="exposed_comm_ns", step=(1, 20, 1.2), seed=12)
    h.loc[(h["kernel"] == "kernel_00") & (h["run_id"] == "run003"), "value"] = 0.0
    h.loc[h["kernel"] == "kernel_01", "value"] -= 0.5 * h.loc[h["kernel"] == "kernel_01", "value"].min()
    out = detect_changes(h)
    assert out["kernel"].tolist() == ["kernel_01"]
    assert out["note"].iloc[0] == "" and out["ci_low"].iloc[0] > 1
    h.loc[h["kernel"] == "kernel_01", "value"] -= h.loc[h["kernel"] == "kernel_01", "value"].min()
    lin = detect_changes(h)
    assert lin["kernel"].tolist() == ["kernel_01"] and lin["note"].iloc[0] == "linear scale"
    assert lin["ci_low"].iloc[0] < lin["ratio"].iloc[0] < lin["ci_high"].iloc[0]


def test_constant_series_are_quiet_and_an_exact_step_is_certain():
    h = make_history(n_kernels=2, seed=13)
    h["value"] = 1000.0
    assert detect_changes(h).empty
    h.loc[(h["kernel"] == "kernel_01") & (h["run_id"] >= "run030"), "value"] = 1001.0
    out = detect_changes(h)
    assert out["run_after"].tolist() == ["run030"] and out["ratio"].iloc[0] == pytest.approx(1.001)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, "fast"])
def test_non_finite_values_are_one_clear_error(bad):
    h = make_history(n_kernels=2, n_runs=8, seed=14)
    h["value"] = h["value"].astype(object)
    h.loc[5, "value"] = bad
    with pytest.raises(GemmperfInputError) as e:
        detect_changes(h, source="history/ds")
    msg = str(e.value)
    assert msg.startswith("history/ds: 1 value(s) are not finite numbers") and "kernel_" in msg and "run000" in msg
    assert "\n" not in msg


def test_missing_columns_and_bad_times_are_one_clear_error():
    h = make_history(n_kernels=1, n_runs=8, seed=15)
    with pytest.raises(GemmperfInputError, match="lacks unit, value"):
        detect_changes(h.drop(columns=["unit", "value"]))
    with pytest.raises(GemmperfInputError, match="column time is not a timestamp"):
        detect_changes(h.assign(time="yesterday-ish"))
    with pytest.raises(TypeError):
        detect_changes(h, no_such_option=1)


def test_empty_history_gives_the_empty_table():
    out = detect_changes(make_history(n_kernels=1).iloc[0:0])
    assert out.empty and list(out.columns) == list(CHANGE_COLUMNS + EXTRA_COLUMNS)


def test_recent_regressions_window():
    h = make_history(step=(4, 24, 1.05), seed=16)
    h = pd.concat([h, make_history(step=(6, 30, 0.93), seed=16).query("kernel == 'kernel_06'")
                   .assign(kernel="kernel_fast")], ignore_index=True)
    ch = detect_changes(h)
    assert set(ch["direction"]) == {"regression", "improvement"}
    assert recent_regressions(ch, h, 10).empty  # the step is 16 runs old
    recent = recent_regressions(ch, h, 16)
    assert recent["kernel"].tolist() == ["kernel_04"] and recent["run_after"].tolist() == ["run024"]
    assert recent_regressions(ch.iloc[0:0], h, 5).empty
    with pytest.raises(ValueError):
        recent_regressions(ch, h, 0)


def test_many_series_take_well_under_a_second_each_batch():
    # 80 kernels x 4 metrics x 40 runs x 4 processes; the shared 2-core machine is noisy,
    # so the bound is loose (measured ~0.15-0.35 s)
    h = pd.concat([make_history(seed=17, metric=m) for m in ("dur_ns", "a_ns", "b_ns", "c_ns")], ignore_index=True)
    t0 = time.perf_counter()
    detect_changes(h)
    assert time.perf_counter() - t0 < 3.0


def test_changes_csv_has_the_contract_columns(tmp_path):
    from pytest_gemmperf.history.changepoints import write_changes_csv
    ch = detect_changes(make_history(step=(4, 24, 1.05), seed=16))
    path = write_changes_csv(ch, tmp_path / "changes.csv")
    back = pd.read_csv(path)
    assert list(back.columns) == list(CHANGE_COLUMNS + EXTRA_COLUMNS)
    assert back["run_after"].tolist() == ["run024"] and back["time_after"].iloc[0] == "2026-03-25T00:00:00.000000Z"
    empty = pd.read_csv(write_changes_csv(ch.iloc[0:0], tmp_path / "none.csv"))
    assert empty.empty and list(empty.columns) == list(CHANGE_COLUMNS + EXTRA_COLUMNS)


@pytest.mark.slow  # the real 43,915-dispatch trace
def test_real_908_histories_flat_and_step():
    """40-run histories resampled from the real 908 trace (the benchmark's generator: 4
    processes per run, 20 recorded steps each, 1 % process and 0.3 % run factors): the flat one
    reports nothing, a 4 % step in a steady kernel at run 25 is found there (+-2 runs)."""
    import sys
    from pathlib import Path
    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        import gate_accuracy as ga
        import history_detection as hd
    finally:
        sys.path.remove(str(bench))
    if not ga.REAL.exists():
        pytest.skip(f"{ga.REAL} absent (../shared not laid out)")
    pool = ga.load_real()
    rng = np.random.default_rng(21)
    n_k = len(pool.names)
    flat = hd.simulate(pool, rng, np.ones((hd.N_RUNS, n_k))).frame
    assert detect_changes(flat).empty
    many, steady, _ = hd.candidates(pool, rng)
    assert len(steady) >= 5
    k = int(steady[0])
    eff = np.ones((hd.N_RUNS, n_k))
    eff[hd.STEP_RUN - 1:, k] = 1.04
    out = detect_changes(hd.simulate(pool, rng, eff).frame)
    hit = out[(out["kernel"] == pool.names[k]) & (out["metric"] == "dur_ns")]
    assert len(hit) == 1 and hit["direction"].iloc[0] == "regression"
    assert abs(hit["index_after"].iloc[0] - (hd.STEP_RUN - 1)) <= 2
    assert hit["ci_low"].iloc[0] < 1.04 < hit["ci_high"].iloc[0]
    assert set(out["kernel"]) == {pool.names[k]}


def test_series_with_missing_runs_and_several_points():
    # kernel_02 is absent from runs 5-7 (not dispatched there); another point has no change
    h = make_history(n_kernels=4, step=(2, 24, 1.05), seed=22)
    h = h[~((h["kernel"] == "kernel_02") & h["run_id"].isin(["run005", "run006", "run007"]))]
    other = make_history(n_kernels=4, seed=23).assign(point="ch56-th256")
    out = detect_changes(pd.concat([h, other], ignore_index=True))
    assert out[["point", "kernel", "run_before", "run_after"]].values.tolist() == [
        ["ch28-th256", "kernel_02", "run023", "run024"]]
    assert out["index_after"].iloc[0] == 21  # the series' own position: 3 runs are missing
    assert out.attrs == {"series": 8, "short_series": 0}
