"""The session's end: verdicts gathered from the test reports, run.json's final status, the
reports and the benchmark JSON written, and the ``gemmperf`` section of pytest's terminal
summary.

Test reports are the only channel from xdist workers to the controller, so everything the
summary shows arrives as the properties named in ``reporting.py``.

Registered in every pytest session, so the reports, the benchmark JSON and the verdict table
(pandas, pyarrow, the statistics) are imported only by a session that profiled something.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gemmperf.errors import GemmperfInputError, failure_line, output_error
from pytest_gemmperf.pytest_glue.options import is_worker, path_setting
from pytest_gemmperf.pytest_glue.reporting import (PROP_BASELINE, PROP_CONFIRM, PROP_ENVIRONMENT, PROP_FAULT,
                                                   PROP_GATED, PROP_INPUT, PROP_LEARNED, PROP_OUTCOME,
                                                   PROP_STATUS, PROP_VERDICTS, PROP_WARNING)
from pytest_gemmperf.pytest_glue.session import GemmperfSession
from pytest_gemmperf.run.results import RUN_JSON, link_latest
from pytest_gemmperf.textsafe import printable, printable_lines
from pytest_gemmperf.workdir import make_tool_dir, remove_unused_tool_dir


def write_results_reports(results_root: Path, report_dir: Path) -> Path | None:
    """``report.write_results_reports``, loaded by the first session that writes reports."""
    # lazy: keeps sessions without gemmperf tests fast (the reports load pandas, pyarrow, jinja2)
    from pytest_gemmperf.report import write_results_reports as write

    return write(results_root, report_dir)


def profiled(gp: GemmperfSession | None) -> bool:
    """Whether this session wrote results (``run.json`` is written with the first point)."""
    return gp is not None and (gp.results.root / RUN_JSON).is_file()


class SessionSummary:
    """Per-config hooks: gathers verdicts from test reports (the only channel from xdist
    workers to the controller), writes reports and prints the summary at the end."""

    def __init__(self, config: pytest.Config, gp: GemmperfSession) -> None:
        self.config = config
        self.gp = gp
        self.verdicts: list[dict] = []
        self.baselines: list[tuple[str, str, str]] = []
        self.compared = 0
        self.learned = 0
        self.confirmations: list[dict] = []
        #: per gemmperf item: its outcome (gate/outcome.py; an item that failed before it was
        #: gated is an ``error``), from the ``gemmperf_outcome`` property
        self.outcomes: dict[str, dict] = {}
        self.noisy: list[tuple[str, str]] = []
        self.report: str | None = None
        self.report_error: str | None = None
        self.gated: list[dict] = []  # --gemmperf-benchmark-json (benchmark_json.py)
        self.benchmark_json: str | None = None
        self.benchmark_error: str | None = None
        self.usage_error = False  # a worker's collection error from a bad axis override
        #: node ids of the collected points (None under xdist's controller, which collects
        #: nothing) and of the items whose teardown ran: run.json's complete/interrupted
        self.points: set[str] | None = None
        #: (nodeid, PROP_FAULT or PROP_INPUT, one line): writes refused, gemmperf's input damaged
        self.faults: list[tuple[str, str, str]] = []
        self.other_failures = 0  # failed reports of anything else (regressions, the test's own)
        self.warnings: list[str] = []
        self.finished: set[str] = set()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.points = {item.nodeid for item in session.items
                       if "gemmperf" in getattr(item, "fixturenames", ())}
        # run.json's points_total, whichever process creates it
        self.gp.run_fields["points_total"] = len(self.points)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.finished.add(report.nodeid)
        if report.failed:
            faults = [(report.nodeid, name, str(v)) for name, v in report.user_properties
                      if name in (PROP_FAULT, PROP_INPUT)]
            self.faults += faults
            self.other_failures += not faults
        self._outcome(report)
        if report.when != "call":
            return
        status = None
        for name, value in report.user_properties:
            if name == PROP_VERDICTS:
                self.verdicts.extend(json.loads(value))
            elif name == PROP_STATUS:
                status = str(value)
                self.compared += status.startswith("compared")
            elif name == PROP_BASELINE:
                self.baselines.append((report.nodeid, status or "", str(value)))
            elif name == PROP_LEARNED:
                self.learned += 1
            elif name == PROP_CONFIRM:
                self.confirmations.append(json.loads(value))
            elif name == PROP_ENVIRONMENT:
                self.noisy.append((report.nodeid, str(value)))
            elif name == PROP_GATED:
                self.gated.append(json.loads(value))
            elif name == PROP_WARNING:
                self.warnings.append(str(value))

    def _outcome(self, report: pytest.TestReport) -> None:
        """The item's gate outcome: the one its gate step recorded, else ``error`` for a
        gemmperf item that failed before its point was judged (workload, input, set-up)."""
        for name, value in report.user_properties:
            if name == PROP_OUTCOME:
                self.outcomes[report.nodeid] = json.loads(value)
                return
        ours = (self.points is not None and report.nodeid in self.points) or any(
            str(name).startswith("gemmperf") for name, _ in report.user_properties)
        if report.failed and ours and report.nodeid not in self.outcomes:
            text = str(getattr(report, "longreprtext", "") or "").strip().splitlines()
            self.outcomes[report.nodeid] = {"outcome": "error", "reason": text[-1] if text else report.when}

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # an xdist worker can only stop on a bad axis override with a collection error (see
        # pytest_generate_tests); the controller receives it here and ends with exit 4 as
        # without xdist: a usage error, not a test failure
        if report.failed and "gemmperf axis override:" in str(report.longrepr):
            self.usage_error = True

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = self.config
        if self.usage_error and not is_worker(config):
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        if (self.faults and not self.other_failures and not is_worker(config)
                and session.exitstatus == pytest.ExitCode.TESTS_FAILED):
            # only refused writes or damaged input failed: exit 4 as for a results directory
            # that cannot be created (1 means a regression, or a test's own failure)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        gp = self.gp
        if is_worker(config) or not profiled(gp):
            return

        state = self._finish_run(gp, session, exitstatus)
        if path_setting(config, "gemmperf_results_dir") is None and state:
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
        path = path_setting(self.config, "gemmperf_benchmark_json")
        if path is None:
            return
        # lazy: keeps sessions without gemmperf tests fast (it reads the gated tables: pandas)
        from pytest_gemmperf.pytest_glue.benchmark_json import write_session_benchmark_json

        commit = gp.metadata().get("git_commit")
        try:
            out, n = write_session_benchmark_json(
                path, gp.results.root, self.gated, outcomes=list(self.outcomes.values()),
                commit_info={"id": commit, "project": gp.rootdir.name if gp.rootdir else None} if commit else {})
        except (GemmperfInputError, OSError) as exc:
            self.benchmark_error = str(exc)
            return
        self.benchmark_json = f"{out} ({n} benchmark(s))"

    def _write_reports(self, gp: GemmperfSession) -> None:
        made = None
        try:
            # the default .gemmperf/report: a .gemmperf/ made here git-ignores itself
            made = make_tool_dir(gp.options.report_dir)
            path = write_results_reports(gp.results.root, gp.options.report_dir)
        except OSError as exc:  # a full or read-only report directory: a warning, not a failure
            self.report_error = str(output_error(exc, gp.options.report_dir))
            return
        except Exception as exc:  # a broken report must not hide the gate's verdicts
            self.report_error = failure_line(exc)
            return
        finally:
            remove_unused_tool_dir(made)
        if path is not None:
            self.report = str(path)

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        gp = self.gp
        if is_worker(config):
            return
        tr = terminalreporter
        if not profiled(gp):
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
        self._write_outcomes(tr)
        if self.learned:
            _write(tr, f"variance of {self.learned} point run(s) added to the baselines' history")
        for c in self.confirmations:
            _write(tr, _format_confirmation(c), yellow=True)
        for nodeid, text in self.noisy:  # run/environment.py: contention while the point ran
            _write(tr, f"{printable(text)} while {printable(nodeid)} ran", yellow=True)
        if self.verdicts:
            # lazy: keeps sessions without gemmperf tests fast (the verdict table needs pandas)
            from pytest_gemmperf.gate.headline import summary_table

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

    def _write_outcomes(self, tr) -> None:
        """``points: 1 failed, 1 undecided, 2 passed`` and a line per point that is not passed."""
        if not self.outcomes:
            return
        names = [str(o.get("outcome")) for o in self.outcomes.values()]
        counts = {k: names.count(k) for k in ("failed", "error", "undecided", "passed") if k in names}
        worst = next((k for k in ("failed", "error", "undecided") if counts.get(k)), "passed")
        text = ", ".join(f"{n} {k}" for k, n in counts.items())
        _write(tr, f"points: {text}", red=worst in ("failed", "error"), yellow=worst == "undecided",
               green=worst == "passed")
        for nodeid, o in self.outcomes.items():
            if o.get("outcome") == "passed":
                continue
            what = {"fail": "test failed", "skip": "test skipped", "pass": "accepted: --gemmperf-undecided pass"}
            tail = f" ({what.get(o.get('policy'), '')})" if o.get("outcome") == "undecided" else ""
            decide = f"; to decide: {o['decide']}" if o.get("decide") else ""
            _write(tr, f"{o.get('outcome')}: {printable(nodeid)}: {printable(o.get('reason') or '')}{decide}{tail}",
                   red=o.get("outcome") != "undecided", yellow=o.get("outcome") == "undecided")

    def _write_faults(self, tr) -> None:
        for nodeid, kind, line in self.faults:
            what = "not written" if kind == PROP_FAULT else "not gated"
            _write(tr, f"{what} ({printable(nodeid)}): {printable(line)}", red=True)
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
