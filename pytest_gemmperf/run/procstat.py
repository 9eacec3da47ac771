"""The host's ``/proc/stat``: one parser, one reader, and one reading per tick for all consumers.

Two things watch the host while a point runs: the telemetry's :class:`~pytest_gemmperf.run.
telemetry_sources.HostSource` (``cpu_busy_frac`` / ``cpu_steal_frac`` rows) and the contention
monitor (:class:`~pytest_gemmperf.run.environment.ContentionMonitor`: runnable threads, busy
and steal CPU seconds). Both read the same file; this module makes them share one read.

* :func:`parse_proc_stat`: the only parser: the ``cpu`` / ``cpuN`` tick lines as one array and
  ``procs_running``. :func:`cpu_ticks_split` is the only definition of busy / steal / total.
* :class:`StatFile`: reads a ``/proc`` or ``/sys`` file through a descriptor kept open between
  reads (``pread`` from offset 0 re-reads it): a third of the cost of open/read/close each time.
* A process-wide feed: a reader that samples ``/proc/stat`` on a schedule (the telemetry's
  host source while its sampler runs) calls :func:`drive` on open, :meth:`Driver.publish`
  with each reading and :meth:`Driver.stop` on close. A consumer that would otherwise poll
  the file itself calls :func:`listen`; while a driver exists it receives the driver's
  readings (``observe``) and is told not to poll (``fed(True)``); without one (from the
  start, or once the last driver stops) it is told to poll (``fed(False)``). So with
  telemetry on, one thread reads and parses ``/proc/stat`` once per tick; with telemetry off
  (or where ``/proc/stat`` cannot be read) the monitor polls alone, as before. Readings are
  about the host, not a point, so any live listener of the same path may take them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

PROC_STAT = "/proc/stat"
#: the tick fields used, in /proc/stat order (guest time is already inside user / nice)
TICK_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class ProcStat:
    """One parsed ``/proc/stat``: ``names`` (``cpu``, ``cpu0``, ...) and ``ticks``, an array of
    shape ``(len(names), 8)`` in :data:`TICK_FIELDS` order (missing trailing fields are 0),
    and ``procs_running`` (None where the kernel does not report it)."""

    names: tuple[str, ...]
    ticks: np.ndarray
    procs_running: float | None

    def total_row(self) -> np.ndarray | None:
        """Ticks of the aggregate ``cpu`` line (None when absent)."""
        try:
            return self.ticks[self.names.index("cpu")]
        except ValueError:
            return None


def parse_proc_stat(text: str) -> ProcStat | None:
    """Parse ``/proc/stat`` text; None when it has no ``cpu`` line or a tick field is not a
    number (not a /proc/stat file)."""
    names: list[str] = []
    rows: list[list[float]] = []
    running: float | None = None
    try:
        for line in text.splitlines():
            if line.startswith("cpu"):
                parts = line.split()
                vals = [float(x) for x in parts[1:9]]
                rows.append(vals + [0.0] * (8 - len(vals)))
                names.append(parts[0])
            elif line.startswith("procs_running"):
                parts = line.split()
                if len(parts) > 1:
                    running = float(parts[1])
    except ValueError:
        return None
    if "cpu" not in names:
        return None
    return ProcStat(tuple(names), np.asarray(rows, dtype="float64").reshape(len(rows), 8), running)


#: weights of the busy fields: user nice system irq softirq (not idle, iowait, steal)
_BUSY = np.array([1, 1, 1, 0, 0, 1, 1, 0], dtype="float64")


def cpu_ticks_split(ticks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(busy, steal, total)`` of tick rows (last axis in :data:`TICK_FIELDS` order). Busy
    leaves out idle, iowait and steal; total is all eight. One definition for the telemetry
    and the contention monitor. Ticks are whole numbers far below 2**53, so these sums are
    exact in float64 whatever the order of addition."""
    t = np.asarray(ticks, dtype="float64")
    return t @ _BUSY, t[..., 7], t.sum(axis=-1)


class StatFile:
    """Read ``/proc`` and ``/sys`` files through descriptors kept open between reads."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def read(self, path: str | Path) -> str:
        """The whole file now (OSError when it cannot be opened or read)."""
        key = str(path)
        fd = self._fds.get(key)
        if fd is None:
            fd = self._fds[key] = os.open(key, os.O_RDONLY)
        chunks, off = [], 0
        while True:
            b = os.pread(fd, 65536, off)
            if not b:
                break
            chunks.append(b)
            off += len(b)
        return b"".join(chunks).decode()

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()


# ------------------------------------------------------------------------------- the feed

class Listener(Protocol):
    def observe(self, stat: ProcStat) -> None: ...

    def fed(self, on: bool) -> None: ...


#: guards the tables; held through the fed() callbacks too, so the transitions of one path
#: (a listener joining, a driver starting or stopping) happen one at a time and in order
_lock = threading.RLock()
_drivers: dict[str, list["Driver"]] = {}
_listeners: dict[str, list[Listener]] = {}


def _key(path: str | Path) -> str:
    return os.path.abspath(str(path))


def listen(path: str | Path, listener: Listener) -> None:
    """Register ``listener`` for readings of ``path`` and tell it at once whether a driver
    feeds it (``fed(True)``: do not poll) or not (``fed(False)``: poll on your own)."""
    k = _key(path)
    with _lock:
        _listeners.setdefault(k, []).append(listener)
        listener.fed(bool(_drivers.get(k)))


def unlisten(path: str | Path, listener: Listener) -> None:
    """Take ``listener`` off: it gets no further readings or ``fed`` calls."""
    k = _key(path)
    with _lock:
        ls = _listeners.get(k, [])
        if listener in ls:
            ls.remove(listener)
        if not ls:
            _listeners.pop(k, None)


class Driver:
    """A reader sampling ``path`` on a schedule (:func:`drive`). Only the first live driver of
    a path publishes, so a listener never gets the same instant twice from two samplers."""

    def __init__(self, path: str | Path) -> None:
        self.key = _key(path)

    def publish(self, stat: ProcStat) -> None:
        """Hand one reading to the path's listeners (a listener's failure stays its own)."""
        with _lock:
            ds = _drivers.get(self.key) or []
            ls = list(_listeners.get(self.key, [])) if ds and ds[0] is self else []
        for listener in ls:  # outside the lock: a slow listener must not hold up the others
            try:
                listener.observe(stat)
            except Exception:  # noqa: BLE001 - evidence collection must never break the sampler
                pass

    def stop(self) -> None:
        """The reader stops: when it was the last one, the listeners resume their own polling."""
        with _lock:
            ds = _drivers.get(self.key, [])
            if self not in ds:
                return
            ds.remove(self)
            if ds:
                return
            _drivers.pop(self.key, None)
            for listener in list(_listeners.get(self.key, [])):
                listener.fed(False)


def drive(path: str | Path) -> Driver:
    """A reader starts sampling ``path`` on a schedule: the path's listeners stop their own
    polling and take its readings (:meth:`Driver.publish`) until :meth:`Driver.stop`."""
    d = Driver(path)
    with _lock:
        ds = _drivers.setdefault(d.key, [])
        ds.append(d)
        if len(ds) == 1:
            for listener in list(_listeners.get(d.key, [])):
                listener.fed(True)
    return d
