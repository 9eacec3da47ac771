"""PyTorch profiler (Kineto) traces -> canonical tables.

Kineto writes one JSON object per process: metadata keys (``schemaVersion``,
``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``, runtime versions) and
``traceEvents`` in Chrome trace format. ``ts``/``dur`` are decimal microseconds with up to 3
fractional digits (often epoch-based, ~1.7e15 µs). They are kept as undecoded number text and
converted to integer ns exactly as written (:mod:`pytest_gemmperf.traces.jsonnum`): float64 only
holds multiples of 256 ns at epoch magnitude. ``start_ns = ts * 1000`` and
``end_ns = (ts + dur) * 1000`` exactly; durations are integer differences. Digits below 1 ns
(never written by Kineto; left by tools that rewrote a trace in float) are rounded once, half to
even, from the decimal text and counted in ``meta["subns_rounded"]``. A ``ts``/``dur`` that is
not a JSON number, is negative (``dur``) or leaves int64 ns is an error naming the event and
field, as is an id (pid, tid, device, stream, correlation, External id, grid and
block, collective sizes) that is not a JSON integer in int64. ``pid``/``tid`` strings are Chrome
trace lane labels and read as "no id".

GPU events (``cat`` kernel / gpu_memcpy / gpu_memset) are the dispatches. GPU events carry the
*device* in ``pid`` and the stream in ``tid``; the host process is the ``pid`` of the CPU-side
events. Each GPU event is tied to the CPU op that launched it: its own ``External id`` if
present, else the runtime call (``cuda_runtime``/``cuda_driver``) with the same ``correlation``
and that call's ``External id`` or, failing that, the innermost ``cpu_op`` enclosing the call on
the same thread.

Grid semantics (``grid_x`` is work-items, ``wg_x`` is work-items per workgroup, DESIGN.md §3):

* CUDA (CUPTI): ``args.grid`` is in blocks, ``args.block`` is threads per block, so
  ``grid = grid * block``, ``wg = block``.
* ROCm with rocprofiler-sdk (``rocprofiler-sdk_version`` key): the two fields are swapped
  relative to their names: ``args.grid`` holds the workgroup size and ``args.block`` the grid in
  work-items (real MI350X trace: a ``..._WG32_8_1`` Tensile kernel shows ``grid [256,1,1]``,
  ``block [65536,1,1]``), so ``grid = block``, ``wg = grid``.
* ROCm with roctracer: the values are the launch-API arguments. ``hipExtModuleLaunchKernel`` /
  ``hipHccModuleLaunchKernel`` take the global size in work-items; the other launch calls take
  a block count. Without a linked runtime call the grid is left null.


``Trace.meta["grid_semantics"]`` names the rule applied.

The work is split by job: :mod:`~pytest_gemmperf.traces.torch_decode` (bytes -> typed events),
:mod:`~pytest_gemmperf.traces.torch_frames` (events -> exact column frames),
:mod:`~pytest_gemmperf.traces.torch_link` (GPU event -> launching CPU op) and
:mod:`~pytest_gemmperf.traces.torch_meta` (process, host, rank, flavour, GPUs); this module
assembles the dispatches table (grid semantics, collective metadata, column order).
"""

from __future__ import annotations

import os
from collections import Counter
from itertools import chain
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.schema import (INT, STR, NoGpuEvents, Trace, as_category, constant_column,
                                           finalize_dispatch_columns, finalize_dispatches,
                                           missing_array, repeated_category, shorten_names)
from pytest_gemmperf.traces.torch_decode import (_VERSION_KEYS, _Event, _pick, bucket_events,
                                                 decode_stream)
from pytest_gemmperf.traces.torch_decode import checked as is_checked
from pytest_gemmperf.traces.torch_frames import (COLL_COLUMNS, PARAM_COMMS_OP, STEP_RE, _coll_ints,
                                                 _cpu_ops_frame, _idcol, _runtime_frame,
                                                 _Src, _steps_frame, _times, checked_cpu_pids,
                                                 checked_gpu_columns, checked_ids,
                                                 checked_runtime_columns, gpu_frame_and_overflow,
                                                 grid_overflow, with_coll_columns,
                                                 runtime_by_correlation, step_ranges)
from pytest_gemmperf.traces.torch_link import (innermost_enclosing, link_ops, lookup,  # noqa: F401
                                               take, enclosing_ops, group_codes, self_times)
from pytest_gemmperf.traces.torch_meta import (agents_table, base_time, flavor_of, host_name,
                                               process_pid, rank_of)
from pytest_gemmperf.traces.coded import NotSlim
from pytest_gemmperf.traces.torch_slim import (GpuRuns, PidCounts, RuntimeRuns, can_slim,
                                               most_frequent_pid, wants_collectives)
from pytest_gemmperf.traces.categories import categorize

#: imported from here by discovery, the torch backend and tests
__all__ = ["COLL_COLUMNS", "innermost_enclosing", "read_torch_cpu_trace", "read_torch_trace"]

# Kineto's ``cat`` values; the capitalised ones are from PyTorch 1.x-era traces
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
CPU_OP_CATS = frozenset({"cpu_op", "Operator"})
ANNOTATION_CATS = frozenset({"user_annotation"})
#: categories a CPU-only run writes (PyTorch's own events; "" for uncategorised instants). Any
#: other category is device work or a device runtime (``cuda_profiler_range``,
#: ``gpu_user_annotation``, ``cuda_runtime``, ``mtia_*``, ``xpu_*``, ``privateuse1_*``, ...):
#: a trace holding those but no kernels is a GPU run whose kernels were not recorded
HOST_CATS = CPU_OP_CATS | ANNOTATION_CATS | frozenset(
    {"python_function", "cpu_instant_event", "Trace", "overhead", "fwdbwd", "ac2g", ""})
#: phases that describe the trace rather than activity: metadata and flow arrows
_NOT_ACTIVITY = frozenset({"M", "s", "t", "f"})
#: launch calls whose grid argument is already the global size in work-items
WORK_ITEM_LAUNCHES = frozenset({"hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"})

#: extra dispatch columns (after the canonical ones): the launching op, then COLL_COLUMNS
OP_COLUMNS = ("op_name", "op_input_dims", "op_input_types")
CPU_OP_COLUMNS = ("name", "pid", "tid", "ts_ns", "dur_ns", "input_dims", "input_types",
                  "external_id", "correlation")


class _Reading:
    """What a reader keeps of each run of events (:func:`decode_stream`): column frames of the
    events it uses, counts and the first runtime names. Nothing proportional to the file's text
    or to events it does not use stays in memory. ``slim``: every value is checked as in a full
    read, but of the GPU events and runtime calls only compact columns are kept and of CPU
    operators and annotations only their pids' counts (:mod:`~pytest_gemmperf.traces.torch_slim`)."""

    def __init__(self, path: str, gpu: bool, slim: bool = False, collectives: bool = False) -> None:
        self.path = path
        self.gpu = gpu          # the GPU reader (else the CPU-only one)
        self.slim = slim
        #: slim, and the caller reads the collective columns: they are all null only while no
        #: event carries collective metadata (else NotSlim, at the first run holding one)
        self.collectives = collectives
        self.gpu_runs = GpuRuns()       # slim: instead of the GPU and runtime frames
        self.rt_runs = RuntimeRuns()
        self.pids = {"cpu": PidCounts(), "ann": PidCounts()}  # slim: instead of their frames
        self.strings: dict[str, str] = {}
        self.rounded = 0
        self.n_gpu = 0
        self.n_cpu = 0
        self.activity: Counter = Counter()  # device categories (see _refuse_device_activity)
        #: frames of each kind of event (the annotations' pids: Series)
        self.parts: dict[str, list[pd.DataFrame]] = {"gpu": [], "rt": [], "cpu": [], "ann_pid": [],
                                                     "steps": []}
        #: per frame of ``parts`` (GPU events, runtime calls, operators) the category rank of
        #: each row (:func:`_ranked`): kept beside the frames, as a column set on one copies it
        self.ranks: dict[str, list[np.ndarray]] = {"gpu": [], "rt": [], "cpu": []}
        self.runtime_names: dict[str, list[str]] = {}  # first names per category (flavor_of)
        self.grid_errors: dict[int, GemmperfInputError] = {}  # by event index
        self.grid_error_rank: dict[int, int] = {}  # the category rank of each of those events
        self.held = False  # an error was raised in a run: the rest is only counted

    def take(self, first: int, events: list[_Event]) -> None:
        # the categories of activity tell why a trace without GPU events is refused: once the
        # GPU reader has seen one, its counts are never read
        by_cat, activity = bucket_events(events, HOST_CATS, _NOT_ACTIVITY,
                                         count=not self.gpu or not self.n_gpu)
        self.activity.update(activity)
        gpu, gpu_rank = _ranked(by_cat, GPU_CATS)
        cpu, cpu_rank = _ranked(by_cat, CPU_OP_CATS)
        self.n_gpu += len(gpu)
        self.n_cpu += len(cpu)
        if self.held:
            return
        src = _Src(self.path, events, first, self.strings)
        try:
            self._frames(src, by_cat, gpu, gpu_rank, cpu, cpu_rank)
        except GemmperfInputError:
            self.held = True
            raise
        finally:
            self.rounded += src.rounded

    def _frames(self, src: _Src, by_cat: dict[str, list[_Event]], gpu: list[_Event],
                gpu_rank: np.ndarray, cpu: list[_Event], cpu_rank: np.ndarray) -> None:
        # the order of a whole-file read: operators, runtime calls, annotations, GPU events
        slim = self.slim
        if slim and is_checked(src.events):
            self._checked(src, by_cat, gpu, gpu_rank, cpu, cpu_rank)
            return
        if cpu:
            ops = _cpu_ops_frame(cpu, src, shapes=not slim)
            self._refuse_collectives(ops)
            if slim:
                self.pids["cpu"].add(ops["pid"], cpu_rank)
            else:
                self._keep("cpu", ops, cpu_rank)
        if not self.gpu:
            return
        runtime, rt_rank = _ranked(by_cat, RUNTIME_CATS)
        if runtime:
            rt = _runtime_frame(runtime, src)
            if slim:
                self.rt_runs.add(rt, rt_rank)
            else:
                self._keep("rt", rt, rt_rank)
            self._runtime_names(by_cat)
        annotations = _pick(by_cat, ANNOTATION_CATS)
        if annotations:
            ann_pid = _idcol(src, annotations, [e.pid for e in annotations], "pid", labels_ok=True)
            if slim:
                self.pids["ann"].add(ann_pid)
            else:
                self.parts["ann_pid"].append(ann_pid)  # a Series: only its values are read
        if gpu:
            df, over = gpu_frame_and_overflow(gpu, src)
            self._refuse_collectives(df)
            over = np.flatnonzero(over)
            if len(over):
                index = {id(e): i for i, e in enumerate(src.events)}
                ev = np.array([src.first + index[id(gpu[i])] for i in range(len(gpu))])
                df["_ev"] = ev
                for i in over.tolist():
                    self.grid_errors[int(ev[i])] = src.error(
                        gpu[i], "args.grid * args.block is outside int64")
                    self.grid_error_rank[int(ev[i])] = int(gpu_rank[i])
            if slim:
                self.gpu_runs.add(df, gpu_rank)
            else:
                self._keep("gpu", df, gpu_rank)
        if annotations:
            steps = step_ranges(annotations, src)  # checked (and counted) in a slim read too
            if not slim:
                self.parts["steps"].append(steps)

    def _checked(self, src: _Src, by_cat: dict[str, list[_Event]], gpu: list[_Event],
                 gpu_rank: np.ndarray, cpu: list[_Event], cpu_rank: np.ndarray) -> None:
        """:meth:`_frames` of a slim read for a run decoded with the checked types: the same
        steps in the same order, but of the checks only the times' can fail (its ids and
        launch dimensions passed theirs in the decoder), and no frame is made."""
        if cpu:
            (pid, missing), comms = checked_cpu_pids(cpu, src)
            self._refuse_collectives_if(comms)
            self.pids["cpu"].add_values(pid, missing, cpu_rank)
        if not self.gpu:
            return
        runtime, rt_rank = _ranked(by_cat, RUNTIME_CATS)
        if runtime:
            self.rt_runs.add_columns(checked_runtime_columns(runtime, src), rt_rank)
            self._runtime_names(by_cat)
        annotations = _pick(by_cat, ANNOTATION_CATS)
        if annotations:
            self.pids["ann"].add_values(*checked_ids([e.pid for e in annotations], labels_ok=True))
        if gpu:
            cols = checked_gpu_columns(gpu, src)
            self._refuse_collectives_if(cols["collectives"])
            self.gpu_runs.add_columns(cols, gpu_rank)
        if annotations:  # the steps' times checked and counted
            _times(src, [e for e in annotations if STEP_RE.match(e.name)])

    def _keep(self, kind: str, frame: pd.DataFrame, rank: np.ndarray) -> None:
        self.parts[kind].append(frame)
        self.ranks[kind].append(rank)

    def _runtime_names(self, by_cat: dict[str, list[_Event]]) -> None:
        """The first runtime calls' names per category (``flavor_of``)."""
        for cat, events in by_cat.items():
            if cat in RUNTIME_CATS:
                names = self.runtime_names.setdefault(cat, [])
                names += [e.name for e in events[:_FLAVOR_EVENTS - len(names)]]

    def _refuse_collectives_if(self, carried: bool) -> None:
        """:meth:`_refuse_collectives` of a run whose events ``carried`` collective metadata or not."""
        if self.slim and self.collectives and carried:
            raise NotSlim(f"{self.path}: collective metadata (a slim read does not link it)")

    def _refuse_collectives(self, frame: pd.DataFrame) -> None:
        """NotSlim where a slim read must give the collective columns and ``frame`` (a run's
        operators or GPU events) carries collective metadata: the frames hold the columns only
        then (``torch_frames.with_coll_columns``), and the full table's would not all be null."""
        self._refuse_collectives_if(any(c in frame.columns for c in COLL_COLUMNS))

    def frame(self, kind: str, empty: Callable[[], pd.DataFrame] | None = None, *,
              all_columns: bool = True) -> pd.DataFrame:
        """The runs' frames of one kind as one frame, in a whole-file read's row order (none:
        ``empty()``'s frame). ``all_columns`` False: a GPU or operator frame holds the
        collective columns only where a run's events carried collective metadata (the caller
        adds them, or reads them only then)."""
        parts = self.parts[kind]
        coll = kind in ("gpu", "cpu")  # frames that leave all-None collective columns out
        if not parts:
            out = empty() if empty is not None else pd.DataFrame()
            return with_coll_columns(out) if coll and all_columns else out
        if coll and len(parts) > 1 and len({tuple(p.columns) for p in parts}) > 1:
            parts = [with_coll_columns(p) for p in parts]  # concat would fill NaN, not None
        df = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        ranks = self.ranks.pop(kind, [])
        self.parts[kind] = []
        if coll and all_columns:
            df = with_coll_columns(df)
        rank = ranks[0] if len(ranks) == 1 else np.concatenate(ranks) if ranks else None
        if rank is not None and len(rank) and rank.min() != rank.max():
            # a whole-file read takes the events category by category (sorted), each in
            # file order
            df = df.iloc[np.argsort(rank, kind="stable")].reset_index(drop=True)
        # else a run's frame (torch_frames._frame) or the runs' concat has the default index
        return df

    def src(self) -> _Src:
        src = _Src(self.path, [])
        src.rounded = self.rounded
        return src


#: runtime calls whose names tell the flavour when the metadata does not (flavor_of)
_FLAVOR_EVENTS = 200


def _ranked(by_cat: dict[str, list[_Event]], cats: frozenset[str]) -> tuple[list[_Event], np.ndarray]:
    """:func:`_pick` and, per event, the rank of its category among ``cats`` (sorted)."""
    found = [(r, by_cat[c]) for r, c in enumerate(sorted(cats)) if c in by_cat]
    if not found:
        return [], np.zeros(0, dtype=np.int64)
    events = found[0][1] if len(found) == 1 else list(chain.from_iterable(part for _, part in found))
    return events, np.concatenate([np.full(len(part), r, dtype=np.int64) for r, part in found])


def _read(path: str, gpu: bool, slim: bool = False, collectives: bool = False) -> tuple[_Reading, Any, int]:
    reading = _Reading(path, gpu, slim, collectives)
    doc, n_events = decode_stream(path, reading.take, slim=slim)
    return reading, doc, n_events


def read_torch_trace(path: str | os.PathLike, columns: Sequence[str] | None = None,
                     coded: bool = False) -> Trace:
    """Read one Kineto trace (``.json`` or gzip-compressed, detected by content).

    ``columns``: the dispatch columns the caller reads (None: every column). Where they are
    among :data:`~pytest_gemmperf.traces.torch_slim.SLIM_COLUMNS` the trace is read slim: the
    same checks, errors and notes, the columns equal to the full table's, but kernels are not
    linked to their CPU operators and ``meta`` holds neither ``cpu_ops`` nor ``steps``, so
    memory stays near the dispatches' few columns whatever the trace's CPU side holds.
    ``coded``: a slim read's dispatches as :class:`~pytest_gemmperf.traces.coded.CodedDispatches`
    (their ``frame()`` is the table), for a reduction that needs no table. Collective columns
    among ``columns`` are read slim (all null) only where no event carries collective metadata;
    where one does, :class:`~pytest_gemmperf.traces.coded.NotSlim` is raised (at the first run
    of events holding it): the caller reads the trace whole."""
    path = os.fspath(path)
    slim = can_slim(columns)
    reading, doc, n_events = _read(path, gpu=True, slim=slim, collectives=slim and wants_collectives(columns))
    if not reading.n_gpu:
        _refuse_device_activity(path, reading.activity)
        raise NoGpuEvents(path, f"no GPU kernel/memcpy/memset events among {n_events} "
                                       "trace events (CPU-only trace, or GPU activity not recorded)")
    if slim:
        return _slim_trace(reading, doc, path, n_events, columns, coded)
    empty_src = _Src(path, [])
    # each kind's frame of no events made only where no run held one (most traces hold each)
    # the operators' collective columns are read only where one is a record_param_comms, and
    # then its run's frame holds them (_fill_collectives)
    cpu_ops = reading.frame("cpu", lambda: _cpu_ops_frame([], empty_src), all_columns=False)
    rt = runtime_by_correlation(reading.frame("rt", lambda: _runtime_frame([], empty_src)))
    ann_pid = reading.frame("ann_pid", lambda: pd.Series(pd.array([], dtype=INT)))

    pid = process_pid(rt["pid"], cpu_ops["pid"], ann_pid)
    host, rank, flavor, agents = _process_facts(reading, doc, path, pid)
    gpu = reading.frame("gpu", all_columns=False)
    # the table's columns, set and dropped as on a frame but made into one once: on a frame
    # each column set costs a copy of its blocks, most of the read of a trace of tens of kernels
    df: dict[str, Any] = {c: gpu[c] for c in gpu.columns}
    n = len(gpu)
    absent = [c for c in COLL_COLUMNS if c not in df]  # no event carried collective metadata
    for col in absent:
        df[col] = pd.Series(np.full(n, None, dtype=object), index=gpu.index, dtype=object)
    df.update(pid=constant_column(pid, INT, n), host=constant_column(host, STR, n),
              rank=constant_column(rank, INT, n), source=repeated_category("torch", n),
              file=repeated_category(path, n))

    rt_row = lookup(gpu["correlation_id"], rt["correlation"])
    rt_ext = take(rt["external_id"], rt_row)
    df["thread_id"] = take(rt["tid"], rt_row)
    grid_rule = _apply_grid_semantics(df, gpu, flavor, take(rt["name"], rt_row), reading.grid_errors)

    op_row = link_ops(gpu, cpu_ops, rt, rt_row, rt_ext)
    for col, op_col in zip(OP_COLUMNS, ("name", "input_dims", "input_types")):
        df[col] = as_category(take(cpu_ops[op_col], op_row))  # as _order_extra_columns makes them

    df["kernel"] = kernel = gpu["kernel"].astype(STR)
    df["category"] = categorize(kernel)
    # memcpy/memset names ("Memcpy HtoD (Host -> Device)") are not C++ signatures: keep them whole
    short = shorten_names(kernel).astype(object)
    df["kernel_short"] = short.where(df.pop("_is_kernel").to_numpy(), kernel.astype(object))
    _fill_collectives(df, cpu_ops, rt, rt_row, op_row, absent)

    if len(agents):
        arch = dict(zip(agents["gpu_index"].dropna().astype(int), agents["gpu_arch"]))
        df["gpu_arch"] = gpu["agent"].map(arch).astype(object)
    # the table's columns in _order_extra_columns' order, without the working ones (_*)
    extras = (*OP_COLUMNS, *COLL_COLUMNS)
    df = {**{c: v for c, v in df.items() if not c.startswith("_") and c not in extras},
          **{c: df[c] for c in extras}}
    # Kineto has no queue column; a stream runs in order like a queue, and dispatches on
    # different streams overlap legitimately, so the in-order check is per stream.
    out = finalize_dispatch_columns(df, gpu.index, path, in_order="stream")
    out = _order_extra_columns(out, ops_categorical=True)

    meta = _trace_meta(reading, doc, path, n_events, flavor, rank, host, pid, {
        "grid_semantics": grid_rule,
        "agent_numbering": _AGENT_NUMBERING,
        "cpu_ops": cpu_ops[list(CPU_OP_COLUMNS)],
        "steps": _steps_frame(reading.frame("steps") if reading.parts["steps"] else None, cpu_ops)})
    if columns is not None:
        out = out[[c for c in columns if c in out.columns]]
    return Trace(dispatches=out, agents=agents, files=[path], meta=meta)


_AGENT_NUMBERING = "torch device index (among the process's visible devices)"


def _process_facts(reading: _Reading, doc: Any, path: str,
                   pid: int | None) -> tuple[str | None, int | None, str, pd.DataFrame]:
    """The traced process's host, rank, runtime flavour and GPUs (``pid``: its pid)."""
    host = host_name(doc, path, pid)
    rank = rank_of(doc.distributedInfo)
    runtime_names = [n for cat in sorted(reading.runtime_names)
                     for n in reading.runtime_names[cat]][:_FLAVOR_EVENTS]
    flavor = flavor_of(doc, runtime_names)
    return host, rank, flavor, agents_table(doc.deviceProperties, path, host, pid)


def _trace_meta(reading: _Reading, doc: Any, path: str, n_events: int, flavor: str,
                rank: int | None, host: str | None, pid: int | None, middle: dict) -> dict[str, Any]:
    src = reading.src()
    return {
        "format": "torch",  # its kind's name (traces/kinds.py)
        "flavor": flavor,
        "versions": {k: getattr(doc, k) for k in _VERSION_KEYS if getattr(doc, k) is not None},
        "base_time_ns": base_time(doc, path),
        "display_time_unit": doc.displayTimeUnit,
        "trace_name": doc.traceName,
        "distributed": doc.distributedInfo,
        "rank": rank,
        "host": host,
        "pid": pid,
        **middle,
        "n_events": n_events,
        "subns_rounded": src.rounded,
        "notes": src.notes(),
    }


def _slim_trace(reading: _Reading, doc: Any, path: str, n_events: int,
                columns: Sequence[str], coded: bool) -> Trace:
    """:func:`read_torch_trace`'s Trace from a slim reading: the checks and their order are the
    full read's (the host process, the GPUs, a grid beyond int64, the base time)."""
    pid = _slim_process_pid(reading)
    host, rank, flavor, agents = _process_facts(reading, doc, path, pid)
    if flavor != "rocprofiler-sdk" and reading.grid_errors:
        # the first in the dispatches' order, as _apply_grid_semantics raises it
        ranked = reading.grid_error_rank
        raise reading.grid_errors[min(reading.grid_errors, key=lambda ev: (ranked[ev], ev))]
    out = reading.gpu_runs.coded(path, {"pid": pid, "host": host, "rank": rank}, columns)
    meta = _trace_meta(reading, doc, path, n_events, flavor, rank, host, pid,
                       {"agent_numbering": _AGENT_NUMBERING})
    return Trace(dispatches=out if coded else out.frame(), agents=agents, files=[path], meta=meta)


def _slim_process_pid(reading: _Reading) -> int | None:
    """``process_pid`` of the columns a full read would hold (the runtime calls one per
    correlation id, the operators, the annotations), from a slim reading."""
    return most_frequent_pid([reading.rt_runs.host_pids(), reading.pids["cpu"], reading.pids["ann"]])


def _refuse_device_activity(path: str, found: Counter) -> None:
    """A trace without kernels but with device work in other categories (``found``: events per
    category outside :data:`HOST_CATS`, flows and metadata left out) is a GPU run whose
    kernels were not recorded (or a device this reader does not know): reading its CPU
    operators instead would gate the wrong thing and pass. One line naming what was found."""
    if not found:
        return
    shown = ", ".join(f"{n} {cat!r}" for cat, n in found.most_common(5))
    more = f" and {len(found) - 5} more categories" if len(found) > 5 else ""
    if found.keys() & GPU_CATS:  # a GPU trace handed to the CPU-only reader
        raise GemmperfInputError(path, f"device activity in a trace read as CPU-only: {shown}{more} "
                                       "(read it as a GPU trace)")
    raise GemmperfInputError(
        path, f"device activity but no kernel, gpu_memcpy or gpu_memset events: {shown}{more} "
              "(profiler ranges, device annotations or runtime calls; was kernel tracing off, or "
              "does this device record its work in another category?) - not read as a CPU trace")


def read_torch_cpu_trace(path: str | os.PathLike) -> Trace:
    """A CPU-only Kineto trace as a dispatches table: one row per ``cpu_op`` event.

    On a machine without a GPU the profiled "kernels" are the operators themselves
    (``aten::mm``, ``c10d::allreduce_``). Every operator keeps its row (a sweep's kernel
    regexes pick the ones to gate), timed by its *self* time: ``dur_ns`` is the time on its
    thread not spent inside a nested operator (``end_ns = start_ns + dur_ns``), so summing
    operators counts each nanosecond of a thread once and never exceeds its wall window; a
    leaf operator's self time is its whole duration. ``thread_id``/``stream`` carry the
    thread, and ``queue_overlap`` is cleared. A trace with device activity in other categories
    is refused (:func:`_refuse_device_activity`).
    """
    path = os.fspath(path)
    reading, doc, n_events = _read(path, gpu=False)
    if not reading.n_cpu:
        _refuse_device_activity(path, reading.activity)
        raise GemmperfInputError(path, f"no cpu_op events among {n_events} trace events")
    # every cpu_op's ts/dur is checked (and exact) in _cpu_ops_frame: no missing times remain
    ops = reading.frame("cpu")
    _refuse_device_activity(path, reading.activity)
    src = reading.src()
    pid = process_pid(ops["pid"])
    host = host_name(doc, path, pid)
    rank = rank_of(doc.distributedInfo)
    start = ops["ts_ns"].to_numpy(dtype=np.int64)
    end = start + ops["dur_ns"].to_numpy(dtype=np.int64)
    thread, = group_codes((ops["pid"], ops["tid"]))
    df = pd.DataFrame({
        "source": "torch", "file": path, "host": host, "pid": ops["pid"], "rank": rank,
        "thread_id": ops["tid"], "stream": ops["tid"], "correlation_id": ops["external_id"],
        "kernel": ops["name"].astype(STR),
        "start_ns": start, "end_ns": start + self_times(thread, start, end),
        "op_name": ops["name"], "op_input_dims": ops["input_dims"], "op_input_types": ops["input_types"],
    })
    for col in COLL_COLUMNS:
        df[col] = ops[col]
    out = finalize_dispatches(df, path)
    out["queue_overlap"] = False
    meta: dict[str, Any] = {
        "format": "torch", "flavor": "cpu", "cpu_op_dispatches": True, "op_time": "self",
        "distributed": doc.distributedInfo, "rank": rank, "host": host, "pid": pid,
        "base_time_ns": base_time(doc, path), "n_events": n_events,
        "subns_rounded": src.rounded, "notes": src.notes(),
    }
    return Trace(dispatches=_order_extra_columns(out), files=[path], meta=meta)


# --------------------------------------------------------------------------- collectives

def _fill_collectives(df: dict[str, Any], ops: pd.DataFrame, rt: pd.DataFrame, rt_row: np.ndarray,
                      op_row: np.ndarray, absent: Sequence[str] = ()) -> None:
    """Collective metadata from kernel args (already in ``df``, the dispatches' columns), else
    from the enclosing ``record_param_comms``. ``absent``: the columns no GPU event carried
    (all None in ``df``)."""
    is_coll = (df["category"].astype(object) == "collective").to_numpy()
    need = is_coll & df["coll_name"].isna().to_numpy()
    if need.any() and len(ops):
        comms = ops[ops["name"] == PARAM_COMMS_OP]
        src = np.where(np.isin(op_row, comms.index.to_numpy()), op_row, -1)
        if len(comms) and (src < 0).any():
            src = np.where(src >= 0, src, enclosing_ops(comms, rt, rt_row))
        src = np.where(need, src, -1)
        if (src >= 0).any():  # else no operator holds what a kernel lacks: nothing to fill
            for col in COLL_COLUMNS:
                filled = take(ops[col].astype(object), src)
                df[col] = df[col].where(df[col].notna(), filled)
            absent = ()
    for col, dtype in COLL_COLUMNS.items():
        if col in absent:  # still all None: what the casts below make of no values
            df[col] = missing_array(dtype, len(is_coll))
        else:
            df[col] = _coll_ints(list(df[col])) if dtype == INT else as_category(df[col])


def _apply_grid_semantics(df: dict[str, Any], gpu: pd.DataFrame, flavor: str, launch_api: pd.Series,
                          grid_errors: dict[int, GemmperfInputError]) -> str:
    """``grid_*`` and ``wg_*`` of the dispatches' columns ``df`` (read from ``gpu``, the GPU
    events' frame) in place of the launch arguments, by the flavour's rule; its description."""
    if flavor != "rocprofiler-sdk" and grid_errors:
        # blocks * block beyond int64 would wrap silently in the Int64 product below
        over = np.flatnonzero(grid_overflow(gpu))
        raise grid_errors[int(gpu["_ev"].iloc[int(over[0])])]
    df.pop("_ev", None)
    g = [df.pop(f"_grid_{a}") for a in "xyz"]
    b = [df.pop(f"_block_{a}") for a in "xyz"]
    if flavor == "rocprofiler-sdk":
        for i, a in enumerate("xyz"):
            df[f"grid_{a}"], df[f"wg_{a}"] = b[i], g[i]
        return "rocprofiler-sdk: args.block = grid (work-items), args.grid = workgroup size"
    work_items = launch_api.isin(WORK_ITEM_LAUNCHES).to_numpy()
    unknown = launch_api.isna().to_numpy() if flavor == "roctracer" else np.zeros(len(gpu), bool)
    for i, a in enumerate("xyz"):
        # the Int64 product in numpy (values and missing masks): an int64 product of factors
        # checked above (grid_overflow) is exact, as the nullable one is
        g_value, g_missing = g[i].to_numpy(np.int64, na_value=0), g[i].isna().to_numpy()
        value = g_value * b[i].to_numpy(np.int64, na_value=0)
        missing = g_missing | b[i].isna().to_numpy()
        if flavor == "roctracer":  # the global size itself where the launch call takes one
            value = np.where(work_items, g_value, value)
            missing = np.where(work_items, g_missing, missing)
        df[f"grid_{a}"] = pd.arrays.IntegerArray(value, missing | unknown)
        df[f"wg_{a}"] = b[i]
    if flavor == "roctracer":
        return ("roctracer: launch-API arguments; hipExtModuleLaunchKernel/hipHccModuleLaunchKernel "
                "grid = work-items, other launches grid = blocks * block")
    return f"{flavor}: args.grid = blocks, grid = blocks * block, wg = block"


def _order_extra_columns(df: pd.DataFrame, ops_categorical: bool = False) -> pd.DataFrame:
    """``df`` without its working columns (``_*``), the launching op's and the collective
    columns last, the op's as categories (``ops_categorical``: made so by the caller)."""
    extras = list(OP_COLUMNS) + list(COLL_COLUMNS)
    order = [c for c in df.columns if not c.startswith("_") and c not in extras] + extras
    if order != list(df.columns):  # else made in this order (read_torch_trace): no copy
        df = df[order]
    if not ops_categorical:
        for c in OP_COLUMNS:
            df[c] = as_category(df[c])
    return df
