"""Numbers as written: no binary float noise in any CSV, workbook or JSON the product writes,
nanoseconds as integers, booleans typed (pytest_gemmperf/numbers.py).

"Binary noise" is defined on the shortest text that reads back as the float (``repr``): a
written float must need at most ``numbers.SIGNIFICANT`` (12) significant digits. The
arithmetic's noise lives in the 16th and 17th digit (``9436.846899999999``,
``99.99999999999999``, ``192067095.60000002``), so any float carrying it fails; no measurement
the product writes needs more than 12 digits (durations in ns are integers).

The property test runs a whole session (the stand-in sweep on the CPU torch backend, telemetry,
history, baselines, benchmark JSON, session reports), then ``gemmperf analyze``, ``compare``
(with its reports) and the history export on its output, and reads every CSV, XLSX and JSON
file under the directory.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.cli import main
from pytest_gemmperf.jsonsafe import clean
from pytest_gemmperf.numbers import SIGNIFICANT, significant_digits, tidy_float, tidy_frame
from pytest_gemmperf.safe_io import csv_text
from pytest_gemmperf.traces.schema import finalize_dispatches

pytest_plugins = ["pytester"]

from gemmperf_pytester_support import gp  # noqa: E402,F401  (fixture)


def noisy(x: float) -> bool:
    return math.isfinite(x) and significant_digits(x) > SIGNIFICANT


# ------------------------------------------------------------------ the definition, by examples


@pytest.mark.parametrize("text, digits", [("9436.8469", 8), ("100.0", 1), ("0.05", 1), ("1e-07", 1),
                                          ("192067095.6", 10), ("123456789012.0", 12), ("-0.00125", 3)])
def test_significant_digits(text: str, digits: int) -> None:
    assert significant_digits(float(text)) == digits


@pytest.mark.parametrize("value", [9436.846899999999, 99.99999999999999, 192067095.60000002,
                                   0.1 + 0.2, 9436846.8999 * 1e-3])
def test_the_issues_values_are_noise_and_tidy_removes_it(value: float) -> None:
    assert noisy(value)
    assert not noisy(tidy_float(value))
    assert abs(tidy_float(value) - value) <= 1e-11 * abs(value)


def test_tidy_float_is_close_and_clean() -> None:
    rng = np.random.default_rng(7)
    # every magnitude, and sums and products the way tables make them
    xs = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-300, 300, 2000),
                         rng.integers(0, 10**9, 2000) * 1e-3, np.cumsum(rng.random(2000) * 0.1)])
    for x in xs.tolist():
        t = tidy_float(x)
        assert not noisy(t), (x, t)
        assert t == tidy_float(t)  # idempotent
        assert abs(t - x) <= 5e-12 * abs(x), (x, t)


def test_tidy_frame_types_ns_bools_and_floats() -> None:
    df = pd.DataFrame({"median_ns": [9436846.9, np.nan], "ratio": [0.1 + 0.2, 1.0],
                       "by_rel": np.array([False, None], dtype=object), "n": [1, 2],
                       "mixed": np.array([99.99999999999999, "x"], dtype=object)})
    t = tidy_frame(df)
    assert str(t["median_ns"].dtype) == "Int64" and t["median_ns"].tolist()[0] == 9436847
    assert t["median_ns"].isna().tolist() == [False, True]
    assert t["ratio"].tolist() == [0.3, 1.0]
    assert str(t["by_rel"].dtype) == "boolean"
    assert t["mixed"].tolist() == [100.0, "x"]
    assert df["ratio"].tolist()[0] == 0.1 + 0.2  # the input is left as it was
    text = csv_text(df)
    assert "9436847," in text and "0.3," in text and "False" in text and "0.30000000000000004" not in text
    assert json.dumps(clean({"a": 0.1 + 0.2, "b": [99.99999999999999]})) == '{"a": 0.3, "b": [100.0]}'


@pytest.mark.parametrize("n", [1, 7, 64, 65, 300])
def test_tidy_frame_short_and_long_columns_alike(n: int) -> None:
    """A short float column is tidied value by value in Python, a long one through NumPy's
    formatting: the same doubles either way, for any magnitude, subnormals, infinities and
    missing values, in float64, float32 and nullable Float64 columns."""
    rng = np.random.default_rng(n)
    values = np.concatenate([rng.random(n) * 10.0 ** rng.integers(-310, 300, n), [np.nan, np.inf, -0.0, 5e-324]])
    with np.errstate(over="ignore"):  # float32 holds the large ones as infinities
        for s in (pd.Series(values, name="x"), pd.Series(values.astype(np.float32), name="x"),
                  pd.Series(pd.array(values, dtype="Float64"), name="x")):
            got = tidy_frame(s.to_frame())["x"]
            text = np.char.mod(f"%.{SIGNIFICANT}g", s.to_numpy(dtype=np.float64, na_value=np.nan))
            want = pd.Series(text.astype(np.float64), name="x").astype(s.dtype).mask(s.isna())
            pd.testing.assert_series_equal(got, want, check_exact=True)


def test_the_results_layouts_json_is_tidy(tmp_path: Path) -> None:
    from pytest_gemmperf.run.results import write_json

    write_json(tmp_path / "point.json", {"environment": {"load1_end": 10.44091796875, "frac": 0.1 + 0.2,
                                                         "ok": True, "n": 3, "path": tmp_path}})
    doc = json.loads((tmp_path / "point.json").read_text())
    assert doc["environment"] == {"load1_end": 10.4409179688, "frac": 0.3, "ok": True, "n": 3, "path": str(tmp_path)}


# ------------------------------------------------------------------------- the property, end to end


def _json_floats(doc: object, where: str) -> list[str]:
    bad: list[str] = []
    if isinstance(doc, float) and noisy(doc):
        bad.append(f"{where}: {doc!r}")
    elif isinstance(doc, dict):
        for k, v in doc.items():
            bad += _json_floats(v, f"{where}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            bad += _json_floats(v, f"{where}[{i}]")
    return bad


def _csv_floats(text: str, where: str) -> list[str]:
    # every cell read as text: the file's own digits, not pandas' parse of them
    df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    bad = []
    for col in df.columns:
        for i, cell in enumerate(df[col].tolist()):
            try:
                x = float(cell)
            except ValueError:
                continue
            if noisy(x) or ("." in cell and significant_digits(x) > SIGNIFICANT):
                bad.append(f"{where}:{col}[{i}]: {cell}")
    return bad


def _xlsx_floats(path: Path) -> list[str]:
    import openpyxl

    bad = []
    wb = openpyxl.load_workbook(path, read_only=True)
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                v = cell.value
                if isinstance(v, float) and noisy(v):
                    bad.append(f"{path.name}!{ws.title}:{cell.coordinate}: {v!r}")
                if isinstance(v, str) and v in ("True", "False"):
                    bad.append(f"{path.name}!{ws.title}:{cell.coordinate}: boolean as text {v!r}")
    return bad


def _written_noise(root: Path) -> tuple[list[str], dict[str, int]]:
    bad: list[str] = []
    seen = {"csv": 0, "xlsx": 0, "json": 0}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or "basetemp" in p.parts or p.name.startswith("test_"):
            continue
        name = p.name
        rel = str(p.relative_to(root))
        if name.endswith(".csv"):
            seen["csv"] += 1
            bad += _csv_floats(p.read_text(encoding="utf-8"), rel)
        elif name.endswith(".xlsx"):
            seen["xlsx"] += 1
            bad += _xlsx_floats(p)
        elif name.endswith((".json", ".json.gz")) and "trace" not in name:
            seen["json"] += 1
            raw = gzip.decompress(p.read_bytes()) if name.endswith(".gz") else p.read_bytes()
            try:
                doc = json.loads(raw)
            except ValueError:  # JSON lines (the history, logs): one document per line
                for n, line in enumerate(raw.decode("utf-8").splitlines()):
                    if line.strip():
                        bad += _json_floats(json.loads(line), f"{rel}:{n + 1}")
                continue
            bad += _json_floats(doc, rel)
    return bad, seen


def test_no_written_value_shows_binary_noise(gp, monkeypatch) -> None:
    res = gp("--gemmperf-update-baselines", "--gemmperf-history=hx")
    assert res.ret == 0, res.stdout.str()
    res = gp("--gemmperf-history=hx", "--gemmperf-benchmark-json=bx.json", "--gemmperf-telemetry", "on",
             results="res2")
    assert res.ret in (0, 1), res.stdout.str()
    root = gp.path
    monkeypatch.chdir(root)
    results = root / "res2"
    assert main(["analyze", str(results), "--out", "an"]) == 0
    assert main(["compare", "base", str(results), "--out", "cmp", "--benchmark-json", "cb.json",
                 "--threshold", "50%"]) in (0, 1)
    assert main(["compare", str(root / "res"), str(results), "--out", "cmp2", "--threshold", "5%"]) in (0, 1)
    bad, seen = _written_noise(root)
    assert seen["csv"] >= 4 and seen["xlsx"] >= 2 and seen["json"] >= 5, seen
    assert not bad, "\n".join(sorted({b.split(":")[0].split(".json")[0] + " " + b for b in bad})[:80])
    verdicts = pd.read_csv(root / "cmp2" / "verdicts.csv")
    assert all(c.endswith("_ns") is False or verdicts[c].dropna().map(float.is_integer).all()
               for c in verdicts.columns if verdicts[c].dtype.kind == "f")
    if "by_rel" in verdicts.columns:
        assert set(verdicts["by_rel"].dropna().map(type)) <= {bool}


def test_xlsx_boolean_cells_are_booleans(tmp_path: Path) -> None:
    from pytest_gemmperf.report import write_reports

    d = pd.DataFrame({"kernel": ["k"] * 4, "dur_ns": [1000, 1001, 999, 1000], "start_ns": [0, 2000, 4000, 6000]})
    v = pd.DataFrame({"test": ["t"], "point": ["p"], "kernel": ["k"], "metric": ["dur_ns"],
                      "ratio": [0.1 + 0.2 + 0.7], "ci_low": [0.9], "ci_high": [1.1], "q_value": [0.5],
                      "verdict": ["unchanged"], "threshold": [0.05], "note": [""],
                      "base_median_ns": [9436846.9], "cand_median_ns": [9436846.9],
                      "by_rel": np.array([False], dtype=object)})
    files = write_reports(tmp_path, dispatches=finalize_dispatches(d.assign(end_ns=d["start_ns"] + d["dur_ns"]), None), verdicts=v, formats=("xlsx", "csv"))
    with zipfile.ZipFile(files["report.xlsx"]) as z:
        sheets = [n for n in z.namelist() if n.startswith("xl/worksheets/")]
        assert sheets
    assert not _xlsx_floats(files["report.xlsx"])
