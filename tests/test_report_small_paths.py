"""The report writers' shortcuts past pandas' per-operation costs give what pandas' own way gives,
value for value, on random tables (NaN, NA, None, categoricals, ties, empty, one row)."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf import numbers as N
from pytest_gemmperf.analysis.report_parts import short_edges
from pytest_gemmperf.report import data as D
from pytest_gemmperf.report import plots as P
from pytest_gemmperf.report import tables as T


def _same_frame(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert [str(t) for t in got.dtypes] == [str(t) for t in want.dtypes]
    assert got.to_csv() == want.to_csv()


def _table(rng: random.Random, n: int) -> pd.DataFrame:
    return pd.DataFrame({
        "kernel": pd.Categorical([rng.choice(["a", "b<c>", "=x", None]) for _ in range(n)]),
        "rank": pd.array([rng.choice([0, 1, None]) for _ in range(n)], dtype="Int64"),
        "dur_ns": [rng.randint(0, 10**6) for _ in range(n)],
        "v": [rng.choice([1.5, np.nan, -0.0, 1e300, 2 / 3]) for _ in range(n)],
        "text": pd.array([rng.choice(["x", None]) for _ in range(n)], dtype=object),
        "s": [rng.choice(["p", "q"]) for _ in range(n)],
    }, index=[rng.randint(0, 5) for _ in range(n)])  # a repeated index: _with_label renumbers it


def test_public_of_a_labelled_table_is_the_table_it_was_made_from():
    rng = random.Random(11)
    single = SimpleNamespace(multi=False)
    for n in (0, 1, 7):
        t = _table(rng, n)
        labelled = D._with_label(t, "run")
        want = labelled.iloc[:, 1:]
        got = T.public(labelled, single)
        _same_frame(got, want)
        _same_frame(got, labelled.drop(columns="label"))
        got["v"] = 0.0  # a frame of its own: the next writer gets the table as built
        got.insert(0, "extra", 1)
        _same_frame(T.public(labelled, single), want)
        assert list(labelled.columns) == ["label", *t.columns]
    assert T.public(labelled, SimpleNamespace(multi=True)) is labelled


def _short_parts(rng: random.Random, n: int) -> SimpleNamespace:
    names = [rng.choice(["k", "K", "a<b>", "é", "k2", "z"]) + str(rng.randint(0, 3)) for _ in range(n)]
    count = [rng.randint(1, 4) for _ in range(n)]
    sums = [c * rng.choice([1000, 2000, 500]) for c in count]  # ties in the sum, and in the name
    short = pd.DataFrame({"name": pd.Categorical(names), "count": count, "sum_ns": sums})
    return SimpleNamespace(short=short, short_hist=np.arange(len(short_edges(10.0)) - 1), total_ns=sum(sums) or 1)


def test_short_kernels_are_sorted_as_pandas_sorts_them(monkeypatch):
    rng = random.Random(12)
    for _ in range(150):
        parts = _short_parts(rng, rng.choice([0, 1, 2, 5, 30]))
        got, got_hist = D._short_kernels(parts, 10.0)
        monkeypatch.setattr(D, "SMALL_TABLE_ROWS", -1)  # pandas' sort
        want, want_hist = D._short_kernels(parts, 10.0)
        monkeypatch.undo()
        _same_frame(got, want)
        _same_frame(got_hist, want_hist)


def test_head_records_are_itertuples():
    rng = random.Random(13)
    columns = ("kernel", "rank", "v", "text", "dur_ns")
    for n in (0, 1, 3, 9):
        t = _table(rng, n)
        for frame in (t, pd.concat([t, t[["v"]].rename(columns={"v": "kernel"})], axis=1)):  # a repeated name
            got = T._head_records(frame, columns, 5)
            want = list(frame.head(5).itertuples(index=False))
            assert len(got) == len(want)
            for g, w in zip(got, want):
                for c in columns:
                    a, b = g[c], getattr(w, c)
                    assert type(a) is type(b) and (a is b or a == b or (a != a and b != b)), (c, a, b)


def test_plot_rows_hold_what_iterrows_gives():
    rng = random.Random(14)
    for n in (0, 1, 6):
        t = _table(rng, n)
        for frame in (t, t[["dur_ns", "v"]], t[["dur_ns"]], t[["s", "v"]]):
            frame = frame.reset_index(drop=True)
            got = P.frame_rows(frame)
            want = [dict(r) for _, r in frame.iterrows()]
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert list(g) == list(w)
                for c in g:  # the same value, and the same text where a chart writes it
                    a, b = g[c], w[c]
                    assert str(a) == str(b) and f"{a}" == f"{b}", (c, a, b)
                    if isinstance(b, (float, np.floating)) and math.isfinite(b):
                        assert f"{a:.3f}" == f"{b:.3f}"


def test_present_text_is_what_dropna_keeps_as_text():
    rng = random.Random(15)
    for n in (0, 1, 8):
        t = _table(rng, n)
        cols = [t["kernel"], t["text"], t["s"], t["s"].astype(object), t["rank"], t["v"],
                pd.Series(pd.array([rng.choice(["x", None]) for _ in range(n)], dtype="string")),
                pd.Series([rng.choice(["x", pd.NaT, np.nan, None]) for _ in range(n)], dtype=object)]
        for c in cols:
            got = {str(x) for x in D._present_text(c)}
            assert got == set(pd.unique(c.dropna().astype(str))), c.dtype


@pytest.mark.parametrize("n", [0, 1, 5, 64, 65, 200])
def test_tidied_float_columns_short_and_long_alike(n):
    rng = random.Random(16 + n)
    values = [rng.choice([np.nan, np.inf, -np.inf, 0.1 + 0.2, 9436.846899999999, 1e300, -0.0, 2 / 3,
                          rng.random() * 10 ** rng.randint(-9, 12)]) for _ in range(n)]
    df = pd.DataFrame({"x_us": values, "y": np.full(n, np.nan)})
    got = N.tidy_frame(df)
    want = [N.tidy_float(x) for x in values]
    assert [repr(x) for x in got["x_us"].tolist()] == [repr(x) for x in want]
    assert got["x_us"].dtype == np.float64 and got["y"].dtype == np.float64
    assert np.isnan(got["y"].to_numpy()).all()


def test_head_records_are_what_clean_reads_of_to_dict():
    from pytest_gemmperf.jsonsafe import clean

    rng = random.Random(18)
    columns = ("label", "s", "rank", "kernel", "v", "missing", "dur_ns", "text")
    for n in (0, 1, 3, 25):
        t = _table(rng, n).reset_index(drop=True)
        t.insert(0, "label", ["run"] * n)
        for k in (1, 20):
            want = t.reindex(columns=list(columns)).head(k).to_dict("records")
            assert clean(T._head_records(t, columns, k)) == clean(want)
