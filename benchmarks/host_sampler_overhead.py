"""CPU cost of watching the host while a point runs: contention monitor + telemetry sampler.

The plugin enters both around every point (``with monitor, sampler:``). This measures what
they cost together on this machine: process CPU time (``resource.getrusage``) per wall
second while the main thread sleeps, the number of ``/proc/stat`` reads (counted by wrapping
``os.pread`` / ``io.open`` for that path) and the sampling threads alive, with telemetry on and
off. A third line times one host-source sample (``/proc/stat`` of this machine: per-CPU rows).

Usage: python benchmarks/host_sampler_overhead.py [--seconds 5] [--interval 0.1] [--calls 300]
(run it with PYTHONPATH pointing at another checkout to compare versions).
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import threading
import time

from pytest_gemmperf.run.environment import ContentionMonitor
from pytest_gemmperf.run.telemetry import TelemetrySampler
from pytest_gemmperf.run.telemetry_sources import HostSource

STAT = "/proc/stat"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _Reads:
    """Count reads of /proc/stat, by open() for reading or by a pread from offset 0."""

    def __init__(self) -> None:
        self.n, self.fds = 0, set()
        self._open, self._pread, self._io_open = os.open, os.pread, io.open

    def __enter__(self) -> "_Reads":
        def o(path, *a, **k):
            fd = self._open(path, *a, **k)
            if str(path) == STAT:
                self.fds.add(fd)
            return fd

        def p(fd, n, off):
            if off == 0 and fd in self.fds:
                self.n += 1
            return self._pread(fd, n, off)

        def i(file, mode="r", *a, **k):
            if str(file) == STAT and "r" in mode:
                self.n += 1
            return self._io_open(file, mode, *a, **k)

        os.open, os.pread, io.open = o, p, i
        return self

    def __exit__(self, *exc) -> None:
        os.open, os.pread, io.open = self._open, self._pread, self._io_open


def steady(seconds: float, interval: float, telemetry: bool) -> str:
    mon = ContentionMonitor()
    sampler = TelemetrySampler(interval, enabled=telemetry)
    with _Reads() as reads:
        c0, t0 = _cpu(), time.perf_counter()
        with mon, sampler:
            time.sleep(seconds / 2)
            threads = sorted(t.name for t in threading.enumerate() if t.name.startswith("gemmperf-"))
            time.sleep(seconds / 2)
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
    ticks = sampler.metadata().get("samples", 0)
    return (f"telemetry {'on ' if telemetry else 'off'}: {100 * cpu / wall:.2f} % of one core, "
            f"{reads.n} /proc/stat reads in {wall:.1f} s ({ticks} telemetry ticks, "
            f"{mon.evidence.get('samples')} contention samples), threads {threads}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    print(steady(a.seconds, a.interval, True))
    print(steady(a.seconds, a.interval, False))
    h = HostSource()
    h.open()
    c0 = time.thread_time()
    for _ in range(a.calls):
        rows = h.sample()
    c1 = time.thread_time()
    h.close()
    print(f"one host sample: {1e6 * (c1 - c0) / a.calls:.0f} µs CPU, {len(rows)} rows (mean of {a.calls})")


if __name__ == "__main__":
    main()
