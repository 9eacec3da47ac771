"""The ``gemmperf`` command. Thin: each subcommand lives in ``pytest_gemmperf.commands.<name>``
and exposes ``add_parser(subparsers)`` and ``run(args) -> int``.

Settings shared with pytest (baseline store, threshold, history, jobs) come from the flags, else
the project's pytest configuration (found as pytest finds it), else the defaults (``config.py``).

Exit status (``docs/design.md``): 0 ok, 1 regression found, 2 usage or input error or an
output that could not be written (disk full, read-only: one line naming the file), 3 an
internal error (one line; the traceback goes to a log file the line names), 130 interrupted
(SIGINT, Ctrl-C), 143 terminated (SIGTERM); each with one line. CI scripts read 1 as "the code
got slower", so nothing else may end with 1 -- not even an uncaught exception, which Python
would end with 1. The table of every failure class: docs/reference.md, "Exit status".
"""

from __future__ import annotations

import argparse
import datetime as _dt
import errno
import importlib
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path

from pytest_gemmperf.version import __version__
from pytest_gemmperf.blas_threads import one_blas_thread
from pytest_gemmperf.collector import spare_at_exit
from pytest_gemmperf.commands.helpfmt import GemmperfParser
from pytest_gemmperf.config import (Origin, SettingError, bound_settings, find_project, resolve_cli,
                                    settings_line)
from pytest_gemmperf.errors import GemmperfInputError, OutputError, output_error
from pytest_gemmperf.textsafe import printable

SUBCOMMANDS = ("analyze", "compare", "baseline", "rocprof_config", "merge", "history", "plan")
#: each command's name as typed (the name its module's ``add_parser`` registers)
COMMAND_NAMES = {name: name.replace("_", "-") for name in SUBCOMMANDS}
EXIT_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped
#: where an internal error's traceback goes (relative to the working directory)
LOG_DIR = Path(".gemmperf") / "logs"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's arguments, or with ``command`` (a name as typed, e.g. ``rocprof-config``)
    that command's only: what running it reads (:func:`chosen_command`). Imports the commands'
    parser modules only: their work lives in ``commands/<name>_impl.py``, loaded when a command
    runs, so ``--help`` and ``--version`` answer without pandas, scipy or pyarrow
    (``tests/test_startup.py``, ``benchmarks/startup.py``)."""
    # help as a user reads it: reST stripped, defaults shown (sub-parsers inherit the class)
    parser = GemmperfParser(
        prog="gemmperf",
        description="GPU kernel performance analysis and regression gating for rocprofv3 and "
                    "PyTorch profiler outputs.",
        epilog="exit status: 0 ok, 1 regression found, 2 usage or input error or an output that "
               "could not be written, 3 internal error (traceback in a log file), 4 undecided (compare: a "
               "point undecided with --undecided skip; history check: a suspected newest run), 130 "
               "interrupted, 143 terminated")
    parser.add_argument("--version", action="version", version=f"gemmperf {__version__}")
    names = SUBCOMMANDS if command is None else tuple(n for n in SUBCOMMANDS if COMMAND_NAMES[n] == command)
    # one command's parser: the usage line (shown with a top-level error, such as an argument
    # no parser knows) still names every command, as the whole parser's does
    metavar = "{" + ",".join(COMMAND_NAMES[n] for n in SUBCOMMANDS) + "}" if command is not None else None
    sub = parser.add_subparsers(dest="command", required=True, metavar=metavar)
    for name in names:
        try:
            mod = importlib.import_module(f"pytest_gemmperf.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"pytest_gemmperf.commands.{name}":
                continue  # subcommand not built yet
            raise
        mod.add_parser(sub)
    return parser


def chosen_command(argv: list[str]) -> str | None:
    """The command ``argv`` runs when it names one first (``gemmperf analyze ...``), else None
    (``--help``, ``--version``, a name no command has): the parser that runs it needs that
    command's parser module and arguments alone, which spares building the six others' (a few
    milliseconds of every run); anything else gets the whole parser (help, the choices)."""
    if argv and argv[0] in COMMAND_NAMES.values():
        return argv[0]
    return None


class Terminated(BaseException):
    """SIGTERM (a CI job cancelled, a timeout's kill): raised in the main thread so that every
    ``finally`` and atomic writer cleans up, then one line and exit 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, _frame) -> None:
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    """The command; SIGINT and SIGTERM at any moment after this starts (building the parser
    included) end with one line: ``interrupted`` (130) or ``terminated`` (143).

    SIGTERM is taken over only where no Python handler is installed (the command run as a
    command): an embedding program that handles it itself (a pytest session calling ``main``
    in-process, a service) keeps its handler, so its own SIGTERM still reaches it."""
    previous = None
    try:
        if not callable(signal.getsignal(signal.SIGTERM)):  # SIG_DFL, SIG_IGN or not set from Python
            previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread (an embedding program): its handlers stay
        previous = None
    try:
        with one_blas_thread():
            return _main(argv)
    except KeyboardInterrupt:
        print("gemmperf: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated as exc:
        print(f"gemmperf: terminated ({signal.Signals(exc.signum).name})", file=sys.stderr)
        return 128 + exc.signum
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def console_main() -> int:
    """The ``gemmperf`` program (the console script): :func:`main`, then the process is left to
    end without the cyclic collector walking what the command imported (tens of milliseconds of
    every run; :func:`collector.spare_at_exit`). In-process callers use :func:`main`."""
    try:
        return main()
    finally:
        spare_at_exit()


def _main(argv: list[str] | None) -> int:
    typed = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(chosen_command(typed))
    args = parser.parse_args(typed)
    args.argv = typed  # as typed: corrected commands keep it
    try:
        args.setting_origins = _project_settings(args)
        return int(args.func(args) or 0)
    except GemmperfInputError as exc:
        print(printable(f"gemmperf: error: {exc}"), file=sys.stderr)  # one line, whatever the path holds
        return EXIT_INPUT
    except SettingError as exc:
        print(printable(f"gemmperf: error: {exc}"), file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        # output piped into `head` and closed early: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OutputError as exc:
        print(f"gemmperf: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as exc:  # the machine refused a file operation: the file and the reason
        print(_os_line(exc), file=sys.stderr)
        return EXIT_INPUT
    except Exception as exc:  # noqa: BLE001 - a bug of ours: one line, the traceback kept aside
        print(_internal_error_line(exc, traceback.format_exc()), file=sys.stderr)
        return EXIT_INTERNAL


#: errno values only a write can raise: said as "could not write PATH"
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def _os_line(exc: OSError) -> str:
    """The line shown for an ``OSError``: ``could not write PATH: reason`` where only a write can
    have failed, else ``error: PATH: reason`` (``output_error`` finds the path the user knows)."""
    err = output_error(exc)
    if exc.errno in _WRITE_ERRNOS:
        return f"gemmperf: {err}"
    return f"gemmperf: error: {err.path}: {err.reason}" if err.path is not None else f"gemmperf: error: {err.reason}"


def _internal_error_line(exc: BaseException, text: str) -> str:
    """The one line shown for an unexpected exception, naming the log that holds its traceback."""
    what = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    try:
        log = save_traceback(text)
    except OSError as err:
        return f"gemmperf: internal error: {what} (traceback not saved: {output_error(err)})"
    return f"gemmperf: internal error: {what} (traceback in {log}; please report it)"


def save_traceback(text: str, log_dir: Path | None = None) -> Path:
    """Write ``text`` to a new ``gemmperf-<time>-<pid>.log`` under ``log_dir`` (default
    ``.gemmperf/logs``), or the temporary directory when that cannot be written. Never
    through a planted name or link: the file is created with ``O_EXCL | O_NOFOLLOW``."""
    stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    name = f"gemmperf-{stamp}-{os.getpid()}"
    try:
        directory = log_dir or Path.cwd() / LOG_DIR  # absolute: the line must lead to it
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{name}.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        fd, tmp = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
        path = Path(tmp)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


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
    sys.exit(console_main())
