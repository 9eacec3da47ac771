"""Commands that list stored values read as people read them: ``baseline diff`` with units, the
tested change and its CI as ``compare`` prints it, and no equal value called ``changed``;
``history show`` within 160 columns with units; ``prune`` lists unless ``--yes``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.cli import main
from pytest_gemmperf.commands.baseline_impl import SAME_MEDIAN, diff_table
from pytest_gemmperf.commands.termtable import fit_table, value_text, values_text
from pytest_gemmperf.gate.compare import GateConfig, compare
from pytest_gemmperf.gate.headline import change_text
from pytest_gemmperf.store.baselines import BaselineStore
from test_baseline import HW, make_results, samples_module  # noqa: F401  (fixture)
from test_history_cli import _samples_file

SCIENTIFIC = re.compile(r"\d[eE][+-]?\d")


@pytest.mark.parametrize("x, metric, text", [
    (99707.237458, "dur_ns", "99.71 µs"), (512, "dur_ns", "512 ns"), (1.5e9, "computation_ns", "1.5 s"),
    (2.25e6, "dur_ns", "2.25 ms"), (1234.5e9, "dur_ns", "1234 s"), (30, "dispatch_count", "30"),
    (0.0, "overlap_fraction", "0"), (1.23e-5, "overlap_fraction", "0.0000123"),
    (123456789.0, "dispatch_count", "123500000"), (float("nan"), "dur_ns", "—")])
def test_values_have_units_and_no_scientific_notation(x, metric, text) -> None:
    assert value_text(x, metric) == text
    assert values_text([998.8, 1152.0], "dur_ns") == "0.9988 1.152 µs"


def test_equal_values_are_never_changed() -> None:
    diff = pd.DataFrame({"point": ["p"] * 4, "kernel": ["k", "k", "*", "k"],
                         "metric": ["dispatch_count", "dur_ns", "overlap_fraction", "dur_ns"],
                         "old_median": [80.0, 1000.0, 0.0, 1000.0], "new_median": [80.0, 1000.0, 0.0, 1100.0],
                         "old_n_units": pd.array([4, 4, 4, 4], dtype="Int64"),
                         "new_n_units": pd.array([8, 4, 8, 8], dtype="Int64"),
                         "change": ["changed", "unchanged", "changed", "changed"]})
    t = diff_table(diff, None)
    assert t["diff"].tolist() == [SAME_MEDIAN, "unchanged", SAME_MEDIAN, "changed"]
    assert t["old"].tolist() == ["80", "1 µs", "0", "1 µs"] and t["new"].tolist()[3] == "1.1 µs"
    assert t["processes"].tolist()[0] == "4 -> 8"


def test_baseline_diff_prints_units_and_the_tested_change(tmp_path: Path, samples_module, capsys) -> None:  # noqa: F811
    bdir = str(tmp_path / "b")
    r1, r2 = make_results(tmp_path / "r1", seed=0), make_results(tmp_path / "r2", seed=100)
    assert main(["baseline", "refresh", "--from", str(r1), "--baseline-dir", bdir]) == 0
    capsys.readouterr()
    assert main(["baseline", "diff", "--from", str(r2), "--baseline-dir", bdir, "--all"]) == 0
    out = capsys.readouterr().out
    assert not SCIENTIFIC.search(out), out
    head = next(ln for ln in out.splitlines() if ln.startswith("point "))
    assert "change [95% CI]" in head and "old" in head and "new" in head
    # the row's change is compare's text for the stored record against the run
    store = BaselineStore(bdir)
    test = "perf_tests/test_gemm.py::test_overlap"
    from pytest_gemmperf.store.results import records_from_results

    new = next(r for r in records_from_results(r2) if r.test_id == test)
    v = compare(store.load(test, HW).samples, new.samples, GateConfig(), test=test)
    row = v[(v["point"] == "ch56-th512") & (v["metric"] == "dur_ns") & v["kernel"].str.startswith("ncclDev")].iloc[0]
    expected = change_text(row["ratio"], row["ci_low"], row["ci_high"])
    line = next(ln for ln in out.splitlines() if ln.startswith("ch56-th512") and "ncclDev" in ln and "dur_ns" in ln)
    assert expected in line and " µs " in line
    for ln in out.splitlines():  # a row whose two medians print alike is never "changed" ...
        if "dispatch_count" in ln:
            assert ln.split()[-1] != "changed"
    # ... and the same run again changes nothing
    assert main(["baseline", "diff", "--from", str(r1), "--baseline-dir", bdir]) == 0
    assert " 0 changed" in capsys.readouterr().out.replace(":", " ")


def test_history_show_fits_160_columns_with_units(tmp_path: Path, capsys, monkeypatch) -> None:
    hist = tmp_path / "hist"
    long_test = "perf_tests/models/" + "deep/" * 12 + "test_a_very_long_module_name.py::test_gemm_sweep_with_a_long_name"
    for i, level in enumerate([1000.0, 1001.0, 999.0, 1150.0, 1152.0]):
        f = _samples_file(tmp_path / f"s{i}.parquet", level, i)
        df = pd.read_parquet(f)
        df["kernel"] = df["kernel"].replace("Cijk_gemm", "Cijk_Ailk_Bljk_HHS_BH_MT256x256x64_MI32x32x8x1_SN_" + "X" * 150)
        df.to_parquet(f)
        assert main(["history", "record", str(f), "--history", str(hist), "--run-id", f"nightly-{i}",
                     "--test", long_test, "--hw", "gfx942-MI300X-x8", "--time", f"2026-10-0{i + 1}T03:00:00"]) == 0
    capsys.readouterr()
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["history", "show", "--history", str(hist)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 160, "\n".join(ln for ln in lines if len(ln) > 160)
    assert any("µs" in ln and "Cijk_" in ln for ln in lines) and not SCIENTIFIC.search(out), out
    assert any(" ns " in ln and "exposed_comm_ns" in ln for ln in lines), out


def test_fit_table_shortens_the_widest_text_first() -> None:
    rows = [["a" * 100, "b" * 60, "12"]]
    lines = fit_table(["kernel", "test", "n"], rows, 80, shrink=("kernel", "test"), right=("n",))
    assert all(len(ln) <= 80 for ln in lines) and "..." in lines[1]
    assert fit_table(["x"], [["short"]], 80) == ["x", "short"]
    assert np.all([len(ln) <= 30 for ln in fit_table(["k", "t"], [["a" * 50, "b" * 50]], 30, shrink=("k", "t"))])


def test_fit_table_shortens_the_verdict_text_last_and_keeps_its_head() -> None:
    header = ["test", "kernel", "latest change"]
    rows = [["t" * 40, "k" * 40, "regression +15.3% at nightly-09 (0123456789)"]]
    lines = fit_table(header, rows, 80, shrink=("test", "kernel"), shrink_last=("latest change",))
    assert all(len(ln) <= 80 for ln in lines) and rows[0][2] in lines[1]  # test and kernel gave way
    lines = fit_table(header, rows, 60, shrink=("test", "kernel"), shrink_last=("latest change",))
    assert all(len(ln) <= 60 for ln in lines) and "regression +15." in lines[1] and lines[1].endswith("...")


def test_baseline_prune_lists_unless_yes(tmp_path: Path, samples_module, capsys) -> None:  # noqa: F811
    bdir = str(tmp_path / "b")
    assert main(["baseline", "refresh", "--from", str(make_results(tmp_path / "r1")), "--baseline-dir", bdir]) == 0
    n = len(BaselineStore(bdir).load_all())
    capsys.readouterr()
    assert main(["baseline", "prune", "--baseline-dir", bdir, "--older-than", "0"]) == 0
    out = capsys.readouterr().out
    assert out.count("would remove") == n and len(BaselineStore(bdir).load_all()) == n
    assert main(["baseline", "prune", "--baseline-dir", bdir, "--older-than", "0", "--yes"]) == 0
    assert BaselineStore(bdir).load_all() == []
