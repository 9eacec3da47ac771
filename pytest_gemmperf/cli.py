"""The ``gemmperf`` command. Thin: each subcommand lives in ``pytest_gemmperf.commands.<name>``
and exposes ``add_parser(subparsers)`` and ``run(args) -> int``.

Exit status (DESIGN.md section 8): 0 ok, 1 regression found, 2 usage or input error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from pytest_gemmperf import __version__
from pytest_gemmperf.commands.helpfmt import GemmperfParser
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.textsafe import printable

SUBCOMMANDS = ("analyze", "compare", "baseline", "rocprof_config", "merge", "history", "plan")


def build_parser() -> argparse.ArgumentParser:
    # help as a user reads it: reST stripped, defaults shown (sub-parsers inherit the class)
    parser = GemmperfParser(
        prog="gemmperf",
        description="GPU kernel performance analysis and regression gating for rocprofv3 and "
                    "PyTorch profiler outputs.",
        epilog="exit status: 0 ok, 1 regression found, 2 usage or input error")
    parser.add_argument("--version", action="version", version=f"gemmperf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        try:
            mod = importlib.import_module(f"pytest_gemmperf.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"pytest_gemmperf.commands.{name}":
                continue  # subcommand not built yet
            raise
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except GemmperfInputError as exc:
        print(printable(f"gemmperf: error: {exc}"), file=sys.stderr)  # one line, whatever the path holds
        return 2
    except KeyboardInterrupt:
        print("gemmperf: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # output piped into `head` and closed early: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
