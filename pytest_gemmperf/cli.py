"""The ``gemmperf`` command. Thin: each subcommand lives in ``pytest_gemmperf.commands.<name>``
and exposes ``add_parser(subparsers)`` and ``run(args) -> int``.

Settings shared with pytest (baseline store, threshold, history, jobs) come from the flags, else
the project's pytest configuration (found as pytest finds it), else the defaults (``config.py``).

Exit status (DESIGN.md section 8): 0 ok, 1 regression found, 2 usage or input error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from pytest_gemmperf import __version__
from pytest_gemmperf.commands.helpfmt import GemmperfParser
from pytest_gemmperf.config import (Origin, SettingError, bound_settings, find_project, resolve_cli,
                                    settings_line)
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.textsafe import printable

SUBCOMMANDS = ("analyze", "compare", "baseline", "rocprof_config", "merge", "history")


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
        args.setting_origins = _project_settings(args)
        return int(args.func(args) or 0)
    except GemmperfInputError as exc:
        print(printable(f"gemmperf: error: {exc}"), file=sys.stderr)  # one line, whatever the path holds
        return 2
    except SettingError as exc:
        print(printable(f"gemmperf: error: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gemmperf: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # output piped into `head` and closed early: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _project_settings(args: argparse.Namespace) -> dict[str, Origin]:
    """The chosen command's settings (``--baseline-dir``, ``--threshold``, ...) from its flags,
    else the project's pytest configuration, else the defaults: the store and threshold pytest
    uses. Read after parsing, so ``--help`` reads no file; says on stderr which file it read."""
    if not bound_settings(args):
        return {}
    here = Path.cwd()
    project = find_project(here)
    origins = resolve_cli(args, project)
    line = settings_line(args, project, origins, here)
    if line:
        print(printable(line), file=sys.stderr)
    args.project = project
    return origins


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
