"""The gate step of a sweep point (``PointRunner``'s methods): samples from the point's
dispatches, the stored baseline, ``compare`` and confirmation, verdicts into the results and the
test report, a recorded baseline when there is none. Split out of ``session.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from pytest_gemmperf import safe_io
from pytest_gemmperf.config import parse_threshold
from pytest_gemmperf.store.verdicts_file import merge_verdicts
from pytest_gemmperf.run.results import write_point_json
from pytest_gemmperf.report.before_after import write_point_baseline
from pytest_gemmperf.session_point import PointResult
from pytest_gemmperf.textsafe import printable, printable_frame, printable_lines
import pytest
from pytest_gemmperf.history.pytest_side import fail_on_creep, record_point
from pytest_gemmperf.gate.compare import compare
from pytest_gemmperf.gate.confirm import apply_disturbance
from pytest_gemmperf.gate.headline import format_verdict_table
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.samples import gate_samples
from pytest_gemmperf.session_benchmark import gated_property
from pytest_gemmperf.store.record import BaselineRecord
from pytest_gemmperf.sweep import invalid_env
from pytest_gemmperf.gate.compare import GateConfig
from filelock import FileLock
from pytest_gemmperf.gate.verdict import VERDICT_COLUMNS

#: rows of the verdict table in a failure message
FAIL_TABLE_ROWS = 20
# user_properties of a gated point's test report (read by plugin.py and progress.py)
PROP_STATUS = "gemmperf_status"
PROP_VERDICTS = "gemmperf_verdicts"
PROP_PREFIX = "gemmperf"


class PointGate:
    """Methods of ``PointRunner`` that gate a profiled point."""

    def assert_no_regression(self, result: PointResult, *, threshold: float | str | None = None,
                             warmup: int | None = None) -> pd.DataFrame:
        """Compare ``result`` with the stored baseline of this test and point.

        No baseline yet (or ``--gemmperf-update-baselines``): record one and pass. Otherwise fail
        on a regression with the compact verdict table (unless ``--gemmperf-warn-only``). Returns
        the verdicts table (empty when a baseline was recorded).
        """
        rule = self._threshold_rule(threshold)
        samples = self._samples(result, warmup)
        # the per-test rule travels with the results (and the baseline it may become), so
        # `gemmperf compare` of this run gates as this test did
        write_point_json_field(result.dir, "threshold", rule)

        creep = record_point(self, result, samples)  # run history; slow-creep text with the check
        store = self.session.baseline_store()
        with _merge_lock(store, self.test_id, result.hw_key):
            base = store.load(self.test_id, result.hw_key)
            base_pt = (base.samples[base.samples["point"].astype(str) == self.point.id]
                       if base is not None else None)
            if self.options.update_baselines or base_pt is None or base_pt.empty:
                path = self._save_baseline(store, base, samples, result, rule)
                updating = self.options.update_baselines and base_pt is not None and not base_pt.empty
                what = "updated" if updating else "recorded"
                if updating:
                    msg = (f"gemmperf: baseline of {self.test_id}[{self.point.id}] on {result.hw_key} "
                           f"updated at {path}")
                else:
                    msg = (f"gemmperf: no baseline for {self.test_id}[{self.point.id}] on "
                           f"{result.hw_key} — recorded one at {path}")
                noisy = self._assess(result.environment)
                if noisy.disturbed:
                    msg += f" [{noisy.text}: consider re-recording on a quiet machine]"
                self.messages.append(msg)
                self._record(PROP_STATUS, f"baseline-{what}")
                self._record(f"{PROP_PREFIX}_baseline", str(path))
                _emit(msg)
                fail_on_creep(self, creep)
                return _empty_verdicts()
        cfg = _gate_config(rule if rule is not None else self.options.threshold)

        history = base.history_for(self.point.id)
        first = compare(base_pt, samples, cfg, test=self.test_id, history=history)
        verdicts = apply_disturbance(first, self._assess(result.environment))
        verdicts = self._confirm(result, base_pt, samples, first, verdicts, cfg, history, warmup)
        verdicts = self._telemetry_notes(verdicts, result.dispatches)
        if self.options.learn_variance:
            # outside the merge lock: learn() takes the record's own lock
            run = f"{self.session.results.root.name}/{self.point.id}"
            if store.learn(self.test_id, result.hw_key, samples, run):
                self._record(f"{PROP_PREFIX}_learned", run)
                _emit(f"gemmperf: {self.test_id}[{self.point.id}]: variance of this run added to the "
                      f"baseline's history ({store.path_for(self.test_id, result.hw_key)})")
        merge_verdicts(self.session.results.test_dir(self.test_id), self.point.id, verdicts)
        write_point_baseline(result.dir, base_pt)  # report.html draws it beside the candidate
        write_point_json_field(result.dir, "verdicts", _verdict_counts(verdicts))
        self._record_verdicts(verdicts, result.hw_key)
        regressions = verdicts[verdicts["verdict"] == "regression"]
        if len(regressions):
            # kernel names are trace text: escaped per cell so a newline cannot break the table
            table = format_verdict_table(printable_frame(verdicts), FAIL_TABLE_ROWS)
            if self._confirm_text:
                table += "\n" + self._confirm_text
            table, creep = (table + "\n" + creep, "") if creep else (table, creep)
            head = (f"gemmperf: {len(regressions)} regression(s) in {self.test_id}[{self.point.id}] "
                    f"on {result.hw_key} (baseline {store.path_for(self.test_id, result.hw_key)}; "
                    f"all verdicts in {self.session.results.test_dir(self.test_id) / 'verdicts.csv'})")
            if self.options.warn_only:
                _emit(head + " [--gemmperf-warn-only: not failing]\n" + table)
            else:
                pytest.fail(printable_lines(head + "\n" + table), pytrace=False)
        fail_on_creep(self, creep)
        return verdicts

    def _threshold_rule(self, threshold: float | str | None) -> float | None:
        """The test's own threshold (``assert_no_regression(threshold=...)``), parsed as the
        command line's; a bad one fails the test with one line."""
        if threshold is None:
            return None
        try:
            return parse_threshold(threshold)
        except ValueError as exc:
            raise _fail_now(f"gemmperf: {self.test_id}[{self.point.id}]: assert_no_regression: {exc}") from None

    def _samples(self, result: PointResult, warmup: int | None) -> pd.DataFrame:
        if result.gated_dispatches.empty:
            kern = ", ".join(map(printable, self.point.kernels))
            raise _fail_now(f"gemmperf: {self.test_id}[{self.point.id}]: no dispatches match the "
                            f"kernel regexes ({kern}); kernels seen: "
                            f"{', '.join(map(printable, sorted(map(str, result.dispatches['kernel'].unique()))[:10]))}")
        w = warmup if warmup is not None else self.options.warmup
        w = int(w or 0)
        # `baseline refresh` reads it back, so a refreshed baseline has exactly these samples
        write_point_json_field(result.dir, "warmup", w)
        try:
            samples = gate_samples(result.dispatches, kernels=list(self.point.kernels), warmup=w,
                                   compact=True, path=result.paths["dispatches"])
        except GemmperfInputError as exc:
            raise _fail_now(f"gemmperf: {self.test_id}[{self.point.id}]: {exc}") from None
        for note in samples.attrs.get("notes", []):
            _emit(f"gemmperf: {self.test_id}[{self.point.id}]: {note}")

        # --gemmperf-benchmark-json: the controller exports this point at the session's end
        self._record(*gated_property(self.test_id, self.point.id, w, self.point.kernels))
        if len(samples) == 0:
            raise _fail_now(f"gemmperf: {self.test_id}[{self.point.id}]: no samples left after "
                            "warm-up removal; profile more steps or lower --gemmperf-warmup")
        return samples

    def _save_baseline(self, store, base, samples: pd.DataFrame, result: PointResult,
                       rule: float | None = None) -> Path:
        bad = invalid_env(result.env)  # a run nobody meant (NCCL_NTHREADS=abc) is no reference
        if bad:
            raise _fail_now(f"gemmperf: {self.test_id}[{self.point.id}]: not recorded as a "
                            f"baseline: invalid environment: {'; '.join(bad)}")

        # the store merges per point (BaselineStore.save(merge=True), as `baseline refresh`
        # does): the other points' samples and metadata stay; ``base`` is only the caller's view
        point = {"results_dir": str(self.session.results.root), "env": result.env, "command": result.command,
                 "backend": result.backend.name, "device": result.backend.device}
        if rule is not None:  # the test's own threshold: `gemmperf compare` gates with it too
            point["threshold"] = rule
        seconds = sum(float(r.get("duration_s") or 0.0) for r in result.runs)
        if seconds > 0:  # what --gemmperf-shard balances the CI matrix's jobs by (shard.py)
            point["duration_s"] = round(seconds, 3)
        # per process: the ETA of the progress lines (progress.py) on the next run
        point["run_durations_s"] = [round(float(r["duration_s"]), 3) for r in result.runs
                                    if r.get("duration_s")]
        meta = {**self.session.metadata(), "points": {self.point.id: point}}
        store.save(BaselineRecord(test_id=self.test_id, hw_key=result.hw_key, samples=samples, meta=meta),
                   merge=True)
        return store.path_for(self.test_id, result.hw_key)

    def _record_verdicts(self, verdicts: pd.DataFrame, hw_key: str) -> None:
        counts = _verdict_counts(verdicts)
        self._record(PROP_STATUS, "compared: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
        notable = verdicts[verdicts["verdict"] != "unchanged"]
        rows = []
        for r in notable.head(200).itertuples(index=False):
            row = {"test": self.test_id, "point": str(r.point), "kernel": str(r.kernel),
                   "metric": str(r.metric), "verdict": str(r.verdict), "ratio": _num(r.ratio),
                   "ci_low": _num(r.ci_low), "ci_high": _num(r.ci_high), "q_value": _num(r.q_value),
                   "threshold": _num(r.threshold), "note": str(r.note), "hw_key": hw_key}
            rows.append(row)
            self._record(f"{PROP_PREFIX}:{r.point}:{r.metric}:{r.kernel}",
                         f"{r.verdict} ratio={_fmt(r.ratio)} ci=[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}] "
                         f"q={_fmt(r.q_value, '.3g')}")
        self._record(PROP_VERDICTS, json.dumps(rows))


def _gate_config(threshold: float | None):
    """The gate's configuration with the threshold in force (None: the gate's default)."""
    return GateConfig() if threshold is None else GateConfig(threshold=threshold)


class _merge_lock:
    """Serializes load-modify-save of one baseline record across xdist workers. A lock file of
    its own: the store's per-record lock is taken again inside ``save``.

    Only writers need it: where the lock cannot be made (a read-only or full store) the gate
    goes on without it, since reads take no lock, and a save it leads to fails with the store's
    own one-line error."""

    def __init__(self, store, test_id: str, hw_key: str) -> None:
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

    def __exit__(self, *exc) -> None:
        if self._held:
            self._lock.release()


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


def _fail_now(message: str):
    return pytest.fail.Exception(printable_lines(message), pytrace=False)


def _emit(message: str) -> None:
    """Visible in the test's captured output and, with -s, on the terminal."""
    print(printable_lines(message), file=sys.stderr)


def write_point_json_field(point_dir: Path, key: str, value: Any) -> None:
    path = point_dir / "point.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    data[key] = value
    write_point_json(point_dir, data)
