"""Kineto trace bytes -> typed events: the msgspec schema, the decoder and the event buckets.

Split from :mod:`pytest_gemmperf.traces.torch_trace` (the public entry). The schema names only
the keys the reader uses; msgspec skips everything else without building Python objects, and
``ts``/``dur`` stay undecoded number text (``msgspec.Raw``) so that
:mod:`~pytest_gemmperf.traces.jsonnum` converts them to integer ns exactly. A file that is not
JSON, not UTF-8, nested too deeply, a rocprofv3 JSON or has no ``traceEvents`` is one
:class:`~pytest_gemmperf.errors.GemmperfInputError` line naming the file.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.jsonkeys import KeyScan, check_unique_keys
from pytest_gemmperf.traces.jsonnum import ABSENT_RAW


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
#: the runtime/profiler version keys copied into ``meta["versions"]``
_VERSION_KEYS = ("schemaVersion", "roctracer_version", "rocprofiler_sdk_version",
                 "hip_runtime_version", "hip_driver_version", "cuda_runtime_version",
                 "cuda_driver_version", "cupti_version")


def _decode(path: str, raw: bytes) -> _Doc:
    if raw.startswith(_BOM):  # editors on Windows add one; JSON parsers reject it
        raw = raw[len(_BOM):]
    if not raw.strip():
        raise GemmperfInputError(path, "empty file")
    keys = KeyScan(raw)  # repeated keys, looked for while the decoder runs
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
    finally:
        keys.wait()  # never leave the scan running past this call
    if isinstance(doc, list):  # bare Chrome-trace array
        doc = _Doc(traceEvents=doc)
    if doc.rocprofiler_sdk_tool is not None:
        raise GemmperfInputError(path, "this is a rocprofv3 JSON (rocprofiler-sdk-tool), not a "
                                       "PyTorch profiler trace")
    if doc.traceEvents is None:
        raise GemmperfInputError(path, "not a PyTorch profiler trace: no 'traceEvents'")
    # the decoder kept the last of a repeated key silently ("dur" twice): refuse the file
    check_unique_keys(keys, path, lambda where: _event_record(doc.traceEvents, where))
    return doc


_EVENT_PATH = re.compile(r"^\$(?:\.traceEvents)?\[(\d+)\](.*)$")


def _event_record(events: list[_Event], json_path: str) -> str | None:
    """``$.traceEvents[12].args`` -> ``traceEvents[12], kernel 'gemm', args`` (the event's
    category and name, as the readers' other messages name events)."""
    m = _EVENT_PATH.match(json_path)
    if m is None or int(m.group(1)) >= len(events):
        return None
    ev = events[int(m.group(1))]
    name = ev.name if len(ev.name) <= 80 else ev.name[:77] + "..."
    inner = m.group(2).lstrip(".")
    return f"traceEvents[{m.group(1)}], {ev.cat} {name!r}" + (f", {inner}" if inner else "")


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
