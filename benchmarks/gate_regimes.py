"""Gate accuracy across regimes: process counts, run lengths, shorter candidates,
family-wide slowdowns and kernel swaps. Run through ``benchmarks/gate_accuracy.py`` (its
``--regimes`` rows) or on its own: ``python benchmarks/gate_regimes.py [--quick]``.

Noise model (an independent check): each process draws its iterations from the
scenario (real 908 trace: whole recorded steps drawn with replacement, so every kernel keeps
its real per-step dispatch count, shape mix and tails; synthetic: ``gate_accuracy.synthetic``),
then gets a per-process factor of sd ``SIGMA_PROCESS`` (1 %) shared by all its kernels and a
per-kernel one (sd ~0.35 %). Both sides are compacted as the plugin stores them
(``compact_samples``: 21 quantiles and the dispatch count per kernel and process).

Rows (each a fraction of simulated tests, replicate counts printed):

* ``A/A``: both sides from the same distribution; "alarm" = any ``regression`` verdict
  anywhere in the test (kernels, ``*``, dispersion, category totals). Regimes: 2/3/4/8/16
  processes per side, 8/16/32/64 iterations per process, a candidate with 30 % fewer or 50 %
  more iterations than the baseline (there "alarm" also counts any kernel ``improvement``;
  category totals are left out of that row because their per-unit-of-work normalisation is
  built elsewhere, ``gate/samples.py``).
* ``family X %``: the test gates GEMMs only (``kernels=[r"^Cijk_"]``: only GEMM kernels and
  their category total in the samples) and every GEMM of the candidate is X % slower.
  "fails" = the test has a regression; "GEMM rows" = mean fraction of GEMM kernel rows that are
  ``regression``.
* ``swap +30 %`` / ``swap +-0 %``: the baseline's top GEMM (largest total time) is replaced in
  the candidate by a kernel of another name (Tensile tile parameters changed; synthetic:
  another template argument), 30 % slower or equally fast. "fails" as above; "paired" = the
  fraction of tests where the gate paired the two kernels (``gate/pairing.py``).
* ``single kernel 3 %``: one kernel with >= 50 dispatches in every process (drawn at random
  per test; on the real trace most such kernels are far noisier than the steadiest ones that
  ``gate_accuracy.py`` slows) is 3 % slower, all kernels gated. "alarm/fails" = that kernel's
  row is ``regression``.
* ``top GEMM 5 %``: the top GEMM (largest total time) is 5 % slower, all kernels gated;
  "alarm/fails" = its row is ``regression``.

Results, with the command and date of each table: ``docs/statistics.md`` ("Accuracy").
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gate_accuracy as ga  # noqa: E402
from pytest_gemmperf.gate.compare import GateConfig, assign_verdicts, compare, compare_stats  # noqa: E402
from pytest_gemmperf.gate.confirm import ConfirmConfig, judge_round, settled, suspicious  # noqa: E402
from pytest_gemmperf.gate import stats as gstats  # noqa: E402
from pytest_gemmperf.gate.metrics import CONTROL_NS, DISPATCH_COUNT  # noqa: E402
from pytest_gemmperf.gate.prepared import compact_order  # noqa: E402

SIGMA_PROCESS = 0.01
#: quantiles a stored baseline keeps per (kernel, process) (``compact_samples``' default)
COMPACT_QUANTILES = 21


def rules_at(**knobs) -> dict[str, GateConfig]:
    """The two first-look rules (default threshold, threshold 0) with other gate knobs set
    alike (``gate_first_look.py --shared-alpha``)."""
    return {"default": GateConfig(**knobs), "threshold 0": GateConfig(threshold=0.0, **knobs)}


RULES = rules_at()
#: confirmation columns (the plugin's default ``--gemmperf-confirm`` rounds): name -> the
#: first-look rule it confirms (the plugin default is the second)
CONFIRM_RULES = {f"threshold 0 + confirm {ConfirmConfig().rounds}": "threshold 0",
                 f"default + confirm {ConfirmConfig().rounds}": "default"}


@dataclass(frozen=True)
class Regime:
    label: str
    kind: str = "aa"  # "aa", "family", "swap", "single", "top"
    units: int = 4
    iters: int | None = None  # per process; None: the scenario's default
    cand_factor: float = 1.0  # candidate iterations / baseline iterations
    effect: float = 0.0  # family slowdown or swap ratio - 1
    #: the test gates the GEMMs only (the rest are the samples' within-process controls);
    #: "family" regimes always do
    gemm_only: bool = False
    #: the other kernels' per-process factor: None, the GEMMs' (one factor per process); a
    #: number: a factor of their own of that sd, independent of the GEMMs'
    other_factor: float | None = None
    #: a GEMM-heavy trace: only this many other kernels (drawn per test), each with an extra
    #: per-process noise of ``few_others_noise`` (0: every kernel of the trace)
    few_others: int = 0
    few_others_noise: float = 0.03


def regimes() -> list[Regime]:
    out = [Regime(f"A/A {u} processes/side", units=u) for u in (2, 3, 4, 8, 16)]
    out += [Regime(f"A/A {n} iterations/process", iters=n) for n in (8, 16, 23, 32, 64)]
    out += [Regime("A/A candidate 30 % fewer iterations", cand_factor=0.7),
            Regime("A/A candidate 50 % more iterations", cand_factor=1.5)]
    out += [Regime("A/A GEMM-only test (other kernels as controls)", gemm_only=True),
            Regime("A/A GEMM-only, other kernels with their own 1 % factor", gemm_only=True,
                   other_factor=SIGMA_PROCESS),
            Regime("A/A GEMM-only, GEMM-heavy trace (4 other kernels, 3 % noise each)", gemm_only=True,
                   few_others=4)]
    out += [Regime(f"family {int(100 * e)} % (GEMM-only test)", kind="family", effect=e) for e in (0.04, 0.07, 0.10)]
    out += [Regime("family 7 %, 2 processes/side", kind="family", effect=0.07, units=2),
            Regime("family 7 %, 8 processes/side", kind="family", effect=0.07, units=8)]
    out += [Regime("swap +30 %", kind="swap", effect=0.30), Regime("swap +-0 %", kind="swap", effect=0.0)]
    out += [Regime("single kernel 3 %", kind="single", effect=0.03)]
    out += [Regime("top GEMM 5 %", kind="top", effect=0.05)]
    return out


# ---------------------------------------------------------------------------------------------
# simulation


def default_iters(pool: ga.StepPool) -> int:
    return ga.RESAMPLED_STEPS if pool.per_step_sampler is None else ga.STEPS_PER_PROCESS


def draw(pool: ga.StepPool, rng: np.random.Generator, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """Kernel codes and durations of ``iters`` iterations of one process (no factors yet)."""
    if pool.per_step_sampler is None:
        steps = np.sort(rng.integers(0, len(pool.start) - 1, iters))  # time-ordered draw
        lo, hi = pool.start[steps], pool.start[steps + 1]
        idx = np.repeat(hi - lo, hi - lo)
        idx = np.arange(idx.size) - np.repeat(np.cumsum(hi - lo) - (hi - lo), hi - lo) + np.repeat(lo, hi - lo)
        return pool.kernel[idx], pool.value[idx]
    old = ga.STEPS_PER_PROCESS
    ga.STEPS_PER_PROCESS = iters
    try:
        return ga.draw_process(pool, rng, np.zeros(0, int))
    finally:
        ga.STEPS_PER_PROCESS = old


def simulate(pool: ga.StepPool, rng: np.random.Generator, r: Regime, units: range,
             others: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """(kernel, unit, value) of processes ``units`` of one comparison: units ``0..r.units-1`` are
    the baseline, the rest candidate processes (the first look's, then each confirmation
    round's ``r.units``; same distribution). ``others``: per kernel, whether it is one of the
    regime's other (non-GEMM) kernels, which get their own factor where the regime says so."""
    n_k = len(pool.names)
    it = r.iters or default_iters(pool)
    ks, us, vs = [], [], []
    for u in units:
        n = it if u < r.units else max(2, int(round(it * r.cand_factor)))
        k, v = draw(pool, rng, n)
        shared = rng.normal(0, SIGMA_PROCESS)
        if others is not None and r.other_factor is not None:
            shared = np.where(others, rng.normal(0, r.other_factor), shared)
        factor = shared + rng.normal(0, 1, n_k) * pool.sigma_kernel
        if others is not None and r.few_others:
            factor = factor + np.where(others, rng.normal(0, r.few_others_noise, n_k), 0.0)
        ks.append(k)
        us.append(np.full(len(k), u))
        vs.append(v * np.exp(factor[k]))
    return np.concatenate(ks), np.concatenate(us), np.concatenate(vs)


def _text_rank(labels: np.ndarray) -> np.ndarray:
    """Each label's rank in text order (what sorting a column of them gives)."""
    return np.argsort(np.argsort(labels, kind="stable"), kind="stable")


def samples(names: list[str], category: np.ndarray, kernel: np.ndarray, unit: np.ndarray, value: np.ndarray,
            units: int, totals: bool = True, gated: np.ndarray | None = None) -> list[pd.DataFrame]:
    """Compacted samples of each group of ``units`` processes (baseline, candidate[, re-run]),
    category totals per unit (over every kernel) unless off. ``gated``: per kernel code, whether
    the test gates it (None: all); the others' rows are ``control_ns`` (per process, the
    median of each kernel's dispatches), as ``gate_samples`` writes them for a test whose
    regexes select a subset.

    Row for row what ``compact_samples`` makes of the uncompacted table (unit-level rows in
    their order, then the kept quantiles sorted by kernel, unit and value, then the dispatch
    counts), built on integer codes: sorting and grouping the dispatches' text labels was
    most of a simulated test's time (checked frame for frame against that table on every
    scenario, with and without controls, totals and a swapped kernel's unsorted name)."""
    groups = int(unit.max()) // units + 1 if len(unit) else 2
    labels = np.array([f"host/{u}/0/{u}" for u in range(groups * units)], dtype=object)
    names_o = np.asarray(names, dtype=object)
    is_gated = np.ones(len(kernel), bool) if gated is None else gated[kernel]
    parts: list[tuple[np.ndarray, np.ndarray, str, np.ndarray]] = []  # (unit, kernel label, metric, value)
    if not is_gated.all():
        key = unit[~is_gated].astype(np.int64) * len(names) + kernel[~is_gated]
        uniq, gid = np.unique(key, return_inverse=True)
        med, _, _ = gstats.group_median_mad(np.log(value[~is_gated]), gid.reshape(-1), len(uniq))
        uu, kk = np.divmod(uniq, len(names))
        parts.append((uu, names_o[kk], CONTROL_NS, np.exp(med)))
    if totals:
        cats = np.unique(category[kernel])
        cc = np.searchsorted(cats, category[kernel])
        tot = np.bincount(unit * len(cats) + cc, weights=value, minlength=groups * units * len(cats))
        uu, ci = np.divmod(np.arange(len(tot)), len(cats))
        keep = tot > 0
        parts.append((uu[keep], np.asarray("category:" + cats[ci[keep]], dtype=object), "category_total_ns",
                      tot[keep]))
    # the dispatches in compact_samples' order: kernel and unit labels as text sorts them, then
    # value (kernels alone stay the categorical of ``names``, which sorts in that order); the
    # gate's own compaction on codes, with the kernels in the place of its (point, unit) groups
    k_rank = _text_rank(names_o) if parts else np.arange(len(names))
    u_rank = _text_rank(labels)
    by = SimpleNamespace(pu=k_rank[kernel], kernel=u_rank[unit], kernels=labels, value=value)
    kept, vals = compact_order(by, is_gated, COMPACT_QUANTILES)
    parts.append((unit[kept], names_o[kernel[kept]], "dur_ns", vals))
    keys, n = np.unique(by.pu[is_gated] * len(labels) + by.kernel[is_gated], return_counts=True)
    kr, ur = np.divmod(keys, len(labels))
    parts.append((np.argsort(u_rank)[ur], names_o[np.argsort(k_rank)[kr]], DISPATCH_COUNT, n.astype(float)))
    u_all = np.concatenate([p[0] for p in parts]).astype(np.int64)
    k_all = np.concatenate([p[1] for p in parts])
    m_all = np.concatenate([np.full(len(p[0]), p[2], dtype=object) for p in parts])
    v_all = np.concatenate([np.asarray(p[3], float) for p in parts])
    out = []
    for g in range(groups):
        sel = u_all // units == g
        out.append(pd.DataFrame({"point": np.full(int(sel.sum()), "p", dtype=object), "kernel": k_all[sel],
                                 "metric": m_all[sel], "unit": labels[u_all[sel]], "value": v_all[sel]}))
    return out


def swapped_name(name: str) -> str:
    """Another solution of the same problem: Tensile tile sizes changed, or another template
    argument for a C++ template."""
    m = re.search(r"MT(\d+)x(\d+)x(\d+)", name)
    if m:
        a, b, c = (int(x) for x in m.groups())
        return name[:m.start()] + f"MT{a}x{b + 16}x{c}" + name[m.end():]
    if "<" in name:
        return name.replace("<", "<__hip_bfloat16, ", 1)
    return name + "_v2"


def one_test(pool: ga.StepPool, rng: np.random.Generator, r: Regime, gemm: np.ndarray, top: int,
             confirm: bool = True, rules: dict[str, GateConfig] | None = None,
             stats_out: list[pd.DataFrame] | None = None) -> dict:
    """One simulated test: its measures per rule (``confirm=False``: the first look only;
    ``rules``: :func:`rules_at` of other knobs, default :data:`RULES`; ``stats_out``: gets the
    first look's ``compare_stats`` frame appended)."""
    rules = rules or RULES
    names = list(pool.names)
    if r.kind == "swap":
        names = names + [swapped_name(names[top])]
    category = np.append(pool.category, pool.category[top]) if r.kind == "swap" else pool.category
    slowed: list[int] = []
    gemm_only = r.gemm_only or r.kind == "family"
    others = ~np.isin(np.arange(len(names)), gemm)
    few = rng.choice(np.flatnonzero(others), size=min(r.few_others, int(others.sum())), replace=False) \
        if r.few_others else np.zeros(0, int)

    def groups(first: int, count: int) -> list[pd.DataFrame]:
        """Compacted samples of groups ``first .. first + count - 1`` (0: baseline, 1: the
        candidate's first look, 2...: confirmation rounds), the regime's effect applied."""
        kernel, unit, value = simulate(pool, rng, r, range(first * r.units, (first + count) * r.units), others)
        cand = unit >= r.units
        if r.few_others:  # a GEMM-heavy trace: the GEMMs and a few other kernels only
            keep = ~others[kernel] | np.isin(kernel, few)
            kernel, unit, value, cand = kernel[keep], unit[keep], value[keep], cand[keep]
        if r.kind == "family":
            value = value * np.where(cand & np.isin(kernel, gemm), 1 + r.effect, 1.0)
        if r.kind == "single":
            if not slowed:  # one kernel with >= 50 dispatches in every process of the first look
                n_k, n_u = len(names), (first + count) * r.units
                per = np.bincount(kernel * n_u + unit, minlength=n_k * n_u).reshape(n_k, -1).min(axis=1)
                slowed.append(int(rng.choice(np.flatnonzero(per >= 50))))
            value = value * np.where(cand & (kernel == slowed[0]), 1 + r.effect, 1.0)
        if r.kind == "top":
            value = value * np.where(cand & (kernel == top), 1 + r.effect, 1.0)
        if r.kind == "swap":
            hit = cand & (kernel == top)
            kernel = np.where(hit, len(names) - 1, kernel)
            value = value * np.where(hit, 1 + r.effect, 1.0)
        out = samples(names, category, kernel, unit, value, r.units, totals=r.cand_factor == 1.0,
                      gated=~others if gemm_only else None)
        return out[first:first + count]

    b, c = groups(0, 2)
    st = compare_stats(b, c, rules["default"])
    if stats_out is not None:
        stats_out.append(st)
    verdicts = {rule: assign_verdicts(st, cfg) for rule, cfg in rules.items()}
    extra = {}
    reruns: list[pd.DataFrame] = []  # drawn once, shared by both confirmation columns

    def rerun(n: int) -> pd.DataFrame:
        while len(reruns) < n:
            reruns.extend(groups(2 + len(reruns), 1))
        return reruns[n - 1]

    for name, first_rule in (CONFIRM_RULES.items() if confirm else ()):
        verdicts[name], extra[name] = confirmed(b, c, rerun, rules[first_rule], r.units)
    out = {}
    for rule, v in verdicts.items():
        reg = v["verdict"] == "regression"
        dur = v[(v["metric"] == "dur_ns") & (v["kernel"] != "*")]
        if r.kind == "aa":
            alarm = reg.any() if r.cand_factor == 1.0 else dur["verdict"].isin(["regression", "improvement"]).any()
            out[rule] = {"alarm": float(alarm)}
        elif r.kind in ("single", "top"):
            hit = dur[dur["kernel"] == names[slowed[0] if r.kind == "single" else top]]
            out[rule] = {"detected": float((hit["verdict"] == "regression").any()), "fails": float(reg.any())}
        elif r.kind == "family":
            out[rule] = {"fails": float(reg.any()), "GEMM rows": float((dur["verdict"] == "regression").mean())}
        else:
            out[rule] = {"fails": float(reg.any()),
                         "paired": float(dur["note"].astype(str).str.startswith("swapped:").any())}
    for name in extra:
        out[name]["extra processes"] = float(extra[name])
    return out


def confirmed(base: pd.DataFrame, cand: pd.DataFrame, rerun, cfg: GateConfig, units: int,
              rounds: int = ConfirmConfig().rounds) -> tuple[pd.DataFrame, int]:
    """The plugin's default confirmation (``--gemmperf-confirm``, ``gate_step.GateStep.confirm``):
    a suspicious first look re-runs the point (``units`` more candidate processes a round,
    ``rerun(n)`` draws round n), the point is judged on the combined candidate against the
    re-runs alone, and rounds go on while the point is still suspicious and has no
    regression, up to ``rounds``. Returns (final verdicts, extra processes)."""
    first = compare(base, cand, cfg)
    if not suspicious(first).any():
        return first, 0
    combined, alone, final = cand, [], first
    ccfg = ConfirmConfig(rounds=rounds)
    for n in range(1, rounds + 1):
        alone.append(rerun(n))
        combined = pd.concat([combined, alone[-1]], ignore_index=True)
        final, _ = judge_round(first, lambda s, c: compare(base, s, c), combined,
                               pd.concat(alone, ignore_index=True), cfg, ccfg, n)
        if settled(final, ccfg):
            break
    return final, units * len(alone)


def gemms(pool: ga.StepPool) -> tuple[np.ndarray, int]:
    """The GEMM kernels' codes and the top GEMM's (largest total time)."""
    gemm = np.flatnonzero(pool.category == "gemm")
    tot = np.bincount(pool.kernel, weights=pool.value, minlength=len(pool.names))
    if pool.per_step_sampler is not None:
        kern, typical, _ = pool.per_step_sampler[1]
        tot = np.bincount(kern, weights=typical, minlength=len(pool.names))
    return gemm, int(gemm[np.argmax(tot[gemm])])


def load_pool(name: str) -> ga.StepPool | None:
    """The scenario's step pool (None: the real trace is absent)."""
    if name.startswith("real"):
        return ga.load_real() if ga.REAL.exists() else None
    return ga.synthetic(name, 100 + ga.SCENARIO_SEEDS[name])


def run(pool: ga.StepPool, scenario: str, reps_aa: int, reps_eff: int, seed: int,
        only: list[str] | None = None) -> str:
    rng = np.random.default_rng(seed)
    gemm, top = gemms(pool)
    lines = [f"scenario {scenario}: {len(pool.names)} kernels ({len(gemm)} GEMMs), per-process factor "
             f"{100 * SIGMA_PROCESS:g} %, default {default_iters(pool)} iterations/process; swap target "
             f"{pool.names[top][:60]}"]
    rules = [*RULES, *CONFIRM_RULES]
    head = (["regime", "reps"] + [f"{rule}: {m}" for rule in rules for m in ("alarm/fails", "GEMM rows/paired")]
            + [f"{name}: extra processes/test" for name in CONFIRM_RULES])
    rows = [head]
    t0 = time.perf_counter()
    for r in regimes():
        if only and not any(o in r.label for o in only):
            continue
        n = reps_aa if r.kind == "aa" else reps_eff
        acc: dict = {}
        for _ in range(n):
            for rule, d in one_test(pool, rng, r, gemm, top).items():
                for m, x in d.items():
                    acc.setdefault(rule, {}).setdefault(m, []).append(x)
        row = [r.label, str(n)]
        extra = [acc[name].pop("extra processes") for name in CONFIRM_RULES]
        for rule in rules:
            vals = list(acc[rule].items())
            row.append(f"{100 * np.mean(vals[0][1]):.1f}%")
            row.append(f"{100 * np.mean(vals[1][1]):.1f}%" if len(vals) > 1 else "-")
        row += [f"{np.mean(e):.2f}" for e in extra]
        rows.append(row)
        print(" | ".join(row), file=sys.stderr, flush=True)
    w = [max(len(x[i]) for x in rows) for i in range(len(head))]
    fmt = lambda x: "| " + " | ".join(c.ljust(k) for c, k in zip(x, w)) + " |"  # noqa: E731
    lines += [fmt(rows[0]), "|" + "|".join("-" * (k + 2) for k in w) + "|"] + [fmt(x) for x in rows[1:]]
    lines.append(f"({time.perf_counter() - t0:.0f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps-aa", type=int, default=300)
    ap.add_argument("--reps-eff", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="40 A/A and 15 effect replicates")
    ap.add_argument("--scenarios", default="real-resampled,heavy,bimodal")
    ap.add_argument("--only", default="", help="comma-separated substrings of the regime labels to run")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps_aa, args.reps_eff = 40, 15
    only = [o for o in args.only.split(",") if o]
    for name in args.scenarios.split(","):
        print()
        print(run_scenario(name, args.reps_aa, args.reps_eff, only), flush=True)
    return 0


def run_scenario(name: str, reps_aa: int, reps_eff: int, only: list[str] | None = None) -> str:
    pool = load_pool(name)
    if pool is None:
        return f"scenario {name}: skipped ({ga.REAL} absent)"
    return run(pool, name, reps_aa, reps_eff, seed=2000 + ga.SCENARIO_SEEDS[name], only=only)


if __name__ == "__main__":
    sys.exit(main())
