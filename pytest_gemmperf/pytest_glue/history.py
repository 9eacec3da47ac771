"""The pytest side of the run history: append each gated point, check it for slow creep.

``options.py`` resolves the options into :class:`HistorySettings` (one run id and time per
session, made by the controller and handed to xdist workers), kept by the session object; each
point's gate step is handed a :class:`HistorySink` and records its values after its verdicts
(``gate_step.py``), then fails on slow creep with :func:`fail_on_creep`; a run far outside its
series (``history/suspects.py``) is named at once as a suspect in the terminal summary (a
warning: one run is not a change point yet). Every point appends
its own immutable file (``HistoryStore.append``: one file per call, a fresh uuid in its name),
so concurrent workers never read-modify-write anything.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pytest_gemmperf.config import HISTORY_OFF
from pytest_gemmperf.errors import GemmperfInputError, output_error
from pytest_gemmperf.textsafe import printable_lines
from pytest_gemmperf.workdir import make_tool_dir
from pytest_gemmperf.pytest_glue.reporting import PROP_WARNING
import pytest

if TYPE_CHECKING:
    import pandas as pd

    from pytest_gemmperf.pytest_glue.result import PointResult

#: values of --gemmperf-history that turn the history off (the settings table's)
OFF_VALUES = HISTORY_OFF
DEFAULT_WINDOW = 5
#: CI variables naming the branch being built (GitHub Actions, GitLab CI, Jenkins, Buildkite)
_BRANCH_VARS = ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BRANCH_NAME", "BUILDKITE_BRANCH")


@dataclass(frozen=True)
class HistorySettings:
    """Where this session's history goes and whether it is checked for slow creep."""

    url: str
    run_id: str
    time: str
    branch: str | None = None
    check: bool = False
    window: int = DEFAULT_WINDOW

    def as_workerinput(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "time": self.time, "branch": self.branch}


def new_run(results_dir: Path, rootdir: Path | None) -> dict[str, Any]:
    """Run id, time and branch of a new session (the xdist controller's; workers get a copy).

    The id is the results directory's name plus a random suffix: a fixed
    ``--gemmperf-results-dir`` reused by every CI job, or two machines starting in the same
    second, still give distinct runs."""
    now = _dt.datetime.now(_dt.timezone.utc).isoformat()
    return {"run_id": f"{Path(results_dir).name}-{uuid.uuid4().hex[:8]}", "time": now,
            "branch": current_branch(rootdir)}


def current_branch(cwd: Path | None) -> str | None:
    """The branch being tested: a CI variable when set (CI checkouts are often detached),
    else ``git rev-parse --abbrev-ref HEAD`` (None when detached or not a repository)."""
    for var in _BRANCH_VARS:
        if os.environ.get(var):
            return os.environ[var]
    git = shutil.which("git")
    if not git:
        return None
    try:
        out = subprocess.run([git, "rev-parse", "--abbrev-ref", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    name = out.stdout.strip() if out.returncode == 0 else ""
    return name if name and name != "HEAD" else None


class HistorySink:
    """Where a session's points record their history values (built per point by the runner)."""

    def __init__(self, settings: HistorySettings, *, metadata: Callable[[], dict[str, Any]],
                 results_root: Path, record: Callable[[str, str], None]) -> None:
        self.settings = settings
        self.metadata = metadata
        self.results_root = results_root
        #: the test report's properties: where a history that could not be written is noted
        self._record = record

    def record(self, test_id: str, point_id: str, result: PointResult, samples: pd.DataFrame) -> str:
        """Append the values this point's gate used; with ``--gemmperf-history-check`` return the
        slow-creep failure text (empty when none). A history that cannot be written is reported
        and does not fail the test unless the check was asked for (it needs the history)."""
        # the plugin loads this module in every pytest session; only a gated point writes history
        # lazy: keeps every session fast (the history store and its values need pandas, pyarrow)
        from pytest_gemmperf.history.store import HistoryStore, RunInfo
        from pytest_gemmperf.history.values import history_values  # lazy: likewise

        hs = self.settings
        where = f"{test_id}[{point_id}]"
        meta_all = self.metadata()
        telemetry = (result.environment or {}).get("telemetry") if isinstance(result.environment, dict) else None
        meta = {"versions": {k: v for k, v in meta_all.items() if k.endswith("_version") and v},
                "host": meta_all.get("host"), "backend": result.backend.name,
                "xdist_worker": os.environ.get("PYTEST_XDIST_WORKER"),
                "results_dir": str(self.results_root)}
        if telemetry:
            meta["telemetry"] = telemetry
        try:
            if "://" not in hs.url:
                make_tool_dir(hs.url)  # the default .gemmperf/history: a new .gemmperf/ git-ignores itself
            store = HistoryStore(hs.url)
            run = RunInfo(run_id=hs.run_id, time=hs.time, commit=meta_all.get("git_commit"), branch=hs.branch,
                          hw_key=result.hw_key, meta=meta)
            store.append(history_values(samples, test=test_id), run)
        except (OSError, GemmperfInputError) as exc:
            why = output_error(exc, hs.url) if isinstance(exc, OSError) else exc
            text = f"{where}: history not recorded in {hs.url}: {why}"
            if hs.check:
                raise _fail(f"gemmperf: {text}")
            print(f"gemmperf: {text}", file=sys.stderr)
            # the gate stands without it, but a history with holes must not go unnoticed: the
            # plugin lists this in the session's terminal summary
            self._record(PROP_WARNING, text)
            return ""
        if not hs.check:
            return ""
        h = _point_history(store, test_id, point_id, result.hw_key)
        for line in suspect_lines(h, result.hw_key, gate_threshold(result.dir, self.results_root)):
            # not a failure: one run is not a change point yet; the terminal summary lists it
            print(printable_lines(f"gemmperf: {line}"), file=sys.stderr)
            self._record(PROP_WARNING, line)
        return creep_text(store, test_id, point_id, result.hw_key, hs.window, history=h)


def _point_history(store, test: str, point: str, hw_key: str) -> pd.DataFrame:
    """This (test, point)'s series on ``hw_key``; an unreadable history fails the test in one line."""
    try:
        return store.read(test=test, hw_key=hw_key, point=point)
    except GemmperfInputError as exc:
        raise _fail(f"gemmperf: {test}[{point}]: history check: {exc}") from None


def gate_threshold(point_dir: Path, results_root: Path) -> float:
    """The threshold this point was gated at, as the run recorded it: the test's own rule
    (``point.json``), else the session's (``run.json``), else the gate's default."""
    # lazy: the gate's configuration loads numpy; only the history check asks
    from pytest_gemmperf.gate.gate_config import GateConfig

    for path in (Path(point_dir) / "point.json", Path(results_root) / "run.json"):
        try:
            value = json.loads(path.read_text(encoding="utf-8")).get("threshold")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf"):
            return float(value)
    return GateConfig().threshold


def suspect_lines(history: pd.DataFrame, hw_key: str, threshold: float) -> list[str]:
    """One line per series of ``history`` whose newest run is a suspected regression
    (``history/suspects.py``), naming how many more runs would confirm it; none: []."""
    # lazy: like the change detection, only --gemmperf-history-check needs it
    from pytest_gemmperf.history.suspects import format_suspects, newest_run_suspects

    if history.empty:
        return []
    found = newest_run_suspects(history, threshold)
    return [f"{line.strip()} (history, {hw_key})" for line in format_suspects(found, len(found)).splitlines()]


def creep_text(store, test: str, point: str, hw_key: str, window: int, history: pd.DataFrame | None = None) -> str:
    """Regression change points of this (test, point) on ``hw_key`` whose first worse run is
    among the last ``window`` runs, as a failure message naming the runs; empty when none.
    ``history``: the series already read (else read here)."""
    try:
        # lazy: only --gemmperf-history-check needs change detection (scipy); a missing one is a one-line failure
        from pytest_gemmperf.history.changepoints import detect_changes, format_changes, recent_regressions
    except ImportError:
        raise _fail("gemmperf: --gemmperf-history-check: change detection unavailable "
                    "(pytest_gemmperf.history.changepoints is not installed)") from None
    h = _point_history(store, test, point, hw_key) if history is None else history
    if h.empty:
        return ""
    recent = recent_regressions(detect_changes(h, source=store.url), h, window)
    if recent.empty:
        return ""
    return (f"gemmperf: history of {test}[{point}] on {hw_key} ({store.url}): {len(recent)} regression "
            f"change point(s) within the last {window} run(s) (slow creep):\n" + format_changes(recent))


def fail_on_creep(text: str, *, warn_only: bool) -> None:
    """Fail the test with ``text`` (or, with ``--gemmperf-warn-only``, only report it)."""
    if not text:
        return
    if warn_only:
        print(printable_lines(text + " [--gemmperf-warn-only: not failing]"), file=sys.stderr)
        return
    raise _fail(text)


def _fail(message: str):
    return pytest.fail.Exception(printable_lines(message), pytrace=False)
