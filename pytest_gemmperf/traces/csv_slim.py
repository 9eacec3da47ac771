"""A rocprofv3 ``kernel_trace.csv`` read for a per-source reduction, a block of rows at a time.

The full read (:func:`~pytest_gemmperf.traces.csv_kernel_trace.read_kernel_trace_csv`) parses
the whole file into an arrow table of some 20 columns and builds a pandas table of 35 from it:
a few hundred bytes a dispatch, all at once. ``gemmperf analyze --no-report`` reads ten of them
(``analysis/source_totals.READ_COLUMNS``). A slim read (``read_kernel_trace_csv(path,
columns=...)`` with the columns among :data:`SLIM_COLUMNS`) streams the file through
``pyarrow.csv.open_csv`` in blocks of :data:`BLOCK_BYTES`, parses every column the full read
parses, with its types, runs the full read's cell checks on each block, and keeps per row
(:class:`SlimRows`):

* its kernel name's code and its lane's code (one per distinct ``(Agent_Id, Queue_Id,
  Stream_Id)``, what the in-order check groups by), numbered across the file;
* its start (from its block's earliest) and its duration, in the narrowest integer types that
  hold a block's values: about 12 bytes a dispatch.

Exactness: a value the slim read keeps is the value the full read makes of the same text, and
it keeps nothing where the two could differ. The full read's error is the error: a block that
does not parse with the fast types is read again as text and converted exactly, as the full
read's second pass does; whatever the full read would refuse (a cell that is no number of its
column's type, a NUL or an empty string in a text column, an empty or negative duration, a
row of the wrong width, an Agent_Id it cannot map) stops the slim read, and the caller reads
the file whole, so that the error is the full read's own line (file, line, row, column). A file
that reads cleanly comes out as :class:`~pytest_gemmperf.traces.coded.CodedDispatches` whose
key rows (one per kernel name) are built by the full read's own column code, so the table
they stand for equals the full table's columns (values, dtypes, categories, row order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from pytest_gemmperf.traces.coded import NUMBER_COLUMNS, CodedDispatches, first_positions
from pytest_gemmperf.traces.csv_parse import _Source
from pytest_gemmperf.traces.csv_values import ints_from_text
from pytest_gemmperf.traces import rocprof_slim
from pytest_gemmperf.traces.rocprof_slim import Starts, pop_column, value_codes
from pytest_gemmperf.traces.schema import lane_ids, overlap_lane_by_lane
from pytest_gemmperf.traces.slim_arrays import narrow, release_free_memory

__all__ = ["BLOCK_BYTES", "SLIM_COLUMNS", "SlimRows", "can_slim", "read_rows", "coded_dispatches"]

#: the dispatch columns this slim read makes, each equal to the full read's: the rocprofv3 JSON
#: slim read's but ``agent`` (a GPU a key row is not kept here: asked for it, the file is read whole)
SLIM_COLUMNS = tuple(c for c in rocprof_slim.SLIM_COLUMNS if c != "agent")


def can_slim(columns: Sequence[str] | None) -> bool:
    """Whether this slim read serves ``columns`` (:func:`~.rocprof_slim.can_slim`)."""
    return rocprof_slim.can_slim(columns, SLIM_COLUMNS)

#: CSV bytes parsed at a time: pyarrow's default block. Its memory pool keeps what a block
#: used for the next, so larger blocks cost more resident memory than they save in time (16 MiB
#: blocks: +95 MiB peak on a 100 MB file, 2.4x the wall time of 1 MiB blocks there)
BLOCK_BYTES = 1 << 20

#: the canonical columns a slim read keeps per row, by the full read's names (``_KT_MAP``)
_KEPT = ("kernel", "_agent", "queue", "stream", "start_ns", "end_ns")


class _Doubt(Exception):
    """The full read might refuse the file or read it otherwise: it decides."""


class SlimRows:
    """A kernel trace's rows, compact (see the module docstring)."""

    def __init__(self) -> None:
        self.kernels: dict[str, int] = {}  # kernel name -> code, in order of first appearance
        self.labels: dict[str, int] = {}   # Agent_Id label -> code, in order of first appearance
        self.lanes: dict[tuple, int] = {}  # (label code, queue, no queue, stream, no stream) -> code
        self.parts: dict[str, list[np.ndarray]] = {"kernel": [], "lane": [], "dur_ns": []}
        self.starts = Starts()
        self.n = 0

    def add(self, cols: dict[str, pa.Array]) -> None:
        """Keep a block's rows (``cols``: its kept columns, checked, by canonical name)."""
        start = _ints(cols["start_ns"], required=True)[0]
        dur = _ints(cols["end_ns"], required=True)[0] - start  # wraps as the full read's does
        if len(dur) and dur.min() < 0:
            raise _Doubt  # ends before it starts (or a span beyond int64): the full read's error
        n = len(start)
        queue, no_queue = _ints(cols.get("queue"), n)
        stream, no_stream = _ints(cols.get("stream"), n)
        label = _dictionary_codes(self.labels, cols["_agent"])
        lane = np.column_stack([label, queue, no_queue, stream, no_stream])
        self.parts["kernel"].append(narrow(_dictionary_codes(self.kernels, cols["kernel"])))
        self.parts["lane"].append(value_codes(self.lanes, lane))
        self.starts.add(start)
        self.parts["dur_ns"].append(narrow(dur))
        self.n += n

    def pop(self, column: str) -> np.ndarray:
        return pop_column(self.parts, self.starts, column)

    def lane_rows(self) -> tuple[np.ndarray, list[tuple]]:
        """The lane codes in the order the rows first show them, and each one's values
        (label code, queue or None, stream or None)."""
        lane = self.parts["lane"]
        n_lanes = len(self.lanes)
        first = np.full(n_lanes, np.iinfo(np.int64).max, dtype=np.int64)
        at = 0
        for part in lane:  # per part: no array as long as all rows
            seen = first_positions(part, n_lanes)
            hit = seen >= 0
            first[hit] = np.minimum(first[hit], seen[hit] + at)
            at += len(part)
        order = np.argsort(first, kind="stable")[: int((first < np.iinfo(np.int64).max).sum())]
        values = list(self.lanes)
        return order, [(values[k][0], None if values[k][2] else values[k][1],
                        None if values[k][4] else values[k][3]) for k in order.tolist()]


def _ints(col: pa.Array | None, n: int = 0, required: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """An int64 column's values (0 where missing) and its missing mask; an absent column is all
    missing; a missing value where ``required``: the full read's error."""
    if col is None:
        return np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
    if col.null_count:
        if required:
            raise _Doubt
        return (col.fill_null(0).to_numpy(zero_copy_only=False),
                col.is_null().to_numpy(zero_copy_only=False))
    return col.to_numpy(zero_copy_only=False), np.zeros(len(col), dtype=bool)


def _dictionary_codes(table: dict[str, int], col: pa.DictionaryArray) -> np.ndarray:
    """Per row its text's code in ``table`` (new texts numbered on, in the block's order)."""
    words = col.dictionary.to_pylist()
    lookup = np.fromiter((table.setdefault(w, len(table)) for w in words), dtype=np.int64,
                         count=len(words))
    return lookup[col.indices.to_numpy(zero_copy_only=False)]


def _checked_text(col: pa.Array) -> pa.DictionaryArray:
    """A text column as the full read accepts it in either of its passes: no missing cell (an
    unquoted empty cell is missing in one pass and empty text in the other), no empty text
    and no NUL character (the full read's error)."""
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    if col.null_count:
        raise _Doubt
    for w in col.dictionary.to_pylist():
        if not w or "\x00" in w:
            raise _Doubt
    return col


def _block_columns(batch: pa.RecordBatch, names: dict[str, str], types: dict[str, pa.DataType],
                   text: bool) -> dict[str, pa.Array]:
    """A block's kept columns by canonical name, every parsed column checked as the full read
    checks it. Read with the fast types a negative integer (pyarrow wraps hex literals from
    2**63 up to negative values) needs the exact text pass; read as text a cell that is no
    integer is the full read's error."""
    out = {}
    for raw in batch.schema.names:
        col = batch.column(raw)
        want = types[raw]
        if pa.types.is_integer(want):
            if text:
                col, problem = ints_from_text(col, want)
                if problem is not None:
                    raise _Doubt
            elif col.type != want:
                raise _Doubt
            elif col.null_count < len(col) and pc.min(col).as_py() < 0:
                raise _TextPass
        else:
            col = _checked_text(col)
        canon = names[raw]
        if canon in _KEPT:
            out[canon] = col
    return out


class _TextPass(Exception):
    """The fast types do not read the file exactly: read it again as text."""


def read_rows(src: _Source, wanted: Sequence[str], names: dict[str, str],
              types: dict[str, pa.DataType]) -> SlimRows | None:
    """The kernel trace's rows (``wanted``: the columns the full read parses, ``names`` their
    canonical names, ``types`` the full read's types), or None where the full read decides
    (module docstring). Tried with the fast types first, then as text with quote-aware block
    splitting, as the full read tries."""
    for text in (False, True):
        try:
            return _read_rows(src, wanted, names, types, text)
        except (_TextPass, pa.ArrowInvalid):
            continue
        except _Doubt:
            return None
    return None


def _read_rows(src: _Source, wanted: Sequence[str], names: dict[str, str],
               types: dict[str, pa.DataType], text: bool) -> SlimRows | None:
    parse_types = {c: (pa.string() if text and pa.types.is_integer(types[c]) else types[c])
                   for c in wanted}
    reader = pacsv.open_csv(
        src.open(), read_options=pacsv.ReadOptions(block_size=BLOCK_BYTES),
        parse_options=pacsv.ParseOptions(newlines_in_values=text),
        convert_options=pacsv.ConvertOptions(column_types=parse_types, include_columns=list(wanted),
                                             null_values=[""], strings_can_be_null=text,
                                             quoted_strings_can_be_null=False))
    rows = SlimRows()
    try:
        for i, batch in enumerate(reader):
            rows.add(_block_columns(batch, names, types, text))
            if i % 64 == 63:
                _release(pa)
    except (OSError, UnicodeDecodeError):
        raise _Doubt from None
    finally:
        reader.close()
        _release(pa)
    return rows if rows.n else None  # no rows: the full read's NoDispatches


def _release(pa_module) -> None:
    """Give back what parsing blocks left resident: arrow's pool keeps freed buffers for the
    next block, and glibc the heap pages of freed small arrays between the kept ones."""
    pa_module.default_memory_pool().release_unused()
    release_free_memory()


def coded_dispatches(rows: SlimRows, columns: Sequence[str],
                     key_table: Callable[[list[str], list[str]], pd.DataFrame],
                     lane_table: Callable[[list[str], list[tuple]], pd.DataFrame]) -> CodedDispatches:
    """The rows as the full table's ``columns``, coded: one key row per kernel name
    (``key_table(names, key_columns)``: the full read's columns among ``key_columns`` of one row
    per name, in that order), and per
    row its kernel's code, start, duration and in-order flag, its lanes found by the full
    read's ``lane_ids`` on ``lane_table(labels, lanes)`` (one row per lane, in the order the
    rows first show them: the full read's lane columns of those rows)."""
    order, values = rows.lane_rows()
    lane_of = np.zeros(len(rows.lanes), dtype=np.int64)
    lane_of[order] = lane_ids(lane_table(list(rows.labels), values))
    lane = rows.pop("lane")
    start = rows.pop("start_ns")
    dur = rows.pop("dur_ns")
    overlap = (overlap_lane_by_lane(narrow(lane_of)[lane], start, dur=dur) if "queue_overlap" in columns
               else np.zeros(len(start), dtype=bool))
    del lane
    keys = key_table(list(rows.kernels), [c for c in columns if c not in NUMBER_COLUMNS])
    return CodedDispatches(keys=keys.reset_index(drop=True), code=rows.pop("kernel"), start_ns=start,
                           dur_ns=dur, queue_overlap=overlap, columns=tuple(columns))
