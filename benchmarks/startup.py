"""Start-up benchmark: ``gemmperf --help`` against ``python -c "import pytest"``.

A user types ``gemmperf --help`` or ``gemmperf compare --help`` to learn an option; that must
answer at once, not after pandas, scipy and pyarrow have loaded. The yardstick is the cost of
importing pytest on the same machine (a pytest plugin can hardly start faster): every help
command must take at most ``--limit`` (1.5) times as long.

The plugin is loaded by every pytest process of an environment it is installed in, so a
session of one trivial test that uses no gemmperf fixture is measured too, with the plugin and
with ``-p no:gemmperf`` (the plugin's cost is the difference). The session is held to
``--session-limit`` seconds (best run, default 0.45) instead of the ratio: it runs pytest's
whole collection and reporting, which no help command does.

For ``import pytest``, ``gemmperf --version``, ``gemmperf --help`` and ``gemmperf <cmd> [<sub>]
--help`` for every subcommand the parser has (found by walking it, so a new one is measured
without editing this file), and the trivial pytest session, it

1. runs each command ``--repeat`` times (default 7) in a fresh process, round-robin over the
   commands so that a busy moment of the machine does not fall on one command alone, and
   prints the best and the median wall time and both ratios to ``import pytest`` (best/best,
   median/median);
2. runs each once more with ``PYTHONPROFILEIMPORTTIME=1`` and lists the heavy packages
   (pandas, scipy, pyarrow, numpy, torch) the command imported: there must be none.

Exits 1 when a ratio or the session's time exceeds its limit, a command imported a heavy
package or failed.
The commands run this checkout's code (``PYTHONPATH`` is set to it) through the ``gemmperf``
script installed beside this interpreter, or, without one, the same two lines the script runs.

Usage: python benchmarks/startup.py [--repeat N] [--limit 1.5] [--session-limit 0.45] [--gemmperf EXE]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_gemmperf.cli import build_parser  # noqa: E402  (after the path: this checkout's parser)

HEAVY = ("pandas", "scipy", "pyarrow", "numpy", "torch")
BASELINE = "import pytest"
#: what the installed ``gemmperf`` script runs, for an interpreter without one
SCRIPT = "import sys; from pytest_gemmperf.cli import main; sys.exit(main())"


@dataclass
class Command:
    """One measured command line and what its runs gave."""

    label: str
    argv: list[str]
    cwd: Path | None = None
    #: a pytest session (held to --session-limit), not a help command (held to --limit)
    session: bool = False
    times: list[float] = field(default_factory=list)
    heavy: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def help_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every (sub)command path of ``parser``: ``()``, ``("compare",)``, ``("baseline", "refresh")``..."""
    out = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += help_paths(sub, prefix + (name,))
    return out


def gemmperf_argv(exe: str | None) -> list[str]:
    """The command line that starts ``gemmperf``: ``--gemmperf``, else the script installed
    beside this interpreter, else this interpreter running what that script runs."""
    if exe:
        return [exe]
    script = Path(sys.executable).with_name("gemmperf")
    if script.is_file():
        return [sys.executable, str(script)]  # the script's own interpreter, without PATH lookups
    return [sys.executable, "-c", SCRIPT]


#: the session measured with and without the plugin: one test that uses no gemmperf fixture
TRIVIAL_TEST = "def test_trivial():\n    pass\n"


def commands(gemmperf: list[str], session_dir: Path) -> list[Command]:
    out = [Command(BASELINE, [sys.executable, "-c", BASELINE]),
           Command("gemmperf --version", [*gemmperf, "--version"])]
    for path in help_paths(build_parser()):
        out.append(Command(" ".join(("gemmperf", *path, "--help")), [*gemmperf, *path, "--help"]))
    (session_dir / "test_trivial.py").write_text(TRIVIAL_TEST, encoding="utf-8")
    pytest_argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_trivial.py"]
    out.append(Command("pytest, one trivial test", pytest_argv, cwd=session_dir, session=True))
    out.append(Command("pytest, one trivial test, -p no:gemmperf", [*pytest_argv, "-p", "no:gemmperf"],
                       cwd=session_dir, session=True))
    return out


def child_env(profile_imports: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    if profile_imports:
        env["PYTHONPROFILEIMPORTTIME"] = "1"
    return env


def time_once(cmd: Command, env: dict[str, str]) -> None:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd.argv, env=env, cwd=cmd.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        cmd.error = f"exit {proc.returncode}: {last}"
    cmd.times.append(elapsed)


def heavy_imports(cmd: Command) -> list[str]:
    """The heavy top-level packages ``cmd`` imported (from ``-X importtime``'s report on stderr)."""
    proc = subprocess.run(cmd.argv, env=child_env(profile_imports=True), cwd=cmd.cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    found = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            top = line.rsplit("|", 1)[1].strip().split(".")[0]
            if top in HEAVY:
                found.add(top)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", "-n", type=int, default=7, help="runs per command (default 7)")
    ap.add_argument("--limit", type=float, default=1.5,
                    help="largest allowed ratio to `import pytest` (default 1.5)")
    ap.add_argument("--session-limit", type=float, default=0.45,
                    help="largest allowed best time of the trivial pytest session, seconds (default 0.45)")
    ap.add_argument("--gemmperf", metavar="EXE", help="gemmperf executable (default: see above)")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")

    with tempfile.TemporaryDirectory(prefix="gemmperf-startup-") as tmp:
        cmds = commands(gemmperf_argv(args.gemmperf), Path(tmp))
        env = child_env()
        for _ in range(args.repeat):
            for cmd in cmds:
                time_once(cmd, env)
        for cmd in cmds[1:]:
            cmd.heavy = heavy_imports(cmd)

    base = cmds[0]
    print(f"# gemmperf start-up, {_dt.date.today().isoformat()}, Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, {args.repeat} runs each; limit {args.limit:g}x `{BASELINE}`")
    print(f"{'command':44s} {'best s':>7s} {'median s':>9s} {'best/best':>9s} {'med/med':>8s}  heavy imports")
    failed = []
    for cmd in cmds:
        r_best, r_med = cmd.best / base.best, cmd.median / base.median
        heavy = ", ".join(cmd.heavy) if cmd.heavy else "none"
        print(f"{cmd.label:44s} {cmd.best:7.3f} {cmd.median:9.3f} {r_best:9.2f} {r_med:8.2f}  "
              f"{'-' if cmd is base else heavy}" + (f"  ERROR {cmd.error}" if cmd.error else ""))
        if cmd is base:
            continue
        too_slow = cmd.best > args.session_limit if cmd.session else max(r_best, r_med) > args.limit
        if cmd.error or cmd.heavy or too_slow:
            failed.append(cmd.label)
    if base.error:
        failed.append(base.label)
    helps = [c for c in cmds[1:] if not c.session]
    worst = max(max(c.best / base.best, c.median / base.median) for c in helps)
    print(f"worst help ratio {worst:.2f} (limit {args.limit:g})")
    with_plugin, without = (c for c in cmds if c.session)
    print(f"the plugin's cost to a pytest session without gemmperf tests: "
          f"{with_plugin.best - without.best:+.3f} s best, {with_plugin.median - without.median:+.3f} s median "
          f"(session limit {args.session_limit:g} s)")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
