"""Scale benchmark: many rank files -> gate samples + kernel statistics + verdicts, serial vs parallel.

For each size (default 256 files x 20,000 dispatches = 5.1 M, and
1,024 files x 5,000) and each format (rocprofv3 7.x kernel_trace.csv, rocprofv3 7.x
``*_results.json``, PyTorch/Kineto ``*.pt.trace.json``) it

1. writes the files into ``tempfile.mkdtemp()`` (one format at a time; the directory is removed
   afterwards, also on Ctrl-C or an error) - one process per file (its own pid and rank), the
   layout of a multi-node job (``node<N>/`` directories);
2. runs, in a fresh interpreter each (so peak RSS is that run's own), the pipeline
   ``gate.file_reduce.gate_inputs`` (per-file reduction: samples with ``compact=True``, as a
   baseline stores them, plus per-(point, rank, kernel) statistics) followed by
   ``gate.compare.compare`` (verdicts of the run against its own compacted samples) with
   ``jobs=1`` (serial, no pool) and ``jobs=N`` (default: the usable cores);
3. measures wall time, the parent's peak RSS (VmHWM) and the whole process tree's peak RSS (the
   sum of VmRSS over the parent and its live children, sampled every 20 ms by a thread - a sum,
   unlike ``RUSAGE_CHILDREN.ru_maxrss``, which is the largest single child; both are printed);
4. checks that both runs gave the same samples, statistics and verdicts.

Prints a markdown table, and an extrapolation to a 16-core node computed from the measured
per-file worker time (stated as an extrapolation, not a measurement).

The per-file data are synthetic but shaped like real traces: 50 kernel names in real shapes
(Tensile, RCCL, CK, PyTorch templates; ``benchmarks/ingest_csv.kernel_names``), Zipf-like
kernel mix, log-normal durations, four queues. To keep generation short, each format writes 8
distinct dispatch bodies and every file uses one of them with its own pid / rank / host.

``--case csv96`` measures the command users run instead: ``gemmperf analyze DIR --no-report``
with ``--jobs 1``, ``--jobs 2`` and ``--jobs auto`` (the default) on 96 rocprofv3 7.x
``kernel_trace.csv`` files (one process per file, ``node<NNN>/<pid>_kernel_trace.csv`` with its
``agent_info.csv``, 12 hosts x 8 pids),
each the real 43,915-dispatch MI350X run of ``../shared/data/tracelens/908_results.json.gz``
written in the CSV layout rocprofv3 7.x documents: 4.2 M dispatches, 1.8 GB. Each mode runs 3
times, interleaved, in a fresh ``gemmperf`` process; it prints the best wall time of each, the
speed-up of ``--jobs 2`` and ``auto`` over ``--jobs 1`` (target: at least 1.6x), the peak RSS
of the whole process tree (the command, its fork server and pool workers: summed VmRSS sampled
every 20 ms), the cores other processes kept busy during each run (``/proc/stat``'s CPU time
less the tree's: a speed-up is the command's own only where that is close to 0) and whether
every run's ``kernels.csv`` and ``summary.json`` are byte-identical.

Usage: python benchmarks/scale.py [--sizes 256x20000,1024x5000] [--formats csv,json,kineto]
       [--jobs N] [--quick] [--keep]
       python benchmarks/scale.py --case csv96 [--files 96] [--repeats 3] [--keep] [--reports]
                                  [--before CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

FORMATS = ("csv", "json", "kineto")
N_BODIES = 8
GPUS_PER_NODE = 8
T0_NS = 1_700_000_000_000_000_000


# ----------------------------------------------------------------------------- generation

def _schedule(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(kernel index, queue, start_ns, end_ns) of ``n`` dispatches on four queues."""
    rng = np.random.default_rng(seed)
    n_names = 50
    w = 1.0 / np.arange(1, n_names + 1)
    kid = rng.choice(n_names, n, p=w / w.sum())
    median = np.random.default_rng(0).uniform(2_000, 400_000, n_names)
    dur = np.maximum(1, rng.lognormal(np.log(median[kid]), 0.15)).astype(np.int64)
    queue = rng.integers(0, 4, n)
    gap = rng.integers(0, 3_000, n)
    start = np.empty(n, dtype=np.int64)
    for q in range(4):
        sel = queue == q
        inc = dur[sel] + gap[sel]
        ends = T0_NS + np.cumsum(inc)
        start[sel] = ends - inc
    return kid, queue, start, start + dur


def _csv_body(n: int, seed: int) -> bytes:
    from ingest_csv import KERNEL_TRACE_7X, kernel_names  # the project's 7.x CSV knowledge

    names = kernel_names(50)
    kid, queue, start, end = _schedule(n, seed)
    lines = [",".join(f'"{c}"' for c in KERNEL_TRACE_7X)]
    quoted = [f'"{x}"' for x in names]
    for i in range(n):  # generation only; the readers are what is measured
        k = kid[i]
        lines.append(f'"KERNEL_DISPATCH","Agent 2",{queue[i] + 1},{queue[i] + 1},834304,{i + 1},{k + 10},'
                     f'{quoted[k]},{i + 1},{start[i]},{end[i]},{(k % 4) * 16384},0,64,0,96,256,1,1,'
                     f'{256 * (1 + k * 64)},1,1')
    return ("\n".join(lines) + "\n").encode()


_AGENT_INFO = None


def _agent_info_csv() -> bytes:
    src = REPO / "tests" / "fixtures" / "rocprof_csv" / "v7" / "mi350-n1" / "5358_agent_info.csv"
    return src.read_bytes()


def _json_parts(n: int, seed: int) -> tuple[dict, bytes]:
    """(process document without dispatches, the kernel_dispatch JSON array bytes)."""
    import msgspec
    from ingest_csv import kernel_names

    doc = json.loads((REPO / "tests" / "fixtures" / "rocprof_json" /
                      "v7_two_processes_counters_results.json").read_text())
    proc = doc["rocprofiler-sdk-tool"][0]
    proc["callback_records"]["counter_collection"] = []
    sym0 = proc["kernel_symbols"][0]
    syms = []
    for i, name in enumerate(kernel_names(50)):
        s = dict(sym0, kernel_id=i + 1, kernel_name=name, formatted_kernel_name=name,
                 demangled_kernel_name=name, truncated_kernel_name=name.split("(")[0].split("<")[0])
        syms.append(s)
    proc["kernel_symbols"] = syms
    rec0 = proc["buffer_records"]["kernel_dispatch"][0]
    agent = rec0["dispatch_info"]["agent_id"]
    kid, queue, start, end = _schedule(n, seed)
    recs = []
    for i in range(n):
        info = dict(rec0["dispatch_info"], agent_id=agent, queue_id={"handle": int(queue[i]) + 16},
                    kernel_id=int(kid[i]) + 1, dispatch_id=i + 1)
        recs.append(dict(rec0, correlation_id={"internal": i + 1, "external": 0},
                         start_timestamp=int(start[i]), end_timestamp=int(end[i]), dispatch_info=info))
    proc["buffer_records"]["kernel_dispatch"] = "@DISPATCHES@"
    return proc, msgspec.json.encode(recs)


def _json_file(proc: dict, body: bytes, pid: int, host: str) -> bytes:
    import msgspec

    p = dict(proc, metadata=dict(proc["metadata"], pid=pid,
                                 node=dict(proc["metadata"]["node"], hostname=host)))
    head = msgspec.json.encode({"rocprofiler-sdk-tool": [p]})
    return head.replace(b'"@DISPATCHES@"', body)


def _kineto_body(n: int, seed: int) -> bytes:
    import msgspec
    from ingest_csv import kernel_names

    names = kernel_names(50)
    kid, queue, start, end = _schedule(n, seed)
    t0 = int(start.min())
    events = []
    for i in range(n):
        s, d = int(start[i] - t0), int(end[i] - start[i])
        events.append({"ph": "X", "cat": "kernel", "name": names[kid[i]], "pid": 2, "tid": int(queue[i]) + 3,
                       "ts": f"@{s // 1000}.{s % 1000:03d}", "dur": f"@{d // 1000}.{d % 1000:03d}",
                       "args": {"device": 2, "stream": int(queue[i]) + 3, "correlation": i + 1,
                                "kind": "Dispatch Kernel", "grid": [256, 1, 1], "block": [256, 1, 1]}})
    raw = msgspec.json.encode(events)
    import re
    return re.sub(rb'"@(-?[0-9.]+)"', rb"\1", raw)  # exact decimal microseconds, as Kineto writes


def _kineto_file(body: bytes, rank: int, world: int) -> bytes:
    head = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "displayTimeUnit": "ms", "baseTimeNanoseconds": T0_NS, "traceEvents": "@EVENTS@"}
    return json.dumps(head).encode().replace(b'"@EVENTS@"', body)


def generate(root: Path, fmt: str, n_files: int, n_disp: int) -> int:
    """Write ``n_files`` rank files of ``n_disp`` dispatches; returns bytes written."""
    total = 0
    bodies = {}
    for r in range(n_files):
        b = r % N_BODIES
        node = f"node{r // GPUS_PER_NODE:03d}"
        pid = 10_000 + r
        if fmt == "csv":
            if b not in bodies:
                bodies[b] = _csv_body(n_disp, b)
            d = root / node / f"rank{r}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{pid}_kernel_trace.csv").write_bytes(bodies[b])
            (d / f"{pid}_agent_info.csv").write_bytes(_agent_info_csv())
            total += len(bodies[b])
        elif fmt == "json":
            if b not in bodies:
                bodies[b] = _json_parts(n_disp, b)
            d = root / node / f"rank{r}"
            d.mkdir(parents=True, exist_ok=True)
            data = _json_file(*bodies[b], pid=pid, host=node)
            (d / f"{pid}_results.json").write_bytes(data)
            total += len(data)
        else:
            if b not in bodies:
                bodies[b] = _kineto_body(n_disp, b)
            d = root / node
            d.mkdir(parents=True, exist_ok=True)
            data = _kineto_file(bodies[b], r, n_files)
            (d / f"{node}_{pid}.{T0_NS + r}.pt.trace.json").write_bytes(data)
            total += len(data)
    return total


# ----------------------------------------------------------------------------- measurement

def _status_kib(pid: int | str, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kib(pid: int | str) -> int:
    """Proportional set size: pages shared with other processes (a fork server's imports in
    its forked workers) counted once across them, unlike VmRSS."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return _status_kib(pid, "VmRSS:")


def _children(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as fh:
                kids = [int(x) for x in fh.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def _cpu_ticks(pid: int) -> int:
    """utime + stime of a process in clock ticks (/proc/<pid>/stat fields 14 and 15)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


class TreeRss(threading.Thread):
    """Sampled every ``interval`` s: the peak of the summed VmRSS of this process and all its
    descendants (pool workers are children of the forkserver, i.e. grandchildren, which
    ``RUSAGE_CHILDREN`` never sees while the forkserver lives), the largest VmHWM of any
    descendant, and the CPU time of the descendants (last value seen per pid); with ``root``,
    the summed PSS every ``pss_every`` samples (``smaps_rollup`` walks each process's page
    tables: read every 20 ms it kept a fifth of a core busy beside the command measured)."""

    def __init__(self, interval: float = 0.02, root: int | None = None, pss_every: int = 10) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.root = root
        self.pss_every = pss_every
        self.peak_kib = 0
        self.peak_pss_kib = 0
        self.max_child_hwm_kib = 0
        self.max_children = 0
        self.child_ticks: dict[int, int] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        me = self.root or os.getpid()
        tick = 0
        while not self._halt.is_set():
            kids = _children(me)
            self.max_children = max(self.max_children, len(kids))
            total = _status_kib(me, "VmRSS:")
            with_pss = bool(self.root) and tick % self.pss_every == 0
            tick += 1
            pss = _pss_kib(me) if with_pss else 0
            if self.root:
                self.child_ticks[me] = max(self.child_ticks.get(me, 0), _cpu_ticks(me))
            for k in kids:
                total += _status_kib(k, "VmRSS:")
                pss += _pss_kib(k) if with_pss else 0
                self.max_child_hwm_kib = max(self.max_child_hwm_kib, _status_kib(k, "VmHWM:"))
                self.child_ticks[k] = max(self.child_ticks.get(k, 0), _cpu_ticks(k))
            self.peak_kib = max(self.peak_kib, total)
            self.peak_pss_kib = max(self.peak_pss_kib, pss)
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def child_cpu_s(self) -> float:
        return sum(self.child_ticks.values()) / os.sysconf("SC_CLK_TCK")


def measure(root: str, jobs: int, out: str, legacy: bool = False) -> None:
    """Child mode: run the pipeline once on ``root`` and write timings, RSS and results.
    ``legacy``: the path before per-file reduction, for comparison: ``load`` the full
    dispatches table, then ``gate_samples`` and ``kernel_stats`` on it."""
    import resource

    import pandas as pd

    from pytest_gemmperf.gate.compare import GateConfig, compare
    from pytest_gemmperf.gate.file_reduce import gate_inputs
    from pytest_gemmperf.gate.samples import compact_samples

    mon = TreeRss()
    mon.start()
    t0 = time.perf_counter()
    if legacy:
        gi = _legacy_inputs(root, jobs)
    else:
        gi = gate_inputs([root], jobs=jobs, compact=True)
    t1 = time.perf_counter()
    verdicts = compare(compact_samples(gi.samples), gi.samples, GateConfig(), test="scale")
    t2 = time.perf_counter()
    mon.stop()
    res = {"ingest_s": t1 - t0, "verdict_s": t2 - t1, "wall_s": t2 - t0,
           "parent_hwm_mib": _status_kib("self", "VmHWM:") / 1024,
           "tree_peak_mib": max(mon.peak_kib, _status_kib("self", "VmHWM:")) / 1024,
           "max_child_mib": mon.max_child_hwm_kib / 1024,
           "workers_seen": mon.max_children, "n_dispatches": gi.n_dispatches, "reduced": gi.reduced,
           "n_samples": len(gi.samples), "n_stats": len(gi.kernel_stats), "n_verdicts": len(verdicts),
           "cpu_s": (resource.getrusage(resource.RUSAGE_SELF).ru_utime
                     + resource.getrusage(resource.RUSAGE_SELF).ru_stime + mon.child_cpu_s()),
           "loadavg_1m": os.getloadavg()[0], **gi.timings}
    pd.to_pickle((gi.samples, gi.kernel_stats, verdicts), out + ".pkl")
    Path(out).write_text(json.dumps(res))


def _legacy_inputs(root: str, jobs: int):
    from pytest_gemmperf.analysis.kernel_stats import kernel_stats
    from pytest_gemmperf.gate.file_reduce import GateInputs
    from pytest_gemmperf.gate.samples import gate_samples
    from pytest_gemmperf.traces.discover import load

    t0 = time.perf_counter()
    trace = load([root], jobs=jobs)
    t1 = time.perf_counter()
    d = trace.dispatches
    samples = gate_samples(d, compact=True)
    by = ("source", "point", "rank", "kernel") if d["source"].nunique() > 1 else ("point", "rank", "kernel")
    stats = kernel_stats(d, by=by)
    return GateInputs(samples=samples, kernel_stats=stats, stats_by=by, notes=trace.meta["notes"],
                      skipped=trace.meta["skipped"], sources=trace.meta["sources"], n_dispatches=len(d), reduced=False,
                      timings={"discover_s": 0.0, "read_reduce_s": t1 - t0,
                               "merge_s": time.perf_counter() - t1, "workers": jobs})


def _run_child(root: Path, jobs: int, out: Path, legacy: bool = False) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--measure", str(root), "--jobs", str(jobs),
           "--result", str(out)] + (["--legacy"] if legacy else [])
    subprocess.run(cmd, check=True)
    return json.loads(out.read_text())


def _same_results(a: Path, b: Path) -> bool:
    import pandas as pd

    (sa, ka, va), (sb, kb, vb) = pd.read_pickle(str(a) + ".pkl"), pd.read_pickle(str(b) + ".pkl")
    try:
        pd.testing.assert_frame_equal(sa, sb, check_exact=True)
        pd.testing.assert_frame_equal(ka, kb, check_exact=True)
        pd.testing.assert_frame_equal(va, vb, check_exact=True)
    except AssertionError as exc:
        print(f"MISMATCH serial vs parallel: {str(exc)[:300]}", file=sys.stderr)
        return False
    return sa.attrs == sb.attrs


def main(argv: list[str] | None = None) -> int:
    from pytest_gemmperf.traces.parallel import usable_cores

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256x20000,1024x5000", help="FILESxDISPATCHES,... (default %(default)s)")
    ap.add_argument("--files", type=int, help="one size: number of files (with --dispatches)")
    ap.add_argument("--dispatches", type=int, help="one size: dispatches per file")
    ap.add_argument("--formats", default=",".join(FORMATS), help="subset of csv,json,kineto")
    ap.add_argument("--jobs", type=int, default=0, help="parallel workers (default 0: the usable cores)")
    ap.add_argument("--quick", action="store_true", help="32 files x 2,000 dispatches, for a smoke run")
    ap.add_argument("--keep", action="store_true", help="keep the generated files (prints where)")
    ap.add_argument("--legacy", action="store_true",
                    help="also time the full-table path (load everything, then gate_samples + kernel_stats) "
                         "serially, for its peak RSS")
    ap.add_argument("--case", choices=("csv96",),
                    help="csv96: gemmperf analyze --jobs 1 vs 2 vs auto on 96 rocprofv3 CSV files of a real run")
    ap.add_argument("--repeats", type=int, default=3, help="--case: runs of each mode, interleaved")
    ap.add_argument("--reports", action="store_true",
                    help="--case: run the command with its reports (the default) instead of --no-report, "
                         "and compare every report file across modes")
    ap.add_argument("--trace", type=Path, default=TRACE_908, help="--case: the rocprofv3 JSON the files copy")
    ap.add_argument("--before", type=Path, metavar="CHECKOUT",
                    help="--case: also run each mode on another checkout's code (the code before a change), "
                         "interleaved in the same rounds, and compare CPU, wall and every output byte")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.measure:
        measure(args.measure, args.jobs or usable_cores(), args.result, legacy=args.legacy)
        return 0
    if args.case == "csv96":
        return csv_case(args.files or 96, args.repeats, args.trace, keep=args.keep, reports=args.reports,
                        before=args.before)
    if args.quick:
        sizes = [(32, 2000)]
    elif args.files or args.dispatches:
        sizes = [(args.files or 256, args.dispatches or 20000)]
    else:
        sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    formats = [f for f in args.formats.split(",") if f]
    jobs = args.jobs or usable_cores()
    tmp = Path(tempfile.mkdtemp(prefix="gemmperf-scale-"))
    # Ctrl-C or a kill: remove the generated files before leaving
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    rows = []
    legacy_rows: list = []
    try:
        for n_files, n_disp in sizes:
            for fmt in formats:
                root = tmp / f"{fmt}-{n_files}x{n_disp}"
                t = time.perf_counter()
                nbytes = generate(root, fmt, n_files, n_disp)
                gen_s = time.perf_counter() - t
                ser = _run_child(root, 1, tmp / f"{root.name}-serial.json")
                par = _run_child(root, jobs, tmp / f"{root.name}-par.json")
                same = _same_results(tmp / f"{root.name}-serial.json", tmp / f"{root.name}-par.json")
                if args.legacy:
                    leg = _run_child(root, 1, tmp / f"{root.name}-legacy.json", legacy=True)
                    same = same and _same_results(tmp / f"{root.name}-serial.json", tmp / f"{root.name}-legacy.json")
                    legacy_rows.append((fmt, n_files, n_disp, leg))
                rows.append((fmt, n_files, n_disp, nbytes, gen_s, ser, par, same))
                print(f"# {fmt} {n_files}x{n_disp}: {nbytes / 2**20:.0f} MiB generated in {gen_s:.1f} s; "
                      f"serial {ser['wall_s']:.2f} s, jobs={jobs} {par['wall_s']:.2f} s, identical={same}",
                      file=sys.stderr, flush=True)
                if not args.keep:
                    shutil.rmtree(root, ignore_errors=True)
    finally:
        if args.keep:
            print(f"files kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    _print_table(rows, jobs)
    for fmt, nf, nd, leg in legacy_rows:
        print(f"- full-table path (before this change), {fmt} {nf}x{nd}, serial: {leg['wall_s']:.1f} s, "
              f"parent peak RSS {leg['parent_hwm_mib']:.0f} MiB (same samples, statistics and verdicts)")
    return 0 if all(r[-1] for r in rows) else 1


def _print_table(rows: list, jobs: int) -> None:
    print(f"\nScale benchmark: per-file reduction -> samples + kernel stats + verdicts "
          f"(usable cores: {jobs}; host shared with other work, timings noisy)\n")
    print("| format | files | dispatches | MiB | serial s | parallel s | speed-up | CPU s serial / parallel "
          "| parent peak RSS MiB | tree peak RSS MiB | largest worker MiB | load 1m | identical |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for fmt, nf, nd, nbytes, _gen, ser, par, same in rows:
        print(f"| {fmt} | {nf} | {ser['n_dispatches']:,} | {nbytes / 2**20:.0f} | {ser['wall_s']:.2f} | "
              f"{par['wall_s']:.2f} | {ser['wall_s'] / par['wall_s']:.2f}x | "
              f"{ser['cpu_s']:.1f} / {par['cpu_s']:.1f} | {par['parent_hwm_mib']:.0f} "
              f"(serial {ser['parent_hwm_mib']:.0f}) | {par['tree_peak_mib']:.0f} | {par['max_child_mib']:.0f} | "
              f"{ser['loadavg_1m']:.1f} / {par['loadavg_1m']:.1f} | {'yes' if same else 'NO'} |")
    print("\nCPU s: user+sys of the whole process tree (pool workers included). On a machine shared with "
          "other work the wall-clock speed-up is bounded by the cores the others leave free; the "
          "load column is the 1-minute load average at the end of each run (2 cores here).")
    print("\nExtrapolation to a 16-core node (NOT measured, computed from the serial run's phases): "
          "the per-file read + reduce phase divides by min(16, files); discovery, the parent's merge "
          "(kernel statistics over the slim columns, sample ordering) and the verdicts stay serial; "
          "a worker start costs (parallel CPU - serial CPU) / jobs, paid once per worker in parallel.")
    for fmt, nf, nd, _nbytes, _gen, ser, par, _same in rows:
        start = max(0.0, (par["cpu_s"] - ser["cpu_s"]) / jobs)
        fixed = ser["discover_s"] + ser["merge_s"] + ser["verdict_s"]
        est = ser["read_reduce_s"] / min(16, nf) + fixed + start
        print(f"- {fmt} {nf}x{nd}: serial {ser['wall_s']:.1f} s (read+reduce {ser['read_reduce_s']:.1f} s, "
              f"serial remainder {fixed:.1f} s) -> about {est:.1f} s on 16 cores, "
              f"{ser['wall_s'] / est:.1f}x (worker start ~{start:.1f} s)")


# ------------------------------------------------------------------ gemmperf analyze, CSV dirs

TRACE_908 = REPO.parent / "shared" / "data" / "tracelens" / "908_results.json.gz"
PIDS_PER_HOST = 8
SPEEDUP_TARGET = 1.6
#: ``--case csv96 --reports``: ``--jobs 2`` over ``--jobs 1`` with the reports written (24 files:
#: 1.25x, 96 files: 1.4x), and ``auto`` at least 0.98x of ``--jobs 2``
REPORT_SPEEDUP_TARGET = 1.25
AUTO_OF_JOBS2_TARGET = 0.98


def csv_from_rocprof_json(path: Path) -> tuple[bytes, int]:
    """The kernel dispatches of a one-process rocprofv3 JSON as a rocprofv3 7.x
    ``kernel_trace.csv`` (22 columns, ``Agent <node id>``, the demangled name, as the CSV
    writer of 7.x fills them from the same records); returns (bytes, dispatches)."""
    import gzip

    from ingest_csv import KERNEL_TRACE_7X

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        proc = json.load(fh)["rocprofiler-sdk-tool"][0]
    syms = {s["kernel_id"]: s for s in proc["kernel_symbols"] if s}
    node = {a["id"]["handle"]: a["node_id"] for a in proc["agents"]}
    lines = [",".join(f'"{c}"' for c in KERNEL_TRACE_7X)]
    recs = proc["buffer_records"]["kernel_dispatch"]
    for r in recs:  # generation only; the command is what is measured
        i, wg, grid = r["dispatch_info"], r["dispatch_info"]["workgroup_size"], r["dispatch_info"]["grid_size"]
        s = syms[i["kernel_id"]]
        name = s["demangled_kernel_name"].replace('"', '""')
        lines.append(f'"KERNEL_DISPATCH","Agent {node[i["agent_id"]["handle"]]}",{i["queue_id"]["handle"]},'
                     f'{r["stream_id"]["handle"]},{r["thread_id"]},{i["dispatch_id"]},{i["kernel_id"]},"{name}",'
                     f'{r["correlation_id"]["internal"]},{r["start_timestamp"]},{r["end_timestamp"]},'
                     f'{i["group_segment_size"]},{i["private_segment_size"]},{s["arch_vgpr_count"]},'
                     f'{s["accum_vgpr_count"]},{s["sgpr_count"]},{wg["x"]},{wg["y"]},{wg["z"]},'
                     f'{grid["x"]},{grid["y"]},{grid["z"]}')
    return ("\n".join(lines) + "\n").encode(), len(recs)


def write_csv_dirs(root: Path, body: bytes, n_files: int) -> int:
    """``n_files`` processes, ``node<NNN>/<pid>_kernel_trace.csv`` + ``_agent_info.csv`` (the
    6.3+ default ``%hostname%/%pid%`` prefix), 8 per host; returns bytes written."""
    agent = _agent_info_csv()
    for k in range(n_files):
        host = root / f"node{k // PIDS_PER_HOST:03d}"
        host.mkdir(parents=True, exist_ok=True)
        pid = 20_000 + k
        (host / f"{pid}_kernel_trace.csv").write_bytes(body)
        (host / f"{pid}_agent_info.csv").write_bytes(agent)
    return n_files * (len(body) + len(agent))


def _machine_busy_s() -> float:
    """CPU seconds every process on the machine has used since boot: /proc/stat's first line,
    all but idle and iowait (steal included: the host ran something else on our cores)."""
    with open("/proc/stat") as fh:
        ticks = [int(x) for x in fh.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _analyze(root: Path, jobs: str, out: Path, reports: bool = False, code: Path = REPO) -> dict:
    """One ``gemmperf analyze ROOT --no-report --jobs N`` (``reports``: with its reports, the
    default) in a fresh process running ``code``'s package: wall seconds,
    peak RSS of its process tree (MiB), CPU seconds of the tree (sampled: a lower bound), and
    the cores other processes kept busy meanwhile (the machine's CPU time less the tree's,
    over the wall time: a run to trust has close to 0)."""
    cmd = [sys.executable, "-m", "pytest_gemmperf.cli", "analyze", str(root), *([] if reports else ["--no-report"]),
           "--jobs", str(jobs), "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(code))
    busy0 = _machine_busy_s()
    own0 = time.process_time()  # this process's monitor thread, not the command
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=str(out.parent), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    mon = TreeRss(root=proc.pid)
    mon.start()
    text = proc.communicate()[0].decode(errors="replace")
    wall = time.perf_counter() - t0
    busy = _machine_busy_s() - busy0
    own = time.process_time() - own0
    mon.stop()
    if proc.returncode != 0:
        raise SystemExit(f"gemmperf analyze --jobs {jobs} failed ({proc.returncode}): {text.strip()[-500:]}")
    return {"wall_s": wall, "tree_peak_mib": mon.peak_kib / 1024, "tree_pss_mib": mon.peak_pss_kib / 1024,
            "cpu_s": mon.child_cpu_s(), "parent_cpu_s": mon.child_ticks.get(proc.pid, 0) / os.sysconf("SC_CLK_TCK"),
            "workers_seen": mon.max_children, "load_1m": os.getloadavg()[0],
            "other_cores": max(0.0, busy - mon.child_cpu_s() - own) / wall, "monitor_cores": own / wall}


def _output_bytes(out: Path) -> dict[str, bytes]:
    """Every file an analyze run wrote, as what must not change between modes: report.html
    without its generation time, report.xlsx's sheets without the workbook's dates."""
    import re
    import zipfile

    files: dict[str, bytes] = {}
    for p in sorted(out.iterdir()):
        if p.name == "report.xlsx":
            with zipfile.ZipFile(p) as z:
                files.update({f"{p.name}:{n}": z.read(n) for n in z.namelist() if not n.startswith("docProps/")})
        elif p.name == "report.html":
            files[p.name] = re.sub(rb'"generated": "[^"]*"|generated[^<]*\d{4}-\d\d-\d\dT[^<]*', b"", p.read_bytes())
        else:
            files[p.name] = p.read_bytes()
    return files


def _same_outputs(a: Path, b: Path) -> bool:
    return _output_bytes(a) == _output_bytes(b)


#: the modes ``--case csv96`` times: serial, two workers, and the default (``auto``)
CSV_MODES = ("1", "2", "auto")


def csv_case(n_files: int, repeats: int, trace: Path, *, keep: bool = False, reports: bool = False,
             before: Path | None = None) -> int:
    """``--case csv96``: see the module docstring. Exit 0 when the outputs are identical (the
    speed-up is printed against its target, not enforced: it needs a quiet machine).
    ``reports``: the command with its reports (the default), every report file compared.
    ``before``: another checkout whose code runs each mode too, right after this code's run of
    it (CPU seconds of the parent and the tree, load-independent, compared in the same rounds)."""
    if not trace.is_file():
        print(f"scale.py: {trace}: not found (the case copies this rocprofv3 JSON; "
              f"../shared/data beside the checkout, or --trace PATH)", file=sys.stderr)
        return 2
    body, per_file = csv_from_rocprof_json(trace)
    tmp = Path(tempfile.mkdtemp(prefix="gemmperf-csv96-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    try:
        root = tmp / "traces"
        nbytes = write_csv_dirs(root, body, n_files)
        load0 = os.getloadavg()
        runs: dict[str, list[dict]] = {m: [] for m in CSV_MODES}
        old_runs: dict[str, list[dict]] = {}
        for rep in range(repeats):  # interleaved: a load change hits every mode alike
            # each round starts with another mode: no mode always runs right after the same one
            for mode in CSV_MODES[rep % len(CSV_MODES):] + CSV_MODES[:rep % len(CSV_MODES)]:
                out = tmp / f"out-j{mode}-{rep}"
                runs[mode].append(_analyze(root, mode, out, reports))
                if before is not None:
                    old_runs.setdefault(mode, []).append(
                        _analyze(root, mode, tmp / f"before-j{mode}-{rep}", reports, code=before.resolve()))
                print(f"# run {rep + 1}/{repeats} --jobs {mode}: {runs[mode][-1]['wall_s']:.2f} s, "
                      f"tree peak {runs[mode][-1]['tree_peak_mib']:.0f} MiB, "
                      f"workers {runs[mode][-1]['workers_seen']}, "
                      f"other load {runs[mode][-1]['other_cores']:.2f} cores, this monitor "
                      f"{runs[mode][-1]['monitor_cores']:.2f}", file=sys.stderr, flush=True)
        same = all(_same_outputs(tmp / "out-j1-0", tmp / f"out-j{m}-{r}") for m in CSV_MODES for r in range(repeats))
        same_before = before is None or all(_same_outputs(tmp / "out-j1-0", tmp / f"before-j{m}-{r}")
                                            for m in CSV_MODES for r in range(repeats))
        load1 = os.getloadavg()
    finally:
        if keep:
            print(f"files kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    best_run = {m: min(runs[m], key=lambda r: r["wall_s"]) for m in CSV_MODES}
    best = {m: best_run[m]["wall_s"] for m in CSV_MODES}
    speedup = best["1"] / best["2"]
    target = REPORT_SPEEDUP_TARGET if reports else SPEEDUP_TARGET
    print(f"\ngemmperf analyze DIR {'(reports on)' if reports else '--no-report'}, rocprofv3 CSV, one process per file "
          f"(usable cores: {len(os.sched_getaffinity(0))}; load average 1/5/15 min before "
          f"{load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, after {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f})\n")
    print("| files | dispatches | MiB | jobs 1 s (best of %d) | jobs 2 s | jobs auto s | speed-up 2 / auto "
          "| target %.1fx met | tree peak RSS MiB jobs 1 / 2 / auto | tree peak PSS MiB jobs 1 / 2 / auto "
          "| CPU s jobs 1 / 2 (parent) | other load, cores, best runs 1 / 2 / auto | identical output |"
          % (repeats, target))
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")

    other = " / ".join(f"{best_run[m]['other_cores']:.2f}" for m in CSV_MODES)

    def per_mode(key: str) -> str:
        return " / ".join(f"{max(r[key] for r in runs[m]):.0f}" for m in CSV_MODES)

    print(f"| {n_files} | {n_files * per_file:,} | {nbytes / 2**20:.0f} | {best['1']:.2f} | {best['2']:.2f} | "
          f"{best['auto']:.2f} | {speedup:.2f}x / {best['1'] / best['auto']:.2f}x | "
          f"{'yes' if speedup >= target else 'NO'} | "
          f"{per_mode('tree_peak_mib')} | {per_mode('tree_pss_mib')} | "
          f"{min(r['cpu_s'] for r in runs['1']):.1f} / {min(r['cpu_s'] for r in runs['2']):.1f} "
          f"({min(r['parent_cpu_s'] for r in runs['2']):.1f}) | "
          f"{other} | "
          f"{'yes' if same else 'NO'} |")
    print(f"\n--jobs auto runs at {best['2'] / best['auto']:.2f}x the speed of --jobs 2 (target "
          f"{AUTO_OF_JOBS2_TARGET:.2f}x: {'met' if best['2'] / best['auto'] >= AUTO_OF_JOBS2_TARGET else 'NOT met'})")
    med = {m: float(np.median([r["wall_s"] for r in runs[m]])) for m in CSV_MODES}
    print(f"medians: --jobs 1 {med['1']:.2f} s, 2 {med['2']:.2f} s, auto {med['auto']:.2f} s "
          f"({med['1'] / med['2']:.2f}x / {med['1'] / med['auto']:.2f}x; auto {med['2'] / med['auto']:.2f}x of 2)")
    print("CPU s, least of the runs, tree / parent: " + "; ".join(
        f"--jobs {m} {min(r['cpu_s'] for r in runs[m]):.2f} / {min(r['parent_cpu_s'] for r in runs[m]):.2f}"
        for m in CSV_MODES))
    print("\nRSS sums each process's resident pages (a page shared by the fork server and its "
          "workers counts in each); PSS counts it once. CPU: user+sys of the tree, sampled. "
          "The speed-up needs both cores free: on a machine shared with other work it measures "
          "the load as much as the command. Other load: the machine's CPU time (/proc/stat) "
          "less the tree's, over the wall time; trust a speed-up whose runs show close to 0.")
    print("\nall runs (wall s, other load in cores): " + "; ".join(
        f"jobs {m} " + ", ".join(f"{r['wall_s']:.2f} ({r['other_cores']:.2f})" for r in runs[m]) for m in CSV_MODES))
    if before is not None:
        _print_before(runs, old_runs, before, same_before)
    return 0 if same and same_before else 1


def _print_before(runs: dict[str, list[dict]], old_runs: dict[str, list[dict]], before: Path, same: bool) -> None:
    """This code against ``before``'s, mode by mode, run right after each other in every round:
    CPU seconds (least of the runs), the tree's and the parent's, and wall (best, median)."""
    print(f"\nthis code vs {before} (each mode run by both, one after the other, in every round):\n")
    print("| jobs | CPU s tree, this / before | CPU s parent, this / before | wall s best, this / before "
          "| wall s median, this / before |")
    print("|---|---:|---:|---:|---:|")
    def least(rs: list[dict], key: str) -> float:
        return min(r[key] for r in rs)

    def median(rs: list[dict]) -> float:
        return float(np.median([r["wall_s"] for r in rs]))

    for m in CSV_MODES:
        new, old = runs[m], old_runs[m]
        print(f"| {m} | {least(new, 'cpu_s'):.2f} / {least(old, 'cpu_s'):.2f} | "
              f"{least(new, 'parent_cpu_s'):.2f} / {least(old, 'parent_cpu_s'):.2f} | "
              f"{least(new, 'wall_s'):.2f} / {least(old, 'wall_s'):.2f} | {median(new):.2f} / {median(old):.2f} |")
    print(f"\nspeed-up --jobs 2 over --jobs 1, best walls: this {least_ratio(runs):.2f}x, before "
          f"{least_ratio(old_runs):.2f}x; every output byte the same as before's: {'yes' if same else 'NO'}")


def least_ratio(runs: dict[str, list[dict]]) -> float:
    return min(r["wall_s"] for r in runs["1"]) / min(r["wall_s"] for r in runs["2"])


if __name__ == "__main__":
    sys.exit(main())
