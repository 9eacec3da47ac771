"""The first look against its targets: one comparison of 4 processes a side against a fresh
baseline (no variance history), as ``gemmperf compare`` gives it. Pytest confirms a suspicious
point with re-runs; the CLI gates on this look alone.

Same noise model and regimes as ``benchmarks/gate_regimes.py`` (real 908 trace resampled by
whole steps, 1 % per-process factor; synthetic "heavy" and "bimodal"), first look only:

* every A/A regime of ``gate_regimes.py`` (2/3/4/8/16 processes per side, 8/16/23/32/64
  iterations per process, a candidate with 30 % fewer / 50 % more iterations) in every
  scenario: the fraction of tests with any ``regression`` (the shorter/longer candidates: any
  kernel ``regression`` or ``improvement``), at the default rule and at threshold 0; target
  <= 1 % in both;
* real trace, every GEMM 7 % slower in a test that gates GEMMs only, default rule: the mean
  fraction of GEMM rows that are ``regression`` (target >= 80 %);
* real trace, every GEMM 4 % slower, GEMMs only, threshold 0: tests that fail (>= 80 %);
* real trace, the top GEMM (largest total time) 5 % slower, all kernels gated, threshold 0:
  tests whose top-GEMM row is ``regression`` (>= 80 %).

Run: ``python benchmarks/gate_first_look.py [--reps-aa 300 --reps-eff 120] [--scenarios ...]
[--only LABEL,...]``; the table, its command and date are in ``docs/statistics.md`` ("First look").
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gate_regimes as gr  # noqa: E402

DEFAULT, ZERO = "default", "threshold 0"


@dataclass(frozen=True)
class Target:
    """What a regime's row must show: ``measure`` of ``rule`` compared with ``bound``."""

    regime: gr.Regime
    label: str
    measure: str  # a key of gate_regimes.one_test's per-rule dict
    rule: str | None  # None: both rules (A/A)
    at_most: bool
    bound: float

    def text(self) -> str:
        return f"{'<=' if self.at_most else '>='} {100 * self.bound:g} %"

    def met(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound


def targets(scenario: str) -> list[Target]:
    aa = [Target(r, r.label, "alarm", None, True, 0.01) for r in gr.regimes() if r.kind == "aa"]
    if not scenario.startswith("real"):
        return aa
    fam7 = gr.Regime("family 7 % (GEMM-only test)", kind="family", effect=0.07)
    fam4 = gr.Regime("family 4 % (GEMM-only test)", kind="family", effect=0.04)
    top = gr.Regime("top GEMM 5 %", kind="top", effect=0.05)
    return aa + [Target(fam7, "GEMM family 7 %: GEMM rows `regression`", "GEMM rows", DEFAULT, False, 0.8),
                 Target(fam4, "GEMM family 4 %: test fails", "fails", ZERO, False, 0.8),
                 Target(top, "top GEMM 5 % (1 % process factor): its row `regression`", "detected", ZERO,
                        False, 0.8)]


def run(scenario: str, reps_aa: int, reps_eff: int, only: list[str]) -> str:
    pool = gr.load_pool(scenario)
    if pool is None:
        return f"scenario {scenario}: skipped (real trace absent)"
    rng = np.random.default_rng(3000 + gr.ga.SCENARIO_SEEDS[scenario])
    gemm, top = gr.gemms(pool)
    head = ["scenario", "row", "reps", "default (5 %)", "threshold 0", "target", "met"]
    rows = [head]
    t0 = time.perf_counter()
    for t in targets(scenario):
        if only and not any(o in t.label for o in only):
            continue
        n = reps_aa if t.regime.kind == "aa" else reps_eff
        acc: dict[str, list[float]] = {DEFAULT: [], ZERO: []}
        for _ in range(n):
            out = gr.one_test(pool, rng, t.regime, gemm, top, confirm=False)
            for rule in acc:
                acc[rule].append(out[rule][t.measure])
        value = {rule: float(np.mean(v)) for rule, v in acc.items()}
        judged = [value[DEFAULT], value[ZERO]] if t.rule is None else [value[t.rule]]
        cells = {rule: f"{100 * value[rule]:.1f} %" for rule in acc}
        if t.rule is not None:
            cells[t.rule] = f"**{cells[t.rule]}**"
        row = [scenario, t.label, str(n), cells[DEFAULT], cells[ZERO], t.text(),
               "met" if all(t.met(x) for x in judged) else "NOT MET"]
        rows.append(row)
        print(" | ".join(row), file=sys.stderr, flush=True)
    w = [max(len(r[i]) for r in rows) for i in range(len(head))]
    fmt = lambda r: "| " + " | ".join(c.ljust(k) for c, k in zip(r, w)) + " |"  # noqa: E731
    lines = [fmt(rows[0]), "|" + "|".join("-" * (k + 2) for k in w) + "|"] + [fmt(r) for r in rows[1:]]
    lines.append(f"({scenario}: {time.perf_counter() - t0:.0f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps-aa", type=int, default=300)
    ap.add_argument("--reps-eff", type=int, default=120)
    ap.add_argument("--scenarios", default="real-resampled,heavy,bimodal")
    ap.add_argument("--only", default="", help="comma-separated substrings of the row labels to run")
    args = ap.parse_args(argv)
    only = [o for o in args.only.split(",") if o]
    for name in args.scenarios.split(","):
        print()
        print(run(name, args.reps_aa, args.reps_eff, only), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
