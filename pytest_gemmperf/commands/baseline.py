"""``gemmperf baseline refresh|learn|show|diff|prune``: the explicit, reviewable way baselines change."""

from __future__ import annotations

import argparse

from pytest_gemmperf.collector import gc_paused
from pytest_gemmperf.commands.argtypes import add_allow_partial, non_negative
from pytest_gemmperf.commands.helpfmt import command_description
from pytest_gemmperf.config import add_cli_option


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("baseline", help="refresh, learn, show, diff or prune stored baselines",
                       description=command_description(__doc__))
    bsub = p.add_subparsers(dest="baseline_command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        add_cli_option(sp, "baseline_dir")  # the store pytest gates against (config.py)

    def run_options(sp: argparse.ArgumentParser) -> None:
        # refresh, learn and diff read a run the same way: one wording, one type
        sp.add_argument("--from", dest="results", required=True, metavar="RESULTS_DIR",
                        help="results directory of a finished run (or .gemmperf/results: newest run)")
        common(sp)
        sp.add_argument("-k", dest="test_filter", metavar="SUBSTR",
                        help="only tests whose id contains SUBSTR (default: every test of the run)")
        sp.add_argument("--warmup", type=non_negative, default=None, metavar="N",
                        help="dispatches per process and kernel to drop (default: as the run recorded)")
        add_cli_option(sp, "jobs", help="worker processes reading result points at once (auto: every usable "
                                        "core where the inputs are large enough to pay for the pool, else "
                                        "serial; 1: serial, no pool; dask://HOST:PORT: a Dask cluster's "
                                        "workers); results do not depend on it")
        add_allow_partial(sp)

    def from_results(name: str, help_text: str, func) -> argparse.ArgumentParser:
        sp = bsub.add_parser(name, help=help_text, description=_sentence(help_text))
        run_options(sp)
        sp.set_defaults(func=func)
        return sp

    refresh = from_results("refresh", "promote a finished results directory to baselines (merged per point: "
                            "stored points the run lacks are kept unless --replace)", run_refresh)
    refresh.add_argument(
        "--replace", action="store_true",
        help="replace each refreshed record whole: stored points the run lacks are removed")
    from_results("learn", "add a finished run's between-process variance to the baselines' history "
                          "(samples unchanged)", run_learn)

    s = bsub.add_parser("show", help="list baselines, or the summary of one test",
                        description="List the stored baselines (checksums verified), or print the "
                                    "per-kernel summary of one test.")
    common(s)
    s.add_argument("test_id", nargs="?", metavar="TEST_ID",
                   help="show this test's statistics (default: list every record)")
    s.add_argument("--hw", metavar="KEY", help="only this hardware key (default: all)")
    s.add_argument("--no-verify", dest="verify", action="store_false",
                   help="list from meta.json only, without reading and checksumming every record")
    s.set_defaults(func=run_show)

    d = bsub.add_parser("diff", help="what a refresh from RESULTS_DIR would change",
                        description="Show what `gemmperf baseline refresh` from RESULTS_DIR would "
                                    "change, without writing anything.")
    run_options(d)
    d.add_argument("--all", action="store_true", help="also list unchanged rows")
    d.add_argument("--replace", action="store_true",
                   help="diff against a whole-record replace (what `refresh --replace` writes)")
    d.set_defaults(func=run_diff)

    pr = bsub.add_parser("prune", help="remove old baselines (lists them unless --yes)",
                         description="List the baseline records not updated for DAYS days; "
                                     "remove them with --yes.")
    common(pr)
    pr.add_argument("--older-than", type=float, metavar="DAYS",
                    help="records not updated for DAYS days (required to select anything)")
    pr.add_argument("--hw", metavar="KEY", help="only this hardware key (default: all)")
    pr.add_argument("--yes", action="store_true", help="remove (default: list what would be removed)")
    pr.add_argument("--dry-run", action="store_true",
                    help="list what would be removed (the default; kept for scripts that pass it)")
    pr.set_defaults(func=run_prune)

    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    return p


def _sentence(text: str) -> str:
    """A sub-command's one-line help as its --help description."""
    return text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _impl():
    """The command's work, imported when it runs, with the cyclic collector paused (collector.py)."""
    with gc_paused():
        # lazy: keeps gemmperf --help fast (the work loads pandas, scipy, pyarrow)
        from pytest_gemmperf.commands import baseline_impl

    return baseline_impl


def run_refresh(args: argparse.Namespace) -> int:
    return _impl().run_refresh(args)


def run_learn(args: argparse.Namespace) -> int:
    return _impl().run_learn(args)


def run_show(args: argparse.Namespace) -> int:
    return _impl().run_show(args)


def run_diff(args: argparse.Namespace) -> int:
    return _impl().run_diff(args)


def run_prune(args: argparse.Namespace) -> int:
    return _impl().run_prune(args)
