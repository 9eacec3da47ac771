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
"""

from __future__ import annotations

import operator
import os
import re
from itertools import chain, compress, repeat
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.fileio import read_maybe_gzip
from pytest_gemmperf.traces.jsonnum import (ABSENT_RAW, INT64_MAX, PROBLEMS, ROUNDED, exact_ints,
                                            first_problem, show, sum_us_to_ns, us_text_to_ns)
from pytest_gemmperf.traces.torch_meta import (agents_table, base_time, flavor_of,  # noqa: F401
                                               host_name, process_pid, product_arch, rank_of)
from pytest_gemmperf.traces.torch_link import (innermost_enclosing, link_ops, lookup,  # noqa: F401
                                               take, enclosing_ops)
from pytest_gemmperf.traces.schema import (INT, STR, Trace, finalize_dispatches,
                                           flag_queue_overlap, shorten_names)

# Kineto's ``cat`` values; the capitalised ones are from PyTorch 1.x-era traces
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
CPU_OP_CATS = frozenset({"cpu_op", "Operator"})
ANNOTATION_CATS = frozenset({"user_annotation"})
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
PARAM_COMMS_OP = "record_param_comms"
#: launch calls whose grid argument is already the global size in work-items
WORK_ITEM_LAUNCHES = frozenset({"hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"})

#: extra dispatch columns (after the canonical ones): launching op and collective metadata
OP_COLUMNS = ("op_name", "op_input_dims", "op_input_types")
COLL_COLUMNS: dict[str, str] = {
    "coll_name": STR, "pg_name": STR, "pg_ranks": STR, "group_size": INT, "coll_dtype": STR,
    "in_nelems": INT, "out_nelems": INT, "in_split": STR, "out_split": STR,
}
CPU_OP_COLUMNS = ("name", "pid", "tid", "ts_ns", "dur_ns", "input_dims", "input_types",
                  "external_id", "correlation")



class _Args(msgspec.Struct):
    device: Any = None
    stream: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    grid: Any = None
    block: Any = None
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    group_size: Any = msgspec.field(default=None, name="Group size")
    coll_dtype: Any = msgspec.field(default=None, name="dtype")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    in_split: Any = msgspec.field(default=None, name="In split size")
    out_split: Any = msgspec.field(default=None, name="Out split size")
    labels: Any = None  # process_labels metadata ("CPU", "GPU 0")


_NO_ARGS = _Args()


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Any = None
    tid: Any = None
    # undecoded number text: converted to ns exactly by jsonnum.us_text_to_ns
    ts: msgspec.Raw = ABSENT_RAW
    dur: msgspec.Raw = ABSENT_RAW
    args: _Args | None = None


class _Doc(msgspec.Struct):
    traceEvents: list[_Event] | None = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    displayTimeUnit: Any = None
    traceName: Any = None
    trace_id: Any = None
    host_name: Any = None
    record_shapes: Any = None
    roctracer_version: Any = None
    rocprofiler_sdk_version: Any = msgspec.field(default=None, name="rocprofiler-sdk_version")
    hip_runtime_version: Any = None
    hip_driver_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    rocprofiler_sdk_tool: Any = msgspec.field(default=None, name="rocprofiler-sdk-tool")


_DECODER = msgspec.json.Decoder(_Doc | list[_Event])
_BOM = b"\xef\xbb\xbf"
#: collective column -> its key in the event's args (for error messages)
_COLL_JSON = dict(zip(_Args.__struct_fields__, _Args.__struct_encode_fields__))
_VERSION_KEYS = ("schemaVersion", "roctracer_version", "rocprofiler_sdk_version",
                 "hip_runtime_version", "hip_driver_version", "cuda_runtime_version",
                 "cuda_driver_version", "cupti_version")


def read_torch_trace(path: str | os.PathLike) -> Trace:
    """Read one Kineto trace (``.json`` or gzip-compressed, detected by content)."""
    path = os.fspath(path)
    doc = _decode(path, read_maybe_gzip(path))
    events = doc.traceEvents or []
    src = _Src(path, events)
    by_cat = _complete_events_by_cat(events)
    gpu = _pick(by_cat, GPU_CATS)
    if not gpu:
        raise GemmperfInputError(path, f"no GPU kernel/memcpy/memset events among {len(events)} "
                                       "trace events (CPU-only trace, or GPU activity not recorded)")
    runtime = _pick(by_cat, RUNTIME_CATS)
    cpu_events = _pick(by_cat, CPU_OP_CATS)
    annotations = _pick(by_cat, ANNOTATION_CATS)
    cpu_ops = _cpu_ops_frame(cpu_events, src)
    rt = _runtime_frame(runtime, src)

    pid = process_pid(rt["pid"], cpu_ops["pid"],
                       _idcol(src, annotations, [e.pid for e in annotations], "pid", labels_ok=True))
    host = host_name(doc, path, pid)
    rank = rank_of(doc.distributedInfo)
    flavor = flavor_of(doc, runtime)
    agents = agents_table(doc.deviceProperties, path, host, pid)
    df = _gpu_frame(gpu, src)
    df["pid"] = pid
    df["host"] = host
    df["rank"] = rank
    df["source"] = "torch"
    df["file"] = path

    rt_row = lookup(df["correlation_id"], rt["correlation"])
    rt_ext = take(rt["external_id"], rt_row)
    df["thread_id"] = take(rt["tid"], rt_row)
    grid_rule = _apply_grid_semantics(df, flavor, take(rt["name"], rt_row), src, gpu)

    op_row = link_ops(df, cpu_ops, rt, rt_row, rt_ext)
    df["op_name"] = take(cpu_ops["name"], op_row)
    df["op_input_dims"] = take(cpu_ops["input_dims"], op_row)
    df["op_input_types"] = take(cpu_ops["input_types"], op_row)

    from pytest_gemmperf.analysis.categories import categorize
    df["kernel"] = df["kernel"].astype(STR)
    df["category"] = categorize(df["kernel"])
    # memcpy/memset names ("Memcpy HtoD (Host -> Device)") are not C++ signatures: keep them whole
    short = shorten_names(df["kernel"]).astype(object)
    df["kernel_short"] = short.where(df.pop("_is_kernel").to_numpy(), df["kernel"].astype(object))
    _fill_collectives(df, cpu_ops, rt, rt_row, op_row, src, gpu)

    if len(agents):
        arch = dict(zip(agents["gpu_index"].dropna().astype(int), agents["gpu_arch"]))
        df["gpu_arch"] = df["agent"].map(arch).astype(object)
    out = finalize_dispatches(df.drop(columns=["_args"]), path)
    # Kineto has no queue column; a stream runs in order like a queue, and dispatches on
    # different streams overlap legitimately, so the in-order check is per stream.
    out["queue_overlap"] = flag_queue_overlap(out[["file", "pid", "agent", "stream", "start_ns", "end_ns"]]
                                              .rename(columns={"stream": "queue"}))
    out = _order_extra_columns(out)

    meta: dict[str, Any] = {
        "format": "kineto",
        "flavor": flavor,
        "versions": {k: getattr(doc, k) for k in _VERSION_KEYS if getattr(doc, k) is not None},
        "base_time_ns": base_time(doc, path),
        "display_time_unit": doc.displayTimeUnit,
        "trace_name": doc.traceName,
        "distributed": doc.distributedInfo,
        "rank": rank,
        "host": host,
        "pid": pid,
        "grid_semantics": grid_rule,
        "agent_numbering": "torch device index (among the process's visible devices)",
        "cpu_ops": cpu_ops[list(CPU_OP_COLUMNS)],
        "steps": _steps_frame(annotations, cpu_ops, src),
        "n_events": len(events),
        "subns_rounded": src.rounded,
        "notes": src.notes(),
    }
    return Trace(dispatches=out, agents=agents, files=[path], meta=meta)


def read_torch_cpu_trace(path: str | os.PathLike) -> Trace:
    """A CPU-only Kineto trace as a dispatches table: one row per ``cpu_op`` event.

    On a machine without a GPU the profiled "kernels" are the operators themselves
    (``aten::mm``, ``c10d::allreduce_``); nested operators are all kept (a sweep's kernel
    regexes pick the ones to gate). ``thread_id``/``stream`` carry the thread, and
    ``queue_overlap`` is cleared: nesting on a CPU thread is real, not a timestamp artefact.
    """
    path = os.fspath(path)
    doc = _decode(path, read_maybe_gzip(path))
    events = doc.traceEvents or []
    cpu_events = _pick(_complete_events_by_cat(events), CPU_OP_CATS)
    if not cpu_events:
        raise GemmperfInputError(path, f"no cpu_op events among {len(events)} trace events")
    # every cpu_op's ts/dur is checked (and exact) in _cpu_ops_frame: no missing times remain
    src = _Src(path, events)
    ops = _cpu_ops_frame(cpu_events, src)
    pid = process_pid(ops["pid"])
    host = host_name(doc, path, pid)
    rank = rank_of(doc.distributedInfo)
    start = ops["ts_ns"].to_numpy(dtype=np.int64)
    df = pd.DataFrame({
        "source": "torch", "file": path, "host": host, "pid": ops["pid"], "rank": rank,
        "thread_id": ops["tid"], "stream": ops["tid"], "correlation_id": ops["external_id"],
        "kernel": ops["name"].astype(STR),
        "start_ns": start, "end_ns": start + ops["dur_ns"].to_numpy(dtype=np.int64),
        "op_name": ops["name"], "op_input_dims": ops["input_dims"], "op_input_types": ops["input_types"],
    })
    for col in COLL_COLUMNS:
        df[col] = ops[col]
    out = finalize_dispatches(df, path)
    out["queue_overlap"] = False
    meta: dict[str, Any] = {
        "format": "kineto", "flavor": "cpu", "cpu_op_dispatches": True,
        "distributed": doc.distributedInfo, "rank": rank, "host": host, "pid": pid,
        "base_time_ns": base_time(doc, path), "n_events": len(events),
        "subns_rounded": src.rounded, "notes": src.notes(),
    }
    return Trace(dispatches=_order_extra_columns(out), files=[path], meta=meta)


# --------------------------------------------------------------------------- decoding

def _decode(path: str, raw: bytes) -> _Doc:
    if raw.startswith(_BOM):  # editors on Windows add one; JSON parsers reject it
        raw = raw[len(_BOM):]
    if not raw.strip():
        raise GemmperfInputError(path, "empty file")
    try:
        doc = _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise GemmperfInputError(path, f"not a PyTorch profiler trace: {exc}") from None
    except msgspec.DecodeError as exc:
        raise GemmperfInputError(path, f"not valid JSON: {exc}") from None
    except RecursionError:
        raise GemmperfInputError(path, "JSON nested too deeply to read (no profiler writes such "
                                       "nesting; corrupt or hostile file?)") from None
    except UnicodeDecodeError as exc:  # msgspec checks string contents lazily, as UTF-8
        raise GemmperfInputError(path, f"not valid JSON: a string is not UTF-8 ({exc.reason} "
                                       f"at byte {exc.start} of the string)") from None
    if isinstance(doc, list):  # bare Chrome-trace array
        doc = _Doc(traceEvents=doc)
    if doc.rocprofiler_sdk_tool is not None:
        raise GemmperfInputError(path, "this is a rocprofv3 JSON (rocprofiler-sdk-tool), not a "
                                       "PyTorch profiler trace")
    if doc.traceEvents is None:
        raise GemmperfInputError(path, "not a PyTorch profiler trace: no 'traceEvents'")
    return doc


def _complete_events_by_cat(events: list[_Event]) -> dict[str, list[_Event]]:
    """One pass over all events: complete ("X") events bucketed by category."""
    buckets: dict[str, list[_Event]] = {}
    for e in events:
        if e.ph == "X":
            b = buckets.get(e.cat)
            if b is None:
                buckets[e.cat] = [e]
            else:
                b.append(e)
    return buckets


def _pick(by_cat: dict[str, list[_Event]], cats: frozenset[str]) -> list[_Event]:
    found = [by_cat[c] for c in sorted(cats) if c in by_cat]
    return found[0] if len(found) == 1 else [e for part in found for e in part]


# --------------------------------------------------------------------------- frames

class _Src:
    """The file being read: its path, and all its events so a bad one can be named by index."""

    __slots__ = ("path", "events", "rounded")

    def __init__(self, path: str, events: list[_Event]) -> None:
        self.path = path
        self.events = events
        self.rounded = 0  # ts/dur values with digits below 1 ns, rounded once (jsonnum)

    def notes(self) -> list[str]:
        """What was read other than exactly as written (for reports): never silent."""
        if not self.rounded:
            return []
        return [f"{self.path}: {self.rounded} ts/dur value(s) had digits below 1 ns (float "
                "arithmetic by a tool that rewrote the trace?) and were rounded once, half to "
                "even, to integer ns"]

    def error(self, ev: _Event, message: str) -> GemmperfInputError:
        # error path only: a linear identity search is fine here
        idx = next((i for i, e in enumerate(self.events) if e is ev), None)
        name = ev.name if len(ev.name) <= 80 else ev.name[:77] + "..."
        where = "event" if idx is None else f"traceEvents[{idx}]"
        return GemmperfInputError(self.path, message, record=f"{where}, {ev.cat} {name!r}")


def _us_field(src: _Src, events: list[_Event], field: str) -> tuple[np.ndarray, np.ndarray]:
    """Exact int64 ns of the ``ts`` or ``dur`` field of every event (any problem is an error),
    and a mask of the values that had digits below 1 ns and were rounded once."""
    tokens = [getattr(e, field) for e in events]
    ns, status = us_text_to_ns(tokens)
    i = first_problem(status)
    if i is not None:
        raise src.error(events[i], f"{field} {PROBLEMS[int(status[i])]}: {show(tokens[i])}")
    rounded = status == ROUNDED
    src.rounded += int(rounded.sum())
    return ns, rounded


def _times(src: _Src, events: list[_Event]) -> tuple[np.ndarray, np.ndarray]:
    """(start_ns, end_ns) = (ts, ts + dur) in exact ns; durations non-negative, ends in int64."""
    start, r_start = _us_field(src, events, "ts")
    dur, r_dur = _us_field(src, events, "dur")
    bad = np.flatnonzero((dur < 0) | (start > INT64_MAX - np.maximum(dur, 0)))
    if len(bad):
        i = int(bad[0])
        what = (f"dur is negative: {show(events[i].dur)}" if dur[i] < 0 else
                "ts + dur is outside the int64 nanosecond range")
        raise src.error(events[i], what)
    end = start + dur
    # sub-ns digits (rare): the end is the exact decimal sum ts + dur, rounded once
    for i in np.flatnonzero(r_start | r_dur).tolist():
        end[i], st = sum_us_to_ns(bytes(events[i].ts), bytes(events[i].dur))
        if st > ROUNDED:
            raise src.error(events[i], "ts + dur is outside the int64 nanosecond range")
    return start, end


def _idcol(src: _Src, events: list[_Event], values: list, field: str,
           labels_ok: bool = False) -> pd.Series:
    """Nullable Int64 ids, exact; a value that is not an int64 JSON integer is an error."""
    v, missing, status = exact_ints(values, labels_ok)
    i = first_problem(status)
    if i is not None:
        raise src.error(events[i], f"{field} {PROBLEMS[int(status[i])]}: {show(values[i])}")
    return pd.Series(pd.arrays.IntegerArray(v, missing))


def _gpu_frame(gpu: list[_Event], src: _Src) -> pd.DataFrame:
    args = [e.args or _NO_ARGS for e in gpu]
    start, end = _times(src, gpu)
    names = [e.name or e.cat for e in gpu]
    dev = _idcol(src, gpu, [a.device for a in args], "args.device")
    # GPU events carry the device in pid and the stream in tid when args lack them
    dev = dev.fillna(_idcol(src, gpu, [e.pid for e in gpu], "pid", labels_ok=True))
    stream = _idcol(src, gpu, [a.stream for a in args], "args.stream").fillna(
        _idcol(src, gpu, [e.tid for e in gpu], "tid", labels_ok=True))
    df = pd.DataFrame({
        "agent": dev,
        "stream": stream,
        "correlation_id": _idcol(src, gpu, [a.correlation for a in args], "args.correlation"),
        "kernel": names,
        "start_ns": start,
        "end_ns": end,
        "_ext": _idcol(src, gpu, [a.external_id for a in args], "args.External id"),
        "_is_kernel": [e.cat in ("kernel", "Kernel") for e in gpu],
    })
    df["_args"] = args
    grid = _dim3(src, gpu, [a.grid for a in args], "args.grid")
    block = _dim3(src, gpu, [a.block for a in args], "args.block")
    for i, ax in enumerate("xyz"):
        df[f"_grid_{ax}"] = grid[i]
        df[f"_block_{ax}"] = block[i]
    return df


_DIM_MAX = 2 ** 32 - 1  # launch APIs and AQL packets hold each dimension in 32 bits


def _dim3(src: _Src, events: list[_Event], values: list, field: str) -> list[pd.Series]:
    """x, y, z columns of ``[x, y, z]`` launch dimensions (shorter lists pad with 1).

    Fast path (every real trace): lists of three JSON integers, checked by C-level ``map``
    passes and one int64 conversion. Anything else goes through the per-event check, which
    names the first bad event."""
    n = len(values)
    none = np.fromiter(map(operator.is_, values, repeat(None)), dtype=bool, count=n)
    lists = list(compress(values, ~none))
    if (set(map(type, lists)) <= {list} and set(map(len, lists)) <= {3}
            and set(map(type, chain.from_iterable(lists))) <= {int}):
        try:
            arr = np.array(lists, dtype=np.int64).reshape(len(lists), 3)
        except OverflowError:
            arr = None
        if arr is not None and not ((arr < 0) | (arr > _DIM_MAX)).any():
            full = np.zeros((n, 3), dtype=np.int64)
            full[~none] = arr
            return [pd.Series(pd.arrays.IntegerArray(full[:, i].copy(), none.copy()))
                    for i in range(3)]
    rows: list[Any] = []
    for ev, v in zip(events, values):
        if v is None or v == []:
            rows.append((None, None, None))
        elif (type(v) is list and len(v) <= 3
              and all(type(x) is int and 0 <= x <= _DIM_MAX for x in v)):
            rows.append((v + [1, 1])[:3])
        else:
            raise src.error(ev, f"{field} is not a list of 1-3 integers in [0, 2**32): {show(v)}")
    arr = pd.DataFrame(rows, columns=["x", "y", "z"], dtype=object)
    return [arr[c].astype(INT) for c in ("x", "y", "z")]


def _runtime_frame(runtime: list[_Event], src: _Src) -> pd.DataFrame:
    args = [e.args or _NO_ARGS for e in runtime]
    rt = pd.DataFrame({
        "name": pd.Series([e.name for e in runtime], dtype=object),
        "pid": _idcol(src, runtime, [e.pid for e in runtime], "pid", labels_ok=True),
        "tid": _idcol(src, runtime, [e.tid for e in runtime], "tid", labels_ok=True),
        "ts_ns": _us_field(src, runtime, "ts")[0],
        "correlation": _idcol(src, runtime, [a.correlation for a in args], "args.correlation"),
        "external_id": _idcol(src, runtime, [a.external_id for a in args], "args.External id"),
        "has_grid": [a.grid is not None for a in args],
    })
    rt = rt[rt["correlation"].notna()]
    # ROCm Kineto can emit two runtime records per correlation id (e.g. a spurious
    # hipArray3DCreate beside hipMemsetAsync); prefer the one carrying launch dimensions.
    rt = rt.sort_values("has_grid", ascending=False, kind="stable")
    rt = rt.drop_duplicates("correlation", keep="first")
    return rt.reset_index(drop=True)


def _cpu_ops_frame(cpu: list[_Event], src: _Src) -> pd.DataFrame:
    args = [e.args or _NO_ARGS for e in cpu]
    start, end = _times(src, cpu)
    names = [e.name for e in cpu]
    ops = pd.DataFrame({
        "name": pd.Series(names, dtype=object),
        "pid": _idcol(src, cpu, [e.pid for e in cpu], "pid", labels_ok=True),
        "tid": _idcol(src, cpu, [e.tid for e in cpu], "tid", labels_ok=True),
        "ts_ns": pd.array(start, dtype=INT),
        "dur_ns": pd.array(end - start, dtype=INT),
        "input_dims": pd.Series([None if a.input_dims is None else _shape_str(a.input_dims)
                                 for a in args], dtype=object),
        "input_types": pd.Series([None if a.input_type is None else _shape_str(a.input_type)
                                  for a in args], dtype=object),
        "external_id": _idcol(src, cpu, [a.external_id for a in args], "args.External id"),
        "correlation": _idcol(src, cpu, [a.correlation for a in args], "args.correlation"),
    })
    # collective metadata lives on record_param_comms ops only
    comms = [i for i, n in enumerate(names) if n == PARAM_COMMS_OP]
    _check_coll_ints(src, [cpu[i] for i in comms], [args[i] for i in comms])
    for col in COLL_COLUMNS:
        values = np.full(len(cpu), None, dtype=object)
        if comms:
            values[comms] = [_plain(getattr(args[i], col)) for i in comms]
        ops[col] = values
    return ops


def _check_coll_ints(src: _Src, events: list[_Event], args: list[_Args]) -> None:
    """Integer collective metadata (group size, element counts) must be int64 JSON integers."""
    for col, dtype in COLL_COLUMNS.items():
        if dtype == INT and events:
            _idcol(src, events, [getattr(a, col) for a in args], f"args.{_COLL_JSON[col]}")


def _coll_ints(values: list) -> pd.Series:
    """Int64 of collective metadata already checked by _check_coll_ints."""
    v, missing, _ = exact_ints(values)
    return pd.Series(pd.arrays.IntegerArray(v, missing))


def _shape_str(v: Any) -> str:
    return v if isinstance(v, str) else str(v)


def _plain(v: Any) -> Any:
    """Collective metadata: scalars stay, lists (ranks, split sizes) become their string."""
    return str(v) if isinstance(v, (list, tuple, dict)) else v


def _steps_frame(annotations: list[_Event], cpu_ops: pd.DataFrame, src: _Src) -> pd.DataFrame:
    """``ProfilerStep#N`` ranges (user annotations; some older traces record them as cpu_op)."""
    steps = [e for e in annotations if STEP_RE.match(e.name)]
    start, end = _times(src, steps)
    old = cpu_ops[cpu_ops["name"].astype(str).str.match(STEP_RE.pattern)]
    old_start = old["ts_ns"].to_numpy(dtype=np.int64)
    names = [e.name for e in steps] + list(old["name"])
    df = pd.DataFrame({
        "name": pd.Series(names, dtype=object),
        "step": pd.Series([int(STEP_RE.match(n).group(1)) for n in names], dtype="int64"),
        "start_ns": np.concatenate([start, old_start]),
        "end_ns": np.concatenate([end, old_start + old["dur_ns"].to_numpy(dtype=np.int64)]),
    })
    return df.sort_values("start_ns", kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- collectives

def _fill_collectives(df: pd.DataFrame, ops: pd.DataFrame, rt: pd.DataFrame, rt_row: np.ndarray,
                      op_row: np.ndarray, src: _Src, gpu: list[_Event]) -> None:
    """Collective metadata from kernel args, else from the enclosing ``record_param_comms``."""
    args = df["_args"].tolist()
    carrying = [i for i, a in enumerate(args) if a.coll_name is not None or a.pg_name is not None]
    _check_coll_ints(src, [gpu[i] for i in carrying], [args[i] for i in carrying])
    for col in COLL_COLUMNS:
        values = np.full(len(df), None, dtype=object)
        if carrying:
            values[carrying] = [_plain(getattr(args[i], col)) for i in carrying]
        df[col] = pd.Series(values, index=df.index, dtype=object)
    is_coll = (df["category"].astype(object) == "collective").to_numpy()
    need = is_coll & df["coll_name"].isna().to_numpy()
    if need.any() and len(ops):
        comms = ops[ops["name"] == PARAM_COMMS_OP]
        src = np.where(np.isin(op_row, comms.index.to_numpy()), op_row, -1)
        if len(comms) and (src < 0).any():
            src = np.where(src >= 0, src, enclosing_ops(comms, rt, rt_row))
        src = np.where(need, src, -1)
        for col in COLL_COLUMNS:
            filled = take(ops[col].astype(object), src)
            df[col] = df[col].where(df[col].notna(), filled)
    for col, dtype in COLL_COLUMNS.items():
        if dtype == INT:
            df[col] = _coll_ints(list(df[col]))
        else:
            df[col] = df[col].astype(object).where(df[col].notna(), None).astype(STR)


def _apply_grid_semantics(df: pd.DataFrame, flavor: str, launch_api: pd.Series, src: _Src,
                          gpu: list[_Event]) -> str:
    g = [df.pop(f"_grid_{a}") for a in "xyz"]
    b = [df.pop(f"_block_{a}") for a in "xyz"]
    if flavor != "rocprofiler-sdk":
        # blocks * block: each factor is below 2**32, so the uint64 product is exact; a result
        # beyond int64 would wrap silently in the Int64 product below
        for i in range(3):
            prod = g[i].to_numpy(np.uint64, na_value=0) * b[i].to_numpy(np.uint64, na_value=0)
            over = np.flatnonzero(prod > np.uint64(INT64_MAX))
            if len(over):
                raise src.error(gpu[int(over[0])], "args.grid * args.block is outside int64")
    if flavor == "rocprofiler-sdk":
        for i, a in enumerate("xyz"):
            df[f"grid_{a}"], df[f"wg_{a}"] = b[i], g[i]
        return "rocprofiler-sdk: args.block = grid (work-items), args.grid = workgroup size"
    work_items = launch_api.isin(WORK_ITEM_LAUNCHES).to_numpy()
    known = launch_api.notna().to_numpy() if flavor == "roctracer" else np.ones(len(df), bool)
    for i, a in enumerate("xyz"):
        blocks_times = g[i] * b[i]
        grid = blocks_times.where(pd.Series(~work_items), g[i]) if flavor == "roctracer" else blocks_times
        df[f"grid_{a}"] = grid.mask(pd.Series(~known))
        df[f"wg_{a}"] = b[i]
    if flavor == "roctracer":
        return ("roctracer: launch-API arguments; hipExtModuleLaunchKernel/hipHccModuleLaunchKernel "
                "grid = work-items, other launches grid = blocks * block")
    return f"{flavor}: args.grid = blocks, grid = blocks * block, wg = block"


def _order_extra_columns(df: pd.DataFrame) -> pd.DataFrame:
    drop = [c for c in df.columns if c.startswith("_")]
    df = df.drop(columns=drop)
    extras = list(OP_COLUMNS) + list(COLL_COLUMNS)
    rest = [c for c in df.columns if c not in extras]
    df = df[rest + extras]
    for c in OP_COLUMNS:
        df[c] = df[c].astype(object).where(df[c].notna(), None).astype(STR)
    return df
