"""``--gemmperf-repeats auto``: a point's number of repeats, planned from its baseline.

Before a point runs, its stored baseline (this test, this point, the hardware key this session
found, else this machine's CPU key on the CPU backend, else the only key holding the test) is
planned as ``gemmperf plan`` plans it (:mod:`pytest_gemmperf.gate.power`): the smallest count
per side with which the gate, at the test's own threshold as its baseline recorded it (else the
session's, as the gate gates it) and the gate's FDR, calls a slowdown
of ``--gemmperf-detect`` a regression with 80 % power in every gated kernel that any count up
to ``--gemmperf-max-repeats`` can catch (that largest count when none can; the default count
when the change lies within the threshold, where no count can). A repeat is one run of the
workload, which profiles as many processes as it has ranks (the baseline's processes per run
tell how many). Without a baseline the point runs the default count. The choice is one line of
text, shown on the point's start line and kept in ``point.json``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.pytest_glue.session import GemmperfSession
from pytest_gemmperf.store.record import META_FILE
from pytest_gemmperf.gate.gate_config import GateConfig
from pytest_gemmperf.store.hardware import cpu_hardware_key
from pytest_gemmperf.gate.power import DEFAULT_POWER, plan
from pytest_gemmperf.run.results import RUN_JSON


@dataclass(frozen=True)
class AutoRepeats:
    """The repeats a point runs and why (the start line's text)."""

    repeats: int
    note: str


def planned_repeats(session: GemmperfSession, test_id: str, point_id: str, device: str) -> AutoRepeats:
    """The repeats of ``test_id``'s point ``point_id`` under ``--gemmperf-repeats auto``."""
    o = session.options
    default = AutoRepeats(o.repeats, f"repeats auto: {o.repeats}")
    try:
        rec, why = _record(session, test_id, device)
    except GemmperfInputError as exc:
        return AutoRepeats(o.repeats, f"{default.note} (baseline unreadable: {exc})")
    if rec is None:
        return AutoRepeats(o.repeats, f"{default.note} ({why})")
    base = rec.samples[rec.samples["point"].astype(str) == point_id]
    if base.empty:
        return AutoRepeats(o.repeats, f"{default.note} (no baseline of this point yet)")
    try:
        rule = recorded_rule(rec.meta, point_id)
        return choose(base, rec.history_for(point_id), test_id, o.detect,
                      o.threshold if rule is None else rule, o.max_repeats, o.repeats,
                      rule_note="" if rule is None else "the test's rule recorded with its baseline")
    except (GemmperfInputError, ValueError) as exc:  # choosing a count never fails the point
        return AutoRepeats(o.repeats, f"{default.note} (no plan from the baseline: {exc})")


def recorded_rule(meta: dict, point_id: str) -> float | None:
    """The threshold the test passed to ``assert_no_regression`` when its baseline of
    ``point_id`` was recorded (the record's point metadata); None: no rule of its own, or none
    that reads as one (the session's threshold then holds, as the gate's would)."""
    points = meta.get("points") if isinstance(meta, dict) else None
    doc = points.get(point_id) if isinstance(points, dict) else None
    value = doc.get("threshold") if isinstance(doc, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        return None
    return float(value)


def choose(base: pd.DataFrame, history: pd.DataFrame | None, test_id: str, detect: float,
           threshold: float | None, max_repeats: int, default: int, rule_note: str = "") -> AutoRepeats:
    """The count for one point's baseline samples ``base`` at ``threshold`` (None: the gate's
    default; ``rule_note`` says where a test's own came from). Pure: the tests call it too."""
    cfg = GateConfig() if threshold is None else GateConfig(threshold=threshold)
    rule = f"; threshold {100 * cfg.threshold:.3g}%, {rule_note}" if rule_note else ""
    per_run = processes_per_run(base)
    points = plan(base, detect, cfg, history, test_id, DEFAULT_POWER, max_repeats * per_run)
    if not points or not points[0].kernels:
        return AutoRepeats(default, f"repeats auto: {default} (the baseline gates no kernel)")
    p = points[0]
    need, reach = p.count_for()
    what = f"+{100 * detect:.3g}%"
    if need is None and detect <= cfg.threshold:
        n = min(default, max_repeats)
        whose = f" ({rule_note})" if rule_note else ""
        return AutoRepeats(n, f"repeats auto: {n} ({what} is within the {100 * cfg.threshold:.3g}% threshold"
                              f"{whose}: no count detects it; the default count)")
    if need is None:
        return AutoRepeats(max_repeats, f"repeats auto: {max_repeats} (the largest: {what} needs more in "
                                        f"every one of {len(p.kernels)} gated kernels{rule})")
    repeats = min(max(math.ceil(need / per_run), 1), max_repeats)
    each = f", {per_run} processes per repeat" if per_run > 1 else ""
    note = (f"repeats auto: {repeats} (detects {what} in {reach}/{len(p.kernels)} gated kernels at "
            f"{100 * DEFAULT_POWER:g}% power{each}")
    if p.processes < need:
        note += f"; the baseline has {p.processes} processes per side: refresh it from this run for that power"
    return AutoRepeats(repeats, note + rule + ")")


def processes_per_run(samples: pd.DataFrame) -> int:
    """Profiled processes per repeat in a point's samples: units (``host/pid/rank/run``) per
    distinct run; 1 when the unit names do not say."""
    units = pd.unique(samples["unit"].astype(str))
    runs = {u.rsplit("/", 1)[-1] for u in units if u.count("/") >= 3}
    if not runs or len(runs) > len(units):
        return 1
    return max(1, round(len(units) / len(runs)))


def _record(session: GemmperfSession, test_id: str, device: str):
    """(the baseline record of the test, or None; why there is none)."""
    store = session.baseline_store()
    hw = _session_hw_key(session, device)
    if hw is not None:
        rec = store.load(test_id, hw)
        return rec, f"no baseline on {hw} yet"
    keys = sorted(p.name for p in store.root.iterdir()
                  if p.is_dir() and not p.name.startswith(".")) if store.root.is_dir() else []
    held = [k for k in keys if (store.path_for(test_id, k) / META_FILE).is_file()]
    if len(held) != 1:
        return None, ("no baseline yet" if not held
                      else f"baselines on {len(held)} hardware keys and none known for this session yet")
    return store.load(test_id, held[0]), "no baseline yet"


def _session_hw_key(session: GemmperfSession, device: str) -> str | None:
    """The hardware key this session's points found (run.json), else this machine's CPU key on
    the CPU backend (what a CPU point's baseline is stored under), else None."""
    try:
        key = json.loads((session.results.root / RUN_JSON).read_text(encoding="utf-8")).get("hardware_key")
        if key:
            return str(key)
    except (OSError, ValueError, AttributeError):
        pass
    if device == "cpu":
        return cpu_hardware_key()
    return None
