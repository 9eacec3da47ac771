"""Speed of the gate's samples (``gate.samples.gate_samples``) for one large point.

Builds a dispatches table like ``read_torch_trace`` returns for 8 ranks x 100,000 dispatches
(per step: one RCCL collective with torch metadata overlapping four GEMMs, five elementwise
kernels; category-typed strings, nullable ints), then times the old per-dispatch path
(``samples_from_dispatches``), the analysis steps ``gate_samples`` adds and ``gate_samples``
itself. Run: ``.venv/bin/python benchmarks/gate_samples.py [--ranks 8] [--dispatches 100000]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from pytest_gemmperf.analysis import collectives as C  # noqa: E402
from pytest_gemmperf.analysis.overlap import gemm_overlap  # noqa: E402
from pytest_gemmperf.analysis.timeline import gpu_timeline  # noqa: E402
from pytest_gemmperf.gate.samples import compact_samples, gate_samples, samples_from_dispatches  # noqa: E402


def synthetic(n_ranks: int, n_per_rank: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n_steps = n_per_rank // 10
    step0 = np.arange(n_steps, dtype=np.int64) * 1_000_000
    kind = np.where(np.arange(n_steps) % 2 == 0, "allreduce", "_allgather_base")
    frames = []
    for r in range(n_ranks):
        parts = []
        cs = step0 + 100_000 + rng.integers(0, 20_000, n_steps)
        parts.append(pd.DataFrame({
            "kernel": "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "category": "collective",
            "stream": 7, "start_ns": cs, "end_ns": cs + 300_000 + rng.integers(0, 5_000, n_steps),
            "coll_name": kind, "pg_name": "0", "pg_ranks": str(list(range(n_ranks))), "group_size": n_ranks,
            "coll_dtype": "BFloat16", "in_nelems": 1 << 20,
            "out_nelems": np.where(kind == "allreduce", 1 << 20, n_ranks << 20)}))
        t = step0.copy()
        for g in range(4):
            dur = 100_000 + 10_000 * g + rng.integers(0, 3_000, n_steps)
            parts.append(pd.DataFrame({"kernel": f"Cijk_Alik_Bljk_MT{g}<float, 128>", "category": "gemm",
                                       "stream": 3, "start_ns": t, "end_ns": t + dur}))
            t = t + dur + 1_000
        for e in range(5):
            dur = 5_000 + rng.integers(0, 300, n_steps)
            parts.append(pd.DataFrame({"kernel": f"elementwise_kernel_{e}", "category": "elementwise",
                                       "stream": 3, "start_ns": t, "end_ns": t + dur}))
            t = t + dur + 1_000
        f = pd.concat(parts, ignore_index=True)
        f["rank"], f["host"], f["pid"], f["agent"] = r, "node0", 1000 + r, r
        f["file"] = f"torch_profiler/rank{r}/trace.json"
        frames.append(f)
    d = pd.concat(frames, ignore_index=True)
    d["point"], d["run"] = "ch28-th256", 0
    for c in ("kernel", "category", "coll_name", "pg_name", "pg_ranks", "coll_dtype", "host", "file", "point"):
        d[c] = d[c].astype("category")
    for c in ("group_size", "in_nelems", "out_nelems", "rank", "pid", "agent", "run", "stream"):
        d[c] = d[c].astype("Int64")
    d["dur_ns"] = d["end_ns"] - d["start_ns"]
    d["zero_dur"] = d["dur_ns"] == 0
    return d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--dispatches", type=int, default=100_000, help="per rank")
    ap.add_argument("--repeat", type=int, default=3, help="best of N")
    args = ap.parse_args()
    d = synthetic(args.ranks, args.dispatches)
    print(f"{args.ranks} ranks x {args.dispatches:,} dispatches = {len(d):,} dispatches, one point")

    def timed(label, fn):
        best = float("inf")
        for _ in range(args.repeat):
            t = time.perf_counter()
            out = fn()
            best = min(best, time.perf_counter() - t)
        print(f"  {label:<58} {best:7.3f} s  ({len(out):,} rows)")
        return out

    timed("samples_from_dispatches (all kernels, uncompacted)", lambda: samples_from_dispatches(d))
    timed("  + compact_samples (the old plugin path)", lambda: compact_samples(samples_from_dispatches(d)))
    timed("gemm_overlap with per-dispatch collective names", lambda: gemm_overlap(d))
    timed("gemm_overlap(names=False)", lambda: gemm_overlap(d, names=False))
    timed("gpu_timeline", lambda: gpu_timeline(d))
    timed("match_collectives + collective_samples", lambda: C.collective_samples(C.match_collectives(d, strict=False)))
    s = timed("gate_samples(kernels=['^Cijk_'], warmup=5)  [pytest/refresh]",
              lambda: gate_samples(d, kernels=["^Cijk_"], warmup=5))
    timed("gate_samples(compact=False)  [gemmperf compare on traces]", lambda: gate_samples(d, compact=False))
    print("  metrics:", ", ".join(f"{m} {n}" for m, n in s["metric"].value_counts().sort_index().items()))


if __name__ == "__main__":
    main()
