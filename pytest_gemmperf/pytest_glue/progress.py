"""Progress lines of a pytest session: one line per event of a profiled sweep point.

A point runs for tens of seconds to minutes (``repeats`` workload processes, then rocprofv3's
counter passes) while pytest shows a single dot. :class:`ProgressReporter` writes one whole
line per event:

* the point starts (``gemmperf ▶ test[point] start: 3 runs (torch), ETA ~41 s (baseline)``;
  under ``--gemmperf-repeats auto`` followed by how the count was chosen,
  ``; repeats auto: 6 (detects +3% in 12/14 gated kernels at 80% power)``);
* each workload process (a repeat, which for rocprofv3 is one ``--kernel-trace`` timing pass)
  starts and ends, with its duration, the point's elapsed time and the ETA of the rest;
* the counter passes (one rocprofv3 call running the application once per counter group)
  start and end;
* the point ends (``gemmperf ■ test[point] passed in 41.2 s (compared: unchanged=8)``).

**Where the lines go.** In a plain session through pytest's terminal reporter:
``ensure_newline()`` first, so a line never lands behind pytest's dots (pytest then re-writes
the file name before the next dot), inside ``capturemanager.global_and_fixture_disabled()`` so
fd capture does not swallow a line written while the test runs. An xdist worker has no
terminal (its stdout is execnet's channel; its stderr is the controller's stderr, inherited):
it writes ``[gwN] gemmperf ...`` lines to file descriptor 2, each line one ``os.write`` (whole
lines below ``PIPE_BUF`` are not interleaved with other workers' lines), also outside fd
capture. Forwarding those lines to the controller has no channel in xdist before a test's
report arrives, i.e. after the point ended -- too late for progress. The point's end line is
the controller's, from that report, written just before pytest's outcome letter, which lands
behind it (after pytest's ``file.py`` prefix at default verbosity); the line is then ended, so
the workers' next lines land at the start of a line (a suite mixing gemmperf points with
ordinary tests can still have a worker line follow their dots). No letter stands alone on a
line between progress lines.

**Verbosity.** Default and ``-v``: every event. ``-q``: only the point start and end lines.
``-qq`` or ``--gemmperf-progress off``: none.

**ETA.** Expected duration of one workload process, in order: the median of the per-process
durations the baseline recorded for this point (``meta.points[<point>].run_durations_s``,
written when the baseline is saved), else the mean of this point's finished processes; a
counter pass counts as one more process. A baseline that recorded only the point's total
(``duration_s``) gives ``total - elapsed`` until a process has finished. Progress never fails
a test: an unreadable baseline simply gives no ETA.

The run layer knows nothing of this module: the runner receives a plain callable
``progress(event, **fields)`` (:class:`PointProgress`), so data flows one way.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_gemmperf.textsafe import printable
from pytest_gemmperf.run.results import RUN_JSON, item_test_id, split_nodeid
from pytest_gemmperf.pytest_glue.reporting import PROP_OUTCOME, PROP_PROGRESS, PROP_STATUS

#: events the runner emits (``progress(event, **fields)``)
POINT_START = "point_start"    # repeats, backend, counter_passes (expected), round, note
RUN_START = "run_start"        # run (0-based within this call), total, round
RUN_END = "run_end"            # run, total, duration_s, ok, round
PASSES_START = "passes_start"  # groups
PASSES_END = "passes_end"      # groups, duration_s, ok
QUIET_WAIT = "quiet_wait"      # round, waited_s, budget_s, reason (the host's disturbance), done



def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 100:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


def baseline_durations(baseline_dir: Path, test_slug: str, point_id: str,
                       hw_key: str | None = None) -> tuple[list[float], float | None]:
    """What a baseline recorded about how long ``point_id`` of the test whose record directory
    is ``test_slug`` took: (per-process seconds ``run_durations_s``, total seconds
    ``duration_s``), either possibly empty/None. Under ``hw_key`` when known, else from the
    only hardware key holding that test (several: none, they would mislead). Reads
    ``meta.json`` only; anything missing or unreadable gives ``([], None)``."""
    # lazy: keeps sessions without gemmperf tests fast (the store's modules load pandas)
    from pytest_gemmperf.store.hardware import sanitize

    try:
        if hw_key:
            metas = [Path(baseline_dir) / sanitize(hw_key) / test_slug / "meta.json"]
        else:
            metas = list(Path(baseline_dir).glob(f"*/{test_slug}/meta.json"))
        if len(metas) != 1 or not metas[0].is_file():
            return [], None
        meta = json.loads(metas[0].read_text(encoding="utf-8"))
        # the pointer meta.json holds the record's metadata under "metadata"
        points = next((p for p in ((meta.get("metadata") or {}).get("points"), meta.get("points"))
                       if isinstance(p, dict)), {})
        info = points.get(point_id) or {}
        runs = [float(x) for x in info.get("run_durations_s") or []
                if isinstance(x, (int, float)) and x > 0]
        total = info.get("duration_s")
        total = float(total) if isinstance(total, (int, float)) and total > 0 else None
        return runs, total
    except (OSError, ValueError, TypeError, AttributeError, ImportError):
        return [], None


class ProgressReporter:
    """Writes progress lines for one pytest process (controller or xdist worker).

    ``write`` is the only output path; ``level`` 0 lines (point start/end) show at ``-q``,
    level 1 lines (processes, passes) from the default verbosity up."""

    def __init__(self, config: Any, *, enabled: bool = True) -> None:
        self.config = config
        verbose = int(getattr(config.option, "verbose", 0) or 0)
        self.max_level = -1 if not enabled or verbose <= -2 else (0 if verbose == -1 else 1)
        worker = getattr(config, "workerinput", None)
        self.worker_id = (worker or {}).get("workerid") if worker is not None else None
        self.points: dict[str, PointProgress] = {}

    @property
    def enabled(self) -> bool:
        return self.max_level >= 0

    def write(self, line: str, level: int = 1, *, before: str | None = None) -> None:
        """Write ``line`` as one whole line. ``before``: the node id of the report whose
        outcome letter pytest writes right after it (the point's end line): the line is left
        open so the letter lands behind it instead of alone on the next line (see
        :meth:`pytest_runtest_logreport`)."""
        if level > self.max_level:
            return
        line = printable(line)  # test ids and point ids are user text; a progress line stays one line
        pm = self.config.pluginmanager
        capman = pm.getplugin("capturemanager")
        try:
            if capman is not None:
                with capman.global_and_fixture_disabled():
                    self._write(line, pm, before)
            else:
                self._write(line, pm, before)
        except (OSError, ValueError):  # a closed terminal must not fail the point
            pass

    def _write(self, line: str, pm: Any, before: str | None = None) -> None:
        tr = None if self.worker_id else pm.getplugin("terminalreporter")
        if tr is not None:
            tr.ensure_newline()  # after "file.py ..": pytest re-writes the file name next time
            tw = getattr(tr, "_tw", None)
            if tw is not None and tw.width_of_current_line:  # -q writes its letters bare
                tw.line()
            if before is None or tw is None:
                tr.write_line(line)
            elif tr.showfspath:
                # pytest's own "file.py " prefix ends the line and carries the letter, as
                # when no progress line came between
                tw.write(line)
                tr.currentfspath = None
                tr.write_fspath_result(before, "")
            else:
                tw.write(line + " ")  # -q and xdist write bare letters: behind the line
            tr.flush()
            return
        prefix = f"[{self.worker_id}] " if self.worker_id else ""
        enc = getattr(sys.__stderr__, "encoding", None) or "utf-8"
        os.write(2, (prefix + line + "\n").encode(enc, errors="replace"))

    def for_point(self, session: Any, nodeid: str, point_id: str,
                  on_start: Callable[[str, str], None] | None = None) -> "PointProgress | None":
        """The sink of a test item's point in ``session`` (a ``GemmperfSession``), with the ETA
        its baseline allows; None when progress is off. The hardware key is the one this
        session's first profiled point found (``run.json``), if any. ``on_start(name, value)``
        (the item's user property recorder) hears ``gemmperf_progress`` when the point starts,
        so the controller of an xdist session knows the report is a profiled point's."""
        if not self.enabled:
            return None

        hw_key = None
        try:
            hw_key = json.loads((session.results.root / RUN_JSON).read_text(encoding="utf-8")).get("hardware_key")
        except (OSError, ValueError, AttributeError):
            pass
        # lazy: keeps sessions without gemmperf tests fast (the store's modules load pandas)
        from pytest_gemmperf.store.record import legacy_keys, slug_for_test

        test_id = item_test_id(nodeid, point_id)
        runs, total = [], None
        # a record still under an old key of the test (store/baselines.py reads it there) times it too
        for slug in (slug_for_test(test_id), *(old for _, old in legacy_keys(test_id))):
            runs, total = baseline_durations(session.options.baseline_dir, slug, point_id, hw_key)
            if runs or total is not None:
                break
        p = self.point(nodeid, point_id, baseline_runs=runs, baseline_total=total)
        p.on_start = on_start
        return p

    def point(self, nodeid: str, point_id: str, *, baseline_runs: list[float] | None = None,
              baseline_total: float | None = None,
              clock: Callable[[], float] = time.monotonic) -> "PointProgress":
        """The sink for one test item's point; remembered until its report arrives."""
        # the test's own name (other parametrizations included) and the point: two items of
        # one function never print alike

        head = split_nodeid(nodeid)[0]
        function = head.rsplit("::", 1)[-1]
        label = f"{item_test_id(nodeid, point_id)[len(head) - len(function):]}[{point_id}]"
        p = PointProgress(self, label, baseline_runs or [], clock, baseline_total)
        self.points[nodeid] = p
        return p

    # pytest hooks (the reporter is registered as a plugin by hooks.py)
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_logreport(self, report: Any):
        """The point's end line, once its call phase is reported: outcome, time, gate status.

        Written by the process owning the terminal: locally, or under xdist by the controller
        from the worker's report (which carries the ``gemmperf_progress`` property and the
        call's duration). Where it goes relative to pytest's outcome for the item:

        * ``-v``: after pytest's ``PASSED`` line, on a line of its own;
        * otherwise before pytest's letter, which then lands behind it -- after pytest's
          ``file.py`` prefix on the next line (default verbosity), or at the end of the line
          itself (``-q`` and xdist, whose letters are bare), a line then ended, so the
          workers' next lines start a line of their own. Written after the letter, the end
          line left that letter alone on a line of its own."""
        line = self._end_line(report) if self.enabled else None
        after = line is not None and self._verbose()
        tr = self.config.pluginmanager.getplugin("terminalreporter")
        if line is not None and not after:
            self.write(line, level=0, before=report.nodeid)
        yield
        if after:
            self.write(line, level=0)
        elif line is not None and tr is not None and not tr.showfspath:
            _end_terminal_line(tr)  # the letter behind our line ends it

    @pytest.hookimpl(tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The letter line begun by the last end line's file prefix is over: a summary line
        written next must not open with an empty line (pytest still thinks it is in that file)."""
        tw = getattr(terminalreporter, "_tw", None)
        if self.enabled and tw is not None and not tw.width_of_current_line:
            terminalreporter.currentfspath = None

    def _verbose(self) -> bool:
        return int(getattr(self.config.option, "verbose", 0) or 0) > 0

    def _end_line(self, report: Any) -> str | None:
        """The end line of a point's call report, None for any other report (and on an
        xdist worker, whose controller writes it); forgets the point's sink."""
        if report.when != "call":
            return None
        local = self.points.pop(report.nodeid, None)
        if self.worker_id:
            return None
        label = next((str(v) for k, v in report.user_properties if k == PROP_PROGRESS), None)
        if local is not None and local.started is not None:
            label, seconds = local.label, local.elapsed()
        elif label is not None:
            seconds = float(getattr(report, "duration", 0.0) or 0.0)
        else:
            return None

        status = next((str(v) for k, v in report.user_properties if k == PROP_STATUS), None)
        outcome = next((_outcome_of(v) for k, v in report.user_properties if k == PROP_OUTCOME), None)
        if outcome:  # the gate's outcome (gate/outcome.py) beside pytest's
            status = f"{outcome}; {status}" if status else outcome
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        who = f"[{gateway.id}] " if gateway is not None else ""
        what = f" ({status})" if status else ""
        return f"{who}gemmperf ■ {label} {report.outcome} in {_fmt_s(seconds)}{what}"


def _outcome_of(value: Any) -> str:
    try:
        return str(json.loads(value).get("outcome") or "")
    except (TypeError, ValueError, AttributeError):
        return ""


def _end_terminal_line(tr: Any) -> None:
    """End the terminal reporter's current line unless it is empty (pytest's progress
    percentage, written past the right edge, ends it itself); a closed terminal is ignored."""
    tw = getattr(tr, "_tw", None)
    try:
        if tw is not None and tw.width_of_current_line:
            tw.line()
            tr.flush()
    except (OSError, ValueError):
        pass


class PointProgress:
    """Callable sink of one point: ``progress(event, **fields)`` -> a line, with the ETA."""

    def __init__(self, reporter: ProgressReporter, label: str, baseline: list[float],
                 clock: Callable[[], float], baseline_total: float | None = None) -> None:
        self.reporter = reporter
        self.label = label
        self.baseline = baseline
        self.baseline_total = baseline_total
        self.clock = clock
        self.started: float | None = None
        self.done: list[float] = []        # durations of this point's finished processes
        self.remaining_runs = 0
        self.groups = 0                    # counter passes still to come (0: none)
        self.on_start: Callable[[str, str], None] | None = None

    def elapsed(self) -> float:
        return 0.0 if self.started is None else self.clock() - self.started

    def per_run(self) -> tuple[float | None, str]:
        if self.baseline:
            return statistics.median(self.baseline), "baseline"
        if self.done:
            return sum(self.done) / len(self.done), "this point"
        return None, ""

    def eta(self) -> str:
        per, where = self.per_run()
        if per is None and self.baseline_total is not None:
            return f", ETA {_fmt_s(max(0.0, self.baseline_total - self.elapsed()))} (baseline)"
        if per is None:
            return ""
        left = per * (self.remaining_runs + self.groups)
        return f", ETA {_fmt_s(left)} ({where})"

    def __call__(self, event: str, **f: Any) -> None:
        try:
            self._event(event, f)
        except Exception:  # progress is cosmetic; never let it decide a test
            pass

    def _event(self, event: str, f: dict[str, Any]) -> None:
        rnd = int(f.get("round", 0) or 0)
        tag = f" confirmation round {rnd}:" if rnd else ""
        if event == POINT_START:
            if self.started is None and self.on_start is not None:
                self.on_start(PROP_PROGRESS, self.label)
            if self.started is None or not rnd:
                self.started = self.clock()
            self.remaining_runs = int(f.get("repeats", 0))
            self.groups = int(f.get("counter_passes", 0) or 0)
            passes = f" + {self.groups} counter pass(es)" if self.groups else ""
            # how the count was chosen (--gemmperf-repeats auto), on the first round's line
            note = f"; {f['note']}" if f.get("note") and not rnd else ""
            self.reporter.write(f"gemmperf ▶ {self.label}{tag} start: {self.remaining_runs} "
                                f"process(es){passes} ({f.get('backend', '?')}){self.eta()}{note}", level=0)
        elif event == RUN_START:
            self.reporter.write(f"gemmperf   {self.label}{tag} run {f['run'] + 1}/{f['total']} started"
                                f" (elapsed {_fmt_s(self.elapsed())}{self.eta()})")
        elif event == RUN_END:
            d = f.get("duration_s")
            if d is not None:
                self.done.append(float(d))
            self.remaining_runs = max(0, int(f["total"]) - int(f["run"]) - 1)
            state = "done" if f.get("ok", True) else "FAILED"
            self.reporter.write(f"gemmperf   {self.label}{tag} run {f['run'] + 1}/{f['total']} {state} "
                                f"in {_fmt_s(d)} (elapsed {_fmt_s(self.elapsed())}{self.eta()})")
        elif event == PASSES_START:
            self.groups = int(f.get("groups", 0))
            self.reporter.write(f"gemmperf   {self.label} counter passes 1-{self.groups}/{self.groups} "
                                f"started (one rocprofv3 call; elapsed {_fmt_s(self.elapsed())}{self.eta()})")
        elif event == QUIET_WAIT:
            waited, budget = _fmt_s(f.get("waited_s")), _fmt_s(f.get("budget_s"))
            if not f.get("done"):
                line = f"waiting for a quiet machine ({printable(f.get('reason') or '')}), {waited} of {budget}"
            elif f.get("reason"):
                line = f"still disturbed after {waited} ({printable(f['reason'])}): re-running anyway"
            else:
                line = f"machine quiet after {waited}: re-running"
            self.reporter.write(f"gemmperf   {self.label}{tag} {line}", level=0)
        elif event == PASSES_END:
            self.groups = 0
            state = "done" if f.get("ok", True) else "FAILED"
            self.reporter.write(f"gemmperf   {self.label} counter passes {state} in "
                                f"{_fmt_s(f.get('duration_s'))} (elapsed {_fmt_s(self.elapsed())})")
