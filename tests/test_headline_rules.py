"""The headline rules (gate/headline.py) pinned exactly: the change text, the threshold band on
both metric orientations and at its edges, the reason each verdict gets, the raw-ratio note, the
order of rows and the text table's layout. Plain rows, no profiler: each test names the rule it
pins and fails when a comparison, a constant or a branch of that rule changes."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from pytest_gemmperf.gate.headline import (PRINTED_NUMBERS, SEVERITY, Headline, RawDetail, change_text,
                                           ci_inside_band, footer_lines, format_verdict_table, headline,
                                           notable, raw_detail, sort_rows, summary_table)

NAN = math.nan
BUSBW = "coll_busbw_gbps"  # higher is better
OVERLAP = "overlap_fraction"  # higher is better


def band_row(lo, hi, thr=0.25, metric="dur_ns"):
    return {"ci_low": lo, "ci_high": hi, "threshold": thr, "metric": metric}


# -- change_text ---------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio, lo, hi, text", [
    (1.123, 1.081, 1.166, "+12.3% [+8.1, +16.6]"),
    (0.9, 0.85, 0.95, "-10.0% [-15.0, -5.0]"),
    (1.0, 1.0, 1.0, "+0.0% [+0.0, +0.0]"),
    (2.0, 1.5, 3.0, "+100.0% [+50.0, +200.0]"),
    ("1.5", "1.25", "1.75", "+50.0% [+25.0, +75.0]"),  # csv text reads as numbers
    (1.123, NAN, 1.166, "+12.3%"),  # a CI needs both ends
    (1.123, 1.081, NAN, "+12.3%"),
    (1.123, None, "x", "+12.3%"),
    (NAN, 0.9, 1.1, "-"),
    (None, 0.9, 1.1, "-"),
    ("abc", 0.9, 1.1, "-"),
    (math.inf, 0.9, 1.1, "-"),
])
def test_change_text_is_the_percent_change_with_its_ci(ratio, lo, hi, text):
    assert change_text(ratio, lo, hi) == text


# -- ci_inside_band ------------------------------------------------------------------------------

@pytest.mark.parametrize("lo, hi, inside", [
    (0.75, 1.25, True),  # both edges belong to the band (0.25 is exact in binary)
    (0.9, 1.1, True),
    (0.7499, 1.0, False),
    (1.0, 1.2501, False),
    (0.5, 1.5, False),
    (1.3, 1.4, False),  # wholly beyond the band on the worse side
    (0.6, 0.7, False),  # wholly beyond it on the better side
    (0.9, 0.0, True),  # a lower-is-better CI is read as it is, whatever its sign
])
def test_ci_inside_band_lower_is_better(lo, hi, inside):
    assert ci_inside_band(band_row(lo, hi)) is inside


@pytest.mark.parametrize("metric", [BUSBW, OVERLAP, f"{BUSBW}:allreduce"])
@pytest.mark.parametrize("lo, hi, inside", [
    # a higher-is-better CI is turned to the worse-is-higher side (1/hi, 1/lo) first
    (0.8, 1.25, True),  # 1/1.25 = 0.8, 1/0.8 = 1.25: the edges of the band
    (1.3, 1.32, True),  # 1/1.32 = 0.758 .. 1/1.3 = 0.769: inside, though 1.32 > 1.25
    (0.9, 1.1, True),
    (0.85, 0.95, True),  # 1/0.95 = 1.053 .. 1/0.85 = 1.176: a fall inside the band
    (0.76, 0.9, False),  # 1/0.76 = 1.316 > 1.25: too much worse
    (1.2, 1.4, False),  # 1/1.4 = 0.714 < 0.75
    (0.0, 1.1, False),  # a CI through zero has no inverse
    (-0.1, 1.1, False),
    (0.9, 0.0, False),
    (0.9, -1.0, False),
])
def test_ci_inside_band_higher_is_better(metric, lo, hi, inside):
    assert ci_inside_band(band_row(lo, hi, metric=metric)) is inside


@pytest.mark.parametrize("row", [
    band_row(NAN, 1.1), band_row(0.9, NAN), band_row(0.9, 1.1, thr=NAN), band_row(0.9, 1.1, thr=None),
    band_row(0.9, 1.1, thr=math.inf), band_row(-math.inf, 1.1), band_row(0.9, math.inf, metric=BUSBW),
    band_row(0.9, 1.1, metric=None) | {"ci_low": "x"}, {},
])
def test_ci_inside_band_without_numbers_is_false(row):
    assert ci_inside_band(row) is False


def test_ci_inside_band_reads_text_and_a_missing_metric_as_lower_is_better():
    assert ci_inside_band({"ci_low": "0.8", "ci_high": "1.2", "threshold": "0.25"}) is True
    assert ci_inside_band({"ci_low": 1.2, "ci_high": 1.3, "threshold": 0.25, "metric": None}) is False


# -- headline ------------------------------------------------------------------------------------

def hl(**row) -> Headline:
    return headline(row)


def test_a_note_is_the_reason_with_its_whitespace_collapsed():
    h = hl(verdict="regression", ratio=1.2, ci_low=1.1, ci_high=1.3, threshold=0.05, q_value=0.01,
           note="  noisy\n  environment:\tload ")
    assert h == Headline("regression", "+20.0% [+10.0, +30.0]", "noisy environment: load")
    assert h.text() == "regression +20.0% [+10.0, +30.0]: noisy environment: load"


@pytest.mark.parametrize("verdict", ["regression", "improvement"])
def test_a_decided_row_without_note_says_beyond_the_threshold_at_q(verdict):
    base = dict(verdict=verdict, ratio=1.2, ci_low=1.1, ci_high=1.3, threshold=0.05)
    assert hl(**base, q_value=0.0123).reason == "beyond the 5% threshold at q 0.012"
    assert hl(**base, q_value=0.000123).reason == "beyond the 5% threshold at q 0.00012"
    assert hl(**base | {"threshold": 0.025}, q_value=0.5).reason == "beyond the 2.5% threshold at q 0.5"
    assert hl(**base, q_value=NAN).reason == "beyond the 5% threshold"
    assert hl(**base, q_value=None).reason == "beyond the 5% threshold"
    # no threshold recorded: nothing to say beyond the verdict
    assert hl(**base | {"threshold": NAN}, q_value=0.01).reason == ""
    assert hl(**base | {"note": "nan"}, q_value=0.01).text() == (
        f"{verdict} +20.0% [+10.0, +30.0]: beyond the 5% threshold at q 0.01")


def test_an_unchanged_row_says_why_only_when_its_ci_leaves_the_band():
    inside = dict(verdict="unchanged", ratio=1.01, ci_low=0.98, ci_high=1.04, threshold=0.05, q_value=0.9)
    h = hl(**inside)
    assert h.reason == "" and h.text() == "unchanged +1.0% [-2.0, +4.0]"
    outside = inside | {"ci_high": 1.07}
    assert hl(**outside).reason == "the CI is not inside the 5% threshold band (no reason recorded)"
    assert hl(**outside | {"threshold": NAN}).reason == (
        "the CI is not inside the threshold band (no reason recorded)")
    # on a higher-is-better metric the band is judged on the inverted CI
    assert hl(**inside | {"metric": BUSBW, "ci_low": 1.0, "ci_high": 1.05}).reason == ""
    assert hl(**inside | {"metric": BUSBW, "ci_low": 0.9, "ci_high": 1.0}).reason.startswith("the CI is not")
    # a recorded note wins over the rule
    assert hl(**outside | {"note": "kept by the noise floor"}).reason == "kept by the noise floor"


@pytest.mark.parametrize("verdict, reason", [("new", "only in the candidate"),
                                             ("missing", "only in the baseline"),
                                             ("inconclusive", "")])
def test_rows_without_a_change_say_which_side_they_are_on(verdict, reason):
    h = hl(verdict=verdict, threshold=0.05, q_value=NAN)
    assert h == Headline(verdict, "-", reason)
    assert h.text() == (f"{verdict} -: {reason}" if reason else f"{verdict} -")


@pytest.mark.parametrize("missing", [None, NAN, "", "nan", "None"])
def test_a_row_without_verdict_reads_inconclusive(missing):
    h = hl(verdict=missing, ratio=1.5, note=missing)
    assert (h.verdict, h.change, h.reason) == ("inconclusive", "+50.0%", "")


def test_headline_takes_a_series():
    s = pd.Series({"verdict": "regression", "ratio": 1.1, "ci_low": 1.05, "ci_high": 1.15, "threshold": 0.05,
                   "q_value": 0.002, "note": ""})
    assert headline(s).text() == "regression +10.0% [+5.0, +15.0]: beyond the 5% threshold at q 0.002"


# -- raw_detail ----------------------------------------------------------------------------------

def test_raw_detail_inside_and_at_the_edges_of_the_ci_has_no_note():
    base = {"metric": "dur_ns", "base_median_ns": 1000, "cand_median_ns": 1100}
    assert raw_detail(base | {"ci_low": 1.05, "ci_high": 1.2}) == RawDetail("1 us", "1.1 us", "x1.100", "")
    assert raw_detail(base | {"ci_low": 1.1, "ci_high": 1.2}).note == ""  # 1100/1000 == 1.1 exactly
    assert raw_detail(base | {"ci_low": 1.0, "ci_high": 1.1}).note == ""
    assert raw_detail(base | {"ci_low": NAN, "ci_high": 1.05}).note == ""  # no CI: nothing to compare
    assert raw_detail(base | {"ci_low": 1.0, "ci_high": NAN}).note == ""
    assert raw_detail(base | {"ci_low": 1.0, "ci_high": 1.2}).text() == "base 1 us, cand 1.1 us, raw x1.100"


def test_raw_detail_of_medians_below_one():
    d = raw_detail({"metric": "overlap_fraction", "base_median_ns": 0.5, "cand_median_ns": 0.25,
                    "ci_low": 0.4, "ci_high": 0.6})
    assert d.raw == "x0.500" and d.note == ""


@pytest.mark.parametrize("lo, hi", [(1.11, 1.2), (1.0, 1.09)])
def test_raw_detail_outside_the_ci_says_why(lo, hi):
    d = raw_detail({"metric": "dur_ns", "base_median_ns": 1000, "cand_median_ns": 1100, "ci_low": lo, "ci_high": hi})
    assert d.note.startswith("outside the tested CI: the medians keep each process's factor")
    assert d.text() == f"base 1 us, cand 1.1 us, raw x1.100 ({d.note})"


@pytest.mark.parametrize("base, cand", [(0, 1100), (-5, 1100), (NAN, 1100), (1000, NAN), (None, "x")])
def test_raw_detail_without_a_ratio_shows_a_dash(base, cand):
    d = raw_detail({"metric": "dur_ns", "base_median_ns": base, "cand_median_ns": cand, "ci_low": 5.0,
                    "ci_high": 6.0})
    assert d.raw == "-" and d.note == ""
    assert d.base == ("-" if base is None or (isinstance(base, float) and math.isnan(base)) else d.base)
    assert d.cand == ("-" if not isinstance(cand, int) else "1.1 us")


# -- order, tables -------------------------------------------------------------------------------

def test_severity_lists_the_worst_first():
    assert sorted(SEVERITY, key=SEVERITY.get) == ["regression", "inconclusive", "missing", "new",
                                                  "improvement", "unchanged"]
    assert sorted(SEVERITY.values()) == [0, 1, 2, 3, 4, 5]


def test_sort_rows_by_severity_then_largest_change():
    df = pd.DataFrame({"verdict": ["unchanged", "improvement", "new", "odd", "missing", "inconclusive",
                                   "regression", "regression"],
                       "ratio": [1.0, 0.8, NAN, 1.0, NAN, 1.02, 1.1, 1.3],
                       "kernel": list("abcdefgh")})
    assert sort_rows(df)["kernel"].tolist() == ["h", "g", "f", "e", "c", "b", "a", "d"]
    # without a ratio column the severity alone orders, ties keep their order
    assert sort_rows(df.drop(columns="ratio"))["kernel"].tolist() == ["g", "h", "f", "e", "c", "b", "a", "d"]
    assert list(sort_rows(df).columns) == ["verdict", "ratio", "kernel"]


def table_rows(n_reg: int = 3) -> list[dict]:
    rows = [{"verdict": "regression", "point": f"p{i}", "kernel": f"k{i}", "metric": "dur_ns",
             "ratio": 1.1 + i / 10, "ci_low": 1.05 + i / 10, "ci_high": 1.15 + i / 10, "q_value": 0.001,
             "threshold": 0.05, "note": "", "test": f"tests/t.py::test_{i}"} for i in range(n_reg)]
    rows.append({"verdict": "unchanged", "point": "pu", "kernel": "ku", "metric": "dur_ns", "ratio": 1.0,
                 "ci_low": 0.99, "ci_high": 1.01, "q_value": NAN, "threshold": 0.05, "note": "",
                 "test": "tests/t.py::test_u"})
    return rows


def test_format_verdict_table_layout():
    text = format_verdict_table(table_rows(), footnote=False)
    assert text.splitlines() == [
        "verdict     point  kernel  metric  change [95% CI]        q      reason",
        "regression  p2     k2      dur_ns  +30.0% [+25.0, +35.0]  0.001  beyond the 5% threshold at q 0.001",
        "regression  p1     k1      dur_ns  +20.0% [+15.0, +25.0]  0.001  beyond the 5% threshold at q 0.001",
        "regression  p0     k0      dur_ns  +10.0% [+5.0, +15.0]   0.001  beyond the 5% threshold at q 0.001",
        "unchanged   pu     ku      dur_ns  +0.0% [-1.0, +1.0]     -",
    ]


def test_format_verdict_table_limits_filters_and_names_tests():
    text = format_verdict_table(table_rows(), max_rows=2, footnote=False, test_column=True)
    lines = text.splitlines()
    assert lines[0].startswith("verdict     test[point]  kernel")
    assert lines[1].startswith("regression  test_2[p2]")
    assert lines[-1] == "... 2 more" and len(lines) == 4
    only = format_verdict_table(table_rows(), footnote=False, verdicts=("unchanged",))
    assert only.splitlines()[1:] == ["unchanged  pu     ku      dur_ns  +0.0% [-1.0, +1.0]  -"]
    # every row filtered out: the header alone
    assert format_verdict_table(table_rows(), verdicts=("new",), footnote=False) == (
        "verdict  point  kernel  metric  change [95% CI]  q  reason")
    assert format_verdict_table([]) == "(no comparisons)"
    assert format_verdict_table(pd.DataFrame()) == "(no comparisons)"


def test_format_verdict_table_footnote_and_warmup():
    plain = format_verdict_table(table_rows(1))
    assert plain.splitlines()[-len(footer_lines()):] == footer_lines()
    warm = format_verdict_table(table_rows(1), warmup=3).splitlines()
    assert " ".join(line.strip() for line in warm).endswith(
        "Warm-up: the first 3 dispatch(es) of each kernel and process.")
    assert "Warm-up" not in format_verdict_table(table_rows(1), warmup=0)


def test_footer_lines_wrap_at_110_columns():
    lines = footer_lines()
    assert lines[0].startswith("note: change [95% CI]: ")
    assert all(len(x) <= 110 for x in lines) and max(len(x) for x in lines) > 100
    assert all(x.startswith("      ") for x in lines[1:])
    assert " ".join(x[6:] for x in lines) == " ".join(PRINTED_NUMBERS.split())


def test_a_swapped_kernel_shows_both_names_shortened():
    row = table_rows(1)[0] | {"kernel": "a" * 60, "swapped_to": "b" * 60}
    cells = format_verdict_table([row], footnote=False, kernel_width=48).splitlines()[1].split("  ")
    # each name gets half the width less the arrow: (48 - 4) // 2 = 22 characters
    assert "a" * 13 + "..." + "a" * 6 + " -> " + "b" * 13 + "..." + "b" * 6 in [c.strip() for c in cells]
    narrow = format_verdict_table([row], footnote=False, kernel_width=10).splitlines()[1]
    assert "aaaaa... -> bbbbb..." in narrow  # never narrower than 8 a side


def test_summary_table_escapes_text_and_names_tests():
    rows = table_rows(1)
    rows[0]["kernel"] = "k\x1b[31mred"
    text = summary_table(rows)
    assert "\x1b" not in text and "test_0[p0]" in text and "note:" not in text
    many = [dict(table_rows(1)[0], point=f"p{i:02d}") for i in range(55)]
    assert summary_table(many).splitlines()[-1] == "... 5 more"
    assert summary_table(many, max_rows=54).splitlines()[-1] == "... 1 more"


def test_notable_drops_unchanged_rows_worst_first():
    df = pd.DataFrame(table_rows(2))
    out = notable(df)
    assert out["point"].tolist() == ["p1", "p0"]
    empty = notable(df.iloc[:0])
    assert empty.empty and list(empty.columns) == list(df.columns)
    assert notable(None).empty and list(notable(None).columns) == []


def test_rows_without_a_ratio_sort_as_no_change():
    df = pd.DataFrame({"verdict": ["missing", "missing", "missing"], "ratio": [0.5, NAN, -0.5],
                       "kernel": ["half", "none", "neg"]})
    # a missing ratio reads as 0 (no number), so it sorts between 0.5 and -0.5
    assert sort_rows(df)["kernel"].tolist() == ["half", "none", "neg"]


def test_format_verdict_table_defaults_20_rows_and_48_characters_of_kernel():
    rows = [dict(table_rows(1)[0], point=f"p{i:02d}") for i in range(21)]
    lines = format_verdict_table(rows, footnote=False).splitlines()
    assert len(lines) == 22 and lines[-1] == "... 1 more"
    long = dict(table_rows(1)[0], kernel="x" * 30 + "y" * 30)
    cell = [c.strip() for c in format_verdict_table([long], footnote=False).splitlines()[1].split("  ") if c][2]
    assert cell == "x" * 30 + "y" + "..." + "y" * 14


def test_footer_lines_break_a_111_character_line():
    assert footer_lines("a" * 103 + " b") == ["note: " + "a" * 103, "      b"]
    assert footer_lines("a" * 102 + " b") == ["note: " + "a" * 102 + " b"]
