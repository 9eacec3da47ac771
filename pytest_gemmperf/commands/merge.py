"""``gemmperf merge RESULTS_DIR... --out DIR``: one results directory from a sharded sweep.

Each input is a results directory one shard (``pytest --gemmperf-shard I/N``) wrote. The
merge is planned in full before anything is written, so bad input leaves no half-merged
directory:

* every input needs ``run.json``; inputs that ran as shards must come from one plan (same
  ``N``, same plan digest -- the shards saw the same items and durations), each shard index
  once (a repeated index is an error naming both directories), and all ``N`` present unless
  ``--partial``;
* each ``<test>/<point>/`` directory is copied (hard links where the file system allows, so
  large traces are not duplicated); the same test and point in two inputs is an error naming
  both;
* each test's ``verdicts.csv`` rows are combined and ordered by point as the plugin orders
  them (stable), cell text kept byte for byte, so a merged sweep's verdicts equal those of
  the same sweep run unsharded;
* ``run.json`` is the first input's session metadata plus ``merged_from`` (one entry per
  input: directory, shard, host, hardware key, commit, points) and the list of shards.

Then the reports are written with the plugin's own ``report.write_results_reports``.
Exit status: 0, 1 when any merged verdict is ``regression``, 2 on bad input.

Write rules of a sharded CI run: shards only *read* the baseline store (shared location);
one refresh job writes it (``gemmperf baseline refresh --from <merged dir>``).
"""

from __future__ import annotations

import argparse

from pytest_gemmperf.collector import gc_paused
from pytest_gemmperf.commands.argtypes import add_allow_partial


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("merge", help="combine the results directories of a sharded sweep",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="+", metavar="RESULTS_DIR", help="results directories (one per shard)")
    p.add_argument("--out", required=True, metavar="DIR", help="merged results directory (new or empty)")
    p.add_argument("--report-dir", metavar="DIR", help="report output (default DIR/report)")
    p.add_argument("--no-report", dest="report", action="store_false", help="merge only, write no report")
    p.add_argument("--partial", action="store_true",
                   help="allow shards to be missing (their points are then absent from the merge)")
    add_allow_partial(p)
    p.set_defaults(func=run)
    return p


def _impl():
    """The command's work, imported when it runs, with the cyclic collector paused (collector.py)."""
    with gc_paused():
        # lazy: keeps gemmperf --help fast (the work loads pandas, scipy, pyarrow)
        from pytest_gemmperf.commands import merge_impl

    return merge_impl


def run(args: argparse.Namespace) -> int:
    return _impl().run(args)
