"""Reading profiler files from disk: one place for gzip detection, bounds and read errors.

Contract of :func:`read_maybe_gzip`:

* only regular files are read. The file is opened non-blocking and checked with ``fstat``
  before any read, so a FIFO, socket or device named like a trace is an error, never a hang;
* gzip is detected by content (the ``1f 8b`` magic), not by extension;
* decompression is streamed in bounded chunks and stops with an error as soon as the output
  would exceed the limit. A gzip bomb therefore costs at most ``limit`` bytes of memory
  (plus one chunk), never its full expansion.

The limit is, in order of precedence: the ``max_bytes`` argument, the environment variable
``GEMMPERF_MAX_DECOMPRESSED_BYTES`` (a plain integer number of bytes, e.g. ``8589934592``),
else :data:`DEFAULT_MAX_DECOMPRESSED_BYTES` = 4 GiB. Why 4 GiB: the largest real traces we
know of (multi-GPU Kineto traces, long rocprofv3 JSON runs) are a few hundred MB to ~2 GB of
JSON, and the decoded tables take roughly 1-2x the JSON size again. 4 GiB of JSON thus peaks
near 10-12 GiB, which still fits a 24 GiB CI machine beside the test process; anything bigger is
far more likely a bomb or a mistake than a trace. Uncompressed files are not bounded here: their
size on disk is already visible to whoever produced them.
"""

from __future__ import annotations

import json
import os
import stat
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.jsonkeys import check_unique_keys

#: default bound on the bytes one gzip file may expand to (see the module docstring)
DEFAULT_MAX_DECOMPRESSED_BYTES = 4 * 1024 ** 3
ENV_MAX_DECOMPRESSED = "GEMMPERF_MAX_DECOMPRESSED_BYTES"


def max_decompressed_bytes(override: int | None = None, path: str | None = None) -> int:
    """The decompression limit in force: ``override``, else the env var, else the default.

    A malformed env value is an error (a typo must not silently disable the bound)."""
    if override is not None:
        if isinstance(override, bool) or not isinstance(override, int) or override <= 0:
            raise ValueError(f"max_bytes must be a positive integer, got {override!r}")
        return override
    text = os.environ.get(ENV_MAX_DECOMPRESSED)
    if text is None or not text.strip():
        return DEFAULT_MAX_DECOMPRESSED_BYTES
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise GemmperfInputError(path, f"{ENV_MAX_DECOMPRESSED}={text!r} is not a positive "
                                       "integer number of bytes")
    return value


def _open_regular_file(path: str) -> int:
    """A read-only descriptor of ``path``, refused unless it is a regular file."""
    # O_NONBLOCK: opening a FIFO without a writer would otherwise block forever
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read file: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise GemmperfInputError(path, f"cannot read file: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "a device" if
                stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        raise GemmperfInputError(path, f"cannot read file: it is {kind}, not a regular file")
    return fd


def _read_regular_file(path: str) -> bytes:
    fd = _open_regular_file(path)
    try:
        with os.fdopen(fd, "rb", closefd=True) as fh:
            return fh.read()
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read file: {exc.strerror or exc}") from None


def gunzip_bounded(raw: bytes, path: str, limit: int) -> bytes:
    """Decompress all gzip members of ``raw``, failing once the output passes ``limit`` bytes.

    One ``zlib`` call per member with ``max_length`` set to what is left of the budget: zlib
    grows its output buffer only as data arrives, so memory stays bounded by the limit, and the
    member's CRC-32 and length trailer are verified (gzip wrapper mode)."""
    parts: list[bytes] = []
    total = 0
    data = raw
    try:
        while data:
            if data[:2] != b"\x1f\x8b":
                if not data.strip(b"\0"):  # zero padding after the last member (tape/block tools)
                    break
                raise GemmperfInputError(path, "corrupt gzip data: garbage after the compressed "
                                               f"stream ({len(data):,} bytes)")
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out = d.decompress(data, limit + 1 - total)
            total += len(out)
            if total > limit or (d.unconsumed_tail and not d.eof):
                raise GemmperfInputError(
                    path, f"gzip data expands beyond the {limit:,}-byte limit "
                          f"({ENV_MAX_DECOMPRESSED} raises it)")
            if not d.eof:
                raise GemmperfInputError(path, "corrupt or truncated gzip data: the compressed "
                                               "stream ends early")
            parts.append(out)
            data = d.unused_data
    except zlib.error as exc:
        raise GemmperfInputError(path, f"corrupt or truncated gzip data: {exc}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_maybe_gzip(path: str, max_bytes: int | None = None) -> bytes:
    """File contents, gunzipped when the file starts with the gzip magic (not by extension:
    profilers and users both rename files), with decompressed output bounded by
    :func:`max_decompressed_bytes` (``max_bytes`` overrides the env var and default)."""
    limit = max_decompressed_bytes(max_bytes, path)
    raw = _read_regular_file(path)
    if raw[:2] == b"\x1f\x8b":
        raw = gunzip_bounded(raw, path, limit)
    return raw


#: bytes per block of :func:`iter_maybe_gzip`: large enough that per-block work is amortised,
#: small enough that a block and what is decoded from it stay a small part of memory
BLOCK_BYTES = 4 << 20


def iter_maybe_gzip(path: str, max_bytes: int | None = None,
                    block_bytes: int | None = None) -> Iterator[bytes]:
    """:func:`read_maybe_gzip` as a stream of blocks of at most ``block_bytes`` (the last may be
    shorter): the same checks, limit and one-line errors, in memory bounded by the block size
    whatever the file's size. A gzip error (bad CRC, truncation, garbage after the stream) is
    raised when the stream reaches it, before the block holding the damaged data is given out."""
    limit = max_decompressed_bytes(max_bytes, path)
    block_bytes = block_bytes or BLOCK_BYTES
    fd = _open_regular_file(path)
    try:
        with os.fdopen(fd, "rb", closefd=True) as fh:
            head = fh.read(2)
            if head != b"\x1f\x8b":
                yield from _plain_blocks(fh, head, block_bytes)
            else:
                yield from _gunzip_blocks(fh, head, path, limit, block_bytes)
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read file: {exc.strerror or exc}") from None


def _plain_blocks(fh: BinaryIO, head: bytes, block_bytes: int) -> Iterator[bytes]:
    block = head + fh.read(max(block_bytes - len(head), 0))
    while block:
        yield block
        block = fh.read(block_bytes)


def _gunzip_blocks(fh: BinaryIO, head: bytes, path: str, limit: int,
                   block_bytes: int) -> Iterator[bytes]:
    """Every gzip member of the file, decompressed a block at a time (gzip wrapper mode: each
    member's CRC-32 and length are checked). Same rules as :func:`gunzip_bounded`."""
    total = 0
    data = head + fh.read(_GZ_INPUT_BYTES)
    try:
        while True:
            if data[:2] != b"\x1f\x8b":
                rest = data + fh.read()  # the member boundary: what follows is short or garbage
                if not rest.strip(b"\0"):
                    return
                raise GemmperfInputError(path, "corrupt gzip data: garbage after the compressed "
                                               f"stream ({len(rest):,} bytes)")
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            pending = b""
            while not d.eof:
                if not data:
                    data = fh.read(_GZ_INPUT_BYTES)
                    if not data:
                        raise GemmperfInputError(path, "corrupt or truncated gzip data: the "
                                                       "compressed stream ends early")
                out = d.decompress(data, block_bytes)
                data = d.unconsumed_tail
                total += len(out)
                if total > limit:
                    raise GemmperfInputError(
                        path, f"gzip data expands beyond the {limit:,}-byte limit "
                              f"({ENV_MAX_DECOMPRESSED} raises it)")
                # a block is given out only once the next one decompressed cleanly, so a
                # damaged tail (CRC, truncation) is reported before its data is used
                if pending:
                    yield pending
                pending = out
            if pending:
                yield pending
            data = d.unused_data or fh.read(_GZ_INPUT_BYTES)
            if not data:
                return
    except zlib.error as exc:
        raise GemmperfInputError(path, f"corrupt or truncated gzip data: {exc}") from None


#: compressed bytes read per step of :func:`_gunzip_blocks`
_GZ_INPUT_BYTES = 1 << 20


def read_json_object(path: str | os.PathLike) -> dict:
    """The JSON object stored in ``path`` (a small metadata file: ``point.json``, ``run.json``).

    Read as a regular file only (:func:`_read_regular_file`: a FIFO is an error, never a hang),
    decoded as UTF-8, parsed with :func:`json.loads`. Every failure is one
    :class:`GemmperfInputError` naming ``path`` and the problem: ``cannot read file: <reason>``,
    ``not valid JSON: <parser message>`` (also for bytes that are not UTF-8), ``not a JSON
    object (found <type>)`` when the document is e.g. a list, or a key written twice in one
    object (:mod:`pytest_gemmperf.jsonkeys`: ``json`` would keep the last value silently). Not for traces: no gzip, no bound.
    """
    name = os.fspath(path)
    raw = _read_regular_file(name)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both derive from it
        raise GemmperfInputError(name, f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        found = "null" if doc is None else {list: "an array", str: "a string", bool: "a boolean"}.get(
            type(doc), "a number")
        raise GemmperfInputError(name, f"not a JSON object (found {found})")
    check_unique_keys(raw, name)
    return doc
