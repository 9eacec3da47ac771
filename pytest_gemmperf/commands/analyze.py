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
import gc

from pytest_gemmperf.collector import gc_paused
from pytest_gemmperf.commands.argtypes import add_allow_partial
from pytest_gemmperf.commands.helpfmt import command_description
from pytest_gemmperf.config import add_cli_option
from pytest_gemmperf.commands.defaults import ANALYZE_OUT as DEFAULT_OUT


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "analyze", help="per-kernel statistics of profiler outputs (no baseline needed)",
        description=command_description(__doc__))
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="trace file, rocprofv3 output dir, aorta sweep dir or results dir")
    p.add_argument("--out", metavar="DIR",
                   help=f"output directory (default: a new .gemmperf/{DEFAULT_OUT}/<time>-<random>)")
    add_cli_option(p, "warmup", help="drop the first N dispatches of each (point, rank, kernel)")
    p.add_argument("--categories", metavar="FILE",
                   help="YAML {category: [regex, ...]} tried before the built-in rules")
    p.add_argument("--no-report", dest="report", action="store_false",
                   help="skip report.html / report.xlsx / summary.md / variance CSVs")
    add_allow_partial(p)
    add_cli_option(p, "jobs", help="worker processes reading trace files at once (auto: every usable core "
                                   "where the inputs are large enough to pay for the pool, else serial; "
                                   "1: serial, no pool; dask://HOST:PORT: a Dask cluster's "
                                   "workers); results do not depend on it")
    p.set_defaults(func=run)
    return p


def _impl():
    """The command's work, imported when it runs, with the cyclic collector paused (collector.py)."""
    with gc_paused():
        # lazy: keeps gemmperf --help fast (the work loads pandas, scipy, pyarrow)
        from pytest_gemmperf.commands import analyze_impl

    return analyze_impl


def run(args: argparse.Namespace) -> int:
    # the pool's fork server imports the readers while this process imports the command's work
    # lazy: a parser module imports no work at load time (stdlib only here)
    from pytest_gemmperf.traces.parallel import prestart

    prestart(getattr(args, "jobs", 0), args.paths)
    with gc_paused():
        impl = _impl()
        impl.preload(args)
        # what exists now (pandas, pyarrow, the report layer, the parser) outlives the command:
        # kept out of the cyclic collector's full passes while it runs, which would otherwise
        # walk it all again every few hundred thousand allocations (the first right after the
        # pause); given back to them afterwards (in-process callers)
        gc.freeze()
    try:
        return impl.run(args)
    finally:
        gc.unfreeze()
