"""Text from traces and users made safe to show to a person.

Kernel names, op names, paths, test ids and notes come from files nobody vetted. Printed raw,
an ESC or OSC sequence in a kernel name recolours the terminal or sets its window title, a BEL
rings, a newline or carriage return breaks a verdict table or overwrites the line above it, and
a bidirectional override (U+202E and friends) makes ``evil`` read as ``live``. Everything a
person reads as text (terminal, pytest failure messages, ``summary.md``, the HTML report) shows
such characters as visible escapes instead: ``\\x1b``, ``\\n``, ``\\u202e``.

Escaped are the Unicode categories that do something instead of showing a glyph: controls (Cc:
C0, DEL, C1), format characters (Cf: bidi embeddings, overrides and isolates, marks, zero-width
characters, BOM), line and paragraph separators (Zl, Zp) and lone surrogates (Cs, which a file
name read with ``surrogateescape`` can hold and which no terminal encoding can write). Other
non-ASCII text (µ, ▶, CJK) is kept. Backslashes are kept as they are: C++ and Windows text uses
them, and the escapes are for a reader, not for a parser.

Tables meant for programs (CSV, Parquet, XLSX) keep the raw text; they have their own
neutralisation of spreadsheet formulas (``safe_io``, ``report.excel``).
"""

from __future__ import annotations

import unicodedata
from typing import Any

#: categories whose characters act on the display instead of showing
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_char(ch: str) -> str:
    """The visible form of one character: ``\\n``, ``\\x1b``, ``\\u202e``, ``\\U000e0041``."""
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def is_unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in UNSAFE_CATEGORIES


def printable(value: Any) -> str:
    """``str(value)`` with every control, format (bidi), separator and lone-surrogate character
    escaped, newlines included: the result is one line that cannot change the terminal."""
    s = value if isinstance(value, str) else str(value)
    if s.isprintable():  # the common case; isprintable() is False for every unsafe category
        return s
    return "".join(escape_char(ch) if is_unsafe(ch) else ch for ch in s)


def printable_lines(value: Any) -> str:
    """Like :func:`printable` but keeps ``\\n``: for a message whose line breaks are ours (a
    head line and a table) after its data fields went through :func:`printable`."""
    s = value if isinstance(value, str) else str(value)
    if s.isprintable():
        return s
    return "\n".join(printable(line) for line in s.split("\n"))


def printable_frame(df: Any, columns: Any = None) -> Any:
    """A copy of a pandas DataFrame whose text columns (object, string, category; or
    ``columns``) went through :func:`printable`; numbers and missing values are untouched, so
    fixed-width tables built from it keep their columns."""
    cols = [c for c in (df.columns if columns is None else columns) if c in df.columns
            and (df[c].dtype == object or str(df[c].dtype) in ("category", "string", "str"))]
    if not cols:
        return df
    out = df.copy()
    for c in cols:
        col = out[c].astype(object)
        out[c] = col.map(lambda v: printable(v) if isinstance(v, str) else v)
    return out


__all__ = ["UNSAFE_CATEGORIES", "escape_char", "is_unsafe", "printable", "printable_frame",
           "printable_lines"]
