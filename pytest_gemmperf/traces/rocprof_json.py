"""rocprofv3 ``--output-format json`` (``<prefix>_results.json``, optionally gzipped) -> Trace.

Layout: ``{"rocprofiler-sdk-tool": [<one object per process>]}`` (rocprofv3-formats.md §4). Every
process element becomes rows of one :class:`~pytest_gemmperf.traces.schema.Trace`.

Speed: a real 7.x file is mostly kernel symbols, agent cache tables and dispatch records. The
decoder uses typed ``msgspec.Struct`` schemas (:mod:`.rocprof_json_schema`, which also
range-checks every integer) that declare only the fields we read, so the rest of the document
is skipped by the C decoder without building Python objects; dispatch columns are then pulled
out in one ``map(attrgetter)`` pass and converted to numpy in one call.

Name choice: ``kernel`` is ``formatted_kernel_name``. rocprofv3 fills the CSV ``Kernel_Name``
column and the rocpd ``display_name`` from that same field, so a kernel keeps one name whatever
output format a run used, and it carries neither the ``.kd`` suffix of C-named kernels nor the
``[clone .kd]`` that ``demangled_kernel_name`` sometimes has. When it is missing or empty we fall
back to ``demangled_kernel_name`` (then ``kernel_name``) with those suffixes removed.
``kernel_short`` is ``truncated_kernel_name`` exactly as the file gives it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from pytest_gemmperf.collector import gc_paused
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.jsonkeys import find_repeated_key, uniform_records
from pytest_gemmperf.traces.fileio import iter_maybe_gzip
from pytest_gemmperf.traces.jsonstream import (FreeMemory, JsonSplitter, Piece, Repeat, StreamDecodeError,
                                                decode_error, refuse_repeated_key)
from pytest_gemmperf.traces.rocprof_json_schema import (
    _DECODER,
    DISPATCH_FIELDS,
    _MISSING,
    TOOL_KEY,
    _Agent,
    _CounterRecord,
    _Dispatch,
    _Process,
    _Symbol,
)
from pytest_gemmperf.traces.coded import as_asked
from pytest_gemmperf.traces.rocprof_slim import SlimRuns, can_slim, coded_dispatches, lookup_sorted
from pytest_gemmperf.traces.schema import (
    AGENT_SCHEMA,
    COUNTER_SCHEMA,
    NoDispatches,
    Trace,
    empty,
    finalize_agents,
    finalize_counters,
    finalize_dispatches,
    short_name,
)

SOURCE = "rocprof-json"  # its kind's name (traces/kinds.py)
_KERNEL_ID_COL = DISPATCH_FIELDS.index("dispatch_info.kernel_id")

_AGENT_TYPES = {1: "CPU", 2: "GPU"}


# --------------------------------------------------------------------------------------------
# Public API


def read_rocprof_json(path: str | os.PathLike, columns: Sequence[str] | None = None,
                      coded: bool = False) -> Trace:
    """Read a rocprofv3 ``*_results.json`` or ``*_results.json.gz`` into a Trace.

    Rows of every process in the file are returned together; ``host``/``pid`` tell them apart.
    Dispatches keep the file's record order (rocprofv3 does not sort them).

    ``columns``: the dispatch columns the caller reads (None: all). Where they are among
    :data:`~pytest_gemmperf.traces.rocprof_slim.SLIM_COLUMNS` the records are read slim (the
    same checks and errors, the columns equal to the full table's, a few bytes kept a dispatch);
    ``coded``: a slim read's dispatches as :class:`~pytest_gemmperf.traces.coded.CodedDispatches`.
    """
    path_s = os.fspath(path)
    slim = can_slim(columns)
    processes, dispatches = decode_stream(path_s, SlimRuns if slim else _MatrixRuns)
    return as_asked(build_trace(processes, path_s, dispatches, columns if slim else None), columns, coded)


class _MatrixRuns:
    """One process's ``kernel_dispatch`` records as int64 matrices of ``DISPATCH_FIELDS``."""

    FIELDS = DISPATCH_FIELDS  # the record fields each run's matrix holds, in its column order

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def add(self, m: np.ndarray) -> None:
        self.runs.append(m)

    def kernel_id_values(self) -> np.ndarray:
        return np.concatenate([m[:, _KERNEL_ID_COL] for m in self.runs])

    def resolve(self, agents: _Agents, symbols: _Symbols, path: str, p_idx: int) -> _Resolved:
        mat = self.runs[0] if len(self.runs) == 1 else np.concatenate(self.runs)
        self.runs = []
        cols = _resolve(mat, agents, symbols, path, p_idx, "buffer_records.kernel_dispatch")
        cols["proc"] = np.full(len(mat), p_idx, dtype=np.int64)
        return _Resolved(cols, len(mat), bool((cols["stream"] != _MISSING).any()))


@dataclass
class _Resolved:
    """One process's dispatch columns (``_resolve``'s, with its index as ``proc``)."""

    cols: dict[str, np.ndarray]
    n: int
    streams: bool  # some record carries a stream id (a 7.x file)


#: the arrays under a process's ``buffer_records`` / ``callback_records`` that are read a run of
#: records at a time: the dispatches into int64 rows, the others (API calls, copies, markers:
#: often most of a file) only checked as JSON and dropped
_DISPATCHES = msgspec.json.Decoder(list[_Dispatch])
_SKIPPED = msgspec.json.Decoder(list[msgspec.Raw])


def _stream_at(path: tuple) -> Any:
    if len(path) == 4 and path[0] == TOOL_KEY and isinstance(path[1], int):
        if path[2] == "buffer_records":
            return _DISPATCHES.decode if path[3] == "kernel_dispatch" else _SKIPPED.decode
        if path[2] == "callback_records" and path[3] != "counter_collection":
            return _SKIPPED.decode
    if path == ("traceEvents",):  # a Kineto trace: refused before its events are read
        raise _KinetoGiven()
    return None


class _KinetoGiven(Exception):
    pass


def decode_stream(path: str, runs: Callable[[], Any] | None = None
                  ) -> tuple[list[_Process], dict[int, Any]]:
    """Typed decode a run of records at a time (:class:`~.jsonstream.JsonSplitter`): the
    processes without their dispatch records, and per process index its dispatch records
    (each run's matrix of the ``runs.FIELDS`` it reads handed, in file order, to the ``add`` of
    a new ``runs()`` per process: :class:`_MatrixRuns` keeps all of :data:`DISPATCH_FIELDS`,
    ``rocprof_slim.SlimRuns`` the few it needs; the decoder checks every field either way).
    Every failure is one GemmperfInputError line, with the precedence of a whole-document
    decode: the file's syntax and types, a missing or empty tool key, then a key written twice."""
    runs = runs or _MatrixRuns
    fields = attrgetter(*runs.FIELDS)
    splitter = JsonSplitter(iter_maybe_gzip(path), _stream_at, shallow=4)
    rows: dict[int, Any] = {}
    repeat: Repeat | None = None  # the first in the dispatch records
    free = FreeMemory()
    try:
        with gc_paused():
            for piece in splitter.pieces():
                p_idx, kind = piece.path[1], piece.path[3]
                if piece.path[2] == "buffer_records" and kind == "kernel_dispatch":
                    m = _dispatch_matrix(piece.items, path, p_idx, fields, len(runs.FIELDS))
                    if m is not None:
                        if p_idx not in rows:
                            rows[p_idx] = runs()
                        rows[p_idx].add(m)
                if repeat is None:
                    repeat = _piece_repeat(piece)
                del piece
                free.after_run()
            free.finish()
    except _KinetoGiven:
        raise GemmperfInputError(path, _not_rocprof_message(b'"traceEvents"')) from None
    except StreamDecodeError as exc:
        raise _decode_error(path, exc.exc, exc.message, splitter.skeleton) from None
    data = splitter.skeleton
    if not data.strip():  # a streamed array leaves its brackets: nothing was streamed
        raise GemmperfInputError(path, "empty file, expected rocprofv3 JSON output")
    try:
        root = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError) as exc:
        raise _decode_error(path, exc, splitter.skeleton_error(exc), data) from None
    if root.tool is None:
        raise GemmperfInputError(path, _not_rocprof_message(data))
    if not root.tool:
        raise GemmperfInputError(path, f"'{TOOL_KEY}' holds no process")
    # the decoder kept the last of a repeated key silently (a second end_timestamp): refuse it
    refuse_repeated_key(path, splitter, repeat, _record_of_path)
    return root.tool, rows


def _piece_repeat(piece: Piece) -> Repeat | None:
    """A key written twice in a run of records: its document offset, the key and the record.
    A run of records of one shape (rocprofv3 writes its dispatch and API records so) is checked
    through one of them (:func:`~pytest_gemmperf.jsonkeys.uniform_records`); any other run is
    scanned whole as ``{"<array name>": [...]}`` (:func:`~pytest_gemmperf.jsonkeys.find_repeated_key`)."""
    if piece.data.find(b"\\") < 0 and uniform_records(piece.data):
        return None  # records of one shape, that shape without a repeat: none repeats a key
    name = piece.path[3]
    head = msgspec.json.encode(name) + b":"
    wrapped = b"{" + head + piece.data + b"}"
    hit = find_repeated_key(wrapped, (name,))
    if hit is None:
        return None
    offset = piece.offset - 1 + hit.offset - 1 - len(head)
    inner = hit.path[len("$") + len(name) + 1:] if hit.path.startswith(f"$.{name}") else ""
    m = re.match(r"^\[(\d+)\](.*)$", inner)
    where = (f'$["{TOOL_KEY}"][{piece.path[1]}].{piece.path[2]}.{name}'
             + (f"[{piece.first + int(m.group(1))}]{m.group(2)}" if m else ""))
    return offset, hit.key, _record_of_path(where) or where


def _decode_error(path: str, exc: BaseException, message: str, data: bytes) -> GemmperfInputError:
    """One line for a decoder's error (``message``: its text in document terms)."""
    if isinstance(exc, msgspec.ValidationError):
        return _validation_error(path, message, data)
    return decode_error(path, exc, message, syntax="not valid JSON (truncated or corrupt file?)",
                        nesting="rocprofv3 writes at most a few levels")


def _record_of_path(json_path: str) -> str | None:
    """``$["rocprofiler-sdk-tool"][0].buffer_records.kernel_dispatch[3]`` -> ``process 0,
    buffer_records.kernel_dispatch[3]`` (the record style of the other messages)."""
    where = json_path.replace(f'$["{TOOL_KEY}"]', f"$.{TOOL_KEY}", 1)
    record, field = _split_where(where)
    if record is None:
        return None
    return f"{record}, {field}" if field else record


def build_trace(processes: list[_Process], path: str, dispatch_rows: dict[int, Any],
                columns: Sequence[str] | None = None) -> Trace:
    """The Trace of the decoded ``processes`` and their dispatch records (per process index, a
    :class:`_MatrixRuns`; or a ``rocprof_slim.SlimRuns``, whose dispatches come out as the
    ``columns`` of :class:`~pytest_gemmperf.traces.coded.CodedDispatches`)."""
    names = _NameTable()
    parts: list = []
    counter_parts: list[pd.DataFrame] = []
    agent_rows: list[dict[str, Any]] = []
    meta_procs: list[dict[str, Any]] = []
    layouts: set[str] = set()
    for p_idx, proc in enumerate(processes):
        md = proc.metadata
        host = md.node.hostname if md.node is not None else None
        agents = _agent_table(proc.agents, path, p_idx)
        runs = dispatch_rows.pop(p_idx, None)
        counter_mat = _counter_matrix(proc.callback_records.counter_collection, path, p_idx)
        used = np.unique(np.concatenate(
            ([runs.kernel_id_values()] if runs is not None else [])
            + ([counter_mat[:, _KERNEL_ID_COL]] if counter_mat is not None else [])
            or [np.empty(0, np.int64)]))
        symbols = _symbol_table(proc.kernel_symbols, used, names)
        part = None if runs is None else runs.resolve(agents, symbols, path, p_idx)
        if part is not None:
            parts.append(part)
        counters = None if counter_mat is None else _counter_frame(
            proc, _resolve(counter_mat, agents, symbols, path, p_idx,
                           "callback_records.counter_collection"), agents, names, path, p_idx)
        if counters is not None:
            counters["host"] = host
            counters["pid"] = md.pid
            counter_parts.append(counters)
        for row in agents.rows:
            agent_rows.append({**row, "host": host, "pid": md.pid})
        layout = "7.x" if md.node is not None or (part is not None and part.streams) else "6.2"
        layouts.add(layout)
        meta_procs.append({"pid": md.pid, "host": host, "init_time_ns": md.init_time,
                           "fini_time_ns": md.fini_time, "command": md.command,
                           "config": md.config, "layout": layout,
                           "n_dispatches": 0 if part is None else part.n,
                           "n_counter_records": len(proc.callback_records.counter_collection)})

    counters_df = (finalize_counters(pd.concat(counter_parts, ignore_index=True), path)
                   if counter_parts else finalize_counters(empty(COUNTER_SCHEMA), path))
    if not parts and len(counters_df) == 0:
        raise NoDispatches(
            path, f"no kernel dispatches in {len(processes)} process(es) "
                  "(was rocprofv3 run with --kernel-trace?)")
    hosts = [m["host"] for m in meta_procs]
    pids = [m["pid"] for m in meta_procs]
    if parts and columns is not None:
        dispatches = coded_dispatches(parts, path, columns, pids,
                                      lambda proc, kernel: _key_columns(proc, kernel, names, hosts, pids, path))
    elif parts:
        df = _dispatch_frame([p.cols for p in parts], names, hosts, pids, path)
        dispatches = finalize_dispatches(df, path)
    else:  # counters-only run: counter records carry the dispatch key, no trace rows
        dispatches = finalize_dispatches(pd.DataFrame({"start_ns": [], "end_ns": [], "kernel": []}),
                                         path, allow_empty=True)
    agents_df = finalize_agents(_typed_frame(agent_rows, AGENT_SCHEMA, source=SOURCE, file=path),
                                path)
    meta = {
        "format": SOURCE,
        "layout": "/".join(sorted(layouts)),
        "agent_numbering": "gpu_index",
        "processes": meta_procs,
        "init_time_ns": {m["pid"]: m["init_time_ns"] for m in meta_procs},
        "fini_time_ns": {m["pid"]: m["fini_time_ns"] for m in meta_procs},
        "counters_only": not parts,
    }
    return Trace(dispatches=dispatches, counters=counters_df, agents=agents_df, files=[path],
                 meta=meta)


# --------------------------------------------------------------------------------------------
# Pieces


class _NameTable:
    """Global string -> code maps so every process shares one category list."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def code(self, s: str | None) -> int:
        if s is None:
            return -1
        c = self.codes.get(s)
        if c is None:
            c = self.codes[s] = len(self.codes)
        return c

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        """Categorical holding only the names that occur (keeps per-name work downstream small)."""
        cats = np.array(list(self.codes), dtype=object)
        used, inverse = np.unique(codes, return_inverse=True)
        valid = used >= 0
        new_codes = np.where(valid[inverse], inverse - (~valid).sum(), -1)
        return pd.Categorical.from_codes(new_codes, categories=pd.Index(cats[used[valid]], dtype=object))


class _Agents:
    def __init__(self, handles: np.ndarray, gpu_index: np.ndarray, arch_codes: list[str | None],
                 rows: list[dict[str, Any]]) -> None:
        order = np.argsort(handles, kind="stable")
        self.sorted_handles = handles[order]
        self.gpu_index = gpu_index[order]
        self.arch = np.array(arch_codes, dtype=object)[order] if len(arch_codes) else np.array([], object)
        self.rows = rows


def _agent_table(agents: list[_Agent], path: str, p_idx: int) -> _Agents:
    gpus = sorted((a.node_id if a.node_id is not None else i, i)
                  for i, a in enumerate(agents) if a.type == 2)
    # Releases that do not write gpu_index number GPUs by ascending node_id (the rocprofv3 tool
    # assigns gpu_index exactly that way), so derive it the same way.
    derived = {i: k for k, (_, i) in enumerate(gpus)}
    rows: list[dict[str, Any]] = []
    handles = np.empty(len(agents), dtype=np.int64)
    gpu_index = np.full(len(agents), _MISSING, dtype=np.int64)
    arch: list[str | None] = []
    for i, a in enumerate(agents):
        handles[i] = a.id.handle
        is_gpu = a.type == 2
        gi = (a.gpu_index if a.gpu_index is not None and a.gpu_index >= 0 else derived.get(i)) \
            if is_gpu else None
        gpu_index[i] = _MISSING if gi is None else gi
        arch.append(a.name if is_gpu else None)
        rows.append({
            "handle": a.id.handle, "node_id": a.node_id, "logical_id": a.logical_node_id,
            "gpu_index": gi, "type": _AGENT_TYPES.get(a.type, "UNK"),
            "gpu_arch": a.name if is_gpu else None,
            "gfx_target_version": a.gfx_target_version if is_gpu else None,
            "product": a.product_name, "cu_count": a.cu_count if is_gpu else None,
            "simd_per_cu": a.simd_per_cu if is_gpu else None,
            "wave_size": a.wave_front_size if is_gpu else None,
            "max_clock_mhz": a.max_engine_clk_fcompute if is_gpu else None,
            "xcc_count": a.num_xcc if is_gpu else None,
        })
    if len(np.unique(handles)) != len(handles):
        raise GemmperfInputError(path, "duplicate agent id.handle in agents[]",
                                 record=f"process {p_idx}")
    return _Agents(handles, gpu_index, arch, rows)


class _Symbols:
    def __init__(self, ids: np.ndarray, kernel: np.ndarray, short: np.ndarray,
                 regs: np.ndarray) -> None:
        order = np.argsort(ids, kind="stable")
        self.sorted_ids = ids[order]
        self.kernel = kernel[order]
        self.short = short[order]
        self.regs = regs[order]  # columns: vgpr, agpr, sgpr


def _strip_kd(name: str) -> str:
    if name.endswith(" [clone .kd]"):
        name = name[: -len(" [clone .kd]")]
    if name.endswith(".kd"):
        name = name[:-3]
    return name


def _kernel_name(s: _Symbol) -> str:
    if s.formatted_kernel_name:
        return s.formatted_kernel_name
    for cand in (s.demangled_kernel_name, s.kernel_name):
        if cand:
            return _strip_kd(cand)
    return f"kernel_id {s.kernel_id}"


def _symbol_table(symbols: list[_Symbol], used_ids: np.ndarray, names: _NameTable) -> _Symbols:
    """Symbols whose ``kernel_id`` occurs in ``used_ids``, looked up by that field.

    A real file lists thousands of symbols of which tens are dispatched; building names only for
    those keeps the per-symbol Python work proportional to the kernels that ran.
    """
    all_ids = np.fromiter((s.kernel_id for s in symbols), dtype=np.int64, count=len(symbols))
    keep = np.flatnonzero(np.isin(all_ids, used_ids))
    n = len(keep)
    kernel = np.empty(n, dtype=np.int64)
    short = np.empty(n, dtype=np.int64)
    regs = np.empty((n, 3), dtype=np.int64)
    for j, i in enumerate(keep.tolist()):
        s = symbols[i]
        k = _kernel_name(s)
        kernel[j] = names.code(k)
        short[j] = names.code(s.truncated_kernel_name or short_name(k))
        regs[j] = (s.arch_vgpr_count, s.accum_vgpr_count, s.sgpr_count)
    return _Symbols(all_ids[keep], kernel, short, regs)


def _int_matrix(rows: Iterable[tuple], n: int, path: str, what: str, p_idx: int,
                width: int = len(DISPATCH_FIELDS)) -> np.ndarray:
    """``n`` rows of ``width`` ints as an int64 matrix (one flat pass: a third of the time of
    ``np.array`` on a list of tuples)."""
    try:
        return np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=n * width).reshape(n, width)
    except OverflowError:
        raise GemmperfInputError(path, f"integer field out of int64 range in {what}",
                                 record=f"process {p_idx}") from None


def _dispatch_matrix(records: list[_Dispatch], path: str, p_idx: int,
                     fields: Callable[[_Dispatch], tuple], width: int) -> np.ndarray | None:
    if not records:
        return None
    return _int_matrix(map(fields, records), len(records), path, "kernel_dispatch", p_idx, width)


def _counter_matrix(records: list[_CounterRecord], path: str, p_idx: int) -> np.ndarray | None:
    """The dispatch part of counter records, in the kernel_dispatch column layout."""
    if not records:
        return None
    rows = [(d.start_timestamp, d.end_timestamp, r.thread_id, d.correlation_id.internal,
             d.dispatch_info.agent_id.handle, d.dispatch_info.queue_id.handle, r.stream_id.handle,
             d.dispatch_info.kernel_id, d.dispatch_info.dispatch_id,
             d.dispatch_info.grid_size.x, d.dispatch_info.grid_size.y, d.dispatch_info.grid_size.z,
             d.dispatch_info.workgroup_size.x, d.dispatch_info.workgroup_size.y,
             d.dispatch_info.workgroup_size.z, d.dispatch_info.group_segment_size,
             d.dispatch_info.private_segment_size)
            for r in records for d in (r.dispatch_data,)]
    return _int_matrix(rows, len(rows), path, "counter_collection", p_idx)


def _resolve(a: np.ndarray, agents: _Agents, symbols: _Symbols, path: str, p_idx: int,
             what: str) -> dict[str, np.ndarray]:
    """Named, contiguous columns of a record matrix with symbols and agents looked up."""
    col = dict(zip(DISPATCH_FIELDS, np.ascontiguousarray(a.T)))
    kid = col["dispatch_info.kernel_id"]
    spos, sfound = lookup_sorted(symbols.sorted_ids, kid)
    if not sfound.all():
        i = int(np.flatnonzero(~sfound)[0])
        raise GemmperfInputError(
            path, f"kernel_id {kid[i]} is not in kernel_symbols "
                  f"({int((~sfound).sum())} record(s) affected)",
            record=f"process {p_idx}, {what}[{i}]")
    handle = col["dispatch_info.agent_id.handle"]
    apos, afound = lookup_sorted(agents.sorted_handles, handle)
    if not afound.all():
        i = int(np.flatnonzero(~afound)[0])
        raise GemmperfInputError(path, f"agent handle {handle[i]} is not in agents[]",
                                 record=f"process {p_idx}, {what}[{i}]")
    return {
        "start_ns": col["start_timestamp"], "end_ns": col["end_timestamp"],
        "thread_id": col["thread_id"],
        "correlation_id": col["correlation_id.internal"],
        "agent": agents.gpu_index[apos],
        "agent_pos": apos,
        "queue": col["dispatch_info.queue_id.handle"],
        "stream": col["stream_id.handle"],
        "kernel_id": kid,
        "dispatch_id": col["dispatch_info.dispatch_id"],
        "grid_x": col["dispatch_info.grid_size.x"], "grid_y": col["dispatch_info.grid_size.y"],
        "grid_z": col["dispatch_info.grid_size.z"],
        "wg_x": col["dispatch_info.workgroup_size.x"], "wg_y": col["dispatch_info.workgroup_size.y"],
        "wg_z": col["dispatch_info.workgroup_size.z"],
        "lds_bytes": col["dispatch_info.group_segment_size"],
        "scratch_bytes": col["dispatch_info.private_segment_size"],
        "vgpr": symbols.regs[spos, 0], "agpr": symbols.regs[spos, 1], "sgpr": symbols.regs[spos, 2],
        "kernel": symbols.kernel[spos], "kernel_short": symbols.short[spos],
        "_arch": agents.arch[apos] if len(agents.arch) else np.array([], dtype=object),
    }


_INT_COLS = ("thread_id", "correlation_id", "agent", "queue", "stream", "kernel_id", "dispatch_id",
             "grid_x", "grid_y", "grid_z", "wg_x", "wg_y", "wg_z", "lds_bytes", "scratch_bytes",
             "vgpr", "agpr", "sgpr")


def _typed_frame(rows: list[dict[str, Any]], schema: dict[str, str], **scalars: Any) -> pd.DataFrame:
    """Small frame built with its final dtypes, so finalize_* has nothing left to convert."""
    out: dict[str, Any] = {}
    for col, dtype in schema.items():
        values = [scalars[col]] * len(rows) if col in scalars else [r.get(col) for r in rows]
        out[col] = pd.Categorical(values) if dtype == "category" else pd.array(values, dtype=dtype)
    return pd.DataFrame(out)


def _nullable(values: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(values, values == _MISSING)


def _per_process(values: list, proc: np.ndarray) -> pd.Categorical:
    """Categorical of one value per process, broadcast to rows by process index."""
    codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
    if len(uniques) == 0:
        return pd.Categorical.from_codes(np.full(len(proc), -1), categories=[])
    return pd.Categorical.from_codes(codes[proc], categories=pd.Index(uniques, dtype=object))


def _key_columns(proc: np.ndarray, kernel: np.ndarray, names: _NameTable, hosts: list, pids: list,
                 path: str) -> dict[str, Any]:
    """The dispatch columns that follow from a row's process index and kernel name code: the
    table's, and a slim read's key rows' (``rocprof_slim.coded_dispatches``), alike."""
    n = len(proc)
    out: dict[str, Any] = {
        "source": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[SOURCE]),
        "file": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[path]),
        "host": _per_process(hosts, proc),
        "pid": pd.arrays.IntegerArray(
            np.array([-1 if p is None else p for p in pids], dtype=np.int64)[proc],
            np.array([p is None for p in pids])[proc]),
        "kernel": names.categorical(kernel),
    }
    # provenance that only discovery knows; typed here so finalize has nothing to convert
    for c in ("rank", "run", "pass"):
        out[c] = pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    out["point"] = pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), categories=[])
    return out


def _dispatch_frame(parts: list[dict[str, np.ndarray]], names: _NameTable, hosts: list,
                    pids: list, path: str) -> pd.DataFrame:
    col = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    keys = _key_columns(col["proc"], col["kernel"], names, hosts, pids, path)
    out: dict[str, Any] = {
        **{c: keys[c] for c in ("source", "file", "host", "pid")},
        "gpu_arch": pd.Categorical(col["_arch"]),
        "kernel": keys["kernel"],
        "kernel_short": names.categorical(col["kernel_short"]),
        "start_ns": col["start_ns"], "end_ns": col["end_ns"],
    }
    for c in _INT_COLS:
        out[c] = _nullable(col[c])
    for c in ("rank", "run", "pass", "point"):
        out[c] = keys[c]
    return pd.DataFrame(out)


def _counter_frame(proc: _Process, cols: dict[str, np.ndarray], agents: _Agents,
                   names: _NameTable, path: str, p_idx: int) -> pd.DataFrame:
    recs = proc.callback_records.counter_collection
    info = {(c.agent_id.handle, c.id.handle): c.name for c in proc.counters}
    by_id: dict[int, set[str]] = {}
    for (_, cid), name in info.items():
        by_id.setdefault(cid, set()).add(name)
    lengths = np.fromiter((len(r.records) for r in recs), dtype=np.int64, count=len(recs))
    rec_idx = np.repeat(np.arange(len(recs)), lengths)
    cid = np.fromiter((v.counter_id.handle for v in chain.from_iterable(r.records for r in recs)),
                      dtype=np.int64, count=int(lengths.sum()))
    val = np.fromiter((v.value for v in chain.from_iterable(r.records for r in recs)),
                      dtype=np.float64, count=int(lengths.sum()))
    # one value per (record, counter): rocprofv3's CSV sums over dimensions/instances the same way
    summed = (pd.DataFrame({"rec": rec_idx, "cid": cid, "value": val})
              .groupby(["rec", "cid"], sort=False, as_index=False)["value"].sum())
    rec = summed["rec"].to_numpy()
    handle = agents.sorted_handles[cols["agent_pos"][rec]]
    pairs, pair_code = np.unique(np.stack([handle, summed["cid"].to_numpy()], axis=1), axis=0,
                                 return_inverse=True)
    pair_names = []
    for h, c in pairs.tolist():  # per distinct (agent, counter), not per record
        name = info.get((h, c))
        if name is None:
            alts = by_id.get(c, set())
            if len(alts) != 1:
                i = int(np.flatnonzero((handle == h) & (summed["cid"].to_numpy() == c))[0])
                raise GemmperfInputError(
                    path, f"counter id {c} (agent handle {h}) is not described in counters[]",
                    record=f"process {p_idx}, callback_records.counter_collection[{rec[i]}]")
            name = next(iter(alts))
        pair_names.append(name)
    cnames = np.array(pair_names, dtype=object)[pair_code.reshape(-1)]
    start = cols["start_ns"][rec]
    end = cols["end_ns"][rec]
    kernel_cats = names.categorical(cols["kernel"][rec])
    return pd.DataFrame({
        "source": SOURCE, "file": path,
        "agent": _nullable(cols["agent"][rec]),
        "dispatch_id": _nullable(cols["dispatch_id"][rec]),
        "correlation_id": _nullable(cols["correlation_id"][rec]),
        "kernel_id": _nullable(cols["kernel_id"][rec]),
        "kernel": kernel_cats,
        "start_ns": _nullable(start), "end_ns": _nullable(end),
        "counter": pd.Categorical(cnames),
        "value": summed["value"].to_numpy(),
    })


# --------------------------------------------------------------------------------------------
# Error messages

_WHERE_RX = re.compile(r"^\$\.rocprofiler-sdk-tool\[(\d+)\]\.?(.*)$")
_INDEX_RX = re.compile(r"\[(\d+)\]")


def _split_where(where: str) -> tuple[str | None, str]:
    """``$.rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[3].dispatch_info.kernel_id`` ->
    (``process 0, buffer_records.kernel_dispatch[3]``, ``dispatch_info.kernel_id``): the record is
    the path up to its first list index, the field is the rest."""
    m = _WHERE_RX.match(where)
    if m is None:
        return None, ""
    rest = m.group(2)
    idx = _INDEX_RX.search(rest)
    if idx is None:  # e.g. metadata.pid: the process itself is the record
        return f"process {m.group(1)}", rest
    return f"process {m.group(1)}, {rest[:idx.end()]}", rest[idx.end():].lstrip(".")


def _validation_error(path: str, msg: str, data: bytes) -> GemmperfInputError:
    """One line naming the record and the field: msgspec reports ``<reason> - at `$<path>```."""
    if " - at `$" not in msg:  # the top level itself has the wrong type
        return GemmperfInputError(path, f"{_not_rocprof_message(data)} ({msg})")
    reason, _, where = msg.rpartition(" - at `")
    where = where.rstrip("`")
    record, field = _split_where(where)
    if field:
        if "int` >=" in reason or "int` <=" in reason:
            reason += " (rocprofv3 writes unsigned 64-bit values read as int64)"
        return GemmperfInputError(path, f"field {field!r}: {reason} (at {where})", record=record)
    return GemmperfInputError(path, f"unexpected rocprofv3 JSON layout: {reason} (at {where})",
                              record=record)


def _not_rocprof_message(data: bytes) -> str:
    head = data[:65536]
    if b'"traceEvents"' in head or b'"schemaVersion"' in head and b'"deviceProperties"' in head:
        return ("this is a PyTorch profiler / Chrome trace (traceEvents), not rocprofv3 JSON "
                "output; read it as a torch trace")
    return f"not rocprofv3 JSON output: no top-level '{TOOL_KEY}' key"
