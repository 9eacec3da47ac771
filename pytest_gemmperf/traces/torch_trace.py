"""PyTorch profiler (Kineto) traces -> canonical tables.

Kineto writes one JSON object per process: metadata keys (``schemaVersion``,
``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``, runtime versions) and
``traceEvents`` in Chrome trace format. ``ts``/``dur`` are microsecond floats with nanosecond
fractions; they become integer ns as ``round(ts * 1000)`` and ``round(dur * 1000)`` (float64
keeps about 1 ns of the ~16 significant digits, so start times are exact to +-1 ns and durations
exactly as written).

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

import os
import re
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.fileio import read_maybe_gzip
from pytest_gemmperf.traces.schema import (AGENT_SCHEMA, INT, STR, Trace, empty,
                                           finalize_agents, finalize_dispatches,
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

#: product name -> gfx target, for ROCm traces whose deviceProperties carry no arch name
_PRODUCT_ARCH = (
    (re.compile(r"MI35\dX?"), "gfx950"),
    (re.compile(r"MI3(00|25)[AX]?"), "gfx942"),
    (re.compile(r"MI2(10|50X?)"), "gfx90a"),
    (re.compile(r"MI100"), "gfx908"),
)


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
    ts: Any = None
    dur: Any = None
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
_VERSION_KEYS = ("schemaVersion", "roctracer_version", "rocprofiler_sdk_version",
                 "hip_runtime_version", "hip_driver_version", "cuda_runtime_version",
                 "cuda_driver_version", "cupti_version")


def read_torch_trace(path: str | os.PathLike) -> Trace:
    """Read one Kineto trace (``.json`` or gzip-compressed, detected by content)."""
    path = os.fspath(path)
    doc = _decode(path, read_maybe_gzip(path))
    events = doc.traceEvents or []
    by_cat = _complete_events_by_cat(events)
    gpu = _pick(by_cat, GPU_CATS)
    if not gpu:
        raise GemmperfInputError(path, f"no GPU kernel/memcpy/memset events among {len(events)} "
                                       "trace events (CPU-only trace, or GPU activity not recorded)")
    runtime = _pick(by_cat, RUNTIME_CATS)
    cpu_events = _pick(by_cat, CPU_OP_CATS)
    annotations = _pick(by_cat, ANNOTATION_CATS)
    cpu_ops = _cpu_ops_frame(cpu_events)
    rt = _runtime_frame(runtime)

    pid = _process_pid(rt["pid"], cpu_ops["pid"], _ints([e.pid for e in annotations]))
    host = _host(doc, path, pid)
    rank = _rank(doc.distributedInfo)
    flavor = _flavor(doc, runtime)
    agents = _agents(doc.deviceProperties, path, host, pid)
    df = _gpu_frame(gpu, path)
    df["pid"] = pid
    df["host"] = host
    df["rank"] = rank
    df["source"] = "torch"
    df["file"] = path

    rt_row = _lookup(df["correlation_id"], rt["correlation"])
    rt_ext = _take(rt["external_id"], rt_row)
    df["thread_id"] = _take(rt["tid"], rt_row)
    grid_rule = _apply_grid_semantics(df, flavor, _take(rt["name"], rt_row))

    op_row = _link_ops(df, cpu_ops, rt, rt_row, rt_ext)
    df["op_name"] = _take(cpu_ops["name"], op_row)
    df["op_input_dims"] = _take(cpu_ops["input_dims"], op_row)
    df["op_input_types"] = _take(cpu_ops["input_types"], op_row)

    from pytest_gemmperf.analysis.categories import categorize
    df["kernel"] = df["kernel"].astype(STR)
    df["category"] = categorize(df["kernel"])
    # memcpy/memset names ("Memcpy HtoD (Host -> Device)") are not C++ signatures: keep them whole
    short = shorten_names(df["kernel"]).astype(object)
    df["kernel_short"] = short.where(df.pop("_is_kernel").to_numpy(), df["kernel"].astype(object))
    _fill_collectives(df, cpu_ops, rt, rt_row, op_row)

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
        "base_time_ns": _int_or_none(doc.baseTimeNanoseconds),
        "display_time_unit": doc.displayTimeUnit,
        "trace_name": doc.traceName,
        "distributed": doc.distributedInfo,
        "rank": rank,
        "host": host,
        "pid": pid,
        "grid_semantics": grid_rule,
        "agent_numbering": "torch device index (among the process's visible devices)",
        "cpu_ops": cpu_ops[list(CPU_OP_COLUMNS)],
        "steps": _steps_frame(annotations, cpu_ops),
        "n_events": len(events),
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
    ops = _cpu_ops_frame(cpu_events)
    missing = ops["ts_ns"].isna() | ops["dur_ns"].isna()
    if missing.any():
        i = int(np.flatnonzero(missing.to_numpy())[0])
        raise GemmperfInputError(path, "cpu_op without numeric ts/dur",
                                 record=f"cpu_op {i + 1} ({ops['name'].iloc[i]})")
    pid = _process_pid(ops["pid"])
    host = _host(doc, path, pid)
    rank = _rank(doc.distributedInfo)
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
        "base_time_ns": _int_or_none(doc.baseTimeNanoseconds), "n_events": len(events),
    }
    return Trace(dispatches=_order_extra_columns(out), files=[path], meta=meta)


# --------------------------------------------------------------------------- decoding

def _decode(path: str, raw: bytes) -> _Doc:
    if not raw.strip():
        raise GemmperfInputError(path, "empty file")
    try:
        doc = _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise GemmperfInputError(path, f"not a PyTorch profiler trace: {exc}") from None
    except msgspec.DecodeError as exc:
        raise GemmperfInputError(path, f"not valid JSON: {exc}") from None
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

def _num(values: list) -> np.ndarray:
    """float64 array from JSON numbers (or numeric strings); None/garbage -> NaN."""
    try:
        return np.array(values, dtype=float)  # C speed; None -> nan
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float)


def _ints(values: list) -> pd.Series:
    """Nullable Int64 from JSON ids (ints well below 2**53, so the float detour is exact)."""
    v = np.rint(_num(values))
    mask = np.isnan(v)
    return pd.Series(pd.arrays.IntegerArray(np.where(mask, 0, v).astype(np.int64), mask))


def _us_to_ns(values: list) -> np.ndarray:
    return np.rint(_num(values) * 1000.0)


def _gpu_frame(gpu: list[_Event], path: str) -> pd.DataFrame:
    args = [e.args or _NO_ARGS for e in gpu]
    start = _us_to_ns([e.ts for e in gpu])
    dur = _us_to_ns([e.dur for e in gpu])
    bad = np.isnan(start) | np.isnan(dur)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise GemmperfInputError(path, "GPU event without numeric ts/dur",
                                 record=f"event {gpu[i].name!r}")
    names = [e.name or e.cat for e in gpu]
    dev = _ints([a.device for a in args])
    # GPU events carry the device in pid and the stream in tid when args lack them
    dev = dev.fillna(_ints([e.pid for e in gpu]))
    stream = _ints([a.stream for a in args]).fillna(_ints([e.tid for e in gpu]))
    df = pd.DataFrame({
        "agent": dev,
        "stream": stream,
        "correlation_id": _ints([a.correlation for a in args]),
        "kernel": names,
        "start_ns": start.astype(np.int64),
        "end_ns": (start + dur).astype(np.int64),
        "_ext": _ints([a.external_id for a in args]),
        "_is_kernel": [e.cat in ("kernel", "Kernel") for e in gpu],
    })
    df["_args"] = args
    grid = _dim3([a.grid for a in args])
    block = _dim3([a.block for a in args])
    for i, ax in enumerate("xyz"):
        df[f"_grid_{ax}"] = grid[i]
        df[f"_block_{ax}"] = block[i]
    return df


def _dim3(values: list) -> list[pd.Series]:
    rows = [(list(v) + [1, 1, 1])[:3] if isinstance(v, (list, tuple)) and v else [None] * 3
            for v in values]
    arr = pd.DataFrame(rows, columns=["x", "y", "z"], dtype=object)
    return [pd.to_numeric(arr[c], errors="coerce").astype(INT) for c in ("x", "y", "z")]


def _runtime_frame(runtime: list[_Event]) -> pd.DataFrame:
    args = [e.args or _NO_ARGS for e in runtime]
    rt = pd.DataFrame({
        "name": pd.Series([e.name for e in runtime], dtype=object),
        "pid": _ints([e.pid for e in runtime]),
        "tid": _ints([e.tid for e in runtime]),
        "ts_ns": _us_to_ns([e.ts for e in runtime]),
        "correlation": _ints([a.correlation for a in args]),
        "external_id": _ints([a.external_id for a in args]),
        "has_grid": [a.grid is not None for a in args],
    })
    rt = rt[rt["correlation"].notna() & ~np.isnan(rt["ts_ns"].to_numpy())]
    # ROCm Kineto can emit two runtime records per correlation id (e.g. a spurious
    # hipArray3DCreate beside hipMemsetAsync); prefer the one carrying launch dimensions.
    rt = rt.sort_values("has_grid", ascending=False, kind="stable")
    rt = rt.drop_duplicates("correlation", keep="first")
    return rt.reset_index(drop=True)


def _cpu_ops_frame(cpu: list[_Event]) -> pd.DataFrame:
    args = [e.args or _NO_ARGS for e in cpu]
    start = _us_to_ns([e.ts for e in cpu])
    dur = _us_to_ns([e.dur for e in cpu])
    names = [e.name for e in cpu]
    ops = pd.DataFrame({
        "name": pd.Series(names, dtype=object),
        "pid": _ints([e.pid for e in cpu]),
        "tid": _ints([e.tid for e in cpu]),
        "ts_ns": _ints(start),
        "dur_ns": _ints(dur),
        "input_dims": pd.Series([None if a.input_dims is None else _shape_str(a.input_dims)
                                 for a in args], dtype=object),
        "input_types": pd.Series([None if a.input_type is None else _shape_str(a.input_type)
                                  for a in args], dtype=object),
        "external_id": _ints([a.external_id for a in args]),
        "correlation": _ints([a.correlation for a in args]),
    })
    # collective metadata lives on record_param_comms ops only
    comms = [i for i, n in enumerate(names) if n == PARAM_COMMS_OP]
    for col in COLL_COLUMNS:
        values = np.full(len(cpu), None, dtype=object)
        if comms:
            values[comms] = [_plain(getattr(args[i], col)) for i in comms]
        ops[col] = values
    return ops


def _shape_str(v: Any) -> str:
    return v if isinstance(v, str) else str(v)


def _plain(v: Any) -> Any:
    """Collective metadata: scalars stay, lists (ranks, split sizes) become their string."""
    return str(v) if isinstance(v, (list, tuple, dict)) else v


def _steps_frame(annotations: list[_Event], cpu_ops: pd.DataFrame) -> pd.DataFrame:
    """``ProfilerStep#N`` ranges (user annotations; some older traces record them as cpu_op)."""
    steps = [(e.name, e.ts, e.dur) for e in annotations if STEP_RE.match(e.name)]
    old = cpu_ops[cpu_ops["name"].astype(str).str.match(STEP_RE.pattern)]
    start = np.concatenate([_us_to_ns([t for _, t, _ in steps]), old["ts_ns"].to_numpy(dtype=float)])
    dur = np.concatenate([_us_to_ns([d for _, _, d in steps]), old["dur_ns"].to_numpy(dtype=float)])
    names = [n for n, _, _ in steps] + list(old["name"])
    ok = ~(np.isnan(start) | np.isnan(dur))
    df = pd.DataFrame({
        "name": pd.Series(names, dtype=object),
        "step": pd.Series([int(STEP_RE.match(n).group(1)) for n in names], dtype="int64"),
        "start_ns": np.where(ok, start, 0).astype(np.int64),
        "end_ns": np.where(ok, start + dur, 0).astype(np.int64),
    })[ok]
    return df.sort_values("start_ns", kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- metadata

def _process_pid(*pid_columns: pd.Series) -> int | None:
    """The host process: the most frequent pid of CPU-side events (GPU lanes use device ids)."""
    pids = pd.concat([c.dropna() for c in pid_columns], ignore_index=True)
    if pids.empty:
        return None
    return int(pids.value_counts().index[0])


#: tensorboard_trace_handler's default file name: <hostname>_<pid>.<time_ns>.pt.trace.json
_HANDLER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(\.gz)?$")


def _host(doc: _Doc, path: str, pid: int | None) -> str | None:
    if isinstance(doc.host_name, str) and doc.host_name:
        return doc.host_name
    for name in (os.path.basename(path), os.path.basename(str(doc.traceName or ""))):
        m = _HANDLER_NAME.match(name)
        # trust the name only when its pid is the traced process (the pattern is a convention)
        if m and (pid is None or int(m["pid"]) == pid):
            return m["host"]
    return None


def _rank(info: Any) -> int | None:
    if isinstance(info, dict):
        r = info.get("rank")
        if isinstance(r, int) and not isinstance(r, bool):
            return r
        if isinstance(r, str) and r.strip().isdigit():
            return int(r)
    return None


def _flavor(doc: _Doc, runtime: list[_Event]) -> str:
    if doc.rocprofiler_sdk_version is not None:
        return "rocprofiler-sdk"
    if doc.roctracer_version is not None or doc.hip_runtime_version is not None:
        return "roctracer"
    if doc.cuda_runtime_version is not None or doc.cuda_driver_version is not None \
            or doc.cupti_version is not None:
        return "cupti"
    names = {e.name[:3] for e in runtime[:200] if isinstance(e.name, str)}
    if "hip" in names:
        return "roctracer"
    if "cud" in names:
        return "cupti"
    return "unknown"


def _int_or_none(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def product_arch(product: str | None) -> str | None:
    if not product:
        return None
    for rx, arch in _PRODUCT_ARCH:
        if rx.search(product):
            return arch
    return None


def _agents(props: Any, path: str, host: str | None, pid: int | None) -> pd.DataFrame:
    if not isinstance(props, list) or not props:
        return empty(AGENT_SCHEMA)
    rows = []
    for p in props:
        if not isinstance(p, dict):
            continue
        name = p.get("name")
        arch = p.get("gcnArchName")
        if isinstance(arch, str):
            arch = arch.split(":")[0]
        elif isinstance(p.get("computeMajor"), int) and "AMD" not in str(name):
            arch = f"sm_{p['computeMajor']}{p.get('computeMinor', 0)}"
        else:
            arch = product_arch(name)
        rows.append({"source": "torch", "host": host, "pid": pid, "gpu_index": p.get("id"),
                     "type": "GPU", "gpu_arch": arch, "product": name,
                     "cu_count": p.get("numSms"), "wave_size": p.get("warpSize")})
    return finalize_agents(pd.DataFrame(rows), path)


# --------------------------------------------------------------------------- linkage

def _lookup(keys: pd.Series, table_keys: pd.Series) -> np.ndarray:
    """Row index in ``table_keys`` (unique) for each key; -1 when absent or key is null."""
    if len(table_keys) == 0:
        return np.full(len(keys), -1, dtype=np.int64)
    idx = pd.Index(table_keys.astype("int64"))
    k = keys.astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    out = idx.get_indexer(np.where(np.isnan(k), -(2 ** 62), k).astype(np.int64))
    return out.astype(np.int64)


def _take(col: pd.Series, rows: np.ndarray) -> pd.Series:
    """``col[rows]`` with -1 -> missing, keeping nullable dtypes."""
    if len(col) == 0:
        dtype = col.dtype if str(col.dtype) == INT else object
        return pd.Series([None] * len(rows), dtype=dtype)
    safe = np.where(rows < 0, 0, rows)
    vals = col.iloc[safe].reset_index(drop=True)
    return vals.where(pd.Series(rows >= 0), None) if vals.dtype == object else \
        vals.mask(pd.Series(rows < 0))


def innermost_enclosing(op_group: np.ndarray, op_start: np.ndarray, op_end: np.ndarray,
                        pt_group: np.ndarray, pt_time: np.ndarray) -> np.ndarray:
    """Index of the innermost op (per group, e.g. thread) whose [start, end] holds each point.

    Ops on one thread nest like brackets, so the innermost open op at a time is the most recent
    open at the current nesting depth. One sort of open/close/point events, a cumulative sum for
    depth and a segmented running max find it for every point at once. Returns -1 where no op
    encloses the point. Zero-length ops cannot enclose anything and are ignored.
    """
    n_pt = len(pt_time)
    result = np.full(n_pt, -1, dtype=np.int64)
    keep = np.flatnonzero(op_end > op_start)
    if n_pt == 0 or len(keep) == 0:
        return result
    g_op, s, e = op_group[keep], op_start[keep], op_end[keep]
    n = len(keep)
    grp = np.concatenate([g_op, g_op, pt_group])
    time = np.concatenate([s, e, pt_time])
    # at equal times: closes, then opens (outer first), then points
    kind = np.concatenate([np.ones(n), np.zeros(n), np.full(n_pt, 2)])
    tie = np.concatenate([-e, -s, np.zeros(n_pt)])
    delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64), np.zeros(n_pt, np.int64)])
    ref = np.concatenate([keep, keep, np.arange(n_pt)])
    order = np.lexsort((tie, kind, time, grp))
    depth = np.cumsum(delta[order])  # per group it returns to 0, so one global cumsum suffices
    is_open = (kind[order] == 1)
    is_pt = (kind[order] == 2)
    sel = np.flatnonzero(is_open | is_pt)
    g2, lvl, op_flag = grp[order][sel], depth[sel], is_open[sel]
    order2 = np.lexsort((np.arange(len(sel)), lvl, g2))
    g3, l3, f3 = g2[order2], lvl[order2], op_flag[order2]
    seg_start = np.ones(len(order2), dtype=bool)
    seg_start[1:] = (g3[1:] != g3[:-1]) | (l3[1:] != l3[:-1])
    seg_first = np.maximum.accumulate(np.where(seg_start, np.arange(len(order2)), 0))
    last_open = np.maximum.accumulate(np.where(f3, np.arange(len(order2)), -1))
    found = f3 == False  # noqa: E712  (points only)
    found &= (last_open >= seg_first) & (l3 > 0)
    pos_pt = np.flatnonzero(found)
    orig = sel[order2]  # index into the sorted event array
    pts = ref[order][orig[pos_pt]]
    ops = ref[order][orig[last_open[pos_pt]]]
    result[pts] = ops
    # improper nesting (rounded timestamps) can break the bracket rule: verify containment
    hit = result >= 0
    r = result[hit]
    ok = (op_start[r] <= pt_time[hit]) & (pt_time[hit] <= op_end[r]) & (op_group[r] == pt_group[hit])
    idx = np.flatnonzero(hit)
    result[idx[~ok]] = -1
    return result


def _group_codes(*frames_cols: tuple[pd.Series, pd.Series]) -> list[np.ndarray]:
    """Shared integer codes for (pid, tid) pairs across several frames (missing ids -> -1)."""
    keys = [(p.fillna(-1).to_numpy(dtype=np.int64) << 32) ^ (t.fillna(-1).to_numpy(dtype=np.int64)
                                                              & 0xFFFFFFFF)
            for p, t in frames_cols]
    codes, _ = pd.factorize(np.concatenate(keys))
    out, start = [], 0
    for k in keys:
        out.append(codes[start:start + len(k)])
        start += len(k)
    return out


def _enclosing_ops(ops: pd.DataFrame, rt: pd.DataFrame, rt_rows: np.ndarray) -> np.ndarray:
    """Innermost op of ``ops`` around the runtime call of each dispatch (-1 if none)."""
    n = len(rt_rows)
    if len(ops) == 0 or len(rt) == 0:
        return np.full(n, -1, dtype=np.int64)
    valid = ops["ts_ns"].notna() & ops["dur_ns"].notna()
    ops = ops[valid]
    op_codes, rt_codes = _group_codes((ops["pid"], ops["tid"]), (rt["pid"], rt["tid"]))
    s = ops["ts_ns"].to_numpy(dtype=np.int64)
    e = s + ops["dur_ns"].to_numpy(dtype=np.int64)
    per_rt = innermost_enclosing(op_codes, s, e, rt_codes, rt["ts_ns"].to_numpy(dtype=np.int64))
    per_rt = np.where(per_rt >= 0, ops.index.to_numpy()[np.maximum(per_rt, 0)], -1)
    return np.where(rt_rows >= 0, per_rt[np.maximum(rt_rows, 0)], -1)


def _link_ops(df: pd.DataFrame, ops: pd.DataFrame, rt: pd.DataFrame, rt_row: np.ndarray,
              rt_ext: pd.Series) -> np.ndarray:
    if len(ops) == 0:
        return np.full(len(df), -1, dtype=np.int64)
    by_ext = ops["external_id"].dropna()
    by_ext = by_ext[~by_ext.duplicated()]
    ext_index = pd.Series(by_ext.index, index=by_ext.to_numpy())
    row = _lookup(df["_ext"], pd.Series(ext_index.index))
    row = np.where(row >= 0, ext_index.to_numpy()[np.maximum(row, 0)], -1)
    row2 = _lookup(rt_ext, pd.Series(ext_index.index))
    row2 = np.where(row2 >= 0, ext_index.to_numpy()[np.maximum(row2, 0)], -1)
    row = np.where(row >= 0, row, row2)
    missing = row < 0
    if missing.any():
        row = np.where(missing, _enclosing_ops(ops, rt, rt_row), row)
    return row


def _fill_collectives(df: pd.DataFrame, ops: pd.DataFrame, rt: pd.DataFrame, rt_row: np.ndarray,
                      op_row: np.ndarray) -> None:
    """Collective metadata from kernel args, else from the enclosing ``record_param_comms``."""
    args = df["_args"].tolist()
    carrying = [i for i, a in enumerate(args) if a.coll_name is not None or a.pg_name is not None]
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
            src = np.where(src >= 0, src, _enclosing_ops(comms, rt, rt_row))
        src = np.where(need, src, -1)
        for col in COLL_COLUMNS:
            filled = _take(ops[col].astype(object), src)
            df[col] = df[col].where(df[col].notna(), filled)
    for col, dtype in COLL_COLUMNS.items():
        if dtype == INT:
            df[col] = _ints(list(df[col]))
        else:
            df[col] = df[col].astype(object).where(df[col].notna(), None).astype(STR)


def _apply_grid_semantics(df: pd.DataFrame, flavor: str, launch_api: pd.Series) -> str:
    g = [df.pop(f"_grid_{a}") for a in "xyz"]
    b = [df.pop(f"_block_{a}") for a in "xyz"]
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
