"""Speed of cross-rank collective analysis: 8 ranks x 20,000 collectives (target <= 10 s).

Builds a dispatches table like ``read_torch_trace`` returns for 8 ranks of one sweep point
(category-typed strings, nullable ints, the torch collective metadata columns), 20,000
collectives per rank over 3 process groups and 4 message sizes, random arrival jitter, plus one
GEMM per collective that the analysis must skip. Then times every step on it and prints the
numbers. Run: ``.venv/bin/python benchmarks/collectives.py [--ranks 8] [--collectives 20000]``.
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

SIZES = [(1, "Float"), (262_144, "BFloat16"), (1_048_576, "Float"), (106_956_800, "BFloat16")]
NAMES = ["allreduce", "_allgather_base", "_reduce_scatter_base"]


def synthetic(n_ranks: int, n_coll: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    seq = np.arange(n_coll)
    name = np.asarray(NAMES, dtype=object)[seq % 3]
    size_i = (seq // 3) % len(SIZES)
    nel = np.asarray([s for s, _ in SIZES])[size_i]
    dtype = np.asarray([d for _, d in SIZES], dtype=object)[size_i]
    out_nel = np.where(name == "_allgather_base", nel * n_ranks, nel)
    base_start = seq * 200_000 + 1_000_000
    frames = []
    for r in range(n_ranks):
        start = base_start + rng.integers(0, 30_000, n_coll)
        last = base_start + 30_000
        end = last + 50_000 + rng.integers(0, 2_000, n_coll)
        coll = pd.DataFrame({
            "kernel": "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
            "category": "collective", "stream": 7, "start_ns": start, "end_ns": end,
            "coll_name": name, "pg_name": (seq % 3).astype(str), "pg_ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
            "group_size": n_ranks, "coll_dtype": dtype, "in_nelems": nel, "out_nelems": out_nel})
        gemm = pd.DataFrame({"kernel": "Cijk_Alik_Bljk_BBS_BH_MT256x256x64", "category": "gemm",
                             "stream": 3, "start_ns": start - 40_000, "end_ns": start - 1_000})
        f = pd.concat([coll, gemm], ignore_index=True)
        f["rank"] = r
        f["host"] = "node0"
        f["pid"] = 1000 + r
        f["agent"] = r
        f["file"] = f"torch_profiler/rank{r}/trace.json"
        frames.append(f)
    d = pd.concat(frames, ignore_index=True)
    d["point"] = "ch28-th256"
    d["run"] = 0
    for c in ("kernel", "category", "coll_name", "pg_name", "pg_ranks", "coll_dtype", "host", "file", "point"):
        d[c] = d[c].astype("category")
    for c in ("group_size", "in_nelems", "out_nelems", "rank", "pid", "agent", "run", "stream"):
        d[c] = d[c].astype("Int64")
    d["dur_ns"] = d["end_ns"] - d["start_ns"]
    return d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--collectives", type=int, default=20_000)
    args = ap.parse_args()
    d = synthetic(args.ranks, args.collectives)
    print(f"{args.ranks} ranks x {args.collectives} collectives: {len(d):,} dispatches")
    steps = []
    t_all = time.perf_counter()

    def timed(label, fn):
        t = time.perf_counter()
        out = fn()
        steps.append((label, time.perf_counter() - t))
        return out

    m = timed("match_collectives", lambda: C.match_collectives(d))
    s = timed("collective_summary", lambda: C.collective_summary(m.collectives))
    timed("best_points", lambda: C.best_points(s))
    timed("straggler_summary", lambda: C.straggler_summary(m))
    timed("collective_samples", lambda: C.collective_samples(m))
    timed("nccl_master_table", lambda: C.nccl_master_table(m))
    timed("collective_time_per_rank", lambda: C.collective_time_per_rank(d))
    timed("rocprof_alignment", lambda: C.rocprof_alignment(d))
    total = time.perf_counter() - t_all
    for label, sec in steps:
        print(f"  {label:<26} {sec:7.3f} s")
    print(f"  {'total':<26} {total:7.3f} s  (target <= 10 s)")
    assert len(m.collectives) == args.collectives and m.collectives["valid"].all()


if __name__ == "__main__":
    main()
