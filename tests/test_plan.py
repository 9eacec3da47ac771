"""The gate's power (gate/power.py), `gemmperf plan`, and `--gemmperf-repeats auto`."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from gemmperf_pytester_support import FAKE, gp  # noqa: F401 - the fixture
from pytest_gemmperf import cli
from pytest_gemmperf.gate import power as pw
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.record import BaselineRecord
from pytest_gemmperf.gate.compare import GateConfig, compare, compare_stats
from pytest_gemmperf.gate.samples import compact_samples
from pytest_gemmperf.pytest_glue.plan import choose, processes_per_run, recorded_rule

pytest_plugins = ["pytester"]

TEST = "perf_tests/test_gemm.py::test_plan"
HW = "gfx950-AMD_Instinct_MI350X-x8"
RULE0 = pw.Decision(threshold=0.0, alpha=0.01 * 0.75 / 40)


def synthetic(units: int = 24, kernels: int = 40, sd: float = 0.01, dispatches: int = 30, seed: int = 0,
              names: list[str] | None = None) -> pd.DataFrame:
    """Samples whose per-process medians vary by ``sd`` (log) around each kernel's level, with
    next to no noise inside a process: the gate's variance should come out near ``sd^2``."""
    rng = np.random.default_rng(seed)
    names = names or [f"Cijk_gemm_{k:02d}" for k in range(kernels)]
    frames = []
    for u in range(units):
        level = np.log(1000.0 * (1 + np.arange(len(names)))) + rng.normal(0, sd, len(names))
        logs = level[:, None] + rng.normal(0, 0.002, (len(names), dispatches))
        frames.append(pd.DataFrame({"point": "p", "kernel": np.repeat(names, dispatches), "metric": "dur_ns",
                                    "unit": f"host/{1000 + u}/0/{u}", "value": np.exp(logs).ravel()}))
    return pd.concat(frames, ignore_index=True)


def noise(sd: float, prior_df: float = math.inf, shared_sd: float = 0.0, history_df: float = 0.0) -> pw.RowNoise:
    return pw.RowNoise("p", "k", "dur_ns", 4, sd, shared_sd, prior_df, history_df)


# ---------------------------------------------------------------------------------------------
# the power model


def test_power_grows_with_processes_and_with_the_change():
    rows = [noise(0.01, prior_df=4, shared_sd=0.006), noise(0.02, prior_df=8)]
    for rule, effect in ((RULE0, 0.04), (pw.Decision(threshold=0.05, alpha=1e-4), 0.07)):
        by_n = np.array([pw.power(rows, effect, n, n, rule) for n in range(2, 17)])
        assert (np.diff(by_n, axis=0) >= -1e-9).all()
        assert (by_n[-1] > by_n[0] + 0.5).all(), by_n
        by_effect = np.array([pw.power(rows, e, 6, 6, rule) for e in (0.06, 0.08, 0.12, 0.2)])
        assert (np.diff(by_effect, axis=0) >= 0).all()
    # a change inside the threshold is never a regression, however many processes
    assert pw.power(rows, 0.04, 16, 16, pw.Decision(threshold=0.05, alpha=1e-4)).max() < 0.2


def test_processes_needed_falls_as_the_change_grows():
    rows = [noise(0.005, prior_df=6), noise(0.01, prior_df=6, shared_sd=0.005), noise(0.02, prior_df=6)]
    needs = [pw.processes_needed(rows, e, RULE0, max_processes=64) for e in (0.02, 0.03, 0.05, 0.08)]
    for row in range(len(rows)):
        col = [n[row] if n[row] is not None else math.inf for n in needs]
        assert col == sorted(col, reverse=True) and col[0] > col[-1], col
    assert pw.processes_needed([noise(0.05)], 0.02, RULE0, max_processes=16) == [None]


def test_power_matches_a_simulation_of_its_model():
    """The quadrature is exact for the model it states: a normal change; the kernel's
    moderated variance, a fixed prior share and a chi-square own share; the shared factor's
    chi-square variance; the two conditions of the gate's rule, the total's interval on the
    Welch df."""
    rng = np.random.default_rng(1)
    sd, so, prior, n, d = 0.01, 0.008, 3.0, 4, math.log1p(0.03)
    rule = pw.Decision(threshold=0.01, alpha=1e-3)
    f, f2, draws = 2 * n - 2, 2 * n - 2, 400_000
    sr, ss = sd * math.sqrt(2 / n), so * math.sqrt(2 / n)
    x = d + sr * rng.standard_normal(draws)
    s = ss * rng.standard_normal(draws)
    var_rel = sr ** 2 * (prior + f * rng.chisquare(f, draws) / f) / (prior + f)
    var_shift = ss ** 2 * rng.chisquare(f2, draws) / f2
    sig = x / np.sqrt(var_rel) > sps.t.isf(rule.alpha / 2, f + prior)
    se = np.sqrt(var_rel + var_shift)
    welch = np.fmax(min(f + prior, f2), (var_rel + var_shift) ** 2 / (var_rel ** 2 / (f + prior) + var_shift ** 2 / f2))
    sized = (x + s - sps.t.isf(0.025, welch) * se > 0) & (x + s - sps.t.isf(0.2, welch) * se > math.log1p(rule.threshold))
    simulated = float((sig & sized).mean())
    predicted = float(pw.power([noise(sd, prior, so)], 0.03, n, n, rule)[0])
    assert abs(predicted - simulated) < 0.01, (predicted, simulated)


def _gate_draw(rng: np.random.Generator, units: int, first: int = 0, kernels: int = 20, own: float = 0.01,
               shared: float = 0.01, dispatches: int = 5) -> pd.DataFrame:
    """Samples of ``units`` processes: each kernel's per-process median varies by ``own`` (log)
    on top of a factor of sd ``shared`` that a process shares with all its kernels."""
    names = [f"Cijk_k{k:02d}" for k in range(kernels)]
    level = np.log(1000.0 * (1 + np.arange(kernels)))
    logs = (level[None, :, None] + rng.normal(0, shared, units)[:, None, None]
            + rng.normal(0, own, (units, kernels))[:, :, None] + rng.normal(0, 0.001, (units, kernels, dispatches)))
    unit = np.repeat([f"h/{first + i}/0/{first + i}" for i in range(units)], kernels * dispatches)
    return pd.DataFrame({"point": "p", "kernel": np.tile(np.repeat(names, dispatches), units), "metric": "dur_ns",
                         "unit": unit, "value": np.exp(logs).ravel()})


@pytest.mark.slow  # 192 comparisons of the real gate, about 3.5 s
def test_predicted_power_matches_the_gate_on_simulated_tests(monkeypatch):
    """The plan of a 48-process record against the real gate: for 2 changes x 2 counts, the
    predicted power of one slowed kernel and the fraction of 64 simulated tests (fresh
    baseline and candidate each) whose row for it is ``regression`` (0.31, 0.61 / 0.92;
    predicted within 0.1). The cells lie where the two conditions bind: significance at 3
    processes per side (a t on ~8 df, far from the normal), the total's interval, which
    carries the sides' shared factor (twice the kernel's own noise), at 6. A model with normal
    quantiles misses by 0.25, one without the shared factor's term by 0.36. The fourth cell,
    the larger change at 6, is not simulated: every model and the gate give it power 1."""
    cfg = GateConfig(threshold=0.02)
    rng = np.random.default_rng(7)
    (p,) = pw.plan(_gate_draw(rng, 48, own=0.006, shared=0.012), 0.03, cfg)
    row = next(r.noise for r in p.kernels if r.noise.kernel == "Cijk_k00")
    effects, counts, reps = (0.03, 0.05), (3, 6), 64
    cells = [(0, 0), (0, 1), (1, 0)]  # (effect, count) indices
    observed = np.zeros((2, 2))
    for ci, n in enumerate(counts):
        for _ in range(reps):
            base = _gate_draw(rng, n, own=0.006, shared=0.012)
            cand = _gate_draw(rng, n, first=100, own=0.006, shared=0.012)
            slow = (cand["kernel"] == "Cijk_k00").to_numpy()
            for ei, e in enumerate(effects):
                if (ei, ci) not in cells:
                    continue
                v = compare(base, cand.assign(value=np.where(slow, cand["value"] * (1 + e), cand["value"])), cfg)
                observed[ei, ci] += bool((v[(v["kernel"] == "Cijk_k00") & (v["metric"] == "dur_ns")]["verdict"]
                                          == "regression").any()) / reps

    def predicted(r: pw.RowNoise) -> np.ndarray:
        return np.array([pw.power([r], effects[ei], counts[ci], counts[ci], p.decision)[0] for ei, ci in cells])

    seen = np.array([observed[c] for c in cells])
    good = predicted(row)
    assert np.abs(good - seen).max() <= 0.12, (good, seen)
    no_shared = predicted(dataclasses.replace(row, shared_sd=0.0))
    monkeypatch.setattr(pw, "_t_isf", lambda q, df: np.broadcast_to(sps.norm.isf(q), np.shape(df)).astype(float))
    normal = predicted(row)
    assert np.abs(no_shared - seen).max() > 0.2 and np.abs(normal - seen).max() > 0.2, (no_shared, normal)


def _spread_draw(rng: np.random.Generator, sds: np.ndarray, units: int, first: int = 0) -> pd.DataFrame:
    """Samples of ``units`` processes whose kernel ``k`` varies by ``sds[k]`` between them."""
    names = [f"Cijk_k{k:02d}" for k in range(len(sds))]
    level = np.log(1000.0 * (1 + np.arange(len(sds))))
    logs = (level[None, :, None] + rng.normal(0, 1, (units, len(sds)))[:, :, None] * sds[None, :, None]
            + rng.normal(0, 0.002, (units, len(sds), 30)))
    unit = np.repeat([f"h/{first + i}/0/{first + i}" for i in range(units)], len(sds) * 30)
    return pd.DataFrame({"point": "p", "kernel": np.tile(np.repeat(names, 30), units), "metric": "dur_ns",
                         "unit": unit, "value": np.exp(logs).ravel()})


def test_the_plan_takes_the_prior_the_gate_fits_on_real_degrees_of_freedom():
    """A 4-process record compared with itself holds each process twice: its variances sit on
    6 df where they have 3. The prior fitted to them reads the spread that 3 df explain as the
    prior's own (df too small) and matches their median to the wrong distribution (location
    too small). The plan undoes both: at 4 processes per side its prior df (after the gate's
    bound) and location are those the gate fits in real 4-vs-4 comparisons, where the
    record's own fit gives about 3.6 df against the gate's 5.5."""
    rng = np.random.default_rng(3)
    sds = 0.01 * np.sqrt(10.0 / rng.chisquare(10.0, 60))   # kernel variances from a prior of 10 df
    cfg = GateConfig(threshold=0.0)
    plans, gates = [], []
    for _ in range(8):
        plans.append(pw.row_noise(_spread_draw(rng, sds, 4), cfg)[0])
        st = compare_stats(_spread_draw(rng, sds, 4), _spread_draw(rng, sds, 4, first=100), cfg)
        gates.append(st[(st["metric"] == "dur_ns") & (st["kernel"] != "*")])
    plan_df = [np.median([min(r.prior_df, cfg.prior_df_cap * 6) for r in rows]) for rows in plans]
    gate_df = [k["prior_df"].median() for k in gates]
    assert abs(np.mean(plan_df) - np.mean(gate_df)) < 1.0, (plan_df, gate_df)
    plan_loc = [np.median([r.prior_sd ** 2 for r in rows]) for rows in plans]
    assert np.mean(plan_loc) == pytest.approx(np.mean([k["prior_var"].median() for k in gates]), rel=0.1)


def _with_totals(samples: pd.DataFrame) -> pd.DataFrame:
    """``samples`` with each category's per-process total, as the plugin records it."""
    from pytest_gemmperf.traces.categories import category_of

    cat = samples["kernel"].map(lambda k: f"category:{category_of(str(k))}")
    per = samples.groupby([cat, samples["unit"]])["value"].sum()
    totals = pd.DataFrame({"point": "p", "kernel": per.index.get_level_values(0),
                           "metric": "category_total_ns", "unit": per.index.get_level_values(1),
                           "value": per.to_numpy()})
    return pd.concat([samples, totals], ignore_index=True)


def _opened_total(sd: float = 0.01, star_sd: float = 0.01, history_df: float = 0.0, kernels: int = 10,
                  first_pass: bool = False) -> pw.RowNoise:
    return pw.RowNoise("p", "category:gemm", "category_total_ns", 4, sd, opens_sd=star_sd,
                       opens_history_df=history_df, kernel_total_sds=(0.012,) * kernels,
                       kernel_first_pass=(first_pass,) * kernels, first_pass_rows=1 + kernels * first_pass)


def test_a_family_change_opens_the_category_total_through_the_shared_row():
    """Every kernel of a category slower, the category's kernels most of the gated ones: the
    ``*`` row moves with them and, once rejected at ``shared_alpha q``, opens the total at the
    full ``q`` (the hierarchical rule's second pass). The plan counts that path: its power is
    that of the model it states, checked by simulating it (the shared movement, the own noise
    of the noisier of the two rows, one chi-square draw of the processes' own df and the
    ``*`` row's history), and well above the single-change power at ``(1 - shared_alpha) q / m``."""
    rng = np.random.default_rng(2)
    n, d, draws, q, a_t, m = 4, math.log1p(0.04), 400_000, 0.01, 0.25, 11
    rule = pw.Decision(threshold=0.0, alpha=(1 - a_t) * q / m, fdr=q, shared_share=a_t, rows=m)
    row = _opened_total(sd=0.012, star_sd=0.01, history_df=12.0)
    scale, f, h = math.sqrt(2 / n), 2 * n - 2, 12.0
    s_t, s_s = 0.012 * scale, 0.01 * scale
    shared = s_s * rng.standard_normal(draws)
    x_t = d + shared + math.sqrt(s_t ** 2 - s_s ** 2) * rng.standard_normal(draws)
    x_s = d + shared
    w2 = rng.chisquare(f, draws) / f
    w2_s = (f * w2 + rng.chisquare(h, draws)) / (f + h)
    star = x_s / (s_s * np.sqrt(w2_s)) > sps.t.isf(a_t * q / 2, f + h)
    t_t = x_t / (s_t * np.sqrt(w2))
    # ten uncontrolled kernel totals move with it: the second pass rejects at q (11 of 11 rows)
    total = (t_t > sps.t.isf(rule.alpha / 2, f)) | (star & (t_t > sps.t.isf(q / 2, f)))
    predicted = float(pw.power([row], 0.04, n, n, rule)[0])
    assert abs(predicted - total.mean()) < 0.015, (predicted, total.mean())
    alone = float(pw.power([dataclasses.replace(row, opens_sd=0.0)], 0.04, n, n, rule)[0])
    assert predicted > alone + 0.2, (predicted, alone)
    # under the Simes rule no '*' row opens anything: the single change's power
    simes = dataclasses.replace(rule, shared_share=0.0)
    assert float(pw.power([row], 0.04, n, n, simes)[0]) == pytest.approx(alone)


def test_the_plan_opens_a_total_only_when_its_kernels_are_most_of_the_gated_ones():
    rng = np.random.default_rng(4)
    gemm_only = _with_totals(_gate_draw(rng, 6))
    (p,) = pw.plan(gemm_only, 0.03, GateConfig(threshold=0.0))
    (tot,) = [r.noise for r in p.rows if r.noise.kernel == "category:gemm"]
    assert tot.opens_sd > 0 and len(tot.kernel_total_sds) == 20 and tot.first_pass_rows == 1
    # 13 of the 20 kernels another category's: a change of the 7 GEMMs leaves the '*' row
    renamed = {f"Cijk_k{k:02d}": f"void at::native::elementwise_kernel_{k:02d}" for k in range(13)}
    mixed = _gate_draw(rng, 6)
    mixed = _with_totals(mixed.assign(kernel=mixed["kernel"].replace(renamed)))
    (p,) = pw.plan(mixed, 0.03, GateConfig(threshold=0.0))
    noise = {r.noise.kernel: r.noise for r in p.rows}
    assert noise["category:gemm"].opens_sd == 0.0
    assert noise["category:elementwise"].opens_sd > 0 and len(noise["category:elementwise"].kernel_total_sds) == 13


@pytest.mark.slow  # 240 comparisons of the real gate
def test_predicted_power_of_a_family_change_matches_the_gate():
    """Every GEMM of a GEMM-only point slower (20 kernels sharing a per-process factor twice
    their own noise): the plan of a 400-process record against the gate's ``category:gemm``
    row on 80 simulated tests per cell: within 0.12 (binomial sd <= 0.056), where the
    single-change model (the total at ``0.75 q / m``) misses by more than 0.25."""
    cfg = GateConfig(threshold=0.0)
    rng = np.random.default_rng(12)
    (p,) = pw.plan(_with_totals(_gate_draw(rng, 400, own=0.006, shared=0.012)), 0.03, cfg)
    (row,) = [r.noise for r in p.rows if r.noise.kernel == "category:gemm"]
    cells, reps = ((3, 0.05), (4, 0.05), (6, 0.03)), 80
    seen = []
    for n, e in cells:
        hits = 0
        for _ in range(reps):
            base = _with_totals(_gate_draw(rng, n, own=0.006, shared=0.012))
            cand = _gate_draw(rng, n, first=100, own=0.006, shared=0.012)
            v = compare(base, _with_totals(cand.assign(value=cand["value"] * (1 + e))), cfg)
            hits += bool((v[v["kernel"] == "category:gemm"]["verdict"] == "regression").any())
        seen.append(hits / reps)
    good = np.array([pw.power([row], e, n, n, p.decision)[0] for n, e in cells])
    alone = np.array([pw.power([dataclasses.replace(row, opens_sd=0.0)], e, n, n, p.decision)[0] for n, e in cells])
    assert np.abs(good - seen).max() <= 0.12, (good, seen)
    assert np.abs(alone - seen).max() > 0.25, (alone, seen)


def test_a_change_within_the_absolute_floor_is_never_planned_as_detectable():
    """The gate calls no slowdown a regression that grows the median by ``abs_floor_ns`` or
    less (3 % of the 1 us kernel is 30 ns): the plan gives it no power at any count, and
    leaves the other kernels as they were."""
    base = synthetic(units=6, kernels=12, seed=4)
    (free,) = pw.plan(base, 0.03, GateConfig(threshold=0.0))
    (floored,) = pw.plan(base, 0.03, GateConfig(threshold=0.0, abs_floor_ns=50.0))
    short = [r.noise.kernel == "Cijk_gemm_00" for r in floored.rows]   # about 1000 ns
    assert sum(short) == 1 and free.rows[short.index(True)].needed is not None
    assert [r.needed for r, s in zip(floored.rows, short) if s] == [None]
    assert [r.needed for r, s in zip(floored.rows, short) if not s] == \
        [r.needed for r, s in zip(free.rows, short) if not s]


def test_known_variance_gives_the_normal_approximation():
    rule = pw.Decision(threshold=0.0, alpha=1e-4)
    for sd, effect in ((0.01, 0.03), (0.02, 0.05), (0.005, 0.02)):
        n = pw.processes_needed([noise(sd)], effect, rule, max_processes=400)[0]
        assert n == math.ceil(pw.normal_approximation(sd, effect, rule)), (sd, effect)
    # beyond a threshold: the bound must clear it, which the approximation's second term states
    thr = pw.Decision(threshold=0.05, alpha=1e-4)
    n = pw.processes_needed([noise(0.02)], 0.10, thr, max_processes=400)[0]
    assert abs(n - pw.normal_approximation(0.02, 0.10, thr)) <= 1


def test_plan_of_a_synthetic_baseline_matches_the_normal_approximation():
    """A baseline whose kernels vary by 1 % between processes: the gate's own variance (read
    through the self-comparison) and the plan's counts are those of the analytic normal formula
    with the true sd, up to the sampling error of 24 processes and the t's finite df."""
    cfg = GateConfig(threshold=0.0)
    (p,) = pw.plan(synthetic(), 0.02, cfg, max_processes=64)
    sds = np.array([r.noise.sd for r in p.kernels])
    assert len(sds) == 40 and p.processes == 24
    assert abs(np.median(sds) / 0.01 - 1) < 0.1
    assert p.rows_in_family == 40
    expected = pw.normal_approximation(0.01, 0.02, p.decision)
    need = np.median([r.needed for r in p.kernels])
    assert 0.9 * expected <= need <= 1.3 * expected + 1, (need, expected)
    # the CI half-width at the recorded count is the gate's: t * sd * sqrt(2 / 24)
    half = np.median([r.noise.ci_half for r in p.kernels])
    assert half == pytest.approx(1.96 * 0.01 * math.sqrt(2 / 24), rel=0.15)


def test_the_plan_uses_the_variance_history_and_the_rows_of_its_point():
    base = synthetic(units=4, kernels=30, seed=3)
    (alone,) = pw.plan(base, 0.03, GateConfig(threshold=0.0))
    from pytest_gemmperf.gate.compare import variance_contribution

    history = pd.concat([variance_contribution(synthetic(units=4, kernels=30, seed=10 + i)) for i in range(8)])
    (pooled,) = pw.plan(base, 0.03, GateConfig(threshold=0.0), history)
    assert all(r.noise.history_df == 24 for r in pooled.kernels)
    assert np.mean([r.noise.prior_df + r.noise.history_df for r in pooled.kernels]) > \
        np.mean([r.noise.prior_df for r in alone.kernels]) + 20
    assert sum(r.needed or 99 for r in pooled.kernels) <= sum(r.needed or 99 for r in alone.kernels)


# ---------------------------------------------------------------------------------------------
# gemmperf plan


def _store(tmp_path, names: list[str] | None = None):
    store = BaselineStore(tmp_path / "baselines")
    samples = compact_samples(synthetic(units=6, kernels=12, seed=4, names=names))
    store.save(BaselineRecord(TEST, HW, samples))
    return store, samples


def test_cli_plan_prints_each_kernel_and_the_counts(tmp_path, capsys):
    names = [f"Cijk_Ailk_Bljk_MT{16 * (k + 1)}x64x32" for k in range(11)] + ["evil\x1b[31m_elementwise_kernel"]
    store, samples = _store(tmp_path, names)
    rc = cli.main(["plan", "--baseline-dir", str(store.root), "--detect", "5%", "--threshold", "0"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "\x1b" not in out and "\\x1b" in out  # kernel names are trace text: escaped
    assert f"{TEST}  [{HW}]  point p: 6 processes per side recorded" in out
    assert re.search(r"detect \+5% at threshold 0%, FDR 0.01, 80% power \(the change alone among 12 rows", out)
    (p,) = pw.plan(store.load(TEST, HW).samples, 0.05, GateConfig(threshold=0.0))
    n, reach = p.count_for()
    assert reach == 12
    assert f"to detect +5% in every gated kernel: {n} processes per side" in out
    assert "to detect +5% in every gemm kernel:" in out and "to detect +5% in every elementwise kernel:" in out
    table = [ln for ln in out.splitlines() if ln.startswith("  ") and "MT" in ln and "%" not in ln]
    assert len(table) == 11 and all(ln.split()[1] == "gemm" for ln in table)


def test_cli_plan_says_which_totals_a_change_of_their_kernels_opens(tmp_path, capsys):
    store = BaselineStore(tmp_path / "baselines")
    samples = compact_samples(_with_totals(_gate_draw(np.random.default_rng(5), 6)))
    store.save(BaselineRecord(TEST, HW, samples))
    rc = cli.main(["plan", "--baseline-dir", str(store.root), "--detect", "5%", "--threshold", "0"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert ("a total of gemm: planned as every kernel of it changing, most of the gated ones: the '*' row "
            "moves with them and, significant at 0.0025, opens the total at FDR 0.01") in out
    (p,) = pw.plan(store.load(TEST, HW).samples, 0.05, GateConfig(threshold=0.0))
    (tot,) = [r for r in p.rows if r.noise.kernel == "category:gemm"]
    need = str(tot.needed) if tot.needed is not None else ">16"
    assert re.search(rf"^  \(total\)\s+gemm\s+.*\s{re.escape(need)}$", out, re.M), out
    _store(tmp_path / "other")
    rc = cli.main(["plan", "--baseline-dir", str(tmp_path / "other" / "baselines"), "--detect", "5%"])
    assert rc == 0 and "a total of" not in capsys.readouterr().out


def test_cli_plan_prints_each_rows_operating_curve(tmp_path, capsys):
    names = [f"Cijk_Ailk_Bljk_MT{16 * (k + 1)}x64x32" for k in range(11)]
    store, _ = _store(tmp_path, names)
    rc = cli.main(["plan", "--baseline-dir", str(store.root), "--detect", "5%", "--threshold", "4%"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "operating curve with 6 processes per side" in out and "multiple of the threshold" in out
    head = next(ln for ln in out.splitlines() if ln.strip().startswith("kernel") and "1.4x (5.6%)" in ln)
    assert "0x (0%)" in head and "0.8x (3.2%)" in head and "2x (8%)" in head
    rows = [ln.split()[1:] for ln in out.splitlines() if ln.startswith("  ") and "MT" in ln and "%" in ln]
    assert len(rows) == 11
    (p,) = pw.plan(store.load(TEST, HW).samples, 0.05, GateConfig(threshold=0.04))
    for r in p.kernels:
        c = np.array(r.curve)
        assert len(c) == len(pw.CURVE_MULTIPLES) and c[0] < 0.01
        assert np.all(np.diff(c) >= -1e-9)  # a larger change is never less likely to fail
        assert c[2] < 0.5 < c[-1]  # below the threshold it mostly passes, at twice it mostly fails


def test_cli_plan_selects_tests_and_says_when_none_is_beyond_reach(tmp_path, capsys):
    store, _ = _store(tmp_path)
    rc = cli.main(["plan", "--baseline-dir", str(store.root), "--test", TEST, "--detect", "3%",
                   "--max-repeats", "4"])
    out, _ = capsys.readouterr()
    assert rc == 0
    # at the default 5 % threshold a 3 % slowdown is never a regression
    assert "to detect +3% in every gated kernel: more than 4 processes per side (none of 12 within 4)" in out


def test_cli_max_repeats_defaults_to_the_settings_cap_and_names_its_unit(capsys):
    from pytest_gemmperf.config import default

    args = cli.build_parser().parse_args(["plan", "--detect", "3%"])
    assert args.max_repeats == default("max_repeats")
    with pytest.raises(SystemExit):
        cli.main(["plan", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert "largest count considered, in processes per side" in helptext


def _ruled_store(tmp_path, rules: dict[str, float | None]):
    """A record of two points (``p``, ``q``) whose metadata holds the test's rule per point, as
    pytest records ``assert_no_regression(threshold=...)`` with a baseline."""
    store = BaselineStore(tmp_path / "baselines")
    one = compact_samples(synthetic(units=6, kernels=4, seed=4))
    samples = pd.concat([one, one.assign(point="q")], ignore_index=True)
    meta = {"points": {pt: {"threshold": rule} for pt, rule in rules.items()}}
    store.save(BaselineRecord(TEST, HW, samples, meta=meta))
    return store


def test_cli_plan_gates_each_point_at_the_rule_its_test_recorded(tmp_path, capsys):
    store = _ruled_store(tmp_path, {"p": 0.25, "q": None})
    rc = cli.main(["plan", "--baseline-dir", str(store.root), "--detect", "10%"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.splitlines()[0] == (f"threshold: 25% (per-test rule recorded with the baseline of {TEST}[p]); "
                                   "5% (default) for the rest")
    p_table, q_table = out.split(f"{TEST}  [{HW}]  point ")[1:3]
    assert "detect +10% at threshold 25%," in p_table and "detect +10% at threshold 5%," in q_table
    assert "+10% lies within the 25% threshold: no count makes it a regression" in p_table
    assert "lies within" not in q_table
    # the plan at 25 % is the power model's at 25 %: nothing within 16 processes detects +10 %
    assert "to detect +10% in every gated kernel: more than 16 processes per side" in p_table


def test_cli_plan_threshold_flag_overrides_every_recorded_rule(tmp_path, capsys):
    store = _ruled_store(tmp_path, {"p": 0.25, "q": 0.25})
    rc = cli.main(["plan", "--baseline-dir", str(store.root), "--detect", "10%", "--threshold", "2%"])
    out, _ = capsys.readouterr()
    assert rc == 0
    assert out.splitlines()[0] == "threshold: 2% (--threshold)"
    assert out.count("detect +10% at threshold 2%,") == 2 and "25%" not in out


def test_cli_plan_takes_the_rule_of_the_newest_results_run_first(tmp_path, capsys):
    store = _ruled_store(tmp_path, {"p": 0.25, "q": 0.25})
    run = tmp_path / "results" / "2026-01-01T00-00-00-abcdef"
    for point, rule in (("p", 0.4), ("q", None)):
        d = run / "t" / point
        d.mkdir(parents=True)
        (d / "point.json").write_text(json.dumps({"test_id": TEST, "point": point, "threshold": rule}))
    (run / "run.json").write_text(json.dumps({"complete": True}))
    rc = cli.main(["plan", "--baseline-dir", str(store.root), "--detect", "10%", "--results", str(run)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    # the run's rules win, its "no rule" included (q: the fallback), as in `gemmperf compare`
    assert out.splitlines()[0] == (f"threshold: 40% (per-test rule recorded with the candidate run of {TEST}[p]); "
                                   "5% (default) for the rest")
    assert "detect +10% at threshold 40%," in out and "detect +10% at threshold 5%," in out
    rc = cli.main(["plan", "--baseline-dir", str(store.root), "--detect", "10%", "--results", str(tmp_path)])
    _, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and "--results: not a gemmperf results directory" in err


@pytest.mark.parametrize("args, message", [
    (["--baseline-dir", "{tmp}/nowhere"], "{tmp}/nowhere: no baseline store here"),
    (["--test", "perf_tests/test_other.py::test_x"], "no baseline for test 'perf_tests/test_other.py::test_x'"),
    (["-k", "nothing_like_it"], "no baseline test id contains 'nothing_like_it'"),
    (["--hw", "gfx942-other-x8"], "no baseline records for hardware key gfx942-other-x8"),
])
def test_cli_plan_errors_are_one_line(tmp_path, capsys, args, message):
    store, _ = _store(tmp_path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--baseline-dir" not in args:
        args = ["--baseline-dir", str(store.root), *args]
    rc = cli.main(["plan", "--detect", "3%", *args])
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("gemmperf: error: ")
    assert message.replace("{tmp}", str(tmp_path)) in err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize("value", ["0%", "lots", "-3%"])
def test_cli_plan_refuses_a_change_that_is_no_change(value, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["plan", "--detect", value])
    assert exc.value.code == 2
    assert "--detect" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# --gemmperf-repeats auto


def test_processes_per_run_from_unit_names():
    s = pd.DataFrame({"unit": [f"h/{p}/{r}/{k}" for k in range(3) for r in range(2) for p in (7,)],
                      "point": "p", "kernel": "k", "metric": "dur_ns", "value": 1.0})
    assert processes_per_run(s) == 2
    assert processes_per_run(s.assign(unit=["a", "b", "c", "d", "e", "f"])) == 1


def test_auto_count_is_the_plans_in_repeats_and_capped():
    base = synthetic(units=6, kernels=12, seed=4)
    (p,) = pw.plan(base, 0.03, GateConfig(threshold=0.001), max_processes=40)
    need, reach = p.count_for()
    got = choose(base, None, TEST, 0.03, 0.001, max_repeats=40, default=3)
    assert got.repeats == need and f"detects +3% in {reach}/12 gated kernels at 80% power" in got.note
    capped = choose(base, None, TEST, 0.03, 0.001, max_repeats=2, default=3)
    assert capped.repeats == 2 and "the largest: +3% needs more in every one of 12" in capped.note
    inside = choose(base, None, TEST, 0.03, None, max_repeats=8, default=3)  # 3 % inside the 5 % threshold
    assert inside.repeats == 3 and "within the 5% threshold: no count detects it" in inside.note


@pytest.mark.parametrize("meta, want", [
    ({"points": {"p": {"threshold": 0.25}}}, 0.25), ({"points": {"p": {"threshold": 0}}}, 0.0),
    ({"points": {"p": {"threshold": None}}}, None), ({"points": {"q": {"threshold": 0.25}}}, None),
    ({"points": {"p": {"threshold": "25%"}}}, None), ({"points": {"p": {"threshold": True}}}, None),
    ({"points": {"p": {"threshold": -1}}}, None), ({"points": []}, None), ({}, None),
])
def test_recorded_rule_reads_the_points_threshold_and_nothing_else(meta, want):
    assert recorded_rule(meta, "p") == want


AUTO_TEST = """
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28], threads=[256], kernels=[r"^aten::mm$"])
def test_auto(gemmperf):
    result = gemmperf.profile([sys.executable, {fake!r}, "--dispatches", "40"])
    gemmperf.assert_no_regression(result)
"""


@pytest.mark.usefixtures("without_session_reports")  # no session report is read here
def test_pytest_repeats_auto_runs_the_planned_count_and_says_so(gp, pytester):
    pytester.makepyfile(test_auto=AUTO_TEST.format(fake=str(FAKE)))
    # the count is checked here, not the verdict: against a 0.1% threshold this machine's noise
    # may leave the second run undecided (skipped by default), so undecided counts as passed
    auto = ["test_auto.py", "--gemmperf-repeats", "auto", "--gemmperf-detect", "3%",
            "--gemmperf-threshold", "0.001", "--gemmperf-max-repeats", "6", "--gemmperf-confirm", "0",
            "--gemmperf-undecided", "pass", "-q"]
    out = gp(*auto, results="a1")
    out.assert_outcomes(passed=1)
    # no baseline yet: the default count, and the line says why
    out.stdout.fnmatch_lines(["gemmperf ▶ test_auto[[]ch28-th256[]] start: 3 process(es) (torch)*; "
                              "repeats auto: 3 (no baseline on * yet)"])
    rec = BaselineStore(gp.path / "base").load_all()[0]
    base = rec.samples[rec.samples["point"] == "ch28-th256"]
    want = choose(base, rec.history_for("ch28-th256"), rec.test_id, 0.03, 0.001, 6, 3)
    # what the plan says depends on this machine's noise (detectable within 6, or not): the
    # start line must say exactly what the plan chose
    assert 1 <= want.repeats <= 6 and want.note.startswith(f"repeats auto: {want.repeats} (")

    out = gp(*auto, results="a2")
    out.assert_outcomes(passed=1)
    note = want.note.replace("[", "[[]").replace("*", "[*]").replace("?", "[?]")
    out.stdout.fnmatch_lines([f"gemmperf ▶ test_auto[[]ch28-th256[]] start: {want.repeats} process(es) (torch)*; "
                              f"{note}*"])
    point = json.loads(next((gp.path / "a2").glob("*/ch28-th256/point.json")).read_text())
    assert point["repeats"] == want.repeats and len(point["runs"]) == want.repeats
    assert point["repeats_auto"] == want.note


@pytest.mark.usefixtures("without_session_reports")  # no session report is read here
def test_pytest_repeats_auto_plans_at_the_tests_own_rule(gp, pytester):
    pytester.makepyfile(test_auto=AUTO_TEST.format(fake=str(FAKE)).replace(
        "assert_no_regression(result)", 'assert_no_regression(result, threshold="40%")'))
    auto = ["test_auto.py", "--gemmperf-repeats", "auto", "--gemmperf-detect", "10%",
            "--gemmperf-max-repeats", "6", "--gemmperf-confirm", "0", "-q"]
    gp(*auto, results="a1").assert_outcomes(passed=1)
    out = gp(*auto, results="a2")
    out.assert_outcomes(passed=1)
    # +10 % lies within the test's 40 %, not within the session's 5 %: the plan says so
    out.stdout.fnmatch_lines(["gemmperf ▶ test_auto[[]ch28-th256[]] start: 3 process(es) (torch)*; repeats auto: 3 "
                              "(+10% is within the 40% threshold (the test's rule recorded with its baseline): "
                              "no count detects it; the default count)*"])


def test_pytest_repeats_auto_needs_the_change_to_detect(gp):
    out = gp("--gemmperf-repeats", "auto", "--collect-only")
    assert out.ret == pytest.ExitCode.USAGE_ERROR
    out.stderr.fnmatch_lines(["*--gemmperf-repeats auto needs --gemmperf-detect (e.g. 3%)*"])
    out = gp("--gemmperf-repeats", "auto", "--gemmperf-detect", "3%", "--gemmperf-max-repeats", "1",
             "--collect-only")
    assert out.ret == pytest.ExitCode.USAGE_ERROR
    out.stderr.fnmatch_lines(["*--gemmperf-max-repeats must be >= 2, got 1*"])


def _controlled_draw(rng: np.random.Generator, units: int, first: int = 0, slower: float = 0.0,
                     own: tuple[float, ...] = (0.01, 0.015, 0.02, 0.025, 0.03) * 3,
                     controls: int = 30, shared: float = 0.01) -> pd.DataFrame:
    """A GEMM-only test's records: GEMMs whose per-process medians vary by ``own`` (one sd a
    kernel) on a factor of sd ``shared`` every kernel of a process shares, the process's other
    kernels as within-process controls (``control_ns``: a median each, 0.3 % noise of their
    own), and the category totals, as ``gate_samples`` writes them; every GEMM ``slower``."""
    names = [f"Cijk_k{k:02d}" for k in range(len(own))]
    level = np.log(1000.0 * (1 + np.arange(len(own))))
    factor = rng.normal(0, shared, units)
    logs = (level[None, :, None] + factor[:, None, None] + rng.normal(0, 1, (units, len(own)))[:, :, None]
            * np.asarray(own)[None, :, None] + rng.normal(0, 0.001, (units, len(own), 8)) + math.log1p(slower))
    unit = [f"h/{first + i}/0/{first + i}" for i in range(units)]
    gemm = pd.DataFrame({"point": "p", "kernel": np.tile(np.repeat(names, 8), units), "metric": "dur_ns",
                         "unit": np.repeat(unit, len(own) * 8), "value": np.exp(logs).ravel()})
    ctl = np.exp(np.log(500.0 * (1 + np.arange(controls)))[None, :] + factor[:, None]
                 + rng.normal(0, 0.003, (units, controls)))
    others = [f"void elementwise_{c:02d}" for c in range(controls)]
    control = pd.DataFrame({"point": "p", "kernel": np.tile(others, units), "metric": "control_ns",
                            "unit": np.repeat(unit, controls), "value": ctl.ravel()})
    totals = pd.DataFrame({"point": "p", "kernel": np.repeat(["category:gemm", "category:elementwise"], units),
                           "metric": "category_total_ns", "unit": unit * 2,
                           "value": np.concatenate([np.exp(logs).sum(axis=(1, 2)), 20.0 * ctl.sum(axis=1)])})
    return pd.concat([gemm, control, totals], ignore_index=True)


@pytest.mark.slow  # 160 comparisons of the real gate
def test_a_category_total_opened_beside_controlled_kernel_totals_matches_the_gate():
    """A GEMM-only test with within-process controls: the GEMMs' own totals, measured against
    the controls, are tested in the first pass beside the ``*`` row, and each one rejected
    raises the level the ``*`` row (which opens the category total) is tested at. The gate
    tests each kernel total on its moderated variance (the prior's df beside the processes')
    plus the controls' residual part, on their Welch df: about twice the processes' df. Planned
    so, the category total from a 400-process record lies within 0.12 of the gate on 80
    simulated tests per cell (binomial sd <= 0.056); planned with the kernel totals as plain
    t's on the processes' ``2n - 2`` df (the rows without their kernels' parts), it misses by
    more than 0.15."""
    cfg = GateConfig(threshold=0.0)
    rng = np.random.default_rng(31)
    (p,) = pw.plan(_controlled_draw(rng, 400), 0.05, cfg)
    (row,) = [r.noise for r in p.rows if r.noise.kernel == "category:gemm"]
    assert row.opens_sd > 0 and all(row.kernel_first_pass) and len(row.kernel_rows) == 15
    cells, reps = ((3, 0.07), (4, 0.05)), 80
    seen = []
    for n, e in cells:
        hits = 0
        for _ in range(reps):
            v = compare(_controlled_draw(rng, n), _controlled_draw(rng, n, first=100, slower=e), cfg)
            hits += bool((v[v["kernel"] == "category:gemm"]["verdict"] == "regression").any())
        seen.append(hits / reps)
    planned = np.array([pw.power([row], e, n, n, p.decision)[0] for n, e in cells])
    plain = np.array([pw.power([dataclasses.replace(row, kernel_rows=())], e, n, n, p.decision)[0] for n, e in cells])
    assert np.abs(planned - seen).max() <= 0.12, (planned, seen)
    assert np.abs(plain - seen).max() > 0.15, (plain, seen)
