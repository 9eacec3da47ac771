"""``gemmperf compare`` (with its reports, ``--jobs 1``) of sides made of many small sources.

Writes, in a temporary directory (removed at the end, also on Ctrl-C), two sides of each case:

* ``tables``: ``--tables`` results-point tables a side (``dispatches.parquet`` + ``agents.parquet``,
  each one rocprofv3 process of ``--dispatches`` dispatches read from ``benchmarks/scale.py``'s CSV
  generator);
* ``csv``: ``--csv`` rocprofv3 7.x ``kernel_trace.csv`` rank files a side (``scale.py``'s generator).

and runs the compare of each case in a fresh process, ``--repeat`` times, printing the best wall
time, the CPU seconds of that process (user + system) and the CPU seconds spent turning the
samples' text columns into categoricals (``gate.samples.unify_categories``, timed in place).
``--repo PATH`` runs another checkout's code (e.g. the one before a change) on the same files.

Usage: python benchmarks/compare_small_sources.py [--tables 10] [--csv 8] [--dispatches 5000] [--repeat 3] [--repo PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import scale  # noqa: E402  (the rank-file generator)

#: run in the child: the compare, timed as a whole and in unify_categories
_CHILD = r"""
import json, resource, sys, time
from pytest_gemmperf.gate import samples
spent = [0.0]
inner = samples.unify_categories
def timed(*args, **kwargs):
    t0 = time.process_time()
    try:
        return inner(*args, **kwargs)
    finally:
        spent[0] += time.process_time() - t0
samples.unify_categories = timed
from pytest_gemmperf.cli import main
t0 = time.perf_counter()
rc = main(["compare", *sys.argv[1:], "--jobs", "1"])
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"rc": rc, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "unify_cpu_s": spent[0]}))
"""


def _tables(root: Path, n: int, n_disp: int, seed: int) -> Path:
    """``n`` results-point tables (one rocprofv3 process each) under ``root``."""
    from pytest_gemmperf.traces.discover import load

    src = root.parent / f"{root.name}-csv"
    scale.generate(src, "csv", n, n_disp)
    for i, d in enumerate(sorted(p.parent for p in src.rglob("*_kernel_trace.csv"))):
        t = load([d])
        out = root / f"rank{i}"
        out.mkdir(parents=True)
        t.dispatches.to_parquet(out / "dispatches.parquet")
        t.agents.to_parquet(out / "agents.parquet")
    shutil.rmtree(src)
    return root


def _run(repo: Path, base: Path, cand: Path, out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(repo))
    res = subprocess.run([sys.executable, "-c", _CHILD, str(base), str(cand), "--out", str(out)],
                         capture_output=True, text=True, env=env, cwd=repo)
    if res.returncode != 0 and not res.stdout.strip():
        raise SystemExit(f"compare failed:\n{res.stderr[-2000:]}")
    row = json.loads(res.stdout.strip().splitlines()[-1])
    if row["rc"] not in (0, 1, 4):
        raise SystemExit(f"compare exit {row['rc']}:\n{res.stderr[-2000:]}")
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=10)
    ap.add_argument("--csv", type=int, default=8)
    ap.add_argument("--dispatches", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--repo", type=Path, default=REPO)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="gemmperf-small-sources-"))
    try:
        cases = {
            f"{args.tables} table sources a side": [_tables(tmp / f"tables{s}", args.tables, args.dispatches, s)
                                                    for s in (0, 1)],
            f"{args.csv} CSV sources a side": [tmp / f"csv{s}" for s in (0, 1)],
        }
        for s in (0, 1):
            scale.generate(tmp / f"csv{s}", "csv", args.csv, args.dispatches)
        print(f"repo {args.repo}; {args.dispatches:,} dispatches a source; best of {args.repeat}")
        print(f"{'case':<28} {'wall s':>8} {'CPU s':>8} {'unify CPU s':>12}")
        for name, (base, cand) in cases.items():
            rows = [_run(args.repo.resolve(), base, cand, tmp / "out") for _ in range(args.repeat)]
            best = min(rows, key=lambda r: r["cpu_s"])
            print(f"{name:<28} {best['wall_s']:8.2f} {best['cpu_s']:8.2f} {best['unify_cpu_s']:12.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
