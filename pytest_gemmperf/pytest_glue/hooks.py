"""pytest hooks and fixtures of gemmperf: what pytest calls, wired to the objects that do the
work (``options.py``, ``session.py``, ``point.py``, ``summary.py``, ``progress.py``,
``shard_hooks.py``). ``pytest_gemmperf/plugin.py`` exposes them as the ``pytest11`` plugin.

Per-session state lives in objects kept in ``config.stash`` and handed on explicitly; nothing
is attached to pytest's own objects.

Every pytest process of an environment with gemmperf installed loads these hooks, so what only a
gemmperf test needs (the runner, the gate, the store: pandas, scipy, pyarrow) is imported by the
``gemmperf`` fixture, when a test first asks for it.
"""

from __future__ import annotations

import importlib
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gemmperf.errors import FAULT_ERRNOS, GemmperfInputError, OutputError, output_error
from pytest_gemmperf.pytest_glue.options import (WORKERINPUT_ARGV, WORKERINPUT_DIR, WORKERINPUT_HISTORY,
                                                 add_options, axis_overrides, history_settings, is_worker,
                                                 resolve_options, setting_value)
from pytest_gemmperf.pytest_glue.progress import ProgressReporter
from pytest_gemmperf.pytest_glue.reporting import PROP_FAULT, PROP_INPUT
from pytest_gemmperf.pytest_glue.session import GemmperfSession, anchor_to_project, create_results_dir
from pytest_gemmperf.pytest_glue.shard_hooks import PLUGIN_NAME, ShardHooks, shard_option
from pytest_gemmperf.pytest_glue.summary import SessionSummary
from pytest_gemmperf.redact import known_values, scrub

if TYPE_CHECKING:
    from pytest_gemmperf.pytest_glue.point import PointRunner

# the package exports the ``sweep`` decorator under the module's name
sweep_mod = importlib.import_module("pytest_gemmperf.sweep")

_SESSION_KEY = pytest.StashKey[GemmperfSession]()
_AXES_KEY = pytest.StashKey[tuple]()
_BAD_SWEEP_KEY = pytest.StashKey[list]()
_PROGRESS_KEY = pytest.StashKey[ProgressReporter]()
_SHARD_KEY = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Test ids and default outputs follow the project, however a path option is spelled."""
    anchor_to_project(early_config, parser, args)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gemmperf_sweep(spec): sweep points of a gemmperf test "
                                       "(use pytest_gemmperf.sweep(...))")
    _interrupt_on_sigterm(config)
    if is_worker(config):
        results_dir = Path(config.workerinput[WORKERINPUT_DIR])
        argv = list(config.workerinput.get(WORKERINPUT_ARGV, []))
    else:
        results_dir = create_results_dir(config)
        argv = [str(a) for a in config.invocation_params.args]
    options = resolve_options(config, results_dir)
    gp = GemmperfSession(options, argv=argv, rootdir=config.rootpath,
                         history=history_settings(config, results_dir))
    config.stash[_SESSION_KEY] = gp
    config.stash[_AXES_KEY] = axis_overrides(config)

    config.stash[_SHARD_KEY] = shard_option(config)
    config.pluginmanager.register(SessionSummary(config, gp), "gemmperf-session")
    if config.stash[_SHARD_KEY] is not None:  # deselects the other shards' items (shard_hooks.py)
        config.pluginmanager.register(ShardHooks(config.stash[_SHARD_KEY], gp), PLUGIN_NAME)

    config.stash[_PROGRESS_KEY] = ProgressReporter(config, enabled=setting_value(config, "gemmperf_progress"))
    config.pluginmanager.register(config.stash[_PROGRESS_KEY], "gemmperf-progress")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(gp), "gemmperf-xdist")


def _interrupt_on_sigterm(config: pytest.Config) -> None:
    """Make SIGTERM (how CI systems cancel a job) end the session like Ctrl-C: the workload's
    process group is killed, and run.json / point.json say ``interrupted`` instead of being
    left ``running``. Only where nobody else handles SIGTERM, and undone at the end."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))


class XdistHooks:
    """Hands the controller's results directory to every worker, so all points of one session
    land in one directory, and the history's run id, so they record one run."""

    def __init__(self, gp: GemmperfSession) -> None:
        self.gp = gp

    @pytest.hookimpl
    def pytest_configure_node(self, node) -> None:
        node.workerinput[WORKERINPUT_DIR] = str(self.gp.results.root)
        node.workerinput[WORKERINPUT_ARGV] = self.gp.argv
        if self.gp.history is not None:
            node.workerinput[WORKERINPUT_HISTORY] = self.gp.history.as_workerinput()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(sweep_mod.MARK_NAME)
    if marker is None:
        return
    if "gemmperf_point" not in metafunc.fixturenames:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: @sweep needs the gemmperf "
                                "(or gemmperf_point) fixture")
    values, kernels = metafunc.config.stash[_AXES_KEY]
    try:
        points = sweep_mod.spec_of(marker).with_overrides(values, kernels).points()
    except (ValueError, TypeError) as exc:
        # raised here, a UsageError becomes a collection error with a traceback for every
        # module; keep the first and end the session with one line once collection is done.
        # An xdist worker cannot end the session (the controller reports an internal error):
        # there a CollectError, which pytest shows as its message alone, stops the run instead
        message = f"{metafunc.definition.nodeid}: {exc}"
        if is_worker(metafunc.config):
            raise pytest.Collector.CollectError(f"gemmperf axis override: {message}") from None
        metafunc.config.stash.setdefault(_BAD_SWEEP_KEY, []).append(message)
        return
    metafunc.parametrize("gemmperf_point", points, ids=[p.id for p in points])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items) -> None:
    """Stop before anything runs when an override did not fit a test's declared axes."""
    bad = config.stash.get(_BAD_SWEEP_KEY, [])
    if bad:
        more = f" (and {len(bad) - 1} more test(s))" if len(bad) > 1 else ""
        raise pytest.UsageError(f"gemmperf axis override: {bad[0]}{more}")


@pytest.fixture
def gemmperf_point(request: pytest.FixtureRequest) -> sweep_mod.SweepPoint:
    """This item's sweep point (a single ``default`` point when the test declares no sweep)."""
    values, kernels = request.config.stash[_AXES_KEY]
    return sweep_mod.SweepSpec().with_overrides(values, kernels).points()[0]


@pytest.fixture(scope="session")
def gemmperf_session(pytestconfig: pytest.Config) -> GemmperfSession:
    return pytestconfig.stash[_SESSION_KEY]


@pytest.fixture(scope="session")
def gemmperf_results(gemmperf_session: GemmperfSession):
    """This session's results directory (``ResultsDir``; made when the session starts, its
    ``run.json`` when a point is profiled)."""
    return gemmperf_session.results


@pytest.fixture
def gemmperf(request: pytest.FixtureRequest, gemmperf_session: GemmperfSession,
             gemmperf_point: sweep_mod.SweepPoint) -> PointRunner:
    """Runner of this item's sweep point: ``profile(...)`` then ``assert_no_regression(...)``.

    Verdicts go to ``item.user_properties`` (JUnit XML properties; the channel xdist workers use
    to report to the controller). Not through ``record_property``: that warns under the default
    ``junit_family=xunit2`` although pytest writes the properties all the same."""
    node = request.node

    # lazy: keeps sessions without gemmperf tests fast (the runner loads the gate and the store)
    from pytest_gemmperf.pytest_glue.point import PointRunner

    def record(name: str, value: str) -> None:
        node.user_properties.append((name, value))

    lines = request.config.stash.get(_PROGRESS_KEY, None)
    progress = (lines.for_point(gemmperf_session, node.nodeid, gemmperf_point.id, on_start=record)
                if lines else None)
    return PointRunner(gemmperf_session, gemmperf_point, node.nodeid, record_property=record,
                       progress=progress)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or is_worker(config):
        return None
    o = session.options
    try:
        backend = session.backend.describe()
    except ValueError as exc:
        raise pytest.UsageError(f"--gemmperf-backend: {exc}") from None
    return [f"gemmperf: backend {backend}; results {o.results_dir}; baselines {o.baseline_dir}"
            + ("; updating baselines" if o.update_baselines else "")
            + ("; warn-only" if o.warn_only else "")
            + (f"; shard {config.stash[_SHARD_KEY]}" if config.stash.get(_SHARD_KEY, None) else "")]


# the whole package, not this folder: a refused write raised in store/ or run/ is as much ours
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A full disk, a read-only store or results directory, a missing permission, a damaged
    baseline record: the item errors with one line naming the file (no traceback), and the
    summary lists it."""
    report = yield
    exc = call.excinfo.value if call.excinfo is not None else None
    line = _fault_line(exc) if exc is not None else None
    prop = PROP_FAULT
    if (line is None and isinstance(exc, GemmperfInputError) and "gemmperf" in getattr(item, "fixturenames", ())
            and _raised_in_package(exc)):
        line, prop = str(exc), PROP_INPUT  # e.g. store.load of a corrupt record: not a regression
    if line is not None and report.failed:
        report.longrepr = f"gemmperf: {line}"
        report.user_properties.append((prop, line))
    redact_report(report)
    return report


def redact_report(report: pytest.TestReport) -> None:
    """Hide every secret value known to the run (redact.py) in what pytest shows and writes of
    an item: its failure text (terminal, JUnit XML), captured output and properties. Run on
    each xdist worker before the report travels to the controller."""
    values = known_values()
    if not values:
        return
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        report.longrepr = (longrepr[0], longrepr[1], scrub(str(longrepr[2]), values))
    elif longrepr is not None:
        text = str(longrepr)
        hidden = scrub(text, values)
        if hidden != text:  # the structured form is kept where it holds no secret
            report.longrepr = hidden
    report.sections = [(title, scrub(content, values)) for title, content in report.sections]
    report.user_properties = [(name, scrub(value, values) if isinstance(value, str) else value)
                              for name, value in report.user_properties]


def pytest_report_teststatus(report, config: pytest.Config):
    """A write fault or damaged input is an error of the run, not a failed gate (a regression)."""
    if report.failed and any(name in (PROP_FAULT, PROP_INPUT) for name, _ in getattr(report, "user_properties", ())):
        return "error", "E", "ERROR"
    return None


def _fault_line(exc: BaseException) -> str | None:
    """One line for a refused write: every ``OutputError``, and an ``OSError`` of a fault
    kind raised inside gemmperf (the test's own code keeps its traceback)."""
    if isinstance(exc, OutputError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in FAULT_ERRNOS and _raised_in_package(exc):
        return str(output_error(exc))
    return None


def _raised_in_package(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            return True
        tb = tb.tb_next
    return False
