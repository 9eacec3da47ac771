"""The Dask engine on many rank files: ``--jobs dask://`` against ``--jobs 1``, and a worker killed mid-run.

1. writes ``--files`` rocprofv3 7.x ``kernel_trace.csv`` rank files of ``--dispatches`` each
   (``benchmarks/scale.py``'s generator: 50 real-shaped kernel names, log-normal durations, one
   process per file, ``node<N>/rank<r>/``) into a temporary directory (removed at the end, also on
   Ctrl-C), and a second set with one kernel 30 % slower (a regression for ``compare`` to find);
2. starts a local Dask cluster (``--workers`` worker processes, one thread each, each under its
   nanny, which restarts it when it dies);
3. runs, each in a fresh process: ``gemmperf analyze DIR --no-report`` and ``gemmperf compare
   BASE CAND --no-report`` with ``--jobs 1`` and with ``--jobs dask://SCHEDULER``;
4. runs the Dask analysis once more and SIGKILLs one worker process once a task is running on
   it (its tasks are run again on the other worker or the restarted one);
5. prints each run's wall time and whether kernels.csv, summary.json and verdicts.csv are
   byte-identical to ``--jobs 1``'s. Exit 1 when any differs or a run fails.

On a 2-core machine the cluster's two workers share the cores with this script and the
scheduler, so the wall times say what the engine costs, not what a cluster gains.

``--reports``: the analyses write their reports (the command's default) and every file they
write is compared (report.html but its generation time, report.xlsx's sheets).

``--case csv96``: the rank files are ``benchmarks/scale.py --case csv96``'s (the real 43,915-dispatch
rocprofv3 run written as 7.x CSV, one copy per rank: 4.2 M dispatches, 1.8 GB on 96 files).

Usage: python benchmarks/dask_cluster.py [--files 96] [--dispatches 5000] [--case csv96] [--workers 2] [--reports] [--keep]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import scale  # noqa: E402  (the rank-file generator)


def _slower_text(text: str) -> str:
    """A ``kernel_trace.csv`` whose most frequent kernel (by Kernel_Id) is 30 % slower: its
    End_Timestamp moved."""
    lines = text.splitlines()
    # the name is quoted and may hold commas: the columns before it count from the start,
    # the timestamps after it from the end
    rows = [line.split(",") for line in lines[1:]]
    ids = Counter(cells[6] for cells in rows)
    slowed = ids.most_common(1)[0][0]
    out = [lines[0]]
    for cells in rows:
        if cells[6] == slowed:
            start, end = int(cells[-13]), int(cells[-12])
            cells[-12] = str(start + int((end - start) * 1.3))
        out.append(",".join(cells))
    return "\n".join(out) + "\n"


def _slower(root: Path) -> None:
    """Make the most frequent kernel of every file 30 % slower (files with the same text are
    rewritten once and copied)."""
    done: dict[str, str] = {}
    for f in sorted(root.rglob("*_kernel_trace.csv")):
        text = f.read_text()
        if text not in done:
            done[text] = _slower_text(text)
        f.write_text(done[text])


def _run(argv: list[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest_gemmperf.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True)
    if proc.returncode not in ok:
        raise SystemExit(f"gemmperf {' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return time.perf_counter() - t0


def _same(a: Path, b: Path, names: tuple[str, ...]) -> bool:
    return all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def _same_reports(a: Path, b: Path) -> bool:
    """Every file two analyze runs wrote, reports included (``scale._output_bytes``)."""
    return scale._output_bytes(a) == scale._output_bytes(b)


def _kill_when_busy(client, stop: threading.Event, killed: list) -> None:
    """SIGKILL the first worker seen running a gemmperf task (once)."""
    pids = client.run(os.getpid)  # worker address -> pid
    while not stop.is_set():
        for addr, keys in client.processing().items():
            if any(str(k).startswith("gemmperf-read") for k in keys) and addr in pids:
                time.sleep(0.3)  # into the task, not before it
                os.kill(pids[addr], signal.SIGKILL)
                killed.append((addr, pids[addr], time.strftime("%H:%M:%S")))
                return
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=96)
    ap.add_argument("--dispatches", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--case", choices=("csv96",),
                    help="csv96: the rank files of benchmarks/scale.py --case csv96 (the real MI350X run's "
                         "43,915 dispatches per file, 1.8 GB on 96 files) instead of generated ones")
    ap.add_argument("--trace", type=Path, default=scale.TRACE_908, help="the rocprofv3 JSON --case csv96 copies")
    ap.add_argument("--reports", action="store_true",
                    help="analyze with its reports (the default of the command) and compare every report file")
    args = ap.parse_args(argv)
    try:
        import distributed
    except ImportError:
        print("dask_cluster.py: the Dask engine is not installed (pip install 'pytest-gemmperf[dask]')",
              file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="gemmperf-dask-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    cluster = client = None
    try:
        base, cand = tmp / "base", tmp / "cand"
        if args.case == "csv96":
            if not args.trace.is_file():
                print(f"dask_cluster.py: {args.trace}: not found (--case csv96 copies this rocprofv3 JSON)",
                      file=sys.stderr)
                return 2
            body, args.dispatches = scale.csv_from_rocprof_json(args.trace)
            nbytes = scale.write_csv_dirs(base, body, args.files)
        else:
            nbytes = scale.generate(base, "csv", args.files, args.dispatches)
        shutil.copytree(base, cand)
        _slower(cand)
        load0 = os.getloadavg()
        cluster = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                           dashboard_address=None, silence_logs=logging.ERROR)
        client = distributed.Client(cluster, set_as_default=False)
        address = cluster.scheduler_address.replace("tcp://", "dask://")
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
              f"{args.files} files x {args.dispatches} dispatches ({nbytes / 1e6:.0f} MB per side), "
              f"local cluster of {args.workers} worker processes x 1 thread at {cluster.scheduler_address}, "
              f"load {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
        rows, failed = [], []
        no_report = [] if args.reports else ["--no-report"]
        same_files = _same_reports if args.reports else (lambda a, b: _same(a, b, ("kernels.csv", "summary.json")))
        for jobs in ("1", address):
            tag = "serial" if jobs == "1" else "dask"
            wall = _run(["analyze", str(base), *no_report, "--jobs", jobs, "--out", str(tmp / f"a-{tag}")], tmp)
            rows.append((f"analyze --jobs {'1' if jobs == '1' else 'dask://…'}", wall))
            wall = _run(["compare", str(base), str(cand), "--no-report", "--jobs", jobs,
                         "--out", str(tmp / f"c-{tag}")], tmp, ok=(1,))
            rows.append((f"compare --jobs {'1' if jobs == '1' else 'dask://…'}", wall))
        same_a = same_files(tmp / "a-serial", tmp / "a-dask")
        same_c = _same(tmp / "c-serial", tmp / "c-dask", ("verdicts.csv",))

        client.wait_for_workers(args.workers, timeout=60)
        stop, killed = threading.Event(), []
        killer = threading.Thread(target=_kill_when_busy, args=(client, stop, killed), daemon=True)
        killer.start()
        wall = _run(["analyze", str(base), *no_report, "--jobs", address, "--out", str(tmp / "a-killed")], tmp)
        stop.set()
        killer.join(5)
        rows.append(("analyze --jobs dask://…, a worker SIGKILLed", wall))
        same_k = same_files(tmp / "a-serial", tmp / "a-killed")

        print(f"{'run':48s} {'wall s':>8s}")
        for label, wall in rows:
            print(f"{label:48s} {wall:8.2f}")
        print(f"kernels.csv + summary.json{' + every report file' if args.reports else ''} "
              f"byte-identical to --jobs 1: {same_a}")
        print(f"verdicts.csv byte-identical to --jobs 1: {same_c} "
              f"({(tmp / 'c-serial' / 'verdicts.csv').read_text().count('regression')} regression rows)")
        print(f"worker killed mid-run: {killed[0] if killed else 'no (the run ended first)'}; "
              f"outputs byte-identical to --jobs 1: {same_k}")
        print(f"# load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if not (same_a and same_c and same_k) or not killed:
            failed.append("outputs differ" if not (same_a and same_c and same_k) else "no worker was killed")
        if failed:
            print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        if args.keep:
            print(f"# kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
