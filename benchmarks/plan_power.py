"""Predicted power (``gemmperf plan``, ``gate/power.py``) against the real gate on simulated tests.

Noise model and trace: those of ``benchmarks/gate_regimes.py`` (the real 908 trace,
``real-resampled``: each process draws whole recorded steps with replacement, then gets a 1 %
per-process factor shared by its kernels and a ~0.35 % per-kernel one; both sides compacted as
the plugin stores them).

* **Predicted.** ``--pilots`` baseline records of 4 processes are drawn; each is planned as
  ``gemmperf plan`` plans a stored record (``power.plan``), and the predicted power of a cell is
  the mean over the pilots of the plan's power for that kernel, change and count (the spread
  over pilots is what one user's single record adds; printed as its mean sd).
* **Observed.** For each count ``n`` per side, ``--reps`` simulated tests (baseline and
  candidate of ``n`` processes each); in each, one kernel of the candidate is made slower by
  the change (one kernel per comparison: the plan's single-change case) and the real gate
  (``compare``, first look, the rule of ``--threshold``) judges it; "detected" = that kernel's
  row is ``regression``.
* **Kernels.** A handful of kernels of different noise: those whose per-process sd in the
  pilots is nearest to each of 0.4, 0.7, 1, 1.5 and 2 %.
* ``--history-runs N``: every record, the pilots' and each simulated test's baseline, carries a
  variance history of N earlier runs of 4 processes (drawn from 40 simulated ones), which the
  plan and the gate both pool: the plan's variance then rests on ~3N more df.

Prints a header line with the command and date, predicted / observed (|difference|) per
(kernel, change, count), and a last line "max |diff| X points, mean Y, cells > 10: N of M".
``--quick`` runs a small grid (a few minutes on an idle machine); ``--cache FILE`` keeps the
simulation (pilot records and the gate's detections, which no change of the plan alters) and
re-runs only the prediction when the arguments match. The results, with the command and date,
are in ``docs/statistics.md`` ("Planning: how many processes").
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gate_accuracy as ga  # noqa: E402
import gate_regimes as gr  # noqa: E402
from pytest_gemmperf.gate import power as pw  # noqa: E402
from pytest_gemmperf.gate.compare import GateConfig, compare, variance_contribution  # noqa: E402

PILOT_UNITS = 4
EFFECTS = (0.02, 0.03, 0.05, 0.08)
COUNTS = (2, 3, 4, 6, 8)
SDS = (0.004, 0.007, 0.01, 0.015, 0.02)
#: simulated earlier runs the variance histories are drawn from (``--history-runs``)
HISTORY_POOL = 40


def draw(pool: ga.StepPool, rng: np.random.Generator, units: int) -> tuple[pd.DataFrame, pd.DataFrame, tuple]:
    """Compacted baseline and candidate samples of ``units`` processes each, and the raw
    candidate draw (kernel, unit, value) that :func:`slowed` needs."""
    kernel, unit, value = gr.simulate(pool, rng, gr.Regime("plan", units=units), range(2 * units))
    base, cand = gr.samples(list(pool.names), pool.category, kernel, unit, value, units)
    return base, cand, (kernel, unit, value)


def slowed(pool: ga.StepPool, cand: pd.DataFrame, raw: tuple, units: int, k: int, effect: float) -> pd.DataFrame:
    """``cand`` with kernel ``k`` made ``effect`` slower: exactly what compacting the slowed
    draw gives (a compacted kernel's quantiles scale with it; its category's per-process total
    grows by ``effect`` times the kernel's time in the process), without compacting again."""
    kernel, unit, value = raw
    mine = (kernel == k) & (unit >= units)
    per_unit = np.bincount(unit[mine], weights=value[mine], minlength=2 * units)
    labels = {f"host/{u}/0/{u}": per_unit[u] for u in range(units, 2 * units)}
    out = cand.copy()
    metric, kern = out["metric"].astype(str), out["kernel"].astype(str)
    dur = ((metric == "dur_ns") & (kern == pool.names[k])).to_numpy()
    out.loc[dur, "value"] = out.loc[dur, "value"] * (1 + effect)
    tot = ((metric == "category_total_ns") & (kern == f"category:{pool.category[k]}")).to_numpy()
    out.loc[tot, "value"] = out.loc[tot, "value"] + effect * out.loc[tot, "unit"].astype(str).map(labels).to_numpy(float)
    return out


def history_pool(pool: ga.StepPool, rng: np.random.Generator, size: int = HISTORY_POOL) -> list[pd.DataFrame]:
    """Variance-history rows of ``size`` earlier runs of :data:`PILOT_UNITS` processes each
    (``variance_contribution``, what a baseline keeps per run), drawn from the same model."""
    out = []
    for _ in range(size):
        kernel, unit, value = gr.simulate(pool, rng, gr.Regime("history", units=PILOT_UNITS), range(PILOT_UNITS))
        (one,) = gr.samples(list(pool.names), pool.category, kernel, unit, value, PILOT_UNITS)
        out.append(variance_contribution(one))
    return out


def pick_history(runs: list[pd.DataFrame], rng: np.random.Generator, n: int) -> pd.DataFrame | None:
    """The history of ``n`` distinct runs of the pool (None without)."""
    if not n:
        return None
    return pd.concat([runs[i] for i in rng.choice(len(runs), n, replace=False)], ignore_index=True)


def pick_kernels(pool: ga.StepPool, pilots: list[list[pw.RowNoise]], sds: tuple[float, ...]) -> list[int]:
    """Kernel codes whose mean pilot sd is nearest to each of ``sds`` (distinct)."""
    names = list(pool.names)
    sd = {}
    for rows in pilots:
        for r in rows:
            if r.metric == "dur_ns":
                sd.setdefault(r.kernel, []).append(r.sd)
    mean = {k: float(np.mean(v)) for k, v in sd.items() if len(v) == len(pilots)}
    chosen: list[int] = []
    for target in sds:
        order = sorted(mean, key=lambda k: abs(mean[k] - target))
        pick = next(k for k in order if names.index(k) not in chosen)
        chosen.append(names.index(pick))
    return chosen


@dataclass
class Simulated:
    """What the gate did, which no change of the plan alters: the pilot records (samples and
    history), the kernels chosen, and per (kernel, change, count) the fraction of simulated
    tests whose slowed kernel was a ``regression``."""

    key: tuple
    pilots: list[tuple[pd.DataFrame, pd.DataFrame | None]]
    kernels: list[int]
    observed: np.ndarray
    seconds: float


def _key(args: argparse.Namespace) -> tuple:
    return (args.reps, args.pilots, args.threshold, args.seed, args.history_runs, tuple(args.effects),
            tuple(args.counts), tuple(args.sds), PILOT_UNITS)


def simulate(pool: ga.StepPool, args: argparse.Namespace) -> Simulated:
    """The pilot records and the real gate's detections of every cell."""
    names = list(pool.names)
    cfg = GateConfig(threshold=args.threshold)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    pilots = [draw(pool, rng, PILOT_UNITS)[0] for _ in range(args.pilots)]
    kernels = pick_kernels(pool, [pw.row_noise(b, cfg)[0] for b in pilots], args.sds)
    # the history's own generator: the pilots and the kernels are those of a run without one
    hrng = np.random.default_rng(args.seed + 1)
    runs = history_pool(pool, hrng) if args.history_runs else []
    records = [(base, pick_history(runs, hrng, args.history_runs)) for base in pilots]
    hits = np.zeros((len(kernels), len(args.effects), len(args.counts)))
    for ci, n in enumerate(args.counts):
        for _ in range(args.reps):
            base, cand, raw = draw(pool, rng, n)
            history = pick_history(runs, hrng, args.history_runs)
            for ki, k in enumerate(kernels):
                for ei, e in enumerate(args.effects):
                    v = compare(base, slowed(pool, cand, raw, n, k, e), cfg, history=history)
                    row = v[(v["kernel"] == names[k]) & (v["metric"] == "dur_ns")]
                    hits[ki, ei, ci] += float((row["verdict"] == "regression").any())
        print(f"  {n} processes/side done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return Simulated(_key(args), records, kernels, hits / args.reps, time.perf_counter() - t0)


def simulated(pool: ga.StepPool, args: argparse.Namespace) -> Simulated:
    """:func:`simulate`, or its result kept in ``--cache`` for the same arguments (the gate's
    detections do not depend on the plan: iterating on the plan's model re-runs only the
    prediction). A cache is valid only for the gate that wrote it."""
    path = Path(args.cache) if args.cache else None
    if path is not None and path.exists():
        with path.open("rb") as fh:
            sim = pickle.load(fh)
        if sim.key == _key(args):
            return sim
    sim = simulate(pool, args)
    if path is not None:
        with path.open("wb") as fh:
            pickle.dump(sim, fh)
    return sim


def predict(pool: ga.StepPool, sim: Simulated, args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, list]:
    """Per cell the mean over the pilot records of the plan's power for that kernel, change
    and count, its sd over the pilots, and each pilot's rows."""
    names = list(pool.names)
    cfg = GateConfig(threshold=args.threshold)
    pilot_noise, pilot_m = [], []
    for base, hist in sim.pilots:
        noise, m = pw.row_noise(base, cfg, hist)
        pilot_noise.append(noise)
        pilot_m.append(m)
    pred = np.zeros((len(sim.kernels), len(args.effects), len(args.counts)))
    pred_sd = np.zeros_like(pred)
    for ki, k in enumerate(sim.kernels):
        rows = [[r for r in noise if r.kernel == names[k] and r.metric == "dur_ns"] for noise in pilot_noise]
        for ei, e in enumerate(args.effects):
            for ci, n in enumerate(args.counts):
                p = [pw.power(r, e, n, n, pw.decision(cfg, m))[0] for r, m in zip(rows, pilot_m)]
                pred[ki, ei, ci], pred_sd[ki, ei, ci] = np.mean(p), np.std(p)
    return pred, pred_sd, pilot_noise


def run(args: argparse.Namespace) -> str:
    if not ga.REAL.exists():
        return f"skipped: {ga.REAL} absent"
    pool = ga.load_real()
    sim = simulated(pool, args)
    pred, pred_sd, pilot_noise = predict(pool, sim, args)
    return _table(list(pool.names), sim.kernels, pilot_noise, args, pred, sim.observed, pred_sd, sim.seconds)


def _table(names, kernels, pilot_noise, args, pred, obs, pred_sd, seconds) -> str:
    diff = np.abs(pred - obs)
    sd_of = {}
    for rows in pilot_noise:
        for r in rows:
            if r.metric == "dur_ns":
                sd_of.setdefault(r.kernel, []).append(r.sd)
    head = ["kernel (sd per process)", "change"] + [f"{n}/side" for n in args.counts]
    rows = [head]
    for ki, k in enumerate(kernels):
        label = f"{names[k][:28]} ({100 * np.mean(sd_of[names[k]]):.2f} %)"
        for ei, e in enumerate(args.effects):
            rows.append([label if ei == 0 else "", f"{100 * e:g} %"]
                        + [f"{100 * pred[ki, ei, ci]:.0f} / {100 * obs[ki, ei, ci]:.0f} ({100 * diff[ki, ei, ci]:.0f})"
                           for ci in range(len(args.counts))])
    w = [max(len(r[i]) for r in rows) for i in range(len(head))]
    fmt = lambda r: "| " + " | ".join(c.ljust(x) for c, x in zip(r, w)) + " |"  # noqa: E731
    hist = f", variance history of {args.history_runs} runs" if args.history_runs else ", no variance history"
    lines = [f"# python benchmarks/plan_power.py {' '.join(args.argv)}".rstrip() + f"  ({time.strftime('%Y-%m-%d')})",
             f"plan vs gate, real-resampled, threshold {100 * args.threshold:g} %, FDR {GateConfig().fdr:g}{hist}: "
             f"predicted (mean over {args.pilots} pilot records of {PILOT_UNITS} processes) / observed "
             f"(% of {args.reps} simulated tests per cell) (|difference|, points)", fmt(rows[0]),
             "|" + "|".join("-" * (x + 2) for x in w) + "|"] + [fmt(r) for r in rows[1:]]
    lines.append(f"mean signed difference {100 * (pred - obs).mean():+.1f} points; mean sd of one pilot's "
                 f"prediction {100 * pred_sd.mean():.1f} points; binomial sd of an observed cell <= "
                 f"{100 * 0.5 / np.sqrt(args.reps):.1f} points; simulation {seconds:.0f} s")
    lines.append(f"max |diff| {100 * diff.max():.1f} points, mean {100 * diff.mean():.1f}, "
                 f"cells > 10: {int((diff > 0.10).sum())} of {diff.size}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=100, help="simulated tests per (count, kernel, change)")
    ap.add_argument("--pilots", type=int, default=10, help="pilot baseline records the prediction averages")
    ap.add_argument("--threshold", type=float, default=0.0, help="the gate's threshold (default 0)")
    ap.add_argument("--seed", type=int, default=5000)
    ap.add_argument("--history-runs", type=int, default=0,
                    help="give every record (pilots and simulated baselines) a variance history of N "
                         "earlier runs of 4 processes, as --gemmperf-learn-variance keeps (default 0)")
    ap.add_argument("--quick", action="store_true", help="changes 3, 5 %%; counts 2, 4, 8; 3 kernels; "
                                                         "30 tests per cell, 3 pilots")
    ap.add_argument("--cache", metavar="FILE",
                    help="keep the simulation (pilot records, the gate's detections) in FILE and reuse it "
                         "when the arguments match: re-runs only the prediction")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.effects, args.counts, args.sds = EFFECTS, COUNTS, SDS
    if args.quick:
        args.effects, args.counts, args.sds = (0.03, 0.05), (2, 4, 8), (0.004, 0.01, 0.02)
        args.reps, args.pilots = 30, 3
    print(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
