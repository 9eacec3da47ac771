"""The samples' text columns as categoricals (``gate/samples.unify_categories``, what ``gemmperf
compare`` keeps a row a dispatch as): the texts ``astype(str)`` writes, made once per distinct
value and per missing row rather than once per row, identical for every dtype a column may have."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gemmperf.gate import samples
from pytest_gemmperf.gate.samples import _as_text_categorical, unify_categories

TEXTS = ["gemm", "k<1>", "", " ", "ü", "nan", "None", "1", "1.0", "True", "a\x1fb"]
_NA = st.sampled_from([None, np.nan, pd.NA, pd.NaT])


def _column(kind: str, draw) -> pd.Series:
    n = draw(st.integers(0, 30))
    pick = lambda xs: [draw(st.sampled_from(xs)) for _ in range(n)]  # noqa: E731
    if kind == "int":
        return pd.Series(pick([0, 1, -7, 2**40]), dtype="int64")
    if kind == "uint8":
        return pd.Series(pick([0, 3, 255]), dtype="uint8")
    if kind == "Int64":
        return pd.Series(pick([0, 5, None]), dtype="Int64")
    if kind == "float":
        return pd.Series(pick([0.0, -0.0, 1.5, 1e20, 1e-7, np.inf, -np.inf, np.nan, 0.1 + 0.2]), dtype="float64")
    if kind == "float32":
        return pd.Series(pick([0.0, 1.5, np.nan, 3.3]), dtype="float32")
    if kind == "Float64":
        return pd.Series(pick([0.0, -0.0, 2.5, None]), dtype="Float64")
    if kind == "bool":
        return pd.Series(pick([True, False]), dtype=bool)
    if kind == "boolean":
        return pd.Series(pick([True, False, None]), dtype="boolean")
    if kind == "datetime":
        return pd.Series(pd.to_datetime(pick(["2026-01-01 00:00", "2026-01-01 10:30", "2026-03-02 00:00", None])))
    if kind == "date-only":
        return pd.Series(pd.to_datetime(pick(["2026-01-01", "2026-03-02", None]), format="%Y-%m-%d"))
    if kind == "timedelta":
        return pd.Series(pd.to_timedelta(pick([1, 2, None]), unit="s"))
    if kind == "str":
        return pd.Series(pick(TEXTS + [None]), dtype="str")
    if kind == "object-text":
        return pd.Series(pick(TEXTS) + [draw(_NA)] * draw(st.integers(0, 3)), dtype=object)
    if kind == "object-mixed":
        return pd.Series(pick(["1", 1, 1.0, True, -0.0, 0.0, None, np.nan, pd.NA, "x"]), dtype=object)
    # a categorical: categories unused or of other types, missing rows or none
    cats = draw(st.sampled_from([["b", "a", "z"], [3, 1, 2], [1.0, 2.5]]))
    codes = [draw(st.integers(-1 if draw(st.booleans()) else 0, len(cats) - 1)) for _ in range(n)]
    return pd.Series(pd.Categorical.from_codes(codes, categories=cats))


KINDS = ["int", "uint8", "Int64", "float", "float32", "Float64", "bool", "boolean", "datetime", "date-only",
         "timedelta", "str", "object-text", "object-mixed", "categorical"]


@st.composite
def columns(draw):
    s = _column(draw(st.sampled_from(KINDS)), draw)
    if len(s) and draw(st.booleans()):  # an index of its own, a name
        s = s.set_axis(np.arange(len(s)) * 3 + 5).rename("col")
    return s


@settings(max_examples=400, deadline=None)
@given(columns())
def test_texts_are_astype_str_for_every_dtype(s):
    want = s.astype(str).astype("category")
    for few in (samples._FEW_ROWS, 0):  # short columns are written a row at a time: both ways
        with mock.patch.object(samples, "_FEW_ROWS", few):
            got = _as_text_categorical(s)
        assert list(got.astype(object).where(got.notna(), None)) == \
            list(want.astype(object).where(want.notna(), None))
        if not isinstance(s.dtype, pd.CategoricalDtype) or s.isna().any():  # the texts' own categories
            pd.testing.assert_series_equal(got, want, check_exact=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(columns(), min_size=1, max_size=4))
def test_unified_columns_hold_the_texts_of_each_frame(cols):
    frames = [pd.DataFrame({"c": s.reset_index(drop=True)}) for s in cols]
    with mock.patch.object(samples, "_FEW_ROWS", 0):
        out = unify_categories(frames, ["c"])
    assert len({f["c"].dtype for f in out}) == 1
    for f, s in zip(out, cols):
        want = s.reset_index(drop=True).astype(str)
        got = f["c"].astype(object)
        assert list(got.where(got.notna(), None)) == list(want.astype(object).where(want.notna(), None))


def test_no_text_is_written_a_row(monkeypatch):
    """A column of 200,000 rows and a few distinct values (and some missing) is turned into text
    for one row a value and the missing rows only (one of them where all read alike)."""
    rng = np.random.default_rng(0)
    values = np.array(["host/1/0/-", "host/2/1/-", "host/3/2/-"], dtype=object)[rng.integers(0, 3, 200_000)]
    values[::1000] = None
    cols = [pd.Series(values, dtype=object), pd.Series(values, dtype="str"), pd.Series(rng.integers(0, 5, 200_000)),
            pd.Series(pd.Categorical(values, categories=["host/3/2/-", "host/1/0/-", "host/2/1/-", "unused"]))]
    written = []
    astype = pd.Series.astype

    def spy(self, dtype, *args, **kwargs):
        if dtype is str:
            written.append(len(self))
        return astype(self, dtype, *args, **kwargs)

    monkeypatch.setattr(pd.Series, "astype", spy)
    for s in cols:
        got = _as_text_categorical(s)
        monkeypatch.setattr(pd.Series, "astype", astype)
        pd.testing.assert_series_equal(got, s.astype(str).astype("category"), check_exact=True)
        monkeypatch.setattr(pd.Series, "astype", spy)
    assert written == [3 + 200, 3 + 1, 5, 3 + 1], written
