"""Kernel statistics inputs and dispatch totals of many trace files, reduced where each is read.

``gemmperf analyze`` writes ``kernels.csv`` (duration statistics per ``(point, rank, kernel)``)
and ``summary.json`` (dispatch counts and duration sums per ``(point, rank)`` and category,
artefact flags, agents). Neither needs the full dispatches table in one process, which for 96
rocprofv3 files of 44k dispatches is 4.2 M rows and about 3 GB once pickled back from the pool
workers, concatenated and grouped again. :func:`reduce_sources` reads each source (one file, or
the CSV files of one rocprofv3 process) in a worker (``traces/parallel.py``) and sends back:

* what the statistics read (``source, point, rank, kernel, category, dur_ns``, after the
  warm-up is dropped) as duration rows (``analysis/kernel_stats.DurationRows``): the source's
  distinct keys once, and per dispatch its key's index and its duration, packed into the
  narrowest integers that hold them: a few bytes per dispatch (docs/performance.md). Exact
  quantiles cannot be merged from per-source summaries, and ``(point, rank, kernel)`` groups do
  span sources (processes without a rank, repeated runs), so the statistics are computed once in
  the parent, the group ids found on the keys alone and gathered onto the rows in input order:
  the rows, their order and the floating-point sums are those of the full table;
* :func:`dispatch_totals`, a few hundred rows per source: dispatches, duration sum, first start,
  last end and flag counts per ``(source, point, rank, kernel, category)``; sums, minima and
  maxima of integers merge exactly;
* the source's agents (the columns summary.json lists), notes, and the processes it holds.

With the reports (``reports=True``), each worker also sends back its source's report part
(``analysis/report_parts.py``): what the short-kernel, kernel-details, timeline, top-variance
and overlap views read of it; the parent merges the parts in input order. Where a view joins
sources (counters, collective metadata, one process-GPU group in two sources) the reports read
the full tables: :func:`reduce_or_read` gives them with no source read twice where it can be
(the sources that force it send their whole reads back: :func:`whole_reads`).

Warm-up is dropped per process (``analysis/kernel_stats.drop_warmup``); that equals dropping it
on the full table only when each process lies in one source. With a warm-up, a source kind that
may hold part of a process (``traces/kinds.py`` ``reducible``) or a process found in two sources
(e.g. a rocprofv3 directory copied twice) makes :func:`reduce_sources` return None, and the
caller reads the full tables instead.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.intervals import group_codes
from pytest_gemmperf.analysis.kernel_stats import (PROCESS_KEYS, ROW_KEYS, DurationRows, concat_rows,
                                                   packed, drop_warmup, duration_rows)
from pytest_gemmperf.analysis.report_parts import (DEFAULT_SHORT_KERNEL_US, ReportPart, ReportParts,
                                                   SweepReduction, merge_parts, report_part, row_in_two,
                                                   shared_gpu_groups)
from pytest_gemmperf.traces import kinds
from pytest_gemmperf.traces.categories import categorize
from pytest_gemmperf.traces.coded import CodedDispatches, first_positions
from pytest_gemmperf.traces.discover import (Found, combine_traces, concat_with_extras, discover_all, load,
                                            no_dispatches, read_attached)
from pytest_gemmperf.traces.parallel import map_ordered, pool_jobs
from pytest_gemmperf.traces.reduce import SourceRead, read_for_reduction
from pytest_gemmperf.traces.schema import AGENT_SCHEMA, DISPATCH_SCHEMA, Trace, concat_tables
from pytest_gemmperf.traces.skipped import SkippedInput

#: the groups of :func:`dispatch_totals`: the duration rows' keys, so that a worker numbers a
#: source's keys once for both
TOTAL_KEYS = ROW_KEYS
#: its integer columns: summed, except the first start (min) and last end (max)
TOTAL_COLUMNS = ("n_dispatches", "total_ns", "first_start_ns", "last_end_ns", "zero_dur", "queue_overlap")
#: the agents' columns summary.json lists (each source's agents table has some 60)
AGENT_COLUMNS = ("source", "host", "pid", "gpu_index", "node_id", "logical_id", "type", "gpu_arch",
                 "product", "cu_count", "wave_size")
_TOTAL_SCHEMA = {**{c: DISPATCH_SCHEMA[c] for c in TOTAL_KEYS}, **{c: "int64" for c in TOTAL_COLUMNS}}
#: the dispatch columns :func:`reduce_source` reads (a reader may keep only these), and with a
#: warm-up to drop (the processes' keys too)
READ_COLUMNS = (*ROW_KEYS, "start_ns", "end_ns", "dur_ns", "zero_dur", "queue_overlap")
WARMUP_READ_COLUMNS = (*READ_COLUMNS, *(c for c in PROCESS_KEYS if c not in ROW_KEYS))


def dispatch_totals(d: pd.DataFrame) -> pd.DataFrame:
    """Per ``(source, point, rank, kernel, category)`` of ``d`` (null keys kept), groups in the
    order the rows first show them: dispatches, ``dur_ns`` sum, first ``start_ns``, last
    ``end_ns``, zero-duration and queue-overlap counts, as int64.

    The groups are numbered as :func:`~pytest_gemmperf.analysis.kernel_stats.duration_rows`
    numbers its keys, and each column is reduced by one unbuffered ufunc pass (``np.add.at``,
    ``np.minimum.at``, ...) rather than by a pandas ``groupby().agg``, whose fixed costs per
    column and group outweigh the arithmetic at one source's size (docs/performance.md). The
    table equals that groupby's (``sort=False``, ``dropna=False``, ``observed=True``): integer
    sums, minima and maxima are exact."""
    return _totals(duration_rows(d, TOTAL_KEYS), d)


def _totals(coded: DurationRows, d: pd.DataFrame) -> pd.DataFrame:
    """:func:`dispatch_totals` of ``d`` from ``coded``, its duration rows under TOTAL_KEYS."""
    out = dict(coded.keys.items())
    group = coded.group.astype(np.intp, copy=False)
    n = len(coded.keys)

    def reduce(ufunc: np.ufunc, column: str, start: int) -> np.ndarray:
        acc = np.full(n, start, dtype=np.int64)
        ufunc.at(acc, group, d[column].to_numpy(dtype=np.int64))
        return acc

    out["n_dispatches"] = np.bincount(group, minlength=n).astype(np.int64)
    out["total_ns"] = reduce(np.add, "dur_ns", 0)
    out["first_start_ns"] = reduce(np.minimum, "start_ns", np.iinfo(np.int64).max)
    out["last_end_ns"] = reduce(np.maximum, "end_ns", np.iinfo(np.int64).min)
    out["zero_dur"] = reduce(np.add, "zero_dur", 0)
    out["queue_overlap"] = reduce(np.add, "queue_overlap", 0)
    return pd.DataFrame(out)  # made into a frame once: each column set on a frame copies its blocks


def coded_reduction(c: CodedDispatches) -> tuple[DurationRows, pd.DataFrame]:
    """``duration_rows(table, ROW_KEYS)`` and :func:`dispatch_totals` of ``table`` =
    ``c.frame()``, without the table: the groups are found on the key rows (a few), each
    dispatch's group numbered in the order the dispatches first show it (as
    :func:`~pytest_gemmperf.analysis.kernel_stats.duration_rows` numbers them), and the totals
    reduced from the per-dispatch numbers a slice at a time, so that nothing per dispatch is
    made but the group index the rows keep."""
    cols = [k for k in ROW_KEYS if k in c.keys.columns]
    key_group = group_codes(c.keys, cols)  # groupby(cols, sort=False).ngroup(), without its fixed costs
    n_groups = int(key_group.max()) + 1 if len(key_group) else 0
    # the first dispatch of each group: the earliest first dispatch of its key rows
    key_first = first_positions(c.code, len(c.keys))
    group_first = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    used = key_first >= 0
    np.minimum.at(group_first, key_group[used], key_first[used])
    order = np.argsort(group_first, kind="stable")
    order = order[group_first[order] < np.iinfo(np.int64).max]  # groups no dispatch has are none
    number = np.full(n_groups, -1, dtype=np.int64)
    number[order] = np.arange(len(order))
    of_key = number[key_group]
    of_key[of_key < 0] = 0  # key rows no dispatch has (none is coded with them)
    keys = c.keys[cols].iloc[c.code[group_first[order]]].reset_index(drop=True)
    rows = DurationRows(keys, packed(of_key)[c.code], packed(c.dur_ns))
    return rows, _coded_totals(rows, c)


#: dispatches per slice of :func:`coded_reduction`'s totals: the slice's int64 copies stay small
_SLICE = 1 << 18


def _coded_totals(rows: DurationRows, c: CodedDispatches) -> pd.DataFrame:
    """:func:`_totals` of ``c.frame()`` under ``rows`` (its duration rows), a slice of
    dispatches at a time (integer sums, minima and maxima do not depend on the slicing)."""
    n = len(rows.keys)
    acc = {"n_dispatches": np.zeros(n, np.int64), "total_ns": np.zeros(n, np.int64),
           "first_start_ns": np.full(n, np.iinfo(np.int64).max, np.int64),
           "last_end_ns": np.full(n, np.iinfo(np.int64).min, np.int64),
           "zero_dur": np.zeros(n, np.int64), "queue_overlap": np.zeros(n, np.int64)}
    for lo in range(0, len(c), _SLICE):
        part = slice(lo, lo + _SLICE)
        g = rows.group[part].astype(np.intp)
        start = c.start_ns[part].astype(np.int64, copy=False)
        dur = c.dur_ns[part].astype(np.int64)
        acc["n_dispatches"] += np.bincount(g, minlength=n)
        np.add.at(acc["total_ns"], g, dur)
        np.minimum.at(acc["first_start_ns"], g, start)
        np.maximum.at(acc["last_end_ns"], g, start + dur)
        acc["zero_dur"] += np.bincount(g[dur == 0], minlength=n)
        acc["queue_overlap"] += np.bincount(g[c.queue_overlap[part]], minlength=n)
    # made into a frame once: each column set on a frame copies its blocks
    return pd.DataFrame({**dict(rows.keys.items()), **{col: acc[col] for col in TOTAL_COLUMNS}})


def recategorize(table: pd.DataFrame, rules: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """``table`` with ``category`` from the user's ``rules`` tried before the built-in ones
    (``--categories``); unchanged without rules."""
    if not rules:
        return table
    table = table.copy(deep=False)
    table["category"] = categorize(table["kernel"], extra=rules)
    return table


@dataclass(frozen=True)
class ReduceOptions:
    """What :func:`reduce_source` computes of each source."""

    point: str | None
    warmup: int
    #: also reduce what the reports read (``analysis/report_parts.py``), categories by ``rules``
    reports: bool = False
    rules: tuple[tuple[str, str], ...] = ()
    short_us: float = DEFAULT_SHORT_KERNEL_US


@dataclass
class SourcePart:
    """One source's reduction (picklable; its size is the duration rows')."""

    head: SourceRead
    rows: DurationRows | None = None
    totals: pd.DataFrame | None = None
    units: pd.DataFrame | None = None      # the processes the source holds (PROCESS_KEYS; with a warm-up)
    report: ReportPart | None = None       # what the reports read (with reports)


@dataclass
class SourceTotals:
    """What ``gemmperf analyze`` needs of the dispatches under some paths."""

    rows: DurationRows            # ROW_KEYS and dur_ns of every dispatch past the warm-up, input order,
                                  # as keys (one row each) and per-dispatch key index + duration
    totals: pd.DataFrame          # dispatch_totals of every source, concatenated in input order
    agents: pd.DataFrame          # == load(paths).agents[AGENT_COLUMNS], those it has
    notes: list[str]              # == load(paths).meta["notes"]
    skipped: list[SkippedInput]   # == load(paths).meta["skipped"]
    sources: list[dict]           # == load(paths).meta["sources"]
    workers: int = 1              # pool size used (1: serial)
    report: ReportParts | None = None  # with reports: every source's report part, merged

    def sweep(self) -> SweepReduction:
        """The reports' view of the reduced sweep (``report/data.py``); with reports only."""
        assert self.report is not None, "reduced without reports"
        return SweepReduction(rows=self.rows, totals=self.totals, parts=self.report)


def reduce_source(src, opts: ReduceOptions) -> SourcePart:
    """Read one source and reduce it (runs in a worker process)."""
    # a warm-up's drop and the reports' views read the table; the totals alone read codes
    head, d = read_for_reduction(src, opts.point, AGENT_COLUMNS, _read_columns(opts),
                                 coded=opts.warmup == 0 and not opts.reports, keep=opts.reports)
    return reduce_read(head, d, opts)


def reduce_read(head: SourceRead, d: pd.DataFrame | CodedDispatches | None, opts: ReduceOptions) -> SourcePart:
    """The reduction of one source read as ``head`` and ``d`` (its dispatches, None: none):
    what :func:`reduce_source` sends back, for a reducer that reads the source itself (the
    gate's, ``gate/file_reduce.py``, with the reports of ``gemmperf compare``). A whole read the
    head keeps (``head.trace``) goes back only where this source alone makes the reports read
    the full tables (counters, collective metadata; one without dispatches is small): then the
    parent reads no source twice (:func:`whole_reads`)."""
    out = SourcePart(head)
    if d is None:
        return out
    if isinstance(d, CodedDispatches):
        out.rows, out.totals = coded_reduction(d)
        return out
    if opts.reports:
        out.report = report_part(recategorize(d, opts.rules), warmup=opts.warmup, short_us=opts.short_us)
    if head.trace is not None and not (head.n_counters or (out.report is not None and out.report.needs_full)):
        head.trace = None
    coded = duration_rows(d, ROW_KEYS)
    out.totals = _totals(coded, d)
    out.rows = coded
    if opts.warmup > 0:  # only a warm-up needs each process in one source (reduce_sources)
        keys = [c for c in PROCESS_KEYS if c in d.columns]
        out.units = d[keys].drop_duplicates().reset_index(drop=True)
        out.rows = duration_rows(drop_warmup(d, opts.warmup), ROW_KEYS)
    return out


def _read_columns(opts: ReduceOptions) -> Sequence[str] | None:
    """The dispatch columns a source is read with: all of them for the reports (their views
    read the GPU keys, launch shapes and extras such as the torch event category)."""
    if opts.reports:
        return None
    return WARMUP_READ_COLUMNS if opts.warmup > 0 else READ_COLUMNS


def reduce_sources(paths, *, jobs: int | None = 1, warmup: int = 0, point: str | None = None,
                   rules: Sequence[tuple[str, str]] = (), reports: bool = False,
                   short_us: float = DEFAULT_SHORT_KERNEL_US,
                   meanwhile: Callable[[], Any] | None = None) -> SourceTotals | None:
    """The slim columns and totals of every source under ``paths`` (with ``reports``, what the
    reports read too: ``analysis/report_parts.py``), read on up to ``jobs`` workers; the same
    whatever ``jobs`` is. None where a warm-up cannot be dropped source by source (see the
    module docstring), or, with ``reports``, where a report view needs dispatches of several
    sources at once (counters, collective metadata, one process-GPU group in two sources):
    read the full tables then. ``meanwhile``: run while a pool reads (``map_ordered``). Errors
    are ``load``'s."""
    read = _reduce_all(paths, jobs=jobs, warmup=warmup, point=point, rules=rules, reports=reports,
                       short_us=short_us, meanwhile=meanwhile)
    return None if read is None else read.merged()


def reduce_or_read(paths, *, jobs: int | None = 1, warmup: int = 0, point: str | None = None,
                   rules: Sequence[tuple[str, str]] = (), reports: bool = True,
                   meanwhile: Callable[[], Any] | None = None) -> SourceTotals | Trace:
    """:func:`reduce_sources`, else the full tables (``load(paths)``, categories as read), each
    source read once where it can be: where the reductions cannot stand for the tables after the
    sources were read, those that forced it handed their whole reads back and only the others
    are read again (:func:`whole_reads`)."""
    read = _reduce_all(paths, jobs=jobs, warmup=warmup, point=point, rules=rules, reports=reports,
                       meanwhile=meanwhile)
    merged = None if read is None else read.merged()
    if merged is not None:
        return merged
    if read is None:  # decided before anything was read
        return load(paths, point=point, jobs=jobs)
    return combine_traces([t for t in whole_reads([p.head for p in read.parts], read.found, point, jobs)
                           if t is not None], read.found)


@dataclass
class _Read:
    """Every source's reduction under some paths, not yet merged."""

    found: Found
    parts: list[SourcePart]
    opts: ReduceOptions
    workers: int

    def merged(self) -> SourceTotals | None:
        return merge_reduced(self.parts, self.opts, notes=self.found.notes, skipped=self.found.skipped,
                             sources=[s.describe() for s in self.found.sources], workers=self.workers)


def _reduce_all(paths, *, jobs, warmup, point, rules=(), reports=False, short_us=DEFAULT_SHORT_KERNEL_US,
                meanwhile=None) -> _Read | None:
    """Each source under ``paths`` read and reduced (notes merged); None where a warm-up
    cannot be dropped source by source whatever they hold (a kind that may hold part of a
    process)."""
    found = discover_all(paths)
    if warmup > 0 and not all(kinds.reducible(s.kind) for s in found.unique):
        return None
    n_jobs = pool_jobs(jobs, [f for s in found.unique for f in s.files])
    opts = ReduceOptions(point, int(warmup), reports=reports, rules=tuple(map(tuple, rules)), short_us=short_us)
    parts = map_ordered(functools.partial(reduce_source, opts=opts), found.unique, n_jobs, meanwhile=meanwhile)
    for part in parts:
        part.head.merge_notes(found.notes)
    if not any(p.head.n_dispatches for p in parts):
        raise no_dispatches(found)
    return _Read(found, parts, opts, n_jobs)


def whole_reads(heads: Sequence[SourceRead], found: Found, point: str | None, jobs: int | None
                ) -> list[Trace | None]:
    """Per source ``found`` (in order, their notes merged), whose reads gave ``heads``, what
    ``load`` reads of it (``read_attached``; None: its reader gave nothing): the head's whole
    read where it kept one (``read_for_reduction(keep=True)``), else the source read again.
    ``discover.combine_traces`` of them is ``load(paths)``."""
    again = [i for i, h in enumerate(heads) if h.read and h.trace is None]
    srcs = [found.unique[i] for i in again]
    reread = map_ordered(functools.partial(read_attached, point=point), srcs,
                         pool_jobs(jobs, [f for s in srcs for f in s.files]))
    traces = [h.trace for h in heads]
    for i, (t, _, _) in zip(again, reread):  # the notes were merged from the first read
        traces[i] = t
    return traces


def merge_reduced(parts: Sequence[SourcePart], opts: ReduceOptions, *, notes: list[str], skipped: list[SkippedInput],
                  sources: list[dict], workers: int = 1) -> SourceTotals | None:
    """The sources' reductions (:func:`reduce_read`, in input order, notes already merged)
    as one :class:`SourceTotals`; None where they cannot stand for the full tables (a warm-up
    with a process in two sources; with reports, a view that joins sources)."""
    live = [p for p in parts if p.head.n_dispatches]
    if opts.warmup > 0 and _shared_process(p.units for p in live):
        return None
    if opts.reports and not _reports_reducible(parts, live):
        return None
    rows = concat_rows([p.rows for p in live])
    rows.keys = recategorize(rows.keys, opts.rules)
    agents = [p.head.agents for p in parts if p.head.agents is not None]
    return SourceTotals(
        rows=rows, totals=recategorize(concat_tables([p.totals for p in live], _TOTAL_SCHEMA), opts.rules),
        agents=concat_with_extras(agents, AGENT_SCHEMA), notes=notes, skipped=skipped,
        sources=sources, workers=workers,
        report=merge_parts([p.report for p in live]) if opts.reports else None)


def _reports_reducible(parts: list[SourcePart], live: list[SourcePart]) -> bool:
    """Whether the reports can be built from the sources' report parts: no counters to join,
    no collective metadata to match across ranks, no process-GPU group in two sources."""
    if any(p.head.n_counters for p in parts) or any(p.report.needs_full for p in live):
        return False
    return not shared_gpu_groups([p.report for p in live])


def _shared_process(units) -> bool:
    """Whether a process (PROCESS_KEYS) appears in more than one source."""
    return row_in_two(units)
