"""Repeated keys in JSON objects: a vectorized scan of the raw bytes, run after a parser accepted them.

Every JSON parser we use (``msgspec``, ``json``) keeps the *last* value of a key written twice in
one object, silently: ``{"dur": 9.319, "dur": 5000}`` reads as a 5 ms kernel. Profilers never
write a key twice, so a repeated key means a corrupt or edited file, and the readers refuse it.

Why a byte scan and not ``object_pairs_hook``: a hook is one Python call per object (about a
second for a 37 MB rocprofv3 file), while the readers decode such a file in ~0.15 s. The scan
works on the document's structural bytes with numpy, a few passes over the buffer:

1. the positions of ``"``, ``{`` and ``}`` (one ``flatnonzero``); quotes escaped by an odd run of
   backslashes are dropped, and braces inside strings are dropped by quote parity;
2. a string is a key when its closing quote is followed (after whitespace) by ``:``; its object
   depth is the running count of ``{`` minus ``}`` before it;
3. keys and ``{`` are stably sorted by depth: within one depth, the keys between two ``{`` are
   exactly one object's keys (a deeper object in between has its keys at a deeper depth), so a
   running count of ``{`` numbers the objects;
4. each key gets a 64-bit value from its object number, length and first and last 8 bytes; equal
   keys of one object always get equal values, so sorting the values and comparing neighbours
   finds every repeat. Neighbours that are equal by chance are re-checked on the decoded keys,
   and keys written with escapes (``"d\\u0075r"``) are hashed from their decoded text.

The scan assumes valid JSON (call it after the parser succeeded). The error path names the key,
its byte offset and a JSON path to the object (``$.traceEvents[12].args``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pytest_gemmperf.errors import GemmperfInputError

_QUOTE, _BACKSLASH, _COLON = 0x22, 0x5C, 0x3A
_OPEN, _CLOSE = 0x7B, 0x7D
_OPEN_ARRAY, _CLOSE_ARRAY, _COMMA = 0x5B, 0x5D, 0x2C
_WS = np.zeros(256, dtype=bool)
_WS[[0x20, 0x09, 0x0A, 0x0D]] = True
_WS_RUN = re.compile(rb"[ \t\n\r]*")
#: vectorized whitespace-skipping rounds before the few remaining positions go one by one
_VECTOR_WS_ROUNDS = 8
_MIX_LEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_TAIL = np.uint64(0xC2B2AE3D27D4EB4F)
_MIX_OBJ = np.uint64(0x165667B19E3779F9)


@dataclass(frozen=True)
class RepeatedKey:
    """A key written twice in one JSON object: its text, the byte offset of the second
    occurrence, and the JSON path of the object (``$`` is the document)."""

    key: str
    offset: int
    path: str


def find_repeated_key(data: bytes) -> RepeatedKey | None:
    """The first (in document order) repeated key of any object in ``data``, or None.

    ``data`` must be valid JSON (UTF-8, a byte-order mark already removed)."""
    a = np.frombuffer(data, dtype=np.uint8)
    if len(a) < 2:
        return None
    toks = _tokens(a, data)
    if toks is None:
        return None
    pos, kind, depth = toks
    keys = _keys(a, data, pos, kind)
    if keys is None:
        return None
    key_tok, key_open, key_close = keys
    obj = _object_numbers(kind, depth, key_tok)
    h = _key_hashes(a, data, key_open, key_close)
    v = obj.astype(np.uint64) * _MIX_OBJ + h
    s = np.sort(v)
    twins = s[1:][s[1:] == s[:-1]]
    if not len(twins):
        return None
    hit = _confirm(data, np.isin(v, twins), obj, key_open, key_close)
    if hit is None:
        return None
    key, offset = hit
    return RepeatedKey(key=key, offset=offset, path=json_path_at(data, offset))


class KeyScan:
    """:func:`find_repeated_key` on a worker thread, started before the parser decodes the same
    bytes: numpy releases the GIL in its passes, so on a machine with a spare core the scan
    costs little wall time beside the decode. :meth:`result` waits for it."""

    def __init__(self, data: bytes) -> None:
        self._hit: RepeatedKey | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(data,), name="gemmperf-json-keys",
                                        daemon=True)
        self._thread.start()

    def _run(self, data: bytes) -> None:
        try:
            self._hit = find_repeated_key(data)
        except BaseException as exc:  # handed to the caller by result(), never lost
            self._error = exc

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> RepeatedKey | None:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._hit


def check_unique_keys(data: bytes | KeyScan, path: str,
                      record_of: Callable[[str], str | None] | None = None) -> None:
    """Raise a one-line :class:`GemmperfInputError` naming ``path``, the key and the object when
    any object of the (valid JSON) ``data`` repeats a key (``data`` may be a :class:`KeyScan`
    already running). ``record_of`` turns the object's JSON path into the reader's record name
    (``traceEvents[12], kernel 'gemm'``); by default the record is the JSON path itself."""
    hit = data.result() if isinstance(data, KeyScan) else find_repeated_key(data)
    if hit is None:
        return
    record = (record_of(hit.path) if record_of is not None else None) or hit.path
    raise GemmperfInputError(
        path, f"key {hit.key!r} appears twice in one JSON object (byte {hit.offset:,}); JSON "
              "readers keep only the last value, so the file is corrupt or was edited",
        record=record)


def _tokens(a: np.ndarray, data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Positions of string quotes and structural braces, their bytes, and the object depth at
    each (the depth after it for a brace: a ``{`` counts itself)."""
    mask = np.equal(a, _QUOTE)
    other = np.equal(a, _OPEN)
    mask |= other
    np.equal(a, _CLOSE, out=other)
    mask |= other
    del other
    pos = np.flatnonzero(mask)
    del mask
    kind = a[pos]
    pos, kind = _drop_escaped_quotes(a, data, pos, kind)
    is_quote = kind == _QUOTE
    if not is_quote.any():
        return None
    # a brace after an odd number of quotes is inside a string
    inside = (np.cumsum(is_quote, dtype=np.int64) & 1).astype(bool)
    inside &= ~is_quote
    if inside.any():
        keep = ~inside
        pos, kind = pos[keep], kind[keep]
    step = (kind == _OPEN).view(np.int8) - (kind == _CLOSE).view(np.int8)
    return pos, kind, np.cumsum(step, dtype=np.int64)


def _drop_escaped_quotes(a: np.ndarray, data: bytes, pos: np.ndarray,
                         kind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _keys(a: np.ndarray, data: bytes, pos: np.ndarray,
          kind: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Token index of the opening quote, and the open and close quote positions, of every key."""
    q = np.flatnonzero(kind == _QUOTE)
    opens, closes = pos[q[0::2]], pos[q[1::2]]
    after = _next_non_ws(a, data, closes + 1, 1)
    n = len(a)
    nxt = np.where(after < n, a[np.minimum(after, n - 1)], 0)
    is_key = nxt == _COLON
    if not is_key.any():
        return None
    return q[0::2][is_key], opens[is_key], closes[is_key]


def _object_numbers(kind: np.ndarray, depth: np.ndarray, key_tok: np.ndarray) -> np.ndarray:
    """For every key, a number shared exactly by the keys of the same object."""
    mark = kind == _OPEN
    mark[key_tok] = True
    sel = np.flatnonzero(mark)  # "{" and keys, in document order
    # Stably by depth: at one depth, the keys between two "{" are one object's (a nested
    # object's keys sit deeper), so counting the "{" in that order numbers the objects.
    by_depth = sel[np.argsort(_small(depth[sel]), kind="stable")]
    numbers = np.zeros(len(kind), dtype=np.int64)
    numbers[by_depth] = np.cumsum(kind[by_depth] == _OPEN)
    return numbers[key_tok]


def _small(values: np.ndarray) -> np.ndarray:
    """Depths in the smallest integer type, so the stable sort is a radix sort."""
    top = int(values.max()) if len(values) else 0
    return values.astype(np.int8 if top < 2 ** 7 else np.int16 if top < 2 ** 15 else np.int64)


def _gather8(a: np.ndarray, data: bytes, start: np.ndarray) -> np.ndarray:
    """The 8 bytes at each start as little-endian uint64 (zero past the end of ``a``)."""
    n = len(a)
    full = start <= n - 8
    # an unaligned uint64 view with a 1-byte stride: one gather per key
    words = np.ndarray(shape=(max(n - 7, 0),), dtype="<u8", buffer=data, strides=(1,))
    if full.all():
        return words[start]
    out = np.zeros(len(start), dtype=np.uint64)
    out[full] = words[start[full]]
    for i in np.flatnonzero(~full).tolist():
        s = int(start[i])
        out[i] = int.from_bytes(data[s:s + 8].ljust(8, b"\0"), "little")
    return out


def _mix(length: np.ndarray, head: np.ndarray, tail: np.ndarray) -> np.ndarray:
    return head ^ (tail * _MIX_TAIL) ^ (length.astype(np.uint64) * _MIX_LEN)


def _mask(length: np.ndarray) -> np.ndarray:
    """Low ``8 * min(length, 8)`` bits set."""
    bits = (np.minimum(length, 8) * 8).astype(np.uint64)
    full = bits >= 64
    m = (np.uint64(1) << np.where(full, 0, bits).astype(np.uint64)) - np.uint64(1)
    m[full] = np.uint64(0xFFFFFFFFFFFFFFFF)
    return m


def _key_hashes(a: np.ndarray, data: bytes, key_open: np.ndarray, key_close: np.ndarray) -> np.ndarray:
    """A value per key that depends only on its decoded text."""
    length = key_close - key_open - 1
    head = _gather8(a, data, key_open + 1) & _mask(length)
    tail = np.where(length > 8, _gather8(a, data, np.maximum(key_close - 8, 0)), np.uint64(0))
    h = _mix(length, head, tail.astype(np.uint64))
    if data.find(b"\\") >= 0:
        bs = np.flatnonzero(a == _BACKSLASH)
        escaped = np.flatnonzero(np.searchsorted(bs, key_open) < np.searchsorted(bs, key_close))
        for i in escaped.tolist():
            h[i] = hash_text(_decode_key(data, int(key_open[i]), int(key_close[i])))
    return h


def hash_text(text: str) -> np.uint64:
    """The scan's value of a key from its decoded text (what unescaped keys get from raw bytes)."""
    raw = text.encode("utf-8", "surrogatepass")
    length = np.array([len(raw)], dtype=np.int64)
    head = np.array([int.from_bytes(raw[:8].ljust(8, b"\0"), "little")], dtype=np.uint64)
    tail = np.array([int.from_bytes(raw[-8:], "little") if len(raw) > 8 else 0], dtype=np.uint64)
    return _mix(length, head & _mask(length), tail)[0]


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


# ----------------------------------------------------------------------------- error path


def json_path_at(data: bytes, offset: int) -> str:
    """JSON path of the innermost object or array holding byte ``offset`` (error path only:
    one numpy scan of ``data[:offset]``, then a walk over the enclosing containers)."""
    a = np.frombuffer(data, dtype=np.uint8)[:offset]
    lut = np.zeros(256, dtype=bool)
    lut[[_QUOTE, _OPEN, _CLOSE, _OPEN_ARRAY, _CLOSE_ARRAY, _COMMA]] = True
    pos = np.flatnonzero(lut[a])
    pos, kind = _drop_escaped_quotes(a, data[:offset], pos, a[pos])
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
