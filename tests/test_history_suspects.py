"""The newest run flagged at once (``history/suspects.py``): in ``gemmperf history check`` (exit
4), ``history show``, history.html's banner and the pytest summary with
``--gemmperf-history-check``; flat histories stay quiet."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf import cli
from pytest_gemmperf.history import suspects as S
from pytest_gemmperf.history.store import HistoryStore, RunInfo
from pytest_gemmperf.pytest_glue.history import gate_threshold, suspect_lines

T0 = pd.Timestamp("2026-01-01", tz="UTC")
TEST = "perf_tests/test_x.py::test_x"


def history(runs: int, newest: float = 1.0, *, sd_run: float = 0.02, sd_unit: float = 0.01, units: int = 4,
            seed: int = 0, kernels=("Cijk_a", "Cijk_b"), metric: str = "dur_ns", hw: str = "hw") -> pd.DataFrame:
    """A history of ``runs`` runs, every kernel flat (run factor sd ``sd_run``, process factor
    ``sd_unit``) except ``kernels[0]``'s newest run, x ``newest``."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(runs):
        for k in kernels:
            run_factor = rng.normal(0, sd_run)
            scale = newest if (r == runs - 1 and k == kernels[0]) else 1.0
            for u in range(units):
                rows.append({"run_id": f"run{r:02d}", "time": T0 + pd.Timedelta(hours=r), "commit": f"c{r}",
                             "branch": None, "hw_key": hw, "test": TEST, "point": "p", "kernel": k,
                             "metric": metric, "unit": f"h/{100 + u}/0/{r}",
                             "value": 1e5 * math.exp(run_factor + rng.normal(0, sd_unit)) * scale})
    return pd.DataFrame(rows)


def store_of(tmp_path, h: pd.DataFrame):
    st = HistoryStore(tmp_path / "hist")
    for rid, g in h.groupby("run_id", sort=True):
        st.append(g[["test", "point", "kernel", "metric", "unit", "value"]],
                  RunInfo(run_id=rid, time=g["time"].iloc[0].isoformat(), commit=g["commit"].iloc[0],
                          hw_key=g["hw_key"].iloc[0]))
    return st


# ---------------------------------------------------------------------------------------------
# the rule


def test_a_three_times_slower_newest_run_is_flagged_at_once():
    found = S.newest_run_suspects(history(7, 3.0), 0.05)
    assert len(found) == 1, found
    r = found.iloc[0]
    assert (r["kernel"], r["run_id"], r["runs_before"]) == ("Cijk_a", "run06", 6)
    assert r["ratio"] == pytest.approx(3.0, rel=0.08)
    # two runs after it make a change point: one more at this level confirms it
    assert r["confirm_runs"] == 1
    assert found.attrs == {"series": 2, "short_series": 0}
    line = S.format_suspects(found)
    assert line.startswith(f"  suspect: {TEST}[p] Cijk_a dur_ns: x") and "at run run06" in line
    assert "1 more run at this level would confirm it as a change point" in line


@pytest.mark.parametrize("seed", range(40))
def test_seven_flat_runs_are_not_flagged(seed):
    assert S.newest_run_suspects(history(7, seed=seed, sd_run=0.03), 0.05).empty


def test_flat_series_are_flagged_rarely_even_without_a_threshold():
    """Threshold 0 leaves the spread condition alone: k(m) is a 99.9 % bound even for
    heavy-tailed noise, so 600 flat series of 7 runs give a handful of flags at most."""
    h = history(7, seed=3, kernels=[f"k{i}" for i in range(600)], sd_run=0.05)
    found = S.newest_run_suspects(h, 0.0, confirm=False)
    assert found.attrs["series"] == 600 and len(found) <= 3


def test_the_threshold_and_the_spread_must_both_be_exceeded():
    h = history(9, 1.2, sd_run=0.002, sd_unit=0.002)
    assert len(S.newest_run_suspects(h, 0.05)) == 1  # +20 % against a 0.2 % spread
    assert S.newest_run_suspects(h, 0.25).empty  # within the test's 25 % rule
    noisy = history(9, 1.2, sd_run=0.15, seed=1)
    assert S.newest_run_suspects(noisy, 0.05).empty  # +20 % inside a series that varies by 15 %


def test_improvements_and_short_series_are_not_flagged():
    assert S.newest_run_suspects(history(7, 1 / 3), 0.05).empty  # faster: not a regression
    short = S.newest_run_suspects(history(4, 3.0), 0.05)  # 3 earlier runs: k(3) is ~600
    assert short.empty and short.attrs == {"series": 0, "short_series": 2}
    # higher-is-better metric: a fall is the regression
    fall = S.newest_run_suspects(history(7, 1 / 3, metric="overlap_fraction"), 0.05)
    rise = S.newest_run_suspects(history(7, 3.0, metric="overlap_fraction"), 0.05)
    assert len(fall) == 1 and fall["ratio"].iloc[0] < 0.4 and rise.empty


def test_a_level_that_already_moved_is_the_reference():
    """A step found as a change point 3 runs back: the newest run at the new level is no
    suspect; a further x3 against the 5 runs since the step is."""
    h = history(12, sd_run=0.003)
    h.loc[h["run_id"] >= "run09", "value"] *= 1.5
    assert S.newest_run_suspects(h, 0.05).empty
    h2 = history(15, 3.0, sd_run=0.003)
    h2.loc[h2["run_id"] >= "run09", "value"] *= 1.5
    found = S.newest_run_suspects(h2, 0.05)
    assert found["kernel"].tolist() == ["Cijk_a"] and found["ratio"].iloc[0] > 2.9
    # with the change point given, the runs since it are the reference: x3 against them
    changes = pd.DataFrame([{"hw_key": "hw", "test": TEST, "point": "p", "kernel": k, "metric": "dur_ns",
                             "run_after": "run09"} for k in ("Cijk_a", "Cijk_b")])
    found = S.newest_run_suspects(h2, 0.05, changes=changes)
    assert found["runs_before"].tolist() == [5] and found["ratio"].iloc[0] == pytest.approx(3.0, rel=0.05)


def test_series_on_other_hardware_are_judged_apart():
    h = pd.concat([history(7, 3.0, hw="gpu-a"), history(7, 1.0, hw="gpu-b", seed=5)], ignore_index=True)
    found = S.newest_run_suspects(h, 0.05)
    assert found["hw_key"].tolist() == ["gpu-a"]


def test_a_series_whose_runs_agree_by_chance_keeps_the_process_spread():
    """Seven runs with identical run medians but processes that vary by 10 %: the floor from the
    processes keeps a +30 % newest run (4 processes: ~6 % sd of its median) unflagged at k(6)."""
    h = history(7, 1.3, sd_run=0.0, sd_unit=0.10, seed=2)
    med = h[h["run_id"] != "run06"].groupby(["kernel", "run_id"])["value"].median()
    h.loc[h["run_id"] != "run06", "value"] *= (1e5 / med).reindex(
        pd.MultiIndex.from_frame(h.loc[h["run_id"] != "run06", ["kernel", "run_id"]])).to_numpy()
    assert S.newest_run_suspects(h, 0.05).empty


def test_confirmation_count_grows_with_the_noise_and_says_when_it_is_out_of_reach():
    few = S.newest_run_suspects(history(7, 3.0), 0.05)["confirm_runs"].iloc[0]
    h = history(7, 1.3, sd_run=0.002, sd_unit=0.002)
    h.loc[h["run_id"] == "run00", "value"] *= 1.02
    many = S.newest_run_suspects(h, 0.05)["confirm_runs"].iloc[0]
    assert few == 1 and many is not None and many >= 1
    assert S.confirm_text(None) == ("more than 10 more runs at this level would be needed to confirm it "
                                    "as a change point")


@pytest.mark.parametrize("m", [8, 20])
def test_the_critical_values_are_the_quantiles_they_claim(m):
    rng = np.random.default_rng(7)
    x, y = rng.standard_t(3, (200_000, m)), rng.standard_t(3, 200_000)
    c = np.median(x, axis=1)
    stat = (y - c) / (1.4826 * np.median(np.abs(x - c[:, None]), axis=1))
    assert np.quantile(stat, 0.999) == pytest.approx(S.critical_value(m), rel=0.12)
    ks = [S.critical_value(i) for i in range(S.MIN_PAST, S.PAST_RUNS + 1)]
    assert ks == sorted(ks, reverse=True)  # more earlier runs never widen the bound
    assert S.critical_value(40) == S.CRITICAL[S.PAST_RUNS]
    with pytest.raises(ValueError):
        S.critical_value(3)


def test_a_series_with_a_zero_value_is_judged_on_its_values():
    h = history(8, 3.0)
    h.loc[h.index[0], "value"] = 0.0  # one process of run00 read 0: linear scale, run median unmoved
    found = S.newest_run_suspects(h, 0.05)
    assert found["kernel"].tolist() == ["Cijk_a"] and found["ratio"].iloc[0] == pytest.approx(3.0, rel=0.08)
    around_zero = history(8, 1.0)
    around_zero["value"] -= 1e5  # level ~0: no relative change is defined, nothing is claimed
    assert S.newest_run_suspects(around_zero, 0.05).empty


# ---------------------------------------------------------------------------------------------
# gemmperf history check / show, history.html


def test_history_check_flags_the_suspect_and_exits_4(tmp_path, capsys):
    st = store_of(tmp_path, history(7, 3.0))
    out = tmp_path / "out"
    rc = cli.main(["history", "check", "--history", str(st.root), "--out", str(out)])
    text, err = capsys.readouterr()
    assert rc == 4, err
    assert "1 suspect newest run(s): far outside their series (beyond the 5% threshold" in text
    assert f"suspect: {TEST}[p] Cijk_a dur_ns: x" in text
    assert "no regression change point within the last 5 run(s)" in text
    assert "suspected regression(s) in the newest run, not yet a change point (exit 4)" in err
    rows = pd.read_csv(out / "suspects.csv")
    assert rows["kernel"].tolist() == ["Cijk_a"] and rows["confirm_runs"].tolist() == [1]
    page = (out / "history.html").read_text()
    assert 'id="suspects"' in page and "1 suspect newest run" in page and "at run run06" in page
    assert 'class="summary regression"' in page
    # the same store with a 300 % rule: nothing is beyond it
    rc = cli.main(["history", "check", "--history", str(st.root), "--out", str(tmp_path / "o2"),
                   "--threshold", "300%"])
    assert rc == 0 and "suspect" not in capsys.readouterr().out


def test_history_check_of_a_flat_history_is_quiet(tmp_path, capsys):
    st = store_of(tmp_path, history(7))
    rc = cli.main(["history", "check", "--history", str(st.root), "--out", str(tmp_path / "out")])
    text, _ = capsys.readouterr()
    assert rc == 0 and "suspect" not in text
    assert len(pd.read_csv(tmp_path / "out" / "suspects.csv")) == 0
    assert 'id="suspects"' not in (tmp_path / "out" / "history.html").read_text()


def test_a_recent_change_point_still_exits_1_beside_a_suspect(tmp_path, capsys):
    h = history(12, 1.0, sd_run=0.003)
    late = h["run_id"] >= "run08"
    h.loc[late & (h["kernel"] == "Cijk_b"), "value"] *= 1.5  # a change point 4 runs back
    h.loc[(h["run_id"] == "run11") & (h["kernel"] == "Cijk_a"), "value"] *= 3
    st = store_of(tmp_path, h)
    rc = cli.main(["history", "check", "--history", str(st.root), "--out", str(tmp_path / "out")])
    text, _ = capsys.readouterr()
    assert rc == 1
    assert "suspect: " in text and "Cijk_a" in text and "regression change point(s) within the last 5" in text


def test_history_show_says_suspect_where_it_said_none(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # `history show` fits the terminal; xdist workers have none
    st = store_of(tmp_path, history(7, 23.0))
    assert cli.main(["history", "show", "--history", str(st.root)]) == 0
    text = capsys.readouterr().out
    a = next(ln for ln in text.splitlines() if "Cijk_a" in ln)
    b = next(ln for ln in text.splitlines() if "Cijk_b" in ln)
    assert "suspect x22.9 at run06 (confirm: 1 more run)" in a
    assert b.rstrip().endswith("none")


# ---------------------------------------------------------------------------------------------
# pytest


def test_the_pytest_side_reads_the_rule_the_run_recorded(tmp_path):
    point, root = tmp_path / "t" / "p", tmp_path
    point.mkdir(parents=True)
    assert gate_threshold(point, root) == 0.05  # nothing recorded: the gate's default
    (root / "run.json").write_text(json.dumps({"threshold": 0.1}))
    assert gate_threshold(point, root) == 0.1  # the session's
    (point / "point.json").write_text(json.dumps({"threshold": 0.25}))
    assert gate_threshold(point, root) == 0.25  # the test's own rule
    (point / "point.json").write_text(json.dumps({"threshold": None}))
    assert gate_threshold(point, root) == 0.1
    h = history(7, 1.2, sd_run=0.002, sd_unit=0.002)
    assert suspect_lines(h, "hw", 0.25) == []
    (line,) = suspect_lines(h, "hw", 0.05)
    assert line.startswith(f"suspect: {TEST}[p] Cijk_a dur_ns: x1.") and line.endswith("(history, hw)")
