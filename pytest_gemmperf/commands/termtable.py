"""Terminal tables of the commands that list stored values (``baseline diff``, ``history show``):
numbers in their metric's unit without scientific notation, and a table that fits a width by
shortening its long text columns in the middle (kernel names, test ids), never by wrapping."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pytest_gemmperf.gate.metrics import is_time
from pytest_gemmperf.gate.verdict import shorten_kernel

#: a cell without a value
NO_VALUE = "—"

#: time units from the largest: (name, nanoseconds)
TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0))


def plain(v: float, digits: int = 4) -> str:
    """``v`` at ``digits`` significant digits, positional (``0.0000123``, ``12300``, ``99.71``)."""
    if not math.isfinite(v):
        return NO_VALUE
    if v == 0:
        return "0"
    return np.format_float_positional(v, precision=digits, unique=True, fractional=False, trim="-")


def time_unit(ns: float) -> tuple[str, float]:
    """The largest unit ``ns`` reaches: (name, nanoseconds per unit)."""
    for unit, scale in TIME_UNITS:
        if abs(ns) >= scale:
            return unit, scale
    return "ns", 1.0


def is_time_metric(metric: str) -> bool:
    return bool(is_time([str(metric)])[0])


def value_text(x: object, metric: str, digits: int = 4) -> str:
    """One value as the terminal shows it: a time in the largest unit it reaches (ns, µs, ms,
    s), another value as it is; ``digits`` significant digits, never scientific notation."""
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return NO_VALUE
    if not math.isfinite(v):
        return NO_VALUE
    if is_time_metric(metric):
        unit, scale = time_unit(v)
        return f"{plain(v / scale, digits)} {unit}"
    return plain(v, digits)


def values_text(values: Sequence[float], metric: str, digits: int = 4) -> str:
    """A series of one metric's values in one unit (the largest its largest value reaches),
    named once at the end: ``998.8 999.7 1152 µs``... ``0.9988 0.9997 1.152 µs``."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not is_time_metric(metric) or not finite:
        return " ".join(plain(float(v), digits) if v is not None else NO_VALUE for v in values)
    unit, scale = time_unit(max(abs(v) for v in finite))
    return " ".join(plain(float(v) / scale, digits) for v in values) + f" {unit}"


def shorten_tail(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters keeping its head: ``regression +15.3% at ...``."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    return text[: max(width - 3, 0)] + "..." if width > 3 else text[:width]


def fit_table(header: Sequence[str], rows: Sequence[Sequence[str]], width: int,
              shrink: Sequence[str] = (), min_width: int = 12, right: Sequence[str] = (),
              shrink_last: Sequence[str] = ()) -> list[str]:
    """``rows`` under ``header`` as fixed-width lines of at most ``width`` characters where the
    columns named in ``shrink`` can be shortened (in the middle, each to no less than
    ``min_width``): always the widest of them, so they end up about equally wide. Columns
    named in ``shrink_last`` (a verdict text whose head must survive) are shortened only once
    none of ``shrink`` can give more, and lose their end, not their middle. Columns named in
    ``right`` are right-aligned."""
    cells = [list(map(str, header))] + [list(map(str, r)) for r in rows]
    n = len(header)
    widths = [max(len(r[i]) for r in cells) for i in range(n)]
    idx = [header.index(c) for c in shrink if c in header and c not in shrink_last]
    last = [header.index(c) for c in shrink_last if c in header]

    def total() -> int:
        return sum(widths) + 2 * (n - 1)

    for group in (idx, last):
        while total() > width:
            candidates = [i for i in group if widths[i] > max(min_width, len(header[i]))]
            if not candidates:
                break
            # one character off the widest at a time: long columns end up alike, none starved
            i = max(candidates, key=lambda j: widths[j])
            widths[i] -= 1
    lines = []
    for r in cells:
        parts = []
        for i, c in enumerate(r):
            if len(c) > widths[i]:
                c = shorten_tail(c, widths[i]) if i in last else shorten_kernel(c, widths[i])
            parts.append(c.rjust(widths[i]) if header[i] in right else c.ljust(widths[i]))
        lines.append("  ".join(parts).rstrip())
    return lines
