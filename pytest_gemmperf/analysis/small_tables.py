"""Small tables without pandas' fixed costs.

On a table of a few rows (one trace's kernels, a single sweep's cells) each pandas grouping or
sort costs a millisecond or more whatever the size, which is most of what a small analysis
spends. Below :data:`SMALL_TABLE_ROWS` rows the analysis and report code takes NumPy and plain
Python shortcuts that give pandas' own results, value for value and in pandas' order; above it
pandas' vectorized paths are faster. What those shortcuts share lives here.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

#: up to this many rows a table takes the shortcuts (measured: NumPy's one-sort passes are even
#: with pandas' grouped ones near 20,000 rows and 5x slower at a million)
SMALL_TABLE_ROWS = 10_000


def descending_order(values: np.ndarray, kind: str = "quicksort") -> np.ndarray:
    """The positions of ``values`` largest first as pandas orders them: ``sort_values(
    ascending=False)`` (``kind="quicksort"``, its default) or ``nlargest`` (``kind="stable"``):
    the reversed values sorted ascending, then reversed, which decides where equal values go."""
    n = len(values)
    return np.arange(n)[::-1][np.asarray(values)[::-1].argsort(kind=kind)][::-1]


def plain_index(df: pd.DataFrame) -> bool:
    """Whether ``df``'s index is an unnamed ``0 .. n-1``: what ``reset_index(drop=True)`` and
    ``ignore_index`` give, so neither needs making again."""
    index = df.index
    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1 and index.name is None


def one_row_per_key(df: pd.DataFrame, keys: Sequence[str]) -> bool:
    """Whether each of ``df``'s (at most :data:`SMALL_TABLE_ROWS`) rows has a text key of its
    own in ``keys`` (none missing, none repeated): grouped by them, each group is one row, whose
    sum, mean, median or first value is the row's own value."""
    if len(df) > SMALL_TABLE_ROWS:
        return False
    columns = [df[k].tolist() for k in keys]
    if not all(isinstance(v, str) for col in columns for v in col):
        return False
    return len(set(zip(*columns))) == len(df)


def object_values(s: pd.Series, rows: np.ndarray | None = None) -> np.ndarray:
    """``s.astype(object).where(s.notna(), None)``'s values in one object array (``rows``: at
    those positions alone). A categorical's categories are converted once and picked by code;
    any other column is converted and its missing cells set to None in place (pandas' ``where``
    on an object column alone costs a millisecond, and a small report converts some hundred
    columns)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        cat = s.array
        table = np.empty(len(cat.categories) + 1, dtype=object)
        table[:-1] = cat.categories.to_numpy(dtype=object)
        table[-1] = None  # code -1: missing
        return table[cat.codes if rows is None else cat.codes[rows]]  # the rows' codes alone converted
    if rows is not None:
        s = s.iloc[rows]
    values = s.to_numpy(dtype=object, copy=True)  # never a view of the column itself
    values[np.asarray(s.array.isna(), dtype=bool)] = None  # the array's own mask: no Series of it
    return values


def taken(col: pd.Series, rows: np.ndarray, *, text: bool = False) -> pd.Series | Any:
    """``col``'s values at the positions ``rows``, of its dtype, to build a frame from (numbered
    ``0 ..``); ``text``: a categorical as objects (:func:`object_values`). An object column stays
    one (a frame built from its bare values would read its text as strings)."""
    if text and isinstance(col.dtype, pd.CategoricalDtype):
        return pd.Series(object_values(col, rows), dtype=object)
    if col.dtype == object:
        return pd.Series(col.to_numpy()[rows], dtype=object)
    return col.array.take(rows)
