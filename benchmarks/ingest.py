"""Ingest speed: rocprofv3 JSON reader against the floor of simply decoding the same bytes.

Prints, for ../shared/data/tracelens/908_results.json.gz (43,915 dispatches, 37.5 MB of JSON):
wall time (best and median of N) of ``read_rocprof_json`` into the canonical dispatches table,
gunzip alone, a bare ``orjson.loads`` / ``msgspec.json.decode`` of the decompressed bytes, the
ratio reader / (gunzip + fastest bare decode), and peak RSS measured in fresh subprocesses (so each
number is that code's own peak, not this script's). Then runs ``benchmarks/ingest_csv.py``'s
``main()`` when that file exists (1M-row kernel_trace.csv numbers).

Usage: python benchmarks/ingest.py [--repeat N]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data" / "tracelens" / "908_results.json.gz"

# VmHWM (not ru_maxrss): Linux carries ru_maxrss over from the forking parent, VmHWM starts anew
# with the exec'ed interpreter.
_RSS_CHILD = """
import sys, gzip
sys.path.insert(0, {repo!r})
def hwm_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
what, path = sys.argv[1], sys.argv[2]
import msgspec, numpy, pandas  # imports are not the reader's cost
try:
    import orjson
except ImportError:
    orjson = None
from pytest_gemmperf.traces.rocprof_json import read_rocprof_json
base = hwm_kib()
if what == "reader":
    n = len(read_rocprof_json(path).dispatches)
elif what == "orjson":
    n = len(orjson.loads(gzip.decompress(open(path, "rb").read()))["rocprofiler-sdk-tool"])
else:
    n = len(msgspec.json.decode(gzip.decompress(open(path, "rb").read()))["rocprofiler-sdk-tool"])
peak = hwm_kib()
print(base, peak, n)
"""


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(best wall, median wall, best CPU) seconds. CPU time is reported too because the 2 shared
    cores are often busy with other work, which inflates wall time but not CPU time."""
    fn()  # warm caches and imports once
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
    return min(wall), statistics.median(wall), min(cpu)


def peak_rss_mib(what: str, path: Path) -> tuple[float, float]:
    """(peak RSS after imports, peak RSS after the work) of a fresh interpreter, in MiB (Linux)."""
    out = subprocess.run([sys.executable, "-c", _RSS_CHILD.format(repo=str(REPO)), what, str(path)],
                         capture_output=True, text=True, check=True).stdout.split()
    base_kib, peak_kib = int(out[0]), int(out[1])
    return base_kib / 1024, peak_kib / 1024


def bench_json(repeat: int) -> None:
    import msgspec
    try:
        import orjson
    except ImportError:  # optional: the msgspec floor alone is still a floor
        orjson = None

    sys.path.insert(0, str(REPO))
    from pytest_gemmperf.traces.rocprof_json import read_rocprof_json

    raw = DATA.read_bytes()
    data = gzip.decompress(raw)
    n = len(read_rocprof_json(DATA).dispatches)
    print(f"file: {DATA} ({len(raw) / 1e6:.2f} MB gzip, {len(data) / 1e6:.1f} MB JSON, "
          f"{n:,} dispatches)")
    print(f"repeat: {repeat} (seconds: best wall / median wall / best CPU); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

    bare_orjson = (("bare orjson.loads(json bytes)", timed(lambda: orjson.loads(data), repeat))
                   if orjson is not None else None)
    rows = [
        ("gunzip (gzip.decompress)", timed(lambda: gzip.decompress(raw), repeat)),
        ("bare msgspec.json.decode(json bytes)", timed(lambda: msgspec.json.decode(data), repeat)),
        ("read_rocprof_json(.json.gz) -> Trace", timed(lambda: read_rocprof_json(DATA), repeat)),
    ]
    if bare_orjson is not None:
        rows.insert(1, bare_orjson)
    for name, (best, med, cpu) in rows:
        print(f"  {name:40s} {best:7.3f}  {med:7.3f}  {cpu:7.3f}")
    gunzip = rows[0][1]
    bare = [r[1] for r in rows[1:-1]]
    reader = rows[-1][1]
    floor = gunzip[0] + min(b[0] for b in bare)
    print(f"  floor = gunzip + fastest bare decode    {floor:7.3f}")
    print(f"  ratio reader / floor (best)             {reader[0] / floor:7.2f}x   (limit 2.5x)")
    cpu_floor = gunzip[2] + min(b[2] for b in bare)
    print(f"  ratio reader / floor (best CPU)         {reader[2] / cpu_floor:7.2f}x")
    reader_cpu = reader[2]
    reader = reader[0]
    print(f"  reader best vs 0.25 s budget            {'OK' if reader <= 0.25 else 'OVER'}")
    # one core's work (the key-scan thread waits while msgspec holds the GIL): quiet wall = CPU
    print(f"  reader best CPU vs 0.25 s budget        {'OK' if reader_cpu <= 0.25 else 'OVER'}"
          f"   (the quiet wall time it predicts)")

    print("peak RSS in a fresh process (MiB): after imports -> after the work")
    for what in ("reader", "orjson", "msgspec") if orjson is not None else ("reader", "msgspec"):
        base, peak = peak_rss_mib(what, DATA)
        print(f"  {what:8s} {base:7.1f} -> {peak:7.1f}  (+{peak - base:.1f})")


def run_csv_bench() -> None:
    csv_bench = REPO / "benchmarks" / "ingest_csv.py"
    if not csv_bench.exists():
        print("benchmarks/ingest_csv.py not present: no CSV numbers")
        return
    spec = importlib.util.spec_from_file_location("ingest_csv", csv_bench)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    print("\n--- benchmarks/ingest_csv.py ---")
    mod.main()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-csv", action="store_true", help="skip benchmarks/ingest_csv.py")
    args = ap.parse_args(argv)
    if DATA.exists():
        bench_json(args.repeat)
    else:
        print(f"skipped JSON benchmark: {DATA} is absent (it lives in ../shared beside the checkout)")
    if not args.no_csv:
        run_csv_bench()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
