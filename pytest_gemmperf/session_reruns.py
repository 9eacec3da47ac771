"""Re-runs of a sweep point: contention monitoring, telemetry, confirmation before blocking.

The part of :class:`~pytest_gemmperf.session.PointRunner` that runs a point's workload again
(``--gemmperf-confirm``, ``gate/confirm.py``) and records contention evidence
(``run/environment.py``) and host/GPU telemetry (``run/telemetry.py``) while it runs. A mixin so ``session.py`` stays readable; it uses the runner's state
(``_call``: the last ``profile()`` call, ``_record``, ``options``, ``backend``, ``dir``) and
its backend methods (``_run_torch``, ``_run_rocprofv3``, ``_run_replay``).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Any, Mapping

import pandas as pd
import pytest

from pytest_gemmperf.gate.headline import change_text
from pytest_gemmperf.gate.compare import compare
from pytest_gemmperf.gate.confirm import (ConfirmConfig, apply_disturbance, judge_round, settled,
                                          suspicious)
from pytest_gemmperf.gate.metrics import DUR_NS
from pytest_gemmperf.redact import redact_text
from pytest_gemmperf.run.environment import ACTIVE_DIR, ContentionMonitor, assess
from pytest_gemmperf.run.results import write_point_json, write_tables
from pytest_gemmperf.run.telemetry import (TelemetrySampler, affected_processes, evidence, note_rows,
                                           slowest_process_notes, summarise, windows_from_dispatches,
                                           write_telemetry)
from pytest_gemmperf.session_gate import (PROP_PREFIX, _emit, _verdict_counts,
                                          write_point_json_field)
from pytest_gemmperf.session_point import PointResult, _PointFailed, _PointSkipped
from pytest_gemmperf.textsafe import printable, printable_lines
from pytest_gemmperf.traces.schema import AGENT_SCHEMA, COUNTER_SCHEMA, DISPATCH_SCHEMA, concat_tables


class PointReruns:
    """Methods of ``PointRunner`` for contention evidence, re-runs and confirmation."""

    def _monitor(self):

        # a replayed point was measured elsewhere: this machine's load says nothing about it
        return ContentionMonitor(marker_dir=self.session.results.root / ACTIVE_DIR,
                                 label=f"{self.test_id}[{self.point.id}]",
                                 enabled=self.backend.name != "replay")

    def _sampler(self, env: Mapping[str, str]):

        # a replayed point ran elsewhere: this machine's clocks say nothing about it
        sampler = TelemetrySampler(self.options.telemetry_interval_s, env=dict(env),
                                   enabled=self.options.telemetry and self.backend.name != "replay")
        self._telemetry = sampler
        return sampler

    def _process_window(self, run: int):
        """Context marking workload process ``run`` in the current telemetry sampler."""

        sampler = getattr(self, "_telemetry", None)
        return sampler.process(run) if sampler is not None and sampler.enabled else nullcontext()

    def _store_telemetry(self, sampler, record: dict[str, Any], evidence: dict[str, Any],
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
            self.session.results.update_run_json(telemetry={"interval_s": meta["interval_s"],
                                                            "clock": meta["clock"],
                                                            "sources": meta["sources"],
                                                            "static": meta["static"]})

    def _telemetry_notes(self, verdicts: pd.DataFrame, dispatches: pd.DataFrame | None = None) -> pd.DataFrame:
        """Each verdict row of the point names the telemetry evidence of all its processes;
        a slower kernel's row also says whether its slowest process was a throttled one."""

        pj = self.dir / "point.json"
        try:
            tele = json.loads(pj.read_text(encoding="utf-8")).get("telemetry") or {}
        except (OSError, ValueError):
            return verdicts
        reasons, _ = evidence(tele.get("summary"))
        verdicts = slowest_process_notes(verdicts, dispatches, affected_processes(tele.get("summary")))
        return note_rows(verdicts, reasons)

    def _assess(self, evidence: Mapping[str, Any] | None):

        # concurrent points compete for the devices unless each xdist worker has its own GPUs
        cpu = self.backend.device == "cpu"
        shares = cpu or self.options.gpus_per_point <= 0
        return assess(dict(evidence or {}), shares_devices=shares, cpu_bound=cpu)

    def _execute(self, record: dict[str, Any], *, first_run: int):
        """Run ``repeats`` processes of the last ``profile()`` call, numbered from ``first_run``."""

        c = self._call
        backend = self.backend
        if backend.name == "torch":
            return self._run_torch(c["command"], c["launcher"], c["nproc"], c["nnodes"], c["launcher_args"],
                                   c["repeats"], c["timeout_s"], c["full_env"], c["cwd"], record,
                                   first_run=first_run)
        if backend.name == "rocprofv3":
            # a confirmation round writes its own rocprofv3 tree and skips the counter passes
            out = self.dir if first_run == 0 else self.dir / f"confirm{first_run}"
            return self._run_rocprofv3(c["command"], c["launcher"], c["nproc"], c["nnodes"],
                                       c["launcher_args"], c["counters"] if first_run == 0 else (),
                                       c["repeats"], c["timeout_s"], c["full_env"], c["env_set"],
                                       c["cwd"], record, out_dir=out, run_offset=first_run)
        if first_run:
            raise _PointSkipped("the replay backend cannot re-run a point")
        return self._run_replay(record)

    def rerun(self, result: PointResult, round_no: int) -> tuple[PointResult, dict[str, Any]] | None:
        """Profile ``repeats`` more processes of this point (confirmation round ``round_no``,
        runs numbered after the earlier ones); their tables join ``dispatches.parquet``.
        Returns (the new processes only, their contention evidence), or None when the backend
        cannot re-run (replay)."""


        if self._call is None or self.backend.name not in ("torch", "rocprofv3"):
            return None
        # point.json as written so far (warm-up, verdicts...): the runs append to it
        pj = self.dir / "point.json"
        record = json.loads(pj.read_text(encoding="utf-8")) if pj.exists() else dict(self._record_json or {})
        record.setdefault("runs", [])
        # confirmation rounds skip the counter passes (_execute)
        self._progress("point_start", repeats=self._call["repeats"], backend=self.backend.name,
                       counter_passes=0, round=round_no)
        monitor = self._monitor()
        sampler = self._sampler(self._call["full_env"])
        try:
            with monitor, sampler:
                trace, _ = self._execute(record, first_run=self._call["repeats"] * round_no)
        except _PointFailed as exc:
            record["status"] = "failed"
            record["failure"] = exc.status
            message = redact_text(exc.message, self._secrets)
            record["error"] = f"confirmation round {round_no}: {message}"
            write_point_json(self.dir, record)
            pytest.fail(printable_lines(f"gemmperf: {self.test_id}[{self.point.id}]: confirmation re-run "
                                        f"failed: {message}"), pytrace=False)
        self._store_telemetry(sampler, record, monitor.evidence, round_no=round_no,
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
        return extra, monitor.evidence

    def _confirm(self, result: PointResult, base_pt: pd.DataFrame, samples: pd.DataFrame,
                 first: pd.DataFrame, verdicts: pd.DataFrame, cfg, history, warmup) -> pd.DataFrame:
        """Confirm before blocking (gate/confirm.py): re-run a suspicious point up to
        ``--gemmperf-confirm`` rounds; the new processes join the candidate and the point is
        judged again (combined comparison + the re-run alone must reproduce). Records what
        ran and what changed in point.json (``confirmation``) and the test's properties."""

        ccfg = ConfirmConfig(rounds=max(0, int(self.options.confirm)))
        if ccfg.rounds == 0 or not suspicious(first, ccfg).any():
            return verdicts
        trigger = first[suspicious(first, ccfg)]
        why = ", ".join(f"{r.kernel} {r.metric} {r.verdict} {change_text(r.ratio, r.ci_low, r.ci_high)}"
                        for r in trigger.head(3).itertuples(index=False))
        summary: dict[str, Any] = {"trigger": why, "rounds": 0, "extra_processes": 0, "changes": [],
                                   "environment": []}
        combined, reruns = samples, samples.iloc[:0]
        for round_no in range(1, ccfg.rounds + 1):
            _emit(f"gemmperf: {self.test_id}[{self.point.id}]: confirming ({printable(why)}): re-run round {round_no}")
            got = self.rerun(result, round_no)
            if got is None:
                summary["skipped"] = f"the {self.backend.name} backend cannot re-run a point"
                break
            extra, evidence = got
            extra_samples = self._samples(extra, warmup)
            combined = pd.concat([combined, extra_samples], ignore_index=True)
            # "the re-run alone" is every round so far: later rounds reproduce on more processes
            reruns = pd.concat([reruns, extra_samples], ignore_index=True)
            judged, changes = judge_round(
                first, lambda cand, gate_cfg: compare(base_pt, cand, gate_cfg, test=self.test_id, history=history),
                combined, reruns, cfg, ccfg, round_no)
            disturbance = self._assess(evidence)
            verdicts = apply_disturbance(judged, disturbance)
            summary["rounds"] = round_no
            # the round's share of the FDR budget (rounds share one budget: no free extra looks)
            summary.setdefault("fdr_per_round", []).append(cfg.fdr * ccfg.fdr_share(round_no))
            summary["extra_processes"] += int(extra_samples.loc[extra_samples["metric"] == DUR_NS, "unit"].nunique())
            summary["changes"] = changes
            summary["environment"].append(disturbance.as_dict())
            if settled(verdicts, ccfg):
                break
        summary["final"] = _verdict_counts(verdicts)
        write_point_json_field(result.dir, "confirmation", summary)
        self._record(f"{PROP_PREFIX}_confirm", json.dumps({"test": self.test_id, "point": self.point.id,
                                                            **summary}))
        changed = "; ".join(f"{printable(c['kernel'])} {c['metric']}: {c['before']} -> {c['after']}"
                            for c in summary["changes"][:5]) or "no verdict changed"
        self._confirm_text = (f"confirmation ran ({summary['rounds']} round(s), +{summary['extra_processes']} "
                              f"processes; triggered by {printable(why)}): {changed}")
        _emit(f"gemmperf: {self.test_id}[{self.point.id}]: {self._confirm_text}")
        return verdicts

