"""Shared set-up of the pytester tests of the progress lines and the session's benchmark JSON:
the plugin on the CPU torch backend with the fast stand-in workload
(tests/fixtures/gemmperf_plugin/fake_kineto_workload.py), results and baselines under the
pytester directory, and this machine's load kept out of the verdicts."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# pytester's in-process runs drop the modules they imported afterwards; pyarrow extension types
# cannot be registered twice, so everything the inner sessions use is imported here, once.
import pandas.core.arrays.arrow.extension_types  # noqa: E402,F401
import pyarrow.parquet  # noqa: E402,F401

import pytest_gemmperf.gate.compare  # noqa: E402,F401
import pytest_gemmperf.gate.samples  # noqa: E402,F401
import pytest_gemmperf.gate.verdict  # noqa: E402,F401
import pytest_gemmperf.pytest_glue.progress  # noqa: E402,F401
import pytest_gemmperf.run.process  # noqa: E402,F401
import pytest_gemmperf.run.torch_backend  # noqa: E402,F401
import pytest_gemmperf.pytest_glue.benchmark_json  # noqa: E402,F401
import pytest_gemmperf.store.baselines  # noqa: E402,F401
import pytest_gemmperf.store.hardware  # noqa: E402,F401
import pytest_gemmperf.store.results  # noqa: E402,F401
import pytest_gemmperf.traces.torch_trace  # noqa: E402,F401
from pytest_gemmperf.run import backend as be
from pytest_gemmperf.run import environment

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "fixtures" / "gemmperf_plugin" / "fake_kineto_workload.py"

TEST_FILE = f"""
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28, 56], threads=[256], kernels=[r"^aten::mm$"])
def test_gpsweep(gemmperf):
    result = gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "40"], repeats=2)
    gemmperf.assert_no_regression(result)
"""


def _entry_point_loaded() -> bool:
    return any(ep.value == "pytest_gemmperf.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))


PLUGIN_ARGS = [] if _entry_point_loaded() else ["-p", "pytest_gemmperf.plugin"]


@pytest.fixture
def gp(pytester, monkeypatch):
    """``gp(*args, results=..., inprocess=True)`` runs the sweep above in pytester."""
    monkeypatch.setattr(be, "rocm_gpu_present", lambda *a: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    monkeypatch.delenv("FAKE_SCALE", raising=False)
    monkeypatch.delenv("FAKE_FAIL", raising=False)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)
    # a subprocess run (xdist) cannot be patched: the torch backend is chosen explicitly there
    pytester.makepyfile(test_gpsweep=TEST_FILE)

    def run(*args, results="res", inprocess=True):
        # the outer session imported the plugin before the repository was on sys.path, so an
        # inner session that finds it there would warn that it cannot assertion-rewrite it
        full = [*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
                "-W", "ignore::pytest.PytestAssertRewriteWarning",
                "--gemmperf-backend", "torch", "--gemmperf-telemetry", "off",
                f"--gemmperf-results-dir={results}", "--gemmperf-baseline-dir=base", *args]
        return pytester.runpytest(*full) if inprocess else pytester.runpytest_subprocess(*full)

    run.path = pytester.path
    run.python = sys.executable
    return run


#: conftest.py of a session in a subprocess whose readers look at neither its report.html /
#: report.xlsx nor at what fsync(2) adds to the page cache (power-loss ordering): the session
#: skips both, as the sessions in this process do (conftest.py: without_session_reports, no_fsync)
SUBPROCESS_CONFTEST = """
import os

from pytest_gemmperf.pytest_glue import summary
from pytest_gemmperf.run import environment

os.fsync = lambda fd: None
summary.write_results_reports = lambda *args, **kwargs: None
# the host's load is the test machine's (another xdist worker), not what these sessions test: a
# baseline recorded beside it would be "disturbed" and leave every comparison undecided
environment.read_proc_stat = lambda *args, **kwargs: None
"""


@dataclass(frozen=True)
class XdistSweep:
    """One real ``pytest -n 2`` session of the sweep above (``run_xdist_sweep``): its
    directory (results under ``resx``, baselines under ``base``, history under ``hx``,
    pytest-benchmark JSON ``bx.json``) and its output, as pytester's ``runpytest`` returns it."""

    path: Path
    out: pytest.RunResult


def run_xdist_sweep(path: Path) -> XdistSweep:
    """Run the sweep under ``pytest -n 2`` in a fresh process, with every output the xdist tests
    read switched on at once: each worker gates one point, records the baseline and appends the
    history, and the controller writes the benchmark JSON. Three interpreters that import the
    plugin are most of the cost of such a session, so one session serves the xdist tests of the
    plugin, the progress lines, the benchmark JSON and the history (tests/conftest.py); none of
    them reads its reports."""
    (path / "test_gpsweep.py").write_text(TEST_FILE)
    (path / "conftest.py").write_text(SUBPROCESS_CONFTEST)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST_", "FAKE_")) and k not in ("PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")}
    # the workers are fresh interpreters: they import the package from the checkout
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), PY_COLORS="0",
               HOME=str(path))
    cmd = [sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
           f"--basetemp={path / 'basetemp'}", "-n", "2", "--gemmperf-backend", "torch",
           "--gemmperf-telemetry", "off", "--gemmperf-results-dir=resx", "--gemmperf-baseline-dir=base",
           "--gemmperf-history=hx", "--gemmperf-benchmark-json=bx.json"]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=path, env=env, capture_output=True, text=True, timeout=600)
    out = pytest.RunResult(proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines(),
                           time.monotonic() - start)
    return XdistSweep(path, out)
