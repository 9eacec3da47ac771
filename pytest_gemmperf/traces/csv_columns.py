"""rocprofv3 CSV cells -> canonical pandas columns, shared by every rocprofv3 CSV reader.

Split from :mod:`pytest_gemmperf.traces.rocprof_csv`. Three jobs, all cheap per distinct value
rather than per row (a kernel trace has a million rows and a few hundred distinct strings):

* column builders: arrow / numpy -> ``Int64``, int64 ns and categorical pandas arrays without a
  float round trip; constant columns as categoricals of one value;
* agent ids: ``Agent_Id`` labels (``"Agent 4"``, ``"GPU 0"``, ``"3"``) -> the canonical
  ``agent`` number, through the agents table where one is known;
* path conventions: host and pid from ``<host>/<pid>_kernel_trace.csv``, sibling files;

plus the arrow type each header column is parsed with (:func:`_column_types`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.csv_parse import _DICT, _Source, _at_row
from pytest_gemmperf.traces.schema import INT, constant_column, no_categories

#: the ``source`` value of every table read from a rocprofv3 CSV: its kind's name
SOURCE = "rocprof-csv"

# --------------------------------------------------------------------------------------------
# Column builders (cheap pandas columns straight from arrow / numpy)
# --------------------------------------------------------------------------------------------

def _const_cat(value: Any, n: int) -> pd.Categorical:
    if value is None:
        return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), dtype=no_categories("str"))
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[value])


def _const_int(value: int | None, n: int) -> pd.api.extensions.ExtensionArray:
    return constant_column(value, INT, n)


def _int_col(col: pa.ChunkedArray) -> pd.api.extensions.ExtensionArray:
    """Arrow int column -> pandas ``Int64`` without a float round trip."""
    if col.type != pa.int64():
        col = pc.cast(col, pa.int64())
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if arr.null_count == 0:
        values = arr.to_numpy(zero_copy_only=False)
        return pd.arrays.IntegerArray(values, np.zeros(len(values), dtype=bool))
    mask = arr.is_null().to_numpy(zero_copy_only=False)
    values = arr.fill_null(0).to_numpy(zero_copy_only=False)
    return pd.arrays.IntegerArray(values, mask)


def _ns_col(col: pa.ChunkedArray, src: _Source, name: str) -> np.ndarray:
    if col.null_count:
        i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise _at_row(src, i, f"column {name!r} is empty")
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return arr.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _cat_col(col: pa.ChunkedArray) -> pd.Categorical:
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    arr = col.unify_dictionaries().combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return arr.to_pandas().array


def map_category_values(cat: pd.Categorical | pd.Series, fn: Callable[[str], Any]) -> pd.Categorical:
    """Apply ``fn`` once per distinct category and remap codes (no per-row Python objects).

    ``fn`` returning None gives a missing value.
    """
    cat = cat.array if isinstance(cat, pd.Series) else cat
    mapped = [fn(str(c)) for c in cat.categories]
    uniq = sorted({str(v) for v in mapped if v is not None})
    index = {v: i for i, v in enumerate(uniq)}
    table = np.asarray([index[str(v)] if v is not None else -1 for v in mapped] + [-1], dtype=np.int32)
    codes = np.asarray(cat.codes)
    return pd.Categorical.from_codes(table[codes], categories=pd.Index(uniq, dtype="str"))


# --------------------------------------------------------------------------------------------
# Agent ids
# --------------------------------------------------------------------------------------------

_AGENT_RX = re.compile(r"^\s*(?:(Agent|GPU|CPU)\s+)?(\d+)\s*$", re.IGNORECASE)
_NUMBERING = {None: "node_id", "agent": "logical_node_id", "gpu": "gpu_index", "cpu": "cpu_index"}


def parse_agent_label(label: str) -> tuple[str | None, int] | None:
    """``"Agent 4"`` -> ("agent", 4); ``"GPU 0"`` -> ("gpu", 0); ``"3"`` -> (None, 3)."""
    m = _AGENT_RX.match(str(label))
    if not m:
        return None
    return (m.group(1).lower() if m.group(1) else None), int(m.group(2))


def _agent_column(labels: pd.Categorical, agents: pd.DataFrame | None, path: str
                  ) -> tuple[pd.api.extensions.ExtensionArray, dict[str, Any], pd.Categorical | None]:
    """Map ``Agent_Id`` labels to the canonical ``agent`` number (ARCHITECTURE "agent column").

    Returns (agent column, meta, gpu_arch column or None). Labels are parsed once per distinct
    value; rows only get their codes remapped.
    """
    cats = [str(c) for c in labels.categories]
    parsed = []
    for c in cats:
        p = parse_agent_label(c)
        if p is None:
            raise GemmperfInputError(path, f"Agent_Id {c!r} is neither an integer nor 'Agent N'/"
                                           "'GPU N'/'CPU N'")
        parsed.append(p)
    styles = {p[0] for p in parsed}
    numbering = _NUMBERING[next(iter(styles))] if len(styles) == 1 else "mixed"
    numbers = [p[1] for p in parsed]
    meta: dict[str, Any] = {"agent_labels": cats}
    archs: list[Any] | None = None
    if agents is not None and len(agents) and numbering in ("node_id", "logical_node_id", "gpu_index"):
        gpus = agents[agents["gpu_index"].notna()]
        key = {"node_id": "node_id", "logical_node_id": "logical_id", "gpu_index": "gpu_index"}[numbering]
        lookup = dict(zip(gpus[key].astype("int64"), gpus["gpu_index"].astype("int64")))
        arch_of = dict(zip(gpus["gpu_index"].astype("int64"), gpus["gpu_arch"].astype(object)))
        if all(n in lookup for n in numbers):
            numbers = [lookup[n] for n in numbers]
            archs = [arch_of.get(n) for n in numbers]
            meta["agent_numbering_in_file"] = numbering
            numbering = "gpu_index"
        else:
            missing = sorted(c for c, p in zip(cats, parsed) if p[1] not in lookup)
            meta["agent_map_warning"] = (f"Agent_Id {missing} not found among the GPU agents of "
                                         "the agent table; kept the numbers from the file")
    meta["agent_numbering"] = numbering
    table = np.asarray(numbers + [0], dtype=np.int64)
    codes = np.asarray(labels.codes)
    values = table[np.where(codes >= 0, codes, len(numbers))]
    arch_col = None
    if archs is not None:
        arch_col = map_category_values(labels, dict(zip(cats, archs)).get)
    return pd.arrays.IntegerArray(values, codes < 0), meta, arch_col


# --------------------------------------------------------------------------------------------
# Path conventions
# --------------------------------------------------------------------------------------------

_PID_PREFIX = re.compile(r"^(\d+)_[A-Za-z_]+\.csv$")
_PASS_DIR = re.compile(r"^(pass|pmc)_\d+$")


def host_pid_from_path(path: str | os.PathLike, version: str | None = None) -> tuple[str | None, int | None]:
    """``<host>/<pid>_kernel_trace.csv`` (6.3+ default prefix) -> (host, pid);
    ``<pid>_kernel_trace.csv`` (6.2 default, no host directory) -> (None, pid); else (None, None)."""
    p = Path(path)
    m = _PID_PREFIX.match(p.name)
    if not m:
        return None, None
    pid = int(m.group(1))
    parent = p.parent.name
    if version == "6.2" or not parent or _PASS_DIR.match(parent):
        return None, pid
    return parent, pid


def sibling_file(path: str | os.PathLike, suffix: str) -> Path | None:
    """``<prefix>kernel_trace.csv`` -> ``<prefix><suffix>.csv`` when it exists."""
    p = Path(path)
    for own in ("kernel_trace.csv", "counter_collection.csv", "kernel_stats.csv"):
        if p.name.endswith(own):
            cand = p.with_name(p.name[: -len(own)] + suffix + ".csv")
            return cand if cand.is_file() else None
    return None


# --------------------------------------------------------------------------------------------
# Parse types
# --------------------------------------------------------------------------------------------

#: lower-case header names of text columns (everything else is a number, checked exactly)
_STRING_COLS = {"kind", "agent_id", "kernel_name", "guid", "counter_name", "direction",
                "source_agent_id", "destination_agent_id", "domain", "function", "name",
                "agent_type", "vendor_name", "product_name", "model_name", "operation",
                "address", "instruction", "instruction_comment", "kernelname", "sig", "obj"}


def _column_types(columns: tuple[str, ...], floats: set[str] = frozenset(),
                  uints: set[str] = frozenset()) -> dict[str, pa.DataType]:
    out: dict[str, pa.DataType] = {}
    for c in columns:
        lc = c.lower()
        if lc in _STRING_COLS:
            out[c] = _DICT
        elif lc in floats:
            out[c] = pa.float64()
        elif lc in uints:
            out[c] = pa.uint64()
        else:
            out[c] = pa.int64()
    return out
