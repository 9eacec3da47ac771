"""Streamed JSON reading: the splitter, the block reader and the readers built on them.

Whatever the block size, a streamed read must give what a whole-document read gives: the same
elements, the same metadata, the same error line (byte offsets and record paths in document
terms), and memory bounded by the block size rather than by the file.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces import fileio
from pytest_gemmperf.traces.fileio import iter_maybe_gzip, read_maybe_gzip
from pytest_gemmperf.traces.jsonstream import JsonSplitter, StreamDecodeError
from pytest_gemmperf.traces.rocprof_json import read_rocprof_json
from pytest_gemmperf.traces.torch_trace import read_torch_trace

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
_ANY = msgspec.json.Decoder(list).decode


def _blocks(data: bytes, n: int):
    for i in range(0, len(data), n):
        yield data[i:i + n]


def _split(data: bytes, n: int) -> tuple[list, JsonSplitter]:
    sp = JsonSplitter(_blocks(data, n), lambda p: _ANY if p in ((), ("traceEvents",)) else None, 1)
    items: list = []
    end = 0  # of the array being read (a damaged frame may hold several arrays)
    for piece in sp.pieces():
        assert piece.first in (0, end)
        assert msgspec.json.decode(piece.data) == piece.items
        items += piece.items
        end = piece.first + len(piece.items)
    return items, sp


# strings that look like structure: brackets, braces, commas, colons, escaped quotes and
# backslashes, the "},{" the fast path looks for, a key that reads "traceEvents"
_TRICKY = st.sampled_from(['},{', '}, {', '"', '\\', '\\"', '\\\\', '[', ']', '{', '}', ',', ':',
                           'traceEvents', '"traceEvents": [', 'é', '\u2028', ' ', '\n'])
_TEXT = st.lists(st.one_of(_TRICKY, st.text(max_size=4)), max_size=6).map("".join)
_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), _TEXT,
                  st.floats(allow_nan=False, allow_infinity=False))
_VALUE = st.recursive(_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)), max_leaves=12)
_EVENT = st.dictionaries(_TEXT, _VALUE, max_size=5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(st.one_of(_EVENT, _VALUE), max_size=25),
       before=st.dictionaries(_TEXT.filter(lambda k: k != "traceEvents"), _VALUE, max_size=3),
       after=st.dictionaries(_TEXT.filter(lambda k: k != "traceEvents"), _VALUE, max_size=3),
       indent=st.sampled_from([None, 0, 2]), bare=st.booleans(),
       block=st.sampled_from([1, 2, 3, 7, 64, 1 << 20]))
def test_any_document_splits_into_its_elements_and_skeleton(events, before, after, indent, bare,
                                                             block):
    doc = events if bare else {**before, "traceEvents": events, **after}
    text = json.dumps(doc, indent=indent, ensure_ascii=False).encode()
    items, sp = _split(text, block)
    assert items == json.loads(text) if bare else items == json.loads(text)["traceEvents"]
    skeleton = json.loads(sp.skeleton)
    if bare:
        assert skeleton == []
    else:
        assert skeleton == {**before, "traceEvents": [], **after}


_DOC = json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "x },{ y"}],
                   "traceEvents": [{"ph": "X", "name": f'k{i} "}},{{" \\ [', "args": {"l": [{"a": i}]}}
                                   for i in range(60)],
                   "traceName": "t"}, indent=1).encode()


@settings(max_examples=200, deadline=None)
@given(at=st.integers(0, len(_DOC) - 1), byte=st.sampled_from(list(b'{}[],:"\\x0 ')),
       how=st.sampled_from(["replace", "insert", "delete", "truncate"]),
       block=st.sampled_from([5, 97, 1 << 20]))
# a comma or bracket with no element before it, met in a block after the last boundary:
# "[ ," (a leading comma), "}, ," (two commas) and "}, ]" (a trailing comma)
@example(at=108, byte=ord(","), how="replace", block=5)
@example(at=111, byte=ord(","), how="replace", block=5)
@example(at=225, byte=ord(","), how="insert", block=5)
@example(at=226, byte=ord(","), how="replace", block=5)
@example(at=225, byte=ord("]"), how="replace", block=5)
@example(at=226, byte=ord("]"), how="insert", block=5)
def test_damaged_document_fails_with_the_whole_document_message(at, byte, how, block):
    """A damaged document is refused at the byte a whole-document decode names (the wording may
    differ: the decoder sees one run of elements) or, where the damage leaves valid JSON, read
    as that JSON."""
    data = {"replace": _DOC[:at] + bytes([byte]) + _DOC[at + 1:],
            "insert": _DOC[:at] + bytes([byte]) + _DOC[at:],
            "delete": _DOC[:at] + _DOC[at + 1:], "truncate": _DOC[:at]}[how]
    try:
        whole = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        whole = exc
    try:
        items, sp = _split(data, block)
        streamed = msgspec.json.decode(sp.skeleton)
    except StreamDecodeError as exc:
        streamed = exc.exc
        message = exc.message
    except msgspec.DecodeError as exc:
        streamed = exc
        message = sp.skeleton_error(exc)
    if isinstance(whole, Exception):
        assert isinstance(streamed, Exception), "a damaged document was read"
        at_byte = re.search(r"\(byte \d+\)", str(whole))
        if at_byte is None:
            assert message == str(whole)
        else:
            assert at_byte.group(0) in message, (message, str(whole))
    elif isinstance(streamed, Exception):
        # valid JSON, but no longer a frame around one array (e.g. "traceEvents" now nests)
        pytest.fail(f"valid JSON refused: {message}")
    elif isinstance(whole, dict) and isinstance(whole.get("traceEvents"), list):
        assert items == whole["traceEvents"]


@pytest.mark.parametrize("text", [b'{"traceEvents": [ ,{"a": 1}]}', b'{"traceEvents": [,]}',
                                  b'{"traceEvents": [{"a": 1},  ,{"a": 2}]}',
                                  b'{"traceEvents": [{"a": 1}, {"a": 2},\n ]}',
                                  b'{"traceEvents": [{"a": 1},,]}'])
def test_a_missing_element_is_refused_at_the_whole_document_byte(text):
    """A comma or bracket with no element before it is a syntax error wherever the blocks end
    (a block may end just after the comma before it), named at the byte a whole-document decode
    names, by a typed decoder too (the syntax is wrong before any element's type is)."""
    class Ev(msgspec.Struct):
        a: int

    with pytest.raises(msgspec.DecodeError) as whole:
        msgspec.json.decode(text)
    at_byte = re.search(r"\(byte \d+\)", str(whole.value)).group(0)
    dec = msgspec.json.Decoder(list[Ev]).decode
    for block in range(1, len(text) + 1):
        sp = JsonSplitter(_blocks(text, block), lambda p: dec if p == ("traceEvents",) else None, 1)
        with pytest.raises(StreamDecodeError) as ei:
            list(sp.pieces())
        assert isinstance(ei.value.exc, msgspec.DecodeError), block
        assert at_byte in ei.value.message, (block, ei.value.message, str(whole.value))


def test_validation_error_names_the_element_in_the_document():
    class Ev(msgspec.Struct):
        a: int

    dec = msgspec.json.Decoder(list[Ev]).decode
    data = json.dumps({"traceEvents": [{"a": i} for i in range(1000)] + [{"a": "x"}]}).encode()
    sp = JsonSplitter(_blocks(data, 100), lambda p: dec if p == ("traceEvents",) else None, 1)
    with pytest.raises(StreamDecodeError) as ei:
        list(sp.pieces())
    assert "`$.traceEvents[1000].a`" in ei.value.message


def test_splitter_memory_is_bounded_by_the_block_not_the_document():
    """The buffer never holds much more than a block and an element, however long the array."""
    events = b",".join(b'{"ph":"X","name":"k%d","args":{"s":"},{"}}' % i for i in range(200_000))
    data = b'{"a":1,"traceEvents":[' + events + b'],"z":2}'
    sp = JsonSplitter(_blocks(data, 4096), lambda p: _ANY if p == ("traceEvents",) else None, 1)
    peak = 0
    n = 0
    for piece in sp.pieces():
        peak = max(peak, len(piece.data), len(sp._buf))
        n += len(piece.items)
    assert n == 200_000
    assert peak < 3 * 4096, peak
    assert json.loads(sp.skeleton) == {"a": 1, "traceEvents": [], "z": 2}


# ------------------------------------------------------------------------- the block reader


@pytest.mark.parametrize("block", [1, 3, 1000, 1 << 20])
@pytest.mark.parametrize("kind", ["plain", "gzip", "two-members", "padded"])
def test_blocks_join_to_the_whole_read(tmp_path, block, kind):
    data = os.urandom(3000).hex().encode() * 3
    raw = {"plain": data, "gzip": gzip.compress(data),
           "two-members": gzip.compress(data[:5000]) + gzip.compress(data[5000:]),
           "padded": gzip.compress(data) + b"\0" * 512}[kind]
    p = tmp_path / "f"
    p.write_bytes(raw)
    blocks = list(iter_maybe_gzip(str(p), block_bytes=block))
    assert b"".join(blocks) == read_maybe_gzip(str(p)) == data
    assert max(map(len, blocks)) <= max(block, 2)


@pytest.mark.parametrize("damage, message, whole", [
    (lambda g: g[:-20], "corrupt or truncated gzip", False),
    (lambda g: g[:-8] + bytes([g[-8] ^ 1]) + g[-7:], "incorrect data check", False),
    (lambda g: g + b"junk", "garbage after the compressed stream", True),
])
def test_damaged_gzip_is_refused_before_its_damaged_block_is_given(tmp_path, damage, message, whole):
    data = os.urandom(50_000).hex().encode()
    p = tmp_path / "f.gz"
    p.write_bytes(damage(gzip.compress(data)))
    got = b""
    with pytest.raises(GemmperfInputError, match=message):
        for block in iter_maybe_gzip(str(p), block_bytes=10_000):
            got += block
    assert data.startswith(got)
    assert (len(got) == len(data)) == whole


def test_gzip_bomb_stops_at_the_limit_in_blocks(tmp_path):
    p = tmp_path / "bomb.gz"
    p.write_bytes(gzip.compress(b"\0" * 50_000_000))
    seen = 0
    with pytest.raises(GemmperfInputError, match="beyond the 1,000,000-byte limit"):
        for block in iter_maybe_gzip(str(p), max_bytes=1_000_000, block_bytes=65536):
            seen += len(block)
    assert seen <= 1_000_000


# ------------------------------------------------------------------------- the readers


def _same_trace(a, b) -> None:
    assert a.dispatches.equals(b.dispatches)
    assert a.agents.equals(b.agents)
    for key in a.meta:
        va, vb = a.meta[key], b.meta[key]
        if hasattr(va, "equals"):
            assert va.equals(vb), key
        else:
            assert va == vb, key


@pytest.mark.parametrize("fixture", sorted((FIXTURES / "torch").iterdir()), ids=lambda p: p.name)
def test_torch_reader_gives_the_same_trace_for_any_block_size(fixture, monkeypatch):
    whole = read_torch_trace(fixture)
    for block in (7, 301, 4096):
        monkeypatch.setattr(fileio, "BLOCK_BYTES", block)
        _same_trace(read_torch_trace(fixture), whole)


@pytest.mark.parametrize("fixture", sorted((FIXTURES / "rocprof_json").iterdir()), ids=lambda p: p.name)
def test_rocprof_reader_gives_the_same_trace_for_any_block_size(fixture, monkeypatch):
    whole = read_rocprof_json(fixture)
    for block in (7, 301, 4096):
        monkeypatch.setattr(fileio, "BLOCK_BYTES", block)
        again = read_rocprof_json(fixture)
        assert again.dispatches.equals(whole.dispatches)
        assert again.counters.equals(whole.counters)
        assert again.meta == whole.meta


def _kineto(n: int) -> dict:
    events = []
    for i in range(n):
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                       "ts": 1700000000000000.5 + 10 * i, "dur": 5.25,
                       "args": {"External id": i, "Input Dims": [[i % 7, 2]]}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": 1700000000000001.5 + 10 * i, "dur": 1,
                       "args": {"External id": i, "correlation": i}})
        events.append({"ph": "X", "cat": "kernel", "name": f'gemm "{i % 5}" }},{{', "pid": 0,
                       "tid": 7, "ts": 1700000000000003.125 + 10 * i, "dur": 2.5,
                       "args": {"device": 0, "stream": 7, "correlation": i,
                                "grid": [4, 1, 1], "block": [64, 1, 1]}})
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
            "cuda_runtime_version": 12000}


def test_a_bad_event_far_into_the_file_is_named_by_its_index(tmp_path, monkeypatch):
    doc = _kineto(400)
    assert doc["traceEvents"][999]["cat"] == "cpu_op"
    doc["traceEvents"][999]["dur"] = -1
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    monkeypatch.setattr(fileio, "BLOCK_BYTES", 2048)
    with pytest.raises(GemmperfInputError, match=r"traceEvents\[999\].*dur is negative"):
        read_torch_trace(p)


def test_a_repeated_key_far_into_the_file_is_found_with_its_document_offset(tmp_path, monkeypatch):
    text = json.dumps(_kineto(400))
    at = text.index('"name": "gemm \\"3\\"', 30_000)
    text = text[:at] + '"dur": 9, ' + text[at:]
    p = tmp_path / "t.json"
    p.write_text(text)
    offset = text.index('"dur"', at + 15)
    monkeypatch.setattr(fileio, "BLOCK_BYTES", 4096)
    with pytest.raises(GemmperfInputError, match=rf"'dur' appears twice.*byte {offset:,}"):
        read_torch_trace(p)


def test_metadata_after_the_events_is_read(tmp_path, monkeypatch):
    doc = _kineto(50)
    text = json.dumps({"traceEvents": doc["traceEvents"], "deviceProperties": doc["deviceProperties"],
                       "cuda_runtime_version": 12000, "baseTimeNanoseconds": 17})
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text.encode()))
    monkeypatch.setattr(fileio, "BLOCK_BYTES", 1000)
    t = read_torch_trace(p)
    assert t.meta["base_time_ns"] == 17 and t.meta["flavor"] == "cupti"
    assert t.agents["gpu_arch"].tolist() == [None] or len(t.agents) == 1
    assert len(t.dispatches) == 50


# VmHWM, not getrusage: ru_maxrss survives exec, so a child would report its parent's peak
_PEAK = textwrap.dedent("""
    import sys
    from pytest_gemmperf.traces.torch_trace import read_torch_trace
    import pandas, numpy, msgspec
    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    before = status("VmRSS")
    t = read_torch_trace(sys.argv[1])
    print(len(t.dispatches), status("VmHWM") - before)
""")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_reading_a_large_trace_takes_memory_well_below_its_size(tmp_path):
    """A 100 MB trace is read in less memory than its text: a whole-document read held the
    bytes and every event as Python objects (2.9x the file here); streamed, the peak is a few
    blocks and the column frames (0.6x)."""
    doc = _kineto(20_000)
    pad = "x" * 1500  # long python stacks, as traces with_stack carry: text no reader keeps
    for e in doc["traceEvents"]:
        e["args"]["stack"] = pad
    p = tmp_path / "big.json"
    p.write_text(json.dumps(doc))
    size = p.stat().st_size
    assert size > 50e6
    out = subprocess.run([sys.executable, "-c", _PEAK, str(p)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=True).stdout.split()
    n, grown = int(out[0]), int(out[1])
    assert n == 20_000
    assert grown < 0.8 * size, f"peak grew by {grown / 1e6:.0f} MB reading {size / 1e6:.0f} MB"
