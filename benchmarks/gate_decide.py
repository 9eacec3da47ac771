"""The plugin's whole decision per simulated test: first look, confirmation rounds and the
decide rounds of an undecided point (``gate.confirm.PointJudge`` and ``decide_plan``, the code
``pytest_glue/gate_step.py`` runs), on the regimes of ``benchmarks/gate_regimes.py``.

Prints per regime: false alarms (A/A: any ``regression``) or detection (``family``: the test
fails), the share of tests left ``undecided`` before and after the decide rounds, and the
processes the rounds added. The decide rounds are extra looks at an undecided point; this
checks that they keep the A/A false alarms at or below 1 %.

``python benchmarks/gate_decide.py [--reps-aa 200] [--reps-eff 40] [--scenarios heavy]
[--only "A/A 4"] [--max-runs 16]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gate_regimes as gr  # noqa: E402
from pytest_gemmperf.gate.compare import GateConfig, compare  # noqa: E402
from pytest_gemmperf.gate.confirm import DECIDE, ConfirmConfig, PointJudge  # noqa: E402
from pytest_gemmperf.gate.outcome import FAILED, UNDECIDED, decide_plan, point_outcome  # noqa: E402


def one_test(pool, rng: np.random.Generator, r: gr.Regime, gemm: np.ndarray, max_runs: int) -> dict:
    """(outcome after confirmation, outcome after the decide rounds, extra processes)."""
    names = list(pool.names)

    def groups(first: int, count: int) -> list[pd.DataFrame]:
        kernel, unit, value = gr.simulate(pool, rng, r, range(first * r.units, (first + count) * r.units))
        cand = unit >= r.units
        if r.kind == "family":
            keep = np.isin(kernel, gemm)
            kernel, unit, value, cand = kernel[keep], unit[keep], value[keep], cand[keep]
            value = value * np.where(cand, 1 + r.effect, 1.0)
        return gr.samples(names, pool.category, kernel, unit, value, r.units)[first:first + count]

    b, c = groups(0, 2)
    cfg = GateConfig()
    judge = PointJudge(lambda cand, g: compare(b, cand, g), c, cfg, ConfirmConfig())
    n_round = 2
    while judge.confirm_owed():
        judge.add_round(groups(n_round, 1)[0])
        n_round += 1
    confirmed = point_outcome(judge.verdicts).outcome
    # a run is one process here (the simulated unit); the first look had r.units of them
    runs = r.units * (n_round - 1)
    plan = decide_plan(judge.verdicts, runs, runs, max_runs) if confirmed == UNDECIDED else None
    if plan is not None and plan.target is not None:
        while runs < plan.target and point_outcome(judge.verdicts).outcome == UNDECIDED:
            judge.add_round(groups(n_round, 1)[0], kind=DECIDE)
            n_round += 1
            runs += r.units
    return {"confirmed": confirmed, "decided": point_outcome(judge.verdicts).outcome,
            "extra": r.units * (n_round - 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps-aa", type=int, default=200)
    ap.add_argument("--reps-eff", type=int, default=40)
    ap.add_argument("--scenarios", default="heavy,bimodal")
    ap.add_argument("--only", default="A/A 2 processes,A/A 4 processes,A/A 8 processes,family 4",
                    help="comma-separated substrings of gate_regimes' regime labels")
    ap.add_argument("--max-runs", type=int, default=16, help="--gemmperf-max-repeats")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    only = [o for o in args.only.split(",") if o]
    rng = np.random.default_rng(args.seed)
    print("| scenario | regime | reps | fails (after confirmation) | fails (after decide) | "
          "undecided before | undecided after | extra processes/test |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.scenarios.split(","):
        pool = gr.load_pool(name)
        if pool is None:
            print(f"| {name} | skipped: trace absent | | | | | | |")
            continue
        gemm, _ = gr.gemms(pool)
        for r in gr.regimes():
            if r.kind not in ("aa", "family") or (only and not any(o in r.label for o in only)):
                continue
            n = args.reps_aa if r.kind == "aa" else args.reps_eff
            t0 = time.perf_counter()
            rows = [one_test(pool, rng, r, gemm, args.max_runs) for _ in range(n)]
            share = lambda key, what: 100 * np.mean([x[key] == what for x in rows])  # noqa: E731
            print(f"| {name} | {r.label} | {n} | {share('confirmed', FAILED):.1f}% | {share('decided', FAILED):.1f}% | "
                  f"{share('confirmed', UNDECIDED):.1f}% | {share('decided', UNDECIDED):.1f}% | "
                  f"{np.mean([x['extra'] for x in rows]):.2f} | ({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
