"""Numbers as they are written: no binary float noise (``9436.846899999999`` for 9436.8469,
``99.99999999999999`` for 100), nanoseconds as integers, booleans typed.

Every written table and document passes its numbers through here (``safe_io.csv_text``, the
workbook, ``jsonsafe.clean``). A float keeps :data:`SIGNIFICANT` significant digits: more than
any measurement here holds (a timer's nanoseconds over a day of run time need 14; a duration of
one run needs fewer than 12), and few enough that the arithmetic's last-bit error never shows:
the shortest text of a written float has at most that many significant digits.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: significant digits a written float keeps
SIGNIFICANT = 12
#: float columns up to this length are tidied value by value in Python (faster than NumPy's
#: string formatting below some hundred values; the same text, parsed to the same double)
_SMALL_COLUMN = 64


def tidy_float(x: float) -> float:
    """``x`` at :data:`SIGNIFICANT` significant digits (non-finite values as they are)."""
    if not math.isfinite(x):
        return x
    return float(f"{x:.{SIGNIFICANT}g}")


def tidy_json(doc: Any) -> Any:
    """A JSON-bound document (dicts, lists, tuples, scalars) with every float tidied
    (:func:`tidy_float`); everything else as it is. Pure Python: the results layout's writers
    use it without loading numpy."""
    if isinstance(doc, bool):
        return doc
    if isinstance(doc, float):
        return tidy_float(doc)
    if isinstance(doc, dict):
        return {k: tidy_json(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [tidy_json(v) for v in doc]
    return doc


def significant_digits(x: float) -> int:
    """Significant digits of the shortest text that reads back as ``x`` (``repr``): 9436.8469 has
    8, 9436.846899999999 has 16; 0 for zero and non-finite values."""
    if not math.isfinite(x) or x == 0:
        return 0
    mantissa = repr(abs(x)).lower().split("e")[0].replace(".", "").lstrip("0").rstrip("0")
    return max(1, len(mantissa))


def is_ns_column(name: object) -> bool:
    """A column of nanoseconds, by the project's naming (``dur_ns``, ``median_ns``)."""
    return isinstance(name, str) and name.endswith("_ns")


def tidy_frame(df: "pd.DataFrame") -> "pd.DataFrame":
    """``df`` as written: float columns of nanoseconds (``*_ns``) rounded to integers (nullable
    ``Int64``), other float columns at :data:`SIGNIFICANT` significant digits; object columns
    holding only booleans and nulls as the nullable ``boolean`` type, their floats tidied. The
    input is not changed; a frame without such columns comes back as it is."""
    # lazy: the plugin imports the writers' module at start-up; tables need pandas anyway
    import numpy as np
    import pandas as pd  # lazy: as numpy above

    columns = [s for _, s in df.items()]  # by position: names may repeat
    changed: dict[int, pd.Series] = {}
    for i, (name, s) in enumerate(zip(df.columns, columns)):
        if pd.api.types.is_float_dtype(s.dtype):
            changed[i] = _tidy_floats(s, name, np, pd)
        elif s.dtype == object:
            fixed = _tidy_objects(s, pd)
            if fixed is not None:
                changed[i] = fixed
    if not changed:
        return df
    if df.index.is_unique:
        # one new frame of every column: a column set in place costs as much as tidying it
        out = pd.DataFrame({i: changed.get(i, s) for i, s in enumerate(columns)}, index=df.index)
        out.columns = df.columns
        return out
    out = df.copy(deep=False)
    for i, s in changed.items():
        out.isetitem(i, s)
    return out


def _tidy_floats(s: "pd.Series", name: object, np: Any, pd: Any) -> "pd.Series":
    if is_ns_column(name):
        arr = s.to_numpy(dtype=np.float64, na_value=np.nan)
        finite = np.isfinite(arr)
        # beyond int64 a nanosecond count is no measurement: left as a float, tidied
        if np.all(np.abs(arr[finite]) < 2.0 ** 62):
            ints = np.where(finite, np.rint(np.where(finite, arr, 0.0)), 0).astype(np.int64)
            return pd.Series(pd.arrays.IntegerArray(ints, ~finite), index=s.index, name=s.name)
    if s.dtype == np.float64 and len(s) <= _SMALL_COLUMN:
        # a short float64 column, value by value (NaN is its only missing value): the same
        # text and parse as below, without NumPy's masks and copies
        values = s.to_numpy().tolist()
        if not any(map(math.isfinite, values)):
            return s
        return pd.Series(np.array([tidy_float(x) for x in values], dtype=np.float64), index=s.index, name=s.name)
    arr = s.to_numpy(dtype=np.float64, na_value=np.nan)
    finite = np.isfinite(arr)
    if not finite.any():
        return s
    out = arr.copy()
    # through text: the nearest double to a 12-digit decimal is the one whose repr is that decimal
    if len(arr) <= _SMALL_COLUMN:  # the same text and parse, without NumPy's per-call set-up
        out[finite] = [tidy_float(x) for x in arr[finite].tolist()]
    else:
        out[finite] = np.char.mod(f"%.{SIGNIFICANT}g", arr[finite]).astype(np.float64)
    if isinstance(s.dtype, pd.Float64Dtype):
        return pd.Series(pd.array(out, dtype="Float64"), index=s.index, name=s.name).mask(s.isna())
    if s.dtype == np.float64:  # already the column's type: no conversion pass
        return pd.Series(out, index=s.index, name=s.name)
    return pd.Series(out, index=s.index, name=s.name).astype(s.dtype)


def _tidy_objects(s: "pd.Series", pd: Any) -> "pd.Series | None":
    """An object column of booleans (and nulls) as ``boolean``; of mixed values, its floats
    tidied; None when nothing changes."""
    values = s.tolist()
    kinds = {type(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))
             and v is not pd.NA}
    if kinds and kinds <= {bool, _np_bool()}:
        return s.astype("boolean")
    if float in kinds and any(isinstance(v, float) and significant_digits(v) > SIGNIFICANT for v in values):
        return pd.Series([tidy_float(v) if isinstance(v, float) else v for v in values], index=s.index,
                         name=s.name, dtype=object)
    return None


def _np_bool() -> type:
    import numpy as np  # lazy: as tidy_frame

    return np.bool_
