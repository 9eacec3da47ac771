"""Fixtures shared by the project's own tests (no GPU needed)."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import pkgutil
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

import pytest

import pytest_gemmperf
from gemmperf_pytester_support import run_xdist_sweep
from pytest_gemmperf.pytest_glue import summary

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: real profiler files: ``../shared/data`` beside the checkout, or the folder GEMMPERF_SHARED_DATA
#: names (a worktree or a copy elsewhere), as the benchmarks read it
SHARED_DATA = Path(os.environ.get("GEMMPERF_SHARED_DATA") or REPO.parent / "shared" / "data")


def _import_the_whole_package() -> None:
    """Import every ``pytest_gemmperf`` module once, up front.

    pytester's in-process sessions drop every module they imported when they end, so each inner
    session would import (and assertion-rewrite, uncached under PYTHONDONTWRITEBYTECODE) the
    plugin's modules again: most of the CPU time of the plugin tests. Modules imported before an
    inner session starts are kept. A module whose optional dependency is absent (torch) is left
    to the tests that need it."""
    for info in pkgutil.walk_packages(pytest_gemmperf.__path__, "pytest_gemmperf."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:
            pass
    # and what it imports lazily that every inner session reaches: the run history (on by
    # default) opens its store through fsspec, which an inner session imported anew each time
    for name in ("fsspec", "fsspec.core", "fsspec.implementations.local"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


_import_the_whole_package()


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (real profiler files); tests using it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data test: {SHARED_DATA} is absent (it lives beside the checkout)")
    return SHARED_DATA


def shared_file(rel: str) -> Path:
    """Path of one file under ``../shared/data``; skips the test when it is missing."""
    p = SHARED_DATA / rel
    if not p.exists():
        pytest.skip(f"real-data test: {p} is absent")
    return p


@pytest.fixture(scope="session")
def trace_908(shared_data):
    """The real rocprofv3 7.x JSON of data-catalog.md 1.1 (43,915 dispatches), read once."""
    path = shared_data / "tracelens" / "908_results.json.gz"
    if not path.exists():
        pytest.skip(f"real-data test: {path} is absent")
    from pytest_gemmperf.traces.rocprof_json import read_rocprof_json

    return read_rocprof_json(path)


@pytest.fixture(scope="session", name="pytest_help")
def help_of_pytest() -> str:  # not named pytest_*: pytest takes such conftest names for hooks
    """``pytest --help`` of this checkout (its options and ini keys), run once per session: a
    process that imports the plugin, shared by every test that reads the help text."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def without_session_reports(monkeypatch):
    """In-process pytest sessions end without writing report.html / report.xlsx: the session's
    end reads the whole results directory again for them, about a third of a small session's
    CPU time. For modules whose tests never read the reports (sessions in a subprocess still
    write them; the tests of the reports read them)."""
    monkeypatch.setattr(summary, "write_results_reports", lambda *args, **kwargs: None)


# Fixtures whose tests are end-to-end by construction: a whole inner pytest session, a real
# `pytest --help` process, the 43,915-dispatch real trace, or the shared `pytest -n 2` session.
# They are marked ``slow`` so `pytest -m "not slow" tests` is the inner loop; `pytest tests`
# still runs them.
_SLOW_FIXTURES = frozenset({"pytester", "pytest_help", "trace_908", "xdist_sweep"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# --- the inner loop's cost: the garbage collector ---------------------------------------------
# A full cyclic collection walks every tracked object, and this process holds the whole package,
# pandas, scipy and every test module: at the default thresholds the collector took about a
# third of the collection phase's CPU time and a tenth of the tests', while freeing next to
# nothing (the tables die by reference count). Collect less often while the tests load, then
# freeze what was loaded so later collections walk only the objects the tests make. Tests that
# need a collection at a given point call gc.collect() themselves.
gc.set_threshold(10_000, 10, 10)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.freeze()


# --- the suite's cost: fsync and temporary directories in memory ------------------------------
# The store, the run history and the output writers fsync every file and directory they write,
# so that a record survives a power cut whole; on the CI machine's ext4 disk one fsync costs
# 2-6 ms and the suite makes thousands. The tests prove what a killed writer or a refused call
# leaves behind, which is the page cache's content whatever reached the disk, so fsync is a
# no-op in this process (``no_fsync``). The processes the tests start (CLI calls, writer
# processes, pytest sessions) still fsync for real, and every test creates and pytest later
# prunes many small trees: pytest's temporary directories (tmp_path) go to the RAM file system
# /dev/shm where it exists with room to spare. A PYTEST_DEBUG_TEMPROOT or --basetemp of the
# user's own wins.
_MEMORY_FS = Path("/dev/shm")
_MEMORY_FS_MIN_FREE = 2 << 30  # a whole session's trees, three sessions kept, with margin


def _temp_root_in_memory() -> None:
    if "PYTEST_DEBUG_TEMPROOT" in os.environ:
        return
    try:
        free = shutil.disk_usage(_MEMORY_FS).free
    except OSError:
        return
    if free >= _MEMORY_FS_MIN_FREE and os.access(_MEMORY_FS, os.W_OK | os.X_OK):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(_MEMORY_FS)


_temp_root_in_memory()


# --- the suite's cost: compiling the same modules in every process ------------------------------
# Under PYTHONDONTWRITEBYTECODE (docker/Dockerfile sets it, as many CI images do) no process keeps
# the bytecode it compiles, and the checkout is installed editable, so every `python -m pytest`
# and `gemmperf` process the tests start compiled (a pytest one also assertion-rewrote) the
# plugin's modules again (measured: a `python -m pytest` of one test 2.9 CPU-s, 1.2 with its
# bytecode kept; a `gemmperf compare` 4.8, 4.4), and the suite starts dozens of each. This
# session keeps bytecode, for itself and every process it starts, in a directory of its own
# outside the checkout (PYTHONPYCACHEPREFIX), removed when the session ends: each module is
# compiled once a session. Python reads bytecode only from that directory then, so it first
# gets links to the bytecode the installation already has (the standard library and the
# installed packages: else their modules were compiled once more, torch's for seconds). Nothing
# is written where the user asked for no bytecode; a PYTHONPYCACHEPREFIX of the user's own is
# left as it is.


def _bytecode_kept_for_the_session() -> None:
    if not sys.dont_write_bytecode or sys.pycache_prefix or os.environ.get("PYTHONPYCACHEPREFIX"):
        return  # bytecode is written already; or a pytest-xdist worker of such a session
    prefix = tempfile.mkdtemp(prefix="gemmperf-pycache-", dir=os.environ.get("PYTEST_DEBUG_TEMPROOT"))
    atexit.register(shutil.rmtree, prefix, True)
    _link_installed_bytecode(Path(prefix))
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False


def _link_installed_bytecode(prefix: Path) -> None:
    """Under ``prefix``, where Python looks for the bytecode of ``DIR/name.py`` once it is the
    pycache prefix (``prefix/DIR/name.<tag>.pyc``), a link to ``DIR/__pycache__/name.<tag>.pyc``
    for every such file of the standard library and the installed packages. A stale one is
    compiled again as ever, and written in the link's place: never into the installation."""
    tag = f".{sys.implementation.cache_tag}."
    roots: list[str] = []
    for root in sorted({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}):
        if not any(root.startswith(r + os.sep) for r in roots):  # a root inside another is walked with it
            roots.append(root)
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            if os.path.basename(dirpath) != "__pycache__":
                continue
            dirnames[:] = []
            pycs = [f for f in filenames if f.endswith(".pyc") and tag in f]
            if not pycs:
                continue
            dest = prefix / os.path.dirname(dirpath).lstrip(os.sep)
            dest.mkdir(parents=True, exist_ok=True)
            for name in pycs:
                try:
                    os.symlink(os.path.join(dirpath, name), dest / name)
                except FileExistsError:
                    pass


_bytecode_kept_for_the_session()


@pytest.fixture(scope="session", autouse=True)
def no_fsync():
    """``fsync(2)`` is a no-op in this process (sessions in a subprocess still call it). It
    orders writes against power loss only, which no test can simulate; every fsync the product
    announces (store.fs steps, the fault injectors' wrappers) is still visited."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "fsync", lambda fd: None)
        yield


# ------------------------------------------------------------- set-up shared by the slow tests


@pytest.fixture(scope="session")
def xdist_sweep(tmp_path_factory):
    """The stand-in sweep run once under ``pytest -n 2`` (gemmperf_pytester_support.py:
    run_xdist_sweep), read by the xdist tests of the plugin, the progress lines, the benchmark
    JSON and the history; a test that writes there works on a copy."""
    pytest.importorskip("xdist")
    return run_xdist_sweep(tmp_path_factory.mktemp("xdist_sweep"))


# --- the first Ctrl-C or SIGTERM ends the suite ------------------------------------------------
# Tests call `gemmperf` in-process (cli.main), and cli.main turns Ctrl-C into exit status 130, as
# a command must. A signal that lands while such a call runs would then only fail that test
# (`assert 130 == 0`) and the suite would go on. So this session notes every SIGINT / SIGTERM it
# receives (then raises KeyboardInterrupt where it landed, as Python does), and a test during
# which one arrived ends the session as interrupted (pytest's exit status 2) instead of being
# reported. A test that installs its own handler (to check the product's Ctrl-C handling) is
# not affected: its signals never reach this one.
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []


def _note_and_interrupt(signum: int, frame: object) -> None:
    _received.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _SIGNALS:
        previous = signal.getsignal(sig)
        if previous is signal.SIG_IGN and sig == signal.SIGINT:
            continue  # started with Ctrl-C ignored (a background job): keep it so
        signal.signal(sig, _note_and_interrupt)
        config.add_cleanup(lambda sig=sig, previous=previous: signal.signal(sig, previous))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    if _received:
        names = ", ".join(signal.Signals(s).name for s in _received)
        raise KeyboardInterrupt(f"{names} received while {item.nodeid} ran")
    return (yield)
