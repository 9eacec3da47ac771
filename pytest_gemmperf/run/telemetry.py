"""GPU and host telemetry per sweep point: sampled while the workload runs, stored, summarised
per process, and turned into evidence for the gate.

:class:`TelemetrySampler` is a context manager around a point's workload. A daemon thread
reads every source (``run/telemetry_sources.py``: host always, ``amdsmi`` / ``pynvml`` when
importable and a device answers) every ``interval_s`` (default 0.1 s) and keeps the rows in
memory; :meth:`TelemetrySampler.process` marks the wall-clock window of each workload process
so the samples can be attributed to it. The host source's ``/proc/stat`` reading of each tick
also feeds the point's contention monitor (``run/procstat.py``), so one thread samples the host. Storage (:func:`write_telemetry`):
``<point>/telemetry.parquet`` in long format ``time_ns, host, device, metric, value, unit``.
``time_ns`` is ``CLOCK_REALTIME`` (``time.time_ns()``, ns since the Unix epoch);
``point.json["telemetry"]["clock"]`` states it and records the offsets to ``CLOCK_MONOTONIC``
and ``CLOCK_BOOTTIME`` taken at start, so samples align with trace timestamps of either clock.

:func:`summarise` gives per process and device the min/median/max GFX clock while the GPU
was busy, median power, max temperatures, every clock-event / throttle reason seen with its
seconds (``reasons_seen``: recorded, not judged) and the time a clock-cutting reason was set
while the GPU was busy, i.e. while the process's kernels ran (``throttle_s``, per reason in
``throttle_reasons_s``, clock then in ``throttle_clock_mhz``; each sample counts until the
next, at most two intervals). :func:`evidence` turns that into sentences (``gpu0 power cap
0.4 s while kernels ran in process 3 (clock 1755 MHz, -11 %)``, ``gpu0 clock median 1410 MHz
in process 2, 1980 MHz in the best``) and ``factor``, how much slower than the best process a
process can read from its clock alone (best median clock / its mean clock, >= 1).
``run.environment.assess`` adds them to the point's
:class:`~pytest_gemmperf.run.environment.Disturbance`, so a regression on a throttled point
is ``inconclusive`` unless far beyond that factor. Reasons that cannot slow a kernel (idle,
application or display clocks, sync boost) and any reason while the GPU idled never count:
on an idle H200 they labelled processes whose SM clock held 1980 MHz through the GEMMs.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from pytest_gemmperf.run.telemetry_sources import (CLOCK_CUTTING, REASON_PREFIX, REASON_WORDS, AmdSmiSource,
                                                   HostSource, NvmlSource, visible_indices)
from pytest_gemmperf import safe_io
from pytest_gemmperf.errors import GemmperfInputError

TELEMETRY_FILE = "telemetry.parquet"
COLUMNS = ("time_ns", "host", "device", "metric", "value", "unit")
CLOCK = "CLOCK_REALTIME (time.time_ns(): ns since the Unix epoch)"
DEFAULT_INTERVAL_S = 0.1
#: a process whose median GFX clock is this far below the best process's counts as a clock drop
CLOCK_DROP = 0.05
#: throttled time below this (seconds) is not evidence (one stray sample)
MIN_THROTTLE_S = 0.05
#: GPU activity (%) from which a sample counts as busy for the clock statistics
BUSY_PCT = 50.0
ACTIVITY_METRIC = "gfx_activity_pct"
IDLE_METRIC = "gpu_idle"
#: metrics the panel draws and the summary reads
CLOCK_METRIC, POWER_METRIC, THROTTLE_METRIC = "gfx_clock_mhz", "power_w", "throttle_active"
TEMP_METRICS = ("temp_edge_c", "temp_hotspot_c", "temp_mem_c")
#: clock-cutting reasons NVML also reports during a P-state or clock change: they count only
#: where the sample's clock is below the highest busy clock (by more than CLOCK_DROP)
CLOCK_CHANGE_REASONS = frozenset({"hw_slowdown"})


def _clock_offsets() -> dict[str, int]:
    real = time.time_ns()
    out = {"monotonic_minus_realtime_ns": time.monotonic_ns() - real}
    if hasattr(time, "CLOCK_BOOTTIME"):
        out["boottime_minus_realtime_ns"] = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - real
    return out


class TelemetrySampler:
    """Sample host and GPU telemetry in a background thread while the ``with`` block runs.

    ``sources`` replaces the default set (tests); ``env`` restricts GPUs to the visible-device
    variables the workload gets. ``enabled=False`` records nothing (``--gemmperf-telemetry
    off``, replayed points). Never raises from a source: failures become ``notes``.
    """

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, *, enabled: bool = True,
                 env: dict[str, str] | None = None, sources: list[Any] | None = None) -> None:
        self.interval_s = max(0.01, float(interval_s))
        self.enabled = enabled
        self.host = socket.gethostname()
        idx = visible_indices(env)
        self.sources = sources if sources is not None else [
            HostSource(), AmdSmiSource(indices=idx), NvmlSource(indices=idx)]
        self.rows: list[tuple[int, str, str, float, str]] = []
        self.windows: dict[str, list[int]] = {}
        self.static: dict[str, Any] = {}
        self.notes: list[str] = []
        self.active: list[Any] = []
        self.thread_cpu_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.started_ns = self.stopped_ns = 0
        self.clock_offsets: dict[str, int] = {}

    def __enter__(self) -> "TelemetrySampler":
        if not self.enabled:
            return self
        self.started_ns = time.time_ns()
        self.clock_offsets = _clock_offsets()
        for src in self.sources:
            try:
                ok = src.open()
            except Exception as exc:  # noqa: BLE001 - a source must never break the run
                self.notes.append(f"{getattr(src, 'name', src)}: not opened ({type(exc).__name__}: {exc})")
                ok = False
            if ok:
                self.active.append(src)
                try:
                    self.static[src.name] = src.static()
                except Exception as exc:  # noqa: BLE001
                    self.notes.append(f"{src.name}: static info unreadable ({type(exc).__name__}: {exc})")
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="gemmperf-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.enabled:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sample()
        self.stopped_ns = time.time_ns()
        for src in self.active:
            try:
                src.close()
            except Exception:  # noqa: BLE001
                pass
            for n in getattr(src, "notes", []):
                if n not in self.notes:
                    self.notes.append(n)
        for src in self.sources:
            if src not in self.active:
                self.notes.extend(n for n in getattr(src, "notes", []) if n not in self.notes)

    def _loop(self) -> None:
        t0 = time.thread_time()
        # fixed-rate schedule: a slow sample does not shift the following ones
        nxt = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, nxt - time.monotonic())):
            self._sample()
            nxt += self.interval_s
            if nxt < time.monotonic():
                nxt = time.monotonic() + self.interval_s
        self.thread_cpu_s = time.thread_time() - t0

    def _sample(self) -> None:
        t = time.time_ns()
        got: list[tuple[int, str, str, float, str]] = []
        for src in self.active:
            try:
                got.extend((t, d, m, v, u) for d, m, v, u in src.sample())
            except Exception as exc:  # noqa: BLE001
                self.notes.append(f"{src.name}: sample failed ({type(exc).__name__}: {exc})")
        with self._lock:
            self.rows.extend(got)

    @contextmanager
    def process(self, run: int | str) -> Iterator[None]:
        """Mark the window of workload process ``run`` (its samples are attributed to it)."""
        start = time.time_ns()
        try:
            yield
        finally:
            self.windows[str(run)] = [start, time.time_ns()]

    # -- results
    def frame(self) -> pd.DataFrame:
        with self._lock:
            rows = list(self.rows)
        if not rows:
            return empty_frame()
        t, dev, met, val, unit = zip(*rows)
        return pd.DataFrame({"time_ns": np.asarray(t, dtype="int64"), "host": self.host,
                             "device": list(dev), "metric": list(met),
                             "value": np.asarray(val, dtype="float64"), "unit": list(unit)})

    def metadata(self) -> dict[str, Any]:
        """What ``point.json["telemetry"]`` records (the summary is added by the caller)."""
        if not self.enabled:
            return {"enabled": False}
        wall = max((self.stopped_ns - self.started_ns) / 1e9, 1e-9)
        return {"enabled": True, "file": TELEMETRY_FILE, "clock": CLOCK,
                "clock_offsets": self.clock_offsets, "interval_s": self.interval_s,
                "sources": [s.name for s in self.active], "host": self.host,
                "started_ns": self.started_ns, "stopped_ns": self.stopped_ns,
                "samples": len({r[0] for r in self.rows}), "rows": len(self.rows),
                "processes": {k: list(v) for k, v in self.windows.items()},
                "sampler_cpu_fraction": round(self.thread_cpu_s / wall, 5),
                "static": self.static, "notes": self.notes[:20]}


def empty_frame() -> pd.DataFrame:
    return pd.DataFrame({"time_ns": pd.Series(dtype="int64"), "host": pd.Series(dtype=object),
                         "device": pd.Series(dtype=object), "metric": pd.Series(dtype=object),
                         "value": pd.Series(dtype="float64"), "unit": pd.Series(dtype=object)})


def write_telemetry(point_dir: Path, frame: pd.DataFrame, *, append: bool = False) -> Path:
    """Write (or extend, for a confirmation round) ``<point_dir>/telemetry.parquet``."""
    path = Path(point_dir) / TELEMETRY_FILE
    if append and path.exists():
        frame = pd.concat([read_telemetry(path), frame], ignore_index=True)
    return safe_io.write_parquet(frame.loc[:, list(COLUMNS)], path, index=False)


def read_telemetry(path: Path) -> pd.DataFrame:
    """A ``telemetry.parquet``; a bad file is one ``GemmperfInputError`` line."""
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types
        raise GemmperfInputError(path, f"unreadable telemetry: {exc}") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise GemmperfInputError(path, f"telemetry lacks columns {missing} (expected {list(COLUMNS)})")
    return df


# -------------------------------------------------------------------------- summary / evidence

def assign_process(frame: pd.DataFrame, windows: dict[str, list[int]]) -> pd.Series:
    """Process label of each sample (``""`` outside every window), vectorised per window."""
    out = pd.Series("", index=frame.index, dtype=object)
    t = frame["time_ns"].to_numpy()
    for run, (a, b) in windows.items():
        out[(t >= a) & (t <= b)] = str(run)
    return out


def _durations(times: np.ndarray, interval_s: float) -> np.ndarray:
    """Seconds each sample stands for: until the next one, at most two intervals."""
    if len(times) == 0:
        return np.zeros(0)
    d = np.diff(times, append=times[-1] + int(interval_s * 1e9)) / 1e9
    return np.clip(d, 0.0, 2 * interval_s)


def summarise(frame: pd.DataFrame, windows: dict[str, list[int]], interval_s: float) -> list[dict[str, Any]]:
    """Per (process, device) rows: clock min/median/max (GPUs: over the samples with GFX
    activity >= :data:`BUSY_PCT` where activity is reported), power median, max temperatures,
    reasons seen and clock-cutting seconds while busy (:func:`_reason_summary`). Devices without
    a GFX clock (the host) report CPU frequency and busy fraction instead. ``process`` is
    ``"all"`` when no windows were marked."""
    if frame.empty:
        return []
    f = frame.copy()
    f["process"] = assign_process(f, windows) if windows else "all"
    f = f[f["process"] != ""]
    top = _busy_clock_max(f)
    out = []
    for (proc, dev), g in f.groupby(["process", "device"], sort=True):
        if dev.startswith("cpu"):
            continue  # per-CPU rows: in the parquet, too many for the summary
        row: dict[str, Any] = {"process": str(proc), "device": str(dev)}
        by = {m: s for m, s in g.groupby("metric")}
        clk = by.get(CLOCK_METRIC) if dev != "host" else by.get("cpu_freq_mhz")
        busy = _busy(clk["time_ns"], by) if clk is not None and len(clk) else None
        if busy is not None:
            # an idle GPU parks its clocks: compare clocks only while the GPU was busy (a
            # process is mostly start-up and a short busy phase; its idle share varies)
            row["busy_samples"] = int(busy.sum())
            clk = clk[busy]
        if clk is not None and len(clk):
            v = clk["value"].to_numpy()
            row.update(clock_min_mhz=float(v.min()), clock_median_mhz=float(np.median(v)),
                       clock_mean_mhz=float(v.mean()), clock_max_mhz=float(v.max()))
        if POWER_METRIC in by:
            row["power_median_w"] = float(by[POWER_METRIC]["value"].median())
        for m in TEMP_METRICS:
            if m in by:
                row[m.replace("_c", "_max_c")] = float(by[m]["value"].max())
        if "cpu_busy_frac" in by:
            row["cpu_busy_median"] = float(by["cpu_busy_frac"]["value"].median())
        if dev != "host":
            row.update(_reason_summary(g, by, interval_s, top.get(str(dev))))
        row["samples"] = int(g["time_ns"].nunique())
        out.append(row)
    return out


def _busy(times: pd.Series, by: dict[str, pd.DataFrame]) -> np.ndarray | None:
    """Was the GPU busy at each of ``times``: activity >= :data:`BUSY_PCT`, or the driver does
    not call it idle (NVML's utilisation is a long average and reads 0 % during short bursts).
    None when the device reports neither."""
    if ACTIVITY_METRIC not in by and IDLE_METRIC not in by:
        return None
    t = pd.Series(np.asarray(times))
    busy = np.zeros(len(t), bool)
    if ACTIVITY_METRIC in by:
        busy |= t.map(by[ACTIVITY_METRIC].set_index("time_ns")["value"]).fillna(0.0).to_numpy() >= BUSY_PCT
    if IDLE_METRIC in by:
        busy |= t.map(by[IDLE_METRIC].set_index("time_ns")["value"]).fillna(1.0).to_numpy() == 0.0
    return busy


def _busy_clock_max(f: pd.DataFrame) -> dict[str, float]:
    """Per GPU, the highest GFX clock of a busy sample in any process: what "below its clock"
    means for :data:`CLOCK_CHANGE_REASONS`."""
    out = {}
    for dev, g in f[f["metric"].isin([CLOCK_METRIC, ACTIVITY_METRIC, IDLE_METRIC])].groupby("device"):
        by = {m: s for m, s in g.groupby("metric")}
        clk = by.get(CLOCK_METRIC)
        if clk is None or not len(clk):
            continue
        busy = _busy(clk["time_ns"], by)
        v = clk["value"].to_numpy() if busy is None else clk["value"].to_numpy()[busy]
        if len(v):
            out[str(dev)] = float(v.max())
    return out


def _reason_summary(g: pd.DataFrame, by: dict[str, pd.DataFrame], interval_s: float,
                    top_clock: float | None) -> dict[str, Any]:
    """Reasons of one process and device. ``reasons_seen``: seconds each reason was set, any
    reason, busy or idle (the record). ``throttle_s``: seconds a clock-cutting reason was set
    while the GPU was busy (the evidence), per reason in ``throttle_reasons_s``, with the median
    clock of those samples (``throttle_clock_mhz``). A source that states only
    ``throttle_active`` counts as reason ``throttled``. Empty when the device reports none."""
    samples = {m[len(REASON_PREFIX):]: s for m, s in by.items() if m.startswith(REASON_PREFIX)}
    if not samples:
        if THROTTLE_METRIC not in by:
            return {}
        samples = {"throttled": by[THROTTLE_METRIC]}
    times = np.unique(g["time_ns"].to_numpy())
    dur = pd.Series(_durations(times, interval_s), index=times)
    busy_flags = _busy(pd.Series(times), by)
    busy = pd.Series(True if busy_flags is None else busy_flags, index=times)
    clock = by[CLOCK_METRIC].set_index("time_ns")["value"] if CLOCK_METRIC in by else pd.Series(dtype=float)
    seen: dict[str, float] = {}
    judged: dict[str, float] = {}
    cut = np.zeros(0, dtype=times.dtype)
    for name, s in sorted(samples.items()):
        on = np.unique(s.loc[s["value"] > 0, "time_ns"].to_numpy())
        if not len(on):
            continue
        seen[name] = round(float(dur.reindex(on).sum()), 3)
        if name not in CLOCK_CUTTING:
            continue
        on = on[busy.reindex(on).fillna(True).to_numpy(bool)]
        if name in CLOCK_CHANGE_REASONS and top_clock:
            c = clock.reindex(on).to_numpy(float)
            on = on[~(c >= (1 - CLOCK_DROP) * top_clock)]  # no clock read: keep it
        if len(on):
            judged[name] = round(float(dur.reindex(on).sum()), 3)
            cut = np.union1d(cut, on)
    out: dict[str, Any] = {"throttle_s": round(float(dur.reindex(cut).sum()), 3),
                           "throttle_reasons_s": judged, "reasons_seen": seen}
    c = clock.reindex(cut).dropna()
    if len(c):
        out["throttle_clock_mhz"] = float(c.median())
    return out


@dataclass(frozen=True)
class Finding:
    """One piece of telemetry evidence: which device, which process, and the sentence."""

    device: str
    process: str
    text: str


def findings(summary: list[dict[str, Any]] | None, *,
             include_host: bool = False) -> tuple[list[Finding], float]:
    """(findings, factor) from a point's per-process summary: processes with a clock-cutting
    reason while their kernels ran, processes whose median clock fell more than
    :data:`CLOCK_DROP` below the best process's. ``factor`` (>= 1): best median clock / the
    slowest process's mean clock. The host's CPU frequency counts only with ``include_host``
    (CPU-bound measurements)."""
    if not summary:
        return [], 1.0
    s = pd.DataFrame(summary)
    if not include_host:
        s = s[s["device"] != "host"]
    if s.empty:
        return [], 1.0
    found: list[Finding] = []
    factor = 1.0
    for dev, g in s.groupby("device", sort=True):
        label = "CPU frequency" if dev == "host" else f"{dev} clock"
        top = float(g["clock_max_mhz"].max()) if "clock_max_mhz" in g and g["clock_max_mhz"].notna().any() else None
        if "throttle_s" in g:
            for r in g[g["throttle_s"].fillna(0) >= MIN_THROTTLE_S].to_dict("records"):
                found.append(Finding(str(dev), str(r["process"]), _throttle_text(str(dev), r, top)))
        if "clock_median_mhz" in g and g["clock_median_mhz"].notna().any():
            best = float(g["clock_median_mhz"].max())
            if best > 0:
                drop = g[g["clock_median_mhz"] < (1 - CLOCK_DROP) * best]
                for r in drop.itertuples(index=False):
                    found.append(Finding(str(dev), str(r.process),
                                         f"{label} median {r.clock_median_mhz:.0f} MHz in {_proc(r.process)}, "
                                         f"{best:.0f} MHz in the best"))
                m = g["clock_mean_mhz"] if "clock_mean_mhz" in g else g["clock_median_mhz"]
                mean = m.where(m > 0)
                if mean.notna().any() and (len(drop) or ("throttle_s" in g and
                                                         (g["throttle_s"].fillna(0) >= MIN_THROTTLE_S).any())):
                    factor = max(factor, best / float(mean.min()))
    return found, float(factor)


def evidence(summary: list[dict[str, Any]] | None, *, include_host: bool = False) -> tuple[list[str], float]:
    """(sentences, factor) of :func:`findings`."""
    found, factor = findings(summary, include_host=include_host)
    return [f.text for f in found], factor


def reasons_text(reasons: Any, *, min_s: float = MIN_THROTTLE_S) -> str:
    """``{"power_cap": 0.4, "idle": 0.01}`` -> ``"power cap 0.4 s"``: the reasons set at least
    ``min_s`` (else the longest one), longest first. Text (a report's column) comes back as is;
    anything else is ``""``."""
    if isinstance(reasons, str):
        return reasons
    if not isinstance(reasons, dict) or not reasons:
        return ""
    ranked = sorted(reasons.items(), key=lambda kv: (-float(kv[1]), kv[0]))
    shown = [kv for kv in ranked if float(kv[1]) >= min_s] or ranked[:1]
    return ", ".join(f"{REASON_WORDS.get(k, str(k).replace('_', ' '))} {float(v):.1f} s" for k, v in shown)


def _throttle_text(dev: str, r: dict[str, Any], top_clock: float | None) -> str:
    words = reasons_text(r.get("throttle_reasons_s"))
    if not words:  # a summary written before reasons were recorded
        return f"{dev} throttled {r['throttle_s']:.1f} s in {_proc(r['process'])}"
    text = f"{dev} {words} while kernels ran in {_proc(r['process'])}"
    clock = r.get("throttle_clock_mhz")
    if isinstance(clock, (int, float)) and np.isfinite(clock):
        pct = f", {round(100 * (clock / top_clock - 1))} %" if top_clock else ""
        text += f" (clock {clock:.0f} MHz{pct})"
    return text


def _proc(p: str) -> str:
    return "the point" if p == "all" else f"process {p}"


def note_rows(verdicts: pd.DataFrame, reasons: list[str]) -> pd.DataFrame:
    """Every verdict row of the point carries the telemetry evidence of its processes
    (``telemetry: gpu0 power cap 0.4 s while kernels ran in process 3 (clock 1755 MHz, -11 %)``)
    unless its note already says it."""
    if verdicts.empty or not reasons:
        return verdicts
    text = "telemetry: " + "; ".join(reasons[:4]) + (f" (+{len(reasons) - 4} more)" if len(reasons) > 4 else "")
    v = verdicts.copy()
    note = v["note"].astype(object).where(v["note"].notna(), "").astype(str)
    has = note.str.contains(reasons[0], regex=False)
    v["note"] = np.where(has, note, np.where(note == "", text, note + "; " + text))
    return v


def affected_processes(summary: list[dict[str, Any]] | None) -> set[str]:
    """Processes that :func:`evidence` names (a clock-cutting reason while kernels ran, or a
    GPU clock drop)."""
    found, _ = findings(summary)
    return {f.process for f in found if f.process != "all"}


def slowest_process_notes(verdicts: pd.DataFrame, dispatches: pd.DataFrame, affected: set[str]) -> pd.DataFrame:
    """On each ``dur_ns`` row judged regression / inconclusive, name the kernel's slowest
    process (highest per-process median duration) and whether the telemetry saw it throttled
    or clocked down: does the slowness coincide with the machine's state?"""
    if verdicts.empty or not affected or dispatches is None or dispatches.empty or \
            not {"kernel", "run", "dur_ns"} <= set(dispatches.columns):
        return verdicts
    d = dispatches[["kernel", "run", "dur_ns"]].dropna()
    if d.empty:
        return verdicts
    med = d.assign(kernel=d["kernel"].astype(str), run=d["run"].astype("int64").astype(str)) \
        .groupby(["kernel", "run"], sort=False)["dur_ns"].median()
    n_runs = med.groupby(level=0).size()
    slowest = med.groupby(level=0).idxmax().map(lambda kr: kr[1])
    slowest = slowest[n_runs.reindex(slowest.index) > 1]
    v = verdicts.copy()
    # the gate's names (gate/metrics.DUR_NS, gate/verdict.py) as text: run/ sits below gate/
    hit = (v["metric"].astype(str) == "dur_ns") & v["verdict"].isin(["regression", "inconclusive"])
    proc = v["kernel"].astype(str).map(slowest)
    hit &= proc.notna()
    if not hit.any():
        return verdicts
    text = np.where(proc[hit].isin(affected),
                    "slowest process " + proc[hit].astype(str) + " coincides with throttling / a clock drop",
                    "slowest process " + proc[hit].astype(str) + " ran without throttling or clock drop")
    note = v["note"].astype(object).where(v["note"].notna(), "").astype(str)
    v.loc[hit, "note"] = np.where(note[hit] == "", text, note[hit] + "; " + text)
    return v


def windows_from_dispatches(dispatches: pd.DataFrame, boottime_minus_realtime_ns: int | None) -> dict[str, list[int]]:
    """Process windows from rocprofv3 dispatches (``CLOCK_BOOTTIME`` ns, rocprofv3-formats.md):
    per ``run``, first start to last end, moved onto the telemetry's ``CLOCK_REALTIME``. These
    windows are the GPU-busy part of each process, so samples align with its kernel timeline.
    Empty when the offset or the columns are missing."""
    if boottime_minus_realtime_ns is None or dispatches is None or dispatches.empty or \
            not {"run", "start_ns", "end_ns"} <= set(dispatches.columns):
        return {}
    d = dispatches[["run", "start_ns", "end_ns"]].dropna()
    g = d.groupby(d["run"].astype("int64"), sort=True).agg(a=("start_ns", "min"), b=("end_ns", "max"))
    off = int(boottime_minus_realtime_ns)
    return {str(r): [int(a) - off, int(b) - off] for r, a, b in zip(g.index, g["a"], g["b"])}
