"""Low-level rocprofv3 CSV parsing: pyarrow with explicit types, exact numbers, and error
locations (file, physical line, data row, column) for every rejected cell.

The reading contract is in :func:`_read_typed`; cell conversion rules live in
:mod:`~pytest_gemmperf.traces.csv_values`.
"""

from __future__ import annotations

import csv
import io
import os
import re
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.csv_layouts import CsvKind
from pytest_gemmperf.traces.csv_values import (
    first_non_finite,
    first_nul,
    floats_from_text,
    ints_from_text,
)

# --------------------------------------------------------------------------------------------
# Low-level parsing helpers
# --------------------------------------------------------------------------------------------

_DICT = pa.dictionary(pa.int32(), pa.string())
_TRUNC_MARKER = b"..."


class _Source:
    """Where pyarrow reads from: the path itself, or the bytes before a ``...`` marker (a
    plain class: a dataclass costs about half a millisecond to make when the reader is
    imported, as every CSV read does)."""

    __slots__ = ("path", "data", "truncated_marker", "marker_line")

    def __init__(self, path: str, data: bytes | None = None, truncated_marker: bool = False,
                 marker_line: int | None = None) -> None:
        self.path = path
        self.data = data
        self.truncated_marker = truncated_marker
        self.marker_line = marker_line

    def open(self):
        return io.BytesIO(self.data) if self.data is not None else self.path

    def lines(self):
        if self.data is not None:
            return io.StringIO(self.data.decode("utf-8", errors="replace"))
        return open(self.path, encoding="utf-8", errors="replace", newline="")


def _prepare_source(path: str) -> _Source:
    """Honour the docs' ``...`` truncation marker when it is the last non-blank line.

    Only documentation samples carry it, so the whole-file read below touches small files only.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        fh.seek(max(0, size - 4096))
        tail = fh.read()
    stripped = tail.rstrip()
    last_line = stripped.rsplit(b"\n", 1)[-1].strip()
    if last_line != _TRUNC_MARKER:
        return _Source(path)
    with open(path, "rb") as fh:
        data = fh.read()
    body = data.rstrip()
    cut = body.rfind(b"\n")
    marker_line = body[: cut + 1].count(b"\n") + 1
    return _Source(path, data=body[: cut + 1], truncated_marker=True, marker_line=marker_line)


def _records(src: _Source):
    """(first physical line, fields) of each non-blank CSV record, the header included.

    Error path only. ``csv.reader`` keeps a quoted newline inside its record, so line numbers
    stay right for kernel names that span lines.
    """
    with src.lines() as fh:
        reader = csv.reader(fh)
        prev = 0
        try:
            for fields in reader:
                start, prev = prev + 1, reader.line_num
                if not fields or (len(fields) == 1 and not fields[0].strip()):
                    continue
                yield start, fields
        except csv.Error:
            return


def _find_bad_row(src: _Source, n_cols: int) -> tuple[int, int] | None:
    """(line, n_fields) of the first non-blank record whose field count differs (error path)."""
    for lineno, fields in _records(src):
        if len(fields) != n_cols:
            return lineno, len(fields)
    return None


def _line_of_row(src: _Source, row: int) -> int | None:
    """Physical line number of data row ``row`` (0-based, after the header; error path only)."""
    for seen, (lineno, _) in enumerate(_records(src), -1):  # the header is row -1
        if seen == row:
            return lineno
    return None


def _at_row(src: _Source, row: int, message: str, *, record: str | None = None) -> GemmperfInputError:
    """An error for data row ``row`` (0-based): the file, its line and ``row N`` (1-based)."""
    where = f"row {row + 1}" + (f", {record}" if record else "")
    return GemmperfInputError(src.path, message, line=_line_of_row(src, row), record=where)


def _shown(text: str, limit: int = 60) -> str:
    """A cell for an error message: repr, cut to ``limit`` characters (cells can be 1 MB)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def _read_table(src: _Source, kind: CsvKind, types: dict[str, pa.DataType],
                include: list[str] | None = None, *, strings_null: bool = False,
                newlines: bool = False) -> pa.Table:
    """Parse with pyarrow; turn its errors into one-line messages with a line number.

    Fast path ``newlines_in_values=False`` (block splitting on any newline). A quoted newline
    in a kernel name either parses correctly inside a block or, where it straddles a block
    boundary, makes pyarrow fail (the cut record is short of fields: string columns are never
    last); any parse failure is therefore retried once with quote-aware splitting before it is
    reported.
    """
    ro = pacsv.ReadOptions(use_threads=True)
    po = pacsv.ParseOptions(newlines_in_values=newlines)
    # only an empty cell is missing: pyarrow's default null spellings ("nan", "NULL", "N/A",
    # ...) would turn text in a numeric column into a silent gap
    co = pacsv.ConvertOptions(column_types=types, include_columns=include, null_values=[""],
                              strings_can_be_null=strings_null, quoted_strings_can_be_null=False)
    try:
        return pacsv.read_csv(src.open(), read_options=ro, parse_options=po, convert_options=co)
    except pa.ArrowInvalid as exc:
        msg = str(exc)
        if _CONV_ERR.search(msg):
            raise  # _read_typed retries leniently
        if not newlines:
            return _read_table(src, kind, types, include, strings_null=strings_null, newlines=True)
        if "Expected" in msg and "columns" in msg:
            bad = _find_bad_row(src, kind.n_cols)
            if bad is not None:
                line, n = bad
                raise GemmperfInputError(src.path, f"row has {n} fields, the {kind.version} "
                                                   f"{kind.kind} header has {kind.n_cols}",
                                         line=line) from None
        raise GemmperfInputError(src.path, f"cannot parse CSV: {msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GemmperfInputError(src.path, f"cannot parse CSV: {exc}") from None


def _type_ok(got: pa.DataType, want: pa.DataType) -> bool:
    if got == want:
        return True
    if pa.types.is_floating(want):
        return pa.types.is_integer(got) or pa.types.is_floating(got)
    return False


_CONV_ERR = re.compile(r"In CSV column #(\d+): CSV conversion error to (\w+): invalid value '([^']*)'")


def _read_typed(src: _Source, kind: CsvKind, types: dict[str, pa.DataType],
                include: list[str] | None = None) -> pa.Table:
    """Parse numbers fast and exactly; reject what is not a number of the column's type.

    Fast path: string columns typed (dictionary-encoded), int64 columns left to pyarrow's
    inference, which measured faster than declaring them (pyarrow 26) and yields int64 for
    every well-formed rocprofv3 file. If a column comes back as anything else (``16384.000000``
    or ``1.6384e+04`` in an integer column, empty cells, integers beyond int64, which pyarrow
    infers as *double*), or a declared type fails, the numeric columns are re-read as text and
    converted exactly by :mod:`~pytest_gemmperf.traces.csv_values`, which names the first bad
    cell (row, line, column, reason). Float columns must be finite; no string cell may hold a
    NUL character.
    """
    types = {c: t for c, t in types.items() if c not in kind.extra}
    declared = {c: t for c, t in types.items() if t != pa.int64()}
    try:
        table = _read_table(src, kind, declared, include)
        if all(_type_ok(table.schema.field(c).type, t) for c, t in types.items()
               if c in table.column_names) and not _any_negative(table, types):
            _check_cells(src, table)
            return table
    except pa.ArrowInvalid as exc:
        if not _CONV_ERR.search(str(exc)):
            raise GemmperfInputError(src.path, f"cannot parse CSV: {exc}") from None
    loose = {c: (pa.string() if pa.types.is_integer(t) or pa.types.is_floating(t) else t)
             for c, t in types.items()}
    try:
        table = _read_table(src, kind, loose, include, strings_null=True)
    except pa.ArrowInvalid as exc:
        raise GemmperfInputError(src.path, f"cannot parse CSV: {exc}") from None
    cols = {}
    for name in table.column_names:
        t = types.get(name)
        col = table.column(name)
        problem = None
        if t is not None and pa.types.is_integer(t):
            col, problem = ints_from_text(col, t)
        elif t is not None and pa.types.is_floating(t):
            col, problem = floats_from_text(col)
        if problem is not None:
            row, text, reason = problem
            raise _at_row(src, row, f"column {name!r}: {_shown(text)} {reason}")
        cols[name] = col
    table = pa.table(cols)
    _check_cells(src, table)
    return table


def _any_negative(table: pa.Table, types: dict[str, pa.DataType]) -> bool:
    """Whether an inferred int64 column holds a negative value.

    pyarrow's inference reads hex literals and wraps ``0x8000000000000000`` and above to
    negative int64 values without a word; rocprofv3 writes no negative integers, so a negative
    value sends the file through the exact text path, which tells the two apart (one min per
    column, about a millisecond per million rows).
    """
    for name in table.column_names:
        if types.get(name) == pa.int64() and pa.types.is_integer(table.schema.field(name).type):
            low = pc.min(table.column(name)).as_py()
            if low is not None and low < 0:
                return True
    return False


def _check_cells(src: _Source, table: pa.Table) -> None:
    """Reject non-finite floats (pyarrow reads ``inf``/``nan``/``1e400`` silently) and NUL
    characters in strings (they would make a second, invisible spelling of a kernel name)."""
    for name in table.column_names:
        col = table.column(name)
        row = first_non_finite(col)
        if row is not None:
            raise _at_row(src, row, f"column {name!r}: {col[row].as_py()!r} is not a finite number")
        if pa.types.is_dictionary(col.type) or pa.types.is_string(col.type):
            row = first_nul(col)
            if row is not None:
                raise _at_row(src, row, f"column {name!r}: {_shown(str(col[row].as_py()))} "
                                        "contains a NUL character")
