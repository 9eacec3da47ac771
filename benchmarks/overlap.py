"""Time the overlap / timeline analysis on 1,000,000 synthetic dispatches.

GEMMs and elementwise kernels run back-to-back on a compute stream, RCCL collectives on a
communication stream, on several GPUs (one process each). Prints wall time per function.

    .venv/bin/python benchmarks/overlap.py [n_dispatches] [n_gpus]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from pytest_gemmperf.analysis.overlap import gemm_overlap, overlap_by_kernel  # noqa: E402
from pytest_gemmperf.analysis.timeline import gpu_timeline  # noqa: E402
from pytest_gemmperf.analysis.variance import top_variance  # noqa: E402
from pytest_gemmperf.traces.schema import finalize_dispatches  # noqa: E402

GEMMS = [f"Cijk_Ailk_Bljk_BBS_BH_MT{64 * (i + 1)}x32x256_MI16x16x1" for i in range(12)]
OTHERS = ["vectorized_elementwise_kernel", "reduce_kernel", "layer_norm_kernel"]
COLLS = ["ncclDevKernel_Generic_1", "ncclDevKernel_AllGather_RING_LL"]


def stream(rng: np.random.Generator, n: int, mean_dur_ns: float, mean_gap_ns: float,
           t0: int) -> tuple[np.ndarray, np.ndarray]:
    dur = rng.lognormal(np.log(mean_dur_ns), 0.4, n).astype(np.int64) + 1
    gap = rng.exponential(mean_gap_ns, n).astype(np.int64)
    start = t0 + np.cumsum(gap + np.r_[0, dur[:-1]])
    return start, start + dur


def synthetic(n: int, n_gpus: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    per_gpu = n // n_gpus
    n_coll = per_gpu // 10
    n_comp = per_gpu - n_coll
    parts = []
    for g in range(n_gpus):
        t0 = 1_000_000_000 + int(rng.integers(0, 1_000_000))
        cs, ce = stream(rng, n_comp, 12_000, 3_000, t0)
        is_gemm = rng.random(n_comp) < 0.6
        names = np.where(is_gemm, rng.choice(GEMMS, n_comp), rng.choice(OTHERS, n_comp))
        # collectives cover roughly the same time span as the compute stream
        span = int(ce[-1] - cs[0])
        ks, ke = stream(rng, n_coll, 0.6 * span / n_coll, 0.4 * span / n_coll, t0)
        parts.append(pd.DataFrame({
            "kernel": np.r_[names, rng.choice(COLLS, n_coll)],
            "start_ns": np.r_[cs, ks], "end_ns": np.r_[ce, ke],
            "queue": np.r_[np.full(n_comp, 1), np.full(n_coll, 2)],
            "pid": 1000 + g, "agent": g, "rank": g,
        }))
    df = pd.concat(parts, ignore_index=True)
    df["host"] = "bench"
    df["point"] = "ch28-th256"
    df["dispatch_id"] = np.arange(1, len(df) + 1)
    return finalize_dispatches(df, "synthetic.json")


def timed(label: str, fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    print(f"{label:<32s} {time.perf_counter() - t:8.2f} s")
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    n_gpus = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    d = timed(f"build {n:,} dispatches", synthetic, n, n_gpus)
    print(f"  gemm {int((d['category'] == 'gemm').sum()):,}, "
          f"collective {int((d['category'] == 'collective').sum()):,}, gpus {n_gpus}")
    ov = timed("gemm_overlap", gemm_overlap, d)
    timed("overlap_by_kernel (reusing)", overlap_by_kernel, d, overlap=ov)
    timed("overlap_by_kernel (full)", overlap_by_kernel, d)
    tl = timed("gpu_timeline", gpu_timeline, d)
    timed("top_variance k=5", top_variance, d, 5)
    print(f"  overlapped GEMMs {float((ov['overlap_ns'] > 0).mean()):.1%}, "
          f"exposed comm {tl['exposed_comm_time_ns'].sum() / 1e9:.3f} s of "
          f"{tl['total_comm_time_ns'].sum() / 1e9:.3f} s")


if __name__ == "__main__":
    main()
