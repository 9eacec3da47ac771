"""The confirmation rule (``gate/confirm.py``) on fresh baselines: detection, false alarms, cost.

A fresh baseline has no variance history, so at threshold 0 the first look detects a 3 %
single-kernel slowdown in only about a third of the tests (``benchmarks/gate_accuracy.py``).
Here every simulated test runs as the plugin runs it with ``--gemmperf-confirm N``:

1. first look: baseline (4 processes) vs candidate (4 processes), both compacted to 21
   quantiles per (kernel, process) as the plugin stores and compares them;
2. if the point is suspicious (``confirm.suspicious``), a round re-runs 4 more candidate
   processes (same distribution: a real slowdown persists); the combined candidate is compared
   again, the re-runs alone too, and ``confirm.judge_round`` gives the verdicts (each round at its
   share of the FDR budget, ``ConfirmConfig.fdr_share``); up to N rounds while still suspicious.

Rows: the first look alone (today's gate), and confirmation with N = 1 and N = 2 rounds, at
threshold 0 and at the default threshold (5 %). Columns: false alarms per test in A/A tests
(any ``regression`` row), detection of a 3 % and a 5 % slowdown of one kernel (the slowed
kernel's ``dur_ns`` row ends ``regression``), a *transient* (the first look's processes are 5 %
slower on one kernel, the re-run is clean: how often it still blocks), and the average number
of extra candidate processes per test (A/A and 3 % tests).

Scenarios and noise come from ``benchmarks/gate_accuracy.py`` (imported, not copied):
``real-resampled`` (the real 908 rocprofv3 trace, 20 recorded steps drawn per process) and
the synthetic ``heavy`` and ``bimodal`` ones; slowed kernels are its eligible kernels (>= 50
dispatches per process, per-process median CV <= 1 %).

Run: ``python benchmarks/gate_confirm.py [--reps-aa 300 --reps-det 60] [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import gate_accuracy as ga  # noqa: E402
from pytest_gemmperf.gate.compare import GateConfig, compare  # noqa: E402
from pytest_gemmperf.gate.confirm import ConfirmConfig, judge_round, settled, suspicious  # noqa: E402
from pytest_gemmperf.gate.samples import compact_samples  # noqa: E402

PROCS = 4  # processes per side and per confirmation round (the point's repeats)
SCREEN_Q = ConfirmConfig().screen_q  # main(): --screen-q


def draw_side(pool: "ga.StepPool", rng: np.random.Generator, units: range,
              slow: dict[int, float] | None = None) -> pd.DataFrame:
    """Compacted samples of ``units`` simulated processes (``gate_accuracy``'s noise model:
    recorded steps drawn per process, a shared and a per-kernel process factor), with the
    kernels in ``slow`` multiplied."""
    frames = []
    n_k = len(pool.names)
    names = np.asarray(pool.names, dtype=object)
    for u in units:
        k, v = ga.draw_process(pool, rng, np.arange(len(pool.start) - 1))
        factor = rng.normal(0, ga.SIGMA_SHARED) + rng.normal(0, 1, n_k) * pool.sigma_kernel
        v = v * np.exp(factor[k])
        for kern, mult in (slow or {}).items():
            v = np.where(k == kern, v * mult, v)
        frames.append(pd.DataFrame({"point": "p", "kernel": names[k], "metric": "dur_ns",
                                    "unit": f"host/{u}/0/{u}", "value": v}))
    return compact_samples(pd.concat(frames, ignore_index=True))


def run_test(pool, rng, cfg: GateConfig, rounds: int, slow: dict[int, float] | None,
             transient: bool = False) -> dict[int, tuple[pd.DataFrame, int]]:
    """One simulated test: {N: (final verdicts, extra processes)} for N = 0..rounds."""
    base = draw_side(pool, rng, range(0, PROCS))
    cand = draw_side(pool, rng, range(PROCS, 2 * PROCS), slow)
    first = compare(base, cand, cfg)
    out = {0: (first, 0)}
    ccfg = ConfirmConfig(rounds=rounds, screen_q=SCREEN_Q)
    if not suspicious(first, ccfg).any():
        return {n: (first, 0) for n in range(rounds + 1)}
    combined, verdicts, extra, reruns = cand, first, 0, cand.iloc[:0]
    for n in range(1, rounds + 1):
        rerun = draw_side(pool, rng, range(PROCS * (n + 1), PROCS * (n + 2)), None if transient else slow)
        combined = pd.concat([combined, rerun], ignore_index=True)
        reruns = pd.concat([reruns, rerun], ignore_index=True)  # every round so far: "the re-run alone"
        extra += PROCS
        verdicts, _ = judge_round(first, lambda s, c: compare(base, s, c), combined, reruns, cfg, ccfg, n)
        out[n] = (verdicts, extra)
        if settled(verdicts, ccfg):
            for m in range(n + 1, rounds + 1):
                out[m] = (verdicts, extra)
            break
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps-aa", type=int, default=300)
    ap.add_argument("--reps-det", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=ConfirmConfig().rounds, help="largest N measured (default: the plugin's)")
    ap.add_argument("--screen-q", type=float, default=ConfirmConfig().screen_q,
                    help="ConfirmConfig.screen_q (q-value screen of unchanged/inconclusive rows)")
    ap.add_argument("--quick", action="store_true", help="60 A/A and 20 detection replicates")
    ap.add_argument("--scenarios", default="real-resampled,heavy,bimodal")
    ap.add_argument("--configs", default="threshold 0,default (5%)",
                    help="comma-separated subset of: threshold 0, default (5%%)")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps_aa, args.reps_det = 60, 20
    global SCREEN_Q
    SCREEN_Q = args.screen_q
    configs = {"threshold 0": GateConfig(threshold=0.0), "default (5%)": GateConfig()}
    configs = {k: v for k, v in configs.items() if k in args.configs.split(",")}
    for name in args.scenarios.split(","):
        if name.startswith("real"):
            if not ga.REAL.exists():
                print(f"scenario {name}: skipped ({ga.REAL} absent)")
                continue
            pool = ga.load_real()
            pool.resample_steps = ga.RESAMPLED_STEPS
        else:
            pool = ga.synthetic(name, 100 + ga.SCENARIO_SEEDS[name])
        rng = np.random.default_rng(2000 + ga.SCENARIO_SEEDS.get(name, 9))
        elig, _ = ga.eligible_kernels(pool, rng)
        t0 = time.perf_counter()
        res: dict[tuple[str, int], dict[str, list[float]]] = {}

        def add(cfg_name: str, n: int, key: str, value: float) -> None:
            res.setdefault((cfg_name, n), {}).setdefault(key, []).append(value)

        for cfg_name, cfg in configs.items():
            for _ in range(args.reps_aa):
                for n, (v, extra) in run_test(pool, rng, cfg, args.rounds, None).items():
                    add(cfg_name, n, "A/A", float((v["verdict"] == "regression").any()))
                    add(cfg_name, n, "extra A/A", extra)
            for label, mult, transient in (("3%", 1.03, False), ("5%", 1.05, False), ("transient 5%", 1.05, True)):
                for _ in range(args.reps_det):
                    k = int(rng.choice(elig))
                    for n, (v, extra) in run_test(pool, rng, cfg, args.rounds, {k: mult}, transient).items():
                        hit = v[(v["metric"] == "dur_ns") & (v["verdict"] == "regression")]["kernel"]
                        if transient:  # a transient blocks the test if anything is a regression
                            add(cfg_name, n, label, float((v["verdict"] == "regression").any()))
                        else:
                            add(cfg_name, n, label, float(pool.names[k] in set(hit)))
                        if label == "3%":
                            add(cfg_name, n, "extra 3%", extra)
        cols = ["A/A", "3%", "5%", "transient 5%", "extra A/A", "extra 3%"]
        head = ["rule", "false alarms/test", "detect 1k 3%", "detect 1k 5%", "transient 5% blocks",
                "extra procs/test A/A", "extra procs/test 3%"]
        rows = [head]
        for (cfg_name, n), d in res.items():
            # rounds share the FDR budget of the N-round design (ConfirmConfig.fdr_share): the
            # row after round n < N is that design stopped early, not the n-round design
            rule = (f"{cfg_name}, first look only" if n == 0 else f"{cfg_name}, confirm N={n}" if n == args.rounds
                    else f"{cfg_name}, N={args.rounds} after round {n}")
            row = [rule]
            for c in cols:
                vals = d.get(c, [])
                if not vals:
                    row.append("-")
                elif c.startswith("extra"):
                    row.append(f"{np.mean(vals):.2f}")
                else:
                    row.append(f"{100 * np.mean(vals):.1f}% ({int(np.sum(vals))}/{len(vals)})")
            rows.append(row)
        w = [max(len(r[i]) for r in rows) for i in range(len(head))]
        print(f"\nscenario {name}: {len(pool.names)} kernels, {PROCS} processes per side and per "
              f"confirmation round, fresh baseline (no history), {len(elig)} eligible kernels; "
              f"{time.perf_counter() - t0:.0f} s")
        print("| " + " | ".join(c.ljust(x) for c, x in zip(head, w)) + " |")
        print("|" + "|".join("-" * (x + 2) for x in w) + "|")
        for r in rows[1:]:
            print("| " + " | ".join(c.ljust(x) for c, x in zip(r, w)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
