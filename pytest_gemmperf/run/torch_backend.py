"""Run a workload that writes PyTorch profiler (Kineto) traces and collect them per rank.

The workload learns where to write from the environment, or from ``{trace_dir}`` /
``{output_dir}`` placeholders in its command line:

* ``GEMMPERF_TRACE_DIR``  = ``<run>/raw/torch_profiler``; rank R writes ``rank<R>/*.json[.gz]``
* ``GEMMPERF_OUTPUT_DIR`` = ``<run>/raw`` (aorta's ``training.output_dir``: it writes
  ``<output_dir>/torch_profiler/rank<R>/``, the same place)
* ``GEMMPERF_DEVICE``     = ``cpu`` | ``cuda`` | ``rocm``

Works on ROCm, CUDA and CPU alike; the device only changes which activities the workload records.

Multi-node points (``profile(launcher="torchrun", nnodes=N)``): :func:`run_torch_nodes` starts
one torchrun node agent per node on this machine, each in its own process group under the
same timeout and cleanup as a single run, with its own output tree ``<run>/raw/node<k>/``
(``GEMMPERF_NODE_RANK=k``) and log ``<run>/logs/node<k>.log``; when one agent fails the
others are stopped (their peers would wait for it until the timeout). The rank traces of all
nodes are gathered into the point: global ranks (torchrun's ``RANK``) must be distinct across
nodes and below ``nnodes * nproc``; hosts come from each trace's own metadata, as for one node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import msgspec
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.schema import AGENT_SCHEMA, COUNTER_SCHEMA, DISPATCH_SCHEMA, Trace, concat_tables, set_columns
from pytest_gemmperf.run.process import run_process
import threading
from pytest_gemmperf.traces.torch_trace import read_torch_cpu_trace, read_torch_trace
from pytest_gemmperf.traces.fileio import read_maybe_gzip

TRACE_DIR_ENV = "GEMMPERF_TRACE_DIR"
OUTPUT_DIR_ENV = "GEMMPERF_OUTPUT_DIR"
DEVICE_ENV = "GEMMPERF_DEVICE"
NODE_RANK_ENV = "GEMMPERF_NODE_RANK"
TRACE_SUBDIR = "torch_profiler"

_RANK_DIR = re.compile(r"^rank(\d+)$")
_STEP = re.compile(r"^ProfilerStep#\d+$")
#: dispatch column: ProfilerStep ranges in the dispatch's trace file (gate.samples.STEPS_COLUMN)
STEPS_COLUMN = "profiler_steps"
_TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass
class TorchRun:
    """One repeat of a point under the PyTorch profiler."""

    run: int
    returncode: int
    duration_s: float
    timed_out: bool
    log: Path
    files: dict[int | None, list[Path]] = field(default_factory=dict)
    tail: str = ""
    #: multi-node runs: one log per node agent (``log`` is node 0's), ranks each node wrote
    node_logs: list[Path] = field(default_factory=list)
    node_ranks: dict[int, list[int]] = field(default_factory=dict)
    #: ranks in 0..world-1 that wrote no trace (a workload may profile some ranks only)
    missing_ranks: list[int] = field(default_factory=list)


def run_dirs(run_dir: Path) -> tuple[Path, Path, Path]:
    """(raw output dir, torch trace dir, log dir) of one repeat."""
    raw = run_dir / "raw"
    return raw, raw / TRACE_SUBDIR, run_dir / "logs"


def torch_env(run_dir: Path, device: str) -> dict[str, str]:
    raw, traces, _ = run_dirs(run_dir)
    return {OUTPUT_DIR_ENV: str(raw), TRACE_DIR_ENV: str(traces), DEVICE_ENV: device}


def expand_placeholders(argv: Sequence[str], run_dir: Path) -> list[str]:
    """Substitute ``{output_dir}``, ``{trace_dir}`` and ``{run_dir}`` in each argument."""
    raw, traces, _ = run_dirs(run_dir)
    subs = {"{output_dir}": str(raw), "{trace_dir}": str(traces), "{run_dir}": str(run_dir)}
    out = []
    for arg in argv:
        for k, v in subs.items():
            arg = arg.replace(k, v)
        out.append(arg)
    return out


def collect_rank_traces(trace_dir: Path) -> dict[int | None, list[Path]]:
    """Trace files per rank: ``rank<R>/**/*.json[.gz]``; files outside a rank directory are
    listed under ``None`` (their rank comes from the trace's own ``distributedInfo``)."""
    out: dict[int | None, list[Path]] = {}
    if not trace_dir.is_dir():
        return out
    for path in sorted(trace_dir.rglob("*")):
        if not path.is_file() or not path.name.endswith(_TRACE_SUFFIXES):
            continue
        rank = None
        for part in path.relative_to(trace_dir).parts[:-1]:
            m = _RANK_DIR.match(part)
            if m:
                rank = int(m.group(1))
        out.setdefault(rank, []).append(path)
    return out


def load_rank_traces(files: Mapping[int | None, Sequence[Path]], *, point: str, run: int,
                     reader: Callable | None = None):
    """Read every trace file and tag its tables with point, run and (directory) rank.

    Dispatches also get ``profiler_steps``: the number of ``ProfilerStep#N`` ranges in their
    file (from the reader's ``meta["profiler_steps"]`` or ``meta["steps"]``), the unit of work
    the gate divides its sums by (``gate.samples.unit_steps``); absent when a trace has none."""
    if reader is None:
        reader = read_torch_trace
    disp, ctrs, agents, paths = [], [], [], []
    for rank, rank_files in sorted(files.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        for path in rank_files:
            trace = reader(path)
            tags = {"point": point, "run": run}
            if rank is not None:
                tags["rank"] = rank
            d = set_columns(trace.dispatches, **tags)
            n_steps = profiler_steps_of(trace.meta)
            if n_steps:
                d[STEPS_COLUMN] = pd.array([n_steps] * len(d), dtype="Int64")
            disp.append(d)
            if len(trace.counters):
                ctrs.append(set_columns(trace.counters, **tags))
            if len(trace.agents):
                agents.append(trace.agents)
            paths.append(str(path))
    if not disp:
        raise GemmperfInputError(None, f"point {point} run {run}: no PyTorch profiler traces to read")
    return Trace(dispatches=concat_tables(disp, DISPATCH_SCHEMA),
                 counters=concat_tables(ctrs, COUNTER_SCHEMA),
                 agents=concat_tables(agents, AGENT_SCHEMA), files=paths)


def run_torch_point(argv: Sequence[str], *, env: Mapping[str, str], run_dir: Path, run: int,
                    device: str, timeout_s: float, cwd: Path | None = None) -> TorchRun:
    """Run one repeat: launch ``argv`` (already wrapped by the launcher) with the trace
    environment, wait under ``timeout_s``, and list the trace files it wrote."""
    raw, traces, logs = run_dirs(run_dir)
    for d in (traces, logs):
        d.mkdir(parents=True, exist_ok=True)
    full_env = dict(env)
    full_env.update(torch_env(run_dir, device))
    log = logs / "workload.log"
    proc = run_process(expand_placeholders(argv, run_dir), env=full_env, cwd=cwd,
                       timeout_s=timeout_s, log_path=log)
    files = collect_rank_traces(traces)
    return TorchRun(run=run, returncode=proc.returncode, duration_s=proc.duration_s,
                    timed_out=proc.timed_out, log=log, files=files, tail=proc.tail(40))


def run_torch_nodes(node_argvs: Sequence[Sequence[str]], *, env: Mapping[str, str], run_dir: Path,
                    run: int, device: str, timeout_s: float, world_size: int,
                    cwd: Path | None = None) -> TorchRun:
    """Run one repeat as ``len(node_argvs)`` node agents started together (see the module
    docstring); returns the gathered :class:`TorchRun` (``returncode`` 0 only when every agent
    exited 0). Raises ``GemmperfInputError`` when two nodes wrote the same global rank or a rank
    outside ``0..world_size-1`` (a misconfigured rendezvous, not a measurement)."""
    _, _, logs = run_dirs(run_dir)
    logs.mkdir(parents=True, exist_ok=True)
    cancel = threading.Event()
    results: list = [None] * len(node_argvs)
    errors: list[BaseException] = []

    def agent(k: int) -> None:
        node_dir = run_dir / "raw" / f"node{k}"
        (node_dir / TRACE_SUBDIR).mkdir(parents=True, exist_ok=True)
        node_env = {**env, OUTPUT_DIR_ENV: str(node_dir), TRACE_DIR_ENV: str(node_dir / TRACE_SUBDIR),
                    DEVICE_ENV: device, NODE_RANK_ENV: str(k)}
        argv = [a.replace("{output_dir}", str(node_dir)).replace("{trace_dir}", str(node_dir / TRACE_SUBDIR))
                .replace("{run_dir}", str(run_dir)) for a in node_argvs[k]]
        try:
            results[k] = run_process(argv, env=node_env, cwd=cwd, timeout_s=timeout_s,
                                     log_path=logs / f"node{k}.log", cancel=cancel)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)
            cancel.set()
            return
        if not results[k].ok:
            cancel.set()

    threads = [threading.Thread(target=agent, args=(k,), name=f"gemmperf-node{k}", daemon=True)
               for k in range(len(node_argvs))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        cancel.set()  # the agents' trees are killed by their own run_process calls
        for t in threads:
            t.join()
        raise
    if errors:
        raise errors[0]
    # the first agent that failed on its own explains the run (the others were stopped)
    failed = [r for r in results if not r.ok and not r.cancelled] or [r for r in results if not r.ok]
    head = failed[0] if failed else results[0]
    files: dict[int | None, list[Path]] = {}
    owner: dict[int, int] = {}
    node_ranks: dict[int, list[int]] = {}
    for k in range(len(node_argvs)):
        found = collect_rank_traces(run_dir / "raw" / f"node{k}" / TRACE_SUBDIR)
        node_ranks[k] = sorted(r for r in found if r is not None)
        for rank, paths in found.items():
            if rank is not None and rank in owner:
                raise GemmperfInputError(paths[0], f"rank {rank} written by node {owner[rank]} and node {k}: "
                                                   "the node agents did not rendezvous into one world")
            if rank is not None and not 0 <= rank < world_size:
                raise GemmperfInputError(paths[0], f"rank {rank} outside 0..{world_size - 1} "
                                                   f"(nnodes x nproc = {world_size})")
            if rank is not None:
                owner[rank] = k
            files.setdefault(rank, []).extend(paths)
    return TorchRun(run=run, returncode=head.returncode if head.returncode is not None else -1,
                    duration_s=max(r.duration_s for r in results),
                    timed_out=any(r.timed_out for r in results), log=head.log_path, files=files,
                    tail=head.tail(40), node_logs=[r.log_path for r in results], node_ranks=node_ranks,
                    # traces outside rank<R>/ directories name their rank inside: not counted here
                    missing_ranks=[] if None in files else sorted(set(range(world_size)) - set(owner)))


def read_trace(path: str | Path, device: str):
    """GPU activity for GPU runs; on the CPU the operators stand in for kernels (and
    ``meta["profiler_steps"]`` counts the trace's ``ProfilerStep#N`` ranges, which the CPU
    reader does not list)."""
    if device != "cpu":
        return read_torch_trace(path)
    trace = read_torch_cpu_trace(path)
    trace.meta["profiler_steps"] = count_profiler_steps(path)
    return trace


def profiler_steps_of(meta: Mapping | None) -> int:
    """``ProfilerStep#N`` ranges a reader found (0 when it says nothing)."""
    meta = meta or {}
    n = meta.get("profiler_steps")
    if n is None and isinstance(meta.get("steps"), pd.DataFrame):
        n = int(meta["steps"]["step"].nunique()) if "step" in meta["steps"].columns else len(meta["steps"])
    return int(n or 0)


class _NamedEvent(msgspec.Struct):
    name: str = ""
    ph: str = ""


class _Names(msgspec.Struct):
    traceEvents: list[_NamedEvent] | None = None


def count_profiler_steps(path: str | Path) -> int:
    """Distinct ``ProfilerStep#N`` complete events of a Kineto trace (annotation or cpu_op).

    Decoded with a names-only schema, not the Kineto reader's decoder: :func:`read_trace` calls
    it after ``read_torch_cpu_trace`` accepted the same file (a repeated key is refused there),
    and a second full decode would cost many times this one on a large trace."""
    try:
        doc = msgspec.json.decode(read_maybe_gzip(str(path)), type=_Names)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise GemmperfInputError(path, f"not a Kineto trace: {exc}") from None
    steps = {e.name for e in doc.traceEvents or () if e.ph == "X" and _STEP.match(e.name)}
    return len(steps)
