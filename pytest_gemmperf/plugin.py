"""pytest hooks only: options, ini, markers, fixtures, sweep expansion, terminal summary.

The work is done in the layers below (``sweep``, ``session``, ``run``, ``gate``, ``report``).
Command-line options override ini values (``gemmperf_*``), which override the defaults.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_gemmperf.config import BY_DEST, HISTORY_OFF, SETTINGS, default, error_text, resolve_path
from pytest_gemmperf.errors import FAULT_ERRNOS, OutputError, output_error
from pytest_gemmperf.history import pytest_side as history_side
from pytest_gemmperf.session import (PROP_PREFIX, PROP_STATUS, PROP_VERDICTS, GemmperfSession,
                                     Options, PointRunner)
from pytest_gemmperf.textsafe import printable, printable_lines
from pytest_gemmperf.gate.headline import summary_table
from pytest_gemmperf.shard_hooks import PLUGIN_NAME, ShardHooks, shard_option
from pytest_gemmperf.progress import ProgressReporter
from pytest_gemmperf.run import results as run_results
from pytest_gemmperf.run.results import missing_ancestor, remove_unused
from pytest_gemmperf.workdir import TOOL_DIR, make_tool_dir, remove_unused_tool_dir
from pytest_gemmperf.run.results import RUN_JSON
from pytest_gemmperf.history.pytest_side import HistorySettings, new_run
from pytest_gemmperf.run.results import link_latest
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.session_benchmark import write_session_benchmark_json
from pytest_gemmperf.report import write_results_reports

# the package exports the ``sweep`` decorator under the module's name
sweep_mod = importlib.import_module("pytest_gemmperf.sweep")

_SESSION_KEY = pytest.StashKey[GemmperfSession]()
_AXES_KEY = pytest.StashKey[tuple]()
_BAD_SWEEP_KEY = pytest.StashKey[list]()
_PROGRESS_KEY = pytest.StashKey[Any]()
_SHARD_KEY = pytest.StashKey[Any]()
_WORKERINPUT_DIR = "gemmperf_results_dir"
_WORKERINPUT_ARGV = "gemmperf_argv"
_WORKERINPUT_HISTORY = "gemmperf_history_run"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gemmperf", "GPU kernel performance gate (pytest-gemmperf)")
    for s in SETTINGS:  # the one table of settings (config.py)
        help_text = s.pytest_help()
        if s.kind == "bool":
            group.addoption(s.flag, action="store_true", default=None, dest=s.dest, help=help_text)
        elif s.kind == "linelist":
            group.addoption(s.flag, action="append", default=None, dest=s.dest, metavar=s.metavar,
                            help=help_text)
        else:
            group.addoption(s.flag, action="store", default=None, dest=s.dest, metavar=s.metavar,
                            help=help_text)
        parser.addini(s.ini, help=help_text.replace("%%", "%"), type=s.kind, default=s.ini_default())


def _setting(config: pytest.Config, dest: str) -> tuple[Any, str]:
    """(value, where): the command line (``cli``) wins over the ini file (``ini``), which wins
    over the table's default (``default``); the value as given, not yet parsed."""
    value = config.getoption(dest)
    if value is not None:
        return value, "cli"
    s = BY_DEST[dest]
    value = config.getini(s.ini)
    if s.kind == "bool":
        return bool(value), "ini"
    if s.kind == "linelist":
        return (list(value) or None), "ini"
    return (value, "ini") if value not in ("", None) else (s.default, "default")


def _value(config: pytest.Config, dest: str) -> Any:
    """A setting's parsed value; a bad one is a one-line ``UsageError`` naming where it was set."""
    try:
        return BY_DEST[dest].convert(_setting(config, dest)[0])
    except ValueError as exc:
        raise pytest.UsageError(error_text(_flag(config, dest), str(exc))) from None


def _path_setting(config: pytest.Config, dest: str) -> Path | None:
    value, where = _setting(config, dest)
    if value in (None, ""):
        return None
    if where == "default":  # a default follows the rootdir
        return resolve_path(value, config.rootpath, strict_base=False)
    # relative command-line paths follow the invocation directory, ini paths the ini file
    base = (config.invocation_params.dir if where == "cli"
            else (config.inipath.parent if config.inipath else config.rootpath))
    return resolve_path(value, Path(base))


def _options(config: pytest.Config, results_dir: Path) -> Options:
    backend = _value(config, "gemmperf_backend")
    replay = _path_setting(config, "gemmperf_replay")
    if backend == "replay" and replay is None:
        raise pytest.UsageError("--gemmperf-backend replay needs --gemmperf-replay DIR")
    if replay is not None and not replay.is_dir():
        raise pytest.UsageError(f"--gemmperf-replay: {replay} is not a directory")
    repeats = _value(config, "gemmperf_repeats")
    auto = repeats == "auto"
    detect = _value(config, "gemmperf_detect")
    if auto and not detect:
        raise pytest.UsageError("--gemmperf-repeats auto needs --gemmperf-detect (e.g. 3%)")
    return Options(
        results_dir=results_dir,
        baseline_dir=_path_setting(config, "gemmperf_baseline_dir"),
        report_dir=_path_setting(config, "gemmperf_report_dir"),
        backend=backend, replay_dir=replay, repeats=default("repeats") if auto else repeats,
        repeats_auto=auto, detect=detect, max_repeats=_value(config, "gemmperf_max_repeats"),
        threshold=_value(config, "gemmperf_threshold"),
        warmup=_value(config, "gemmperf_warmup"),
        # 0 s was read as "the default" before the table existed: kept so
        timeout_s=_value(config, "gemmperf_timeout") or default("timeout"),
        gpus_per_point=_value(config, "gemmperf_gpus_per_point"),
        update_baselines=bool(_value(config, "gemmperf_update_baselines")),
        warn_only=bool(_value(config, "gemmperf_warn_only")),
        rocprofv3=str(_value(config, "gemmperf_rocprofv3")),
        learn_variance=bool(_value(config, "gemmperf_learn_variance")),
        confirm=_value(config, "gemmperf_confirm"),
        telemetry=_value(config, "gemmperf_telemetry"),
        telemetry_interval_s=_value(config, "gemmperf_telemetry_interval"),
        jobs=_value(config, "gemmperf_jobs"),
    )


def _axis_overrides(config: pytest.Config) -> tuple[dict[str, list], list[str] | None]:
    """Axis values and kernel regexes from the command line / ini, validated here, before
    collection: a bad value is one ``UsageError`` line (exit 4), never a run with
    ``NCCL_NTHREADS=abc`` nor a traceback per module. User axes are checked against their
    declarations when the tests are collected (:func:`pytest_generate_tests`)."""
    values: dict[str, list] = {}
    flag = ""
    try:
        for dest, axis in (("gemmperf_channels", "channels"), ("gemmperf_threads", "threads")):
            flag = _flag(config, dest)
            raw = _setting(config, dest)[0]
            if raw not in (None, ""):
                values[axis] = sweep_mod.check_builtin_values(axis, sweep_mod.parse_values(raw))
        flag = _flag(config, "gemmperf_axis")
        for item in _setting(config, "gemmperf_axis")[0] or ():
            name, vals = sweep_mod.parse_axis_override(item)
            if name in sweep_mod.BUILTIN_AXES:
                vals = sweep_mod.check_builtin_values(name, vals)
            values[name] = vals
        flag = _flag(config, "gemmperf_kernels")
        kernels = _setting(config, "gemmperf_kernels")[0]
        if kernels:
            sweep_mod.check_kernels(kernels)
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(f"{flag}: {exc}") from None
    return values, (list(kernels) if kernels else None)


def _flag(config: pytest.Config, dest: str) -> str:
    """How the user spelled a setting: ``--gemmperf-x`` or ``gemmperf_x (ini)``."""
    return ("--" + dest.replace("_", "-")) if config.getoption(dest) is not None \
        else f"{BY_DEST[dest].ini} (ini)"


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gemmperf_sweep(spec): sweep points of a gemmperf test "
                                       "(use pytest_gemmperf.sweep(...))")
    _interrupt_on_sigterm(config)
    if _is_worker(config):
        results_dir = Path(config.workerinput[_WORKERINPUT_DIR])
        argv = list(config.workerinput.get(_WORKERINPUT_ARGV, []))
    else:
        results_dir = _create_results_dir(config)
        argv = [str(a) for a in config.invocation_params.args]
    options = _options(config, results_dir)
    config.stash[_SESSION_KEY] = GemmperfSession(options, argv=argv, rootdir=config.rootpath)
    config.stash[_SESSION_KEY].history = _history_settings(config, results_dir)
    config.stash[_AXES_KEY] = _axis_overrides(config)

    config.stash[_SHARD_KEY] = shard_option(config)
    config.pluginmanager.register(_SessionHooks(config), "gemmperf-session")
    if config.stash[_SHARD_KEY] is not None:  # deselects the other shards' items (shard_hooks.py)
        config.pluginmanager.register(ShardHooks(config.stash[_SHARD_KEY], config.stash[_SESSION_KEY]),
                                      PLUGIN_NAME)

    config.stash[_PROGRESS_KEY] = ProgressReporter(config, enabled=_value(config, "gemmperf_progress"))
    config.pluginmanager.register(config.stash[_PROGRESS_KEY], "gemmperf-progress")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(), "gemmperf-xdist")


def _create_results_dir(config: pytest.Config) -> Path:
    """This session's results directory, made now by the controller (xdist workers receive its
    path), so no other session can take it: ``--gemmperf-results-dir`` as given (reusing it is
    the user's choice), else a fresh ``.gemmperf/results/<timestamp>-<random>`` (a new
    ``.gemmperf/`` git-ignores itself: ``workdir.py``). Removed again at the end when nothing
    was profiled into it."""
    given = _path_setting(config, "gemmperf_results_dir")
    target = given or config.rootpath / TOOL_DIR / "results"
    top = missing_ancestor(target)
    try:
        made = make_tool_dir(target)
        if given is not None:
            given.mkdir(parents=True, exist_ok=True)
            path = given
        else:
            path = run_results.timestamped_dir(target)  # looked up at call time: a test may freeze its clock
            top = top or path
    except OSError as exc:
        where = _flag(config, "gemmperf_results_dir") if given is not None else "gemmperf results"
        raise pytest.UsageError(f"{where}: cannot create {target}: {exc.strerror or exc}") from None

    def cleanup() -> None:
        remove_unused(path, top)
        remove_unused_tool_dir(made)

    config.add_cleanup(cleanup)
    return path


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


def _profiled(gp: GemmperfSession | None) -> bool:
    """Whether this session wrote results (``run.json`` is written with the first point)."""
    return gp is not None and (gp.results.root / RUN_JSON).is_file()


def _history_settings(config: pytest.Config, results_dir: Path):
    """The run history of this session (history/pytest_side.py), None when turned off. One run
    id and time per session: the controller makes them, xdist workers receive a copy."""
    raw, _ = _setting(config, "gemmperf_history")
    check = bool(_setting(config, "gemmperf_history_check")[0])
    if raw is not None and str(raw).strip().lower() in HISTORY_OFF:
        if check:
            raise pytest.UsageError("--gemmperf-history-check needs a history (--gemmperf-history is off)")
        return None
    window = _value(config, "gemmperf_history_window")
    if raw is not None and "://" in str(raw):
        url = str(raw)
    else:
        url = str(_path_setting(config, "gemmperf_history"))
    run = (dict(config.workerinput[_WORKERINPUT_HISTORY]) if _is_worker(config)
           and _WORKERINPUT_HISTORY in config.workerinput else new_run(results_dir, config.rootpath))
    return HistorySettings(url=url, run_id=run["run_id"], time=run["time"], branch=run.get("branch"),
                           check=check, window=window)


class _XdistHooks:
    """Hands the controller's results directory to every worker, so all points of one session
    land in one directory."""

    @pytest.hookimpl
    def pytest_configure_node(self, node) -> None:
        session = node.config.stash[_SESSION_KEY]
        node.workerinput[_WORKERINPUT_DIR] = str(session.results.root)
        node.workerinput[_WORKERINPUT_ARGV] = session.argv
        if getattr(session, "history", None) is not None:
            node.workerinput[_WORKERINPUT_HISTORY] = session.history.as_workerinput()


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
        if _is_worker(metafunc.config):
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
    reporter = request.config.stash.get(_PROGRESS_KEY, None)
    progress = (reporter.for_point(gemmperf_session, node.nodeid, gemmperf_point.id,
                                   on_start=lambda name, value: node.user_properties.append((name, value)))
                if reporter else None)
    return PointRunner(gemmperf_session, gemmperf_point, node.nodeid,
                       record_property=lambda name, value: node.user_properties.append((name, value)),
                       progress=progress)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or _is_worker(config):
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


#: user_properties of a test report: a write the machine refused (the item errors with this
#: one line) and a warning for the terminal summary (history not recorded, ...)
PROP_FAULT = f"{PROP_PREFIX}_fault"
PROP_WARNING = history_side.PROP_WARNING
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A full disk, a read-only store or results directory, a missing permission: the item
    errors with one line naming the file (no traceback), and the summary lists it."""
    report = yield
    line = _fault_line(call.excinfo.value) if call.excinfo is not None else None
    if line is not None and report.failed:
        report.longrepr = f"gemmperf: {line}"
        report.user_properties.append((PROP_FAULT, line))
    return report


def pytest_report_teststatus(report, config: pytest.Config):
    """A write fault is an error of the run, not a failed gate (a regression)."""
    if report.failed and any(name == PROP_FAULT for name, _ in getattr(report, "user_properties", ())):
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


class _SessionHooks:
    """Per-config hooks: gathers verdicts from test reports (the only channel from xdist
    workers to the controller), writes reports and prints the summary at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.verdicts: list[dict] = []
        self.baselines: list[tuple[str, str, str]] = []
        self.compared = 0
        self.learned = 0
        self.confirmations: list[dict] = []
        self.noisy: list[tuple[str, str]] = []
        self.report: str | None = None
        self.report_error: str | None = None
        self.gated: list[dict] = []  # --gemmperf-benchmark-json (session_benchmark.py)
        self.benchmark_json: str | None = None
        self.benchmark_error: str | None = None
        self.usage_error = False  # a worker's collection error from a bad axis override
        #: node ids of the collected points (None under xdist's controller, which collects
        #: nothing) and of the items whose teardown ran: run.json's complete/interrupted
        self.points: set[str] | None = None
        self.faults: list[tuple[str, str]] = []  # (nodeid, one line): writes that were refused
        self.warnings: list[str] = []
        self.finished: set[str] = set()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.points = {item.nodeid for item in session.items
                       if "gemmperf" in getattr(item, "fixturenames", ())}
        gp = self.config.stash.get(_SESSION_KEY, None)
        if gp is not None:  # run.json's points_total, whichever process creates it
            gp.run_fields["points_total"] = len(self.points)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.finished.add(report.nodeid)
        if report.failed:
            self.faults += [(report.nodeid, str(v)) for name, v in report.user_properties if name == PROP_FAULT]
        if report.when != "call":
            return
        status = None
        for name, value in report.user_properties:
            if name == PROP_VERDICTS:
                self.verdicts.extend(json.loads(value))
            elif name == PROP_STATUS:
                status = str(value)
                self.compared += status.startswith("compared")
            elif name == f"{PROP_PREFIX}_baseline":
                self.baselines.append((report.nodeid, status or "", str(value)))
            elif name == f"{PROP_PREFIX}_learned":
                self.learned += 1
            elif name == f"{PROP_PREFIX}_confirm":
                self.confirmations.append(json.loads(value))
            elif name == f"{PROP_PREFIX}_environment":
                self.noisy.append((report.nodeid, str(value)))
            elif name == f"{PROP_PREFIX}_gated":
                self.gated.append(json.loads(value))
            elif name == PROP_WARNING:
                self.warnings.append(str(value))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # an xdist worker can only stop on a bad axis override with a collection error (see
        # pytest_generate_tests); the controller receives it here and ends with exit 4 as
        # without xdist: a usage error, not a test failure
        if report.failed and "gemmperf axis override:" in str(report.longrepr):
            self.usage_error = True

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = self.config
        if self.usage_error and not _is_worker(config):
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        gp = config.stash.get(_SESSION_KEY, None)
        if _is_worker(config) or not _profiled(gp):
            return

        state = self._finish_run(gp, session, exitstatus)
        if _path_setting(config, "gemmperf_results_dir") is None and state:
            link_latest(gp.results.root)  # `latest` is the newest complete run
        self._write_reports(gp)
        self._write_benchmark_json(gp)

    def _finish_run(self, gp: GemmperfSession, session: pytest.Session, exitstatus: int) -> bool:
        """run.json's final status: interrupted when pytest was (Ctrl-C, an internal error,
        xdist's ``-x``) or a collected point never finished (``-x``, ``--maxfail``); else
        complete, whatever the verdicts. True when complete."""
        stopped = int(exitstatus) in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)
        unfinished = self.points is not None and not self.points <= self.finished
        try:
            return gp.results.finish(interrupted=stopped or unfinished).is_complete
        except (GemmperfInputError, OSError) as exc:  # a damaged point.json: the run is not complete
            tr = self.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                tr.write_line(f"gemmperf: run status not recorded: {exc}", red=True)
            return False

    def _write_benchmark_json(self, gp: GemmperfSession) -> None:
        """``--gemmperf-benchmark-json``: every gated point of the session (workers' included:
        their reports carry the ``gemmperf_gated`` properties, their tables are in the shared
        results directory)."""
        path = _path_setting(self.config, "gemmperf_benchmark_json")
        if path is None:
            return

        commit = gp.metadata().get("git_commit")
        try:
            out, n = write_session_benchmark_json(
                path, gp.results.root, self.gated,
                commit_info={"id": commit, "project": gp.rootdir.name if gp.rootdir else None} if commit else {})
        except (GemmperfInputError, OSError) as exc:
            self.benchmark_error = str(exc)
            return
        self.benchmark_json = f"{out} ({n} benchmark(s))"

    def _write_reports(self, gp: GemmperfSession) -> None:
        try:
            path = write_results_reports(gp.results.root, gp.options.report_dir)
        except OSError as exc:  # a full or read-only report directory: a warning, not a failure
            self.report_error = str(output_error(exc, gp.options.report_dir))
            return
        except Exception as exc:  # a broken report must not hide the gate's verdicts
            self.report_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return
        if path is not None:
            self.report = str(path)

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        gp = config.stash.get(_SESSION_KEY, None)
        if _is_worker(config) or gp is None:
            return
        tr = terminalreporter
        if not _profiled(gp):
            if self.faults or self.warnings:  # the results directory itself could not be made
                tr.section("gemmperf")
                self._write_faults(tr)
            return
        tr.section("gemmperf")
        _write(tr, f"results: {printable(gp.results.root)}")
        self._write_faults(tr)
        shard_hooks = config.pluginmanager.get_plugin("gemmperf-shard")
        if shard_hooks is not None and shard_hooks.line():
            _write(tr, shard_hooks.line() + "; combine the shards with `gemmperf merge`")
        for nodeid, status, path in self.baselines:
            if status == "baseline-updated":
                _write(tr, f"baseline updated for {printable(nodeid)}: {printable(path)}")
            else:
                _write(tr, f"no baseline for {printable(nodeid)} — recorded one at {printable(path)}", yellow=True)
        _write(tr, f"compared {self.compared} point(s) with their baselines; "
                      f"{len(self.verdicts)} non-unchanged verdict(s)")
        if self.learned:
            _write(tr, f"variance of {self.learned} point run(s) added to the baselines' history")
        for c in self.confirmations:
            _write(tr, _format_confirmation(c), yellow=True)
        for nodeid, text in self.noisy:  # run/environment.py: contention while the point ran
            _write(tr, f"{printable(text)} while {printable(nodeid)} ran", yellow=True)
        if self.verdicts:
            _write(tr, summary_table(self.verdicts))
        if gp.options.warn_only and any(r["verdict"] == "regression" for r in self.verdicts):
            _write(tr, "--gemmperf-warn-only: regressions reported, not failed", yellow=True)
        if self.report:
            _write(tr, f"report: {printable(self.report)}")
        if self.report_error:
            _write(tr, f"report not written: {printable(self.report_error)}", red=True)
        if self.benchmark_json:
            _write(tr, f"pytest-benchmark JSON: {printable(self.benchmark_json)}")
        if self.benchmark_error:
            _write(tr, f"pytest-benchmark JSON not written: {printable(self.benchmark_error)}", red=True)

    def _write_faults(self, tr) -> None:
        for nodeid, line in self.faults:
            _write(tr, f"not written ({printable(nodeid)}): {printable(line)}", red=True)
        for text in self.warnings:
            _write(tr, f"warning: {printable(text)}", yellow=True)


def _write(tr: Any, text: str, **markup: bool) -> None:
    """A summary line on the terminal; data fields went through ``printable`` already, this
    catches any control character left in the line's own text."""
    tr.write_line(printable_lines(text), **markup)


def _format_confirmation(c: dict) -> str:
    """One line per confirmed point: what triggered it, what it cost, what it changed."""
    head = (f"confirmation of {printable(c['test'].rsplit('::', 1)[-1])}[{printable(c['point'])}] "
            f"({printable(c.get('trigger', ''))})")
    if c.get("skipped"):
        return f"{head}: not run, {printable(c['skipped'])}"
    changes = c.get("changes") or []
    what = ("; ".join(f"{printable(x['kernel'])} {printable(x['metric'])}: {x['before']} -> {x['after']}"
                      for x in changes[:4])
            + (f"; ... {len(changes) - 4} more" if len(changes) > 4 else "")) or "no verdict changed"
    return f"{head}: {c.get('rounds', 0)} round(s), +{c.get('extra_processes', 0)} processes: {what}"
