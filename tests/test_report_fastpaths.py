"""The reports' per-column conversions take shortcuts for the common dtypes (a small report has
some hundred columns, and pandas' general path costs a few whole-column passes each): each
shortcut gives exactly what the general expression gives, for every dtype a table can hold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis.report_parts import as_objects
from pytest_gemmperf.report.excel import _float64

SERIES = {
    "categorical text": pd.Series(pd.Categorical(["b", None, "a", "b"])),
    "categorical of str dtype": pd.Series(["x", None, "y"], dtype="str").astype("category"),
    "categorical ints": pd.Series(pd.Categorical([3, None, 1])),
    "categorical floats": pd.Series(pd.Categorical([3.5, None, 1.0])),
    "categorical timestamps": pd.Series(pd.Categorical(pd.to_datetime(["2020-01-01", None]))),
    "categorical, none used": pd.Series(pd.Categorical([], categories=["x"])),
    "categorical, all missing": pd.Series(pd.Categorical([None, None], categories=["x"])),
    "categorical, index and name": pd.Series(pd.Categorical(["a", "b"]), index=[5, 7], name="kernel"),
    "object": pd.Series(["a", None, 3, 2.5, True], dtype=object),
    "str": pd.Series(["a", None], dtype="str"),
    "Int64": pd.Series([1, None, 2**62], dtype="Int64"),
    "Float64": pd.Series([1.5, None], dtype="Float64"),
    "boolean": pd.Series([True, None], dtype="boolean"),
    "bool": pd.Series([True, False]),
    "int64": pd.Series([2**53 + 1, 2**63 - 1, -2**63, 0]),
    "uint64": pd.Series([2**64 - 1, 3], dtype="uint64"),
    "int8": pd.Series([1, -2], dtype="int8"),
    "float64": pd.Series([1.5, np.nan, np.inf, -np.inf, 1e300, 9436846.9]),
    "float32": pd.Series([1.25, np.nan], dtype="float32"),
    "datetime": pd.Series(pd.to_datetime(["2020-01-01", None])),
    "empty": pd.Series([], dtype=np.float64),
}


@pytest.mark.parametrize("name", list(SERIES))
def test_as_objects_is_astype_object_with_none_for_missing(name):
    s = SERIES[name]
    want = s.astype(object).where(s.notna(), None)
    got = as_objects(s)
    pd.testing.assert_series_equal(got, want)
    assert [type(x) for x in got] == [type(x) for x in want]
    assert [x is None for x in got] == [x is None for x in want]


@pytest.mark.parametrize("name", [n for n, s in SERIES.items()
                                  if pd.api.types.is_numeric_dtype(s.dtype) or s.dtype == object])
def test_a_workbook_number_column_reads_as_to_numeric_does(name):
    s = SERIES[name]
    want = pd.to_numeric(s, errors="coerce").astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    got = _float64(s)
    assert got.dtype == np.float64 and np.array_equal(got, want, equal_nan=True)
