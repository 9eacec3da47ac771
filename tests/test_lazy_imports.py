"""``gemmperf analyze`` loads only what its input needs of this project, and what it no longer
loads at start-up still works where it is used.

Importing our own modules is a tenth of a small analysis's CPU time, and a third of that is
dataclasses and patterns made at import (docs/performance.md, "Start-up of a small analysis").
An analysis of a trace builds no sweep, runs one command, decides no point and reads no project
file where none exists, so it loads none of the modules (or stdlib parsers) only those need;
the package's test API is served on first use, and must still be the decorator whichever of
``from pytest_gemmperf import sweep`` and ``import pytest_gemmperf.sweep`` runs first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gemmperf import cli
from pytest_gemmperf.config import find_project
from test_startup import CHILD, ROOT

FIXTURES = ROOT / "tests" / "fixtures"
INPUTS = (FIXTURES / "torch" / "rocm_sdk_rank3.pt.trace.json", FIXTURES / "rocprof_csv" / "v7" / "mi350-n1")

#: what no analysis of a trace loads: the test API, the other commands' parsers, the
#: confirmation screen and the gate builders' inputs (its reports read no verdicts)
ANALYZE_NEVER = ("pytest_gemmperf.sweep", "pytest_gemmperf.gate.confirm", "pytest_gemmperf.gate.prepared",
                 *(f"pytest_gemmperf.commands.{name}" for name in cli.SUBCOMMANDS if name != "analyze"))
#: and without reports: no gate module at all, no redaction patterns
NO_REPORT_NEVER = ANALYZE_NEVER + ("pytest_gemmperf.gate", "pytest_gemmperf.redact")
#: where no project file exists above the working directory: no TOML or ini parser
PROJECT_PARSERS = ("tomllib", "configparser")


def _loaded_after(calls: list[list[str]], names: tuple[str, ...], cwd: Path) -> dict[str, list[str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", CHILD, ",".join(names), json.dumps(calls)], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_analyze_loads_no_sweep_other_commands_confirmation_or_builder_inputs(tmp_path):
    """``gemmperf analyze`` of a Kineto trace and of a rocprofv3 CSV directory, with its reports
    and without, loads none of the modules only a pytest session, another command or a
    comparison needs (nor, without reports, any gate module or the redaction patterns)."""
    no_project = find_project(tmp_path).path is None
    names = NO_REPORT_NEVER + (PROJECT_PARSERS if no_project else ())
    calls = {}
    for i, path in enumerate(INPUTS):
        calls[f"report{i}"] = ["analyze", str(path), "--out", str(tmp_path / f"report{i}")]
        calls[f"plain{i}"] = ["analyze", str(path), "--out", str(tmp_path / f"plain{i}"), "--no-report"]
    found = _loaded_after(list(calls.values()), names, tmp_path)
    for name, argv in calls.items():
        loaded = found[json.dumps(argv)]
        assert isinstance(loaded, list), loaded  # else the command failed: its traceback
        unneeded = (NO_REPORT_NEVER if name.startswith("plain") else ANALYZE_NEVER) + (
            PROJECT_PARSERS if no_project else ())
        assert set(loaded).isdisjoint(unneeded), (argv, loaded)
    assert (tmp_path / "report0" / "report.html").is_file() and (tmp_path / "plain1" / "kernels.csv").is_file()


#: run in a fresh interpreter: argv[1] what runs first; prints what the package's test API
#: names are then
API_PROBE = r"""
import importlib, inspect, json, sys
first = sys.argv[1]
if first == "package":
    import pytest_gemmperf
    loaded = "pytest_gemmperf.sweep" in sys.modules
elif first == "module":
    import pytest_gemmperf.sweep
elif first == "import_module":
    module = importlib.import_module("pytest_gemmperf.sweep")
    assert inspect.ismodule(module) and module.__name__ == "pytest_gemmperf.sweep"
elif first == "names":
    from pytest_gemmperf.sweep import Axis as A0, SweepPoint as P0, sweep as s0
from pytest_gemmperf import Axis, SweepPoint, sweep
import pytest_gemmperf
module = sys.modules["pytest_gemmperf.sweep"]
print(json.dumps({
    "sweep_is_function": inspect.isfunction(sweep) and sweep is module.sweep,
    "classes": inspect.isclass(Axis) and Axis is module.Axis and inspect.isclass(SweepPoint)
               and SweepPoint is module.SweepPoint,
    "attribute": pytest_gemmperf.sweep is sweep and pytest_gemmperf.Axis is Axis,
    "loaded_by_package": loaded if first == "package" else None,
}))
"""


@pytest.mark.parametrize("first", ["package", "module", "import_module", "names"])
def test_the_test_api_is_the_decorator_whatever_loads_first(first):
    """``from pytest_gemmperf import sweep, Axis, SweepPoint`` gives the decorator and the classes
    in a fresh interpreter whether the package, the module ``pytest_gemmperf.sweep`` (as an
    ``import`` statement or ``importlib.import_module``, which the plugin's hooks use) or its
    names were imported first; importing the package alone does not load the module."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", API_PROBE, first], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["sweep_is_function"] and found["classes"] and found["attribute"], found
    assert found["loaded_by_package"] in (None, False), found


ARGVS = [
    ["analyze", "trace.json", "--no-report", "--out", "o", "--warmup", "2"],
    ["compare", "base", "cand"],
    ["baseline", "show"],
    ["rocprof-config", "--from", "x.csv", "--out", "job.yaml"],
    ["history", "check"],
]


def _comparable(value):
    """Parsed values with the functions a parser made (per-parser lambdas) named, not compared
    by identity."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if callable(value):
        return f"{value.__module__}.{value.__qualname__}"
    return value


@pytest.mark.parametrize("argv", ARGVS, ids=lambda a: "-".join(a[:2]))
def test_a_command_parses_as_the_whole_parser_parses_it(argv):
    """The parser of the command ``argv`` names parses it as the parser of every command does,
    and shows the same usage line (a top-level error prints it)."""
    command = cli.chosen_command(argv)
    assert command == argv[0]
    one, every = cli.build_parser(command), cli.build_parser()
    assert _comparable(vars(one.parse_args(argv))) == _comparable(vars(every.parse_args(argv)))
    assert one.format_usage() == every.format_usage()
    sub = next(a for a in one._actions if a.dest == "command")
    assert list(sub.choices) == [command]


@pytest.mark.parametrize("argv", [[], ["--help"], ["--version"], ["-h", "analyze"], ["analyse", "x"],
                                  ["rocprof_config"]])
def test_help_and_unknown_names_get_every_command(argv):
    assert cli.chosen_command(argv) is None


def test_every_command_module_registers_its_typed_name():
    """``COMMAND_NAMES`` (what :func:`cli.chosen_command` matches) is what each module registers."""
    for module, typed in cli.COMMAND_NAMES.items():
        sub = next(a for a in cli.build_parser(typed)._actions if a.dest == "command")
        assert list(sub.choices) == [typed], module


def test_the_built_in_category_rules_compile_and_other_rules_are_still_checked():
    """The built-in category rules are not compiled whole at import only to check them: each
    compiles here; a user's rule (``extra``) or a replacement table is still checked."""
    import re

    from pytest_gemmperf.traces.categories import DEFAULT_RULES, category_of, compile_rules

    for _category, pattern in DEFAULT_RULES:
        re.compile(pattern)
    for bad in ("a(b", "[x", "x{2,1}"):
        with pytest.raises(re.error):
            compile_rules(extra=[("mine", bad)])
        with pytest.raises(re.error):
            compile_rules(rules=[("mine", bad)])
    assert category_of("Cijk_Ailk", compile_rules()) == "gemm"
