"""Repeated keys in JSON objects: a vectorized scan of the raw bytes, run after a parser accepted them.

Every JSON parser we use (``msgspec``, ``json``) keeps the *last* value of a key written twice in
one object, silently: ``{"dur": 9.319, "dur": 5000}`` reads as a 5 ms kernel. Profilers never
write a key twice, so a repeated key means a corrupt or edited file, and the readers refuse it.

Why a byte scan and not ``object_pairs_hook``: the stdlib decode that calls it once per object
costs more than the whole rocprofv3 reader (docs/performance.md). The scan works on the
document's structural bytes with numpy, a few passes over the buffer:

1. the positions of ``"``, ``{`` and ``}``, found a cache-sized chunk at a time; quotes escaped
   by an odd run of backslashes are dropped, and a brace after an odd number of quotes (inside a
   string) is kept as a token that changes nothing;
2. a string is a key when its closing quote is followed (after whitespace) by ``:``; the braces
   before it tell which object it is in;
3. the braces are stably sorted by the depth after each: at one depth a ``}`` follows the ``{``
   of the object it returns into, so a running count of ``{`` in that order numbers the objects;
4. each key gets a 64-bit value from its object number, length and first and last 8 bytes; equal
   keys of one object always get equal values, so sorting the values and comparing neighbours
   finds every repeat. Neighbours that are equal by chance are re-checked on the decoded keys,
   and keys written with escapes (``"d\\u0075r"``) are hashed from their decoded text.

Arrays of records of one shape (rocprofv3's ``kernel_dispatch``: most of a trace's keys) are
checked through one record: with the digits dropped, every record reads the same, and that one
text has no repeated key (:func:`uniform_records` says why that is exact); the rest of the
document is then scanned with those arrays written as ``[]``.

The scan assumes valid JSON (call it after the parser succeeded). The error path names the key,
its byte offset and a JSON path to the object (``$.traceEvents[12].args``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pytest_gemmperf.errors import GemmperfInputError

_QUOTE, _BACKSLASH, _COLON = 0x22, 0x5C, 0x3A
_OPEN, _CLOSE = 0x7B, 0x7D
_IN_STRING = 0  # a brace token inside a string: no byte of a token is 0
_OPEN_ARRAY, _CLOSE_ARRAY, _COMMA = 0x5B, 0x5D, 0x2C
_WS = np.zeros(256, dtype=bool)
_WS[[0x20, 0x09, 0x0A, 0x0D]] = True
_WS_RUN = re.compile(rb"[ \t\n\r]*")
#: vectorized whitespace-skipping rounds before the few remaining positions go one by one
_VECTOR_WS_ROUNDS = 8
#: bytes per pass of the structural-byte masks: small enough that they stay in the core's cache
_CHUNK = 1 << 18
_MIX_LEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_TAIL = np.uint64(0xC2B2AE3D27D4EB4F)
_MIX_OBJ = np.uint64(0x165667B19E3779F9)
#: [n]: the low / high n bytes of a little-endian uint64 (n = 0..8)
_LOW_BYTES = np.array([(1 << 8 * n) - 1 for n in range(9)], dtype=np.uint64)
_HIGH_BYTES = np.array([((1 << 8 * n) - 1) << (64 - 8 * n) for n in range(9)], dtype=np.uint64)


class RepeatedKey(NamedTuple):
    """A key written twice in one JSON object: its text, the byte offset of the second
    occurrence, and the JSON path of the object (``$`` is the document). A named tuple: every
    JSON read defines it, almost none finds one (a frozen dataclass costs ~0.4 ms to make)."""

    key: str
    offset: int
    path: str


def find_repeated_key(data: bytes, uniform: tuple[str, ...] = ()) -> RepeatedKey | None:
    """The first (in document order) repeated key of any object in ``data``, or None.

    ``data`` must be valid JSON (UTF-8, a byte-order mark already removed). ``uniform`` names
    keys whose arrays usually hold records of one shape (rocprofv3's ``kernel_dispatch``): such an
    array is checked through one of its records when all of them read the same without digits."""
    rest = _without_uniform_arrays(data, uniform)
    hit = _first_repeat(rest)
    if hit is not None and rest is not data:
        return _first_repeat(data)  # its offset and path in the document as written
    return hit


def _first_repeat(data: bytes) -> RepeatedKey | None:
    a = np.frombuffer(data, dtype=np.uint8)
    if len(a) < 2:
        return None
    keys = _keys_and_objects(a, data)
    if keys is None:
        return None
    v = _key_values(a, data, *keys)
    v.sort()
    twins = v[1:][v[1:] == v[:-1]]
    if not len(twins):
        return None
    # a repeat or a coincidence of values (rare): which keys, compared as text
    hit = _confirm(data, np.isin(_key_values(a, data, *keys), twins), *keys)
    if hit is None:
        return None
    key, offset = hit
    return RepeatedKey(key=key, offset=offset, path=json_path_at(data, offset))


def _keys_and_objects(a: np.ndarray, data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For every key in document order: its object's number, and its open and close quotes."""
    pos, kind = _structural(a)
    pos, kind = drop_escaped_quotes(a, data, pos, kind)
    is_quote = kind == _QUOTE
    if not is_quote.any():
        return None
    is_brace = ~is_quote
    braces = kind[is_brace]
    # a brace after an odd number of quotes is inside a string: kept as a no-op token, so that
    # the count of braces before a key still indexes the object numbers
    inside = np.bitwise_xor.accumulate(is_quote.view(np.uint8))[is_brace].view(bool)
    braces[inside] = _IN_STRING
    quotes = pos[is_quote]
    braces_before = np.cumsum(is_brace, dtype=_index_type(len(kind)))[is_quote][0::2]
    is_key = _is_key(a, data, quotes[1::2])
    if is_key is None:
        return None
    obj = _object_numbers(braces)[braces_before[is_key] - 1]
    return obj, quotes[0::2][is_key], quotes[1::2][is_key]


def _key_values(a: np.ndarray, data: bytes, obj: np.ndarray, key_open: np.ndarray,
                key_close: np.ndarray) -> np.ndarray:
    """A value per key, equal for equal keys of one object."""
    v = _key_hashes(a, data, key_open, key_close)
    by_obj = obj.astype(np.uint64)
    by_obj *= _MIX_OBJ
    v += by_obj
    return v


def check_unique_keys(data: bytes, path: str,
                      record_of: Callable[[str], str | None] | None = None) -> None:
    """Raise a one-line :class:`GemmperfInputError` naming ``path``, the key and the object when
    any object of the (valid JSON) ``data`` repeats a key. ``record_of`` turns the object's JSON
    path into the reader's record name (``traceEvents[12], kernel 'gemm'``); by default the
    record is the JSON path itself."""
    hit = find_repeated_key(data)
    if hit is None:
        return
    record = (record_of(hit.path) if record_of is not None else None) or hit.path
    raise GemmperfInputError(
        path, f"key {hit.key!r} appears twice in one JSON object (byte {hit.offset:,}); JSON "
              "readers keep only the last value, so the file is corrupt or was edited",
        record=record)


def _index_type(n: int) -> type:
    """int32 below 2**31 elements: half the memory of numpy's default int64 in every pass."""
    return np.int32 if n < 2 ** 31 else np.int64


def _structural(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions and bytes of every ``"``, ``{`` and ``}``, in order. Made a cache-sized chunk at
    a time, straight into the result: whole-buffer masks and pieces to join are each fresh,
    page-faulted memory, which costs as much as the comparisons."""
    room = len(a) // 8 + _CHUNK  # JSON text is rarely denser in these bytes; grown when it is
    pos = np.empty(room, dtype=_index_type(len(a)))
    kind = np.empty(room, dtype=np.uint8)
    mask = np.empty(min(len(a), _CHUNK), dtype=bool)
    other = np.empty_like(mask)
    n = 0
    for start in range(0, len(a), _CHUNK):
        chunk = a[start:start + _CHUNK]
        m, o = mask[:len(chunk)], other[:len(chunk)]
        np.equal(chunk, _QUOTE, out=m)
        np.equal(chunk, _OPEN, out=o)
        m |= o
        np.equal(chunk, _CLOSE, out=o)
        m |= o
        at = np.flatnonzero(m)
        end = n + len(at)
        if end > len(pos):
            room = max(2 * len(pos), end + _CHUNK)
            pos, kind = np.resize(pos[:n], room), np.resize(kind[:n], room)
        np.take(chunk, at, out=kind[n:end])
        np.add(at, start, out=pos[n:end], casting="unsafe")
        n = end
    return pos[:n], kind[:n]


def drop_escaped_quotes(a: np.ndarray, data: bytes, pos: np.ndarray,
                        kind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pos``/``kind`` (structural bytes in order) without the quotes escaped inside strings."""
    if data.find(b"\\", 0, int(pos[-1]) + 1 if len(pos) else 0) < 0:
        return pos, kind
    qi = np.flatnonzero(kind == _QUOTE)
    escaped = _escaped_quotes(a, pos[qi])
    if escaped is None:
        return pos, kind
    keep = np.ones(len(pos), dtype=bool)
    keep[qi[escaped]] = False
    return pos[keep], kind[keep]


def _escaped_quotes(a: np.ndarray, quotes: np.ndarray) -> np.ndarray | None:
    """Indices into ``quotes`` of quotes preceded by an odd run of backslashes (inside strings)."""
    cand = np.flatnonzero((quotes > 0) & (a[np.maximum(quotes - 1, 0)] == _BACKSLASH))
    if not len(cand):
        return None
    bs = np.flatnonzero(a == _BACKSLASH)
    run_start = np.where(np.diff(bs, prepend=-2) != 1, bs, 0)
    run_start = np.maximum.accumulate(run_start)
    ends = quotes[cand] - 1
    run_len = ends - run_start[np.searchsorted(bs, ends)] + 1
    return cand[(run_len & 1) == 1]


def _next_non_ws(a: np.ndarray, data: bytes, start: np.ndarray, step: int) -> np.ndarray:
    """For each position, the first position at or after (``step`` 1) / at or before
    (``step`` -1) it whose byte is not JSON whitespace; ``len(a)`` / -1 when there is none."""
    n = len(a)
    idx = start.copy()
    inside = (idx >= 0) & (idx < n)
    todo = np.flatnonzero(inside)
    todo = todo[_WS[a[idx[todo]]]]
    for _ in range(_VECTOR_WS_ROUNDS):
        if not len(todo):
            return idx
        idx[todo] += step
        ok = (idx[todo] >= 0) & (idx[todo] < n)
        todo = todo[ok]
        todo = todo[_WS[a[idx[todo]]]]
    for i in todo.tolist():  # long whitespace runs (hand-indented files): a few, one by one
        p = int(idx[i])
        if step > 0:
            idx[i] = _WS_RUN.match(data, p).end()
        else:
            while p >= 0 and _WS[a[p]]:
                p -= 1
            idx[i] = p
    return idx


def _is_key(a: np.ndarray, data: bytes, closes: np.ndarray) -> np.ndarray | None:
    """Per string (by its closing quote): is it a key, followed (after whitespace) by ``:``?
    None when no string is."""
    n = len(a)
    nxt = np.zeros(len(closes), dtype=np.uint8)
    inner = len(closes) - (int(closes[-1]) + 1 >= n)  # a document that is one string ends on it
    nxt[:inner] = a[closes[:inner] + 1]
    # after a string come , : ] } or whitespace, the only ones of them at or below 0x20
    spaced = np.flatnonzero(nxt[:inner] <= 0x20)
    if len(spaced):  # indented files: only the strings followed by whitespace are walked
        far = _next_non_ws(a, data, closes[spaced] + 1, 1)
        nxt[spaced] = np.where(far < n, a[np.minimum(far, n - 1)], 0)
    is_key = nxt == _COLON
    return is_key if is_key.any() else None


def _object_numbers(braces: np.ndarray) -> np.ndarray:
    """For each brace token in order, a number for the object the bytes after it belong to: a
    ``{``'s own object's, else the enclosing one's (a ``}`` returns into it, a brace inside a
    string changes nothing)."""
    index = _index_type(len(braces))
    opens = braces == _OPEN
    depth = np.cumsum(opens.view(np.int8) - (braces == _CLOSE).view(np.int8), dtype=index)
    # Stably by depth (after each brace): at one depth the braces keep document order, and a
    # "}" that returns to depth d follows the "{" of the object it returns into, so counting
    # the "{" in that order numbers the objects.
    order = np.argsort(_small(depth), kind="stable")
    numbers = np.empty(len(braces), dtype=index)
    numbers[order] = np.cumsum(opens[order], dtype=index)
    return numbers


def _small(values: np.ndarray) -> np.ndarray:
    """Depths in the smallest integer type, so the stable sort is a radix sort."""
    top = int(values.max()) if len(values) else 0
    return values.astype(np.int8 if top < 2 ** 7 else np.int16 if top < 2 ** 15 else np.int64)


def _gather8(a: np.ndarray, data: bytes, start: np.ndarray) -> np.ndarray:
    """The 8 bytes at each (ascending) start as a little-endian uint64; bytes before the
    document or past its end read as zero."""
    n = len(a)
    # an unaligned uint64 view with a 1-byte stride: one gather per key
    words = np.ndarray(shape=(max(n - 7, 0),), dtype="<u8", buffer=data, strides=(1,))
    lo = int(np.searchsorted(start, 0))
    hi = max(int(np.searchsorted(start, n - 8, side="right")), lo)
    if lo == 0 and hi == len(start):
        return words[start]
    out = np.zeros(len(start), dtype=np.uint64)
    out[lo:hi] = words[start[lo:hi]]
    for i in [*range(lo), *range(hi, len(start))]:  # the few keys within 8 bytes of an end
        s = int(start[i])
        window = b"\0" * max(-s, 0) + data[max(s, 0):s + 8]
        out[i] = int.from_bytes(window.ljust(8, b"\0"), "little")
    return out


def _key_hashes(a: np.ndarray, data: bytes, key_open: np.ndarray, key_close: np.ndarray) -> np.ndarray:
    """A value per key that depends only on its decoded text: its length and its first and last
    8 bytes (of a shorter key, the words masked to its bytes)."""
    length = key_close - key_open
    length -= 1
    short = np.minimum(length, 8)
    h = _gather8(a, data, key_open + 1)
    h &= _LOW_BYTES[short]
    tail = _gather8(a, data, key_close - 8)
    tail &= _HIGH_BYTES[short]
    _mix(h, tail, length)
    if data.find(b"\\") >= 0:
        bs = np.flatnonzero(a == _BACKSLASH)
        escaped = np.flatnonzero(np.searchsorted(bs, key_open) < np.searchsorted(bs, key_close))
        for i in escaped.tolist():
            h[i] = hash_text(_decode_key(data, int(key_open[i]), int(key_close[i])))
    return h


def _mix(head: np.ndarray, tail: np.ndarray, length: np.ndarray) -> None:
    """``head`` becomes the value of the three parts (in place, reusing ``tail``)."""
    tail *= _MIX_TAIL
    head ^= tail
    tail[...] = length
    tail *= _MIX_LEN
    head ^= tail


def hash_text(text: str) -> np.uint64:
    """The scan's value of a key from its decoded text (what unescaped keys get from raw bytes)."""
    raw = text.encode("utf-8", "surrogatepass")
    short = min(len(raw), 8)
    head = np.array([int.from_bytes(raw[:8].ljust(8, b"\0"), "little")], dtype=np.uint64)
    tail = np.array([int.from_bytes(raw[-8:].rjust(8, b"\0"), "little")], dtype=np.uint64)
    head &= _LOW_BYTES[short]
    tail &= _HIGH_BYTES[short]
    _mix(head, tail, np.array([len(raw)], dtype=np.int64))
    return head[0]


def _decode_key(data: bytes, open_pos: int, close_pos: int) -> str:
    return json.loads(data[open_pos:close_pos + 1].decode("utf-8", "surrogatepass"))


def _confirm(data: bytes, flagged: np.ndarray, obj: np.ndarray, key_open: np.ndarray,
             key_close: np.ndarray) -> tuple[str, int] | None:
    """Among keys whose values collided, the first real repeat (decoded text compared)."""
    best: tuple[str, int] | None = None
    seen: dict[tuple[int, str], int] = {}
    for i in np.flatnonzero(flagged).tolist():
        text = _decode_key(data, int(key_open[i]), int(key_close[i]))
        k = (int(obj[i]), text)
        if k in seen:
            off = max(seen[k], int(key_open[i]))
            if best is None or off < best[1]:
                best = (text, off)
            seen[k] = min(seen[k], int(key_open[i]))
        else:
            seen[k] = int(key_open[i])
    return best


# ----------------------------------------------------------------------------- uniform arrays


def _without_uniform_arrays(data: bytes, names: tuple[str, ...]) -> bytes:
    """``data`` with every ``"<name>":[...]`` array that :func:`uniform_records` clears written
    as ``[]`` (the rest of the document keeps its structure), or ``data`` itself.

    Found by plain byte search, which is sound only without backslashes: then every ``"`` is a
    string's delimiter, and after a closing quote valid JSON has no letter, so ``"<name>":[``
    is that key and the start of its array value."""
    if not names or data.find(b"\\") >= 0:
        return data
    parts: list[bytes] = []
    done = 0
    for name in names:
        needle = json.dumps(name).encode() + b":["
        at = data.find(needle, done)
        while at >= 0:
            start = at + len(needle) - 1
            # the first "]" ends the array when its records are as uniform as checked below
            end = data.find(b"]", start) + 1
            if not end:
                break
            if uniform_records(data[start:end]):
                parts += [data[done:start], b"[]"]
                done = end
            # a name inside a span that failed is left to the full scan: spans never overlap,
            # so nested arrays cost one pass, not one per level
            at = data.find(needle, end)
    if not parts:
        return data
    parts.append(data[done:])
    return b"".join(parts)


def uniform_records(array: bytes) -> bool:
    """True when ``array`` (``[`` to the first ``]``, or a whole array) is a JSON array of
    objects that all read the same once digits are dropped, and that one text has no repeated
    key. ``array`` must hold no backslash (then every ``"`` delimits a string).

    Exact: dropping digits keeps every brace, quote, colon and comma, so each record keeps its
    structure and its keys lose only their digits; two equal keys stay equal, so a record with a
    repeated key would leave one in the shared text. (A text with a repeat, even one made by
    the dropped digits, clears nothing: the whole array is then scanned.)"""
    t = array.translate(None, b"0123456789")
    if not t.startswith(b"[{"):
        return False
    period = _object_end(t, 1)  # the first record and its comma
    if period is None:
        return False
    size = len(t)
    if (size - 1) % period or (size - 1 > period and t[period] != _COMMA):
        return False
    # t is [ record,record,...,record ] exactly when it repeats with the record's period
    if not t.startswith(t[1 + period:size - 1], 1):
        return False
    return _first_repeat(t[1:period]) is None


def _object_end(t: bytes, start: int) -> int | None:
    """The end (exclusive) of the object that starts at ``t[start]``, by braces outside strings
    (valid JSON structure assumed up to there); None when ``t`` ends first."""
    window = 1 << 12
    while True:
        a = np.frombuffer(t, dtype=np.uint8)[start:start + window]
        pos, kind = _structural(a)
        is_quote = kind == _QUOTE
        outside = ~np.bitwise_xor.accumulate(is_quote.view(np.uint8)).view(bool) & ~is_quote
        depth = np.cumsum(np.where(outside, np.where(kind == _OPEN, 1, -1), 0))
        closed = np.flatnonzero(depth == 0)
        if len(closed):
            return start + int(pos[closed[0]]) + 1
        if start + window >= len(t):
            return None
        window *= 8


# ----------------------------------------------------------------------------- error path


def json_path_at(data: bytes, offset: int) -> str:
    """JSON path of the innermost object or array holding byte ``offset`` (error path only:
    one numpy scan of ``data[:offset]``, then a walk over the enclosing containers)."""
    a = np.frombuffer(data, dtype=np.uint8)[:offset]
    lut = np.zeros(256, dtype=bool)
    lut[[_QUOTE, _OPEN, _CLOSE, _OPEN_ARRAY, _CLOSE_ARRAY, _COMMA]] = True
    pos = np.flatnonzero(lut[a])
    pos, kind = drop_escaped_quotes(a, data[:offset], pos, a[pos])
    is_quote = kind == _QUOTE
    outside = ((np.cumsum(is_quote) & 1) == 0) & ~is_quote
    quotes = pos[is_quote]
    sp, sk = pos[outside], kind[outside]
    step = np.zeros(len(sp), dtype=np.int64)
    step[(sk == _OPEN) | (sk == _OPEN_ARRAY)] = 1
    step[(sk == _CLOSE) | (sk == _CLOSE_ARRAY)] = -1
    depth = np.cumsum(step)  # after each token; a comma's is its container's depth
    big = len(sp) + 1
    openers = np.flatnonzero(step == 1)
    okeys = np.sort(depth[openers] * big + openers)
    commas = np.flatnonzero(sk == _COMMA)
    ckeys = np.sort(depth[commas] * big + commas)
    chain: list[int] = []  # token indices of the enclosing containers, innermost first
    limit = len(sp)
    for level in range(int(depth[-1]) if len(depth) else 0, 0, -1):
        k = int(okeys[np.searchsorted(okeys, level * big + limit) - 1])
        chain.append(k - level * big)
        limit = chain[-1]
    chain.reverse()
    parts = []
    for outer, inner in zip(chain, chain[1:]):
        level = int(depth[outer])
        lo = np.searchsorted(ckeys, level * big + outer)
        hi = np.searchsorted(ckeys, level * big + inner)
        if sk[outer] == _OPEN_ARRAY:
            parts.append(f"[{int(hi - lo)}]")
            continue
        member = int(sp[ckeys[hi - 1] - level * big]) if hi > lo else int(sp[outer])
        q0 = int(np.searchsorted(quotes, member))
        parts.append(_member(_decode_key(data, int(quotes[q0]), int(quotes[q0 + 1]))))
    return "$" + "".join(parts)


def _member(key: str) -> str:
    return f".{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key) else f"[{json.dumps(key)}]"
