"""Typed ``msgspec`` schema of rocprofv3 ``--output-format json`` (rocprofv3-formats.md §4).

Only the fields the reader uses are declared, so the C decoder skips the rest of the document
without building Python objects. Every integer is range-checked by the decoder itself
(:data:`U63`): rocprofiler-sdk writes unsigned 64-bit timestamps, ids, handles and sizes, and
the tables hold int64, so a negative value (which would also collide with the ``_MISSING``
sentinel of optional fields) or one above ``2**63 - 1`` is a ``ValidationError`` naming the
exact JSON path; booleans, floats and strings are rejected by type (strict mode).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Struct, field

# sentinel for optional integer fields; handles and ids are never negative
from pytest_gemmperf.traces.slim_arrays import MISSING as _MISSING

TOOL_KEY = "rocprofiler-sdk-tool"
INT64_MAX = 2 ** 63 - 1
#: every integer field: rocprofiler-sdk writes uint64 values (timestamps, ids, handles, sizes).
#: The decoder checks the range in C, so a negative number (which would collide with the
#: _MISSING sentinel) or one beyond int64 (which would wrap in the int64 tables) is an error
#: naming the record and field, and booleans and floats are rejected by type (strict mode).
U63 = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]

#: the dispatch record fields the reader pulls into its int64 matrices, in their column order
DISPATCH_FIELDS = (
    "start_timestamp", "end_timestamp", "thread_id", "correlation_id.internal",
    "dispatch_info.agent_id.handle", "dispatch_info.queue_id.handle", "stream_id.handle",
    "dispatch_info.kernel_id", "dispatch_info.dispatch_id",
    "dispatch_info.grid_size.x", "dispatch_info.grid_size.y", "dispatch_info.grid_size.z",
    "dispatch_info.workgroup_size.x", "dispatch_info.workgroup_size.y",
    "dispatch_info.workgroup_size.z",
    "dispatch_info.group_segment_size", "dispatch_info.private_segment_size",
)

# --------------------------------------------------------------------------------------------
# Typed schema: only the fields the reader uses. gc=False: these objects never form cycles.


class _Handle(Struct, frozen=True, gc=False):
    handle: U63 = _MISSING


class _XYZ(Struct, frozen=True, gc=False):
    x: U63 = _MISSING
    y: U63 = _MISSING
    z: U63 = _MISSING


class _Corr(Struct, frozen=True, gc=False):
    internal: U63 = _MISSING


_NO_HANDLE = _Handle()
_NO_XYZ = _XYZ()
_NO_CORR = _Corr()


class _DispatchInfo(Struct, gc=False):
    agent_id: _Handle
    kernel_id: U63
    queue_id: _Handle = _NO_HANDLE
    dispatch_id: U63 = _MISSING
    private_segment_size: U63 = _MISSING
    group_segment_size: U63 = _MISSING
    workgroup_size: _XYZ = _NO_XYZ
    grid_size: _XYZ = _NO_XYZ


class _Dispatch(Struct, gc=False):
    start_timestamp: U63
    end_timestamp: U63
    dispatch_info: _DispatchInfo
    thread_id: U63 = _MISSING
    correlation_id: _Corr = _NO_CORR
    stream_id: _Handle = _NO_HANDLE  # absent in ROCm 6.2


class _CounterValue(Struct, gc=False):
    counter_id: _Handle
    value: float


class _DispatchData(Struct, gc=False):
    dispatch_info: _DispatchInfo
    correlation_id: _Corr = _NO_CORR
    start_timestamp: U63 = _MISSING
    end_timestamp: U63 = _MISSING


class _CounterRecord(Struct, gc=False):
    dispatch_data: _DispatchData
    records: list[_CounterValue]
    thread_id: U63 = _MISSING
    stream_id: _Handle = _NO_HANDLE


class _CallbackRecords(Struct, gc=False):
    counter_collection: list[_CounterRecord] = []


class _BufferRecords(Struct, gc=False):
    kernel_dispatch: list[_Dispatch] = []


class _Symbol(Struct, gc=False):
    kernel_id: U63
    kernel_name: str | None = None
    formatted_kernel_name: str | None = None
    demangled_kernel_name: str | None = None
    truncated_kernel_name: str | None = None
    arch_vgpr_count: U63 = _MISSING
    accum_vgpr_count: U63 = _MISSING
    sgpr_count: U63 = _MISSING


class _Agent(Struct, gc=False):
    id: _Handle
    type: U63 = 0
    name: str | None = None
    product_name: str | None = None
    node_id: U63 | None = None
    logical_node_id: U63 | None = None
    # -1 on CPU agents; not written by older releases (derived then)
    gpu_index: Annotated[int, msgspec.Meta(ge=-1, le=INT64_MAX)] | None = None
    gfx_target_version: U63 | None = None
    cu_count: U63 | None = None
    simd_per_cu: U63 | None = None
    wave_front_size: U63 | None = None
    max_engine_clk_fcompute: U63 | None = None
    num_xcc: U63 | None = None


class _CounterInfo(Struct, gc=False):
    agent_id: _Handle
    id: _Handle
    name: str


class _Node(Struct, gc=False):
    hostname: str | None = None


class _Metadata(Struct, gc=False):
    pid: U63 | None = None
    init_time: U63 | None = None
    fini_time: U63 | None = None
    node: _Node | None = None  # from ROCm 6.3 on
    command: list[str] | None = None
    config: dict[str, Any] | None = None


class _Process(Struct, gc=False):
    metadata: _Metadata = field(default_factory=_Metadata)
    agents: list[_Agent] = []
    counters: list[_CounterInfo] = []
    kernel_symbols: list[_Symbol] = []
    callback_records: _CallbackRecords = field(default_factory=_CallbackRecords)
    buffer_records: _BufferRecords = field(default_factory=_BufferRecords)


class _Root(Struct, gc=False):
    tool: list[_Process] | None = field(name=TOOL_KEY, default=None)


_DECODER = msgspec.json.Decoder(_Root)
