"""Gate samples and kernel statistics reduced where each trace file is read (bounded memory).

``gate_inputs(paths, jobs=N)`` returns what :func:`~pytest_gemmperf.gate.samples.gate_samples`
and :func:`~pytest_gemmperf.analysis.kernel_stats.kernel_stats` give on the dispatches of
``traces.discover.load(paths)`` - the same tables, rows in the same order, the same ``attrs`` -
without the parent ever holding the full dispatches table: each source (one file, or the CSV
files of one rocprofv3 process) is read in a worker (``traces/parallel.py``), reduced there, and
only the reductions travel back.

Method. The gate's unit is one process (``point, host, pid, rank, run``); a process lives in one
source (a rocprofv3 JSON or Kineto file holds whole processes; a rocprofv3 CSV group is one
``<pid>_*`` prefix, i.e. one process). Everything the metric registry's process builders
compute per unit (``gate/metrics.py``: ``dur_ns`` rows and their quantile compaction, dispatch
counts, category totals, steps, overlap, timeline) is therefore computed per source on that
source's rows by the function ``gate_samples`` uses (``samples.reduce_table``), and the parent
merges the sources as ``gate_samples`` merges its one table (``samples.merge_reduced``): rows
come back with one segment per (metric, ``point\\x1funit``), the parent stable-sorts the
segments - never the rows - and takes them in one gather. What is not per unit is finished in
the parent from small per-source facts:

* point facts the builders report (collective dispatches, communication time per point): rows
  that hold only where the whole point has them (GEMM overlap on points with GEMMs and
  collectives, timeline rows on points with communication) are kept or dropped on the sums;
* the kernel selection errors (no kernel matches, nothing left after warm-up);
* run builders (collective metrics, matched across ranks): workers return the dispatches each
  one gathers (a small share), the parent builds their rows as ``gate_samples`` does. What a
  builder reads of one source may depend on the others (``metrics.RunBuilder.rest``: the
  collective kernels of a rank without collective metadata join the matching once some rank
  carries it), so where some source gave rows, the sources holding such rows are read again,
  whole, for them (a second read only of those sources, only in such a mix).

Kernel statistics: per (point, rank, kernel) groups do span sources (ranks without a rank
number, repeated runs), and exact quantiles cannot be merged from per-source summaries; workers
drop the warm-up (per process, so per source) and return what the statistics need as duration
rows (``analysis/kernel_stats.DurationRows``: each distinct key once, and per dispatch its key's
index and its duration, packed: a few bytes instead of the full table's row), and the parent
computes the statistics once over them, in input order.

With the reports (``reports=True``: ``gemmperf compare`` without ``--no-report``) each source is
read whole in its worker and reduced there for the reports too, as ``gemmperf analyze`` reduces
it (``analysis/source_totals.reduce_read``: the kernel statistics' duration rows, the category
totals, ``analysis/report_parts.report_part``), in the same pass as the gate's rows: the parent
holds each side's reductions, never its dispatches table. Where a report view joins sources
(counters, collective metadata matched across ranks, one process-GPU group in two sources: see
``source_totals.merge_reduced``) :attr:`GateInputs.sweep` is None and :attr:`GateInputs.trace`
holds the full tables for the reports, no source read twice where it can be: the sources that
force it keep their whole reads (``source_totals.whole_reads``), only the others are read again.

Check, not assumption: when some unit appears in two sources (e.g. a rocprofv3 output dir
copied twice), the reduction would not be the serial one, so the full tables are loaded
(``load(paths, jobs=)``) and reduced in the parent instead; ``GateInputs.reduced`` says which
path was taken.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis import source_totals as T
from pytest_gemmperf.analysis.kernel_stats import (ROW_KEYS, DurationRows, concat_rows, drop_warmup,
                                                   duration_rows, kernel_stats, rows_kernel_stats)
from pytest_gemmperf.analysis.report_parts import SweepReduction
from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.gate import samples as S
from pytest_gemmperf.traces import kinds
from pytest_gemmperf.traces.discover import combine_traces, concat_with_extras, discover_all, load, no_dispatches
from pytest_gemmperf.traces.parallel import map_ordered, pool_jobs
from pytest_gemmperf.analysis.timeline import TORCH_CAT_COLUMNS
from pytest_gemmperf.gate.prepared import STEP_COLUMN, STEPS_COLUMN
from pytest_gemmperf.traces.coded import CodedDispatches, NotSlim
from pytest_gemmperf.traces.reduce import SourceRead, read_for_reduction
from pytest_gemmperf.traces.schema import AGENT_SCHEMA, DISPATCH_SCHEMA, Trace
from pytest_gemmperf.traces.skipped import SkippedInput

STAT_KEYS = ("source", "point", "rank", "kernel")
#: the dispatch columns the gate's process builders read (``gate/prepared.py``,
#: ``gate/metrics.py``: units, kernels, categories, times, step counts, the process-GPU groups of
#: the overlap and timeline metrics), and ``coll_name``, which tells whether the run builders
#: (collectives matched across ranks) have anything to read: where it is set the source is
#: read whole. A reader that keeps only these (``traces/torch_slim.py``,
#: ``traces/rocprof_slim.py``) holds a few columns a dispatch, not the full table's ~40.
GATE_COLUMNS = ("source", "file", "host", "pid", "rank", "point", "run", "pass", "agent", "unit", "kernel",
                "category", "start_ns", "end_ns", "dur_ns", "zero_dur", STEPS_COLUMN, STEP_COLUMN,
                *TORCH_CAT_COLUMNS, "coll_name")


@dataclass(frozen=True)
class _Options:
    point: str | None
    kernels: tuple[str, ...] | None
    warmup: int
    compact: bool
    path: str | None
    stats: bool
    categorical: bool = False
    #: also reduce what the reports read (``source_totals.reduce_read``), the source read whole
    reports: bool = False


@dataclass
class _Partial:
    """One source's reduction (picklable; a few KB to a few MB)."""

    head: SourceRead
    samples: S.Reduced | None = None        # the gate's rows of this source (None: no dispatches)
    rows: DurationRows | None = None        # the statistics' keys and durations past the warm-up
    report: T.SourcePart | None = None      # with reports: what analyze's reduction sends back


@dataclass
class GateInputs:
    """What the gate needs of a set of traces."""

    samples: pd.DataFrame         # == gate_samples(load(paths).dispatches, ...)
    kernel_stats: pd.DataFrame | None  # == kernel_stats(dispatches, by=stats_by, warmup=warmup)
    stats_by: tuple[str, ...]
    notes: list[str]              # == load(paths).meta["notes"]
    skipped: list[SkippedInput]   # == load(paths).meta["skipped"]
    sources: list[dict]           # == load(paths).meta["sources"]
    n_dispatches: int
    reduced: bool                 # False: a unit spanned sources, full tables were used
    #: wall seconds: discover (walk), read_reduce (the pool or the serial loop), merge (parent)
    timings: dict = field(default_factory=dict)
    #: == load(paths).agents (the hardware key of trace inputs; None: no source listed agents)
    agents: pd.DataFrame | None = None
    #: with reports, reduced: what the reports read of the dispatches (None: a view joins
    #: sources, or the full tables were read: ``trace``)
    sweep: SweepReduction | None = None
    #: with reports, where the reports read the full tables (a view joins sources) or the full
    #: tables were read (not ``reduced``): the trace itself
    trace: Trace | None = None


def reduce_source(src, opts: _Options) -> _Partial:
    """Read one source and reduce it (runs in a worker process)."""

    whole = opts.stats or opts.reports
    head, d = (read_for_reduction(src, opts.point, keep=opts.reports) if whole
               else _read_gate_columns(src, opts.point))
    out = _Partial(head)
    if opts.reports:  # the reports' reduction of the table the gate's rows come from
        out.report = T.reduce_read(head, d, _report_options(opts))
    if d is None:
        return out
    if opts.stats:
        out.rows = duration_rows(drop_warmup(d, opts.warmup), ROW_KEYS)
    out.samples = S.reduce_table(S.gate_table(d), kernels=opts.kernels, warmup=opts.warmup,
                                 compact=opts.compact, path=opts.path, gather=True)
    return out


def _report_options(opts: _Options) -> T.ReduceOptions:
    return T.ReduceOptions(opts.point, opts.warmup, reports=True)


def _read_gate_columns(src, point: str | None) -> tuple[SourceRead, pd.DataFrame | None]:
    """``src`` read for the gate's process builders: only :data:`GATE_COLUMNS` (slim where the
    source's reader can), the dispatches table made from its codes; the whole table where
    the source carries collective metadata (the run builders read more of it)."""
    try:
        head, d = read_for_reduction(src, point, columns=GATE_COLUMNS, coded=True)
    except NotSlim:
        return read_for_reduction(src, point)
    if isinstance(d, CodedDispatches):
        d = d.frame()
    if d is not None and "coll_name" in d.columns and d["coll_name"].notna().any():
        del d  # let go before the whole read
        return read_for_reduction(src, point)
    return head, d


def gate_inputs(paths, *, jobs: int | None = 1, point: str | None = None,
                kernels: Sequence[str] | None = None, warmup: int = 0, compact: bool = True,
                path: str | os.PathLike | None = None, stats: bool = True,
                categorical: bool = False, reports: bool = False) -> GateInputs:
    """Samples (and kernel statistics) of every trace under ``paths``, reduced per source.

    Equals ``gate_samples(load(paths, point=point).dispatches, kernels=, warmup=, compact=,
    path=)`` and ``kernel_stats(dispatches, by=stats_by, warmup=warmup)`` (``stats_by``:
    ``point, rank, kernel``, with a leading ``source`` when the inputs mix profilers, as
    ``gemmperf analyze`` groups). Errors are those ``load`` / ``gate_samples`` raise.
    ``categorical``: the samples' text columns as categoricals of the same values (a row a
    dispatch then holds codes, not its kernel's name). Without ``stats`` each source is read
    with the gate's columns only (:data:`GATE_COLUMNS`). ``reports``: each source is read whole
    and reduced for the reports as well (:attr:`GateInputs.sweep`; :attr:`GateInputs.trace`
    where the full tables were read).
    """

    t0 = time.perf_counter()
    found = discover_all(paths)
    sources, unique, notes = found.sources, found.unique, found.notes
    if not all(kinds.reducible(s.kind) for s in unique):  # a source may hold part of a process
        return _full_path(paths, jobs=jobs, point=point, kernels=kernels, warmup=warmup, compact=compact,
                          path=path, stats=stats, categorical=categorical, reports=reports)
    opts = _Options(point=point, kernels=tuple(str(k) for k in kernels) if kernels else None,
                    warmup=int(warmup), compact=compact, path=None if path is None else os.fspath(path),
                    stats=stats, categorical=categorical, reports=reports)
    n_jobs = pool_jobs(jobs, [f for s in unique for f in s.files])
    t1 = time.perf_counter()
    parts = map_ordered(functools.partial(reduce_source, opts=opts), unique, n_jobs)
    t2 = time.perf_counter()
    for part in parts:
        part.head.merge_notes(notes)
    described = [s.describe() for s in sources]
    n = sum(p.head.n_dispatches for p in parts)
    if n == 0:
        raise no_dispatches(found)
    live = [p for p in parts if p.samples is not None]
    units = np.concatenate([p.samples.units for p in live])
    if len(np.unique(units)) != len(units):  # a process in two sources: not reducible per source
        return _full_path(paths, jobs=jobs, point=point, kernels=kernels, warmup=warmup, compact=compact,
                          path=path, stats=stats, categorical=categorical, reports=reports)
    S.check_selection([p.samples for p in live], kernels, warmup, path)
    sweep = trace = whole = None
    if reports:
        totals = T.merge_reduced([p.report for p in parts], _report_options(opts), notes=notes,
                                 skipped=found.skipped, sources=described, workers=n_jobs)
        if totals is not None:
            sweep = totals.sweep()
        else:  # a view joins sources: the full tables, no source read twice where it can be
            whole = T.whole_reads([p.head for p in parts], found, point, jobs)
            trace = combine_traces([t for t in whole if t is not None], found)
    _gather_rest(parts, unique, opts, n_jobs, whole)
    samples = _merge_samples([p.samples for p in live], warmup, categorical)
    stat_table, by = _stats(live, warmup) if stats else (None, ())
    timings = {"discover_s": t1 - t0, "read_reduce_s": t2 - t1, "merge_s": time.perf_counter() - t2,
               "workers": n_jobs}
    agents = [p.head.agents for p in parts if p.head.agents is not None]
    return GateInputs(samples=samples, kernel_stats=stat_table, stats_by=by, notes=notes,
                      skipped=found.skipped, sources=described, n_dispatches=n, reduced=True, timings=timings,
                      agents=concat_with_extras(agents, AGENT_SCHEMA) if agents else None, sweep=sweep,
                      trace=trace)


def _gather_rest(parts: list[_Partial], unique, opts: _Options, n_jobs: int, whole: list | None = None) -> None:
    """Where a run builder gathered dispatches of some source, what it reads of the sources
    whose ``gather`` gave none (``metrics.RunBuilder.rest``: the collective kernels of a rank
    without collective metadata beside ranks with it), as the full table gives them: from the
    sources' whole reads where the reports hold them (``whole``), else those sources read again,
    whole (a slim first read lacks columns the builder reads)."""
    n = len(M.run_builders())
    used = [any(p.samples is not None and p.samples.gathered[i] is not None for p in parts) for i in range(n)]
    again = [j for j, p in enumerate(parts)
             if p.samples is not None and any(u and w for u, w in zip(used, p.samples.pending))]
    if not again:
        return
    if whole is not None:
        rests = [_rests(whole[j].dispatches.reset_index(drop=True)) for j in again]
    else:
        rests = map_ordered(functools.partial(rest_source, opts=opts), [unique[j] for j in again], n_jobs)
    for j, rest in zip(again, rests):
        got = parts[j].samples
        got.gathered = [r if u and w else g for g, r, u, w in zip(got.gathered, rest, used, got.pending)]


def rest_source(src, opts: _Options) -> list:
    """Per run builder, ``rest`` of ``src`` read whole (runs in a worker process)."""
    _, d = read_for_reduction(src, opts.point)
    return _rests(d)


def _rests(d: pd.DataFrame | None) -> list:
    d = S.gate_table(d) if d is not None else None
    return [None if d is None else rb.rest(d) for rb in M.run_builders()]


def _merge_samples(parts: list[S.Reduced], warmup: int, categorical: bool = False) -> pd.DataFrame:
    """The sources' rows merged as ``gate_samples`` merges its one table's; each run builder
    works on the dispatches it gathered from every source."""
    notes: list[str] = []
    run_frames = []
    for i, rb in enumerate(M.run_builders()):
        gathered = [p.gathered[i] for p in parts if p.gathered[i] is not None]
        if gathered:
            d = concat_with_extras(gathered, DISPATCH_SCHEMA).reset_index(drop=True)
            run_frames += rb.build(d, warmup, notes)
    return S.merge_reduced(parts, run_frames, notes, categorical)


def _stats_by(slim: pd.DataFrame) -> tuple[str, ...]:
    keys = ("point", "rank", "kernel")
    return ("source",) + keys if slim["source"].nunique(dropna=True) > 1 else keys


def _stats(live: list[_Partial], warmup: int) -> tuple[pd.DataFrame, tuple[str, ...]]:

    rows = concat_rows([p.rows for p in live])
    by = _stats_by(rows.keys)  # the keys hold each value the rows do
    return rows_kernel_stats(rows, by=by), by


def _full_path(paths, *, jobs, point, kernels, warmup, compact, path, stats, categorical=False,
               reports=False) -> GateInputs:
    """The serial reduction on the full tables (read with ``jobs`` workers)."""

    trace = load(paths, point=point, jobs=jobs)
    d = trace.dispatches
    samples = S.gate_samples(d, kernels=kernels, warmup=warmup, compact=compact, path=path)
    if categorical:
        samples = S.categorical_samples(samples)
    by = _stats_by(d) if stats else ()
    table = kernel_stats(d, by=by, warmup=warmup) if stats else None
    return GateInputs(samples=samples, kernel_stats=table, stats_by=by, notes=trace.meta["notes"],
                      skipped=trace.meta["skipped"], sources=trace.meta["sources"], n_dispatches=len(d), reduced=False,
                      agents=trace.agents if len(trace.agents) else None, trace=trace if reports else None)
