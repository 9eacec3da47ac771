"""The notebook API (pytest_gemmperf/api.py): ``gp.load`` and ``gp.compare`` give the rows and
numbers the commands write, resolve settings as they do, fail as they do, and need no pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pytest_gemmperf as gp
from conftest import FIXTURES, REPO
from pytest_gemmperf.cli import main
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.safe_io import unneutralise_frame

KINETO = FIXTURES / "torch" / "rocm_sdk_rank3.pt.trace.json"
ROCPROF_DIR = FIXTURES / "rocprof_csv" / "v7" / "mi350-n1"


def assert_same_as_file(df: pd.DataFrame, path: Path) -> None:
    """``df`` holds the rows and numbers of the CSV at ``path``: same columns in the same order,
    same rows in the same order, numbers equal (nulls alike), texts and booleans alike."""
    f = unneutralise_frame(pd.read_csv(path, keep_default_na=True))
    assert list(df.columns) == list(f.columns)
    assert len(df) == len(f) > 0
    for c in df.columns:
        a, b = df[c], f[c]
        if pd.api.types.is_numeric_dtype(a.dtype) and not pd.api.types.is_bool_dtype(a.dtype):
            x = pd.to_numeric(a).astype("Float64").to_numpy(dtype=float, na_value=np.nan)
            y = pd.to_numeric(b).astype("Float64").to_numpy(dtype=float, na_value=np.nan)
            np.testing.assert_array_equal(x, y, err_msg=c)
        else:
            def text(s: pd.Series) -> list:  # a CSV writes an empty text and a null alike
                return [None if pd.isna(v) or v == "" else str(v) for v in s.astype(object)]
            assert text(a) == text(b), c


@pytest.mark.parametrize("source", [KINETO, ROCPROF_DIR], ids=["kineto", "rocprofv3-dir"])
def test_load_gives_the_kernels_csv_of_analyze(source: Path, tmp_path: Path) -> None:
    a = gp.load(source)
    assert main(["analyze", str(source), "--out", str(tmp_path / "cli")]) == 0
    assert_same_as_file(a.kernels, tmp_path / "cli" / "kernels.csv")
    assert a.summary == json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert len(a.dispatches) == a.summary["n_dispatches"]
    # a.report writes what the command writes, file for file
    out = a.report(tmp_path / "api")
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert (out / "kernels.csv").read_bytes() == (tmp_path / "cli" / "kernels.csv").read_bytes()


def test_load_tables_where_the_input_has_them() -> None:
    a = gp.load(KINETO)  # a torch trace with a collective beside its GEMMs
    assert a.timeline is not None and len(a.timeline) == 1
    assert a.overlap is not None and "kernel" in a.overlap.columns
    assert a.counters is None  # no counter collection in a Kineto trace
    html = a._repr_html_()
    assert "<table" in html and "8 dispatches, 6 kernel rows" in html
    c = gp.load(FIXTURES / "rocprof_json" / "v7_two_processes_counters_results.json")
    assert c.counters is not None and len(c.counters)


def test_load_and_compare_on_the_example_suites_results(xdist_sweep, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    resx, base = xdist_sweep.path / "resx", xdist_sweep.path / "base"
    a = gp.load(resx)
    assert main(["analyze", str(resx), "--out", "an", "--no-report"]) == 0
    assert_same_as_file(a.kernels, tmp_path / "an" / "kernels.csv")

    for threshold in ("5%", 0.0):
        c = gp.compare(base, resx, threshold=threshold)
        rc = main(["compare", str(base), str(resx), "--out", "cmp", "--no-report", "--threshold", str(threshold)])
        assert_same_as_file(c.verdicts, tmp_path / "cmp" / "verdicts.csv")
        assert c.passed == (rc != 1) and c.exit_status == rc
    html = c._repr_html_()
    assert "change [95% CI]" in html and "<table" in html
    out = c.report(tmp_path / "rep")
    assert (out / "verdicts.csv").read_bytes() == (tmp_path / "cmp" / "verdicts.csv").read_bytes()


def test_compare_of_traces_passed_is_the_exit_status(tmp_path: Path, monkeypatch) -> None:
    slow = tmp_path / "slow.json"
    doc = json.loads(KINETO.read_text())
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "kernel" and "Cijk" in ev.get("name", ""):
            ev["dur"] = ev["dur"] * 3  # a GEMM three times slower
    slow.write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    c = gp.compare(KINETO, slow, threshold="5%")
    # the command's reports are left out: the verdicts and the status are the same without them,
    # and the API's report is written below
    rc = main(["compare", str(KINETO), str(slow), "--out", "cmp", "--threshold", "5%", "--no-report"])
    assert_same_as_file(c.verdicts, tmp_path / "cmp" / "verdicts.csv")
    assert c.passed == (rc != 1)
    same = gp.compare(KINETO, KINETO, threshold="5%")
    assert same.passed == (main(["compare", str(KINETO), str(KINETO), "--out", "c2", "--no-report"]) != 1)
    assert "report.html" in {p.name for p in c.report(tmp_path / "rep").iterdir()}


def test_settings_come_from_the_project_as_for_the_command(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\ngemmperf_threshold = 12%\n")
    monkeypatch.chdir(tmp_path)
    c = gp.compare(KINETO, KINETO)
    assert c.threshold == pytest.approx(0.12) and "pytest.ini" in c.threshold_line
    assert c.verdicts["threshold"].tolist() == [pytest.approx(0.12)] * len(c.verdicts)
    assert gp.compare(KINETO, KINETO, threshold=0.03).threshold == pytest.approx(0.03)


def test_errors_are_the_commands_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "broken.pt.trace.json"
    bad.write_text('{"traceEvents": [')
    with pytest.raises(GemmperfInputError) as err:
        gp.load(bad)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)
    rc = main(["analyze", str(bad), "--out", "x"])
    assert rc == 2
    with pytest.raises(GemmperfInputError) as err:
        gp.compare(tmp_path / "nowhere", KINETO)
    assert "nowhere" in str(err.value)
    with pytest.raises(ValueError, match="threshold"):
        gp.compare(KINETO, KINETO, threshold="lots")


def test_the_api_needs_no_pytest_and_the_package_stays_light(tmp_path: Path) -> None:
    code = ("import sys, pytest_gemmperf as gp\n"
            "light = not {'pandas', 'numpy', 'scipy', 'pyarrow'} & set(sys.modules)\n"
            f"a = gp.load({str(KINETO)!r})\n"
            "c = gp.compare(" + repr(str(KINETO)) + ", " + repr(str(KINETO)) + ")\n"
            "print(light, 'pytest' in sys.modules, len(a.kernels), c.passed)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "6", "True"]


def test_typed_exports() -> None:
    assert callable(gp.load) and callable(gp.compare)
    assert {"load", "compare", "Analysis", "Comparison"} <= set(gp.__all__)
    with pytest.raises(AttributeError):
        gp.no_such_name  # noqa: B018
