"""``gemmperf --help`` starts fast: no command's help imports pandas, scipy, pyarrow, numpy,
torch or pytest. Neither does loading the pytest plugin, which every pytest process of an
environment with gemmperf installed does, nor a session that runs no gemmperf test.

Every (sub)command's ``--help``, and ``--version``, runs in a fresh process, which reports the
heavy packages then in ``sys.modules``: one fresh interpreter imports the package and the CLI
module (what every command's start-up imports first) and forks a child per call, so each call
starts from that state alone, as in an interpreter of its own. The paths come from walking the
parser, so a new subcommand is checked without editing this file. Timing is left to
``benchmarks/startup.py``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pytest_gemmperf.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
#: what help must not load: the data stack and torch take seconds to import; pytest is the
#: benchmark's yardstick, and a parser that needs it would start no faster than pytest itself
PACKAGE_COMMANDS = Path("pytest_gemmperf") / "commands"
HEAVY = ("pandas", "scipy", "pyarrow", "numpy", "torch", "pytest")

#: run in a fresh interpreter: argv[1] the heavy names, argv[2] a JSON list of gemmperf argument
#: lists; prints a JSON object: "null" -> the heavy packages (or modules) loaded after importing the package
#: and the CLI module only, each argument list (as JSON) -> those loaded after ``gemmperf ARGV``
#: in a child forked from that state (or {"error": traceback})
CHILD = r"""
import contextlib, io, json, os, sys, traceback
heavy = set(sys.argv[1].split(","))
import pytest_gemmperf, pytest_gemmperf.cli
from pytest_gemmperf.cli import main

def loaded():  # a name counts when it, or a module below it, was imported
    return sorted(h for h in heavy if h in sys.modules or any(m.startswith(h + ".") for m in sys.modules))

out = {"null": loaded()}
for argv in json.loads(sys.argv[2]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
                    main(argv)
                result = loaded()
            except BaseException:
                result = {"error": traceback.format_exc()}
            with os.fdopen(w, "w") as fh:
                fh.write(json.dumps(result))
        finally:
            os._exit(0)  # never back into the parent's loop
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    out[json.dumps(argv)] = json.loads(data)
print(json.dumps(out))
"""


def _help_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _help_paths(sub, prefix + (name,))
    return out


CALLS = [["--version"]] + [[*path, "--help"] for path in _help_paths(build_parser())]


@functools.cache
def _heavy_after_all() -> dict[str, object]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", CHILD, ",".join(HEAVY), json.dumps(CALLS)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def heavy_after(argv: list[str] | None) -> list[str]:
    """The heavy packages a fresh process running this checkout's code has loaded after
    ``gemmperf ARGV`` (``None``: after importing the package and the CLI module only); one
    interpreter answers for every call in ``CALLS``."""
    found = _heavy_after_all()[json.dumps(argv)]
    assert not isinstance(found, dict), found.get("error") if isinstance(found, dict) else found
    return found


def test_every_subcommand_is_checked():
    names = {path[0] for path in _help_paths(build_parser()) if path}
    assert {"analyze", "compare", "baseline", "rocprof-config", "merge", "history"} <= names
    assert ["baseline", "refresh", "--help"] in CALLS and ["history", "check", "--help"] in CALLS


def test_the_package_and_cli_module_import_nothing_heavy():
    assert heavy_after(None) == []


@pytest.mark.parametrize("argv", CALLS, ids=" ".join)
def test_help_imports_nothing_heavy(argv):
    assert heavy_after(argv) == [], f"gemmperf {' '.join(argv)}"


def test_help_fdr_default_is_the_gates():
    """``compare --help`` states the gate's FDR without loading the gate (scipy): the two agree."""
    from pytest_gemmperf.commands.compare import DEFAULT_FDR
    from pytest_gemmperf.gate.compare import GateConfig

    assert DEFAULT_FDR == GateConfig().fdr


# --- gemmperf analyze: the first real work runs no gate statistics ------------------------------

#: what an analysis of traces must not load: the gate's statistics (scipy) and torch
ANALYZE_HEAVY = ("scipy", "torch")


def test_analyze_of_a_small_trace_imports_no_scipy(tmp_path):
    """``gemmperf analyze`` (with its reports, and ``--no-report``) of a Kineto trace and of a
    rocprofv3 CSV directory computes no gate statistics, so it loads neither scipy nor torch:
    scipy alone is a third of a small analysis's CPU time (docs/performance.md)."""
    fixtures = ROOT / "tests" / "fixtures"
    calls = []
    for i, path in enumerate((fixtures / "torch" / "rocm_sdk_rank3.pt.trace.json",
                              fixtures / "rocprof_csv" / "v7" / "mi350-n1")):
        calls.append(["analyze", str(path), "--out", str(tmp_path / f"report{i}")])
        calls.append(["analyze", str(path), "--out", str(tmp_path / f"plain{i}"), "--no-report"])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", CHILD, ",".join(ANALYZE_HEAVY), json.dumps(calls)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for argv in calls:
        assert found[json.dumps(argv)] == [], argv
    assert (tmp_path / "report0" / "report.html").is_file() and (tmp_path / "plain1" / "kernels.csv").is_file()


#: what an analysis of traces (no --categories file, no results directory) has no use for: a
#: YAML parser (category rules) and the results writers' file lock
ANALYZE_UNNEEDED = ("yaml", "filelock")


def test_analyze_imports_only_what_its_input_needs(tmp_path):
    """``gemmperf analyze`` of a Kineto trace and of a rocprofv3 CSV directory, with and without
    reports, starts without the modules only other inputs need; a --categories file loads the
    YAML parser it needs."""
    fixtures = ROOT / "tests" / "fixtures"
    rules = tmp_path / "rules.yaml"
    rules.write_text("gemm: ['^Cijk_']\n", encoding="utf-8")
    calls = []
    for i, path in enumerate((fixtures / "torch" / "rocm_sdk_rank3.pt.trace.json",
                              fixtures / "rocprof_csv" / "v7" / "mi350-n1")):
        calls.append(["analyze", str(path), "--out", str(tmp_path / f"report{i}")])
        calls.append(["analyze", str(path), "--out", str(tmp_path / f"plain{i}"), "--no-report"])
    with_rules = ["analyze", calls[0][1], "--out", str(tmp_path / "rules"), "--no-report", "--categories", str(rules)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", CHILD, ",".join(ANALYZE_UNNEEDED), json.dumps(calls + [with_rules])],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for argv in calls:
        assert found[json.dumps(argv)] == [], argv
    assert found[json.dumps(with_rules)] == ["yaml"]


#: the modules only one family of inputs needs: the JSON readers (msgspec and the Kineto and
#: rocprofv3 JSON modules), the CSV readers (pyarrow's CSV parser) and the rocpd reader (SQLite)
JSON_READERS = ("msgspec", "pytest_gemmperf.traces.jsonstream", "pytest_gemmperf.traces.jsonnum",
                "pytest_gemmperf.traces.torch_trace", "pytest_gemmperf.traces.torch_decode",
                "pytest_gemmperf.traces.torch_frames", "pytest_gemmperf.traces.torch_slim",
                "pytest_gemmperf.traces.rocprof_json", "pytest_gemmperf.traces.rocprof_json_schema")
CSV_READERS = ("pyarrow.csv", "pytest_gemmperf.traces.rocprof_csv", "pytest_gemmperf.traces.csv_parse",
               "pytest_gemmperf.traces.csv_slim")
ROCPD_READERS = ("sqlite3", "pytest_gemmperf.traces.rocpd", "pytest_gemmperf.traces.rocpd_slim")


def test_analyze_loads_the_readers_of_its_input_only(tmp_path):
    """``gemmperf analyze`` of a rocprofv3 CSV directory or a rocpd database (with reports and
    without) loads no JSON decoder and no Kineto or rocprofv3 JSON reader, and one of a Kineto
    trace loads no CSV or rocpd reader: the readers share their helpers through neutral
    modules (``traces/slim_arrays.py``), so an input pays for its own reader's imports only."""
    from test_rocpd import T0, UUID_A, _db  # the documented rocpd schema builder

    fixtures = ROOT / "tests" / "fixtures"
    db = _db(tmp_path, [(UUID_A, 1234, 3, T0, {})])
    inputs = {"csv": fixtures / "rocprof_csv" / "v7" / "mi350-n1", "rocpd": db,
              "kineto": fixtures / "torch" / "rocm_sdk_rank3.pt.trace.json"}
    unneeded = {"csv": JSON_READERS + ROCPD_READERS, "rocpd": JSON_READERS + CSV_READERS,
                "kineto": CSV_READERS + ROCPD_READERS}
    calls = {}
    for name, path in inputs.items():
        calls[name] = [["analyze", str(path), "--out", str(tmp_path / f"{name}-report")],
                       ["analyze", str(path), "--out", str(tmp_path / f"{name}-plain"), "--no-report"]]
    names = sorted({m for u in unneeded.values() for m in u})
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", CHILD, ",".join(names),
                           json.dumps([argv for c in calls.values() for argv in c])],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, argvs in calls.items():
        for argv in argvs:
            loaded = found[json.dumps(argv)]
            assert isinstance(loaded, list), loaded  # else the command failed: its traceback
            assert set(loaded).isdisjoint(unneeded[name]), (argv, loaded)
    for name in inputs:
        assert (tmp_path / f"{name}-plain" / "kernels.csv").is_file(), name


#: what the reports of an analysis have no use for: the gate's samples builders and settings
#: (only the before/after panels of a comparison read them) and the telemetry sampler (only a
#: pytest results directory that sampled has telemetry to show)
REPORT_UNNEEDED = ("pytest_gemmperf.gate.samples", "pytest_gemmperf.gate.gate_config",
                   "pytest_gemmperf.gate.stats", "pytest_gemmperf.run.telemetry",
                   "pytest_gemmperf.run.telemetry_sources", "pytest_gemmperf.run.procstat")


def test_analyze_reports_load_no_comparison_or_sampler_modules(tmp_path):
    """The default ``gemmperf analyze`` (every report written) of a Kineto trace and of a
    rocprofv3 CSV directory loads none of the modules only a comparison's or a sampled run's
    report reads."""
    fixtures = ROOT / "tests" / "fixtures"
    calls = [["analyze", str(path), "--out", str(tmp_path / f"report{i}")]
             for i, path in enumerate((fixtures / "torch" / "rocm_sdk_rank3.pt.trace.json",
                                       fixtures / "rocprof_csv" / "v7" / "mi350-n1"))]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", CHILD, ",".join(REPORT_UNNEEDED), json.dumps(calls)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for i, argv in enumerate(calls):
        assert found[json.dumps(argv)] == [], argv
        assert (tmp_path / f"report{i}" / "report.xlsx").is_file()


# --- the pytest plugin: every pytest process where gemmperf is installed loads it -----------------

#: what the plugin must not load before a session needs it (pytest it runs inside of)
PLUGIN_HEAVY = tuple(name for name in HEAVY if name != "pytest")

#: run in a fresh interpreter: argv[1] the heavy names; argv[2:] empty: import the plugin module
#: only, else pytest's arguments for ``pytest.main``; prints the heavy packages then loaded and
#: whether the plugin was
PROBE = r"""
import json, sys
heavy = set(sys.argv[1].split(","))
if len(sys.argv) == 2:
    import pytest_gemmperf.plugin
else:
    import pytest
    pytest.main(sys.argv[2:])
print(json.dumps({"heavy": sorted({m.split(".")[0] for m in sys.modules} & heavy),
                  "plugin": "pytest_gemmperf.plugin" in sys.modules}))
"""


def _probe(*pytest_args: str, cwd: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", PROBE, ",".join(PLUGIN_HEAVY), *pytest_args], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_plugin_module_imports_nothing_heavy():
    found = _probe()
    assert found["plugin"] and found["heavy"] == []


def test_a_session_without_gemmperf_tests_imports_nothing_heavy(tmp_path):
    """A session of ordinary tests loads no more of the data stack with the plugin than
    without it (another installed plugin may load some: that is not the plugin's cost)."""
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    installed = any(ep.value == "pytest_gemmperf.plugin"
                    for ep in importlib.metadata.entry_points(group="pytest11"))
    args = ("-q", "-p", "no:cacheprovider", "test_a.py")
    with_plugin = _probe(*args, *(() if installed else ("-p", "pytest_gemmperf.plugin")), cwd=tmp_path)
    without = _probe(*args, *(("-p", "no:gemmperf") if installed else ()), cwd=tmp_path)
    assert with_plugin["plugin"] and not without["plugin"]
    assert set(with_plugin["heavy"]) <= set(without["heavy"]), with_plugin["heavy"]


# --- a command's work is imported with the cyclic collector paused ---------------------------------

#: run in a fresh interpreter: argv[1] the command parser modules; for each, a child forked from
#: the state after importing them all (and the data stack, for speed) imports that command's work (``_impl()``) and reports the
#: collections the cyclic collector started meanwhile and whether it is on afterwards
PAUSED = r"""
import gc, importlib, json, os, sys, traceback
names = sys.argv[1].split(",")
import numpy, pandas, pyarrow  # every command's work needs them: imported once, before the forks
parsers = {name: importlib.import_module(f"pytest_gemmperf.commands.{name}") for name in names}
out = {}
for name in names:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            started = []
            gc.callbacks.append(lambda phase, info: phase == "start" and started.append(info["generation"]))
            try:
                parsers[name]._impl()
                result = {"collections": len(started), "enabled": gc.isenabled()}
            except BaseException:
                result = {"error": traceback.format_exc()}
            with os.fdopen(w, "w") as fh:
                fh.write(json.dumps(result))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        out[name] = json.loads(fh.read())
    os.waitpid(pid, 0)
print(json.dumps(out))
"""


def test_every_commands_work_is_imported_with_the_collector_paused():
    """Importing a command's work (pandas, pyarrow and the readers: tens of thousands of
    long-lived objects) starts no cyclic collection, whose passes would walk them again and
    again for nothing; the collector is on again afterwards."""
    names = sorted(path.stem for path in (ROOT / PACKAGE_COMMANDS).glob("*.py")
                   if (path.parent / f"{path.stem}_impl.py").is_file())
    assert {"analyze", "compare", "baseline"} <= set(names)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", PAUSED, ",".join(names)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in names:
        # none while importing; at most the one the first allocation after the pause starts
        # (the code before: over a hundred, one of them a full pass)
        assert found[name].get("enabled") is True and found[name]["collections"] <= 1, (name, found[name])


#: run in a fresh interpreter: argv[1] a trace, argv[2] an output directory; prints the threads
#: this process holds after ``gemmperf analyze --no-report`` and OPENBLAS_NUM_THREADS then
ONE_BLAS_THREAD_CHILD = r"""
import contextlib, io, json, os, sys
from pytest_gemmperf.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(["analyze", sys.argv[1], "--out", sys.argv[2], "--no-report"])
print(json.dumps([rc, len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS")]))
"""

#: the same process's threads where numpy's BLAS was told to start one thread
REFERENCE_CHILD = r"""
import json, os
os.environ["OPENBLAS_NUM_THREADS"] = "1"
import pandas
print(json.dumps(len(os.listdir("/proc/self/task"))))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir() or (os.cpu_count() or 1) < 2,
                    reason="counts threads in /proc on a machine with two cores or more")
def test_a_command_starts_no_blas_thread_pool_and_leaves_the_environment_as_it_was(tmp_path):
    """``gemmperf`` imports numpy with one OpenBLAS thread (none of its own pool: a command makes
    no BLAS call that would use one), so it holds no more threads than a process that set
    ``OPENBLAS_NUM_THREADS=1`` itself; and it takes the variable back, so that an in-process
    caller's later children get the user's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                                             "OMP_NUM_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    trace = ROOT / "tests" / "fixtures" / "torch" / "rocm_sdk_rank3.pt.trace.json"
    proc = subprocess.run([sys.executable, "-c", ONE_BLAS_THREAD_CHILD, str(trace), str(tmp_path / "out")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rc, threads, variable = json.loads(proc.stdout.strip().splitlines()[-1])
    ref = subprocess.run([sys.executable, "-c", REFERENCE_CHILD], env=env, capture_output=True, text=True,
                         timeout=300)
    assert ref.returncode == 0, ref.stderr
    assert rc == 0 and variable is None
    assert threads <= json.loads(ref.stdout.strip().splitlines()[-1])


def test_a_thread_count_the_user_chose_is_kept(monkeypatch):
    """Any of OpenBLAS's variables set by the user is left as it is."""
    from pytest_gemmperf.blas_threads import one_blas_thread

    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    with one_blas_thread():
        assert "OPENBLAS_NUM_THREADS" not in os.environ
    assert os.environ["OMP_NUM_THREADS"] == "4"


#: run in a fresh interpreter as the ``gemmperf`` program runs: argv[1] the entry (``console_main``
#: or ``main``), argv[2] a trace, argv[3] an output directory; prints the exit status, the objects
#: the collector's shutdown passes would walk, those frozen out of them, and whether it is on
EXIT_CHILD = r"""
import contextlib, gc, io, json, sys
from pytest_gemmperf import cli
entry = getattr(cli, sys.argv[1])
sys.argv = ["gemmperf", "analyze", sys.argv[2], "--out", sys.argv[3], "--no-report"]
with contextlib.redirect_stdout(io.StringIO()):
    rc = entry()
print(json.dumps([rc, len(gc.get_objects()), gc.get_freeze_count(), gc.isenabled()]))
"""


def _run_as_program(tmp_path: Path, entry: str) -> list:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    trace = ROOT / "tests" / "fixtures" / "torch" / "rocm_sdk_rank3.pt.trace.json"
    proc = subprocess.run([sys.executable, "-c", EXIT_CHILD, entry, str(trace), str(tmp_path / entry)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_program_leaves_what_it_imported_out_of_the_shutdown_collections(tmp_path):
    """``gemmperf`` run as a program ends without the cyclic collector walking the objects pandas,
    pyarrow and numpy made (interpreter shutdown's full passes cost more CPU than a small
    analysis's own work): after ``console_main`` almost everything alive is frozen, and the
    result is ``main``'s. ``main``, which in-process callers (a pytest session) use, leaves
    nothing frozen: what they make later stays collectable."""
    rc, tracked, frozen, enabled = _run_as_program(tmp_path, "console_main")
    assert rc == 0 and enabled
    assert frozen > 50_000 and tracked < frozen / 20, (tracked, frozen)
    rc, tracked, frozen, enabled = _run_as_program(tmp_path, "main")
    assert rc == 0 and enabled and frozen == 0 and tracked > 50_000, (tracked, frozen)
    assert (tmp_path / "console_main" / "kernels.csv").read_bytes() == (tmp_path / "main" / "kernels.csv").read_bytes()


def test_the_installed_program_is_console_main():
    """The ``gemmperf`` script pip installs calls ``console_main`` (``main`` is the in-process API)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["gemmperf"] == "pytest_gemmperf.cli:console_main"
