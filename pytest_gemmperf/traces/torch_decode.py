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
from collections import Counter
from collections.abc import Callable
from itertools import chain
from typing import Annotated, Any

import msgspec

from pytest_gemmperf.collector import gc_paused
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.jsonkeys import find_repeated_key
from pytest_gemmperf.traces.fileio import iter_maybe_gzip
from pytest_gemmperf.traces.jsonnum import ABSENT_RAW
from pytest_gemmperf.traces.jsonstream import (FreeMemory, JsonPath, JsonSplitter, Repeat,
                                                StreamDecodeError, decode_error,
                                                refuse_repeated_key)

TOOL_KEY = "rocprofiler-sdk-tool"


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


#: an id the readers take: a JSON integer in int64 (:func:`~pytest_gemmperf.traces.jsonnum.exact_ints`)
_Int64 = Annotated[int, msgspec.Meta(ge=-2 ** 63, le=2 ** 63 - 1)]
#: launch dimensions whose products (grid * block) stay in int64: each below 2**31
_Dims = Annotated[list[Annotated[int, msgspec.Meta(ge=0, le=2 ** 31 - 1)]], msgspec.Meta(max_length=3)]


class _CheckedArgs(msgspec.Struct, gc=False):
    """:class:`_Args` for a slim read: less what only a full read uses (operators' input shapes
    and types, process labels: skipped as msgspec skips any key a schema does not name, their
    JSON still checked and their text still scanned for a repeated key), and typed as the
    readers' checks ask (ids int64 JSON integers, launch dimensions lists of up to 3 integers
    whose products fit int64): an event that decodes so passes each of those checks, wherever
    it is, so a slim read skips them. Untracked by the cyclic collector (``gc=False``): decoded
    JSON holds no cycles, and tracking millions of events costs a tenth of their decode and
    release."""

    device: _Int64 | None = None
    stream: _Int64 | None = None
    correlation: _Int64 | None = None
    external_id: _Int64 | None = msgspec.field(default=None, name="External id")
    grid: _Dims | None = None
    block: _Dims | None = None
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    group_size: _Int64 | None = msgspec.field(default=None, name="Group size")
    coll_dtype: Any = msgspec.field(default=None, name="dtype")
    in_nelems: _Int64 | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: _Int64 | None = msgspec.field(default=None, name="Out msg nelems")
    in_split: Any = msgspec.field(default=None, name="In split size")
    out_split: Any = msgspec.field(default=None, name="Out split size")


class _CheckedEvent(msgspec.Struct, gc=False):
    """:class:`_Event` typed as the checks ask (``pid``/``tid``: an int64 or a label)."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: _Int64 | str | None = None
    tid: _Int64 | str | None = None
    ts: msgspec.Raw = ABSENT_RAW
    dur: msgspec.Raw = ABSENT_RAW
    args: _CheckedArgs | None = None


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
_EVENTS = msgspec.json.Decoder(list[_Event])
_CHECKED_EVENTS = msgspec.json.Decoder(list[_CheckedEvent])
_DECODER_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)


def _decode_slim(data: bytes) -> list:
    """A run of events for a slim read: as :class:`_CheckedEvent` where every value has the
    checked types (:func:`checked`), else as :class:`_Event`, whose decode (or its error) is
    then the answer: a stricter decode that fails says nothing about the text."""
    try:
        return _CHECKED_EVENTS.decode(data)
    except _DECODER_ERRORS:
        return _EVENTS.decode(data)


def checked(events: list) -> bool:
    """Whether a run of events decoded with the checked types (:class:`_CheckedEvent`): its ids
    are int64 integers (or pid/tid labels) and its launch dimensions' products fit int64."""
    return bool(events) and type(events[0]) is _CheckedEvent
#: the runtime/profiler version keys copied into ``meta["versions"]``
_VERSION_KEYS = ("schemaVersion", "roctracer_version", "rocprofiler_sdk_version",
                 "hip_runtime_version", "hip_driver_version", "cuda_runtime_version",
                 "cuda_driver_version", "cupti_version")


def _stream_at(decode: Callable[[bytes], list]) -> Callable[[JsonPath], Callable[[bytes], list] | None]:
    """Where the events are (``traceEvents``, or a bare top-level array: read a run of events at
    a time with ``decode``)."""
    def at(path: JsonPath) -> Callable[[bytes], list] | None:
        if path == ("traceEvents",) or path == ():
            return decode
        if path == (TOOL_KEY,):  # refused before its (large) process records are read
            raise _NotKineto()
        return None
    return at


class _NotKineto(Exception):
    pass


def decode_stream(path: str, consume: Callable[[int, list[_Event]], None],
                  slim: bool = False) -> tuple[_Doc, int]:
    """Decode the Kineto trace at ``path`` a run of events at a time, calling
    ``consume(first, events)`` for each (``events[0]`` is ``traceEvents[first]``); returns the
    metadata (its ``traceEvents`` empty) and the number of events. ``slim``: the events as
    :class:`_CheckedEvent` where they have its types (without the operators' shapes, see
    :func:`_decode_slim`).

    Every check of a whole-document decode is kept, in its order of precedence: the file's
    syntax and types first (wherever in the file), a rocprofv3 JSON or a missing
    ``traceEvents``, a key written twice anywhere, and only then the first error ``consume``
    raised (held until the file was read to its end)."""
    with gc_paused():
        return _decode_stream(path, consume, _decode_slim if slim else _EVENTS.decode)


def _decode_stream(path: str, consume: Callable[[int, list[_Event]], None],
                   decode: Callable[[bytes], list]) -> tuple[_Doc, int]:
    splitter = JsonSplitter(iter_maybe_gzip(path), _stream_at(decode), shallow=1)
    held: GemmperfInputError | None = None
    repeat: Repeat | None = None  # the first in the events
    free = FreeMemory()
    n = 0
    try:
        for piece in splitter.pieces():
            try:
                if held is None and repeat is None:
                    consume(n, piece.items)
            except GemmperfInputError as exc:
                held = exc
            finally:
                # in the same thread, after the events were used: on a second thread beside the
                # decode (which holds the GIL) the whole read cost a fifth more CPU and wall
                hit = find_repeated_key(piece.data)
            if hit is not None and repeat is None:
                record = _event_record(piece.items, n, hit.path) or hit.path
                repeat = (piece.offset - 1 + hit.offset, hit.key, record)
            n += len(piece.items)
            del piece
            free.after_run()
        free.finish()
    except _NotKineto:
        raise GemmperfInputError(path, _ROCPROF_GIVEN) from None
    except StreamDecodeError as exc:
        raise _decode_error(path, exc.exc, exc.message) from None
    doc = _decode_skeleton(path, splitter, n)
    # the decoder kept the last of a repeated key silently ("dur" twice): refuse the file
    refuse_repeated_key(path, splitter, repeat, lambda where: None)
    if held is not None:
        raise held
    return doc, n


_ROCPROF_GIVEN = ("this is a rocprofv3 JSON (rocprofiler-sdk-tool), not a PyTorch profiler "
                  "trace")


def _decode_skeleton(path: str, splitter: JsonSplitter, n_events: int) -> _Doc:
    """The document without its events: metadata keys, ``traceEvents`` as ``[]``."""
    raw = splitter.skeleton
    if not raw.strip() and not n_events:
        raise GemmperfInputError(path, "empty file")
    try:
        doc = _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError) as exc:
        raise _decode_error(path, exc, splitter.skeleton_error(exc)) from None
    if isinstance(doc, list):  # bare Chrome-trace array
        doc = _Doc(traceEvents=doc)
    if doc.rocprofiler_sdk_tool is not None:
        raise GemmperfInputError(path, _ROCPROF_GIVEN)
    if doc.traceEvents is None:
        raise GemmperfInputError(path, "not a PyTorch profiler trace: no 'traceEvents'")
    return doc


def _decode_error(path: str, exc: BaseException, message: str) -> GemmperfInputError:
    """One line for a decoder's error (``message``: its text in document terms)."""
    if isinstance(exc, msgspec.ValidationError):
        return GemmperfInputError(path, f"not a PyTorch profiler trace: {message}")
    return decode_error(path, exc, message, syntax="not valid JSON",
                        nesting="no profiler writes such nesting")


_EVENT_PATH = re.compile(r"^\$\[(\d+)\](.*)$")


def _event_record(events: list[_Event], first: int, json_path: str) -> str | None:
    """``$[12].args`` in a run of events starting at ``traceEvents[first]`` ->
    ``traceEvents[first + 12], kernel 'gemm', args`` (the event's category and name, as the
    readers' other messages name events)."""
    m = _EVENT_PATH.match(json_path)
    if m is None or int(m.group(1)) >= len(events):
        return None
    ev = events[int(m.group(1))]
    name = ev.name if len(ev.name) <= 80 else ev.name[:77] + "..."
    inner = m.group(2).lstrip(".")
    return (f"traceEvents[{first + int(m.group(1))}], {ev.cat} {name!r}"
            + (f", {inner}" if inner else ""))


def bucket_events(events: list[_Event], uncounted: frozenset[str], quiet_phases: frozenset[str],
                  count: bool = True) -> tuple[dict[str, list[_Event]], Counter]:
    """Complete ("X") events bucketed by category (each in event order), and (``count``; else
    an empty Counter) the number of events per category outside ``uncounted`` whose phase is
    not in ``quiet_phases``."""
    buckets: dict[str, list[_Event]] = {}
    for e in events:
        if e.ph == "X":
            b = buckets.get(e.cat)
            if b is None:
                buckets[e.cat] = [e]
            else:
                b.append(e)
    if not count:
        return buckets, Counter()
    return buckets, Counter(e.cat for e in events
                            if e.ph not in quiet_phases and e.cat not in uncounted)


def _pick(by_cat: dict[str, list[_Event]], cats: frozenset[str]) -> list[_Event]:
    found = [by_cat[c] for c in sorted(cats) if c in by_cat]
    return found[0] if len(found) == 1 else list(chain.from_iterable(found))
