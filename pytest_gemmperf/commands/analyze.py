"""``gemmperf analyze PATH... [--out DIR] [--warmup N] [--categories FILE]``

Reads every profiler output under the paths (files, rocprofv3 directories, aorta sweeps, our
results directories) and writes:

* ``DIR/kernels.csv``: one row per (point, rank, kernel) with duration statistics (ns) and the
  kernel category. When the inputs mix profilers (e.g. an aorta cell holding both torch traces
  and rocprofv3 output of the same run) a leading ``source`` column keeps them apart, because
  the same dispatches would otherwise be counted twice;
* ``DIR/summary.json``: inputs, what was read or skipped, dispatch counts, per point/rank totals
  by category (all dispatches, warm-up included), artefact flag counts, agents.
"""

from __future__ import annotations

import argparse

from pytest_gemmperf.commands.argtypes import add_allow_partial, non_negative
from pytest_gemmperf.commands.helpfmt import command_description

#: default output: a new .gemmperf/analyze/<time>-<random>/ per call (workdir.py)
DEFAULT_OUT = "analyze"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "analyze", help="per-kernel statistics of profiler outputs (no baseline needed)",
        description=command_description(__doc__))
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="trace file, rocprofv3 output dir, aorta sweep dir or results dir")
    p.add_argument("--out", metavar="DIR",
                   help=f"output directory (default: a new .gemmperf/{DEFAULT_OUT}/<time>-<random>)")
    p.add_argument("--warmup", type=non_negative, default=0, metavar="N",
                   help="drop the first N dispatches of each (point, rank, kernel) (default 0)")
    p.add_argument("--categories", metavar="FILE",
                   help="YAML {category: [regex, ...]} tried before the built-in rules")
    p.add_argument("--no-report", dest="report", action="store_false",
                   help="skip report.html / report.xlsx / summary.md / variance CSVs")
    add_allow_partial(p)
    p.add_argument("--jobs", type=non_negative, default=0, metavar="N",
                   help="worker processes reading trace files at once (default 0: every usable core; "
                        "1: serial, no pool); results do not depend on it")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    # lazy: keeps gemmperf --help fast
    from pytest_gemmperf.commands import analyze_impl

    return analyze_impl.run(args)
