"""The gate step of a sweep point (``assert_no_regression``), in one direction:

validate the inputs -> samples -> compare with the stored baseline -> confirmation re-runs ->
verdicts -> ``point.json`` written once -> run history recorded -> baseline saved.

Each stage is a method of :class:`GateStep`, an object built by the runner (``point.py``) with
what it works on handed in explicitly: the point's results, the options, the baseline store,
the reporter, the re-runs collaborator and the history sink. A stage only reads what the
stages before it produced, so a point's outcome is final before anything lasting (point.json's
gate fields, the history, the baseline) is written. Bad input fails the test in the first stage;
a regression or slow creep fails it after the last, with every file written. The comparison
takes the baseline record's merge lock only to read it; recording a baseline holds it from the
read to the save.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest
from filelock import FileLock

from pytest_gemmperf import safe_io
from pytest_gemmperf.config import parse_threshold
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.compare import GateConfig, compare
from pytest_gemmperf.gate.confirm import CONFIRM, DECIDE, ConfirmConfig, PointJudge
from pytest_gemmperf.gate.outcome import UNDECIDED, PointOutcome, decide_plan, point_outcome
from pytest_gemmperf.gate.metrics import DUR_NS
from pytest_gemmperf.gate.samples import gate_samples
from pytest_gemmperf.gate.headline import change_text, format_verdict_table
from pytest_gemmperf.gate.verdict import VERDICT_COLUMNS
from pytest_gemmperf.pytest_glue.benchmark_json import gated_property
from pytest_gemmperf.pytest_glue.history import HistorySink, fail_on_creep
from pytest_gemmperf.pytest_glue.options import Options
from pytest_gemmperf.pytest_glue.reporting import (PROP_BASELINE, PROP_CONFIRM, PROP_LEARNED, PROP_OUTCOME,
                                                   PROP_PREFIX, PROP_STATUS, PROP_VERDICTS, PointReporter, emit,
                                                   fail_now)
from pytest_gemmperf.pytest_glue.reruns import Reruns
from pytest_gemmperf.pytest_glue.result import PointResult
from pytest_gemmperf.report.before_after import write_point_baseline
from pytest_gemmperf.run.environment import Disturbance
from pytest_gemmperf.run.results import POINT_JSON, ResultsDir, moved_test_ids, write_point_json
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.compare_inputs import baseline_disturbance, gate_evidence, round_record
from pytest_gemmperf.store.record import BaselineRecord
from pytest_gemmperf.store.verdicts_file import merge_verdicts
from pytest_gemmperf.sweep import SweepPoint, invalid_env
from pytest_gemmperf.textsafe import printable, printable_frame, printable_lines

#: rows of the verdict table in a failure message
FAIL_TABLE_ROWS = 20


@dataclass(frozen=True)
class Checked:
    """What validation found: the test's own threshold rule, the warm-up in force and what is
    wrong with the environment (a run nobody meant is no reference)."""

    rule: float | None
    warmup: int
    bad_env: tuple[str, ...] = ()


@dataclass
class Confirmation:
    """What the confirmation re-runs did (point.json's ``confirmation``) and their line."""

    summary: dict[str, Any]
    text: str


@dataclass
class Outcome:
    """A gated point's result: its verdicts (empty when a baseline was recorded), whether a
    baseline was recorded or updated, and the failure text still to raise."""

    verdicts: pd.DataFrame
    recording: bool
    confirmation: Confirmation | None = None
    messages: list[str] = field(default_factory=list)


class GateStep:
    """Gates one profiled sweep point against its stored baseline (see the module text)."""

    def __init__(self, *, test_id: str, point: SweepPoint, results: ResultsDir, options: Options,
                 store: BaselineStore, reporter: PointReporter, reruns: Reruns,
                 history: HistorySink | None, metadata: Callable[[], dict[str, Any]]) -> None:
        self.test_id = test_id
        self.point = point
        self.results = results
        self.options = options
        self.store = store
        self.reporter = reporter
        self.reruns = reruns
        self.history = history
        self.metadata = metadata
        #: the lines this step showed (a recorded baseline's)
        self.messages: list[str] = []

    @property
    def where(self) -> str:
        return f"{self.test_id}[{self.point.id}]"

    def run(self, result: PointResult, *, threshold: float | str | None = None,
            warmup: int | None = None) -> pd.DataFrame:
        """The whole step; returns the verdicts table (empty when a baseline was recorded)."""
        checked = self.validate(result, threshold, warmup)
        samples = self.samples(result, checked.warmup)
        lock = _merge_lock(self.store, self.test_id, result.hw_key)
        outcome = None
        with lock:
            base = self.store.load(self.test_id, result.hw_key)
            base_pt = (base.samples[base.samples["point"].astype(str) == self.point.id]
                       if base is not None else None)
            recording = self.options.update_baselines or base_pt is None or base_pt.empty
            if base is None and not self.options.update_baselines:
                self._refuse_moved_identity(result.hw_key)
            confirmation = None
            evidence: dict[str, Any] = {}
            if recording:
                verdicts = _empty_verdicts()
            else:
                lock.release()  # a comparison saves no record: the other points' writers go on
                cfg = _gate_config(checked.rule if checked.rule is not None else self.options.threshold)
                history = base.history_for(self.point.id)
                evidence = gate_evidence(cfg, ConfirmConfig(rounds=max(0, int(self.options.confirm))),
                                         self.store.path_for(self.test_id, result.hw_key), base, base_pt,
                                         history, result.dispatches, self.reruns.assess(result.environment),
                                         baseline_disturbance(base.meta, self.point.id))
                judge = PointJudge(
                    lambda cand, gate_cfg: self.compare(base_pt, cand, gate_cfg, history),
                    samples, cfg, ConfirmConfig(rounds=evidence["confirm_rounds"]),
                    Disturbance.from_dict(evidence["first"]["disturbance"]),
                    Disturbance.from_dict(evidence["baseline"]["disturbance"]))
                confirmation = self.confirm(result, judge, checked, evidence)
                self.decide(result, judge, checked, evidence)
                verdicts = self.verdicts(result, base_pt, judge.verdicts)
                outcome = point_outcome(verdicts)
                evidence["outcome"] = outcome.as_dict()
                self._record_outcome(outcome)
            self.write_point_json(result.dir, checked, confirmation, None if recording else verdicts, evidence)
            creep = self.record_history(result, samples)
            self.save_baseline(result, samples, base, base_pt, checked, recording)
        self.finish(result, verdicts, confirmation, creep, outcome)
        return verdicts

    # -- the stages, in order
    def validate(self, result: PointResult, threshold: float | str | None, warmup: int | None) -> Checked:
        """The test's threshold parsed as the command line's, the point's gated dispatches
        present, the environment checked: a bad input fails the test with one line before any
        work is done."""
        rule = None
        if threshold is not None:
            try:
                rule = parse_threshold(threshold)
            except ValueError as exc:
                raise fail_now(f"gemmperf: {self.where}: assert_no_regression: {exc}") from None
        self._check_dispatches(result)
        w = warmup if warmup is not None else self.options.warmup
        return Checked(rule=rule, warmup=int(w or 0), bad_env=tuple(invalid_env(result.env)))

    def samples(self, result: PointResult, warmup: int) -> pd.DataFrame:
        """The gate's samples of ``result`` (also of each confirmation round's processes)."""
        self._check_dispatches(result)
        try:
            samples = gate_samples(result.dispatches, kernels=list(self.point.kernels), warmup=warmup,
                                   compact=True, path=result.paths["dispatches"])
        except GemmperfInputError as exc:
            raise fail_now(f"gemmperf: {self.where}: {exc}") from None
        for note in samples.attrs.get("notes", []):
            emit(f"gemmperf: {self.where}: {note}")
        # --gemmperf-benchmark-json: the controller exports this point at the session's end
        self.reporter.record(*gated_property(self.test_id, self.point.id, warmup, self.point.kernels))
        if len(samples) == 0:
            raise fail_now(f"gemmperf: {self.where}: no samples left after warm-up removal; profile "
                           "more steps or lower --gemmperf-warmup")
        return samples

    def compare(self, base_pt: pd.DataFrame, samples: pd.DataFrame, cfg: GateConfig,
                history: pd.DataFrame | None) -> pd.DataFrame:
        return compare(base_pt, samples, cfg, test=self.test_id, history=history)

    def confirm(self, result: PointResult, judge: PointJudge, checked: Checked,
                evidence: dict[str, Any]) -> Confirmation | None:
        """Confirm before blocking (gate/confirm.py): re-run a suspicious point up to
        ``--gemmperf-confirm`` rounds; the new processes join the candidate and the point is
        judged again (combined comparison + the re-run alone must reproduce). Each round's
        processes and disturbance go into ``evidence`` (point.json ``gate``), from which
        ``gemmperf compare`` judges the point the same way."""
        if not judge.confirm_owed():
            return None
        trigger = judge.trigger()
        why = ", ".join(f"{r.kernel} {r.metric} {r.verdict} {change_text(r.ratio, r.ci_low, r.ci_high)}"
                        for r in trigger.head(3).itertuples(index=False))
        summary: dict[str, Any] = {"trigger": why, "rounds": 0, "extra_processes": 0, "changes": [],
                                   "environment": []}
        while judge.confirm_owed():
            round_no = judge.rounds + 1
            emit(f"gemmperf: {self.where}: confirming ({printable(why)}): re-run round {round_no}")
            last = (evidence["rounds"][-1] if evidence["rounds"] else evidence["first"])["disturbance"]
            got = self.reruns.rerun(result, len(evidence["rounds"]) + 1, self._point_fields(checked),
                                    quiet=Disturbance.from_dict(last).disturbed)
            if got is None:
                summary["skipped"] = f"the {self.reruns.backend.name} backend cannot re-run a point"
                break
            extra, env = got
            extra_samples = self.samples(extra, checked.warmup)
            disturbance = self.reruns.assess(env)
            evidence["rounds"].append(round_record(CONFIRM, extra.dispatches, disturbance,
                                                   env.get("quiet_wait_s", 0.0)))
            judge.add_round(extra_samples, Disturbance.from_dict(evidence["rounds"][-1]["disturbance"]))
            summary["rounds"] = round_no
            # the round's share of the FDR budget (rounds share one budget: no free extra looks)
            summary.setdefault("fdr_per_round", []).append(judge.cfg.fdr * judge.config.fdr_share(round_no))
            summary["extra_processes"] += int(extra_samples.loc[extra_samples["metric"] == DUR_NS, "unit"].nunique())
            summary["changes"] = judge.changes
            summary["environment"].append(disturbance.as_dict())
        summary["final"] = _verdict_counts(judge.verdicts)
        self.reporter.record(PROP_CONFIRM, json.dumps({"test": self.test_id, "point": self.point.id, **summary}))
        changed = "; ".join(f"{printable(c['kernel'])} {c['metric']}: {c['before']} -> {c['after']}"
                            for c in summary["changes"][:5]) or "no verdict changed"
        text = (f"confirmation ran ({summary['rounds']} round(s), +{summary['extra_processes']} "
                f"processes; triggered by {printable(why)}): {changed}")
        emit(f"gemmperf: {self.where}: {text}")
        return Confirmation(summary=summary, text=text)

    def decide(self, result: PointResult, judge: PointJudge, checked: Checked, evidence: dict[str, Any]) -> None:
        """Try to decide before giving up: a point left undecided only by CIs across the
        threshold is re-run (rounds of its repeats) until it has the candidate processes the
        CIs need ("needs >= N processes per side", with the baseline's own count), at most
        ``--gemmperf-max-repeats`` runs in all, while the rounds fit in
        ``--gemmperf-decide-budget`` seconds. Each round is judged on the combined sample; a
        regression must be reproduced by the re-runs alone. What happened goes into
        ``evidence["decide"]`` and a line."""
        budget = float(self.options.decide_budget_s or 0.0)
        if budget <= 0 or point_outcome(judge.verdicts).outcome != UNDECIDED or not self.reruns.can_rerun():
            return
        runs_done = len(evidence["first"]["runs"]) + sum(len(r["runs"]) for r in evidence["rounds"])
        units = judge.combined.loc[judge.combined["metric"] == DUR_NS, "unit"].nunique()
        plan = decide_plan(judge.verdicts, units, runs_done, self.options.max_repeats)
        if plan is None:
            return
        need, target = plan.need, plan.target
        info: dict[str, Any] = {"need_per_side": need, "baseline_processes": plan.n_base, "rounds": 0}
        evidence["decide"] = info
        if target is None:
            info["stopped"] = plan.stopped
        else:
            info["target_processes"] = target
            start = time.monotonic()
            round_s = sum(float(r.get("duration_s") or 0.0) for r in result.runs)
            while units < target:
                if time.monotonic() - start + round_s > budget:
                    info["stopped"] = f"the next round would pass --gemmperf-decide-budget {budget:g} s"
                    break
                t0 = time.monotonic()
                emit(f"gemmperf: {self.where}: undecided with {units} processes; re-running toward "
                     f"{target} (the CIs need {need} per side)")
                got = self.reruns.rerun(result, len(evidence["rounds"]) + 1, self._point_fields(checked))
                if got is None:
                    break
                extra, env = got
                extra_samples = self.samples(extra, checked.warmup)
                evidence["rounds"].append(round_record(DECIDE, extra.dispatches, self.reruns.assess(env),
                                                       env.get("quiet_wait_s", 0.0)))
                judge.add_round(extra_samples, Disturbance.from_dict(evidence["rounds"][-1]["disturbance"]),
                                kind=DECIDE)
                round_s = time.monotonic() - t0
                info["rounds"] += 1
                units = judge.combined.loc[judge.combined["metric"] == DUR_NS, "unit"].nunique()
                if point_outcome(judge.verdicts).outcome != UNDECIDED:
                    break
        info["processes"] = int(units)
        text = (f"decide: {info['rounds']} round(s), {int(units)} candidate processes (the CIs need {need} per side)"
                + (f"; stopped: {info['stopped']}" if info.get("stopped") else ""))
        emit(f"gemmperf: {self.where}: {text}")

    def verdicts(self, result: PointResult, base_pt: pd.DataFrame, verdicts: pd.DataFrame) -> pd.DataFrame:
        """The final verdicts: telemetry notes added, merged into the test's ``verdicts.csv``,
        the compared baseline kept beside the point (report.html draws it), the test report's
        properties recorded."""
        verdicts = self.reruns.telemetry_notes(verdicts, result.dispatches)
        merge_verdicts(self.results.test_dir(self.test_id), self.point.id, verdicts)
        write_point_baseline(result.dir, base_pt)
        self._record_verdicts(verdicts, result.hw_key)
        return verdicts

    def write_point_json(self, point_dir: Path, checked: Checked, confirmation: Confirmation | None,
                         verdicts: pd.DataFrame | None, evidence: dict[str, Any] | None = None) -> None:
        """The gate's fields of point.json, in one atomic write over what the runs recorded:
        ``gate`` holds everything the decision used (``gemmperf compare`` reproduces it)."""
        path = point_dir / POINT_JSON
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        data.update(self._point_fields(checked))
        if confirmation is not None:
            data["confirmation"] = confirmation.summary
        if verdicts is not None:
            data["verdicts"] = _verdict_counts(verdicts)
        if evidence:
            data["gate"] = evidence
            data["outcome"] = evidence.get("outcome")
        write_point_json(point_dir, data)

    def record_history(self, result: PointResult, samples: pd.DataFrame) -> str:
        """The run history's values of this point; the slow-creep failure text, if any."""
        if self.history is None:
            return ""
        return self.history.record(self.test_id, self.point.id, result, samples)

    def save_baseline(self, result: PointResult, samples: pd.DataFrame, base: BaselineRecord | None,
                      base_pt: pd.DataFrame | None, checked: Checked, recording: bool) -> None:
        """Record (or with ``--gemmperf-update-baselines`` replace) this point's baseline; after
        a comparison, with ``--gemmperf-learn-variance``, add this run's variance to it."""
        if not recording:
            self._learn(result, samples)
            return
        if checked.bad_env:  # a run nobody meant (NCCL_NTHREADS=abc) is no reference
            raise fail_now(f"gemmperf: {self.where}: not recorded as a baseline: invalid environment: "
                           f"{'; '.join(checked.bad_env)}")
        noisy = self.reruns.assess(result.environment)
        path = self._save(samples, result, checked.rule, noisy)
        updating = self.options.update_baselines and base_pt is not None and not base_pt.empty
        what = "updated" if updating else "recorded"
        if updating:
            msg = f"gemmperf: baseline of {self.where} on {result.hw_key} updated at {path}"
        else:
            msg = f"gemmperf: no baseline for {self.where} on {result.hw_key} — recorded one at {path}"
        if noisy.disturbed:
            msg += (f" [{noisy.text}: comparisons against it allow for x{noisy.factor:.2f} and may be "
                    "undecided; re-record it on a quiet machine]")
        self.messages.append(msg)
        self.reporter.record(PROP_STATUS, f"baseline-{what}")
        self.reporter.record(PROP_BASELINE, str(path))
        emit(msg)

    def finish(self, result: PointResult, verdicts: pd.DataFrame, confirmation: Confirmation | None,
               creep: str, outcome: PointOutcome | None = None) -> None:
        """Fail the test on a regression (``--gemmperf-warn-only``: report it) or on slow creep;
        an undecided point fails, is skipped or passes as ``--gemmperf-undecided`` says."""
        regressions = verdicts[verdicts["verdict"] == "regression"]
        table = ""
        if len(regressions) or (outcome is not None and outcome.outcome == UNDECIDED):
            # kernel names are trace text: escaped per cell so a newline cannot break the table
            table = format_verdict_table(printable_frame(verdicts), FAIL_TABLE_ROWS)
            if confirmation is not None:
                table += "\n" + confirmation.text
        where = (f"on {result.hw_key} (baseline {self.store.path_for(self.test_id, result.hw_key)}; "
                 f"all verdicts in {self.results.test_dir(self.test_id) / 'verdicts.csv'})")
        if len(regressions):
            if outcome is not None:  # the outcome every output states (gate/outcome.py)
                table += f"\noutcome: {outcome.text}"
            table, creep = (table + "\n" + creep, "") if creep else (table, creep)
            head = f"gemmperf: {len(regressions)} regression(s) in {self.where} {where}"
            if self.options.warn_only:
                emit(head + " [--gemmperf-warn-only: not failing]\n" + table)
            else:
                raise fail_now(head + "\n" + table)
        elif outcome is not None and outcome.outcome == UNDECIDED:
            policy = self.options.undecided
            head = f"gemmperf: {self.where} undecided {where}: {outcome.reason}; to decide: {outcome.decide}"
            if policy == "fail":
                raise fail_now(head + " [--gemmperf-undecided fail]\n" + table + (f"\n{creep}" if creep else ""))
            fail_on_creep(creep, warn_only=self.options.warn_only)
            if policy == "skip":
                emit(head + "\n" + table)
                raise pytest.skip.Exception(printable_lines(
                    f"gemmperf: undecided: {outcome.reason}; to decide: {outcome.decide}"), _use_item_location=True)
            emit(head + " [accepted: --gemmperf-undecided pass]")
            return
        fail_on_creep(creep, warn_only=self.options.warn_only)

    # -- helpers of the stages
    def _check_dispatches(self, result: PointResult) -> None:
        if result.gated_dispatches.empty:
            kern = ", ".join(map(printable, self.point.kernels))
            seen = ', '.join(map(printable, sorted(map(str, result.dispatches['kernel'].unique()))[:10]))
            raise fail_now(f"gemmperf: {self.where}: no dispatches match the kernel regexes ({kern}); "
                           f"kernels seen: {seen}")

    def _point_fields(self, checked: Checked) -> dict[str, Any]:
        # warmup: `baseline refresh` reads it back, so a refreshed baseline has exactly these
        # samples; threshold: the test's own rule travels with the results (and the baseline it
        # may become), so `gemmperf compare` of this run gates as this test did
        return {"warmup": checked.warmup, "threshold": checked.rule}

    def _refuse_moved_identity(self, hw_key: str) -> None:
        """No record under this test's id, but one under the same test seen from another
        rootdir: the session is spelled differently, the test is not new. One line, and no
        second baseline that would make this test pass unchecked from now on."""
        known = self.store.list(hw_key).get("test_id", []) if self.store.root.is_dir() else []
        moved = moved_test_ids(self.test_id, known, self.results.rootdir())
        if moved:
            raise fail_now(f"gemmperf: {self.where}: no baseline under this id, but {self.store.root} holds "
                           f"this test as {moved[0]!r} (a session started elsewhere, or with another "
                           "rootdir); not recording a second one: run from the project's directory, "
                           "or record anew with --gemmperf-update-baselines")

    def _save(self, samples: pd.DataFrame, result: PointResult, rule: float | None,
              disturbance: Disturbance) -> Path:
        # the store merges per point (BaselineStore.save(merge=True), as `baseline refresh`
        # does): the other points' samples and metadata stay
        point = {"results_dir": str(self.results.root), "env": result.env, "command": result.command,
                 "backend": result.backend.name, "device": result.backend.device}
        if rule is not None:  # the test's own threshold: `gemmperf compare` gates with it too
            point["threshold"] = rule
        if disturbance.disturbed:  # a slow baseline hides a slower candidate: every compare allows for it
            point["disturbance"] = disturbance.as_dict()
        seconds = sum(float(r.get("duration_s") or 0.0) for r in result.runs)
        if seconds > 0:  # what --gemmperf-shard balances the CI matrix's jobs by (shard.py)
            point["duration_s"] = round(seconds, 3)
        # per process: the ETA of the progress lines (progress.py) on the next run
        point["run_durations_s"] = [round(float(r["duration_s"]), 3) for r in result.runs
                                    if r.get("duration_s")]
        meta = {**self.metadata(), "points": {self.point.id: point}}
        self.store.save(BaselineRecord(test_id=self.test_id, hw_key=result.hw_key, samples=samples, meta=meta),
                        merge=True)
        return self.store.path_for(self.test_id, result.hw_key)

    def _learn(self, result: PointResult, samples: pd.DataFrame) -> None:
        if not self.options.learn_variance:
            return
        # outside the merge lock: learn() takes the record's own lock
        run = f"{self.results.root.name}/{self.point.id}"
        if self.store.learn(self.test_id, result.hw_key, samples, run):
            self.reporter.record(PROP_LEARNED, run)
            emit(f"gemmperf: {self.where}: variance of this run added to the baseline's history "
                 f"({self.store.path_for(self.test_id, result.hw_key)})")

    def _record_outcome(self, outcome: PointOutcome) -> None:
        """The point's outcome as a test-report property (JUnit XML; the session summary)."""
        self.reporter.record(PROP_OUTCOME, json.dumps({"test": self.test_id, "point": self.point.id,
                                                       "policy": self.options.undecided, **outcome.as_dict()}))

    def _record_verdicts(self, verdicts: pd.DataFrame, hw_key: str) -> None:
        counts = _verdict_counts(verdicts)
        self.reporter.record(PROP_STATUS, "compared: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
        notable = verdicts[verdicts["verdict"] != "unchanged"]
        rows = []
        for r in notable.head(200).itertuples(index=False):
            row = {"test": self.test_id, "point": str(r.point), "kernel": str(r.kernel),
                   "metric": str(r.metric), "verdict": str(r.verdict), "ratio": _num(r.ratio),
                   "ci_low": _num(r.ci_low), "ci_high": _num(r.ci_high), "q_value": _num(r.q_value),
                   "threshold": _num(r.threshold), "note": str(r.note), "hw_key": hw_key}
            rows.append(row)
            self.reporter.record(f"{PROP_PREFIX}:{r.point}:{r.metric}:{r.kernel}",
                                 f"{r.verdict} ratio={_fmt(r.ratio)} ci=[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}] "
                                 f"q={_fmt(r.q_value, '.3g')}")
        self.reporter.record(PROP_VERDICTS, json.dumps(rows))


def _gate_config(threshold: float | None) -> GateConfig:
    """The gate's configuration with the threshold in force (None: the gate's default)."""
    return GateConfig() if threshold is None else GateConfig(threshold=threshold)


class _merge_lock:
    """Serializes load-modify-save of one baseline record across xdist workers. A lock file of
    its own: the store's per-record lock is taken again inside ``save``.

    Only writers need it: where the lock cannot be made (a read-only or full store) the gate
    goes on without it, since reads take no lock, and a save it leads to fails with the store's
    own one-line error."""

    def __init__(self, store: BaselineStore, test_id: str, hw_key: str) -> None:
        record_dir = store.path_for(test_id, hw_key)
        self._lock_dir = Path(store.root) / ".locks"
        self._lock = FileLock(str(self._lock_dir / f"{record_dir.parent.name}__{record_dir.name}.merge.lock"),
                              timeout=600)
        self._held = False

    def __enter__(self):
        try:
            self._lock_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            return self
        ignore = self._lock_dir / ".gitignore"
        if not ignore.exists():
            try:
                safe_io.write_text(ignore, "*\n")  # never through a planted link
            except OSError:
                pass
        try:
            self._lock.acquire()
        except OSError:
            return self
        self._held = True
        return self

    def release(self) -> None:
        """Let the other writers of this record go on (idempotent)."""
        if self._held:
            self._lock.release()
            self._held = False

    def __exit__(self, *exc) -> None:
        self.release()


def _empty_verdicts() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in VERDICT_COLUMNS})


def _verdict_counts(verdicts: pd.DataFrame) -> dict[str, int]:
    vc = verdicts["verdict"].astype(str).value_counts()
    return {str(k): int(v) for k, v in vc.sort_index().items()}


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _fmt(x: Any, spec: str = ".3f") -> str:
    v = _num(x)
    return "-" if v is None else format(v, spec)
