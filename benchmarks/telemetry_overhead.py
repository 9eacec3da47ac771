"""CPU overhead of the telemetry sampler (run/telemetry.py) on this machine.

Two measurements, both with the sources the plugin would use here (host always; amdsmi /
pynvml when importable and a device answers):

1. cost of one sample: ``_sample()`` called back to back N times, CPU time (thread) and wall
   time per call;
2. steady state: the sampler running ``--seconds`` at ``--interval`` while the main thread
   sleeps; CPU time of the sampling thread (``time.thread_time`` inside it) and of the whole
   process (``resource.getrusage``) per wall second, in % of one core.

Usage: python benchmarks/telemetry_overhead.py [--seconds 10] [--interval 0.1] [--calls 300]
"""

from __future__ import annotations

import argparse
import resource
import time

from pytest_gemmperf.run.telemetry import TelemetrySampler


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()

    s = TelemetrySampler(a.interval)
    with s:
        s._stop.set()  # stop the thread at once: measure bare sample calls below
        s._thread.join()
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(a.calls):
            s._sample()
        c1, w1 = time.thread_time(), time.perf_counter()
    per_row = len(s.rows) / max(1, a.calls + 2)
    print(f"sources: {', '.join(s.metadata()['sources'])}; {per_row:.0f} rows per sample")
    print(f"one sample: {1e6 * (c1 - c0) / a.calls:.0f} µs CPU, {1e6 * (w1 - w0) / a.calls:.0f} µs wall "
          f"(mean of {a.calls})")
    for n in s.notes:
        print("  note:", n)

    s = TelemetrySampler(a.interval)
    p0, t0 = _cpu(), time.perf_counter()
    with s:
        time.sleep(a.seconds)
    wall = time.perf_counter() - t0
    proc = _cpu() - p0
    meta = s.metadata()
    print(f"steady state {a.seconds:g} s at {a.interval:g} s: {meta['samples']} samples "
          f"({meta['samples'] / wall:.1f}/s), {meta['rows']} rows")
    print(f"sampler thread CPU: {100 * s.thread_cpu_s / wall:.3f} % of one core; whole process "
          f"(incl. start/stop and frame building): {100 * proc / wall:.3f} %")
    t = time.perf_counter()
    f = s.frame()
    print(f"frame of {len(f)} rows built in {1e3 * (time.perf_counter() - t):.1f} ms")


if __name__ == "__main__":
    main()
