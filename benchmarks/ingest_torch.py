"""Ingest speed of the PyTorch (Kineto) reader against a bare JSON decode of the same bytes.

Builds a large trace by repeating the events of the real MI350X trace
(../shared/data/aorta/*.pt.trace.json; the repo fixture when absent) N times, shifting
timestamps, correlation and External ids, so event shapes, nesting and linkage are real.
Prints: events and dispatches, bytes, best-of-R wall time of ``read_torch_trace`` (decode +
dispatches + cpu_op linkage + collectives), of ``msgspec.json.decode`` alone (untyped), and the
ratio.

Usage: python benchmarks/ingest_torch.py [--copies N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
REAL = REPO.parent / "shared" / "data" / "aorta" / "smci350-zts-gtu-c6-25_200691.1758927066581847260.pt.trace.json"
FIXTURE = REPO / "tests" / "fixtures" / "torch" / "rocm_sdk_rank3.pt.trace.json"


def build(copies: int) -> tuple[bytes, int]:
    src = REAL if REAL.exists() else FIXTURE
    doc = json.loads(src.read_text())
    base = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    span = max(e["ts"] + e.get("dur", 0) for e in base if "ts" in e) - \
        min(e["ts"] for e in base if "ts" in e) + 10.0
    events = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    for k in range(copies):
        shift = k * span
        for e in base:
            e2 = dict(e)
            if "ts" in e2:
                e2["ts"] = round(e["ts"] + shift, 3)
            if "id" in e2:
                e2["id"] = e["id"] + k * 1_000_000
            if "args" in e:
                a = dict(e["args"])
                for key in ("correlation", "External id"):
                    if isinstance(a.get(key), int):
                        a[key] += k * 1_000_000
                e2["args"] = a
            events.append(e2)
    doc["traceEvents"] = events
    n_gpu = sum(1 for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    return json.dumps(doc).encode(), n_gpu


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import msgspec

    from pytest_gemmperf.traces.torch_trace import read_torch_trace

    raw, n_gpu = build(args.copies)
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "big.pt.trace.json"
        f.write_bytes(raw)
        t_read = best(lambda: read_torch_trace(f), args.repeat)
        t_decode = best(lambda: msgspec.json.decode(f.read_bytes()), args.repeat)
        t = read_torch_trace(f)
    linked = t.dispatches["op_name"].notna().mean()
    print(f"trace: {len(raw) / 1e6:.1f} MB, {n_gpu:,} GPU events, {len(t.meta['cpu_ops']):,} cpu_ops")
    print(f"read_torch_trace: {t_read:.2f} s ({n_gpu / t_read / 1e3:.0f} k dispatches/s), "
          f"{linked:.1%} linked to a cpu_op")
    print(f"bare msgspec.json.decode: {t_decode:.2f} s; reader / bare decode = {t_read / t_decode:.2f}")


if __name__ == "__main__":
    main()
