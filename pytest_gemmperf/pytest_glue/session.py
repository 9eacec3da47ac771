"""The per-session object: options, backend, metadata and the results directory of one pytest
session (each xdist worker has its own object; all share the controller's directory).

Made in every pytest session, including those that run no gemmperf test, so what only a
profiled point needs (the baseline store, the run metadata) is imported on first use.
"""

from __future__ import annotations

import copy
import datetime as _dt
import inspect
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import pytest

from pytest_gemmperf.pytest_glue.history import HistorySettings
from pytest_gemmperf.pytest_glue.options import Options, flag_name, path_setting
from pytest_gemmperf.redact import redact_argv
from pytest_gemmperf.run import results as run_results
from pytest_gemmperf.run.backend import BackendChoice, select_backend
from pytest_gemmperf.run.results import ResultsDir, missing_ancestor, remove_unused
from pytest_gemmperf.workdir import TOOL_DIR, make_tool_dir, remove_unused_tool_dir

if TYPE_CHECKING:
    from pytest_gemmperf.store.baselines import BaselineStore


class GemmperfSession:
    """Per-process state of one pytest session (each xdist worker has its own)."""

    def __init__(self, options: Options, *, argv: Sequence[str] = (), rootdir: Path | None = None,
                 history: HistorySettings | None = None) -> None:
        self.options = options
        #: where this session's run history goes (None: turned off); handed to each point's gate
        self.history = history
        self.results = ResultsDir(options.results_dir)
        self.argv = list(argv)
        self.rootdir = rootdir
        self._backend: BackendChoice | None = None
        self._metadata: dict[str, Any] | None = None
        #: extra run.json fields set before the first point runs (plugin: the shard plan)
        self.run_fields: dict[str, Any] = {}
        #: point directories this process made: the only ones a later try may replace
        self.created_points: set[Path] = set()

    @property
    def backend(self) -> BackendChoice:
        if self._backend is None:
            self._backend = select_backend(self.options.backend, rocprofv3_exe=self.options.rocprofv3,
                                           replay_dir=self.options.replay_dir)
        return self._backend

    def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            # lazy: keeps sessions without gemmperf tests fast (pandas); a profiled point asks first
            from pytest_gemmperf.store.hardware import collect_metadata

            self._metadata = collect_metadata(self.rootdir)
        return self._metadata

    def ensure_results(self) -> ResultsDir:
        """Create the run directory and run.json on first use (a session that profiles nothing
        leaves no directory behind)."""
        o = self.options
        meta = {
            "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
            "argv": redact_argv(self.argv),
            "rootdir": str(self.rootdir) if self.rootdir else None,
            "backend": self.backend.name,
            "device": self.backend.device,
            "backend_reason": self.backend.reason,
            "repeats": o.repeats,
            "threshold": o.threshold,
            "versions": self.metadata(),
            "host": self.metadata().get("host"),
            "git_commit": self.metadata().get("git_commit"),
        }
        if o.warmup is not None:
            meta["warmup"] = o.warmup
        meta.update(self.run_fields)
        self.results.ensure(meta)
        return self.results

    def baseline_store(self) -> BaselineStore:
        # lazy: keeps sessions without gemmperf tests fast (pandas); a profiled point asks first
        from pytest_gemmperf.store.baselines import BaselineStore

        return BaselineStore(self.options.baseline_dir)


def create_results_dir(config: pytest.Config) -> Path:
    """This session's results directory, made now by the controller (xdist workers receive its
    path), so no other session can take it: ``--gemmperf-results-dir`` as given (reusing it is
    the user's choice), else a fresh ``.gemmperf/results/<timestamp>-<random>`` (a new
    ``.gemmperf/`` git-ignores itself: ``workdir.py``). Removed again at the end when nothing
    was profiled into it."""
    given = path_setting(config, "gemmperf_results_dir")
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
        where = flag_name(config, "gemmperf_results_dir") if given is not None else "gemmperf results"
        raise pytest.UsageError(f"{where}: cannot create {target}: {exc.strerror or exc}") from None

    def cleanup() -> None:
        remove_unused(path, top)
        remove_unused_tool_dir(made)

    config.add_cleanup(cleanup)
    return path


def anchor_to_project(config: pytest.Config, parser: pytest.Parser, args: list[str]) -> bool:
    """Put pytest's rootdir and configuration file back where the project is, when the value
    of a gemmperf option given in its space form (``--gemmperf-baseline-dir /shared/base``)
    moved them; True when it did.

    pytest finds its rootdir and configuration file before any plugin's options are known, so
    it takes such a value for a test path: the rootdir becomes the common ancestor of the
    project and the value, every test id gains a prefix (``w/proj/perf/t.py::test``), a store
    recorded under the other spelling is not found, and the default outputs land outside the
    project. Redone here with the options known (the hook runs before conftests are loaded
    and tests collected), the result is what ``--opt=V`` gives.

    A configuration file found only now contributes its ``addopts`` as well; plugins named
    there with ``-p`` cannot be loaded this late."""
    # lazy: pytest's own search, needed only at start-up
    from _pytest.config.findpaths import determine_setup

    given = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *map(str, config.invocation_params.args)]
    ns = parser.parse_known_args(given, namespace=copy.copy(config.option))
    wanted = {"inifile": ns.inifilename, "override_ini": getattr(ns, "override_ini", None),
              "args": ns.file_or_dir, "rootdir_cmd_arg": ns.rootdir or None,
              "invocation_dir": config.invocation_params.dir}
    accepted = inspect.signature(determine_setup).parameters
    try:
        found = determine_setup(**{k: v for k, v in wanted.items() if k in accepted})
    except (pytest.UsageError, OSError, TypeError, ValueError):  # pytest's first answer stands
        return False
    rootpath, inipath, inicfg = found[0], found[1], found[2]
    if rootpath == config.rootpath and inipath == config.inipath:
        return False
    old_anchor = str(config.inipath.parent if config.inipath else config.rootpath)
    old_addopts = list(config.getini("addopts"))
    config._rootpath = rootpath  # noqa: SLF001 - pytest has no setter: its own first answer
    config._inipath = inipath  # noqa: SLF001
    setattr(config, "_inicfg" if hasattr(config, "_inicfg") else "inicfg", inicfg)
    config._inicache.clear()  # noqa: SLF001
    parser.extra_info.update(rootdir=str(rootpath), inifile=str(inipath))
    addopts = list(config.getini("addopts"))
    if addopts != old_addopts:
        args[:] = [*addopts, *args]
    config.known_args_namespace = parser.parse_known_args(args, namespace=copy.copy(config.option))
    if config.known_args_namespace.confcutdir in (None, old_anchor):
        config.known_args_namespace.confcutdir = str(inipath.parent if inipath else rootpath)
    return True
