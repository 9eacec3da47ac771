"""Predicted power (``gemmperf plan``, ``gate/power.py``) against the real gate on simulated tests.

Noise model and trace: those of ``benchmarks/gate_regimes.py`` (the real 908 trace,
``real-resampled``: each process draws whole recorded steps with replacement, then gets a 1 %
per-process factor shared by its kernels and a ~0.35 % per-kernel one; both sides compacted as
the plugin stores them).

* **Predicted.** ``--pilots`` baseline records of 4 processes are drawn; each is planned as
  ``gemmperf plan`` plans a stored record (``power.plan``), and the predicted power of a cell is
  the mean over the pilots of the plan's power for that kernel, change and count (the spread
  over pilots is what one user's single record adds; printed as its mean sd).
* **Observed.** Rounds of simulated tests, one per count ``n`` per side each (baseline and
  candidate of ``n`` processes); in each, one kernel of the candidate is made slower by the
  change (one kernel per comparison: the plan's single-change case) and the real gate
  (``compare``, first look, the rule of ``--threshold``) judges it; "detected" = that kernel's
  row is ``regression``. A cell takes ``--reps`` tests (200: binomial sd <= 3.5 points), or
  ``--min-reps`` (40) when those all agree (its exact 95 % interval then lies within 9 points
  of 0 or 100, and more tests would not move the comparison).
* **Kernels.** A handful of kernels of different noise: those whose per-process sd in the
  pilots is nearest to each of 0.4, 0.7, 1, 1.5 and 2 %.
* ``--history-runs N``: every record, the pilots' and each simulated test's baseline, carries a
  variance history of N earlier runs of 4 processes (drawn from 40 simulated ones), which the
  plan and the gate both pool: the plan's variance then rests on ~3N more df.

Prints a header line with the command and date, predicted / observed [95 % interval]
(|difference|) per (kernel, change, count), and a last line "max |diff| X points, mean Y,
cells > 10: N of M; > 10 beyond the observed 95 % interval: K": a cell whose observed power
rests on a few hundred tests misses by more than 10 points by chance alone now and then, so
the count that says the model is off is K (the prediction outside the Clopper-Pearson interval
by more than 10 points). ``--quick`` runs a small grid (a few minutes on an idle machine);
``--cache FILE`` keeps the simulation (pilot records, the gate's detections and the random
generators' states, none of which a change of the plan alters): with the same arguments only
the prediction is re-run, and a larger ``--reps`` goes on adding tests where it stopped (the
file is written every minute). The results, with the command and date,
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
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gate_accuracy as ga  # noqa: E402
import gate_regimes as gr  # noqa: E402
from pytest_gemmperf.gate import power as pw  # noqa: E402
from pytest_gemmperf.gate.compare import GateConfig, compare, variance_contribution  # noqa: E402
from pytest_gemmperf.gate.samples import compact_samples  # noqa: E402

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
    base, cand = samples(list(pool.names), pool.category, kernel, unit, value, units)
    return base, cand, (kernel, unit, value)


def samples(names: list[str], category: np.ndarray, kernel: np.ndarray, unit: np.ndarray, value: np.ndarray,
            units: int) -> list[pd.DataFrame]:
    """``gate_regimes.samples`` (category totals on), frame for frame, built from one table of
    string columns: concatenating its categorical kernels with the totals' strings was two
    thirds of a draw's time."""
    groups = int(unit.max()) // units + 1
    labels = np.array([f"host/{u}/0/{u}" for u in range(groups * units)], dtype=object)
    cats = np.unique(category[kernel])
    cc = np.searchsorted(cats, category[kernel])
    tot = np.bincount(unit * len(cats) + cc, weights=value, minlength=groups * units * len(cats))
    uu, ci = np.divmod(np.arange(len(tot)), len(cats))
    keep = tot > 0
    every = np.array(list(names) + ["category:" + c for c in cats], dtype=object)
    code = np.concatenate([kernel, len(names) + ci[keep]])
    metric = np.where(np.arange(len(code)) < len(kernel), "dur_ns", "category_total_ns").astype(object)
    d = pd.DataFrame({"point": "p", "kernel": pd.array(every[code], dtype="str"),
                      "metric": pd.array(metric, dtype="str"),
                      "unit": pd.array(labels[np.concatenate([unit, uu[keep]])], dtype="str"),
                      "value": np.concatenate([value, tot[keep]])})
    df = compact_samples(d)  # per unit: splitting afterwards is exact
    group = df["unit"].map({lab: i // units for i, lab in enumerate(labels)}).to_numpy()
    return [df[group == g].reset_index(drop=True) for g in range(groups)]


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
        (one,) = samples(list(pool.names), pool.category, kernel, unit, value, PILOT_UNITS)
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
    history), the kernels chosen, and per (kernel, change, count) the simulated tests run and
    how many of them ended ``regression`` on the slowed kernel; the generators' states, so
    that a later call with more ``--reps`` goes on where this one stopped."""

    key: tuple
    pilots: list[tuple[pd.DataFrame, pd.DataFrame | None]]
    kernels: list[int]
    hits: np.ndarray
    trials: np.ndarray
    rounds: int
    state: tuple
    seconds: float

    @property
    def observed(self) -> np.ndarray:
        return self.hits / np.maximum(self.trials, 1)


def _key(args: argparse.Namespace) -> tuple:
    return (args.pilots, args.threshold, args.seed, args.history_runs, tuple(args.effects),
            tuple(args.counts), tuple(args.sds), PILOT_UNITS, args.min_reps)


def _open(sim: Simulated, reps: int, min_reps: int) -> np.ndarray:
    """Cells that still take tests: fewer than ``reps``, and not ``min_reps`` or more that all
    agree (every one detected, or none: the 95 % interval is then within 8.8 points of 100 or
    0 at 40 tests, and more tests would not move the comparison)."""
    settled = (sim.trials >= min_reps) & ((sim.hits == 0) | (sim.hits == sim.trials))
    return (sim.trials < reps) & ~settled


def start(pool: ga.StepPool, args: argparse.Namespace) -> Simulated:
    """The pilot records, the kernels and the history pool; no simulated test yet."""
    cfg = GateConfig(threshold=args.threshold)
    rng = np.random.default_rng(args.seed)
    pilots = [draw(pool, rng, PILOT_UNITS)[0] for _ in range(args.pilots)]
    kernels = pick_kernels(pool, [pw.row_noise(b, cfg)[0] for b in pilots], args.sds)
    # the history's own generator: the pilots and the kernels are those of a run without one
    hrng = np.random.default_rng(args.seed + 1)
    runs = history_pool(pool, hrng) if args.history_runs else []
    records = [(base, pick_history(runs, hrng, args.history_runs)) for base in pilots]
    shape = (len(kernels), len(args.effects), len(args.counts))
    return Simulated(_key(args), records, kernels, np.zeros(shape), np.zeros(shape), 0,
                     (rng.bit_generator.state, hrng.bit_generator.state, runs), 0.0)


def simulate(pool: ga.StepPool, sim: Simulated, args: argparse.Namespace, save=lambda sim: None) -> Simulated:
    """Rounds of simulated tests (one per count each) until every cell has ``--reps`` tests or
    is settled (:func:`_open`); a count none of whose cells is open draws nothing. ``save``
    is called every minute and at the end (the cache: an interrupted run loses a minute)."""
    names = list(pool.names)
    cfg = GateConfig(threshold=args.threshold)
    rng, hrng = np.random.default_rng(), np.random.default_rng()
    rng.bit_generator.state, hrng.bit_generator.state, runs = sim.state
    t0, saved = time.perf_counter() - sim.seconds, time.perf_counter()
    while (todo := _open(sim, args.reps, args.min_reps)).any():
        for ci, n in enumerate(args.counts):
            if not todo[:, :, ci].any():
                continue
            base, cand, raw = draw(pool, rng, n)
            history = pick_history(runs, hrng, args.history_runs)
            for ki, ei in zip(*np.nonzero(todo[:, :, ci])):
                k, e = sim.kernels[ki], args.effects[ei]
                v = compare(base, slowed(pool, cand, raw, n, k, e), cfg, history=history)
                row = v[(v["kernel"] == names[k]) & (v["metric"] == "dur_ns")]
                sim.hits[ki, ei, ci] += float((row["verdict"] == "regression").any())
                sim.trials[ki, ei, ci] += 1
        sim.rounds += 1
        sim.state = (rng.bit_generator.state, hrng.bit_generator.state, runs)
        sim.seconds = time.perf_counter() - t0
        if time.perf_counter() - saved > 60:
            save(sim)
            saved = time.perf_counter()
            print(f"  round {sim.rounds}: {int(todo.sum())} cells open ({sim.seconds:.0f} s)",
                  file=sys.stderr, flush=True)
    save(sim)
    return sim


def simulated(pool: ga.StepPool, args: argparse.Namespace) -> Simulated:
    """:func:`simulate`, continuing the one kept in ``--cache`` for the same arguments (the
    gate's detections do not depend on the plan: iterating on the plan's model re-runs only
    the prediction; raising ``--reps`` adds tests to the cells still open). A cache is valid
    only for the gate that wrote it."""
    path = Path(args.cache) if args.cache else None
    sim = None
    if path is not None and path.exists():
        with path.open("rb") as fh:
            sim = pickle.load(fh)
        if getattr(sim, "key", None) != _key(args):
            sim = None

    def save(s: Simulated) -> None:
        if path is not None:
            tmp = path.with_name(path.name + ".tmp")
            with tmp.open("wb") as fh:
                pickle.dump(s, fh)
            tmp.replace(path)

    return simulate(pool, sim or start(pool, args), args, save)


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
    return _table(list(pool.names), sim, pilot_noise, args, pred, pred_sd)


def interval(hits: np.ndarray, trials: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson interval of each observed power (exact: it holds at 0 and 100 %)."""
    a = (1 - level) / 2
    with np.errstate(invalid="ignore"):
        lo = np.where(hits > 0, sps.beta.ppf(a, hits, trials - hits + 1), 0.0)
        hi = np.where(hits < trials, sps.beta.ppf(1 - a, hits + 1, trials - hits), 1.0)
    return lo, hi


def _table(names, sim: Simulated, pilot_noise, args, pred, pred_sd) -> str:
    kernels, obs = sim.kernels, sim.observed
    diff = np.abs(pred - obs)
    lo, hi = interval(sim.hits, sim.trials)
    beyond = np.fmax(lo - pred, pred - hi)  # how far the prediction lies outside the interval
    sd_of = {}
    for rows in pilot_noise:
        for r in rows:
            if r.metric == "dur_ns":
                sd_of.setdefault(r.kernel, []).append(r.sd)
    head = ["kernel (sd per process)", "change"] + [f"{n}/side" for n in args.counts]
    rows = [head]
    pct = lambda x: f"{100 * x:.0f}"  # noqa: E731
    for ki, k in enumerate(kernels):
        label = f"{names[k][:28]} ({100 * np.mean(sd_of[names[k]]):.2f} %)"
        for ei, e in enumerate(args.effects):
            rows.append([label if ei == 0 else "", f"{100 * e:g} %"]
                        + [f"{pct(pred[c])} / {pct(obs[c])} [{pct(lo[c])}-{pct(hi[c])}] ({pct(diff[c])})"
                           for c in ((ki, ei, ci) for ci in range(len(args.counts)))])
    w = [max(len(r[i]) for r in rows) for i in range(len(head))]
    fmt = lambda r: "| " + " | ".join(c.ljust(x) for c, x in zip(r, w)) + " |"  # noqa: E731
    hist = f", variance history of {args.history_runs} runs" if args.history_runs else ", no variance history"
    lines = [f"# python benchmarks/plan_power.py {' '.join(args.argv)}".rstrip() + f"  ({time.strftime('%Y-%m-%d')})",
             f"plan vs gate, real-resampled, threshold {100 * args.threshold:g} %, FDR {GateConfig().fdr:g}{hist}: "
             f"predicted (mean over {args.pilots} pilot records of {PILOT_UNITS} processes) / observed "
             f"[95 % interval] (|difference|, points); observed over up to {args.reps} simulated tests per cell, "
             f"{args.min_reps} where all agree", fmt(rows[0]),
             "|" + "|".join("-" * (x + 2) for x in w) + "|"] + [fmt(r) for r in rows[1:]]
    se = np.sqrt(obs * (1 - obs) / np.maximum(sim.trials, 1))
    lines.append(f"mean signed difference {100 * (pred - obs).mean():+.1f} points; mean sd of one pilot's "
                 f"prediction {100 * pred_sd.mean():.1f} points; observed cells: {int(sim.trials.min())}-"
                 f"{int(sim.trials.max())} tests, binomial sd <= {100 * se.max():.1f} points; "
                 f"simulation {sim.seconds:.0f} s")
    lines.append(f"max |diff| {100 * diff.max():.1f} points, mean {100 * diff.mean():.1f}, "
                 f"cells > 10: {int((diff > 0.10).sum())} of {diff.size}; "
                 f"> 10 beyond the observed 95 % interval: {int((beyond > 0.10).sum())} "
                 f"({int((beyond > 0.10).sum() - (pred - hi > 0.10).sum())} predicted low)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200,
                    help="simulated tests per (kernel, change, count) (default 200: binomial sd <= 3.5 points)")
    ap.add_argument("--min-reps", type=int, default=40,
                    help="a cell whose first N tests all agree (every one detected, or none) takes no more "
                         "(default 40)")
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
        args.reps, args.min_reps, args.pilots = 30, 30, 3
    print(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
