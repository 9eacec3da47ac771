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
   median/median), after one untimed round that writes the checkout's bytecode (an installed
   package has it: pip compiles it; ``PYTHONDONTWRITEBYTECODE`` is dropped for the commands);
2. runs each once more with ``PYTHONPROFILEIMPORTTIME=1`` and lists the heavy packages
   (pandas, scipy, pyarrow, numpy, torch) the command imported: there must be none.

The first real work a user runs is measured too: ``gemmperf analyze`` of a ~25 KB trace
(a PyTorch profiler trace written here in Kineto's format - CPU ops, runtime launches, kernels,
a memcpy - and a rocprofv3 7.x ``kernel_trace.csv``), with its reports (the default) and with
``--no-report``. For these the whole process's CPU time (user + sys of the child, from
``getrusage(RUSAGE_CHILDREN)``) is what counts: best of ``--repeat``, held to
``--analyze-limit`` CPU-seconds (default 0.5) for the default command on the Kineto trace; their
heavy-import check is scipy and torch only (the analysis needs pandas, numpy and pyarrow; the
statistics of the gate do not run). Beside them, in the same rounds, an oracle per trace and
mode: a process that only imports what any analysis on this project's stack must (pandas,
which loads numpy and pyarrow; with reports also XlsxWriter and Jinja2, the reports' writers),
with the cyclic collector paused and one OpenBLAS thread while it imports and what it holds
spared the collector's shutdown passes, as ``gemmperf`` does, parses the file
(``json.load``; ``pyarrow.csv.read_csv``) and writes the command's output files (copied from
this checkout's own, made once before the timed rounds): the least any such method pays. The
script prints each analysis's CPU time over its oracle's (target: at most 1 / 0.9 of it).
``--before CHECKOUT`` runs each analysis on another checkout's code too, in the same rounds: a
change's before and after under the same load. ``--hta PYTHON`` (an interpreter with
HolisticTraceAnalysis installed, e.g. a venv of its own: ``python -m venv V && V/bin/pip install
HolisticTraceAnalysis``) times HTA's per-kernel breakdown of the same Kineto trace in the same
rounds: what the field's pandas-based tool costs on this machine, a reference.

Exits 1 when a ratio, the session's time or an analysis's CPU time exceeds its limit, a
command imported a heavy package or failed.
The commands run this checkout's code (``PYTHONPATH`` is set to it) through the ``gemmperf``
script installed beside this interpreter, or, without one, the same two lines the script runs.

``--instructions`` also counts each analysis's instructions once under valgrind (cachegrind), all
threads and child processes included, with Python's hash seed fixed (``PYTHONHASHSEED=0``: a
set's or dict's order, and so some code paths, follow the seed): the same to about 0.1 % from
run to run, so a change's effect smaller than the CPU time's noise still shows, against
``--before``'s code.

Usage: python benchmarks/startup.py [--repeat N] [--limit 1.5] [--session-limit 0.45] [--analyze-limit 0.5]
                                   [--only analyze] [--before CHECKOUT] [--gemmperf EXE] [--hta PYTHON]
                                   [--instructions]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import resource
import shutil
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
#: what ``gemmperf analyze`` of a small trace must not import: no gate statistics run
ANALYZE_HEAVY = ("scipy", "torch")
#: the size of the traces analysed, bytes
TRACE_BYTES = 25_000
BASELINE = "import pytest"
#: the small rocprofv3 trace's file name
CSV_NAME = "5358_kernel_trace.csv"
#: label of the oracle rows: a process that imports what any analysis built on this project's
#: stack must (pandas, which loads numpy and pyarrow; with reports also the writers the reports
#: are made with, XlsxWriter and Jinja2), with the cyclic collector paused while it imports and
#: at shutdown as ours is, parses the file and writes the command's output files (copies of this checkout's
#: own, made once before the timed rounds): a floor for any method, not a method itself
ORACLE = "oracle: imports + parse + write"
#: each analysis against its oracle (the same input, with or without reports): at most 1 / 0.9
ORACLE_TARGET = 1 / 0.9
#: HTA's per-kernel breakdown of the traces in argv[1] (no files written, no plots)
HTA_CODE = ("import sys; from hta.trace_analysis import TraceAnalysis; "
            "TraceAnalysis(trace_dir=sys.argv[1]).get_gpu_kernel_breakdown(visualize=False)")
#: what the installed ``gemmperf`` script runs, for an interpreter without one
SCRIPT = "import sys; from pytest_gemmperf.cli import console_main; sys.exit(console_main())"
#: what ``--before``'s checkout runs: its own program entry (older code has ``main`` alone)
BEFORE_SCRIPT = ("import sys; from pytest_gemmperf import cli; "
                 "sys.exit(getattr(cli, 'console_main', cli.main)())")


@dataclass
class Command:
    """One measured command line and what its runs gave."""

    label: str
    argv: list[str]
    cwd: Path | None = None
    #: a pytest session (held to --session-limit), not a help command (held to --limit)
    session: bool = False
    #: an analysis of a small trace: its CPU time counts (held to --analyze-limit when ``held``)
    analysis: bool = False
    held: bool = False
    forbidden: tuple[str, ...] = HEAVY
    #: another checkout whose code the command runs instead of this one's (``--before``)
    code: Path | None = None
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    heavy: list[str] = field(default_factory=list)
    error: str | None = None
    #: instructions of one run under valgrind (``--instructions``), None when not counted
    instructions: int | None = None

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best_cpu(self) -> float:
        return min(self.cpu)


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


#: Kineto's kernel names of the small trace (GEMM, elementwise, collective)
_KERNELS = ("Cijk_Ailk_Bljk_BBS_BH_MT256x256x64_MI16x16x1_SN_1LDSB1",
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
            "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
            "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)")


def kineto_trace(path: Path, size: int = TRACE_BYTES) -> int:
    """A PyTorch profiler (Kineto) trace of about ``size`` bytes: per step a CPU op, its runtime
    launch and the kernel (linked by correlation id), one memcpy; returns its size."""
    events: list[dict] = []
    ts, i = 1_000.0, 0
    while True:
        k = _KERNELS[i % len(_KERNELS)]
        dur = round(12.5 + 3.25 * (i % 7), 3)
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242,
                       "ts": ts, "dur": 9.0, "args": {"External id": i + 1}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 4242, "tid": 4242,
                       "ts": ts + 1.0, "dur": 4.0, "args": {"correlation": i + 1, "External id": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": k, "pid": 2, "tid": 7, "ts": ts + 6.0, "dur": dur,
                       "args": {"device": 2, "stream": 7, "correlation": i + 1, "External id": i + 1,
                                "grid": [256, 1, 1], "block": [256, 1, 1]}})
        if i % 10 == 0:
            events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Host -> Device)", "pid": 2,
                           "tid": 0, "ts": ts + 7.0 + dur, "dur": 3.0,
                           "args": {"device": 2, "stream": 0, "correlation": 100_000 + i, "bytes": 4096}})
        ts += 10.0 + dur
        i += 1
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
               "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": events}
        text = json.dumps(doc)
        if len(text) >= size:
            path.write_text(text, encoding="utf-8")
            return len(text)


def rocprof_csv_trace(directory: Path, size: int = TRACE_BYTES) -> int:
    """A rocprofv3 7.x ``<pid>_kernel_trace.csv`` of about ``size`` bytes in ``directory``;
    returns its size."""
    header = ("Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
              "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size",
              "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X",
              "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")
    lines = [",".join(f'"{c}"' for c in header)]
    t, i = 1_550_151_853_343_277, 0
    while sum(len(x) + 1 for x in lines) < size:
        k = i % len(_KERNELS)
        dur = 12_500 + 3_250 * (i % 7)
        lines.append(f'"KERNEL_DISPATCH","Agent 3",1,1,834304,{i + 1},{k + 10},"{_KERNELS[k]}",{i + 1},'
                     f'{t},{t + dur},0,0,8,0,16,256,1,1,1048576,1,1')
        t += dur + 1_000
        i += 1
    text = "\n".join(lines) + "\n"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CSV_NAME).write_text(text, encoding="utf-8")
    return len(text)


def analyze_commands(gemmperf: list[str], work: Path, before: Path | None = None,
                     hta: str | None = None) -> list[Command]:
    """``gemmperf analyze`` of the small traces, with reports and ``--no-report``; with
    ``before``, each also run on that checkout's code, in the same rounds; with ``hta`` (an
    interpreter with HolisticTraceAnalysis installed), HTA's kernel breakdown of the Kineto trace
    too."""
    kineto = work / "rank0.pt.trace.json"
    csv_dir = work / "rocprofv3" / "mi350-n1"
    kb = kineto_trace(kineto) / 1000, rocprof_csv_trace(csv_dir) / 1000
    # the yardstick: what any pandas-based analysis pays before reading a byte
    out = [Command("python -c 'import pandas' (yardstick)", [sys.executable, "-c", "import pandas"],
                   analysis=True, forbidden=())]
    parse = {"Kineto": f"import json; json.load(open({str(kineto)!r}, 'rb'))",
             "rocprofv3 CSV": f"import pyarrow.csv; pyarrow.csv.read_csv({str(csv_dir / CSV_NAME)!r})"}
    for label, path in (("Kineto", kineto), ("rocprofv3 CSV", csv_dir)):
        for report in (True, False):
            ref = work / f"ref-{label.split()[0]}-{'report' if report else 'plain'}"
            subprocess.run([*gemmperf, "analyze", str(path), "--out", str(ref), *([] if report else ["--no-report"])],
                           cwd=work, check=True, capture_output=True)
            out.append(Command(f"{ORACLE} {label}" + ("" if report else " --no-report"),
                               [sys.executable, "-c", oracle_code(parse[label], ref, work / "out-oracle", report)],
                               analysis=True, forbidden=()))
    if hta is not None:  # the field's pandas-based tool on the same trace: a reference, not a target
        (work / "hta").mkdir()
        (work / "hta" / kineto.name).write_bytes(kineto.read_bytes())
        out.append(Command("HTA get_gpu_kernel_breakdown, Kineto (reference)", [hta, "-c", HTA_CODE, str(work / "hta")],
                           analysis=True, forbidden=()))
    for label, path, size in (("Kineto", kineto, kb[0]), ("rocprofv3 CSV", csv_dir, kb[1])):
        for report in (True, False):
            flags = [] if report else ["--no-report"]
            argv = [*gemmperf, "analyze", str(path), "--out", str(work / "out"), *flags]
            name = f"gemmperf analyze {size:.0f} KB {label}" + ("" if report else " --no-report")
            out.append(Command(name, argv, cwd=work, analysis=True, held=report and label == "Kineto",
                               forbidden=ANALYZE_HEAVY))
            if before is not None:
                before_argv = [sys.executable, "-c", BEFORE_SCRIPT, *argv[len(gemmperf):]]
                out.append(Command(f"  before: {name}", before_argv, cwd=work, analysis=True,
                                   forbidden=ANALYZE_HEAVY, code=before))
    return out


def oracle_code(parse: str, ref: Path, out: Path, report: bool) -> str:
    """The oracle's program: the stack's imports (collector paused, one OpenBLAS thread, as
    ``gemmperf`` imports them), ``parse``, then every file of ``ref`` written under ``out``; what
    it holds is spared the collector's shutdown passes, as ``gemmperf``'s is."""
    writers = ", xlsxwriter, jinja2" if report else ""
    return ("import os; os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')\n"
            f"import gc; gc.disable(); import pandas, pyarrow{writers}; gc.enable()\n{parse}\n"
            f"import pathlib; out = pathlib.Path({str(out)!r}); out.mkdir(exist_ok=True)\n"
            f"for f in pathlib.Path({str(ref)!r}).iterdir(): (out / f.name).write_bytes(f.read_bytes())\n"
            "gc.freeze()\n")


def commands(gemmperf: list[str], session_dir: Path, only: str | None = None,
             before: Path | None = None, hta: str | None = None) -> list[Command]:
    out = [Command(BASELINE, [sys.executable, "-c", BASELINE])]
    out += analyze_commands(gemmperf, session_dir, before, hta)
    if only == "analyze":
        return out
    out.append(Command("gemmperf --version", [*gemmperf, "--version"]))
    for path in help_paths(build_parser()):
        out.append(Command(" ".join(("gemmperf", *path, "--help")), [*gemmperf, *path, "--help"]))
    (session_dir / "test_trivial.py").write_text(TRIVIAL_TEST, encoding="utf-8")
    pytest_argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_trivial.py"]
    out.append(Command("pytest, one trivial test", pytest_argv, cwd=session_dir, session=True))
    out.append(Command("pytest, one trivial test, -p no:gemmperf", [*pytest_argv, "-p", "no:gemmperf"],
                       cwd=session_dir, session=True))
    return out


def child_env(profile_imports: bool = False, code: Path | None = None) -> dict[str, str]:
    """This checkout's code (or ``code``'s), its bytecode cached as an installed package's is
    (pip compiles it at install): ``PYTHONDONTWRITEBYTECODE`` dropped, so the untimed warm-up
    round writes it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(code or REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if profile_imports:
        env["PYTHONPROFILEIMPORTTIME"] = "1"
    return env


def _children_cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def time_once(cmd: Command, env: dict[str, str]) -> None:
    """Wall time and the child's CPU time (user + sys: the difference in this process's
    waited-for children's usage, one child at a time)."""
    if cmd.code is not None:
        env = child_env(code=cmd.code)
    cpu0 = _children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd.argv, env=env, cwd=cmd.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    elapsed = time.perf_counter() - t0
    cmd.cpu.append(_children_cpu_s() - cpu0)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        cmd.error = f"exit {proc.returncode}: {last}"
    cmd.times.append(elapsed)


def heavy_imports(cmd: Command) -> list[str]:
    """The heavy top-level packages ``cmd`` imported (from ``-X importtime``'s report on stderr)."""
    proc = subprocess.run(cmd.argv, env=child_env(profile_imports=True, code=cmd.code), cwd=cmd.cwd,
                          stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    found = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            top = line.rsplit("|", 1)[1].strip().split(".")[0]
            if top in cmd.forbidden:
                found.add(top)
    return sorted(found)


def count_instructions(cmd: Command, env: dict[str, str]) -> int | None:
    """The instructions one run of ``cmd`` executes, all its threads and children included
    (``valgrind --tool=cachegrind --cache-sim=no``'s "I refs"), the hash seed fixed: the same to
    about 0.1 % run after run, where one process's CPU time moves by 15 % on a shared virtual
    machine; None when the run failed."""
    if cmd.code is not None:
        env = child_env(code=cmd.code)
    env = {**env, "PYTHONHASHSEED": "0"}
    argv = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--trace-children=yes",
            "--cachegrind-out-file=/dev/null", *cmd.argv]
    proc = subprocess.run(argv, env=env, cwd=cmd.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    refs = [int(line.rsplit(":", 1)[1].replace(",", "")) for line in proc.stderr.splitlines()
            if line.split("==")[-1].strip().startswith("I") and "refs:" in line]
    return sum(refs) if proc.returncode == 0 and refs else None


def _load() -> str:
    """The 1-, 5- and 15-minute load averages (a shared machine's timings depend on them)."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", "-n", type=int, default=7, help="runs per command (default 7)")
    ap.add_argument("--limit", type=float, default=1.5,
                    help="largest allowed ratio to `import pytest` (default 1.5)")
    ap.add_argument("--session-limit", type=float, default=0.45,
                    help="largest allowed best time of the trivial pytest session, seconds (default 0.45)")
    ap.add_argument("--analyze-limit", type=float, default=0.5,
                    help="largest allowed best CPU time of `gemmperf analyze` of the small Kineto trace, "
                         "CPU-seconds (default 0.5)")
    ap.add_argument("--only", choices=["analyze"], help="measure `import pytest` and the analyses only")
    ap.add_argument("--before", type=Path, metavar="CHECKOUT",
                    help="also run each analysis on another checkout's code (e.g. a worktree of main), "
                         "interleaved with this one's in the same rounds")
    ap.add_argument("--gemmperf", metavar="EXE", help="gemmperf executable (default: see above)")
    ap.add_argument("--hta", metavar="PYTHON",
                    help="an interpreter with HolisticTraceAnalysis installed: also time its kernel breakdown "
                         "of the small Kineto trace, as a reference (e.g. a venv of its own)")
    ap.add_argument("--instructions", action="store_true",
                    help="also count each analysis's instructions once under valgrind (cachegrind, "
                         "hash seed fixed): a steady comparison of this checkout with --before's")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    if args.instructions and shutil.which("valgrind") is None:
        ap.error("--instructions needs valgrind on PATH")

    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="gemmperf-startup-") as tmp:
        cmds = commands(gemmperf_argv(args.gemmperf), Path(tmp), args.only, args.before, args.hta)
        env = child_env()
        for cmd in cmds:  # untimed: writes the bytecode a fresh checkout has none of
            time_once(cmd, env)
            cmd.times.clear()
            cmd.cpu.clear()
        for _ in range(args.repeat):
            for cmd in cmds:
                time_once(cmd, env)
        for cmd in cmds[1:]:
            cmd.heavy = heavy_imports(cmd)
        if args.instructions:
            for cmd in cmds:
                if cmd.analysis:
                    cmd.instructions = count_instructions(cmd, env)

    base = cmds[0]
    print(f"# gemmperf start-up, {_dt.date.today().isoformat()}, Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, {args.repeat} runs each; limit {args.limit:g}x `{BASELINE}`")
    print(f"# load average before: {load_before}, after: {_load()}")
    print(f"{'command':44s} {'best s':>7s} {'median s':>9s} {'best/best':>9s} {'med/med':>8s}  heavy imports")
    failed = []
    analyses = [c for c in cmds if c.analysis]
    for cmd in cmds:
        if cmd.analysis:
            continue
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
    print(f"\n{'whole process, user + sys':56s} {'best CPU s':>10s} {'median CPU s':>12s} {'best wall s':>11s}  "
          f"scipy/torch imported")
    for cmd in analyses:
        heavy = ", ".join(cmd.heavy) if cmd.heavy else "none"
        limit = f"  (limit {args.analyze_limit:g})" if cmd.held else ""
        print(f"{cmd.label:56s} {cmd.best_cpu:10.3f} {statistics.median(cmd.cpu):12.3f} {cmd.best:11.3f}  "
              f"{heavy}{limit}" + (f"  ERROR {cmd.error}" if cmd.error else ""))
        if cmd.code is None and (cmd.error or cmd.heavy or (cmd.held and cmd.best_cpu > args.analyze_limit)):
            failed.append(cmd.label)  # the other checkout's rows are for comparison only
    for cmd in analyses:
        if cmd.code is not None or not cmd.label.startswith("gemmperf analyze"):
            continue
        label = "Kineto" if "Kineto" in cmd.label else "rocprofv3 CSV"
        flags = " --no-report" if "--no-report" in cmd.label else ""
        oracle = next((c for c in analyses if c.label == f"{ORACLE} {label}{flags}"), None)
        if oracle is None:
            continue
        ratio = cmd.best_cpu / oracle.best_cpu
        print(f"{cmd.label} / oracle: {ratio:.2f}x best CPU, +{cmd.best_cpu - oracle.best_cpu:.3f} CPU-s "
              f"(target <= {ORACLE_TARGET:.2f}: {'met' if ratio <= ORACLE_TARGET else 'not met'})")
    counted = [c for c in analyses if c.instructions is not None]
    if counted:
        print(f"\n{'instructions of one run (valgrind cachegrind)':56s} {'G':>10s}  vs before")
        for cmd in counted:
            twin = next((c for c in counted if c.label == f"  before: {cmd.label}"), None)
            versus = f"  {cmd.instructions / twin.instructions - 1:+.1%}" if twin is not None else ""
            print(f"{cmd.label:56s} {cmd.instructions / 1e9:10.3f}{versus}")
    helps = [c for c in cmds[1:] if not c.session and not c.analysis]
    if helps:
        worst = max(max(c.best / base.best, c.median / base.median) for c in helps)
        print(f"worst help ratio {worst:.2f} (limit {args.limit:g})")
    sessions = [c for c in cmds if c.session]
    if sessions:
        with_plugin, without = sessions
        print(f"the plugin's cost to a pytest session without gemmperf tests: "
              f"{with_plugin.best - without.best:+.3f} s best, {with_plugin.median - without.median:+.3f} s median "
              f"(session limit {args.session_limit:g} s)")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
