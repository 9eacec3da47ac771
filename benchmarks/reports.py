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

``--small [--repeat N] [--rounds R] [--before CHECKOUT]`` measures the other end: the fixed CPU
cost of each step of the default ``gemmperf analyze`` (with its reports) of
``benchmarks/startup.py``'s 26 KB Kineto trace and 25 KB rocprofv3 CSV, in one process per trace
and checkout: each step's ``time.process_time()``, best of ``R`` processes (default 3) of ``N``
runs each (default 10), after one untimed run in each (the imports are ``startup.py``'s to
measure; processes differ more than runs in one, so more rounds steady the result): the reading
and reduction, kernels.csv and summary.json, the report tables, the CSVs, report.xlsx,
report.html and summary.md. With ``--before`` another checkout's code runs the same steps,
alternately with this one's, under the same load.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

if "--small-child" not in sys.argv:  # --small's child runs the checkout on its PYTHONPATH
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


#: the steps of ``--small``, in the order the command runs them
SMALL_STEPS = ("read + reduce", "kernels.csv + summary.json", "report tables", "CSVs", "report.xlsx",
               "report.html", "summary.md")


def small_steps(trace: str, repeat: int) -> dict[str, float]:
    """Best-of-``repeat`` CPU seconds of each step of the default ``gemmperf analyze`` of
    ``trace`` in this process, by the code on ``sys.path`` (``--small``'s child)."""
    from pytest_gemmperf.cli import build_parser
    from pytest_gemmperf.commands import analyze_impl
    from pytest_gemmperf.jsonsafe import clean
    from pytest_gemmperf.report import data, excel, html, prepare_template, tables
    from pytest_gemmperf.safe_io import write_csv, write_text

    prepare_template()
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        for i in range(repeat + 1):
            out = Path(tmp) / str(i % 2)
            out.mkdir(exist_ok=True)
            args = build_parser().parse_args(["analyze", trace, "--out", str(out)])
            times = [time.process_time()]
            result = analyze_impl.analyze(args, full=False, reports=True, beside=None)
            times.append(time.process_time())
            write_csv(result.kernels, out / "kernels.csv")
            write_text(out / "summary.json", json.dumps(clean(result.summary), indent=2, allow_nan=False) + "\n")
            times.append(time.process_time())
            sweep = result.sweep if result.sweep is not None else result.dispatches
            counters = None if result.trace is None else result.trace.counters
            rd = data.build_report_data(sweep, counters=counters, agents=result.inputs.agents,
                                        meta={"inputs": [trace]}, warmup=args.warmup)
            times.append(time.process_time())
            tables.write_csvs(rd, out, {"kernels.csv", "summary.json"})
            times.append(time.process_time())
            excel.write_excel(rd, out / "report.xlsx", max_rows=excel.DEFAULT_MAX_ROWS)
            times.append(time.process_time())
            html.write_html(rd, out / "report.html")
            times.append(time.process_time())
            tables.write_summary_md(rd, out / "summary.md")
            times.append(time.process_time())
            if i:  # the first run is untimed: what it imports and compiles is start-up's
                for step, t0, t1 in zip(SMALL_STEPS, times, times[1:]):
                    best[step] = min(best.get(step, float("inf")), t1 - t0)
    return best


def small(repeat: int, before: Path | None, rounds: int = 3) -> None:
    """``--small``: the steps' CPU seconds on both small traces, this checkout (and ``before``),
    ``rounds`` processes each, alternately."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from startup import kineto_trace, rocprof_csv_trace

    trees = {"this": Path(__file__).resolve().parent.parent, **({"before": before.resolve()} if before else {})}
    with tempfile.TemporaryDirectory() as tmp:
        traces = {"Kineto 26 KB": Path(tmp) / "rank0.pt.trace.json", "rocprofv3 CSV 25 KB": Path(tmp) / "csv"}
        kineto_trace(traces["Kineto 26 KB"])
        traces["rocprofv3 CSV 25 KB"].mkdir()
        rocprof_csv_trace(traces["rocprofv3 CSV 25 KB"])
        for name, trace in traces.items():
            got: dict[str, dict[str, float]] = {t: {} for t in trees}
            for _ in range(rounds):  # the checkouts alternately: a busy spell falls on both
                for tree_name, tree in trees.items():
                    env = {**os.environ, "PYTHONPATH": str(tree)}
                    env.pop("PYTHONDONTWRITEBYTECODE", None)
                    proc = subprocess.run([sys.executable, __file__, "--small-child", str(trace), str(repeat)],
                                          env=env, capture_output=True, text=True, cwd=tmp, check=True)
                    for step, cpu_s in json.loads(proc.stdout.strip().splitlines()[-1]).items():
                        got[tree_name][step] = min(got[tree_name].get(step, float("inf")), cpu_s)
            print(f"{name}: CPU seconds per step, best of {rounds} x {repeat} "
                  f"(load average {os.getloadavg()[0]:.1f})")
            for step in SMALL_STEPS:
                print(f"  {step:28s}" + "".join(f"  {t}: {got[t][step]:.3f}" for t in trees))
            print(f"  {'total':28s}" + "".join(f"  {t}: {sum(got[t].values()):.3f}" for t in trees))


def main() -> None:
    if sys.argv[1:2] == ["--small-child"]:
        print(json.dumps(small_steps(sys.argv[2], int(sys.argv[3]))))
        return
    if sys.argv[1:2] == ["--small"]:
        rest = sys.argv[2:]
        repeat = int(rest[rest.index("--repeat") + 1]) if "--repeat" in rest else 10
        rounds = int(rest[rest.index("--rounds") + 1]) if "--rounds" in rest else 3
        small(repeat, Path(rest[rest.index("--before") + 1]) if "--before" in rest else None, rounds)
        return
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
