"""How much of the gate's missing power is the variance estimate: gate vs oracles vs history.

With 4 processes per side each kernel's between-process variance has 6 df, so the gate shrinks
it towards a prior fitted across the ~80 kernels of the point (empirical Bayes, ``compare.py``
step 3). On the real trace that prior is weak: kernels with similar dispatch counts and
sampling noise still differ up to ~50x in between-process variance, so the quiet kernel that
slowed by 3 % is tested with a variance that is either its own noisy 6-df estimate or a
cross-kernel average that does not fit it. This script measures the ceiling of each way to
know the variance, with the same p-value -> BH -> alarm rule applied to the same replicates:

1. ``gate (no history)``: the p-values of ``compare_stats(base, cand, GateConfig())``, i.e.
   the gate as shipped (robust moderated t, "capped" prior trend, sampling-noise floor).
2. ``oracle: known variance``: a z-test of the same per-kernel log-ratio with each kernel's
   true between-process variance, estimated as its mean s^2 over all A/A replicates of the run
   (6 df each: 1800 df at 300 replicates). No estimator of a kernel's variance can do better;
   it bounds what any rule based on per-process log medians can reach at this noise and n.
   Its false alarms are above q: it treats the log medians as normal, and the medians of the
   real trace's step-clustered kernels are heavier-tailed (the gate's moderated df absorb that).
3. ``oracle: known prior G``: the best a *cross-kernel* prior can do. A nonparametric mixture
   (NPMLE on a grid of 120 variance multipliers, EM) of each kernel's variance relative to the
   gate's "additive" covariate trend (sampling noise of the median + the kernels' median excess)
   is fitted to the s^2 of all kernels of all A/A replicates pooled, so G is known far better
   than one comparison's ~80 kernels could estimate it; each kernel's p-value is then the
   posterior mixture of z-test p-values given its own s^2. If this row stays far below row 2,
   no refinement of the gate's prior (trend covariate, df fit, robust tails) can close the gap.
4. ``gate + history of N runs``: the gate as shipped, with the variance history a baseline
   store keeps after N earlier runs of 4 processes (``variance_contribution`` rows, passed as
   ``compare_stats(..., history=...)``), drawn as ``benchmarks/gate_accuracy.py`` does
   (``history_pool`` of 40 one-side runs simulated from the same scenario, independent of the
   compared data; ``draw_history`` picks N without replacement per comparison).

Why it matters: on real-resampled data (defaults) the gate alone detects well under half of
the 3 % slowdowns, the known-variance oracle over 90 %, the known prior G only about 65 %, the
gate with 10 runs of history nearly what the oracle does. The gap is the variance of each kernel, which no cross-kernel prior can supply when the
kernels' variances differ up to 50x beyond any covariate; only the kernel's own history can. That
is why the baseline store keeps each kernel's variance contributions and the gate pools them
(``compare.py`` "Variance history") instead of refining the cross-kernel prior.

Measurement: 4 processes per side, one point, both sides compacted to 21 quantiles per
(kernel, process) (``compact_samples``, as the plugin stores and compares them); A/A tests and
tests with a 3 % or 5 % median slowdown injected into 1 kernel drawn from the eligible (steady,
>= 50 dispatches per process) kernels; scenarios, replicates and eligibility come from
``benchmarks/gate_accuracy.py`` (imported; same seeds). Per-kernel statistics (log-ratio after
the shared per-process factor, s^2, df, process counts, trend covariate, floor) are recomputed
here with ``compare.py``'s own helpers (``_matrix``, ``_shared_offsets``, ``_pooled_var``,
``_prior_covariate``) and checked against the gate: its p-values are reproduced from them
(``_moderated``) and the script stops if they differ.

BH family (identical for every rule): the ``dur_ns`` p-values of the kernels the gate can test
in that comparison (>= 2 processes per side); the shared-shift row ``*`` and the category totals,
which the gate's own family also holds, are left out because the oracles have nothing to say
about them (a rule without a p-value for a family member counts it as p = 1). An alarm is a
kernel with BH q <= 0.01 whose log-ratio is positive (slower), threshold 0 (statistics alone).
False alarms/test: fraction of A/A tests with any alarm. Detection: fraction of slowdown tests
in which the slowed kernel alarms. The last row repeats the gate's own verdicts
(``assign_verdicts`` at threshold 0, its full family and CI rule) as counted by
``gate_accuracy.py``, to tie the table to that benchmark.

Run: ``.venv/bin/python benchmarks/gate_variance_limits.py [--reps-aa 300 --reps-det 60]
[--scenarios real-resampled,heavy,bimodal]`` (real-resampled at the defaults: ~2 min on one
core; 0 false alarms in 300 A/A tests bound the rate by 1 % at 95 % confidence; a detection rate
from 60 tests is +-6-13 points). Needs ``/work/shared/data/tracelens/908_results.json.gz``
(``gate_accuracy.REAL``) for the real scenarios, which are skipped when it is absent.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import gate_accuracy as ga  # noqa: E402
from pytest_gemmperf.gate import stats  # noqa: E402
from pytest_gemmperf.gate.compare import (COUNT, DUR, GateConfig,  # noqa: E402
                                          _matrix, _moderated, _nanmean_rows, _nanmedian_rows,
                                          _pooled_var, _prior_covariate, _shared_offsets,
                                          assign_verdicts, check_samples, compare_stats)
from pytest_gemmperf.gate.samples import compact_samples  # noqa: E402

FDR = 0.01
SLOWDOWNS = (0.03, 0.05)
GRID = np.exp(np.linspace(-6.0, 6.0, 120))  # variance multipliers of the oracle prior G
EM_ITERS = 500


@dataclass
class KernelStats:
    """What the gate's per-kernel duration test sees, for kernels in sorted-name order."""

    kernels: pd.Index
    diff: np.ndarray  # candidate - baseline mean log median, shared factor removed
    s2: np.ndarray  # pooled between-process variance (NaN where not testable)
    df: np.ndarray
    nb: np.ndarray
    nc: np.ndarray
    location: np.ndarray  # exp of the "additive" trend covariate: oracle prior's scale
    gate_p: np.ndarray  # the gate's p-value recomputed from these inputs (consistency check)

    @property
    def scale(self) -> np.ndarray:
        return 1.0 / self.nb + 1.0 / self.nc


def kernel_stats(base: pd.DataFrame, cand: pd.DataFrame, cfg: GateConfig) -> KernelStats:
    """Per-kernel inputs of the gate's moderated t, computed as ``compare._duration_rows`` does
    for one point without history (compacted tables, ``dispatch_count`` rows honoured)."""
    b, c = check_samples(base), check_samples(cand)
    bd, cd = b[(b["metric"] == DUR) & (b["value"] > 0)], c[(c["metric"] == DUR) & (c["value"] > 0)]
    cb, cc = b[b["metric"] == COUNT], c[c["metric"] == COUNT]
    kernels = pd.Index(sorted({str(x) for x in pd.unique(bd["kernel"])} | {str(x) for x in pd.unique(cd["kernel"])}))
    yb, _, nb_disp, _, _, seb, vb = _matrix(bd, kernels, cb)
    yc, _, nc_disp, _, _, sec, vc = _matrix(cd, kernels, cc)
    ub = yb.shape[1]
    cnt = np.concatenate([nb_disp, nc_disp], axis=1)
    y = np.where(cnt > 0, np.concatenate([yb, yc], axis=1), np.nan)
    offsets, _ = _shared_offsets(y, cnt, cfg)
    z = y - offsets[None, :]
    diff, s2, df, (nb, nc) = _pooled_var(z[:, :ub], z[:, ub:])
    testable = (nb >= cfg.min_units) & (nc >= cfg.min_units)

    n_disp = _nanmedian_rows(np.where(cnt > 0, cnt, np.nan))
    counts = pd.concat([cb, cc])
    if len(counts):
        true_n = counts.groupby("kernel", observed=True)["value"].median()
        true_n.index = true_n.index.astype(str)
        n_disp = np.where(np.isfinite(true_n.reindex(kernels).to_numpy(float)),
                          np.fmax(true_n.reindex(kernels).to_numpy(float), n_disp), n_disp)
    pred = _nanmean_rows(np.where(cnt > 1, np.concatenate([seb, sec], axis=1) ** 2, np.nan))
    floor = pred  # the gate floors at every dispatch count (gate/durations._sampling_floor)
    se_true = np.concatenate([vb, vc], axis=1)
    s2_fit, df_fit = np.where(testable, s2, np.nan), np.where(testable, df, 0.0)
    cov = _prior_covariate(cfg.prior_trend, n_disp, se_true, s2, testable)
    _, _, p, _, _ = _moderated(diff, s2_fit, df_fit, nb, nc, cov, cfg.moderate, cfg.level,
                               floor=floor, prior=cfg.prior)
    location = np.exp(_prior_covariate("additive", n_disp, se_true, s2, testable)[:, 0])
    return KernelStats(kernels, diff, s2_fit, df_fit, nb.astype(float), nc.astype(float), location,
                       np.where(testable, p, np.nan))


def gate_pvalues(st: pd.DataFrame, kernels: pd.Index) -> np.ndarray:
    rows = st[(st["metric"] == DUR) & (st["kernel"] != "*")]
    return rows.set_index(rows["kernel"].astype(str))["p_value"].reindex(kernels).to_numpy(float)


# ---------------------------------------------------------------------------------------------
# oracle rules


def oracle_variance(aa: list[KernelStats]) -> np.ndarray:
    """Each kernel's between-process variance: mean s^2 over the A/A replicates."""
    s = np.array([k.s2 for k in aa])
    n = np.isfinite(s).sum(axis=0)
    return np.where(n > 0, np.nansum(s, axis=0) / np.maximum(n, 1), np.nan)


def z_pvalues(ks: KernelStats, var: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return 2 * sps.norm.sf(np.abs(ks.diff) / np.sqrt(var * ks.scale))


def _log_lik(s2: np.ndarray, df: np.ndarray, loc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log density of s^2 (scaled chi^2 with df) under variance ``GRID * loc``, per kernel x grid."""
    sig = GRID[None, :] * loc[:, None]
    ll = sps.chi2.logpdf(s2[:, None] * df[:, None] / sig, df[:, None]) + np.log(df[:, None] / sig)
    return ll, sig


def _posterior(ll: np.ndarray, weights: np.ndarray) -> np.ndarray:
    w = np.exp(ll - ll.max(axis=1, keepdims=True)) * weights[None, :]
    return w / w.sum(axis=1, keepdims=True)


def _usable(ks: KernelStats) -> np.ndarray:
    return np.isfinite(ks.s2) & (ks.s2 > 0) & (ks.df > 0) & np.isfinite(ks.location) & (ks.location > 0)


def fit_prior(aa: list[KernelStats]) -> np.ndarray:
    """NPMLE weights of the variance multipliers, all kernels of all A/A replicates pooled."""
    s2, df, loc = (np.concatenate([getattr(k, f)[_usable(k)] for k in aa]) for f in ("s2", "df", "location"))
    ll, _ = _log_lik(s2, df, loc)
    lik = np.exp(ll - ll.max(axis=1, keepdims=True))
    pi = np.full(len(GRID), 1.0 / len(GRID))
    for _ in range(EM_ITERS):
        w = lik * pi
        pi = (w / w.sum(axis=1, keepdims=True)).mean(axis=0)
    return pi


def prior_pvalues(ks: KernelStats, pi: np.ndarray) -> np.ndarray:
    ok = _usable(ks)
    ll, sig = _log_lik(ks.s2[ok], ks.df[ok], ks.location[ok])
    w = _posterior(ll, pi)
    p = np.full(len(ks.s2), np.nan)
    p[ok] = (w * 2 * sps.norm.sf(np.abs(ks.diff[ok])[:, None] / np.sqrt(sig * ks.scale[ok][:, None]))).sum(axis=1)
    return p


def alarms(p: np.ndarray, ks: KernelStats, family: np.ndarray) -> np.ndarray:
    """Kernels flagged slower: BH over ``family`` (missing p-values count as 1)."""
    q = np.full(len(p), np.nan)
    q[family] = stats.bh_qvalues(np.where(np.isfinite(p[family]), p[family], 1.0))
    return family & (q <= FDR) & (ks.diff > 0)


# ---------------------------------------------------------------------------------------------


@dataclass
class Record:
    slowdown: float  # 0 for A/A
    slowed: int  # index into ks.kernels, -1 for A/A
    ks: KernelStats
    pvalues: dict[str, np.ndarray]  # gate rules (oracles are added after all A/A replicates)
    verdict_hit: bool  # gate verdicts (assign_verdicts, threshold 0): alarm / slowed kernel flagged


GATE = "1. gate (no history)"
ORACLE_VAR = "2. oracle: known variance (z)"
ORACLE_G = "3. oracle: known prior G (NPMLE)"
VERDICTS = "   ref: gate verdicts (gate_accuracy.py)"


def one_comparison(rep: ga.Replicate, values: np.ndarray, history: dict[int, pd.DataFrame],
                   slowed_name: str | None, slowdown: float) -> Record:
    base, cand = ga.to_samples(rep, values)
    base, cand = compact_samples(base), compact_samples(cand)
    cfg = GateConfig()
    st = compare_stats(base, cand, cfg)
    ks = kernel_stats(base, cand, cfg)
    p_gate = gate_pvalues(st, ks.kernels)
    if not np.allclose(p_gate, ks.gate_p, rtol=1e-6, atol=1e-12, equal_nan=True):
        raise SystemExit("per-kernel statistics recomputed here no longer match compare_stats: "
                         "update kernel_stats() to follow compare._duration_rows")
    pvals = {GATE: p_gate}
    for n_runs, hist in history.items():
        pvals[f"4. gate + history of {n_runs} runs"] = gate_pvalues(compare_stats(base, cand, cfg, history=hist),
                                                                     ks.kernels)
    v = assign_verdicts(st, GateConfig(threshold=0.0))
    reg = v[v["verdict"] == "regression"]
    if slowed_name is None:
        hit = bool(len(reg))
        slowed = -1
    else:
        hit = bool((reg["metric"] == DUR).to_numpy().any() and (reg["kernel"].astype(str) == slowed_name).any())
        slowed = int(ks.kernels.get_loc(slowed_name))
    return Record(slowdown, slowed, ks, pvals, hit)


def run_scenario(pool: ga.StepPool, reps_aa: int, reps_det: int, seed: int) -> dict:
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    elig, cv = ga.eligible_kernels(pool, rng)
    runs = ga.history_pool(pool, rng) if ga.HISTORY_RUNS else []
    records: list[Record] = []
    for _ in range(reps_aa):
        rep = ga.make_replicate(pool, rng)
        records.append(one_comparison(rep, rep.value, ga.draw_history(runs, rng), None, 0.0))
    for s in SLOWDOWNS:
        for _ in range(reps_det):
            rep = ga.make_replicate(pool, rng)
            k = int(rng.choice(elig))
            values = rep.value * np.where((rep.kernel == k) & (rep.unit >= ga.UNITS_PER_SIDE), 1 + s, 1.0)
            records.append(one_comparison(rep, values, ga.draw_history(runs, rng), pool.names[k], s))
    aa = [r.ks for r in records if r.slowdown == 0]
    var = oracle_variance(aa)
    pi = fit_prior(aa)
    tally: dict[str, dict[float, list[float]]] = {}
    for r in records:
        family = np.isfinite(r.pvalues[GATE])
        pv = {GATE: r.pvalues[GATE], ORACLE_VAR: z_pvalues(r.ks, var), ORACLE_G: prior_pvalues(r.ks, pi)}
        pv.update({k: v for k, v in r.pvalues.items() if k != GATE})
        for rule, p in pv.items():
            flag = alarms(p, r.ks, family)
            tally.setdefault(rule, {}).setdefault(r.slowdown, []).append(
                float(flag.any()) if r.slowed < 0 else float(flag[r.slowed]))
        tally.setdefault(VERDICTS, {}).setdefault(r.slowdown, []).append(float(r.verdict_hit))
    return {"tally": tally, "eligible": len(elig), "kernels": len(pool.names), "seconds": time.perf_counter() - t0,
            "cv": float(np.median(cv[elig])), "prior_sd": _log_sd(pi)}


def _log_sd(pi: np.ndarray) -> float:
    lg = np.log(GRID)
    m = (pi * lg).sum()
    return float(np.sqrt((pi * (lg - m) ** 2).sum()))


def format_table(name: str, out: dict, reps_aa: int, reps_det: int) -> str:
    head = ["rule", f"false alarms/test ({reps_aa} A/A)"] + [f"detect 1k {int(round(100 * s))}% ({reps_det})"
                                                             for s in SLOWDOWNS]
    order = [r for r in out["tally"] if r != VERDICTS] + [VERDICTS]  # rules in insertion order
    rows = [head]
    for rule in order:
        d = out["tally"][rule]
        rows.append([rule] + [f"{100 * np.mean(d[s]):.1f}%" if d.get(s) else "-" for s in (0.0,) + SLOWDOWNS])
    w = [max(len(r[i]) for r in rows) for i in range(len(head))]
    fmt = lambda r: "| " + " | ".join(c.ljust(x) for c, x in zip(r, w)) + " |"  # noqa: E731
    lines = [f"scenario {name}: {out['kernels']} kernels, {ga.UNITS_PER_SIDE} processes per side, threshold 0, "
             f"BH FDR {FDR}; {out['eligible']} kernels eligible for the slowdown (per-process median CV "
             f"median {100 * out['cv']:.2f}%); oracle G: sd of log multiplier {out['prior_sd']:.2f}; "
             f"{out['seconds']:.0f} s",
             fmt(rows[0]), "|" + "|".join("-" * (x + 2) for x in w) + "|"]
    lines += [fmt(r) for r in rows[1:]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps-aa", type=int, default=300)
    ap.add_argument("--reps-det", type=int, default=60, help="replicates per slowdown size")
    ap.add_argument("--scenarios", default="real-resampled",
                    help=f"comma-separated, of {', '.join(ga.SCENARIO_SEEDS)}")
    ap.add_argument("--history-runs", default="3,10", help="earlier runs in the variance history")
    args = ap.parse_args(argv)
    ga.HISTORY_RUNS = tuple(int(x) for x in args.history_runs.split(",") if x.strip())
    t0 = time.perf_counter()
    for name in args.scenarios.split(","):
        if name not in ga.SCENARIO_SEEDS:
            ap.error(f"unknown scenario {name!r}")
        i = ga.SCENARIO_SEEDS[name]
        if name.startswith("real"):
            if not ga.REAL.exists():
                print(f"scenario {name}: skipped ({ga.REAL} absent)")
                continue
            pool = ga.load_real()
            if name == "real-resampled":
                pool.resample_steps = ga.RESAMPLED_STEPS
        else:
            pool = ga.synthetic(name, 100 + i)
        out = run_scenario(pool, args.reps_aa, args.reps_det, seed=1000 + i)
        print(format_table(name, out, args.reps_aa, args.reps_det), flush=True)
        print()
    print(f"elapsed {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
