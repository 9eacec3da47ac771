"""Exact, range-checked conversion of CSV text cells to numbers (rocprofv3 CSV readers).

Contract: an integer column yields exactly the integers written, or the first cell that is not
one is reported as ``(row index, reason)``. No value passes through float64: rocprofv3
timestamps are integer nanoseconds up to 2**63 - 1, and float64 holds only multiples of 1024
there. Accepted spellings of an integer: ``123``, ``-123``, ``+123``, ``16384.000000`` (any
number of zero decimals), scientific notation whose value is integral (``1.6384e+04``) and
C hex literals (``0x1F``; pyarrow's own parser reads them, so the readers accept them everywhere
rather than only in some files).
Rejected, with the reason: text (``abc``), ``inf``/``nan``, fractions (``12.5``), values
outside the target range (signed or unsigned 64-bit), and NUL characters.

Method: the common cases are one regex check and one pyarrow cast (vectorised). Only when that cast fails are the
column's *distinct* strings parsed one by one with :mod:`decimal` (exact) - that is the slow,
unusual-file path, and it stops at nothing: every distinct value is classified so the first bad
*row* can be named.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INT64_RANGE = (-(2 ** 63), 2 ** 63 - 1)
UINT64_RANGE = (0, 2 ** 64 - 1)

_INT_TEXT = re.compile(r"[+-]?[0-9]+")  # ASCII digits only (int() takes any Unicode digit)
_HEX_TEXT = re.compile(r"[+-]?0[xX][0-9a-fA-F]+")  # pyarrow's integer parser takes these too
_NUM_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NON_FINITE = frozenset({"inf", "infinity", "nan", "snan"})


def parse_int(text: str, lo: int, hi: int) -> int | str:
    """``text`` as an exact integer in ``[lo, hi]``, or the reason it is not one."""
    s = text.strip()
    if _INT_TEXT.fullmatch(s):
        v = int(s)
    elif _HEX_TEXT.fullmatch(s):
        v = int(s, 16)
    elif _NUM_TEXT.fullmatch(s):
        d = Decimal(s)
        if d.adjusted() > 40:  # far outside any 64-bit range; skip building a huge integer
            return _range_reason(lo, hi)
        if d != d.to_integral_value():
            return "is not an integer"
        v = int(d)
    elif s.lstrip("+-").lower() in _NON_FINITE:
        return "is not a finite number"
    elif "\x00" in s:
        return "contains a NUL character"
    else:
        return "is not a number"
    if not lo <= v <= hi:
        return _range_reason(lo, hi)
    return v


def _range_reason(lo: int, hi: int) -> str:
    return ("is outside the signed 64-bit integer range" if lo < 0 else
            "is outside the unsigned 64-bit integer range")


def parse_float(text: str) -> float | str:
    """``text`` as a finite float, or the reason it is not one."""
    s = text.strip()
    if not _NUM_TEXT.fullmatch(s):
        if s.lstrip("+-").lower() in _NON_FINITE:
            return "is not a finite number"
        return "contains a NUL character" if "\x00" in s else "is not a number"
    try:
        v = float(Decimal(s))
    except (InvalidOperation, OverflowError):
        return "is not a finite number"
    return v if np.isfinite(v) else "is outside the float64 range"


def _combined(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def ints_from_text(col: pa.ChunkedArray | pa.Array, target: pa.DataType = pa.int64()
                   ) -> tuple[pa.Array, tuple[int, str, str] | None]:
    """Text column -> exact ``target`` (int64 or uint64) column; nulls stay null.

    Returns (array, None) or (partial array, (row, cell text, reason)) for the first bad cell.
    """
    lo, hi = UINT64_RANGE if target == pa.uint64() else INT64_RANGE
    text = _combined(pc.utf8_trim_whitespace(_combined(col)))
    plain = pc.replace_substring_regex(text, r"^([+-]?[0-9]+)\.0*$", r"\1")
    # pyarrow's cast also takes "0x8000000000000000", and wraps it to a negative int64: only
    # plain decimal digits may take the fast cast, hex goes through the exact parse below
    decimal_only = pc.all(pc.match_substring_regex(plain, r"^[+-]?[0-9]+$")).as_py() is not False
    if decimal_only:
        try:
            return pc.cast(plain, target), None
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # out of range: classify each distinct value exactly, below
    enc = pc.dictionary_encode(text)
    uniques = enc.dictionary.to_pylist()
    parsed = [parse_int(u, lo, hi) for u in uniques]
    bad_u = np.fromiter((isinstance(p, str) for p in parsed), dtype=bool, count=len(parsed))
    np_type = np.uint64 if target == pa.uint64() else np.int64
    table = np.array([0 if isinstance(p, str) else p for p in parsed] + [0], dtype=np_type)
    idx = enc.indices.fill_null(len(uniques)).to_numpy(zero_copy_only=False)
    values = table[idx]
    mask = enc.indices.is_null().to_numpy(zero_copy_only=False)
    problem = None
    if bad_u.any():
        row_bad = np.append(bad_u, False)[idx]
        i = int(np.flatnonzero(row_bad)[0])
        problem = (i, uniques[idx[i]], parsed[idx[i]])
    return pa.array(values, type=target, mask=mask), problem


def floats_from_text(col: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, tuple[int, str, str] | None]:
    """Text column -> finite float64 column (nulls stay null), or the first bad cell."""
    text = _combined(pc.utf8_trim_whitespace(_combined(col)))
    enc = pc.dictionary_encode(text)
    uniques = enc.dictionary.to_pylist()
    parsed = [parse_float(u) for u in uniques]
    idx = enc.indices.fill_null(len(uniques)).to_numpy(zero_copy_only=False)
    bad_u = np.append(np.fromiter((isinstance(p, str) for p in parsed), dtype=bool,
                                  count=len(parsed)), False)
    table = np.array([np.nan if isinstance(p, str) else p for p in parsed] + [np.nan])
    mask = enc.indices.is_null().to_numpy(zero_copy_only=False)
    problem = None
    if bad_u[idx].any():
        i = int(np.flatnonzero(bad_u[idx])[0])
        problem = (i, uniques[idx[i]], parsed[idx[i]])
    return pa.array(table[idx], type=pa.float64(), mask=mask), problem


def first_non_finite(col: pa.ChunkedArray | pa.Array) -> int | None:
    """Row of the first inf/nan in a float column (pyarrow reads ``inf``, ``nan`` and
    ``1e400`` as floats without complaint), else None."""
    if not pa.types.is_floating(col.type):
        return None  # before combining chunks: that copy is the cost on a million-row file
    arr = _combined(col)
    values = arr.to_numpy(zero_copy_only=False)
    bad = ~np.isfinite(values)
    if arr.null_count:
        bad &= ~arr.is_null().to_numpy(zero_copy_only=False)
    return int(np.flatnonzero(bad)[0]) if bad.any() else None


def first_nul(col: pa.ChunkedArray | pa.Array) -> int | None:
    """Row of the first string cell holding a NUL character, else None.

    Dictionary columns are checked through their (small) dictionaries, so a million-row kernel
    name column costs one pass over its distinct names.
    """
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    offset = 0
    for chunk in chunks:
        if pa.types.is_dictionary(chunk.type):
            hit = pc.match_substring(chunk.dictionary, "\x00").to_numpy(zero_copy_only=False)
            if hit.any():
                codes = chunk.indices.fill_null(-1).to_numpy(zero_copy_only=False)
                rows = np.flatnonzero(np.isin(codes, np.flatnonzero(hit)))
                return offset + int(rows[0])
        elif pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type):
            hit = pc.fill_null(pc.match_substring(chunk, "\x00"), False).to_numpy(zero_copy_only=False)
            if hit.any():
                return offset + int(np.flatnonzero(hit)[0])
        offset += len(chunk)
    return None

