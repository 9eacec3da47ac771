"""rocprofv3 CSV readers (ROCm 6.2 -> 7.x, ``rocpd convert`` output, legacy rocprof v1).

Formats follow ``docs/rocprofv3-formats.md`` (shared docs) sections 2, 3, 7 and 9:

* every header cell is double-quoted, string cells are quoted without escaping, numbers are
  bare; floats may be ``16384.000000`` or ``4.34259040e-02``;
* the version is told by the header: ``kernel_trace.csv`` has 16 (6.2), 18 (6.3/6.4),
  19 (unreleased transitional) or 22 (7.x) columns; a leading ``"Guid"`` is the ``rocpd convert``
  dialect (ROCm 7.1.1 spells ``Lds_Block_Size``/``Vgpr_Count``...);
* rows are in buffer order, not time order: the readers keep file order and never rely on it.

The kernel-trace path is the hot one (a million dispatches per process is ordinary), so it
parses with pyarrow using explicit column types, dictionary-encodes the string columns (they
become pandas categoricals for free) and builds every canonical column itself, so
:func:`~pytest_gemmperf.traces.schema.finalize_dispatches` has nothing left to convert.

Input contract: every number is read exactly or rejected - integers beyond int64,
``inf``/``nan``/``1e400``, fractions in integer columns, text in numeric columns and NUL
characters are a :class:`~pytest_gemmperf.errors.GemmperfInputError` naming the file, line,
data row and column; no value passes through float64. Unknown extra columns are ignored with a
note in ``meta["notes"]`` (or ``attrs["notes"]`` for the table readers).

This module is the public entry: :func:`read_rocprof_csv` reads any rocprofv3 CSV, and the
per-kind readers are importable from here. The work is split by job:

* :mod:`~pytest_gemmperf.traces.csv_layouts`: which CSV a header is (kind, version, columns);
* :mod:`~pytest_gemmperf.traces.csv_parse` / :mod:`~pytest_gemmperf.traces.csv_values`:
  pyarrow parsing and exact cell conversion;
* :mod:`~pytest_gemmperf.traces.csv_columns`: arrow -> canonical pandas columns, agent ids,
  host/pid from paths;
* :mod:`~pytest_gemmperf.traces.csv_kernel_trace`: ``kernel_trace.csv`` / v1 ``results.csv``
  -> dispatches (the hot path);
* :mod:`~pytest_gemmperf.traces.csv_tables`: counter_collection, agent_info, stats and
  memory_copy CSVs -> their tables.
"""

from __future__ import annotations

import os

import pandas as pd
import pyarrow as pa

from pytest_gemmperf.traces.csv_columns import SOURCE, host_pid_from_path, parse_agent_label
from pytest_gemmperf.traces.csv_kernel_trace import read_kernel_trace_csv
from pytest_gemmperf.traces.csv_layouts import CsvKind, detect_csv
from pytest_gemmperf.traces.csv_parse import _prepare_source, _read_typed
from pytest_gemmperf.traces.csv_tables import (
    read_agent_info_csv,
    read_counter_collection_csv,
    read_kernel_stats_csv,
    read_memory_copy_csv,
)
from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA, Trace, empty, finalize_dispatches

#: imported from here by discovery, tests and benchmarks
__all__ = [
    "CsvKind", "detect_csv", "host_pid_from_path", "parse_agent_label", "read_agent_info_csv",
    "read_counter_collection_csv", "read_kernel_stats_csv", "read_kernel_trace_csv",
    "read_memory_copy_csv", "read_rocprof_csv",
]


# --------------------------------------------------------------------------------------------
# Any rocprofv3 CSV
# --------------------------------------------------------------------------------------------

#: integer columns of the CSVs kept as raw tables (API, scratch, allocation, PC sampling)
_RAW_INTS = frozenset({"start_timestamp", "end_timestamp", "correlation_id", "thread_id",
                       "process_id", "queue_id", "dispatch_id", "sample_timestamp",
                       "allocation_size", "stream_id"})


def _read_raw(path: str, kind: CsvKind) -> pd.DataFrame:
    """A CSV kept as a table: its integer columns exact and checked (nullable ``Int64``),
    every other column as text (flags and masks such as ``0x%016x`` stay as written)."""
    src = _prepare_source(path)
    types = {c: (pa.int64() if c.lower() in _RAW_INTS else pa.string()) for c in kind.known}
    table = _read_typed(src, kind, types, list(types))
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def _empty_dispatches(path: str) -> pd.DataFrame:
    return finalize_dispatches(empty(DISPATCH_SCHEMA), path, allow_empty=True)


def read_rocprof_csv(path: str | os.PathLike) -> Trace:
    """Read any rocprofv3 CSV into a :class:`Trace`, dispatching on :func:`detect_csv`.

    kernel_trace / legacy v1 -> dispatches; counter_collection -> counters (dispatches empty);
    agent_info -> agents; stats files -> ``meta[<kind>]`` (e.g. ``meta["kernel_stats"]``);
    memory_copy -> ``meta["memory_copy"]``; other CSVs -> ``meta[<kind>]`` as parsed.
    """
    path = os.fspath(path)
    kind = detect_csv(path)
    base = {"format": SOURCE, "csv_kind": kind.kind, "csv_version": kind.version,
            "n_cols": kind.n_cols}
    if kind.extra:
        base["notes"] = kind.notes(path)
    if kind.kind in ("kernel_trace", "legacy_v1_kernel"):
        return read_kernel_trace_csv(path)
    if kind.kind == "counter_collection":
        counters = read_counter_collection_csv(path)
        meta = {**base, **counters.attrs}
        counters.attrs = {}
        return Trace(dispatches=_empty_dispatches(path), counters=counters, files=[path], meta=meta)
    if kind.kind == "agent_info":
        return Trace(dispatches=_empty_dispatches(path), agents=read_agent_info_csv(path),
                     files=[path], meta=base)
    if kind.kind.endswith("_stats"):
        stats = read_kernel_stats_csv(path)
        return Trace(dispatches=_empty_dispatches(path), files=[path], meta={**base, kind.kind: stats})
    if kind.kind == "memory_copy":
        return Trace(dispatches=_empty_dispatches(path), files=[path],
                     meta={**base, "memory_copy": read_memory_copy_csv(path)})
    return Trace(dispatches=_empty_dispatches(path), files=[path],
                 meta={**base, kind.kind: _read_raw(path, kind)})
