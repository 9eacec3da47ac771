"""Evidence of contention while a sweep point runs, and what it does to the point's verdicts.

A performance gate must not blame the code for a busy machine. :class:`ContentionMonitor` runs
beside a point's workload and records, into the point's metadata (``point.json``
``environment``):

* ``cores``: CPUs this process may run on (``sched_getaffinity``).
* ``runnable_mean`` / ``runnable_max``: runnable threads on the host (``procs_running`` of
  ``/proc/stat`` at each sample, minus the sampling thread itself). Includes the workload's
  own threads: a workload that oversubscribes the box disturbs itself. ``samples``: how many.
* ``own_cpu_cores``: CPU time of this process and its finished children (the workload's
  launcher and ranks) per wall second.
* ``foreign_cpu_cores``: busy CPU time of the whole host (``/proc/stat`` user + nice + system
  + irq + softirq) minus our own, per wall second: other engineers' jobs, other pytest
  sessions.
* ``steal_fraction``: CPU steal (hypervisor gave our vCPUs to someone else) / capacity.
* ``load1_start`` / ``load1_end``: 1-minute load average (context; it lags by design).
* ``concurrent_points``: other gemmperf points that ran at the same time on this host in the
  same session (pytest-xdist workers), seen through marker files in ``<results>/.active/``.

:func:`assess` turns the evidence into a :class:`Disturbance`: whether the point was disturbed,
the reasons in words, and ``factor``, how much slower than undisturbed a CPU-bound measurement
can read there (runnable threads per core, CPU demand per core, 1 / (1 - steal), concurrent
points sharing the devices). ``gate.confirm.apply_disturbance`` makes a ``regression`` or
``improvement`` on a disturbed point ``inconclusive`` with the note ``noisy environment:
...``, unless its whole confidence interval lies beyond ``(1 + threshold) * factor`` (far
beyond anything the contention can explain).

Sampling: one thread per process reads ``/proc/stat`` (``run/procstat.py``). While the
telemetry sampler runs (``--gemmperf-telemetry`` on, the default), its host source reads the
file at every telemetry tick and hands the parsed reading to the monitor, which keeps no
thread of its own; otherwise (telemetry off, replay, another ``proc_stat`` path) the monitor
polls every ``interval_s`` itself. Either way each reading goes through
:func:`read_proc_stat`, the monitor's one view of the host's CPU state.

Only Linux exposes ``/proc/stat``; elsewhere the CPU fields are left out and only concurrent
points count.
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pytest_gemmperf import safe_io
from pytest_gemmperf.run import procstat
from pytest_gemmperf.run.procstat import PROC_STAT, ProcStat
from pytest_gemmperf.run.telemetry import evidence as telemetry_evidence

#: thresholds of :func:`assess` (documented in the README's "noisy environments")
RUNNABLE_EXCESS = 0.5      # runnable threads beyond the cores (+ this) count as contention
FOREIGN_SHARE = 0.25       # other processes' CPU use beyond this share of the cores (min 0.5 core)
STEAL_SHARE = 0.05         # CPU steal beyond 5 % of the capacity
ACTIVE_DIR = ".active"


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def read_proc_stat(path: str = PROC_STAT, parsed: ProcStat | None = None) -> dict[str, float] | None:
    """``busy`` / ``steal`` / ``total`` CPU seconds of the host and ``procs_running`` (None
    where the file cannot be read or is not a /proc/stat file).

    ``parsed``: a reading of ``path`` already taken (the telemetry's host source hands its
    tick's reading over), so the file is not read and parsed a second time.
    """
    if parsed is None:
        try:
            parsed = procstat.parse_proc_stat(Path(path).read_text())
        except OSError:
            return None
    row = parsed.total_row() if parsed is not None else None
    if row is None:
        return None
    tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
    busy, steal, total = (float(x) for x in procstat.cpu_ticks_split(row))
    out = {"busy": busy / tick, "steal": steal / tick, "total": total / tick}
    if parsed.procs_running is not None:
        out["procs_running"] = parsed.procs_running
    return out


def _own_cpu_s() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _load1() -> float | None:
    try:
        return round(float(os.getloadavg()[0]), 2)  # as /proc/loadavg shows it
    except (AttributeError, OSError):
        return None


@dataclass
class ContentionMonitor:
    """Context manager recording contention evidence while a point runs (see module doc).

    ``marker_dir``: the session's ``<results>/.active`` (shared by its xdist workers); ``label``
    names this point in the other workers' evidence. ``proc_stat`` is replaceable for tests.
    ``interval_s``: the polling interval when no telemetry sampler feeds the monitor.
    """

    marker_dir: Path | None = None
    label: str = ""
    interval_s: float = 0.25
    proc_stat: str = PROC_STAT
    #: False: record nothing (a replayed point measured nothing on this machine)
    enabled: bool = True
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._runnable: list[float] = []
        self._others: set[str] = set()
        self._marker: Path | None = None
        self._thread: threading.Thread | None = None
        self._open = False

    # -- lifecycle
    def __enter__(self) -> "ContentionMonitor":
        if not self.enabled:
            return self
        self._t0 = time.monotonic()
        self._stat0 = read_proc_stat(self.proc_stat)
        self._own0 = _own_cpu_s()
        self._load0 = _load1()
        if self.marker_dir is not None:
            try:
                self.marker_dir.mkdir(parents=True, exist_ok=True)
                self._marker = self.marker_dir / f"{os.getpid()}.json"
                safe_io.write_text(self._marker, json.dumps({"point": self.label, "pid": os.getpid()}))
            except OSError:
                self._marker = None
        self._sample(self._stat0)
        self._open = True
        # fed(): starts the polling thread unless a telemetry sampler already reads the file
        procstat.listen(self.proc_stat, self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.enabled:
            return
        procstat.unlisten(self.proc_stat, self)
        self._open = False
        self._stop_polling()
        st1 = read_proc_stat(self.proc_stat)
        self._sample(st1)
        if self._marker is not None:
            try:
                self._marker.unlink()
                self.marker_dir.rmdir()  # only when no other point is running
            except OSError:
                pass
        self.evidence = self._summary(st1)

    # -- procstat.Listener: readings handed over by the telemetry's host source
    def fed(self, on: bool) -> None:
        """Stop polling while a driver feeds :meth:`observe`; poll again when it stops."""
        if on:
            self._stop_polling()
        elif self._open and self._thread is None:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._loop, args=(self._stop,),
                                            name="gemmperf-contention", daemon=True)
            self._thread.start()

    def observe(self, stat: ProcStat) -> None:
        if self._open:
            self._sample(read_proc_stat(self.proc_stat, parsed=stat))

    def _stop_polling(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            self._sample(read_proc_stat(self.proc_stat))

    def _sample(self, st: dict[str, float] | None) -> None:
        if st is not None and "procs_running" in st:
            self._runnable.append(max(0.0, st["procs_running"] - 1))  # minus the sampler
        if self.marker_dir is not None:
            try:
                names = [p for p in self.marker_dir.glob("*.json") if p != self._marker]
            except OSError:
                names = []
            for p in names:
                try:
                    self._others.add(json.loads(p.read_text()).get("point") or p.stem)
                except (OSError, ValueError):
                    continue  # removed while we looked, or half written

    def _summary(self, st1: dict[str, float] | None) -> dict[str, Any]:
        wall = max(time.monotonic() - self._t0, 1e-6)
        cores = _cores()
        own = max(0.0, _own_cpu_s() - self._own0)
        ev: dict[str, Any] = {"cores": cores, "wall_s": round(wall, 3),
                              "own_cpu_cores": round(own / wall, 3),
                              "load1_start": self._load0, "load1_end": _load1(),
                              "concurrent_points": len(self._others),
                              "concurrent": sorted(self._others)[:8]}
        if self._stat0 is not None and st1 is not None:
            busy = st1["busy"] - self._stat0["busy"]
            span = max(st1["total"] - self._stat0["total"], 1e-6)
            ev["foreign_cpu_cores"] = round(max(0.0, busy - own) / wall, 3)
            ev["steal_fraction"] = round(max(0.0, st1["steal"] - self._stat0["steal"]) / span, 4)
        if self._runnable:
            ev["runnable_mean"] = round(float(np.mean(self._runnable)), 3)
            ev["runnable_max"] = float(np.max(self._runnable))
            ev["samples"] = len(self._runnable)
        return ev


@dataclass(frozen=True)
class Disturbance:
    """What :func:`assess` concluded from a point's evidence."""

    disturbed: bool
    reasons: tuple[str, ...] = ()
    factor: float = 1.0

    @property
    def text(self) -> str:
        return "noisy environment: " + "; ".join(self.reasons) if self.reasons else ""

    def as_dict(self) -> dict[str, Any]:
        # the factor unrounded: `gemmperf compare` re-applies it and must reach the same verdicts
        return {"disturbed": self.disturbed, "reasons": list(self.reasons), "factor": float(self.factor)}

    @classmethod
    def from_dict(cls, doc: Any) -> "Disturbance":
        """The :meth:`as_dict` form read back (point.json); anything else: undisturbed."""
        if not isinstance(doc, dict) or not doc.get("disturbed"):
            return cls(False)
        reasons = tuple(str(r) for r in doc.get("reasons") or () if isinstance(r, str))
        try:
            factor = float(doc.get("factor", 1.0))
        except (TypeError, ValueError):
            factor = 1.0
        return cls(True, reasons, factor if factor == factor and factor >= 1.0 else 1.0)


def assess(evidence: dict[str, Any] | None, *, shares_devices: bool = True,
           cpu_bound: bool = True) -> Disturbance:
    """Was the point disturbed, why, and by how much at most (``factor`` >= 1).

    ``shares_devices``: concurrent points compete for the same devices (a CPU run, or GPU
    points without ``--gemmperf-gpus-per-point``); points on disjoint GPUs do not disturb each
    other through the devices. ``cpu_bound``: the measured durations are CPU time (the CPU
    backend's operators). GPU kernel durations are timed on the GPU and do not stretch when
    the host's CPUs are busy, so for them only concurrent points sharing the devices and the
    GPUs' own telemetry count.

    Telemetry (``evidence["telemetry"]``: the per-process summary of ``run/telemetry.py``)
    adds throttled GPUs and GPU clock drops (``gpu0 throttled 1.8 s in process 3``) with
    the factor the clocks explain (best median clock / the slowest process's mean clock).
    """
    if not evidence:
        return Disturbance(False)
    base = _assess_contention(evidence, shares_devices=shares_devices, cpu_bound=cpu_bound)
    summary = evidence.get("telemetry")
    if not summary:
        return base

    # the host's CPU frequency is recorded but not gated on: CPU contention is judged above,
    # and frequency scaling on shared CI hosts would make every CPU run look disturbed
    reasons, factor = telemetry_evidence(summary, include_host=False)
    if not reasons:
        return base
    return Disturbance(True, base.reasons + tuple(reasons), max(base.factor, factor))


def _assess_contention(evidence: dict[str, Any], *, shares_devices: bool, cpu_bound: bool) -> Disturbance:
    if not cpu_bound:
        others = int(evidence.get("concurrent_points") or 0)
        if others and shares_devices:
            return Disturbance(True, (f"{others} other gemmperf point(s) ran on the same devices at the "
                                      "same time (pytest-xdist workers without --gemmperf-gpus-per-point)",),
                               1.0 + others)
        return Disturbance(False)
    cores = float(evidence.get("cores") or 1)
    reasons: list[str] = []
    factors = [1.0]
    others = int(evidence.get("concurrent_points") or 0)
    if others and shares_devices:
        reasons.append(f"{others} other gemmperf point(s) ran at the same time on this host "
                       "(pytest-xdist workers share its CPUs/devices)")
        factors.append(1.0 + others)
    runnable = evidence.get("runnable_mean")
    if runnable is not None and runnable > cores + RUNNABLE_EXCESS:
        reasons.append(f"{runnable:.1f} runnable threads on {cores:g} cores")
        factors.append(runnable / cores)
    foreign = evidence.get("foreign_cpu_cores")
    own = float(evidence.get("own_cpu_cores") or 0.0)
    if foreign is not None and foreign > max(0.5, FOREIGN_SHARE * cores):
        reasons.append(f"other processes used {foreign:.1f} of {cores:g} cores")
        factors.append(max(1.0, (foreign + own) / cores))
    steal = evidence.get("steal_fraction")
    if steal is not None and steal > STEAL_SHARE:
        reasons.append(f"CPU steal {100 * steal:.0f}%")
        factors.append(1.0 / max(1e-3, 1.0 - steal))
    return Disturbance(bool(reasons), tuple(reasons), float(max(factors)))


def probe(seconds: float, proc_stat: str = PROC_STAT) -> dict[str, Any]:
    """The host's contention evidence over ``seconds`` with nothing of ours running (what
    :func:`wait_for_quiet` measures between re-runs)."""
    monitor = ContentionMonitor(interval_s=min(0.25, max(0.01, seconds / 4)), proc_stat=proc_stat)
    with monitor:
        time.sleep(max(0.0, seconds))
    return monitor.evidence


def wait_for_quiet(budget_s: float, judge: Any, *, probe_s: float = 1.0,
                   measure: Any = None, on_wait: Any = None) -> tuple[float, Disturbance]:
    """Wait, up to ``budget_s`` seconds, until the host is quiet: ``judge(evidence) ->
    Disturbance`` of a ``probe_s``-second measurement (``measure(seconds)``, default
    :func:`probe`) says undisturbed. ``on_wait(waited_s, disturbance)`` hears each disturbed
    measurement (the progress line). Returns (seconds waited, the last assessment)."""
    measure = measure or probe
    start = time.monotonic()
    last = Disturbance(False)
    while True:
        waited = time.monotonic() - start
        step = min(probe_s, max(0.0, budget_s - waited))
        if step <= 0:
            return waited, last
        last = judge(measure(step))
        waited = time.monotonic() - start
        if not last.disturbed:
            return waited, last
        if on_wait is not None:
            on_wait(waited, last)


def combine(*evidence: dict[str, Any] | None) -> dict[str, Any] | None:
    """Evidence of several runs of one point as one (worst case per field)."""
    evs = [e for e in evidence if e]
    if not evs:
        return None
    out: dict[str, Any] = dict(evs[0])
    for e in evs[1:]:
        for k, v in e.items():
            if isinstance(v, (int, float)) and isinstance(out.get(k), (int, float)) and k != "cores":
                out[k] = max(out[k], v)
            elif k not in out:
                out[k] = v
    return out
