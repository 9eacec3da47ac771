"""Time and size of every report for an 8-point x 8-rank sweep of 100,000 dispatches per rank.

6.4 million synthetic dispatches (80 kernel names: Tensile GEMMs, templated elementwise and
reduction kernels, RCCL collectives on a second queue overlapping the compute queue), with a
verdicts table for every (point, kernel), and the samples the gate compared (a baseline sweep's
compacted samples, the candidate's in full) for the before/after panels. Prints the wall time
of ``write_reports`` (analysis included, data and sample generation excluded) and the size of
each file.

    .venv/bin/python benchmarks/reports.py [dispatches_per_rank] [points] [ranks]

Targets (2-core CI machine): all reports <= 15 s, report.html <= 5 MB,
report.xlsx <= 25 MB.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from pytest_gemmperf.gate.samples import gate_samples  # noqa: E402
from pytest_gemmperf.report import ComparedSamples, write_reports  # noqa: E402
from pytest_gemmperf.traces.schema import finalize_dispatches  # noqa: E402

GEMMS = [f"Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT{64 * (i % 4 + 1)}x{32 * (i // 4 + 1)}x256_"
         f"MI16x16x1_SN_LDSB1_AFC0_ISA950_WG32_8_1" for i in range(20)]
OTHERS = [f"void at::native::vectorized_elementwise_kernel<4, at::native::Functor{i}<c10::BFloat16>, "
          f"std::array<char*, {i % 3 + 1}ul> >(int, at::native::Functor{i}<c10::BFloat16>, "
          f"std::array<char*, {i % 3 + 1}ul>)" for i in range(40)]
OTHERS += [f"void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, Sum{i}>>(T&)" for i in range(16)]
COLLS = ["ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
         "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "ncclDevKernel_ReduceScatter_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "ncclDevKernel_AllReduce_RING_LL(ncclDevKernelArgsStorage<4096ul>)"]
NAMES = GEMMS + OTHERS + COLLS


def one_rank(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    n_coll = n // 30
    n_comp = n - n_coll
    kid = rng.integers(0, len(GEMMS) + len(OTHERS), n_comp)
    base = np.where(kid < len(GEMMS), 12_000.0, 3_000.0) * (1 + (kid % 7) / 7)
    dur = (base * rng.lognormal(0, 0.15, n_comp)).astype(np.int64) + 1
    gap = rng.exponential(800, n_comp).astype(np.int64)
    start = 1_000_000 + np.cumsum(gap + np.r_[0, dur[:-1]])
    span = int(start[-1] + dur[-1])
    c_dur = rng.lognormal(np.log(span / n_coll * 0.6), 0.5, n_coll).astype(np.int64) + 1
    c_start = np.sort(rng.integers(1_000_000, span, n_coll))
    # one collective at a time on the communication queue
    c_dur = np.maximum(np.minimum(c_dur, np.r_[np.diff(c_start), c_dur[-1]]), 1)
    ckid = len(GEMMS) + len(OTHERS) + rng.integers(0, len(COLLS), n_coll)
    return {"kid": np.r_[kid, ckid], "start": np.r_[start, c_start], "end": np.r_[start + dur, c_start + c_dur],
            "queue": np.r_[np.full(n_comp, 1), np.full(n_coll, 2)]}


def sweep(per_rank: int, n_points: int, n_ranks: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    points = [f"ch{c}-th{t}" for t in (256, 512) for c in (28, 42, 56, 70)][:n_points]
    parts = []
    for pi, p in enumerate(points):
        for r in range(n_ranks):
            d = one_rank(rng, per_rank)
            n = len(d["kid"])
            parts.append(pd.DataFrame({"kid": d["kid"], "start_ns": d["start"], "end_ns": d["end"],
                                       "queue": d["queue"], "pi": np.full(n, pi), "rank": np.full(n, r)}))
    df = pd.concat(parts, ignore_index=True)
    df["kernel"] = pd.Categorical.from_codes(df.pop("kid"), categories=NAMES)
    df["point"] = pd.Categorical.from_codes(df.pop("pi"), categories=points)
    df["pid"] = 1000 + df["rank"]
    df["host"] = pd.Categorical(["node0"] * len(df))
    df["source"] = pd.Categorical(["rocprofv3-json"] * len(df))
    df["run"] = 0
    df["agent"] = df["rank"]
    return finalize_dispatches(df, "synthetic")


def verdicts_for(d: pd.DataFrame, seed: int = 1) -> pd.DataFrame:
    from pytest_gemmperf.gate.verdict import verdicts_to_frame

    rng = np.random.default_rng(seed)
    keys = d[["point", "kernel"]].drop_duplicates().astype(str).reset_index(drop=True)
    n = len(keys)
    ratio = rng.lognormal(0, 0.03, n)
    half = rng.uniform(0.01, 0.05, n)
    verdict = np.where(ratio - half > 1.05, "regression", np.where(ratio + half < 0.95, "improvement",
                       np.where(np.abs(ratio - 1) + half <= 0.05, "unchanged", "inconclusive")))
    return verdicts_to_frame(pd.DataFrame({
        "test": "perf_tests/test_gemm.py::test_sweep", "point": keys["point"], "kernel": keys["kernel"],
        "metric": "dur_ns", "n_base": 4, "n_cand": 4, "base_median_ns": 10_000.0,
        "cand_median_ns": 10_000.0 * ratio, "ratio": ratio, "ci_low": ratio - half, "ci_high": ratio + half,
        "p_value": rng.uniform(0, 1, n), "q_value": rng.uniform(0, 1, n), "verdict": verdict,
        "threshold": 0.05, "note": ""}))


def main() -> None:
    per_rank = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    n_points = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    n_ranks = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    t0 = time.perf_counter()
    d = sweep(per_rank, n_points, n_ranks)
    v = verdicts_for(d)
    compared = [ComparedSamples(str(v["test"].iloc[0]), gate_samples(sweep(per_rank, n_points, n_ranks, seed=1),
                                                                        compact=True), gate_samples(d))]
    print(f"generated {len(d):,} dispatches ({n_points} points x {n_ranks} ranks x {per_rank:,}), "
          f"{len(v):,} verdict rows ({int((v['verdict'] != 'unchanged').sum())} not unchanged) and "
          f"the compared samples in {time.perf_counter() - t0:.1f} s")
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        files = write_reports(tmp, dispatches=d, verdicts=v, meta={"commit": "bench"}, compared=compared)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        # CPU time beside wall time: on a shared machine the wall clock includes waiting
        print(f"write_reports (analysis + all formats): {wall:.2f} s wall, {cpu:.2f} s CPU "
              f"[target <= 15 s]; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        for name, path in sorted(files.items()):
            size = path.stat().st_size
            limit = {"report.html": 5e6, "report.xlsx": 25e6}.get(name)
            target = f"  [target <= {limit / 1e6:.0f} MB]" if limit else ""
            print(f"  {name:60s} {size / 1e6:8.3f} MB{target}")
        for fmt in ("html", "xlsx", "csv"):
            t0 = time.perf_counter()
            write_reports(Path(tmp) / fmt, dispatches=d, verdicts=v, formats=[fmt], compared=compared)
            print(f"  analysis + {fmt} only: {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
