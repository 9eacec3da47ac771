"""Variance history: what earlier runs teach the gate about each kernel's between-process noise.

``gate.compare.variance_contribution`` (one run -> per kernel sum of squares and df),
``compare(history=...)`` (pooled with the comparison's own variance, ignored where the noise
grew), and the baseline store that keeps it (refresh moves the replaced run into it,
``learn`` adds a run, newest runs kept, checksummed like the other files).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.compare import GateConfig, compare, variance_contribution
from pytest_gemmperf.store import record as bl
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.record import BaselineRecord

from test_baseline import HW, make_results  # the documented results layout

POINT = "ch28-th256"
TEST = "perf_tests/test_gemm.py::test_overlap"


def run_samples(rng: np.random.Generator, *, units: int = 4, kernels: int = 16, per_unit: int = 40,
                kernel_sd: np.ndarray | None = None, slow: dict[int, float] | None = None,
                unit_prefix: str = "h", shared_sd: float = 0.01) -> pd.DataFrame:
    """One run: ``units`` processes, each with a shared factor (sd 1 %) and per-kernel factors
    (``kernel_sd``), ``per_unit`` dispatches per kernel and process (1 % dispatch noise)."""
    sd = np.full(kernels, 0.004) if kernel_sd is None else kernel_sd
    values = []  # one frame at the end, not one per kernel and process
    for u in range(units):
        shared = rng.normal(0, shared_sd)
        own = rng.normal(0, sd)
        for k in range(kernels):
            factor = (1 + (slow or {}).get(k, 0.0)) * np.exp(shared + own[k])
            values.append(1e4 * (k + 1) * factor * np.exp(rng.normal(0, 0.01, per_unit)))
    names = [f"k{k:02d}" for k in range(kernels)]
    return pd.DataFrame({"point": POINT, "kernel": np.tile(np.repeat(names, per_unit), units), "metric": "dur_ns",
                         "unit": np.repeat([f"{unit_prefix}/{u}" for u in range(units)], kernels * per_unit),
                         "value": np.concatenate(values)})


# ---------------------------------------------------------------------------------------------
# variance_contribution


def test_contribution_by_hand_without_shared_factor() -> None:
    rng = np.random.default_rng(1)
    s = run_samples(rng, units=3, kernels=4)
    got = variance_contribution(s, GateConfig(shared_factor=False)).set_index("kernel")
    for k, g in s.groupby("kernel"):
        med = np.array([np.median(np.log(u["value"])) for _, u in g.groupby("unit")])
        assert got.loc[k, "df"] == 2
        assert got.loc[k, "ss"] == pytest.approx(((med - med.mean()) ** 2).sum(), rel=1e-12)
    assert set(got["metric"]) == {"dur_ns"} and set(got["point"]) == {POINT}


def test_contribution_ignores_shared_factors_and_kernel_scale() -> None:
    rng = np.random.default_rng(2)
    s = run_samples(rng)
    ref = variance_contribution(s).set_index("kernel")["ss"]
    # a kernel that is 1.7x slower in every process has the same between-process spread
    scaled = s.assign(value=s["value"] * np.where(s["kernel"] == "k03", 1.7, 1.0))
    assert np.allclose(variance_contribution(scaled).set_index("kernel")["ss"], ref, rtol=1e-9, atol=0)
    # processes 0-3 % apart in clock: removed with the shared factor, not counted as kernel noise
    unit_factor = s["unit"].map({f"h/{u}": 1.0 + 0.01 * u for u in range(4)}).astype(float)
    moved = s.assign(value=s["value"] * unit_factor)
    got = variance_contribution(moved).set_index("kernel")["ss"]
    raw = variance_contribution(moved, GateConfig(shared_factor=False)).set_index("kernel")["ss"]
    # the kernels' rows; the shared factor's own spread is its row '*'
    assert got.drop("*").sum() == pytest.approx(ref.drop("*").sum(), rel=0.2)
    assert raw.sum() > 5 * ref.sum()
    # a kernel seen in a single process says nothing about between-process variance
    lone = pd.concat([s, pd.DataFrame({"point": POINT, "kernel": "lonely", "metric": "dur_ns",
                                       "unit": "h/0", "value": [5.0, 6.0]})], ignore_index=True)
    assert "lonely" not in set(variance_contribution(lone)["kernel"])


# ---------------------------------------------------------------------------------------------
# compare(history=...)


def history_of(rng: np.random.Generator, runs: int, **kw) -> pd.DataFrame:
    return pd.concat([variance_contribution(run_samples(rng, **kw)) for _ in range(runs)], ignore_index=True)


def test_history_is_pooled_and_narrows_the_interval() -> None:
    """Kernels 15x apart in noise: the cross-kernel prior widens the quiet kernels' intervals
    towards the typical variance; their own history does not."""
    rng = np.random.default_rng(3)
    # noise unrelated to anything the prior's strata see (kernel k is (k + 1) x slower: durations)
    sd = np.geomspace(0.002, 0.03, 16)[np.random.default_rng(9).permutation(16)]
    # a small shared factor: the interval is then the kernel's own variance, not the shared shift's
    base = run_samples(rng, kernel_sd=sd, shared_sd=0.001)
    cand = run_samples(rng, kernel_sd=sd, unit_prefix="c", shared_sd=0.001)
    hist = history_of(rng, 5, kernel_sd=sd, shared_sd=0.001)
    hist = hist[hist["kernel"] != "*"]  # the kernels' own history (the shared factor's: test_gate_controls)
    v0 = compare(base, cand).set_index("kernel")
    v1 = compare(base, cand, history=hist).set_index("kernel")
    k = [f"k{i:02d}" for i in range(16)]
    assert (v0.loc[k, "history_df"] == 0).all()
    assert (v1.loc[k, "history_df"] == 15).all()  # 5 runs x (4 processes - 1)
    quiet = [k[i] for i in np.argsort(sd)[:4]]
    width0 = np.log(v0.loc[quiet, "ci_high"] / v0.loc[quiet, "ci_low"])
    width1 = np.log(v1.loc[quiet, "ci_high"] / v1.loc[quiet, "ci_low"])
    assert np.median(width1 / width0) < 0.92
    # GateConfig(use_history=False) is the gate without it
    v2 = compare(base, cand, GateConfig(use_history=False), history=hist).set_index("kernel")
    assert np.allclose(v2.loc[k, "ci_low"], v0.loc[k, "ci_low"])


@pytest.mark.slow  # 8 seeds x 40 kernels of simulated histories
def test_history_finds_what_four_processes_alone_cannot() -> None:
    """Kernel variances 15x apart: the cross-kernel prior cannot tell a quiet kernel from a
    noisy one, its own history can. 2 % in the quietest of 40 kernels, threshold 0."""
    sd = np.geomspace(0.002, 0.03, 40)
    hits_without = hits_with = 0
    q_without, q_with = [], []
    for seed in range(8):
        rng = np.random.default_rng(100 + seed)
        base = run_samples(rng, kernel_sd=sd, kernels=40)
        cand = run_samples(rng, kernel_sd=sd, kernels=40, slow={0: 0.02}, unit_prefix="c")
        hist = history_of(rng, 10, kernel_sd=sd, kernels=40)
        thr0 = GateConfig(threshold=0.0)
        v0 = compare(base, cand, thr0).set_index("kernel").loc["k00"]
        v1 = compare(base, cand, thr0, history=hist).set_index("kernel").loc["k00"]
        hits_without += v0["verdict"] == "regression"
        hits_with += v1["verdict"] == "regression"
        q_without.append(v0["q_value"])
        q_with.append(v1["q_value"])
    assert hits_with >= 6 and hits_with > hits_without
    assert np.median(np.log(q_with)) < np.median(np.log(q_without)) - 1


def test_history_is_ignored_where_the_noise_grew() -> None:
    """History recorded when a kernel was quiet must not make its new, larger noise look like a
    regression."""
    rng = np.random.default_rng(4)
    quiet = np.full(16, 0.002)
    loud = quiet.copy()
    loud[5] = 0.05
    hist = history_of(rng, 10, kernel_sd=quiet)
    false_alarms = 0
    for _ in range(5):
        base = run_samples(rng, kernel_sd=loud)
        cand = run_samples(rng, kernel_sd=loud, unit_prefix="c")
        v = compare(base, cand, GateConfig(threshold=0.0), history=hist).set_index("kernel")
        assert v.loc["k05", "history_df"] == 0  # own variance only
        assert (v.drop(index=["k05", "*"], errors="ignore").loc[[f"k{i:02d}" for i in range(16) if i != 5],
                                                               "history_df"] == 30).all()
        false_alarms += int((v["verdict"] == "regression").any())
    assert false_alarms == 0


def test_history_with_bad_columns_is_an_input_error() -> None:
    rng = np.random.default_rng(5)
    base, cand = run_samples(rng), run_samples(rng, unit_prefix="c")
    with pytest.raises(GemmperfInputError, match="variance history lacks column"):
        compare(base, cand, history=pd.DataFrame({"point": [POINT], "kernel": ["k00"]}))


# ---------------------------------------------------------------------------------------------
# the store


def test_refresh_moves_the_replaced_run_into_the_history(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    store = BaselineStore(tmp_path)
    first = run_samples(rng)
    store.save(BaselineRecord(TEST, HW, first))
    assert store.load(TEST, HW).variance is None
    assert store.save(BaselineRecord(TEST, HW, first)) is False  # same samples: nothing moves
    store.save(BaselineRecord(TEST, HW, run_samples(rng)))
    rec = store.load(TEST, HW)
    assert rec.variance is not None and rec.variance["seq"].nunique() == 1
    assert rec.variance["run"].iloc[0].startswith("baseline generation 1 ")
    expect = variance_contribution(first).set_index("kernel")["ss"]
    got = rec.variance.set_index("kernel")["ss"]
    assert np.allclose(got.loc[expect.index], expect)
    assert store.list()["history_runs"].tolist() == [1]
    assert "variance.parquet" in json.loads((store.path_for(TEST, HW) / "meta.json").read_text())["files"]
    # a second point added later leaves the first point's history alone
    other = run_samples(rng).assign(point="ch56-th512")
    store.save(BaselineRecord(TEST, HW, pd.concat([rec.samples, other], ignore_index=True)))
    assert store.load(TEST, HW).variance["seq"].nunique() == 1


def test_learn_adds_each_run_once_and_keeps_the_newest(tmp_path: Path, monkeypatch) -> None:
    rng = np.random.default_rng(7)
    store = BaselineStore(tmp_path)
    assert store.learn(TEST, HW, run_samples(rng), "r0") is False  # no baseline yet
    store.save(BaselineRecord(TEST, HW, run_samples(rng)))
    before = store.load(TEST, HW)
    assert store.learn(TEST, HW, run_samples(rng), "r1") is True
    assert store.learn(TEST, HW, run_samples(rng), "r1") is False  # the same run twice: no
    after = store.load(TEST, HW)
    pd.testing.assert_frame_equal(after.samples, before.samples)  # samples untouched
    assert after.generation == before.generation + 1
    monkeypatch.setattr(bl, "MAX_HISTORY_RUNS", 3)
    monkeypatch.setattr(bl.add_history, "__defaults__", (None, 3))
    for i in range(2, 7):
        store.learn(TEST, HW, run_samples(rng), f"r{i}")
    runs = store.load(TEST, HW).variance.drop_duplicates("seq")["run"].tolist()
    assert runs == ["r4", "r5", "r6"]


def test_corrupt_history_names_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    store = BaselineStore(tmp_path)
    store.save(BaselineRecord(TEST, HW, run_samples(rng)))
    store.learn(TEST, HW, run_samples(rng), "r1")
    d = store.files_dir(TEST, HW)  # the current version's directory
    good = (d / "variance.parquet").read_bytes()
    (d / "variance.parquet").write_bytes(good[:50])
    with pytest.raises(GemmperfInputError, match="variance.parquet.*checksum") as err:
        store.load(TEST, HW)
    assert "\n" not in str(err.value)
    (d / "variance.parquet").unlink()
    with pytest.raises(GemmperfInputError, match="variance.parquet.*missing"):
        store.load(TEST, HW)
    # negative sums of squares are refused even with a matching checksum
    bad = store.files_dir(TEST, HW)
    v = variance_contribution(run_samples(rng)).assign(run="x", seq=1)
    v.loc[0, "ss"] = -1.0
    data = bl._variance_to_parquet(v)
    (bad / "variance.parquet").write_bytes(data)
    pointer = store.path_for(TEST, HW) / "meta.json"
    meta = json.loads(pointer.read_text())
    meta["files"]["variance.parquet"]["sha256"] = bl._sha256(data)
    pointer.write_text(json.dumps(meta))
    with pytest.raises(GemmperfInputError, match="variance.parquet: variance history row 1"):
        store.load(TEST, HW)


def test_cli_learn_and_compare_use_the_history(tmp_path: Path, capsys) -> None:
    from pytest_gemmperf.cli import main

    base_dir = tmp_path / "baselines"
    first = make_results(tmp_path / "r1" / "2026-11-20T10-00-00", seed=1)
    second = make_results(tmp_path / "r2" / "2026-11-21T10-00-00", seed=2)
    assert main(["baseline", "learn", "--from", str(first), "--baseline-dir", str(base_dir)]) == 0
    assert "refresh first" in capsys.readouterr().err
    assert main(["baseline", "refresh", "--from", str(first), "--baseline-dir", str(base_dir)]) == 0
    assert main(["baseline", "learn", "--from", str(second), "--baseline-dir", str(base_dir)]) == 0
    out = capsys.readouterr()
    assert "variance of 3 point run(s)" in out.out
    store = BaselineStore(base_dir)
    rec = store.load(TEST, HW)
    assert sorted(rec.variance["run"].unique()) == ["2026-11-21T10-00-00/ch28-th256", "2026-11-21T10-00-00/ch56-th512"]
    assert main(["baseline", "learn", "--from", str(second), "--baseline-dir", str(base_dir)]) == 0
    assert "already in the history" in capsys.readouterr().err
    assert main(["baseline", "show", "--baseline-dir", str(base_dir), TEST]) == 0
    assert "variance history (earlier runs per point): ch28-th256 1, ch56-th512 1" in capsys.readouterr().out
    out_dir = tmp_path / "cmp"
    main(["compare", str(base_dir), str(second), "--out", str(out_dir), "--no-report"])
    v = pd.read_csv(out_dir / "verdicts.csv")
    rows = v[(v["test"] == TEST) & (v["metric"] == "dur_ns") & (v["kernel"] != "*")]
    assert len(rows) and (rows["history_df"] > 0).all()
    # a second hardware key in the store: the candidate results' own key (run.json) is chosen
    other = store.load(TEST, HW).samples
    store.save(BaselineRecord(TEST, "gfx942-AMD_Instinct_MI300X-x8", other.assign(value=other["value"] * 3)))
    assert main(["compare", str(base_dir), str(second), "--out", str(out_dir), "--no-report"]) in (0, 1)
    v2 = pd.read_csv(out_dir / "verdicts.csv")
    rows2 = v2[(v2["test"] == TEST) & (v2["metric"] == "dur_ns") & (v2["kernel"] != "*")]
    assert np.allclose(rows2["base_median_ns"], rows["base_median_ns"])  # not the 3x slower record
