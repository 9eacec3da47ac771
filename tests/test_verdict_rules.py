"""The verdicts table's layout and helpers (gate/verdict.py) pinned exactly: column order and
types, the ``verdicts.csv`` order, kernel-name shortening at every width, and the per-process
median the tables print (geometric for durations, zero durations dropped)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.gate.verdict import (EXTRA_COLUMNS, VERDICT_COLUMNS, VERDICTS_CSV_COLUMNS, Verdict,
                                          per_process_medians, shorten_kernel, verdicts_csv_order,
                                          verdicts_to_frame)

TEXT = ("test", "point", "kernel", "metric", "verdict", "note")


def test_verdicts_to_frame_from_verdicts_puts_the_contract_first_and_extras_after():
    v = [Verdict("t", "p", "k", "dur_ns", 4, 5, ratio=1.1, verdict="regression", extra={"zeta": 1, "alpha": 2}),
         Verdict("t", "p", "k2", "dur_ns", 4, 5)]
    df = verdicts_to_frame(v)
    assert list(df.columns) == list(VERDICT_COLUMNS) + ["zeta", "alpha"]
    assert df["verdict"].tolist() == ["regression", "inconclusive"]
    assert df["n_base"].dtype == np.int64 and df["n_cand"].tolist() == [5, 5]
    assert df["note"].tolist() == ["", ""]
    assert list(df.index) == [0, 1]


def test_verdicts_to_frame_fills_a_partial_frame():
    raw = pd.DataFrame({"kernel": ["a", None], "n_base": [3, None], "ratio": [1.0, 2.0], "extra1": [1, 2]},
                       index=[7, 9])
    before = raw.copy()
    df = verdicts_to_frame(raw)
    assert list(df.columns) == list(VERDICT_COLUMNS) + ["extra1"]
    assert list(df.index) == [0, 1]
    assert df["n_base"].tolist() == [3, 0] and df["n_base"].dtype == np.int64
    assert df["n_cand"].tolist() == [0, 0] and df["n_cand"].dtype == np.int64
    for c in TEXT:
        assert df[c].map(type).eq(str).all(), c
    assert df["kernel"].tolist() == ["a", ""] and df["test"].tolist() == ["", ""]
    for c in set(VERDICT_COLUMNS) - set(TEXT) - {"n_base", "n_cand", "ratio"}:
        assert df[c].dtype == float and df[c].isna().all(), c
    pd.testing.assert_frame_equal(raw, before)  # the caller's frame is left alone


def test_verdicts_to_frame_of_nothing_has_the_columns():
    df = verdicts_to_frame([])
    assert list(df.columns) == list(VERDICT_COLUMNS) and df.empty


def test_verdicts_csv_order_reorders_and_never_pads():
    cols = ["zz", "note", "label", "aa", "test", "prior_df", "point", "rank_p_value"]
    df = pd.DataFrame([range(len(cols))], columns=cols)
    out = verdicts_csv_order(df)
    assert list(out.columns) == ["test", "point", "note", "label", "rank_p_value", "prior_df", "aa", "zz"]
    assert out.iloc[0].to_dict() == df.iloc[0].to_dict()
    assert VERDICTS_CSV_COLUMNS == VERDICT_COLUMNS + ("label",) + EXTRA_COLUMNS


@pytest.mark.parametrize("name, width, short", [
    ("k" * 48, 48, "k" * 48),  # exactly the width: kept
    ("a  b\n c", 48, "a b c"),  # whitespace collapsed
    ("0123456789" * 5, 48, "0123456789" * 3 + "0" + "..." + "6789" + "0123456789"),  # head 31, tail 14
    ("abcdefghijklmnop", 12, "abcdefgh...p"),  # head 8, tail 1
    ("abcdefghijklmnop", 11, "abcdefgh..."),  # tail 0: the head alone
    ("abcdefghijklmnop", 10, "abcdefg..."),  # tail below 0: cut to the width
    ("abcdefghijklmnopqrstuvwxyz", 24, "abcdefghijklmno...uvwxyz"),  # head 15, tail 6
    (1234567, 48, "1234567"),
])
def test_shorten_kernel(name, width, short):
    assert shorten_kernel(name, width) == short
    assert len(shorten_kernel(name, width)) <= width


def test_shorten_kernel_default_width_is_48():
    name = "x" * 30 + "y" * 30
    assert shorten_kernel(name) == shorten_kernel(name, 48) == "x" * 30 + "y" + "..." + "y" * 14
    assert shorten_kernel("z" * 49) == "z" * 31 + "..." + "z" * 14


def samples(rows: list[tuple[str, str, str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["point", "kernel", "metric", "unit", "value"])


def test_per_process_medians_durations_are_geometric_and_drop_zeros():
    s = samples([
        ("p", "k1", "dur_ns", "u0", 1.0), ("p", "k1", "dur_ns", "u0", 4.0),  # geometric middle: 2
        ("p", "k", "dur_ns", "u1", 9.0), ("p", "k", "dur_ns", "u1", 0.0),  # the zero is dropped: 9
        # per-step sums are not per dispatch: arithmetic, zeros kept
        ("p", "category:gemm", "category_total_ns", "u0", 1.0),
        ("p", "category:gemm", "category_total_ns", "u0", 4.0),
        ("p", "category:gemm", "category_total_ns", "u1", 0.0),
        ("p", "category:gemm", "category_total_ns", "u1", 10.0),
        ("p", "category:gemm", "category_total_ns", "u2", 6.0),
    ])
    out = per_process_medians(s)
    assert out.name == "median_per_process"
    assert list(out.index.names) == ["point", "kernel", "metric"]
    assert out[("p", "k1", "dur_ns")] == pytest.approx(2.0)
    assert out[("p", "k", "dur_ns")] == pytest.approx(9.0)
    assert out[("p", "category:gemm", "category_total_ns")] == pytest.approx(5.0)  # of 2.5, 5, 6
    assert list(out.index) == sorted(out.index)


def test_per_process_medians_on_categorical_columns_lists_only_present_keys():
    s = samples([("p1", "a", "dur_ns", "u0", 3.0), ("p2", "b", "dur_ns", "u0", 5.0),
                 ("p2", "b", "dur_ns", "u1", 6.0)])
    for c in ("point", "kernel", "metric", "unit"):
        s[c] = s[c].astype("category")
    out = per_process_medians(s)
    assert list(out.index) == [("p1", "a", "dur_ns"), ("p2", "b", "dur_ns")]
    assert out.tolist() == pytest.approx([3.0, 5.5])  # arithmetic over processes
    assert all(isinstance(x, str) for key in out.index for x in key)
