"""One JSON document read as a stream: its large arrays decoded a run of elements at a time.

A profiler's JSON is a small frame (metadata keys) around one or a few huge arrays of records
(Kineto's ``traceEvents``, rocprofv3's ``buffer_records.kernel_dispatch``). :class:`JsonSplitter`
reads the document a block at a time (:func:`~pytest_gemmperf.traces.fileio.iter_maybe_gzip`)
and cuts each chosen array at top-level element boundaries into :class:`Piece` s that the
reader decodes (typed, with msgspec) and reduces to columns before the next block is read.
Everything outside the chosen arrays is kept as the *skeleton*: the document with those arrays
written as ``[]``, small, decoded by the reader at the end. Memory is bounded by the block size,
the largest single element and the skeleton, never by the arrays.

How a cut is found, exactly:

* fast path: the last ``}`` ``,`` ``{`` (whitespace allowed between) in the block is a guess at
  an element boundary, and the run of elements before it is decoded as ``[`` run ``]``. That text
  is valid JSON only when the guess is right: a cut inside a string leaves the string open, a
  cut inside an element leaves a bracket open, and a cut past the array's end closes the wrapper
  early and leaves trailing text. So a successful decode proves the cut. The cut is looked for
  in the block just read, and the run's text is copied once, into a buffer reused from run to
  run while no decoded value views it (:meth:`JsonSplitter._run_buffer`);
* otherwise (a guess inside a string, a nested list of objects, the array's end, or damaged
  JSON): the block is scanned structurally from the last known boundary (quotes with their
  escapes, then brackets and braces outside strings with their depth, vectorised), which finds
  the last element boundary or the array's closing ``]``; what the decoder then refuses is the
  file's own error.

Errors keep the whole-document form: a decode error's ``(byte N)`` is the document's byte
offset, and a validation error's ``$[k]`` path is rewritten to the element's index in the
document (``$.traceEvents[123456].ph``). An earlier syntax error in the frame wins over a later
one in an array, as a whole-document decode would report it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.jsonkeys import drop_escaped_quotes, find_repeated_key
# re-exported: the readers and tests know them here (tests substitute them)
from pytest_gemmperf.traces.slim_arrays import release_free_memory, resident_bytes  # noqa: F401

_QUOTE = 0x22
_OPENS = (0x5B, 0x7B)  # [ {
_CLOSES = (0x5D, 0x7D)  # ] }
_COMMA, _COLON = 0x2C, 0x3A
_LUT = np.zeros(256, dtype=bool)
_LUT[[_QUOTE, *_OPENS, *_CLOSES, _COMMA, _COLON]] = True
_WS = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"
#: tries of the fast path's guess before the structural scan takes over
_GUESSES = 8


@functools.cache
def _byte_at() -> re.Pattern[str]:
    """A decoder message's "(byte N)", compiled when an error first needs it."""
    return re.compile(r"\(byte (\d+)\)")


#: a path in the document: object keys and array indices from the root
JsonPath = tuple[Any, ...]


@dataclass
class Piece:
    """Whole elements of one streamed array, decoded."""

    path: JsonPath      # the array's path in the document
    first: int          # index (in the array) of the first element
    items: list         # the decoded elements
    #: ``[`` + their text + ``]`` as decoded; a reused buffer, valid until the next piece
    data: bytes | bytearray
    offset: int         # document byte offset of ``data[1]``


class StreamDecodeError(Exception):
    """A decoder's error, its byte offsets and ``$[k]`` paths turned into the document's."""

    def __init__(self, exc: BaseException, message: str) -> None:
        super().__init__(message)
        self.exc = exc
        self.message = message


class FreeMemory:
    """:data:`release_free_memory` after a streamed run, only when the resident set grew.

    Trimming after every run bounds memory, but it hands back the pages the next run is about
    to fill again (its block, decoded events, the repeated-key scan's arrays: about 14 MB a
    run), and the kernel then maps and zeroes them afresh: at 1.2 GB of Kineto JSON a million
    page faults, about a tenth of the read's CPU. Without any trim the resident set grows by
    what the kept columns split off the free pages (1.2 GB: 220 MiB instead of 192). So: the
    resident set after the first run since the last trim is the reference (that run's work
    included), and the heap is trimmed once the set has grown ``slack`` bytes beyond it: the
    resident set stays within ``slack`` of trimming every run, and the pages a run reuses stay
    mapped. The slack is 2 MiB: the peak lands anywhere in that band, so a wider one (4 MiB)
    let two reads of one 1.2 GB trace peak 4 MiB apart, as much as the whole growth from 0.3 to
    1.2 GB is allowed to be; 2 MiB kept the page faults as few. Where the resident set cannot be
    read, every run trims, as before. :meth:`finish`
    trims once more when the stream ends, so that what the reader builds next starts from a
    heap without the runs' free pages."""

    def __init__(self, slack: int = 2 << 20, trim: Callable[[], object] | None = None,
                 resident: Callable[[], int | None] | None = None) -> None:
        self.slack = slack
        self._trim = trim or release_free_memory
        self._resident = resident or resident_bytes
        self._reference: int | None = None
        self.trims = 0

    def after_run(self) -> None:
        now = self._resident()
        if now is not None and self._reference is None:
            self._reference = now
        elif now is None or now > self._reference + self.slack:
            self.finish()

    def finish(self) -> None:
        self._trim()
        self.trims += 1
        self._reference = None


class JsonSplitter:
    """Cut the arrays for which ``stream_at(path)`` gives a decoder out of the JSON ``blocks``
    (the decoder turns ``[`` elements ``]`` into a list).

    ``shallow`` is the deepest nesting (objects and arrays from the root) at which such an
    array can start: the frame above it is walked token by token, everything deeper in the
    frame is skipped by a vectorised scan. :meth:`pieces` yields the decoded pieces; once it is
    exhausted, :attr:`skeleton` holds the rest of the document and :meth:`skeleton_error`
    rewrites a decoder error on it."""

    def __init__(self, blocks: Iterator[bytes],
                 stream_at: Callable[[JsonPath], Callable[[bytes], list] | None],
                 shallow: int) -> None:
        self._blocks = blocks
        self._stream_at = stream_at
        self._shallow = shallow
        self._buf = b""
        self._buf_off = 0   # document offset of _buf[0]
        self._eof = False
        self._parts: list[bytes] = []
        self._run: bytearray | None = None  # the fast path's run text, reused (_run_buffer)
        self._map: list[tuple[int, int]] = []   # (skeleton offset, document offset) per part
        self._skel_len = 0
        self.skeleton = b""
        self.n_bytes = 0

    # ------------------------------------------------------------------ reading

    def _next_block(self) -> bytes | None:
        """The next block of the document (None at its end)."""
        block = next(self._blocks, None)
        if block is None:
            self._eof = True
            return None
        if not self.n_bytes and block.startswith(_BOM):
            block = block[len(_BOM):]  # editors on Windows add one; JSON parsers reject it
        self.n_bytes += len(block)
        return block

    def _more(self, at_least: int = 1, first: bytes | None = None) -> bool:
        """Append blocks (``first``, already read, then more) until ``at_least`` new bytes
        arrived; False at the end of the file."""
        got = 0
        parts = [self._buf]
        while got < at_least:
            block = first if first is not None else self._next_block()
            first = None
            if block is None:
                break
            parts.append(block)
            got += len(block)
        if got:
            self._buf = b"".join(parts)
        return got > 0

    def _drop(self, upto: int) -> None:
        self._buf = self._buf[upto:]
        self._buf_off += upto

    def _keep(self, start: int, end: int) -> None:
        """``_buf[start:end]`` belongs to the skeleton."""
        if end > start:
            self._map.append((self._skel_len, self._buf_off + start))
            self._parts.append(self._buf[start:end])
            self._skel_len += end - start

    # ------------------------------------------------------------------ the frame

    def pieces(self) -> Iterator[Piece]:
        stack: list[list[Any]] = []   # [kind byte, key or index] per open container
        member = 0                    # buffer offset where the current object member starts
        self._more()
        pos = 0                       # buffer offset up to which tokens are consumed
        while True:
            toks = _tokens(self._buf, pos, len(stack))
            if toks is None:
                if not self._more(max(len(self._buf), 1)):
                    break
                continue
            tpos, tkind, depth = toks
            before = np.empty_like(depth)
            before[0] = len(stack)
            before[1:] = depth[:-1]
            entered = None
            for i in np.flatnonzero(np.minimum(before, depth) <= self._shallow).tolist():
                p, k = int(tpos[i]), int(tkind[i])
                if k in _OPENS:
                    decode = self._stream_at(_path(stack)) if k == 0x5B else None
                    if decode is not None:
                        entered = (p, decode)
                        break
                    stack.append([k, 0 if k == 0x5B else None])
                    member = p + 1
                elif k in _CLOSES:
                    if stack:
                        stack.pop()
                elif k == _COMMA and stack:
                    if stack[-1][0] == 0x5B:
                        stack[-1][1] += 1
                    else:
                        member = p + 1
                elif k == _COLON and stack and stack[-1][0] == 0x7B:
                    stack[-1][1] = _key(self._buf[member:p])
                pos = p + 1
            if entered is not None:
                p, decode = entered
                self._keep(0, p + 1)
                self._drop(p + 1)
                close = yield from self._array(_path(stack), len(stack) + 1, decode)
                self._keep(close, close + 1)  # "[" ... "]": the array is empty in the skeleton
                self._drop(close + 1)
                pos = member = 0
                continue
            # the rest of the buffer after the last frame token is rescanned with more data
            self._keep(0, pos)
            self._drop(pos)
            member -= pos
            pos = 0
            if not self._more(max(len(self._buf), 1)):
                break
        self._keep(0, len(self._buf))
        self._drop(len(self._buf))
        self.skeleton = b"".join(self._parts)
        self._parts = []

    # ------------------------------------------------------------------ a streamed array

    def _array(self, path: JsonPath, depth: int,
               decode: Callable[[bytes], list]) -> Iterator[Piece]:
        """Pieces of the array whose first element starts at ``_buf[0]``; returns the buffer
        offset of its closing bracket."""
        index = 0
        want = 1
        after_comma = False  # whether _buf[0] follows a comma between elements
        while True:
            if len(self._buf) < want and not self._eof:
                block = self._next_block()
                piece = None if block is None else self._piece_through(block, decode, path, index)
                if piece is not None:  # the usual step: a run of elements ends in the new block
                    after_comma = True
                    yield piece
                    index += len(piece.items)
                    want = len(self._buf) + 1
                    del piece
                    continue
                self._more(want - len(self._buf), block)
                continue
            cut = _guess(self._buf)
            if cut is not None:
                data = _wrap(self._buf, cut)
                items = _try(decode, data)
                if items is not None:
                    self._drop(cut + 1)  # before the piece is used: one copy of the text less
                    after_comma = True
                    yield Piece(path, index, items, data, self._buf_off - cut - 1)
                    index += len(items)
                    want = len(self._buf) + 1
                    continue
                del data
            close, comma = _boundary(self._buf, depth)
            end = close if close is not None else comma
            if end is None:
                if self._eof:
                    # an unterminated array: the decoder names what is missing
                    self._decode_or_raise(decode, b"[" + self._buf, index, path)
                    raise AssertionError("unreachable: an open array decoded")
                want = 2 * len(self._buf) + 1  # one large element: read on, rescan once
                continue
            if not self._buf[:end].strip(_WS):
                if close is not None and not after_comma:
                    return close  # "[ ]": an empty array
                # no element before this comma or bracket: "[ ,", ", ," or ", ]"
                self._refuse_missing_element(end, after_comma, index, path)
            data = _wrap(self._buf, end)
            items = self._decode_or_raise(decode, data, index, path)
            if items:
                yield Piece(path, index, items, data, self._buf_off)
            index += len(items)
            del data
            if close is not None:
                return close
            self._drop(end + 1)
            after_comma = True
            want = len(self._buf) + 1

    def _piece_through(self, block: bytes, decode: Callable[[bytes], list], path: JsonPath,
                       index: int) -> Piece | None:
        """The fast path's piece when its cut (:func:`_guess`) falls in ``block``, the block
        read after ``_buf`` (which starts at an element boundary): ``[`` ``_buf`` + the block up
        to the cut ``]``, written into the reused run buffer (:meth:`_run_buffer`) without
        joining the two first; None when there is no cut in the block or the text does not
        decode (the caller joins them and takes the general path)."""
        cut = _guess(block)
        if cut is None:
            return None
        n = len(self._buf)
        run = self._run_buffer(n + cut + 2)
        run[0] = 0x5B
        run[1:n + 1] = self._buf
        run[n + 1:n + cut + 1] = memoryview(block)[:cut]
        run[n + cut + 1] = 0x5D
        items = _try(decode, run)
        if items is None:
            return None
        offset = self._buf_off
        self._buf = block[cut + 1:]
        self._buf_off += n + cut + 1
        return Piece(path, index, items, run, offset)

    def _run_buffer(self, size: int) -> bytearray:
        """A ``size``-byte buffer for the next run's text: the last run's, reused (its memory
        stays resident and mapped, where a new 4 MiB object per run would have the kernel map
        and zero fresh pages each time, once the heap's free pages were given back), unless a
        decoded value still refers to it (``msgspec.Raw`` holds a view of its input: then the
        buffer cannot be resized and is left to that value, never overwritten)."""
        run = self._run
        if run is not None:
            try:
                run.append(0)  # refused while anything holds a view of the buffer
            except BufferError:
                run = None
        if run is None:
            run = self._run = bytearray(size)
        elif len(run) > size:
            del run[size:]
        else:
            run.extend(bytes(size - len(run)))
        return run

    def _decode_or_raise(self, decode: Callable[[bytes], list], data: bytes, index: int,
                         path: JsonPath, prefix: int = 1) -> list:
        """``decode(data)``, or its error in document terms (``data[prefix]`` is ``_buf[0]``)."""
        try:
            return decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError,
                UnicodeDecodeError) as exc:
            earlier = self._frame_error()
            if earlier is not None:
                raise earlier from None
            raise StreamDecodeError(exc, _rewrite(exc, self._buf_off - prefix, index,
                                                  path)) from None

    def _refuse_missing_element(self, end: int, after_comma: bool, index: int,
                                path: JsonPath) -> None:
        """Raise the decoder's error for the missing element before the comma or bracket at
        ``_buf[end]`` (only whitespace precedes it). Decoded alone, ``[`` whitespace ``]``
        would be an empty run, so the text is given the context the document has: the comma
        that ``_buf`` follows, after an element. The syntax decides, not the element type,
        so any decoder names the byte a whole-document decode names."""
        head = b"[0," if after_comma else b"["
        data = b"".join((head, memoryview(self._buf)[:end + 1]))
        self._decode_or_raise(msgspec.json.decode, data, index, path, prefix=len(head))
        raise AssertionError("unreachable: a missing element decoded")

    def _frame_error(self) -> StreamDecodeError | None:
        """A syntax error in the frame read so far (it comes first in the document)."""
        head = b"".join(self._parts)
        try:
            msgspec.json.decode(head)
        except msgspec.DecodeError as exc:
            if _byte_at().search(str(exc)):
                return StreamDecodeError(exc, self._rewrite_skeleton(str(exc)))
        except Exception:  # noqa: BLE001 - an open frame is simply truncated here
            return None
        return None

    # ------------------------------------------------------------------ the skeleton

    def skeleton_offset(self, offset: int) -> int:
        """Document offset of a byte offset in :attr:`skeleton`."""
        at = 0
        for i, (s, _) in enumerate(self._map):
            if s <= offset:
                at = i
            else:
                break
        if not self._map:
            return offset
        s, d = self._map[at]
        return d + offset - s

    def _rewrite_skeleton(self, message: str) -> str:
        return _byte_at().sub(lambda m: f"(byte {self.skeleton_offset(int(m.group(1)))})", message)

    def skeleton_error(self, exc: BaseException) -> str:
        """A decoder message on the skeleton with its byte offsets in document terms."""
        return self._rewrite_skeleton(str(exc))


def _wrap(buf: bytes, end: int) -> bytes:
    """``[`` + ``buf[:end]`` + ``]``, copied once."""
    return b"".join((b"[", memoryview(buf)[:end], b"]"))


def _try(decode: Callable[[bytes], list], data: bytes) -> list | None:
    """The fast path's decode: None when it fails for any reason (the guess may be wrong; the
    structural scan then decides, and a real error is raised from there)."""
    try:
        return decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        return None


def _path(stack: list[list[Any]]) -> JsonPath:
    return tuple(entry[1] for entry in stack)


def _key(text: bytes) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None  # not a key: the skeleton's decode reports the syntax error


def _rewrite(exc: BaseException, base: int, first: int, path: JsonPath) -> str:
    """``exc``'s message on a piece, in document terms: byte offsets and the element path."""
    text = str(exc)
    text = _byte_at().sub(lambda m: f"(byte {base + int(m.group(1))})", text)
    where = "$" + "".join(f"[{p}]" if isinstance(p, int) else
                          (f".{p}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(p))
                           else f"[{msgspec.json.encode(p).decode()}]") for p in path)
    return re.sub(r"`\$\[(\d+)\]", lambda m: f"`{where}[{first + int(m.group(1))}]", text)


def _guess(buf: bytes) -> int | None:
    """Offset of the comma of the last ``}`` ``,`` ``{`` in ``buf`` (the fast path's cut),
    looked for from the last few ``{`` (an element has one or two: itself and its args)."""
    end = len(buf)
    for _ in range(_GUESSES):
        brace = buf.rfind(b"{", 0, end)
        if brace <= 0:
            return None
        comma = len(buf[max(brace - 64, 0):brace].rstrip(_WS)) + max(brace - 64, 0) - 1
        if comma > 0 and buf[comma] == _COMMA:
            before = len(buf[max(comma - 64, 0):comma].rstrip(_WS)) + max(comma - 64, 0) - 1
            if before >= 0 and buf[before] == 0x7D:
                return comma
        end = brace
    return None


def _tokens(buf: bytes, start: int, depth0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Structural tokens of ``buf[start:]`` outside strings (``start`` is outside one at nesting
    ``depth0``): positions, bytes and the nesting after each; None when there are none."""
    a = np.frombuffer(buf, dtype=np.uint8)[start:]
    pos = np.flatnonzero(_LUT[a])
    kind = a[pos]
    pos, kind = drop_escaped_quotes(a, buf[start:], pos, kind)
    is_quote = kind == _QUOTE
    # a token after an odd number of quotes is inside a string
    opened = np.bitwise_xor.accumulate(is_quote.view(np.uint8)).view(bool)
    keep = ~opened & ~is_quote
    pos, kind = pos[keep], kind[keep]
    if not len(pos):
        return None
    step = np.zeros(len(kind), dtype=np.int64)
    step[(kind == 0x5B) | (kind == 0x7B)] = 1
    step[(kind == 0x5D) | (kind == 0x7D)] = -1
    depth = np.cumsum(step) + depth0
    return pos + start, kind, depth


def _boundary(buf: bytes, depth: int) -> tuple[int | None, int | None]:
    """In ``buf`` (starting at an element boundary of an array whose elements sit at nesting
    ``depth``): the offset of the array's closing bracket, else of the last comma between its
    elements (None, None when neither is in ``buf``)."""
    toks = _tokens(buf, 0, depth)
    if toks is None:
        return None, None
    pos, kind, after = toks
    out = np.flatnonzero(after < depth)
    if len(out):
        end = int(out[0])
        commas = np.flatnonzero((kind[:end] == _COMMA) & (after[:end] == depth))
        return int(pos[end]), (int(pos[commas[-1]]) if len(commas) else None)
    commas = np.flatnonzero((kind == _COMMA) & (after == depth))
    return None, (int(pos[commas[-1]]) if len(commas) else None)


#: a key written twice: its document byte offset, the key, the record it is in
Repeat = tuple[int, str, str]


def refuse_repeated_key(path: str, splitter: JsonSplitter, in_pieces: Repeat | None,
                        record_of: Callable[[str], str | None]) -> None:
    """One line for the first key written twice in the document (in the skeleton, by
    ``record_of`` its JSON path, or ``in_pieces``, the first found in the streamed arrays):
    every JSON reader keeps only the last value, silently."""
    hit = find_repeated_key(splitter.skeleton)
    if hit is not None and (in_pieces is None
                            or splitter.skeleton_offset(hit.offset) < in_pieces[0]):
        in_pieces = (splitter.skeleton_offset(hit.offset), hit.key,
                     record_of(hit.path) or hit.path)
    if in_pieces is not None:
        offset, key, record = in_pieces
        raise GemmperfInputError(
            path, f"key {key!r} appears twice in one JSON object (byte {offset:,}); JSON "
                  "readers keep only the last value, so the file is corrupt or was edited",
            record=record)


def decode_error(path: str, exc: BaseException, message: str, *, syntax: str,
                 nesting: str) -> GemmperfInputError:
    """One line for a decoder's error that is not about types (``message``: its text in
    document terms): bad syntax (after the reader's ``syntax`` words), nesting too deep (``nesting``
    says what the format writes), a string that is not UTF-8."""
    if isinstance(exc, RecursionError):
        return GemmperfInputError(path, f"JSON nested too deeply to read ({nesting}; corrupt or "
                                        "hostile file?)")
    if isinstance(exc, UnicodeDecodeError):  # msgspec before 0.23 checks strings lazily
        return GemmperfInputError(path, f"not valid JSON: a string is not UTF-8 ({exc.reason} "
                                        f"at byte {exc.start} of the string)")
    if "UTF-8" in message:  # msgspec 0.23 checks them while parsing: "Invalid UTF-8 encoded string"
        return GemmperfInputError(path, f"not valid JSON: a string is not UTF-8 ({message})")
    return GemmperfInputError(path, f"{syntax}: {message}")
