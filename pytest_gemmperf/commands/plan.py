"""``gemmperf plan --detect 3%``: how many processes per side the gate needs to catch a change.

From each stored baseline record (its between-process variance, as the gate estimates it, and
its variance history), per point, at the test's own threshold (resolved as ``gemmperf compare``
resolves it, and named on the first line): for every gated kernel and per-category total, the processes
per side with which the gate calls a slowdown of the given size a ``regression`` with the
given power (default 80 %) at the gate's FDR and threshold, and the half-width of the gate's
95 % interval at the count the baseline recorded; then per category and per point the count
that detects the change in every kernel that any count up to ``--max-repeats`` can detect.
A "process" is one profiled process (ranks x repeats). How the power is computed and how
well it predicts the gate: docs/statistics.md ("Planning: how many processes").
"""

from __future__ import annotations

import argparse

from pytest_gemmperf.collector import gc_paused
from pytest_gemmperf.commands.argtypes import int_at_least
from pytest_gemmperf.commands.helpfmt import command_description
from pytest_gemmperf.config import add_cli_option, default, parse_threshold

#: the cap pytest's --gemmperf-max-repeats starts from (config.SETTINGS), here in processes
DEFAULT_MAX = default("max_repeats")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help="processes per side the gate needs to detect a change of a given size",
                       description=command_description(__doc__))
    add_cli_option(p, "baseline_dir")  # the store pytest gates against (config.py)
    p.add_argument("--test", dest="test_id", metavar="ID", help="only this test id (default: every test)")
    p.add_argument("-k", dest="test_filter", metavar="SUBSTR",
                   help="only tests whose id contains SUBSTR (default: every test)")
    p.add_argument("--hw", metavar="KEY", help="only this hardware key (default: all)")
    p.add_argument("--detect", type=_change, required=True, metavar="CHANGE",
                   help="slowdown to detect, e.g. 3%% or 0.03")
    add_cli_option(p, "threshold", help="the threshold for every test, overriding the rules the tests "
                                         "recorded (default: each test's rule as recorded with --results' newest "
                                         "run, else with its baseline, else the project's gemmperf_threshold, "
                                         "else 5%%)")
    p.add_argument("--results", metavar="DIR", default=None,
                   help="a results directory (or one run of it) whose newest complete run's per-test "
                        "rules win over the baselines', as in `gemmperf compare` (default: none)")
    p.add_argument("--fdr", type=_fraction, default=None, metavar="Q",
                   help="the gate's Benjamini-Hochberg FDR (default: the gate's, 0.01)")
    p.add_argument("--power", type=_fraction, default=0.8, metavar="P",
                   help="probability of a regression verdict asked for (default 0.8)")
    p.add_argument("--max-repeats", type=int_at_least(2), default=DEFAULT_MAX, metavar="N",
                   help="largest count considered, in processes per side (a process: one rank of "
                        "one repeat; pytest's --gemmperf-max-repeats counts repeats per point)")
    p.set_defaults(func=run)
    return p


def _threshold(text: str) -> float:
    try:
        return parse_threshold(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _change(text: str) -> float:
    value = _threshold(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("the change to detect must be above 0, e.g. 3%")
    return value


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
        from pytest_gemmperf.commands import plan_impl

    return plan_impl


def run(args: argparse.Namespace) -> int:
    return _impl().run(args)
