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
* **Category totals** (``--categories``, default ``gemm``): the total of a category is planned
  and observed in a test that gates that category's kernels only (``kernels=[r"^Cijk_"]``): its
  records carry the other kernels as within-process controls (``control_ns``) and every category
  total, as ``gate_samples`` writes them. In each simulated test every kernel of the category is
  made slower by the change (its total then grows by exactly the change); "detected" = the
  ``category:<cat>`` row is ``regression``; predicted = the plan of that row on records of the
  same test (which plans it as that change of the category: the ``*`` row moves with it and
  opens the total at the full FDR).
* ``--oracle-units N``, the true-variance oracle: the plan's rows from one record of N processes
  per test (its variances on ~N df: the truth, as near as the step pool gives it; 128: each
  variance within ~6 % in sd, the timer ticks as often as processes show them), planned with
  each pilot's df structure (its history's df, the ``*`` row's, its family size) and averaged
  over the pilots as the plan is: the plan's model error alone, fresh and with history alike.
* ``--oracle-reps N``, the estimated-variance oracle (``plan_oracle.py``): the real gate in the
  world each pilot record describes (its processes moved to levels drawn with the record's
  covariance, each kernel's own part at the sd the plan reads for it, histories from the same
  world), N simulated tests per pilot and cell (10 where all agree), averaged over the pilots:
  the best any planner reaches that must trust the pilot's estimates. Kept in ``--cache`` +
  ``.oracle`` per pilot.
* Under each table: the share of cells a perfect predictor (each cell's true power) would
  place within 10 points of the observed, from the binomial noise of the observed power alone.
* ``--history-runs N``: every record, the pilots' and each simulated test's baseline, carries a
  variance history of N earlier runs of 4 processes (drawn from 40 simulated ones), which the
  plan and the gate both pool: the plan's variance then rests on ~3N more df.

Prints a header line with the command and date, predicted / observed [95 % interval] (|difference|)
per (row, change, count), and per kind of row (kernels, category totals) and for all cells a line
"within 10 points N of M cells (P %); max |diff| X points, mean Y; > 10 beyond the observed 95 %
interval: K": a cell whose observed power rests on a few dozen or hundred tests misses by more
than 10 points by chance alone now and then, so the count that says the model is off is K (the
prediction outside the Clopper-Pearson interval by more than 10 points). ``--kernels 0`` or
``--categories ''`` leaves a kind out. ``--quick`` runs a small grid (a few minutes on an idle machine);
``--cache FILE`` keeps the simulation (pilot records, the gate's detections and the random
generators' states, none of which a change of the plan alters): with the same arguments only
the prediction is re-run, and a larger ``--reps`` goes on adding tests where it stopped (the
file is written every minute). The results, with the command and date,
are in ``docs/statistics.md`` ("Planning: how many processes").
"""

from __future__ import annotations

import argparse
import dataclasses
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
import plan_oracle as po  # noqa: E402
from pytest_gemmperf.gate import power as pw  # noqa: E402
from pytest_gemmperf.gate.compare import GateConfig, compare, variance_contribution  # noqa: E402

PILOT_UNITS = 4
EFFECTS = (0.02, 0.03, 0.05, 0.08)
COUNTS = (2, 3, 4, 6, 8)
SDS = (0.004, 0.007, 0.01, 0.015, 0.02)
#: categories whose totals are planned, each in a test that gates its kernels only
CATEGORIES = ("gemm",)
#: simulated earlier runs the variance histories are drawn from (``--history-runs``)
HISTORY_POOL = 40
#: the records of a test that gates every kernel (the kernels' cells)
EVERY = ""
DUR, TOTAL = "dur_ns", "category_total_ns"


def draw(pool: ga.StepPool, rng: np.random.Generator, units: int) -> tuple:
    """The raw draw (kernel, unit, value) of ``units`` baseline and ``units`` candidate
    processes; :func:`sides` compacts it as one test or another records it."""
    return gr.simulate(pool, rng, gr.Regime("plan", units=units), range(2 * units))


def sides(pool: ga.StepPool, raw: tuple, units: int, test: str = EVERY) -> list[pd.DataFrame]:
    """Compacted samples of each group of ``units`` processes of ``raw`` as ``test`` records
    them: :data:`EVERY` gates every kernel; a category name gates that category's kernels only,
    the others' rows being within-process controls (category totals on)."""
    kernel, unit, value = raw
    gated = None if test == EVERY else pool.category == test
    return gr.samples(list(pool.names), pool.category, kernel, unit, value, units, gated=gated)


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
    dur = ((metric == DUR) & (kern == pool.names[k])).to_numpy()
    out.loc[dur, "value"] = out.loc[dur, "value"] * (1 + effect)
    tot = ((metric == TOTAL) & (kern == f"category:{pool.category[k]}")).to_numpy()
    out.loc[tot, "value"] = out.loc[tot, "value"] + effect * out.loc[tot, "unit"].astype(str).map(labels).to_numpy(float)
    return out


def slowed_category(pool: ga.StepPool, cand: pd.DataFrame, category: str, effect: float) -> pd.DataFrame:
    """``cand`` (records of a test gating ``category``) with every kernel of the category made
    ``effect`` slower: their compacted quantiles and the category's per-process total scale
    with it (exactly what compacting the slowed draw gives); the controls do not move."""
    names = [n for n, c in zip(pool.names, pool.category) if c == category]
    out = cand.copy()
    metric, kern = out["metric"].astype(str), out["kernel"].astype(str)
    hit = (((metric == DUR) & kern.isin(names)) | ((metric == TOTAL) & (kern == f"category:{category}"))).to_numpy()
    out.loc[hit, "value"] = out.loc[hit, "value"] * (1 + effect)
    return out


def history_pool(pool: ga.StepPool, rng: np.random.Generator, tests: tuple[str, ...],
                 size: int = HISTORY_POOL) -> dict[str, list[pd.DataFrame]]:
    """Per test (:func:`sides`), variance-history rows of ``size`` earlier runs of
    :data:`PILOT_UNITS` processes each (``variance_contribution``, what a baseline keeps per
    run), drawn from the same model; the tests share the runs."""
    out: dict[str, list[pd.DataFrame]] = {t: [] for t in tests}
    for _ in range(size):
        raw = gr.simulate(pool, rng, gr.Regime("history", units=PILOT_UNITS), range(PILOT_UNITS))
        for t in tests:
            (one,) = sides(pool, raw, PILOT_UNITS, t)
            out[t].append(variance_contribution(one))
    return out


def pick_history(rng: np.random.Generator, n: int) -> np.ndarray:
    """Indices of ``n`` distinct runs of the history pool (none without)."""
    return rng.choice(HISTORY_POOL, n, replace=False) if n else np.zeros(0, int)


def history_of(runs: dict[str, list[pd.DataFrame]], test: str, idx: np.ndarray) -> pd.DataFrame | None:
    """The history of the runs ``idx`` as ``test`` keeps it (None without)."""
    if not len(idx):
        return None
    return pd.concat([runs[test][i] for i in idx], ignore_index=True)


def pick_kernels(pool: ga.StepPool, pilots: list[list[pw.RowNoise]], sds: tuple[float, ...]) -> list[int]:
    """Kernel codes whose mean pilot sd is nearest to each of ``sds`` (distinct)."""
    names = list(pool.names)
    sd = {}
    for rows in pilots:
        for r in rows:
            if r.metric == DUR:
                sd.setdefault(r.kernel, []).append(r.sd)
    mean = {k: float(np.mean(v)) for k, v in sd.items() if len(v) == len(pilots)}
    chosen: list[int] = []
    for target in sds:
        order = sorted(mean, key=lambda k: abs(mean[k] - target))
        pick = next(k for k in order if names.index(k) not in chosen)
        chosen.append(names.index(pick))
    return chosen


@dataclass(frozen=True)
class Cell:
    """A row of the table: one kernel slowed in a test that gates every kernel, or one
    category's kernels slowed in a test that gates that category."""

    test: str  # EVERY or the category
    kernel: int = -1  # kernel code (EVERY)

    def row(self, names: list[str]) -> tuple[str, str]:
        """(kernel, metric) of the judged row."""
        return (names[self.kernel], DUR) if self.test == EVERY else (f"category:{self.test}", TOTAL)


@dataclass
class Simulated:
    """What the gate did, which no change of the plan alters: the pilot records (samples and
    history) of each test, the cells, and per (cell, change, count) the simulated tests run and
    how many of them ended ``regression`` on the judged row; the generators' states, so that a
    later call with more ``--reps`` goes on where this one stopped."""

    key: tuple
    pilots: dict[str, list[tuple[pd.DataFrame, pd.DataFrame | None]]]
    cells: list[Cell]
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
            tuple(args.counts), tuple(args.sds), tuple(args.categories), PILOT_UNITS, args.min_reps)


def _open(sim: Simulated, reps: int, min_reps: int) -> np.ndarray:
    """Cells that still take tests: fewer than ``reps``, and not ``min_reps`` or more that all
    agree (every one detected, or none: the 95 % interval is then within 8.8 points of 100 or
    0 at 40 tests, and more tests would not move the comparison)."""
    settled = (sim.trials >= min_reps) & ((sim.hits == 0) | (sim.hits == sim.trials))
    return (sim.trials < reps) & ~settled


def start(pool: ga.StepPool, args: argparse.Namespace) -> Simulated:
    """The pilot records of every test, the cells and the history pool; no simulated test yet."""
    cfg = GateConfig(threshold=args.threshold)
    tests = ((EVERY,) if args.sds else ()) + tuple(args.categories)
    rng = np.random.default_rng(args.seed)
    raws = [draw(pool, rng, PILOT_UNITS) for _ in range(args.pilots)]
    pilot_sides = {t: [sides(pool, raw, PILOT_UNITS, t)[0] for raw in raws] for t in tests}
    kernels = pick_kernels(pool, [pw.row_noise(b, cfg)[0] for b in pilot_sides[EVERY]], args.sds) \
        if EVERY in pilot_sides else []
    cells = [Cell(EVERY, k) for k in kernels] + [Cell(c) for c in args.categories]
    # the history's own generator: the pilots and the kernels are those of a run without one
    hrng = np.random.default_rng(args.seed + 1)
    runs = history_pool(pool, hrng, tests) if args.history_runs else {}
    picks = [pick_history(hrng, args.history_runs) for _ in raws]
    records = {t: [(base, history_of(runs, t, idx)) for base, idx in zip(pilot_sides[t], picks)] for t in tests}
    shape = (len(cells), len(args.effects), len(args.counts))
    return Simulated(_key(args), records, cells, np.zeros(shape), np.zeros(shape), 0,
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
            raw = draw(pool, rng, n)
            idx = pick_history(hrng, args.history_runs)
            records: dict[str, tuple] = {}  # per test, built once a cell of it is open
            for ri, ei in zip(*np.nonzero(todo[:, :, ci])):
                cell, e = sim.cells[ri], args.effects[ei]
                if cell.test not in records:
                    records[cell.test] = (*sides(pool, raw, n, cell.test), history_of(runs, cell.test, idx))
                base, cand, history = records[cell.test]
                cand = (slowed(pool, cand, raw, n, cell.kernel, e) if cell.test == EVERY
                        else slowed_category(pool, cand, cell.test, e))
                v = compare(base, cand, cfg, history=history)
                kernel, metric = cell.row(names)
                row = v[(v["kernel"] == kernel) & (v["metric"] == metric)]
                sim.hits[ri, ei, ci] += float((row["verdict"] == "regression").any())
                sim.trials[ri, ei, ci] += 1
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


def pilot_noise(sim: Simulated, cfg: GateConfig) -> dict[str, list[tuple[list[pw.RowNoise], int]]]:
    """Per test, each pilot record's rows as the plan reads them, and its family size."""
    return {t: [pw.row_noise(base, cfg, hist) for base, hist in records] for t, records in sim.pilots.items()}


def predict(pool: ga.StepPool, sim: Simulated, args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, list]:
    """Per cell the mean over the pilot records of the plan's power for its row, change and
    count, its sd over the pilots, and per cell the pilots' sd of that row."""
    names = list(pool.names)
    cfg = GateConfig(threshold=args.threshold)
    noise = pilot_noise(sim, cfg)
    pred = np.zeros((len(sim.cells), len(args.effects), len(args.counts)))
    pred_sd = np.zeros_like(pred)
    sds = []
    for ri, cell in enumerate(sim.cells):
        kernel, metric = cell.row(names)
        rows = [([r for r in rows if r.kernel == kernel and r.metric == metric], m) for rows, m in noise[cell.test]]
        sds.append([r.sd for rs, _ in rows for r in rs])
        for ei, e in enumerate(args.effects):
            for ci, n in enumerate(args.counts):
                p = [pw.power(rs, e, n, n, pw.decision(cfg, m))[0] if rs else np.nan for rs, m in rows]
                pred[ri, ei, ci], pred_sd[ri, ei, ci] = np.nanmean(p), np.nanstd(p)
    return pred, pred_sd, sds


def oracle(pool: ga.StepPool, sim: Simulated, args: argparse.Namespace) -> np.ndarray:
    """The true-variance oracle: per cell the plan's power from the rows of one record of
    ``--oracle-units`` processes per test (its variances on ~that many df: the truth, as near as
    the step pool gives it; its processes' timer ticks as often as processes show them), without
    a history, given each pilot's df structure (its variance history's df, the ``*`` row's, and
    its family size), averaged over the pilots as the plan's cells are: the plan's model error
    alone, with history as without. Its own generator: the simulation and the pilots are those
    of a run without it."""
    names = list(pool.names)
    cfg = GateConfig(threshold=args.threshold)
    rng = np.random.default_rng(args.seed + 2)
    raw = draw(pool, rng, args.oracle_units)
    noise = pilot_noise(sim, cfg)
    out = np.full((len(sim.cells), len(args.effects), len(args.counts)), np.nan)
    for ri, cell in enumerate(sim.cells):
        kernel, metric = cell.row(names)
        truth, _ = pw.row_noise(sides(pool, raw, args.oracle_units, cell.test)[0], cfg)
        true = [r for r in truth if r.kernel == kernel and r.metric == metric]
        per_pilot = []
        for rows, m in noise[cell.test]:
            mine = [r for r in rows if r.kernel == kernel and r.metric == metric]
            if not (true and mine):
                continue
            row = dataclasses.replace(true[0], history_df=mine[0].history_df,
                                      opens_history_df=mine[0].opens_history_df)
            per_pilot.append([[pw.power([row], e, n, n, pw.decision(cfg, m))[0] for n in args.counts]
                              for e in args.effects])
        if per_pilot:
            out[ri] = np.mean(per_pilot, axis=0)
    return out


#: a pilot's world cell stops at this many tests when they all agree (``--oracle-reps``)
ORACLE_MIN_REPS = 10


def estimated_oracle(pool: ga.StepPool, sim: Simulated, args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    """The estimated-variance oracle (``plan_oracle``): per cell the mean over the pilots of the
    real gate's power in the world each pilot record describes, and the tests run per cell. Each
    pilot's world is kept in ``--cache`` + ``.oracle`` once simulated (same arguments: reused)."""
    names = list(pool.names)
    cfg = GateConfig(threshold=args.threshold)
    path = Path(args.cache + ".oracle") if args.cache else None
    key = (_key(args), args.oracle_reps, ORACLE_MIN_REPS)
    done: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
    if path is not None and path.exists():
        with path.open("rb") as fh:
            kept = pickle.load(fh)
        done = kept[1] if kept[0] == key else {}
    shape = (len(sim.cells), len(args.effects), len(args.counts))
    power, tests = np.zeros(shape), np.zeros(shape)
    t0 = time.perf_counter()
    noise = pilot_noise(sim, cfg)
    for ti, test in enumerate(sim.pilots):
        rows = [ri for ri, c in enumerate(sim.cells) if c.test == test]
        jobs = []
        for ri in rows:
            cell = sim.cells[ri]
            kernel, metric = cell.row(names)
            slow = ((lambda cand, e, k=cell.kernel: po.slowed_kernel(cand, names[k], pool.category[k], e))
                    if test == EVERY else (lambda cand, e, c=test: slowed_category(pool, cand, c, e)))
            jobs.append(po.Job(kernel, metric, slow))
        for i, (base, hist) in enumerate(sim.pilots[test]):
            if (test, i) not in done:
                rng = np.random.default_rng([args.seed, 3, ti, i])
                own = {r.kernel: r.own_sd for r in noise[test][i][0] if r.metric == DUR}
                done[test, i] = po.run_world(po.world(base, hist, cfg, own), rng, jobs, tuple(args.effects),
                                             tuple(args.counts), cfg, args.oracle_reps, ORACLE_MIN_REPS,
                                             args.history_runs, HISTORY_POOL, PILOT_UNITS)
                print(f"  oracle world {test or 'every kernel'} {i + 1}/{len(sim.pilots[test])} "
                      f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
                if path is not None:
                    tmp = path.with_name(path.name + ".tmp")
                    with tmp.open("wb") as fh:
                        pickle.dump((key, done), fh)
                    tmp.replace(path)
            hits, trials = done[test, i]
            power[rows] += hits / np.maximum(trials, 1) / len(sim.pilots[test])
            tests[rows] += trials
    return power, tests


def run(args: argparse.Namespace) -> str:
    if not ga.REAL.exists():
        return f"skipped: {ga.REAL} absent"
    pool = ga.load_real()
    sim = simulated(pool, args)
    pred, pred_sd, sds = predict(pool, sim, args)
    text = _table(list(pool.names), sim, sds, args, pred, pred_sd)
    if args.oracle_units:
        text += "\n" + _oracle_lines(
            list(pool.names), sim, args, oracle(pool, sim, args),
            f"the true-variance oracle: the plan from the rows of one record of {args.oracle_units} processes, "
            f"given each pilot's df structure, mean over the pilots", "true-variance oracle")
    if args.oracle_reps:
        est, tests = estimated_oracle(pool, sim, args)
        text += "\n" + _oracle_lines(
            list(pool.names), sim, args, est,
            f"the estimated-variance oracle: the real gate in each pilot's world, {args.oracle_reps} tests "
            f"per pilot ({ORACLE_MIN_REPS} where all agree; {int(tests.min())}-{int(tests.max())} a cell), "
            f"mean over the pilots", "estimated-variance oracle")
    return text


def _oracle_lines(names: list[str], sim: Simulated, args: argparse.Namespace, pred: np.ndarray, title: str,
                  prefix: str) -> str:
    """An oracle's cells and its summary lines against the observed."""
    lo, hi = interval(sim.hits, sim.trials)
    diff, beyond = np.abs(pred - sim.observed), np.fmax(lo - pred, pred - hi)
    kinds = np.array([c.test == EVERY for c in sim.cells])
    lines = [f"{title}, per cell (change x count, %):"]
    for ri, cell in enumerate(sim.cells):
        what = names[cell.kernel][:28] if cell.test == EVERY else f"category:{cell.test} total"
        lines.append(f"  {what}: " + "; ".join(
            f"{100 * e:g} %: " + " / ".join(f"{100 * pred[ri, ei, ci]:.0f}" for ci in range(len(args.counts)))
            for ei, e in enumerate(args.effects)))
    for label, sel in (("kernels", kinds), ("category totals", ~kinds)):
        if sel.any():
            lines.append(f"{prefix} " + _summary(label, diff[sel], beyond[sel], pred[sel], hi[sel]))
    lines.append(f"{prefix} " + _summary("all cells", diff, beyond, pred, hi))
    return "\n".join(lines)


def interval(hits: np.ndarray, trials: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson interval of each observed power (exact: it holds at 0 and 100 %)."""
    a = (1 - level) / 2
    with np.errstate(invalid="ignore"):
        lo = np.where(hits > 0, sps.beta.ppf(a, hits, trials - hits + 1), 0.0)
        hi = np.where(hits < trials, sps.beta.ppf(1 - a, hits + 1, trials - hits), 1.0)
    return lo, hi


def _summary(label: str, diff: np.ndarray, beyond: np.ndarray, pred: np.ndarray, hi: np.ndarray) -> str:
    """The cells of one kind: how many the plan predicts within 10 points, and the misses."""
    n, within = diff.size, int((diff <= 0.10).sum())
    return (f"{label}: within 10 points {within} of {n} cells ({100 * within / max(n, 1):.0f} %); max |diff| "
            f"{100 * diff.max():.1f} points, mean {100 * diff.mean():.1f}; > 10 beyond the observed 95 % interval: "
            f"{int((beyond > 0.10).sum())} ({int((beyond > 0.10).sum() - (pred - hi > 0.10).sum())} predicted low)")


def _table(names, sim: Simulated, sds: list, args, pred, pred_sd) -> str:
    obs = sim.observed
    diff = np.abs(pred - obs)
    lo, hi = interval(sim.hits, sim.trials)
    beyond = np.fmax(lo - pred, pred - hi)  # how far the prediction lies outside the interval
    head = ["row (sd per process)", "change"] + [f"{n}/side" for n in args.counts]
    rows = [head]
    pct = lambda x: f"{100 * x:.0f}"  # noqa: E731
    for ri, cell in enumerate(sim.cells):
        kernel, _ = cell.row(names)
        what = kernel[:28] if cell.test == EVERY else f"{kernel} total, {cell.test}-only test"
        label = f"{what} ({100 * np.mean(sds[ri]):.2f} %)"
        for ei, e in enumerate(args.effects):
            rows.append([label if ei == 0 else "", f"{100 * e:g} %"]
                        + [f"{pct(pred[c])} / {pct(obs[c])} [{pct(lo[c])}-{pct(hi[c])}] ({pct(diff[c])})"
                           for c in ((ri, ei, ci) for ci in range(len(args.counts)))])
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
    kinds = np.array([c.test == EVERY for c in sim.cells])
    for label, sel in (("kernels", kinds), ("category totals", ~kinds)):
        if sel.any():
            lines.append(_summary(label, diff[sel], beyond[sel], pred[sel], hi[sel]))
    lines.append(_summary("all cells", diff, beyond, pred, hi))
    lines.append(_perfect_line(sim.hits, sim.trials))
    return "\n".join(lines)


def perfect_within(hits: np.ndarray, trials: np.ndarray, points: float = 0.10) -> np.ndarray:
    """Per cell, the chance that a perfect predictor (one that knows the cell's true power,
    taken as its observed one) lands within ``points`` of the observed power of a run of as
    many tests: the binomial noise of the observed power alone, the bound no plan can beat."""
    out = np.ones(hits.shape)
    for idx in np.ndindex(hits.shape):
        n = int(trials[idx])
        if n == 0:
            continue
        p = hits[idx] / n
        k = np.arange(n + 1)
        out[idx] = float(sps.binom.pmf(k, n, p)[np.abs(k / n - p) <= points + 1e-12].sum())
    return out


def _perfect_line(hits: np.ndarray, trials: np.ndarray) -> str:
    share = perfect_within(hits, trials)
    return (f"a perfect predictor (each cell's true power) would land within 10 points of the observed in "
            f"{share.sum():.1f} of {share.size} cells ({100 * share.mean():.1f} %), from the binomial noise of the "
            f"observed power at its tests")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=None,
                    help="simulated tests per (row, change, count) (default 200: binomial sd <= 3.5 points; "
                         "--quick 30)")
    ap.add_argument("--min-reps", type=int, default=None,
                    help="a cell whose first N tests all agree (every one detected, or none) takes no more "
                         "(default 40; --quick 30)")
    ap.add_argument("--pilots", type=int, default=None,
                    help="pilot baseline records the prediction averages (default 10; --quick 3)")
    ap.add_argument("--threshold", type=float, default=0.0, help="the gate's threshold (default 0)")
    ap.add_argument("--seed", type=int, default=5000)
    ap.add_argument("--history-runs", type=int, default=0,
                    help="give every record (pilots and simulated baselines) a variance history of N "
                         "earlier runs of 4 processes, as --gemmperf-learn-variance keeps (default 0)")
    ap.add_argument("--categories", default=",".join(CATEGORIES),
                    help="categories whose totals are planned, each in a test that gates its kernels only "
                         "(comma-separated; empty: none; default %(default)s)")
    ap.add_argument("--kernels", type=int, default=len(SDS),
                    help="kernels planned in a test that gates every kernel (nearest to per-process sds of "
                         "0.4, 0.7, 1, 1.5, 2 %%; default all 5, 0: none)")
    ap.add_argument("--quick", action="store_true", help="changes 3, 5 %%; counts 2, 4, 8; 3 kernels; "
                                                         "30 tests per cell, 3 pilots unless told")
    ap.add_argument("--oracle-units", type=int, default=0, metavar="N",
                    help="also plan from one record of N processes per test (variances near the truth) and "
                         "print how close that plan comes (0: not)")
    ap.add_argument("--oracle-reps", type=int, default=0, metavar="N",
                    help="also run the estimated-variance oracle: the real gate in the world each pilot record "
                         "describes, N tests per pilot and cell (0: not)")
    ap.add_argument("--cache", metavar="FILE",
                    help="keep the simulation (pilot records, the gate's detections) in FILE and reuse it "
                         "when the arguments match: re-runs only the prediction")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.effects, args.counts, args.sds = EFFECTS, COUNTS, SDS[:max(args.kernels, 0)]
    args.categories = [c for c in args.categories.split(",") if c]
    if args.quick:
        args.effects, args.counts, args.sds = (0.03, 0.05), (2, 4, 8), (0.004, 0.01, 0.02)[:max(args.kernels, 0)]
    for name, full, quick in (("reps", 200, 30), ("min_reps", 40, 30), ("pilots", 10, 3)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    print(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
