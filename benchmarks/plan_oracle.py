"""The estimated-variance oracle of ``benchmarks/plan_power.py``: the real gate's power when the
truth is what a pilot record estimated.

A plan sees nothing but its pilot record (and the record's variance history). The best any
planner can do with that record is to know the gate's power in the world the record describes;
what it then still misses is the record's information, not a model's error. For each pilot
record this module builds that world and runs the real gate in it:

* **Processes.** A simulated process takes one of the record's processes as its template (its
  kept quantiles, dispatch counts and timer ticks: the within-process spread as the record shows
  it) and moves every row of it to a new per-process level: each gated kernel's log median, each
  within-process control and each category total is the record's mean plus a Gaussian draw
  built on the record's own deviations (all rows share one draw of ``processes - 1``
  coordinates, so the shared per-process factor, the controls and the totals keep the
  correlations the record shows). The shared factor and the controls and totals keep the
  record's per-process variance; each gated kernel's own part (its deviation beyond the shared
  factor) is scaled to the sd the planner reads for it (``RowNoise.own_sd``: the record's
  variance, pooled with its history, shrunk towards the prior as the gate shrinks it). A
  kernel's quantiles scale with its level: its median moves exactly there. The gate's shared
  factor, a median over the kernels of each process, carries a little of the rescaled kernels'
  noise, so a kernel scaled far below its neighbours shows the gate a little more than its sd
  (on the real trace's pilots up to +8 % for the quietest, within the sampling error for the
  rest).
* **History.** With a variance history the shared factor's variance is the ``*`` row's pooled
  one (the gate's ``_with_history`` rule) and the kernels' are pooled through ``own_sd``; each
  simulated baseline then carries a history of its own from the same world
  (``variance_contribution`` of runs of the record's count of processes, as many runs as the
  pilots have, drawn from a pool of as many as ``plan_power``'s).
* **Tests.** At each count, baseline and candidate of that many processes, the cell's change on
  the candidate (one kernel, or every kernel of a category: as ``plan_power`` slows them), the
  real ``compare`` first look; "detected" as there. A pilot's cell takes ``reps`` tests, or
  ``min_reps`` when those all agree; the oracle's cell is the mean over pilots of their
  detected shares (the pilots weigh alike, as in the plan's mean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from pytest_gemmperf.gate.compare import SHARED, GateConfig, compare, variance_contribution
from pytest_gemmperf.gate.durations import HISTORY_OUTLIER_P, _shared_offsets
from pytest_gemmperf.gate.metrics import CATEGORY_TOTAL_NS, CONTROL_NS, DISPATCH_COUNT, DUR_NS


@dataclass(frozen=True)
class World:
    """A pilot record as a generative model (module docstring). Row arrays are the record's
    rows; ``item`` indexes ``level``'s columns (-1: a row that does not move: dispatch counts)."""

    kernel: np.ndarray  # object
    metric: np.ndarray  # object
    value: np.ndarray
    unit: np.ndarray  # the row's template process
    item: np.ndarray
    rows_of: tuple[np.ndarray, ...]  # per template process, its rows
    level: np.ndarray  # (processes, items) the record's log levels
    mean: np.ndarray  # (items,)
    basis: np.ndarray  # (processes, items): world deviation = z @ basis, z ~ N(0, I / (processes - 1))
    point: str


def world(record: pd.DataFrame, history: pd.DataFrame | None, cfg: GateConfig,
          own_sd: dict[str, float] | None = None) -> World:
    """The world of one pilot ``record`` (a samples table of one point) and its ``history``.
    ``own_sd``: per gated kernel, the per-process sd of its own part (shared factor removed) the
    planner reads from the record (``RowNoise.own_sd``: the record's variance pooled with the
    history and shrunk towards the prior as the gate shrinks it); a kernel without one keeps the
    record's variance, pooled with its history."""
    units = pd.Index(sorted({str(u) for u in pd.unique(record["unit"])}))
    u = units.get_indexer(record["unit"].astype(str))
    metric = record["metric"].astype(str).to_numpy(object)
    kernel = record["kernel"].astype(str).to_numpy(object)
    value = record["value"].to_numpy(float)
    moves = (metric == DUR_NS) | (metric == CONTROL_NS) | (metric == CATEGORY_TOTAL_NS)
    keys = pd.Index(sorted({(k, m) for k, m, ok in zip(kernel, metric, moves) if ok}))
    item = np.where(moves, keys.get_indexer(list(zip(kernel, metric))), -1)
    # the gate's per-process level of a row: the median of its log values (one value for a
    # control or a total)
    frame = pd.DataFrame({"item": item[moves], "unit": u[moves], "log": np.log(value[moves])})
    med = frame.groupby(["item", "unit"])["log"].median()
    stored = frame.groupby(["item", "unit"]).size()
    level = np.full((len(units), len(keys)), np.nan)
    count = np.zeros((len(units), len(keys)))
    ii, uu = med.index.get_level_values(0), med.index.get_level_values(1)
    level[uu, ii] = med.to_numpy()
    count[uu, ii] = stored.to_numpy()
    mean = np.nanmean(level, axis=0)
    dev = np.nan_to_num(level - mean)
    # the shared per-process factor as the gate estimates it from the gated kernels
    is_dur = np.array([m == DUR_NS for _, m in keys])
    offsets, _ = _shared_offsets(np.where(count[:, is_dur] > 0, level[:, is_dur], np.nan).T,
                                 count[:, is_dur].T, cfg)
    own = dev - offsets[:, None]
    scale_own, scale_shared = _history_scales(own[:, is_dur], offsets, [k for k, _ in keys[is_dur]], history)
    scale = np.ones(len(keys))
    scale[is_dur] = scale_own
    raw_sd = np.sqrt((own ** 2).sum(axis=0) / max(len(units) - 1, 1))
    for i, (k, m) in enumerate(keys):
        sd = (own_sd or {}).get(k, math.nan) if m == DUR_NS else math.nan
        if np.isfinite(sd) and raw_sd[i] > 0:
            scale[i] = sd / raw_sd[i]
    basis = scale_shared * offsets[:, None] + own * scale[None, :]
    rows_of = tuple(np.flatnonzero(u == j) for j in range(len(units)))
    point = str(record["point"].iloc[0])
    return World(kernel, metric, value, u, item, rows_of, level, mean, basis, point)


def _history_scales(own: np.ndarray, offsets: np.ndarray, kernels: list[str], history: pd.DataFrame | None
                    ) -> tuple[np.ndarray, float]:
    """Per kernel the factor that takes the record's own variance (shared factor removed) to the
    gate's pooled one, and the same for the shared factor (the ``*`` row's history); ones
    without a history."""
    if history is None or not len(history):
        return np.ones(len(kernels)), 1.0
    df_rec = own.shape[0] - 1.0
    h = history.groupby(history["kernel"].astype(str))[["df", "ss"]].sum()

    def pooled(ss_rec: float, name: str) -> float:
        if name not in h.index or not ss_rec > 0:
            return 1.0
        dh, ssh = float(h.loc[name, "df"]), float(h.loc[name, "ss"])
        if not (dh > 0 and ssh > 0):
            return 1.0
        s2, s2h = ss_rec / df_rec, ssh / dh
        if sps.f.sf(s2 / s2h, df_rec, dh) < HISTORY_OUTLIER_P:  # the gate keeps its own
            return 1.0
        return math.sqrt((ssh + ss_rec) / (dh + df_rec) / s2)

    ss = (own ** 2).sum(axis=0)
    return np.array([pooled(s, k) for s, k in zip(ss, kernels)]), pooled(float((offsets ** 2).sum()), SHARED)


def processes(w: World, rng: np.random.Generator, n: int, first: int) -> pd.DataFrame:
    """A samples table of ``n`` processes of the world, units ``first..first + n - 1``."""
    tmpl = rng.integers(0, len(w.rows_of), n)
    z = rng.standard_normal((n, w.basis.shape[0])) / math.sqrt(w.basis.shape[0] - 1)
    new = w.mean[None, :] + z @ w.basis  # (n, items)
    idx = np.concatenate([w.rows_of[t] for t in tmpl])
    j = np.repeat(np.arange(n), [len(w.rows_of[t]) for t in tmpl])
    item = w.item[idx]
    moved = item >= 0
    shift = np.zeros(len(idx))
    shift[moved] = new[j[moved], item[moved]] - w.level[w.unit[idx][moved], item[moved]]
    labels = np.array([f"host/{first + i}/0/{first + i}" for i in range(n)], dtype=object)
    return pd.DataFrame({"point": np.full(len(idx), w.point, dtype=object), "kernel": w.kernel[idx],
                         "metric": w.metric[idx], "unit": labels[j], "value": w.value[idx] * np.exp(shift)})


def _history_runs(w: World, rng: np.random.Generator, runs: int, units: int) -> list[pd.DataFrame]:
    """``variance_contribution`` rows of ``runs`` runs of ``units`` processes of the world."""
    return [variance_contribution(processes(w, rng, units, 0)) for _ in range(runs)]


def slowed_kernel(cand: pd.DataFrame, kernel: str, category: str, effect: float) -> pd.DataFrame:
    """``cand`` with ``kernel`` ``effect`` slower: its kept quantiles scale, and its category's
    per-process total grows by ``effect`` times the kernel's time in the process (its dispatch
    count times the mean of its kept quantiles)."""
    out = cand.copy()
    metric, kern = out["metric"].to_numpy(object), out["kernel"].to_numpy(object)
    dur = (metric == DUR_NS) & (kern == kernel)
    time_ns = (out[dur].groupby("unit")["value"].mean()
               * out[(metric == DISPATCH_COUNT) & (kern == kernel)].groupby("unit")["value"].first())
    out.loc[dur, "value"] = out.loc[dur, "value"] * (1 + effect)
    tot = (metric == CATEGORY_TOTAL_NS) & (kern == f"category:{category}")
    grow = out.loc[tot, "unit"].map(time_ns).fillna(0.0).to_numpy(float)
    out.loc[tot, "value"] = out.loc[tot, "value"] + effect * grow
    return out


def detected(base: pd.DataFrame, cand: pd.DataFrame, history: pd.DataFrame | None, cfg: GateConfig,
             kernel: str, metric: str) -> bool:
    """Whether the real gate's first look calls the row (``kernel``, ``metric``) a regression."""
    v = compare(base, cand, cfg, history=history)
    row = v[(v["kernel"].astype(str) == kernel) & (v["metric"].astype(str) == metric)]
    return bool((row["verdict"] == "regression").any())


@dataclass(frozen=True)
class Job:
    """One row of a pilot's world: the judged row and how a change is made."""

    kernel: str
    metric: str
    slow: object  # (cand, effect) -> cand


def run_world(w: World, rng: np.random.Generator, jobs: list[Job], effects: tuple[float, ...],
              counts: tuple[int, ...], cfg: GateConfig, reps: int, min_reps: int, history_runs: int = 0,
              history_pool: int = 0, history_units: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """(hits, trials), each (jobs, effects, counts): simulated tests of the world, one baseline
    and candidate per count and round shared by every open job and change; a job's cell stops at
    ``reps`` tests or at ``min_reps`` that all agree."""
    shape = (len(jobs), len(effects), len(counts))
    hits, trials = np.zeros(shape), np.zeros(shape)
    pool = _history_runs(w, rng, history_pool, history_units) if history_runs else []
    while True:
        settled = (trials >= min_reps) & ((hits == 0) | (hits == trials))
        todo = (trials < reps) & ~settled
        if not todo.any():
            return hits, trials
        for ci, n in enumerate(counts):
            if not todo[:, :, ci].any():
                continue
            base, cand = processes(w, rng, n, 0), processes(w, rng, n, n)
            hist = None
            if history_runs:
                picks = rng.choice(len(pool), history_runs, replace=False)
                hist = pd.concat([pool[i] for i in picks], ignore_index=True)
            for ji, ei in zip(*np.nonzero(todo[:, :, ci])):
                job = jobs[ji]
                hits[ji, ei, ci] += detected(base, job.slow(cand, effects[ei]), hist, cfg, job.kernel, job.metric)
                trials[ji, ei, ci] += 1
