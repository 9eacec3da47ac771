"""Exact, type-checked numbers from JSON traces.

Two conversions, both vectorised and both exact:

* :func:`us_text_to_ns` turns the *text* of JSON numbers in microseconds (Kineto's ``ts`` and
  ``dur``, captured undecoded as :class:`msgspec.Raw`) into integer nanoseconds. Method: the raw
  tokens are joined into one byte string; every digit gets its power of ten from its position
  relative to the token's decimal point (``+3`` for the µs -> ns scale), and a cumulative sum in
  uint64 yields each token's magnitude. No value ever passes through float64, so an epoch-based
  ``1700000000123456.789`` µs becomes exactly ``1700000000123456789`` ns. Tokens in exponent
  form (``1.5e3``) are rare and take an exact ``decimal.Decimal`` path.
* :func:`exact_ints` turns already-decoded JSON integers (ids, sizes) into int64 with a mask,
  rejecting booleans, floats and anything outside int64.

Rules (an input that cannot be read exactly is an error, never a guess):

* a timestamp must be a JSON number: strings, ``true``/``false``, ``null``, objects and arrays
  are errors (Kineto and the Chrome trace format write numbers; a string is not guessed at);
* digits below one nanosecond (a 4th fractional digit of µs) are never written by a profiler
  (Kineto prints 3 decimals); they come from tools that rewrote a trace with float arithmetic
  (``134.64000000000001``). Integer ns cannot hold them, so such a value is rounded **once**,
  half to even, from its exact decimal text to the nearest ns (status ``ROUNDED``, counted by
  the readers in their metadata). It is never parsed as a float first, and an end time
  ``ts + dur`` is rounded from the exact decimal sum (:func:`sum_us_to_ns`), not summed from two
  rounded parts;
* the result must lie in int64 nanoseconds (about +-292 years); ``1e30`` is an error;
* a number text longer than :data:`MAX_DIGITS` digits is an error before any arithmetic, so a
  hostile token costs bounded time and memory.

Each function reports problems as a per-element status code, so the caller can name the
record; :data:`PROBLEMS` maps a code to its one-line description.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Sequence

import msgspec
import numpy as np

INT64_MAX = 2 ** 63 - 1
INT64_MIN = -(2 ** 63)

OK, ROUNDED, ABSENT, NOT_NUMBER, OUT_OF_RANGE, NOT_INTEGER, TOO_LONG = range(7)
#: more significant digits than any profiler writes (bounds the exact arithmetic's work)
MAX_DIGITS = 1000
PROBLEMS = {
    ABSENT: "is missing",
    NOT_NUMBER: "is not a JSON number",
    OUT_OF_RANGE: "is outside the int64 range",
    NOT_INTEGER: "is not a JSON integer",
    TOO_LONG: f"has more than {MAX_DIGITS} digits",
}

#: a shared default for absent Raw fields (zero-length token -> ABSENT)
ABSENT_RAW = msgspec.Raw(b"")

_POW10 = np.array([10 ** k for k in range(20)], dtype=np.uint64)  # 10**19 < 2**64
_ZERO, _NINE, _MINUS, _DOT = ord("0"), ord("9"), ord("-"), ord(".")


def us_text_to_ns(tokens: Sequence[msgspec.Raw]) -> tuple[np.ndarray, np.ndarray]:
    """Exact int64 ns from raw JSON microsecond tokens, and a uint8 status per token.

    Values where the status is not ``OK`` are 0. Absent fields must be given as a zero-length
    token (:data:`ABSENT_RAW`).

    The tokens profilers write (digits, at most one point and up to 3 fractional digits: whole
    ns) are read by :func:`_plain_us_to_ns`, a few operations per token; the rest (signs,
    exponents, sub-ns digits, absent or non-number values) by the digit-by-digit path.
    """
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=n)
    text = b"".join(tokens)
    values, plain = _plain_us_to_ns(text, lengths)
    if plain.all():
        return values, np.zeros(n, dtype=np.uint8)
    rest = np.flatnonzero(~plain)
    status = np.zeros(n, dtype=np.uint8)
    values[rest], status[rest] = _digits_us_to_ns([tokens[i] for i in rest.tolist()])
    return values, status


#: the longest plain token: 16 integer digits (1e16 µs is beyond int64 ns), a point, 3 decimals
_PLAIN_INT, _PLAIN_FRAC = 16, 3
#: where each byte of a token's 24-byte row comes from, relative to its point: the 16 places
#: before it, the 3 after it, and 5 places that are always "0" (outside every token)
_ROW = np.array([*range(-_PLAIN_INT, 0), *range(1, _PLAIN_FRAC + 1), *[-10 ** 6] * 5], dtype=np.int64)
_LOW4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_PAIRS, _QUADS, _HALF = np.uint64(0x00FF00FF00FF00FF), np.uint64(0x0000FFFF0000FFFF), np.uint64(0xFFFFFFFF)


def _eight_digits(words: np.ndarray) -> np.ndarray:
    """The value of 8 ASCII digits held in each little-endian uint64 (first digit lowest): the
    digits paired, the pairs paired, the quads paired, each step one multiply, shift and mask."""
    v = words & _LOW4
    v = (v * np.uint64(10) + (v >> np.uint64(8))) & _PAIRS
    v = (v * np.uint64(100) + (v >> np.uint64(16))) & _QUADS
    return (v * np.uint64(10000) + (v >> np.uint64(32))) & _HALF


def _plain_us_to_ns(text: bytes, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ns of each plain token of ``text`` (the tokens joined, ``lengths`` each) and which
    tokens are plain: 1-16 digits, then optionally a point and 1-3 digits, within int64 ns.

    Exact: each token's digits are laid out in a 24-byte row aligned on its point (16 integer
    places, 3 decimal places, 5 zeros; places the token does not have read "0"), and the row's
    three 8-digit words are read as integers: the value is ``(hi * 10**8 + lo) * 1000 +
    decimals``, below 10**19 < 2**64 in uint64; one above INT64_MAX is not plain (the digit
    path reports it). A JSON number has no leading zeros, so its text alone decides; values of
    tokens that are not plain are 0."""
    n = len(lengths)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    c = np.frombuffer(text, dtype=np.uint8)
    plain = (lengths > 0) & (lengths <= _PLAIN_INT + 1 + _PLAIN_FRAC)
    if text.translate(None, b"0123456789."):  # some token holds another character: which
        other = (c - np.uint8(_ZERO) > 9) & (c != _DOT)
        count = np.zeros(len(c) + 1, dtype=np.int64)
        np.cumsum(other, out=count[1:])
        plain &= count[ends] == count[starts]
    dots = np.flatnonzero(c == _DOT)
    owner = np.searchsorted(ends, dots, side="right")
    plain &= np.bincount(owner, minlength=n) <= 1
    point = ends.copy()
    point[owner] = dots
    plain &= (point - starts <= _PLAIN_INT) & (ends - point <= _PLAIN_FRAC + 1)
    values = np.zeros(n, dtype=np.int64)
    rows = np.flatnonzero(plain)
    if not len(rows):
        return values, plain
    at = point[rows, None] + _ROW
    at -= starts[rows, None]
    inside = at.view(np.uint64) < lengths[rows, None].view(np.uint64)  # within the token
    at += starts[rows, None]
    row = np.where(inside, np.take(c, at, mode="clip"), np.uint8(_ZERO))
    words = row.view("<u8")  # (rows, 3): 8 integer places, 8 more, the decimals and zeros
    ns = _eight_digits(words[:, 0]) * np.uint64(10 ** 8) + _eight_digits(words[:, 1])
    ns *= np.uint64(1000)
    ns += _eight_digits(words[:, 2]) // np.uint64(10 ** 5)
    fits = ns <= np.uint64(INT64_MAX)
    values[rows[fits]] = ns[fits].view(np.int64)
    plain[rows[~fits]] = False
    return values, plain


def _digits_us_to_ns(tokens: Sequence[msgspec.Raw]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`us_text_to_ns` digit by digit: any JSON number text (and the status of what is
    not one)."""
    n = len(tokens)
    values = np.zeros(n, dtype=np.int64)
    status = np.zeros(n, dtype=np.uint8)
    if n == 0:
        return values, status
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=n)
    # the per-character arrays below cost ~50 bytes a character: bound a hostile token first
    too_long = lengths > MAX_DIGITS + 30
    if too_long.any():
        tokens = [b"" if long else t for t, long in zip(tokens, too_long.tolist())]
        lengths[too_long] = 0
    c = np.frombuffer(b"".join(tokens), dtype=np.uint8)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    present = lengths > 0
    status[~present] = ABSENT
    status[too_long] = TOO_LONG
    first = np.zeros(n, dtype=np.uint8)
    first[present] = c[starts[present]]
    # the decoder validated JSON syntax: a token starting with '-' or a digit is a number
    neg = first == _MINUS
    is_num = neg | ((first >= _ZERO) & (first <= _NINE))
    status[present & ~is_num] = NOT_NUMBER
    if len(c) == 0:
        return values, status

    tok = np.repeat(np.arange(n), lengths)
    pos = np.arange(len(c), dtype=np.int64) - starts[tok]
    is_digit = (c >= _ZERO) & (c <= _NINE)
    # exponent form ("1.5e3"): exact but rare, handled by Decimal below
    other = ~is_digit & (c != _DOT) & (c != _MINUS)
    slow = np.zeros(n, dtype=bool)
    slow[tok[other]] = True
    slow &= is_num
    is_dot = c == _DOT
    dot = lengths.copy()
    dot[tok[is_dot]] = pos[is_dot]
    int_digits = dot - neg
    # 10**(k+3) ns per digit k places left of the point; fraction digit j: 10**(3-j)
    d_tok = dot[tok]
    exp10 = np.where(pos < d_tok, d_tok - pos + 2, 3 - (pos - d_tok))
    digit = (c - _ZERO).astype(np.uint64)
    # non-zero digits below 1 ns: rounded exactly on the decimal path
    sub_ns = is_digit & (exp10 < 0) & (digit != 0)
    slow[tok[sub_ns]] = True
    slow &= is_num
    live = is_digit & is_num[tok] & ~slow[tok]
    # JSON forbids leading zeros, so 17+ integer digits of µs is >= 1e19 ns: out of range
    too_big = is_num & ~slow & (int_digits > 16)
    weight = np.where(live & (exp10 >= 0) & (exp10 <= 19), _POW10[np.clip(exp10, 0, 19)],
                      np.uint64(0))
    csum = np.empty(len(c) + 1, dtype=np.uint64)
    csum[0] = 0
    # uint64 arithmetic wraps silently; differences of the running sum are still exact for
    # every token whose own sum is below 2**64, which int_digits <= 16 guarantees
    np.cumsum(digit * weight, out=csum[1:])
    mag = csum[ends] - csum[starts]
    limit = np.where(neg, np.uint64(2 ** 63), np.uint64(INT64_MAX))
    over = too_big | (mag > limit)
    fast_ok = is_num & ~slow & (status == OK)
    status[fast_ok & over] = OUT_OF_RANGE
    good = fast_ok & ~over
    signed = np.where(neg, (~mag + np.uint64(1)), mag).view(np.int64)
    values[good] = signed[good]

    for i in np.flatnonzero(slow & (status == OK)).tolist():
        values[i], status[i] = _decimal_us_to_ns(bytes(tokens[i]))
    return values, status


def _decimal_parts(text: bytes) -> tuple[int, int] | int:
    """(m, e) with value = m * 10**e exactly, from JSON number text; else a status code."""
    if len(text) > MAX_DIGITS + 30:  # sign, point and exponent take a few characters
        return TOO_LONG
    try:
        d = Decimal(text.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError, ValueError):
        return NOT_NUMBER
    if not d.is_finite():
        return NOT_NUMBER
    sign, digits, exp = d.as_tuple()
    if len(digits) > MAX_DIGITS:
        return TOO_LONG
    m = int("".join(map(str, digits)) or "0")
    return (-m if sign else m), int(exp)


def _round_ns(m: int, e: int) -> tuple[int, int]:
    """Nearest int64 to ``m * 10**e`` (half to even) and its status, in bounded work."""
    if m == 0:
        return 0, OK
    n_digits = len(str(abs(m)))
    if e >= 0:
        if n_digits + e > 20:  # at least 10**19 > int64: build no huge integer
            return 0, OUT_OF_RANGE
        v, st = m * 10 ** e, OK
    elif -e > n_digits + 1:  # |value| < 0.1: rounds to 0 (bounds 1e-999999 work)
        v, st = 0, ROUNDED
    else:
        q, r = divmod(abs(m), 10 ** -e)
        st = OK if r == 0 else ROUNDED
        twice, unit = 2 * r, 10 ** -e
        if twice > unit or (twice == unit and q % 2 == 1):
            q += 1
        v = -q if m < 0 else q
    if not INT64_MIN <= v <= INT64_MAX:
        return 0, OUT_OF_RANGE
    return v, st


def _decimal_us_to_ns(text: bytes) -> tuple[int, int]:
    """µs text -> ns on the decimal digits themselves (Decimal arithmetic would round to the
    context precision, float would round to 53 bits)."""
    parts = _decimal_parts(text)
    if isinstance(parts, int):
        return 0, parts
    m, e = parts
    return _round_ns(m, e + 3)


def sum_us_to_ns(a: bytes, b: bytes) -> tuple[int, int]:
    """``(a + b) µs`` in ns from two number texts: exact sum first, one rounding after."""
    pa, pb = _decimal_parts(a), _decimal_parts(b)
    if isinstance(pa, int) or isinstance(pb, int):
        return 0, pa if isinstance(pa, int) else pb
    e = min(pa[1], pb[1])
    if max(pa[1], pb[1]) - e > 400:  # absurd exponent spread: values are either 0 or out of range
        v, st = _round_ns(*(pa if pa[1] > pb[1] else pb)[:1], max(pa[1], pb[1]) + 3)
        return v, (ROUNDED if st == OK else st)
    m = pa[0] * 10 ** (pa[1] - e) + pb[0] * 10 ** (pb[1] - e)
    return _round_ns(m, e + 3)


def exact_ints(values: list, labels_ok: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(int64 values, missing mask, status) from decoded JSON values expected to be integers.

    ``None`` is missing. With ``labels_ok`` a string is missing too (Chrome-trace ``pid``/``tid``
    may be a label such as ``"Spans"``). Booleans, floats, other strings, containers: status
    ``NOT_INTEGER``; integers outside int64: ``OUT_OF_RANGE``.
    """
    n = len(values)
    out = np.zeros(n, dtype=np.int64)
    status = np.zeros(n, dtype=np.uint8)
    types = set(map(type, values))
    if types <= {int}:
        try:
            return np.array(values, dtype=np.int64), np.zeros(n, dtype=bool), status
        except OverflowError:
            pass
    blank = {type(None), str} if labels_ok else {type(None)}
    if types <= {int} | blank:
        obj = np.array(values, dtype=object) if n else np.zeros(0, dtype=object)
        missing = np.fromiter(map(blank.__contains__, map(type, values)), dtype=bool, count=n)
        obj[missing] = 0
        try:
            return obj.astype(np.int64), missing, status
        except OverflowError:
            pass
    missing = np.fromiter(map(blank.__contains__, map(type, values)), dtype=bool, count=n)
    # error path only: locate and classify each offending element
    for i, v in enumerate(values):
        if missing[i]:
            continue
        if type(v) is not int:  # bool is a subclass of int: exclude it by exact type
            status[i] = NOT_INTEGER
        elif not INT64_MIN <= v <= INT64_MAX:
            status[i] = OUT_OF_RANGE
        else:
            out[i] = v
    return out, missing, status


def first_problem(status: np.ndarray) -> int | None:
    """Index of the first element whose status is a problem (not OK or ROUNDED), or None."""
    bad = np.flatnonzero(status > ROUNDED)
    return int(bad[0]) if len(bad) else None


def show(v) -> str:
    """A value as it appears in the file (raw number text, or repr), cut to 40 characters."""
    text = bytes(v).decode("utf-8", "replace") if isinstance(v, msgspec.Raw) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
