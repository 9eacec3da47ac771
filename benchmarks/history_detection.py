"""Change-point detection over run history ("history check"): ``detect_changes`` vs Apache Otava.

Histories are built from the real rocprofv3 trace ``908_results.json.gz`` (MI350X, 80 kernels,
48 usable training steps; ``gate_accuracy.load_real``): every run has 4 processes, each process
draws 20 whole recorded steps with replacement (every kernel keeps its real per-step dispatch
count, shape mix and tails), gets a per-process factor shared by its kernels (sd 1 %) plus a
kernel-specific one (sd ~0.35 %, ``pool.sigma_kernel``), and every kernel gets a per-run factor
(sd 0.3 %: drift of a kernel from run to run). The history keeps what ``history_values`` keeps:
each process's median duration per kernel (``dur_ns``) and its category totals per step
(``category_total_ns``), one value per (kernel, metric, process, run).

Rows (a "test" is one 40-run history of the 80 kernels + 3 category totals = 83 series):

* ``flat``: no change; "any change" = the fraction of tests where the detector reports any
  change point in any series.
* ``step 4 % at run 25``: one kernel's durations x 1.04 from run 25 on (1-based). Detection
  delay: the history truncated after run 25, 26, 27, 28; "within 3 runs" = flagged (a
  regression of that kernel) in one of them, and the delay histogram (runs after the step's
  first run). "located +-2" = on the full 40 runs, a reported change of that kernel within 2
  runs of run 25. The kernel is drawn per test among those with >= 50 dispatches per process
  (``steady``: whose run means vary by <= 1 % in a pilot flat history; ``any``: every kernel
  with >= 50 dispatches per process, several of which vary more).
* ``creep 0.3 %/run over 20 runs``: the kernel's durations x 1.003^(r - 20) for runs r = 21..40
  (6.2 % by run 40). "flagged" = a regression of that kernel on the 40 runs, with the first
  truncation (run 22..40) that flags it. The gate check: ``gate.compare.compare`` at default
  settings on every adjacent pair of runs (both compacted, as the plugin stores them): the
  fraction of pairs with any ``regression`` verdict (all that creep could trip).

Apache Otava (0.8.0, ``otava.analysis.compute_change_points``, defaults: window 50,
p < 0.001, no magnitude floor) runs in its own virtual environment (it pulls cloud SDKs, so it is
not a dependency: ``python3 -m venv /tmp/otava-venv && /tmp/otava-venv/bin/pip install
apache-otava``; ``--otava PYTHON`` names another interpreter) on the same series: one value per
run, the mean of the run's 4 process values, as a CI history would give it one number per run.

Measured (commit 2c06482 method, seed 12, 200 flat / 60 step / 30 creep tests, 5 creep histories
x 39 adjacent gate pairs; 2 cores shared with 6 other jobs, load ~7-10, so times are noisy; the
whole run took 1304 s, Otava 93-98 s per configuration for 68,890 series):

| row | tests | detect_changes | Otava defaults (p < 0.001) | Otava p < 0.001/83 |
|---|---|---|---|---|
| flat: any change per test | 200 | 0.0 % (0/200) | 80.5 % (3.2 % of series) | 8.5 % (0.2 % of series) |
| step 4 %, steady kernel: within 3 runs | 60 | 100 % (delay 0/1/2/3: 1/40/17/2) | 97 % (50/6/2/0) | 100 % (26/25/9/0) |
| ... located +-2 / other kernels flagged | | 100 % / 0 % | 98 % / 80 % | 100 % / 7 % |
| step 4 %, any kernel >= 50 disp./proc.: within 3 | 60 | 75 % (0/32/6/7) | 92 % (40/9/4/2) | 83 % (17/21/7/5) |
| ... located +-2 / other kernels flagged | | 93 % / 0 % | 97 % / 88 % | 93 % / 3 % |
| creep 0.3 %/run x 20: flagged on 40 runs | 30 | 100 %, first at run 29 (median; 25-33) | 100 % | 97 % |
| gate on adjacent pairs of the creep (default) | 195 pairs | 0.0 % any regression | | |

``detect_changes`` on 320 series x 40 runs x 4 processes (51,200 rows): 0.25 s (best of 3).
Delay 0 is impossible by design (a change needs 2 runs after it); the one "delay 0" of the
steady row is a split one run early (runs 24-25 against 1-23, the 25th slowed), within +-2.
The "any kernel" misses are kernels whose run means vary by 2-4 % (once-per-few-steps kernels
with heavy tails): a 4 % step there needs more than 3 runs at a 1 % false-alarm level; Otava
finds more of them at once but pays with 80 % (defaults) or 8.5 % (Bonferroni) flat tests
alarmed, against 0 % here.

Run: ``python benchmarks/history_detection.py [--reps-flat 200 --reps-step 60 --reps-creep 30]
[--quick]``; prints a markdown table and the timing of ``detect_changes`` on an 80-kernel x
40-run x 4-metric history.

``--suspects [--suspect-series 2000 --suspect-tests 5 --real PATH]`` measures only the newest-run
suspect rule (``history/suspects.py``): per flat series the rate of false suspects with its 95 %
Wilson interval, and the fraction of series whose 3x newest run is flagged at once, at 7, 10 and
20 runs and thresholds 0 and 5 %, in four synthetic regimes (normal run noise 2 % and 10 %, t
with 3 df at 5 %, one process per run; 2000 flat and 200 slowed series each) and on flat
histories resampled from the 908 trace (83 series per test). Measured 2026-11-29, seed 12, load
12-15 (294 s): flat false suspects 0-0.20 % per cell (every upper bound <= 0.51 %; 908 trace
0/415 per length); 3x flagged 100 % at 2 % noise, 90-100 % for t3 5 %, 67-100 % with one
process, 19.5 / 36.5 / 53.5 % at 10 % noise (7 / 10 / 20 runs). Table: docs/history.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gate_accuracy as ga  # noqa: E402
from pytest_gemmperf.gate import stats  # noqa: E402
from pytest_gemmperf.gate.compare import compare  # noqa: E402
from pytest_gemmperf.gate.samples import compact_samples  # noqa: E402
from pytest_gemmperf.history.changepoints import detect_changes  # noqa: E402

N_RUNS = 40
UNITS = 4
ITERS = ga.RESAMPLED_STEPS  # recorded steps drawn per process
SIGMA_PROCESS = 0.01
SIGMA_RUN = 0.003
STEP, STEP_RUN = 0.04, 25  # 1-based first slowed run
CREEP, CREEP_FROM = 0.003, 20  # runs CREEP_FROM+1 .. N_RUNS slowed by (1+CREEP)^(r-CREEP_FROM)
T0 = pd.Timestamp("2026-01-01", tz="UTC")
OTAVA_PY = Path("/tmp/otava-venv/bin/python")


@dataclass
class History:
    frame: pd.DataFrame  # the run-history table (HISTORY_COLUMNS subset detect_changes reads)
    raw: list | None  # per run (kernel, unit, value) dispatch arrays, for the gate pair check


def simulate(pool: ga.StepPool, rng: np.random.Generator, effect: np.ndarray, keep_raw: bool = False) -> History:
    """A 40-run history; ``effect[run, kernel]`` multiplies that kernel's durations in that run."""
    n_k = len(pool.names)
    n_p = N_RUNS * UNITS
    n_steps = len(pool.start) - 1
    steps = rng.integers(0, n_steps, (n_p, ITERS))
    lo, hi = pool.start[steps].ravel(), pool.start[steps + 1].ravel()
    ln = hi - lo
    idx = np.arange(ln.sum()) - np.repeat(np.cumsum(ln) - ln, ln) + np.repeat(lo, ln)
    proc = np.repeat(np.repeat(np.arange(n_p), ITERS), ln)
    k = pool.kernel[idx]
    run = proc // UNITS
    proc_factor = rng.normal(0, SIGMA_PROCESS, n_p)[:, None] + rng.normal(0, 1, (n_p, n_k)) * pool.sigma_kernel
    run_factor = rng.normal(0, SIGMA_RUN, (N_RUNS, n_k))
    v = pool.value[idx] * np.exp(proc_factor[proc, k] + run_factor[run, k]) * effect[run, k]
    med = stats.group_median(v, proc * n_k + k, n_p * n_k).reshape(n_p, n_k)
    cats = np.unique(pool.category)
    cc = np.searchsorted(cats, pool.category[k])
    tot = np.bincount(proc * len(cats) + cc, weights=v, minlength=n_p * len(cats)).reshape(n_p, len(cats)) / ITERS
    p_idx, k_idx = np.nonzero(np.isfinite(med))
    pc, c_idx = np.divmod(np.arange(n_p * len(cats)), len(cats))
    pr = np.concatenate([p_idx, pc])
    frame = pd.DataFrame({
        "run_id": np.char.add("r", np.char.zfill((pr // UNITS).astype(str), 3)).astype(object),
        "time": T0 + pd.to_timedelta(pr // UNITS, "h"), "commit": None, "hw_key": "mi350x", "test": "t",
        "point": "p",
        "kernel": np.concatenate([np.asarray(pool.names, object)[k_idx], ("category:" + cats[c_idx]).astype(object)]),
        "metric": np.concatenate([np.full(len(p_idx), "dur_ns", object),
                                  np.full(len(pc), "category_total_ns", object)]),
        "unit": np.char.add("u", (pr % UNITS).astype(str)).astype(object),
        "value": np.concatenate([med[p_idx, k_idx], tot.ravel()])})
    raw = None
    if keep_raw:
        order = np.argsort(run, kind="stable")
        bounds = np.searchsorted(run[order], np.arange(N_RUNS + 1))
        raw = [(k[order[a:b]], proc[order[a:b]], v[order[a:b]]) for a, b in zip(bounds[:-1], bounds[1:])]
    return History(frame, raw)


def truncated(h: pd.DataFrame, n_runs: int) -> pd.DataFrame:
    return h[h["time"] < T0 + pd.Timedelta(hours=n_runs)]


def run_means(h: pd.DataFrame) -> tuple[list[tuple[str, str]], np.ndarray]:
    """(series keys, run x series matrix of the runs' mean process value) - Otava's input."""
    m = h.groupby(["kernel", "metric", "run_id"], sort=True)["value"].mean().unstack("run_id")
    return list(m.index), m.to_numpy()


OTAVA_SCRIPT = r"""
import json, sys
from otava.analysis import compute_change_points
req = json.load(sys.stdin)
out = []
for s in req["series"]:
    cps, _ = compute_change_points(s, window_len=50, max_pvalue=req["p"], min_magnitude=0.0)
    out.append([[int(c.index), float(c.stats.mean_2 - c.stats.mean_1)] for c in cps])
json.dump(out, sys.stdout)
"""


def otava_batch(series: list[list[float]], python: Path, p: float) -> list[list[tuple[int, float]]] | None:
    """Otava's change points (index of the first run after, mean change) of each series."""
    if not python.exists():
        return None
    res = subprocess.run([str(python), "-c", OTAVA_SCRIPT], input=json.dumps({"series": series, "p": p}),
                         capture_output=True,
                         text=True, timeout=3000)
    if res.returncode != 0:
        print(res.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(res.stdout)


class OtavaJobs:
    """Collects series of many histories, runs Otava once, hands back per-history results."""

    def __init__(self) -> None:
        self.series: list[list[float]] = []
        self.slices: list[tuple[list, slice]] = []

    def add(self, h: pd.DataFrame) -> int:
        keys, mat = run_means(h)
        a = len(self.series)
        self.series += [list(map(float, row)) for row in mat]
        self.slices.append((keys, slice(a, len(self.series))))
        return len(self.slices) - 1

    def run(self, python: Path, p: float) -> list[dict] | None:
        t0 = time.perf_counter()
        res = otava_batch(self.series, python, p)
        self.seconds = time.perf_counter() - t0
        if res is None:
            return None
        return [{key: res[i] for key, i in zip(keys, range(sl.start, sl.stop))} for keys, sl in self.slices]


# ---------------------------------------------------------------------------------------------
# rows


def ours_flags(h: pd.DataFrame, kernel: str | None = None) -> pd.DataFrame:
    c = detect_changes(h)
    return c if kernel is None else c[(c["kernel"] == kernel) & (c["metric"] == "dur_ns")]


def candidates(pool: ga.StepPool, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kernels with >= 50 dispatches per process, the steady ones among them, and run-mean sds."""
    per_step = np.bincount(pool.kernel, minlength=len(pool.names)) / (len(pool.start) - 1)
    many = np.flatnonzero(per_step * ITERS >= 50)
    h = simulate(pool, rng, np.ones((N_RUNS, len(pool.names)))).frame
    d = h[h["metric"] == "dur_ns"]
    sd = (np.log(d["value"]).groupby([d["kernel"], d["run_id"]]).mean().groupby(level=0).std())
    sd = sd.reindex(pool.names).to_numpy()
    return many, many[sd[many] <= 0.01], sd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps-flat", type=int, default=200)
    ap.add_argument("--reps-step", type=int, default=60)
    ap.add_argument("--reps-creep", type=int, default=30)
    ap.add_argument("--creep-gate-reps", type=int, default=5,
                    help="creep histories whose 39 adjacent pairs the gate compares")
    ap.add_argument("--quick", action="store_true", help="40 flat, 15 step, 8 creep, 2 gate-pair histories")
    ap.add_argument("--otava", type=Path, default=OTAVA_PY, help="python of a venv with apache-otava")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--suspects", action="store_true",
                    help="only the newest-run suspect rule (history/suspects.py): false alarms on flat "
                         "series and detection of a 3x newest run")
    ap.add_argument("--suspect-series", type=int, default=2000, help="synthetic flat series per regime")
    ap.add_argument("--suspect-tests", type=int, default=5, help="908-trace flat tests (83 series each)")
    ap.add_argument("--real", type=Path, default=None, help="908_results.json.gz (default: ../shared/data/...)")
    args = ap.parse_args(argv)
    if args.real is not None:
        ga.REAL = args.real
    if args.suspects:
        return suspects_benchmark(args.suspect_series, args.suspect_tests, args.seed)
    if args.quick:
        args.reps_flat, args.reps_step, args.reps_creep, args.creep_gate_reps = 40, 15, 8, 2
    if not ga.REAL.exists():
        print(f"skipped: {ga.REAL} absent")
        return 0
    pool = ga.load_real()
    rng = np.random.default_rng(args.seed)
    n_k = len(pool.names)
    many, steady, sd = candidates(pool, rng)
    print(f"908 trace: {n_k} kernels; {len(many)} with >= 50 dispatches/process, {len(steady)} of them with "
          f"run-mean sd <= 1 % (run-mean sd over all kernels: median {100 * np.nanmedian(sd):.2f} %, "
          f"max {100 * np.nanmax(sd):.2f} %)", flush=True)
    jobs = OtavaJobs()
    t_all = time.perf_counter()
    res: dict[str, dict] = {}

    # flat
    flat_ours, flat_series, flat_jobs = [], [], []
    for _ in range(args.reps_flat):
        h = simulate(pool, rng, np.ones((N_RUNS, n_k))).frame
        c = detect_changes(h)
        flat_ours.append(len(c) > 0)
        flat_series.append(c.groupby(["kernel", "metric"]).ngroups / c.attrs["series"])
        flat_jobs.append(jobs.add(h))
    res["flat"] = {"ours": f"any change {100 * np.mean(flat_ours):.1f} % ({int(np.sum(flat_ours))}/{len(flat_ours)}); "
                           f"{100 * np.mean(flat_series):.2f} % of series"}
    print("flat done", time.perf_counter() - t_all, flush=True)

    # steps
    step_jobs: dict[str, list] = {}
    for label, pick in (("steady", steady), ("any", many)):
        delays, located, others = [], [], 0
        step_jobs[label] = []
        for _ in range(args.reps_step):
            kk = int(rng.choice(pick))
            eff = np.ones((N_RUNS, n_k))
            eff[STEP_RUN - 1:, kk] = 1 + STEP
            h = simulate(pool, rng, eff).frame
            name = pool.names[kk]
            delay = None
            for T in range(STEP_RUN, STEP_RUN + 4):
                ht = truncated(h, T)
                if delay is None and (ours_flags(ht, name)["direction"] == "regression").any():
                    delay = T - STEP_RUN
            c = detect_changes(h)
            mine = c[(c["kernel"] == name) & (c["metric"] == "dur_ns")]
            located.append(bool((np.abs(mine["index_after"] - (STEP_RUN - 1)) <= 2).any()))
            others += int(((c["kernel"] != name) & ~c["kernel"].str.startswith("category:")).any())
            delays.append(delay)
            step_jobs[label].append((name, [jobs.add(truncated(h, T)) for T in range(STEP_RUN, STEP_RUN + 4)],
                                     jobs.add(h)))
        hist = {d: sum(x == d for x in delays) for d in range(4)}
        res[f"step 4 % at run 25, {label} kernel"] = {"ours": (
            f"within 3 runs {100 * np.mean([d is not None for d in delays]):.0f} % (delay 0/1/2/3: "
            f"{hist[0]}/{hist[1]}/{hist[2]}/{hist[3]}); located +-2 {100 * np.mean(located):.0f} %; "
            f"other kernels flagged in {100 * others / len(delays):.0f} % of tests")}
        print("step", label, "done", time.perf_counter() - t_all, flush=True)

    # creep
    flagged, first, gate_any, gate_kernel, creep_jobs = [], [], [], [], []
    ramp = np.ones(N_RUNS)
    ramp[CREEP_FROM:] = (1 + CREEP) ** np.arange(1, N_RUNS - CREEP_FROM + 1)
    for i in range(args.reps_creep):
        kk = int(rng.choice(steady))
        eff = np.ones((N_RUNS, n_k))
        eff[:, kk] = ramp
        sim = simulate(pool, rng, eff, keep_raw=i < args.creep_gate_reps)
        h, name = sim.frame, pool.names[kk]
        flagged.append(bool((ours_flags(h, name)["direction"] == "regression").any()))
        f = None
        for T in range(CREEP_FROM + 2, N_RUNS + 1):
            if (ours_flags(truncated(h, T), name)["direction"] == "regression").any():
                f = T
                break
        first.append(f)
        creep_jobs.append((name, jobs.add(h)))
        if sim.raw is not None:
            a, b = gate_pairs(pool, sim.raw, name)
            gate_any += a
            gate_kernel += b
    fr = [x for x in first if x is not None]
    res["creep 0.3 %/run over 20 runs"] = {"ours": (
        f"flagged {100 * np.mean(flagged):.0f} %; first flagged at run {np.median(fr) if fr else float('nan'):.0f} "
        f"(median; {min(fr) if fr else '-'}-{max(fr) if fr else '-'}); gate on adjacent pairs: "
        f"{100 * np.mean(gate_any):.1f} % of {len(gate_any)} pairs any regression, "
        f"{100 * np.mean(gate_kernel):.1f} % the creeping kernel")}
    print("creep done", time.perf_counter() - t_all, flush=True)

    # Otava on the same series: its defaults, and its p threshold divided by a test's 83 series
    otava_cols = {"Apache Otava 0.8.0 (defaults: p < 0.001)": 0.001,
                  "Otava, p < 0.001 / 83 (Bonferroni over a test's series)": 0.001 / 83}
    for col, p in otava_cols.items():
        out = jobs.run(args.otava, p)
        if out is None:
            for r in res.values():
                r[col] = f"could not run ({args.otava} missing or failing)"
            continue

        def flag(d, name, pos=None):
            cps = d.get((name, "dur_ns"), [])
            return [c for c in cps if c[1] > 0 and (pos is None or abs(c[0] - pos) <= 2)]
        fa = [any(len(v) for v in out[j].values()) for j in flat_jobs]
        per_series = np.mean([np.mean([len(v) > 0 for v in out[j].values()]) for j in flat_jobs])
        res["flat"][col] = (f"any change {100 * np.mean(fa):.1f} % ({int(np.sum(fa))}/{len(fa)}); "
                            f"{100 * per_series:.1f} % of series")
        for label, lst in step_jobs.items():
            delays, located, others = [], [], 0
            for name, tj, full in lst:
                hit = [T for T, j in enumerate(tj) if flag(out[j], name)]
                delays.append(hit[0] if hit else None)
                located.append(bool(flag(out[full], name, STEP_RUN - 1)))
                others += any(len(v) for (kn, m), v in out[full].items() if kn != name and m == "dur_ns")
            hist = {d: sum(x == d for x in delays) for d in range(4)}
            res[f"step 4 % at run 25, {label} kernel"][col] = (
                f"within 3 runs {100 * np.mean([d is not None for d in delays]):.0f} % (delay 0/1/2/3: "
                f"{hist[0]}/{hist[1]}/{hist[2]}/{hist[3]}); located +-2 {100 * np.mean(located):.0f} %; "
                f"other kernels flagged in {100 * others / len(delays):.0f} % of tests")
        cf = [bool(flag(out[j], name)) for name, j in creep_jobs]
        res["creep 0.3 %/run over 20 runs"][col] = f"flagged {100 * np.mean(cf):.0f} % (on 40 runs)"
        print(f"{col}: {len(jobs.series)} series in {jobs.seconds:.0f} s", flush=True)

    reps = {"flat": args.reps_flat, "creep 0.3 %/run over 20 runs": args.reps_creep}
    print()
    print("| row | tests | detect_changes (ours) | " + " | ".join(otava_cols) + " |")
    print("|---|---|---|" + "---|" * len(otava_cols))
    for row, r in res.items():
        print(f"| {row} | {reps.get(row, args.reps_step)} | {r['ours']} | "
              + " | ".join(r.get(c, "-") for c in otava_cols) + " |")
    print()
    print(timing(pool, rng))
    print(f"(total {time.perf_counter() - t_all:.0f} s on a shared 2-core machine)")
    return 0


# ---------------------------------------------------------------------------------------------
# newest-run suspects


#: synthetic regimes: (name, run-to-run noise sd (log), its distribution, processes per run)
SUSPECT_REGIMES = (("normal 2 %, 4 processes", 0.02, "normal", 4),
                   ("normal 10 %, 4 processes", 0.10, "normal", 4),
                   ("t3 5 %, 4 processes (heavy tails)", 0.05, "t3", 4),
                   ("normal 5 %, 1 process", 0.05, "normal", 1))


def synthetic_history(rng: np.random.Generator, n_series: int, n_runs: int, sd_run: float, dist: str,
                      units: int, newest: float = 1.0) -> pd.DataFrame:
    """``n_series`` flat series of ``n_runs`` runs (run factor sd ``sd_run``: normal, or t with 3 df
    scaled to that sd; process factor sd 1 %); the newest run of every series x ``newest``."""
    if dist == "t3":
        run_f = rng.standard_t(3, (n_series, n_runs)) * sd_run / np.sqrt(3.0)
    else:
        run_f = rng.normal(0, sd_run, (n_series, n_runs))
    unit_f = rng.normal(0, 0.01, (n_series, n_runs, units))
    v = 1e5 * np.exp(run_f[:, :, None] + unit_f)
    v[:, -1, :] *= newest
    s_i, r_i, u_i = (a.ravel() for a in np.indices(v.shape))
    return pd.DataFrame({
        "run_id": np.char.add("r", np.char.zfill(r_i.astype(str), 3)).astype(object),
        "time": T0 + pd.to_timedelta(r_i, "h"), "commit": None, "hw_key": "hw", "test": "t", "point": "p",
        "kernel": np.char.add("k", s_i.astype(str)).astype(object), "metric": "dur_ns",
        "unit": np.char.add("u", u_i.astype(str)).astype(object), "value": v.ravel()})


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion k / n."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def _rate(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{100 * k / n:.2f} % ({k}/{n}; 95 % CI {100 * lo:.2f}-{100 * hi:.2f} %)"


def suspects_benchmark(n_series: int, n_tests: int, seed: int) -> int:
    """False alarms of the newest-run rule on flat series (per series) and its detection of a 3x
    newest run, at 7, 10 and 20 runs, thresholds 0 (the spread condition alone) and 5 %."""
    from pytest_gemmperf.history.suspects import newest_run_suspects

    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    print("| series | runs | threshold | flat: false alarms per series | 3x newest run flagged |")
    print("|---|---|---|---|---|")
    for name, sd_run, dist, units in SUSPECT_REGIMES:
        for n_runs in (7, 10, 20):
            flat = synthetic_history(rng, n_series, n_runs, sd_run, dist, units)
            slow = synthetic_history(rng, max(n_series // 10, 50), n_runs, sd_run, dist, units, newest=3.0)
            for thr in (0.0, 0.05):
                fa = len(newest_run_suspects(flat, thr, confirm=False))
                hit = len(newest_run_suspects(slow, thr, confirm=False))
                n_slow = slow["kernel"].nunique()
                print(f"| {name} | {n_runs} | {100 * thr:g} % | {_rate(fa, n_series)} | {_rate(hit, n_slow)} |",
                      flush=True)
    if ga.REAL.exists() and n_tests > 0:
        pool = ga.load_real()
        n_k = len(pool.names)
        for n_runs in (7, 10, 20):
            counts = {0.0: [0, 0], 0.05: [0, 0]}
            for _ in range(n_tests):
                h = truncated(simulate(pool, rng, np.ones((N_RUNS, n_k))).frame, n_runs)
                for thr, c in counts.items():
                    found = newest_run_suspects(h, thr, confirm=False)
                    c[0] += len(found)
                    c[1] += found.attrs["series"]
            for thr, (k, n) in counts.items():
                print(f"| 908 trace resampled (1 % process, 0.3 % run), {n_tests} tests | {n_runs} | "
                      f"{100 * thr:g} % | {_rate(k, n)} | |", flush=True)
    else:
        print(f"(908 trace not found at {ga.REAL}: its rows skipped; --real PATH)")
    print(f"\n{time.perf_counter() - t0:.0f} s; seed {seed}")
    return 0


def gate_pairs(pool: ga.StepPool, raw: list, name: str) -> tuple[list[float], list[float]]:
    """Gate verdicts (default settings) of every adjacent pair of runs: any regression; the
    creeping kernel's row a regression."""
    cats = np.unique(pool.category)
    names = np.asarray(pool.names, object)

    def samples(r: int) -> pd.DataFrame:
        k, proc, v = raw[r]
        unit = np.char.add("host/", proc.astype(str)).astype(object)
        d = pd.DataFrame({"point": "p", "kernel": names[k], "metric": "dur_ns", "unit": unit, "value": v})
        cc = np.searchsorted(cats, pool.category[k])
        t = d.groupby([unit, ("category:" + cats[cc]).astype(object)])["value"].sum() / ITERS
        tot = pd.DataFrame({"point": "p", "kernel": t.index.get_level_values(1), "metric": "category_total_ns",
                            "unit": t.index.get_level_values(0), "value": t.to_numpy()})
        return compact_samples(pd.concat([d, tot], ignore_index=True))

    s = [samples(r) for r in range(N_RUNS)]
    any_reg, kern = [], []
    for a, b in zip(s[:-1], s[1:]):
        v = compare(a, b)
        reg = v["verdict"] == "regression"
        any_reg.append(float(reg.any()))
        kern.append(float((reg & (v["kernel"] == name) & (v["metric"] == "dur_ns")).any()))
    return any_reg, kern


def timing(pool: ga.StepPool, rng: np.random.Generator) -> str:
    """detect_changes on 80 kernels x 40 runs x 4 metrics (dur_ns and three derived per-unit
    metrics with the same shape), best of 3."""
    h = simulate(pool, rng, np.ones((N_RUNS, len(pool.names)))).frame
    d = h[h["metric"] == "dur_ns"]
    frames = [d] + [d.assign(metric=m, value=d["value"] * f) for m, f in (("m2", 1.1), ("m3", 0.9), ("m4", 2.0))]
    big = pd.concat(frames, ignore_index=True)
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        detect_changes(big)
        best = min(best, time.perf_counter() - t0)
    n_series = big.groupby(["kernel", "metric"]).ngroups
    return (f"detect_changes on {n_series} series x {N_RUNS} runs x {UNITS} processes ({len(big)} rows): "
            f"{best:.2f} s (best of 3)")


if __name__ == "__main__":
    sys.exit(main())
