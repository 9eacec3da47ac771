"""``gemmperf compare [BASE] CAND [CAND...]``: the gate outside pytest.

BASE and each CAND may be anything ``gemmperf analyze`` reads (trace files, rocprofv3 output
dirs, aorta sweep dirs, results dirs; ``.gemmperf/results``: its newest run), a baselines store /
hardware dir / record dir, or a samples table file (``.parquet`` / ``.csv`` with ``point, kernel, metric, unit, value``).
Writes ``DIR/verdicts.csv`` (columns in the order the pytest session writes them: ``test``,
``point``, ``kernel``, ``metric``, ..., ``verdict``, ``threshold``, ``note``, extras after) and
exits 1 when any verdict is ``regression``, 2 on bad input, 4 when a point is undecided (an
``inconclusive`` gated row and no regression; ``--undecided fail``: 1, ``pass``: 0), else 0.

A results directory the pytest gate judged is judged again from what the gate recorded in each
point's ``point.json`` (``gate``: the rule, the first look's and each re-run round's processes
and disturbance, the baseline's identity and variance history), so its verdicts, changes, CIs,
q-values and reasons are pytest's; what cannot be reproduced (a baseline changed since, a run
recorded without that evidence) is said on stderr.

Without BASE the candidates are compared against the baseline store pytest gates against
(``--baseline-dir``, else the project's ``gemmperf_baseline_dir``). Each test is gated at the
threshold pytest gated it at: its own rule recorded with the candidate run (else with the
baseline), else the project's ``gemmperf_threshold``, else 5 %; ``--threshold`` given applies to
every test. One line says which threshold was used.
"""

from __future__ import annotations

import argparse

from pytest_gemmperf.collector import gc_paused
from pytest_gemmperf.commands.argtypes import add_allow_partial, non_negative
from pytest_gemmperf.commands.helpfmt import command_description
from pytest_gemmperf.config import BY_NAME, Origin, SettingError, add_cli_option, format_threshold, parse_threshold
from pytest_gemmperf.commands.defaults import COMPARE_FDR as DEFAULT_FDR
from pytest_gemmperf.commands.defaults import COMPARE_OUT as DEFAULT_OUT


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("compare", help="compare candidate(s) against a baseline; exit 1 on regression",
                              description=command_description(__doc__))
    p.add_argument("base", nargs="?", metavar="BASE",
                   help="baseline: traces, results/sweep dir, baselines dir, samples file "
                        "(default, when only CAND is given: the baseline store, --baseline-dir)")
    p.add_argument("cands", nargs="+", metavar="CAND", help="candidate(s), same kinds as BASE")
    add_cli_option(p, "baseline_dir", help="baseline store compared against when BASE is not given "
                                           "(default: the project's gemmperf_baseline_dir, else baselines)",
                   in_use=lambda args: args.base is None)
    p.add_argument("--labels", nargs="+", metavar="L",
                   help="one label per CAND, no two alike (default: the path names, with as many parent "
                        "directories as tell them apart: a/run, b/run)")
    p.add_argument("--out", metavar="DIR",
                   help=f"output directory (default: a new .gemmperf/{DEFAULT_OUT}/<time>-<random>)")
    add_cli_option(p, "threshold",
                   help="practical threshold, e.g. 5%% or 0.05; 0%% = statistics alone (default: each "
                        "test's own rule recorded with the runs or baseline, else the project's "
                        "gemmperf_threshold, else 5%%); given, it applies to every test")
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
    add_cli_option(p, "undecided", help="what a point the gate could not decide does to the exit status: "
                                        "fail (exit 1, as a regression), skip (exit 4: neither passed nor "
                                        "failed) or pass (exit 0, accepted) (default: the project's "
                                        "gemmperf_undecided, else skip)")
    add_cli_option(p, "jobs", help="worker processes reading trace files at once (auto: every usable core "
                                   "where the inputs are large enough to pay for the pool, else serial; "
                                   "1: serial, no pool; dask://HOST:PORT: a Dask cluster's "
                                   "workers); results do not depend on it")
    add_allow_partial(p)
    p.set_defaults(func=run)
    return p


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return v


def _impl():
    """The command's work, imported when it runs, with the cyclic collector paused (collector.py)."""
    with gc_paused():
        # lazy: keeps gemmperf --help fast (the work loads pandas, scipy, pyarrow)
        from pytest_gemmperf.commands import compare_impl

    return compare_impl


def run(args: argparse.Namespace) -> int:
    return _impl().run(args)
