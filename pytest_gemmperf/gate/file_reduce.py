"""Gate samples and kernel statistics reduced where each trace file is read (bounded memory).

``gate_inputs(paths, jobs=N)`` returns what :func:`~pytest_gemmperf.gate.samples.gate_samples`
and :func:`~pytest_gemmperf.analysis.kernel_stats.kernel_stats` give on the dispatches of
``traces.discover.load(paths)`` - the same tables, rows in the same order, the same ``attrs`` -
without the parent ever holding the full dispatches table: each source (one file, or the CSV
files of one rocprofv3 process) is read in a worker (``traces/parallel.py``), reduced there, and
only the reductions travel back.

Method. The gate's unit is one process (``point, host, pid, rank, run``); a process lives in one
source (a rocprofv3 JSON or Kineto file holds whole processes; a rocprofv3 CSV group is one
``<pid>_*`` prefix, i.e. one process). Everything ``gate_samples`` computes per unit (``dur_ns``
rows and their quantile compaction, dispatch counts, category totals, steps, overlap, timeline)
is therefore computed per source on that source's rows, then put in the serial order: each
worker returns its rows sorted by (frame kind, ``point\\x1funit``) with a segment index, the
parent stable-sorts the segments - never the rows - and takes them in one gather. What is not
per unit is finished in the parent from small per-source facts:

* which points have collective dispatches (GEMM overlap rows are kept only on points with
  both GEMMs and collectives; a source whose point has GEMMs but no collectives in this source
  returns its would-be ``overlap_fraction`` rows (0 covered) as conditional rows);
* per-point communication time (timeline rows only on points with communication);
* the kernel selection errors (no kernel matches, nothing left after warm-up);
* collective metrics, which match collectives across ranks: workers return their collective
  dispatches only (a small share), the parent matches them as ``gate_samples`` does.

Kernel statistics: per (point, rank, kernel) groups do span sources (ranks without a rank
number, repeated runs), and exact quantiles cannot be merged from per-source summaries; workers
drop the warm-up (per process, so per source) and return the slim columns the statistics need
(keys, ``kernel``, ``category``, ``dur_ns``: ~30 bytes per dispatch instead of the full table),
and the parent computes the statistics once over them, in input order.

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

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate import samples as S
from pytest_gemmperf.traces.skipped import SkippedInput
from pytest_gemmperf.analysis.overlap import category_mask
from pytest_gemmperf.analysis.timeline import gpu_timeline
from pytest_gemmperf.analysis.collectives import collective_mask
from pytest_gemmperf.analysis.kernel_stats import drop_warmup
from pytest_gemmperf.analysis.selection import select_kernels
from pytest_gemmperf.traces.discover import read_attached
from pytest_gemmperf.traces import kinds
from pytest_gemmperf.traces.discover import discover_all, merge_notes
from pytest_gemmperf.traces.parallel import map_ordered, pool_jobs
from pytest_gemmperf.traces.discover import concat_with_extras
from pytest_gemmperf.traces.schema import AGENT_SCHEMA
from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA
from pytest_gemmperf.analysis.kernel_stats import kernel_stats
from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA, concat_tables
from pytest_gemmperf.traces.discover import load

#: kinds of rows, in gate_samples' frame order
DUR, COUNT, CATEGORY, OVERLAP, INTERFERENCE, EXPOSED, COMPUTATION = range(7)
#: conditions on a segment: always kept / kept when its point has collectives anywhere /
#: kept when its point has communication time anywhere
ALWAYS, IF_COLLECTIVES, IF_COMM = 0, 1, 2
STAT_KEYS = ("source", "point", "rank", "kernel")
_SLIM = (*STAT_KEYS, "category", "dur_ns")
_SEG_COLUMNS = ("kind", "key", "point", "cond", "start", "stop")


@dataclass(frozen=True)
class _Options:
    point: str | None
    kernels: tuple[str, ...] | None
    warmup: int
    compact: bool
    path: str | None
    stats: bool


@dataclass
class _Partial:
    """One source's reduction (picklable; a few KB to a few MB)."""

    read_notes: list[str]
    attach_notes: list[str]
    read: bool = False                      # the reader returned a Trace (not None)
    meta_notes: list[str] = field(default_factory=list)
    n_dispatches: int = 0
    kernels_seen: np.ndarray | None = None
    matched: bool = False
    dur_any: bool = False
    rows: pd.DataFrame | None = None        # SAMPLE_COLUMNS, sorted by (kind, key)
    seg: pd.DataFrame | None = None         # kind, key, point, cond, start, stop
    units: np.ndarray | None = None         # point\x1funit of every unit, sorted
    steps: dict | None = None               # gate_samples' attrs["steps"] lists, unit order
    coll_points: set = field(default_factory=set)
    comm_ns: dict = field(default_factory=dict)  # point -> total communication time
    collectives: pd.DataFrame | None = None
    slim: pd.DataFrame | None = None
    agents: pd.DataFrame | None = None     # the source's agents table (a few rows)


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


def _key(point_of: np.ndarray, unit_of: np.ndarray) -> np.ndarray:
    return np.asarray(point_of, dtype=object) + "\x1f" + np.asarray(unit_of, dtype=object)


def _tagged(frame: pd.DataFrame, kind: int, cond: int = ALWAYS) -> tuple[pd.DataFrame, int, int]:
    return frame[list(S.SAMPLE_COLUMNS)], kind, cond


def _overlap_only_gemm(d: pd.DataFrame, p) -> pd.DataFrame | None:
    """``overlap_fraction`` rows (0 covered) of units whose point has GEMMs but no collectives
    in this source: ``gate_samples`` writes them when another source of the point has
    collectives (same-GPU groups include the file, so nothing here is covered)."""
    gm = category_mask(d, None, "gemm")
    cm = category_mask(d, None, "collective")
    only = S._points_with(p, p.pu_row, gm) & ~S._points_with(p, p.pu_row, cm)
    if not only.any():
        return None
    kept = np.zeros(len(d), dtype=bool)
    kept[p.rows] = True
    rows = np.flatnonzero(gm & kept & only[p.pu_row])
    if len(rows) == 0:
        return None
    pu = p.pu_row[rows]
    n_pu = len(p.point_of)
    dur = (d["end_ns"].to_numpy(np.int64)[rows] - d["start_ns"].to_numpy(np.int64)[rows]).astype(float)
    tot = np.bincount(pu, weights=dur, minlength=n_pu)
    has = np.bincount(pu, minlength=n_pu) > 0
    # the serial arithmetic: covered sum (0.0 here) / GEMM time
    frac = np.bincount(pu, weights=np.zeros(len(rows)), minlength=n_pu)[has] / tot[has]
    return pd.DataFrame({"point": p.point_of[has], "kernel": S.GEMM_KERNEL, "metric": S.OVERLAP_FRACTION,
                         "unit": p.unit_of[has], "value": frac})


def _timeline(d: pd.DataFrame, p, steps: np.ndarray) -> tuple[list[pd.DataFrame], dict]:
    """``_timeline_frames`` before its per-point filter, and per-point communication time."""
    tl = gpu_timeline(d)
    tl = tl.assign(_point=S._points(tl), _unit=S.unit_ids(tl))
    per_unit = tl.groupby(["_point", "_unit"], sort=True)[
        ["exposed_comm_time_ns", "computation_time_ns", "total_comm_time_ns"]].sum()
    comm = per_unit.groupby(level="_point")["total_comm_time_ns"].sum()
    pt = per_unit.index.get_level_values("_point").to_numpy(object)
    un = per_unit.index.get_level_values("_unit").to_numpy(object)
    by_label = pd.Series(steps, index=pd.MultiIndex.from_arrays([p.point_of, p.unit_of]))
    n = by_label.reindex(pd.MultiIndex.from_arrays([pt, un])).fillna(1.0).to_numpy(float)
    frames = [pd.DataFrame({"point": pt, "kernel": "*", "metric": m, "unit": un,
                            "value": per_unit[col].to_numpy(float) / n})
              for m, col in ((S.EXPOSED_COMM, "exposed_comm_time_ns"),
                             (S.COMPUTATION, "computation_time_ns"))]
    return frames, {str(k): int(v) for k, v in comm.items()}


def _segments(tagged: list[tuple[pd.DataFrame, int, int]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The frames' rows one after the other, and one segment per run of equal (point, unit)
    in each frame. Every frame gate_samples builds is ordered by (point, unit) (its codes are
    the ranks of the sorted ``point\x1funit`` labels), so runs are whole units and only
    segments - one per unit and kind, not one per row - need sorting in the parent."""
    segs = []
    off = 0
    for frame, kind, cond in tagged:
        n = len(frame)
        if n == 0:
            continue
        pt = frame["point"].to_numpy(object)
        un = frame["unit"].to_numpy(object)
        start = np.flatnonzero(np.r_[True, (pt[1:] != pt[:-1]) | (un[1:] != un[:-1])])
        stop = np.r_[start[1:], n]
        segs.append(pd.DataFrame({"kind": kind, "key": _key(pt[start], un[start]), "point": pt[start],
                                  "cond": cond, "start": start + off, "stop": stop + off}))
        off += n
    if not segs:
        return tagged[0][0].iloc[:0], pd.DataFrame({c: np.zeros(0, np.int64) if c in ("kind", "cond", "start", "stop")
                                                    else np.zeros(0, object) for c in _SEG_COLUMNS})
    rows = pd.concat([f for f, _, _ in tagged if len(f)], ignore_index=True)
    return rows, pd.concat(segs, ignore_index=True)


def reduce_source(src, opts: _Options) -> _Partial:
    """Read one source and reduce it (runs in a worker process)."""
    t, read_notes, attach_notes = read_attached(src, opts.point)
    out = _Partial(read_notes=read_notes, attach_notes=attach_notes)
    if t is None:
        return out
    out.read = True
    out.meta_notes = list(t.meta.get("notes", []))
    out.n_dispatches = len(t.dispatches)
    out.agents = t.agents if t.agents is not None and len(t.agents) else None
    if len(t.dispatches) == 0:
        return out
    d = t.dispatches.reset_index(drop=True)
    del t  # the full table is this worker's peak; drop the Trace's other references to it
    if opts.stats:
        slim = drop_warmup(d, opts.warmup)
        out.slim = slim[[c for c in _SLIM if c in slim.columns]]
    if "end_ns" not in d.columns and {"start_ns", "dur_ns"} <= set(d.columns):
        d = d.assign(end_ns=d["start_ns"].to_numpy(np.int64) + d["dur_ns"].to_numpy(np.int64))
    p = S._prepare(d, opts.warmup)
    out.kernels_seen = p.kernels
    wanted = np.ones(len(p.kernels), dtype=bool)
    if opts.kernels:
        hit = select_kernels(pd.DataFrame({"kernel": pd.Categorical(p.kernels)}), list(opts.kernels), opts.path)
        wanted = np.isin(p.kernels, hit["kernel"].astype(object).to_numpy())
    out.matched = bool(wanted.any())
    dur = wanted[p.kernel]
    out.dur_any = bool(dur.any())
    frames = [_tagged(S._dur_frame(p, S._compact_order(p, dur) if opts.compact else dur), DUR)]
    if opts.compact:
        frames.append(_tagged(S._count_frame(p, dur), COUNT))
    steps, source = S.unit_steps(d, p)
    if len(p.rows):
        frames.append(_tagged(S._category_frame(p, steps), CATEGORY))
    ov = S._overlap_frames(d, p)
    for f, kind in zip(ov, (OVERLAP, INTERFERENCE)):
        frames.append(_tagged(f, kind))
    if "category" in d.columns and "end_ns" in d.columns:
        zero = _overlap_only_gemm(d, p)
        if zero is not None:
            frames.append(_tagged(zero, OVERLAP, IF_COLLECTIVES))
        cm = collective_mask(d)
        if cm.any():
            out.coll_points = set(S._points(d.loc[cm]))
    if "end_ns" in d.columns:
        tl_frames, out.comm_ns = _timeline(d, p, steps)
        frames += [_tagged(f, kind, IF_COMM) for f, kind in zip(tl_frames, (EXPOSED, COMPUTATION))]
    out.rows, out.seg = _segments(frames)
    out.units = np.unique(_key(p.point_of, p.unit_of))
    out.steps = {"point": [str(x) for x in p.point_of], "unit": [str(x) for x in p.unit_of],
                 "steps": [float(x) for x in steps], "source": [str(x) for x in source]}
    if "coll_name" in d.columns and d["coll_name"].notna().any():
        out.collectives = d[collective_mask(d)]
    return out


def gate_inputs(paths, *, jobs: int | None = 1, point: str | None = None,
                kernels: Sequence[str] | None = None, warmup: int = 0, compact: bool = True,
                path: str | os.PathLike | None = None, stats: bool = True) -> GateInputs:
    """Samples (and kernel statistics) of every trace under ``paths``, reduced per source.

    Equals ``gate_samples(load(paths, point=point).dispatches, kernels=, warmup=, compact=,
    path=)`` and ``kernel_stats(dispatches, by=stats_by, warmup=warmup)`` (``stats_by``:
    ``point, rank, kernel``, with a leading ``source`` when the inputs mix profilers, as
    ``gemmperf analyze`` groups). Errors are those ``load`` / ``gate_samples`` raise.
    """
    t0 = time.perf_counter()
    found = discover_all(paths)
    roots, sources, unique, notes = found.roots, found.sources, found.unique, found.notes
    if not all(kinds.reducible(s.kind) for s in unique):  # a source may hold part of a process
        return _full_path(paths, jobs=jobs, point=point, kernels=kernels, warmup=warmup, compact=compact,
                          path=path, stats=stats)
    opts = _Options(point=point, kernels=tuple(str(k) for k in kernels) if kernels else None,
                    warmup=int(warmup), compact=compact, path=None if path is None else os.fspath(path),
                    stats=stats)
    n_jobs = pool_jobs(jobs, [f for s in unique for f in s.files])
    t1 = time.perf_counter()
    parts = map_ordered(functools.partial(reduce_source, opts=opts), unique, n_jobs)
    t2 = time.perf_counter()
    for part in parts:
        # the Trace's meta notes are what merge_notes reads; a stand-in carries them
        merge_notes(notes, _MetaNotes(part.meta_notes) if part.read else None,
                    part.read_notes, part.attach_notes)
    described = [s.describe() for s in sources]
    n = sum(p.n_dispatches for p in parts)
    if n == 0:
        label = ", ".join(str(r) for r in roots)
        raise GemmperfInputError(roots[0], f"no kernel dispatches found under {label}"
                                 + (f" ({'; '.join(notes)})" if notes else ""))
    live = [p for p in parts if p.rows is not None]
    units = np.concatenate([p.units for p in live])
    if len(np.unique(units)) != len(units):  # a process in two sources: not reducible per source
        return _full_path(paths, jobs=jobs, point=point, kernels=kernels, warmup=warmup, compact=compact,
                          path=path, stats=stats)
    _selection_errors(live, kernels, warmup, path)
    samples = _merge_samples(live, warmup)
    stat_table, by = _stats(live, warmup) if stats else (None, ())
    timings = {"discover_s": t1 - t0, "read_reduce_s": t2 - t1, "merge_s": time.perf_counter() - t2,
               "workers": n_jobs}

    agents = [p.agents for p in parts if p.agents is not None]
    return GateInputs(samples=samples, kernel_stats=stat_table, stats_by=by, notes=notes,
                      skipped=found.skipped, sources=described, n_dispatches=n, reduced=True, timings=timings,
                      agents=concat_with_extras(agents, AGENT_SCHEMA) if agents else None)


class _MetaNotes:
    """Enough of a Trace for ``merge_notes``: its ``meta["notes"]``."""

    def __init__(self, notes: list[str]) -> None:
        self.meta = {"notes": notes}


def _selection_errors(live: list[_Partial], kernels, warmup: int, path) -> None:
    """gate_samples' two selection errors, on all sources together."""
    if kernels and not any(p.matched for p in live):
        seen = np.unique(np.concatenate([p.kernels_seen for p in live]))
        raise GemmperfInputError(path, f"no dispatch matches the kernel regexes "
                                       f"({', '.join(map(str, kernels))}); kernels seen: "
                                       f"{', '.join(map(str, seen[:10]))}")
    if not any(p.dur_any for p in live):
        raise GemmperfInputError(path, f"no dispatch of the gated kernels left after a warm-up of {warmup} "
                                       "per kernel and process; profile more steps or lower the warm-up")


def _merge_samples(live: list[_Partial], warmup: int) -> pd.DataFrame:
    """The sources' rows in gate_samples' order: segments sorted by (kind, key), stable."""
    coll_points = set().union(*(p.coll_points for p in live))
    comm: dict[str, int] = {}
    for p in live:
        for k, v in p.comm_ns.items():
            comm[k] = comm.get(k, 0) + v
    comm_points = {k for k, v in comm.items() if v > 0}
    offsets = np.cumsum([0] + [len(p.rows) for p in live])
    seg = pd.concat([p.seg.assign(start=p.seg["start"] + off, stop=p.seg["stop"] + off)
                     for p, off in zip(live, offsets)], ignore_index=True)
    cond = seg["cond"].to_numpy(np.int64)
    pt = seg["point"].to_numpy(object)
    keep = ((cond == ALWAYS) | ((cond == IF_COLLECTIVES) & np.isin(pt, list(coll_points)))
            | ((cond == IF_COMM) & np.isin(pt, list(comm_points))))
    seg = seg[keep]
    _, kcode = np.unique(seg["key"].to_numpy(object), return_inverse=True)
    seg = seg.iloc[np.lexsort((kcode.reshape(-1), seg["kind"].to_numpy(np.int64)))]
    lengths = (seg["stop"] - seg["start"]).to_numpy(np.int64)
    # one gather: the row positions of every kept segment, in segment order
    take = np.repeat(seg["start"].to_numpy(np.int64) - np.r_[0, np.cumsum(lengths)[:-1]], lengths) \
        + np.arange(int(lengths.sum()))
    rows = pd.concat([p.rows for p in live], ignore_index=True).iloc[take]
    notes: list[str] = []
    frames = [rows.reset_index(drop=True)]
    coll = [p.collectives for p in live if p.collectives is not None]
    if coll:
        frames += S._collective_frames(concat_with_extras(coll, DISPATCH_SCHEMA).reset_index(drop=True),
                                       warmup, notes)
    out = S._finish(frames)
    steps = {k: [x for p in live for x in p.steps[k]] for k in ("point", "unit", "steps", "source")}
    order = np.argsort(_key(np.asarray(steps["point"], dtype=object), np.asarray(steps["unit"], dtype=object)),
                       kind="stable")
    steps = {k: [v[i] for i in order] for k, v in steps.items()}
    out.attrs["notes"] = notes + S._steps_notes(np.asarray(steps["source"], dtype=object))
    out.attrs["steps"] = steps
    return out


def _stats_by(slim: pd.DataFrame) -> tuple[str, ...]:
    keys = ("point", "rank", "kernel")
    return ("source",) + keys if slim["source"].nunique(dropna=True) > 1 else keys


def _stats(live: list[_Partial], warmup: int) -> tuple[pd.DataFrame, tuple[str, ...]]:
    slim = concat_tables([p.slim for p in live], {c: DISPATCH_SCHEMA[c] for c in _SLIM if c in DISPATCH_SCHEMA})
    by = _stats_by(slim)
    return kernel_stats(slim, by=by, warmup=0), by


def _full_path(paths, *, jobs, point, kernels, warmup, compact, path, stats) -> GateInputs:
    """The serial reduction on the full tables (read with ``jobs`` workers)."""
    trace = load(paths, point=point, jobs=jobs)
    d = trace.dispatches
    samples = S.gate_samples(d, kernels=kernels, warmup=warmup, compact=compact, path=path)
    by = _stats_by(d) if stats else ()
    table = kernel_stats(d, by=by, warmup=warmup) if stats else None
    return GateInputs(samples=samples, kernel_stats=table, stats_by=by, notes=trace.meta["notes"],
                      skipped=trace.meta["skipped"], sources=trace.meta["sources"], n_dispatches=len(d), reduced=False,
                      agents=trace.agents if len(trace.agents) else None)
