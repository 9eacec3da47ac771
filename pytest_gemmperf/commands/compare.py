"""``gemmperf compare BASE CAND [CAND...]``: the gate outside pytest.

BASE and each CAND may be anything ``gemmperf analyze`` reads (trace files, rocprofv3 output
dirs, aorta sweep dirs, results dirs; ``.gemmperf/results``: its newest run), a baselines store /
hardware dir / record dir, or a samples table file (``.parquet`` / ``.csv`` with ``point, kernel, metric, unit, value``).
Writes ``DIR/verdicts.csv`` (columns in the order the pytest session writes them: ``test``,
``point``, ``kernel``, ``metric``, ..., ``verdict``, ``threshold``, ``note``, extras after) and
exits 1 when any verdict is ``regression``, 2 on bad input, else 0.
"""

from __future__ import annotations

import argparse

from pytest_gemmperf.commands.argtypes import add_allow_partial, non_negative
from pytest_gemmperf.commands.helpfmt import command_description

#: default output: a new .gemmperf/compare/<time>-<random>/ per call (workdir.py)
DEFAULT_OUT = "compare"
#: the gate's Benjamini-Hochberg level (``GateConfig.fdr``), named here because the gate's module
#: loads scipy and --help must not; tests/test_startup.py keeps the two equal
DEFAULT_FDR = 0.01


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("compare", help="compare candidate(s) against a baseline; exit 1 on regression",
                              description=command_description(__doc__))
    p.add_argument("base", metavar="BASE", help="baseline: traces, results/sweep dir, baselines dir, samples file")
    p.add_argument("cands", nargs="+", metavar="CAND", help="candidate(s), same kinds as BASE")
    p.add_argument("--labels", nargs="+", metavar="L", help="one label per CAND (default: the path names)")
    p.add_argument("--out", metavar="DIR",
                   help=f"output directory (default: a new .gemmperf/{DEFAULT_OUT}/<time>-<random>)")
    p.add_argument("--threshold", type=_threshold, default=0.05, metavar="T",
                   help="practical threshold, e.g. 5%% or 0.05 (default 5%%); 0 = statistics alone")
    p.add_argument("--kernel-threshold", nargs=2, action="append", default=[], metavar=("REGEX", "T"),
                   help="per-kernel threshold override (repeatable, first match wins)")
    p.add_argument("--fdr", type=_fraction, default=DEFAULT_FDR, metavar="Q",
                   help=f"Benjamini-Hochberg FDR across all comparisons of a test (default {DEFAULT_FDR:g})")
    p.add_argument("--warmup", type=non_negative, default=None, metavar="N",
                   help="drop the first N dispatches of each (process, kernel) (default: 0 for traces; "
                        "for results directories the warm-up the plugin gated each point with)")
    p.add_argument("--abs-floor-ns", type=float, default=0.0, metavar="NS",
                   help="a regression must also grow the median by more than NS (default 0)")
    p.add_argument("--benchmark-json", metavar="FILE",
                   help="also write pytest-benchmark JSON: FILE for the candidate, FILE-base.json for BASE")
    p.add_argument("--hw", metavar="KEY",
                   help="with a baselines directory as BASE: use its records of this hardware key "
                        "(default: the candidate results' hardware key when the store holds several)")
    p.add_argument("--max-rows", type=non_negative, default=20, metavar="N",
                   help="rows of the printed verdict table (default 20; verdicts.csv has them all)")
    p.add_argument("--no-report", dest="report", action="store_false",
                   help="write verdicts.csv only (no report.html / report.xlsx / summary.md)")
    p.add_argument("--history", metavar="DIR",
                   help="also append each candidate as a run to this history store (directory or fsspec URL)")
    p.add_argument("--run-id", metavar="ID",
                   help="run id in --history (default: the candidate's label; ID-<label> for several)")
    p.add_argument("--jobs", type=non_negative, default=0, metavar="N",
                   help="worker processes reading trace files at once (default 0: every usable core; "
                        "1: serial, no pool); results do not depend on it")
    add_allow_partial(p)
    p.set_defaults(func=run)
    return p


def _threshold(text: str) -> float:
    # lazy: keeps gemmperf --help fast (the gate's module loads scipy)
    from pytest_gemmperf.gate.compare import parse_threshold

    try:
        return parse_threshold(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return v


# ---------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    # lazy: keeps gemmperf --help fast
    from pytest_gemmperf.commands import compare_impl

    return compare_impl.run(args)
