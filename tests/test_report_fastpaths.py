"""The reports' per-column conversions take shortcuts for the common dtypes (a small report has
some hundred columns, and pandas' general path costs a few whole-column passes each): each
shortcut gives exactly what the general expression gives, for every dtype a table can hold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
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


def test_page_rows_are_what_to_dict_gives_of_the_object_frame():
    """report.html's table rows: the same values, of the same Python types, as
    ``df.astype(object).where(df.notna(), None).to_dict("records")``, NumPy scalars in object
    columns included."""
    from pytest_gemmperf.report.html import _records

    df = pd.DataFrame({name: s.reindex(range(5)) for name, s in SERIES.items() if len(s)})
    df["numpy scalars"] = pd.Series([np.float32(1.5), np.int64(3), np.bool_(True), np.datetime64("2020-01-01"),
                                     np.str_("x")], dtype=object)
    df["text"] = ["=1+1", None, "a", "b", "c"]
    for frame, limit in [(df, 0), (df, 2), (df, 10), (df[["object", "text"]], 5), (df[["float64"]], 5)]:
        want = frame.head(limit).astype(object).where(frame.head(limit).notna(), None).to_dict("records")
        got = _records(frame, limit)
        assert got == want
        assert [[type(v) for v in r.values()] for r in got] == [[type(v) for v in r.values()] for r in want]
    for empty in (pd.DataFrame(), pd.DataFrame(index=range(3)), df.iloc[:0]):
        assert _records(empty) == empty.astype(object).where(empty.notna(), None).to_dict("records")


@pytest.mark.parametrize("name", list(SERIES))
def test_object_values_never_share_the_columns_memory(name):
    """The values are a new array: setting a cell never writes into the table they came from."""
    from pytest_gemmperf.analysis.report_parts import object_values

    s = SERIES[name].copy()
    before = s.copy()
    values = object_values(s)
    values[:] = "x"
    pd.testing.assert_series_equal(s, before)


def test_pivot_columns_are_pandas_pivot_table():
    """The workbook's pivot sheets: the same cells, rows and columns in the same order, as
    pandas' ``pivot_table(aggfunc="first", sort=False)``, for tables with missing keys, missing
    values and pairs that never get one (300 random tables)."""
    import random

    from pytest_gemmperf.report.excel import pivot_columns

    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 25)
        df = pd.DataFrame({"full_config": [rng.choice(["x", "y", "all", "z", None]) for _ in range(n)],
                           "type": [rng.choice(["a", "b", "c", "d", None]) for _ in range(n)],
                           "v": [rng.choice([1.5, 2.25, np.nan, 0.0, -3.0, 1e-9]) for _ in range(n)]})
        want = df.pivot_table(index="type", columns="full_config", values="v", aggfunc="first",
                              sort=False).reset_index()
        keys, got = pivot_columns(df, "type", "full_config", "v")
        assert [str(c) for c in want.columns] == [str(c) for c in keys], df
        assert len(got) == want.shape[1], df
        assert want["type"].tolist() == got[0].tolist(), df
        for j in range(1, want.shape[1]):
            assert got[j].dtype == want.iloc[:, j].dtype == np.float64
            assert np.array_equal(got[j].to_numpy(), want.iloc[:, j].to_numpy(), equal_nan=True), df


DTYPES = [*(s.dtype for s in SERIES.values()), np.dtype("timedelta64[ns]"), np.dtype("complex128"),
          np.dtype("float16"), np.dtype("uint8"), np.dtype("U3"), np.dtype("S2"), np.dtype("V4"),
          np.dtype("datetime64[s]"), pd.StringDtype(), pd.StringDtype("pyarrow"), pd.Float32Dtype(),
          pd.UInt16Dtype(), pd.BooleanDtype(), pd.CategoricalDtype([1, 2]), pd.PeriodDtype("D"),
          pd.DatetimeTZDtype(tz="UTC"), pd.IntervalDtype("int64"), pd.SparseDtype(np.float64),
          pd.SparseDtype(bool), pd.ArrowDtype(pa.int32()),
          pd.ArrowDtype(pa.bool_()), pd.ArrowDtype(pa.float64())]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_workbook_column_kind_is_pandas_dtype_checks(dtype):
    """The workbook's number kind of a column (NumPy dtypes by their kind letter) is what
    pandas' ``is_bool_dtype`` / ``is_numeric_dtype`` / ``is_integer_dtype`` say."""
    from pytest_gemmperf.report.excel import _dtype_kind

    types = pd.api.types
    if types.is_bool_dtype(dtype):
        want = "bool"
    elif not types.is_numeric_dtype(dtype):
        want = "text"
    else:
        want = "int" if types.is_integer_dtype(dtype) else "float"
    assert _dtype_kind(dtype) == want


def test_column_runs_cover_each_position_once():
    from pytest_gemmperf.report.excel import _runs

    assert _runs([]) == []
    assert _runs([10, 10, 60, 10, 28, 28, 28]) == [(0, 1, 10), (2, 2, 60), (3, 3, 10), (4, 6, 28)]
    rng = np.random.default_rng(3)
    for _ in range(200):
        values = rng.integers(0, 3, rng.integers(0, 12)).tolist()
        runs = _runs(values)
        assert [v for first, last, v in runs for _ in range(first, last + 1)] == values
        assert all(a[2] != b[2] for a, b in zip(runs, runs[1:]))


def _same(a, b) -> bool:
    return type(a) is type(b) and (a == b or (a != a and b != b) or (a is pd.NA and b is pd.NA))


@pytest.mark.parametrize("plain", [True, False])
@pytest.mark.parametrize("rows", [0, 1, 3])
def test_timeline_records_are_to_dict_records(rows, plain):
    """The workbook's records of a small frame: ``to_dict("records")``, value for value and
    type for type, for frames of NumPy numbers and text (read from the columns) and of any
    other dtype (pandas' own path)."""
    from pytest_gemmperf.report.excel import _records

    rng = np.random.default_rng(rows)
    cols = {}
    for name, s in SERIES.items():
        if name.startswith("categorical") or name in ("empty", "datetime") \
                or (plain and name not in ("str", "bool", "int64", "uint64", "int8", "float64", "float32")):
            continue
        values = s.tolist()
        cols[name] = pd.Series([values[i % len(values)] for i in range(rows)], dtype=s.dtype)
    cols["str with nan"] = pd.Series(["a", None, "c"][:rows], dtype="str")
    cols["python strings"] = pd.Series(["a", None, "c"][:rows], dtype=pd.StringDtype("python", np.nan))
    if not plain:
        cols["strings, NA"] = pd.Series(["a", None, "c"][:rows], dtype=pd.StringDtype("python"))
    cols["float nan"] = pd.Series(rng.choice([np.nan, 1.5, -2.25], rows))
    cols["ints"] = pd.Series(rng.integers(0, 9, rows))
    cols["bools"] = pd.Series(rng.integers(0, 2, rows).astype(bool))
    df = pd.DataFrame(cols)
    assert any(dt == object or isinstance(dt, pd.api.extensions.ExtensionDtype)
               and not (isinstance(dt, pd.StringDtype) and dt.na_value is np.nan)
               for dt in df.dtypes) != plain
    want = df.to_dict("records")
    got = _records(df)
    assert len(got) == len(want) == rows
    for g, w in zip(got, want):
        assert list(g) == list(w)
        assert all(_same(g[k], w[k]) for k in w), (g, w)


def test_timeline_columns_are_the_frames_columns():
    """The timeline sheets' columns, each inferred from its own values: what
    ``pd.DataFrame(rows, columns=names)`` holds, dtype, values and their types, for random rows
    of what those sheets hold (ints or None, floats or NaN, text or None, NumPy scalars, bools,
    mixtures) and for no rows."""
    import random

    from pytest_gemmperf.report.excel import _columns_of

    rng = random.Random(11)
    pool = [None, 1, 2, 2**62, 1.5, -0.0, float("nan"), "a", "4thread", True, np.int64(3),
            np.float64(2.5), np.nan]
    names = ["full_config", "threads_num", "time (ms)", "x"]
    for _ in range(400):
        n = rng.randint(0, 9)
        kinds = {k: rng.sample(pool, rng.randint(1, 3)) for k in names}
        rows = [{k: rng.choice(kinds[k]) for k in names} for _ in range(n)]
        want = pd.DataFrame(rows, columns=names)
        got = _columns_of(rows, names)
        assert [k for k, _ in got] == names
        for k, s in got:
            w = want[k]
            assert s.dtype == w.dtype, (rows, k)
            assert [type(v) for v in s.tolist()] == [type(v) for v in w.tolist()], (rows, k)
            pd.testing.assert_series_equal(s, w, check_names=False, check_index_type=False)
