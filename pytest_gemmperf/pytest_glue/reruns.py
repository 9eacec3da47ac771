"""Re-runs of a sweep point and what is watched while any run of it goes on: contention
evidence (``run/environment.py``), host/GPU telemetry (``run/telemetry.py``) and the
confirmation re-runs the gate step asks for before blocking (``--gemmperf-confirm``,
``gate/confirm.py``).

A collaborator of the runner (``point.py``), built with what it works on: the point's identity
and results directory, the options, the backend, the reporter and the runner's ``execute`` (one call of the
workload under the backend). The runner hands it each ``profile()`` call (:class:`WorkloadCall`)
so a re-run repeats exactly that call.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from pytest_gemmperf.pytest_glue.options import Options
from pytest_gemmperf.pytest_glue.reporting import PointReporter, fail_now
from pytest_gemmperf.pytest_glue.result import PointResult, _PointFailed
from pytest_gemmperf.redact import redact_text
from pytest_gemmperf.run.backend import BackendChoice
from pytest_gemmperf.pytest_glue.progress import QUIET_WAIT
from pytest_gemmperf.run.environment import ACTIVE_DIR, ContentionMonitor, Disturbance, assess, wait_for_quiet
from pytest_gemmperf.run.results import ResultsDir, write_point_json, write_tables
from pytest_gemmperf.run.telemetry import TelemetrySampler, summarise, windows_from_dispatches, write_telemetry
from pytest_gemmperf.store.compare_inputs import telemetry_notes
from pytest_gemmperf.sweep import SweepPoint
from pytest_gemmperf.traces.schema import AGENT_SCHEMA, COUNTER_SCHEMA, DISPATCH_SCHEMA, Trace, concat_tables

#: ``execute(record, first_run) -> (trace, argv)``: run the last call's processes, numbered
#: from ``first_run``, appending their entries to ``record["runs"]``
Execute = Callable[[dict, int], "tuple[Trace, list[str]]"]


@dataclass(frozen=True)
class WorkloadCall:
    """What a re-run repeats of the last ``profile()`` call."""

    repeats: int
    full_env: Mapping[str, str]
    #: secret values of its environment, redacted wherever recorded
    secrets: tuple[str, ...]
    #: point.json as ``profile()`` wrote it (read when the file is gone)
    record: Mapping[str, Any]


class Reruns:
    """Contention, telemetry and re-runs of one sweep point."""

    def __init__(self, *, test_id: str, point: SweepPoint, results: ResultsDir, options: Options,
                 backend: BackendChoice, reporter: PointReporter, execute: Execute) -> None:
        self.test_id = test_id
        self.point = point
        self.results = results
        self.options = options
        self.backend = backend
        self.reporter = reporter
        self._execute = execute
        self._call: WorkloadCall | None = None
        self._telemetry: TelemetrySampler | None = None
        #: seconds this point's re-runs waited for a quiet machine so far
        self._waited_s = 0.0

    @property
    def dir(self) -> Path:
        # looked up each time: the test's directory name is settled when the runner claims it
        return self.results.point_dir(self.test_id, self.point.id)

    def remember(self, call: WorkloadCall) -> None:
        """The ``profile()`` call a re-run repeats."""
        self._call = call

    def monitor(self) -> ContentionMonitor:
        # a replayed point was measured elsewhere: this machine's load says nothing about it
        return ContentionMonitor(marker_dir=self.results.root / ACTIVE_DIR,
                                 label=f"{self.test_id}[{self.point.id}]",
                                 enabled=self.backend.name != "replay")

    def sampler(self, env: Mapping[str, str]) -> TelemetrySampler:
        # a replayed point ran elsewhere: this machine's clocks say nothing about it
        sampler = TelemetrySampler(self.options.telemetry_interval_s, env=dict(env),
                                   enabled=self.options.telemetry and self.backend.name != "replay")
        self._telemetry = sampler
        return sampler

    def process_window(self, run: int):
        """Context marking workload process ``run`` in the current telemetry sampler."""
        sampler = self._telemetry
        return sampler.process(run) if sampler is not None and sampler.enabled else nullcontext()

    def store_telemetry(self, sampler: TelemetrySampler, record: dict[str, Any], evidence: dict[str, Any],
                        *, round_no: int, dispatches: pd.DataFrame | None = None) -> None:
        """Write the samples to ``telemetry.parquet`` (appended for a confirmation round), the
        metadata and per-process summary to ``record["telemetry"]`` (point.json), and this
        round's summary into ``evidence["telemetry"]`` for the gate. rocprofv3 runs all
        repeats in one call: their process windows come from ``dispatches`` (CLOCK_BOOTTIME)."""
        self._telemetry = None
        if not sampler.enabled:
            record["telemetry"] = {"enabled": False}
            return
        if not sampler.windows and self.backend.name == "rocprofv3" and dispatches is not None:
            sampler.windows.update(windows_from_dispatches(
                dispatches, sampler.clock_offsets.get("boottime_minus_realtime_ns")))
        frame = sampler.frame()
        meta = sampler.metadata()
        summary = summarise(frame, sampler.windows, sampler.interval_s)
        try:
            write_telemetry(self.dir, frame, append=round_no > 0)
        except (OSError, ValueError) as exc:  # telemetry must never decide a point's outcome
            meta["notes"].append(f"telemetry.parquet not written: {exc}")
        if round_no and isinstance(record.get("telemetry"), dict) and record["telemetry"].get("enabled"):
            old = record["telemetry"]
            old["processes"].update(meta["processes"])
            old["summary"] = [*old.get("summary", []), *summary]
            old["rows"] = int(old.get("rows", 0)) + meta["rows"]
            old["samples"] = int(old.get("samples", 0)) + meta["samples"]
            old["stopped_ns"] = meta["stopped_ns"]
            old["notes"] = list(dict.fromkeys([*old.get("notes", []), *meta["notes"]]))[:20]
        else:
            record["telemetry"] = {**meta, "summary": summary}
        evidence["telemetry"] = summary
        if meta["static"] and round_no == 0:
            self.results.update_run_json(telemetry={"interval_s": meta["interval_s"],
                                                    "clock": meta["clock"],
                                                    "sources": meta["sources"],
                                                    "static": meta["static"]})

    def telemetry_notes(self, verdicts: pd.DataFrame, dispatches: pd.DataFrame | None = None) -> pd.DataFrame:
        """Each verdict row of the point names the telemetry evidence of all its processes;
        a slower kernel's row also says whether its slowest process was a throttled one
        (``store.compare_inputs.telemetry_notes``, which ``gemmperf compare`` applies too)."""
        pj = self.dir / "point.json"
        try:
            tele = json.loads(pj.read_text(encoding="utf-8")).get("telemetry") or {}
        except (OSError, ValueError):
            return verdicts
        return telemetry_notes(verdicts, tele, dispatches)

    def wait_for_quiet(self, round_no: int) -> float:
        """Before a confirmation re-run of a disturbed point: wait, within what is left of the
        point's ``--gemmperf-quiet-wait`` seconds, until a measurement of the host says it is
        quiet, so the re-run is not taken in the same storm. Returns the seconds waited."""
        # one budget per point, shared by its rounds: a storm that lasts is not waited out N times
        budget = float(self.options.quiet_wait_s or 0.0) - self._waited_s
        if budget <= 0 or self.backend.name == "replay":
            return 0.0

        def said(waited: float, d: Disturbance) -> None:
            self.reporter.progress(QUIET_WAIT, round=round_no, waited_s=waited, budget_s=budget, reason=d.text)

        waited, last = wait_for_quiet(budget, self.assess, probe_s=min(1.0, budget), on_wait=said)
        self.reporter.progress(QUIET_WAIT, round=round_no, waited_s=waited, budget_s=budget,
                               reason=last.text, done=True)
        self._waited_s += waited
        return waited

    def assess(self, evidence: Mapping[str, Any] | None) -> Disturbance:
        # concurrent points compete for the devices unless each xdist worker has its own GPUs
        cpu = self.backend.device == "cpu"
        shares = cpu or self.options.gpus_per_point <= 0
        return assess(dict(evidence or {}), shares_devices=shares, cpu_bound=cpu)

    def can_rerun(self) -> bool:
        return self._call is not None and self.backend.name in ("torch", "rocprofv3")

    def rerun(self, result: PointResult, round_no: int, fields: Mapping[str, Any] | None = None,
              *, quiet: bool = False) -> tuple[PointResult, dict[str, Any]] | None:
        """Profile ``repeats`` more processes of this point (confirmation round ``round_no``,
        runs numbered after the earlier ones); their tables join ``dispatches.parquet``.
        ``fields``: the gate's facts so far (warm-up, threshold), kept in the point.json each
        run updates, so a session stopped during the re-run leaves a point a refresh reads as
        gated. Returns (the new processes only, their contention evidence), or None when the
        backend cannot re-run (replay). ``quiet``: wait for a quiet machine first
        (:meth:`wait_for_quiet`); the evidence then holds ``quiet_wait_s``."""
        if not self.can_rerun():
            return None
        waited = self.wait_for_quiet(round_no) if quiet else 0.0
        call = self._call
        # point.json as written so far: the runs append to it
        pj = self.dir / "point.json"
        record = json.loads(pj.read_text(encoding="utf-8")) if pj.exists() else dict(call.record)
        record.update(fields or {})
        record.setdefault("runs", [])
        # confirmation rounds skip the counter passes (the runner's execute)
        self.reporter.progress("point_start", repeats=call.repeats, backend=self.backend.name,
                               counter_passes=0, round=round_no)
        monitor = self.monitor()
        sampler = self.sampler(call.full_env)
        try:
            with monitor, sampler:
                trace, _ = self._execute(record, call.repeats * round_no)
        except _PointFailed as exc:
            record["status"] = "failed"
            record["failure"] = exc.status
            message = redact_text(exc.message, call.secrets)
            record["error"] = f"confirmation round {round_no}: {message}"
            write_point_json(self.dir, record)
            raise fail_now(f"gemmperf: {self.test_id}[{self.point.id}]: confirmation re-run "
                           f"failed: {message}") from None
        self.store_telemetry(sampler, record, monitor.evidence, round_no=round_no,
                             dispatches=trace.dispatches)
        write_point_json(self.dir, record)
        result.dispatches = concat_tables([result.dispatches, trace.dispatches], DISPATCH_SCHEMA)
        result.counters = concat_tables([result.counters, trace.counters], COUNTER_SCHEMA)
        result.agents = concat_tables([result.agents, trace.agents], AGENT_SCHEMA)
        write_tables(self.dir, {"dispatches": result.dispatches, "counters": result.counters,
                                "agents": result.agents})
        extra = PointResult(test_id=self.test_id, point=self.point, dir=self.dir, backend=self.backend,
                            dispatches=trace.dispatches, counters=trace.counters, agents=trace.agents,
                            env=result.env, command=result.command, hw_key=result.hw_key,
                            environment=monitor.evidence)
        return extra, {**monitor.evidence, "quiet_wait_s": round(waited, 3)}
