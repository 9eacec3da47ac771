"""``gemmperf history record|show|check|prune``: every gated run's per-process values over time.

* ``record PATH``: append any input ``gemmperf compare`` accepts as a candidate (results
  directories, rocprofv3 output directories, traces, samples tables) as one run, so past runs
  and other sites' runs can be imported. A run id is recorded once per test and point: recording
  it again is refused (exit 2) unless ``--replace``, which swaps in the new values.
* ``show``: per (test, point, kernel, metric) the last N run medians, the trend over them and
  the latest change point.
* ``check``: change-point detection over every series; writes ``changes.csv`` and exits 1 when
  a regression change point lies within the last K runs of its series. A series whose newest
  run lies far outside it (beyond the threshold and beyond the series' own spread,
  ``history/suspects.py``) is flagged at once as a *suspect*, naming how many more runs would
  confirm it as a change point (``suspects.csv``); with no recent regression it exits 4.
* ``prune``: retention (``--keep-last N`` runs per hardware key, ``--older-than DAYS``); lists
  what it would delete unless ``--yes``.

Exit status: 0 ok, 1 a recent regression change point (``check``), 2 usage or input error,
4 a suspected regression in the newest run and no recent regression change point (``check``).
"""

from __future__ import annotations

import argparse

from pytest_gemmperf.collector import gc_paused
from pytest_gemmperf.commands.argtypes import add_allow_partial, non_negative, positive
from pytest_gemmperf.config import SettingError, add_cli_option
from pytest_gemmperf.commands.defaults import HISTORY_CHECK_OUT as CHECK_OUT
from pytest_gemmperf.commands.defaults import HISTORY_LAST as DEFAULT_LAST
from pytest_gemmperf.commands.defaults import HISTORY_TEST_ID as DEFAULT_TEST_ID


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("history", help="record, show, check or prune the run history",
                       description=__doc__.split("\n\n")[0])
    hsub = p.add_subparsers(dest="history_command", required=True)

    def store(sp: argparse.ArgumentParser) -> None:
        # the store pytest appends to (config.py): the project's gemmperf_history, else .gemmperf/history
        add_cli_option(sp, "history", help="history store: a directory or an fsspec URL (file://, s3://, "
                                           "gs://... with that filesystem's fsspec package installed)")

    def filters(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-k", dest="kernel", metavar="SUBSTR", help="only kernels whose name contains SUBSTR")
        sp.add_argument("--test", metavar="ID", help="only this test id")
        sp.add_argument("--hw", metavar="KEY", help="only this hardware key")

    r = hsub.add_parser("record", help="append a run (results dir, rocprofv3 dir, traces, samples table)")
    r.add_argument("path", metavar="PATH", help="anything `gemmperf compare` accepts as a candidate")
    store(r)
    r.add_argument("--run-id", required=True, metavar="ID", help="the run's id (e.g. CI job id)")
    r.add_argument("--commit", metavar="SHA", help="git commit (default: the results dir's run.json)")
    r.add_argument("--branch", metavar="NAME", help="git branch")
    r.add_argument("--time", metavar="ISO8601",
                   help="run time (default: the results dir's creation time, else now); naive means UTC")
    r.add_argument("--hw", metavar="KEY", help="hardware key (default: run.json's, else the traces' agents)")
    r.add_argument("--test", metavar="ID",
                   help=f"test id for inputs that carry none: traces, rocprofv3 directories, samples tables "
                        f"(default: {DEFAULT_TEST_ID}; results directories keep their own)")
    r.add_argument("--warmup", type=non_negative, default=None, metavar="N",
                   help="dispatches per (process, kernel) dropped (default: as gemmperf compare)")
    add_allow_partial(r)
    r.add_argument("--replace", action="store_true",
                   help="replace the values this run id already holds for the same test and point "
                        "(default: such a run is refused, so no run is ever counted twice)")
    r.set_defaults(func=run_record)

    s = hsub.add_parser("show", help="last runs, trend and latest change per kernel and metric")
    store(s)
    filters(s)
    s.add_argument("--last", type=positive, default=DEFAULT_LAST, metavar="N", help="runs shown (default 5)")
    s.add_argument("--max-rows", type=positive, default=40, metavar="N", help="series printed (default 40)")
    add_cli_option(s, "threshold", help="latest_change says \"suspect\" for a newest run worse than its series' "
                                        "level by more than this and its spread (default: the project's "
                                        "gemmperf_threshold, else 5%%)")
    s.set_defaults(func=run_show)

    c = hsub.add_parser("check", help="change points; exit 1 on a regression within the last K runs, "
                                      "4 on a suspect newest run")
    store(c)
    filters(c)
    c.add_argument("--out", metavar="DIR",
                   help=f"where changes.csv is written (default: a new .gemmperf/{CHECK_OUT}/<time>-<random>)")
    add_cli_option(c, "history_window",
                   help="a regression counts when its first worse run is among the last K runs")
    add_cli_option(c, "threshold", help="a newest run is a suspect only when worse than its series' level by "
                                        "more than this (default: the project's gemmperf_threshold, else 5%%)")
    c.add_argument("--no-report", dest="report", action="store_false",
                   help="write changes.csv only (no history.html / history.xlsx)")
    c.set_defaults(func=run_check)

    pr = hsub.add_parser("prune", help="delete old runs (dry run unless --yes)")
    store(pr)
    pr.add_argument("--keep-last", type=positive, metavar="N", help="keep the newest N runs per hardware key")
    pr.add_argument("--older-than", type=float, metavar="DAYS", help="delete runs older than DAYS days")
    pr.add_argument("--hw", metavar="KEY", help="only this hardware key")
    pr.add_argument("--yes", action="store_true", help="delete (default: list what would be deleted)")
    pr.set_defaults(func=run_prune)
    return p


def _impl():
    """The command's work, imported when it runs, with the cyclic collector paused (collector.py)."""
    with gc_paused():
        # lazy: keeps gemmperf --help fast (the work loads pandas, scipy, pyarrow)
        from pytest_gemmperf.commands import history_impl

    return history_impl


def run_record(args: argparse.Namespace) -> int:
    return _impl().run_record(args)


def run_show(args: argparse.Namespace) -> int:
    return _impl().run_show(args)


def run_check(args: argparse.Namespace) -> int:
    return _impl().run_check(args)


def run_prune(args: argparse.Namespace) -> int:
    return _impl().run_prune(args)
