"""One headline per verdict row, the reason everywhere, and swapped `gemmperf compare` arguments.

Every place a person reads a verdict shows the same text: the tested change with its CI, the
verdict, and why (``gate/headline.py``); the per-process medians and their raw ratio, a
different quantity, stay in ``verdicts.csv`` and behind the HTML expander. ``unchanged`` means
the CI lies inside the threshold band, or the row says why not. The tools' footer and
docs/statistics.md say the same words about each printed number. A baseline store given as the
candidate is refused with the corrected command.
"""

from __future__ import annotations

import html
import importlib
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gemmperf_pytester_support import gp  # noqa: F401 - gp: the fixture
from pytest_gemmperf.cli import main as cli_main
from pytest_gemmperf.gate.compare import GateConfig, assign_verdicts
from pytest_gemmperf.gate.verdict import per_process_medians
from pytest_gemmperf.report import write_reports
from pytest_gemmperf.report.tables import md_text
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.record import BaselineRecord
from pytest_gemmperf.traces.schema import finalize_dispatches

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
TEST_ID = "test_gpsweep.py::test_gpsweep"


@pytest.fixture
def hl():
    """The headline module (imported here: the tests that need it fail without it, the others
    still run and show what they check)."""
    return importlib.import_module("pytest_gemmperf.gate.headline")


def _between(text: str, start: str, end: str | None = None) -> str:
    i = text.index(start)
    j = text.index(end, i + len(start)) if end else len(text)
    return text[i:j]


def _raw(row: dict) -> str:
    return f"x{row['cand_median_ns'] / row['base_median_ns']:.3f}"


# ---------------------------------------------------------------------------------------------
# one headline in the terminal summary, the failure message, summary.md and report.html


def test_one_headline_everywhere_a_person_reads_a_forced_regression(gp, monkeypatch, request):  # noqa: F811
    gp(results="res1").assert_outcomes(passed=2)  # records the baseline
    monkeypatch.setenv("FAKE_SCALE", "1.4")
    out = gp(results="res2")
    out.assert_outcomes(failed=2)
    stdout = out.stdout.str()
    v = pd.read_csv(gp.path / "res2" / "test_gpsweep.py__test_gpsweep" / "verdicts.csv", keep_default_na=False,
                    na_values=[""])
    row = v[(v["point"] == "ch28-th256") & (v["kernel"] == "aten::mm") & (v["metric"] == "dur_ns")].iloc[0].to_dict()
    assert row["verdict"] == "regression"

    failure = _between(stdout, "gemmperf: 2 regression(s) in test_gpsweep.py::test_gpsweep[ch28-th256]",
                       "note: ")
    summary = _between(stdout, "= gemmperf =")
    md = (gp.path / ".gemmperf" / "report" / "summary.md").read_text(encoding="utf-8")
    page = (gp.path / ".gemmperf" / "report" / "report.html").read_text(encoding="utf-8")
    header = _between(page, '<ul id="why">', "</ul>")
    table = _between(page, '<table id="verdict-table"', "</table>")
    h = request.getfixturevalue("hl").headline(row)
    assert h.change.startswith("+") and "[" in h.change and h.reason
    for where, text in (("failure message", failure), ("terminal summary", summary)):
        line = next(x for x in text.splitlines() if x.startswith("regression") and "ch28-th256" in x
                    and "aten::mm" in x)
        assert h.change in line and h.reason in line, (where, line)
    md_line = next(x for x in md.splitlines() if x.startswith("| regression") and "`ch28-th256`" in x
                   and "`aten::mm`" in x and "dur\\_ns" in x)
    assert h.change in md_line and md_text(h.reason) in md_line
    assert html.escape(h.change) in header and html.escape(h.reason) in header
    assert html.escape(h.change) in table and html.escape(h.reason) in table
    # one outcome everywhere (gate/outcome.py): both points failed
    whole_failure = _between(stdout, "gemmperf: 2 regression(s) in test_gpsweep.py::test_gpsweep[ch28-th256]",
                             "= gemmperf =")
    assert "\noutcome: failed: 2 regression(s), e.g. " in whole_failure and "points: 2 failed" in summary
    assert md.startswith("## gemmperf: FAILED") and "* points: 2 failed" in md
    assert 'class="banner failed">FAILED' in page and "points: 2 failed" in page

    # the medians' raw ratio is no headline: it is in verdicts.csv and behind the HTML expander
    raw = _raw(row)
    assert raw not in stdout and raw not in md and raw not in header
    details = re.findall(r"<details><summary>medians</summary>(.*?)</details>", table, re.S)
    assert any(raw in d for d in details)
    assert raw not in re.sub(r"<details><summary>medians</summary>.*?</details>", "", table, flags=re.S)


def test_raw_ratio_outside_the_tested_ci_says_why(hl):
    # the row: raw x1.723 beside a tested change of -29.8 % [-89.6, +373.3]
    row = {"verdict": "inconclusive", "metric": "dur_ns", "ratio": 0.702, "ci_low": 0.104, "ci_high": 4.733,
           "base_median_ns": 1000.0, "cand_median_ns": 1723.0, "threshold": 0.25, "q_value": 0.9,
           "note": "CI crosses the 25% threshold: needs >= 1366 processes per side"}
    d = hl.raw_detail(row)
    assert d.raw == "x1.723" and d.note == ""  # inside this (wide) CI: nothing to explain
    d = hl.raw_detail({**row, "ci_low": 0.5, "ci_high": 0.9})
    assert "outside the tested CI" in d.note and "shared" in d.note
    assert "x1.723" not in hl.headline(row).text()
    assert hl.headline(row).text() == ("inconclusive -29.8% [-89.6, +373.3]: CI crosses the 25% threshold: "
                                      "needs >= 1366 processes per side")


# ---------------------------------------------------------------------------------------------
# unchanged means inside the band, or the row says why


def _stats_rows() -> pd.DataFrame:
    """Two kernels the gate sizes by their change relative to the other kernels (their own
    variance history): relative change inside a 25 % band, total change wholly beyond it (one)
    or across its edge (two)."""
    base = dict(test="t::t", point="p", metric="dur_ns", n_base=4, n_cand=4, base_median_ns=1e5,
                cand_median_ns=1.3e5, p_value=1e-7, verdict="", note="", by_rel=True, history_df=60.0,
                df_t=6.0, df_rel=60.0)
    return pd.DataFrame([
        {**base, "kernel": "beyond", "ratio": 1.40, "ci_low": 1.30, "ci_high": 1.50, "q_value": 1e-6,
         "rel_ratio": 1.02, "rel_ci_low": 1.00, "rel_ci_high": 1.04},
        {**base, "kernel": "across", "ratio": 1.20, "ci_low": 0.90, "ci_high": 1.60, "q_value": 0.5,
         "p_value": 0.3, "rel_ratio": 1.01, "rel_ci_low": 0.99, "rel_ci_high": 1.03},
    ])


def _inside(r: dict) -> bool:
    return 1 - r["threshold"] <= r["ci_low"] and r["ci_high"] <= 1 + r["threshold"]


def test_a_ci_beyond_the_band_is_never_unchanged_and_unchanged_says_why():
    v = assign_verdicts(_stats_rows(), GateConfig(threshold=0.25)).set_index("kernel")
    beyond, across = v.loc["beyond"], v.loc["across"]
    assert beyond["ci_low"] > 1.25 and beyond["verdict"] != "unchanged"
    assert beyond["verdict"] == "inconclusive" and "relative to the other kernels" in beyond["note"]
    assert "all kernels moved together" in beyond["note"]
    # the relative change decides, and the row says so: its printed CI crosses the band
    assert across["verdict"] == "unchanged" and not _inside(across.to_dict())
    assert "judged by its change relative to the other kernels" in across["note"]
    assert "+1.0% [-1.0, +3.0]" in across["note"]


# ---------------------------------------------------------------------------------------------
# the why in the terminal summary, summary.md and the HTML header

NEEDS = "CI crosses the 25% threshold: needs >= 1366 processes per side"
NOISY = ("noisy environment: load average 9.0 on 2 cores, 3 other gemmperf point(s) ran at the same time "
         "(was regression, within the x1.30 the contention can explain)")


def _verdicts() -> pd.DataFrame:
    common = dict(test="perf/test_x.py::test_y", point="th256", metric="dur_ns", n_base=4, n_cand=4,
                  base_median_ns=1e5, cand_median_ns=1.1e5, p_value=0.5, q_value=0.5, threshold=0.25)
    return pd.DataFrame([
        {**common, "kernel": "gemm_a", "ratio": 0.702, "ci_low": 0.104, "ci_high": 4.733,
         "verdict": "inconclusive", "note": NEEDS},
        {**common, "kernel": "gemm_b", "ratio": 1.21, "ci_low": 1.12, "ci_high": 1.31, "q_value": 1e-4,
         "verdict": "inconclusive", "note": NOISY},
        {**common, "kernel": "gemm_c", "ratio": 1.0, "ci_low": 0.99, "ci_high": 1.01,
         "verdict": "unchanged", "note": ""},
    ])


def _dispatches() -> pd.DataFrame:
    rows = [{"kernel": k, "start_ns": i * 1000, "end_ns": i * 1000 + 500, "pid": 1, "point": "th256"}
            for i, k in enumerate(["gemm_a", "gemm_b", "gemm_c"] * 5)]
    df = pd.DataFrame(rows)
    df["dur_ns"] = df["end_ns"] - df["start_ns"]
    df["host"], df["source"] = "h", "rocprofv3-json"
    return finalize_dispatches(df, "synthetic")


def test_inconclusive_and_noisy_reasons_in_terminal_summary_md_and_html_header(tmp_path, request):
    v = _verdicts()
    files = write_reports(tmp_path, dispatches=_dispatches(), verdicts=v, formats=["html", "md"])
    md = files["summary.md"].read_text(encoding="utf-8")
    header = _between(files["report.html"].read_text(encoding="utf-8"), '<ul id="why">', "</ul>")
    for reason in (NEEDS, NOISY):
        assert md_text(reason) in md
        assert html.escape(reason) in header
    assert "gemm_c" not in header  # unchanged inside the band: nothing to explain
    # the terminal summary of a pytest session: the rows its points recorded
    rows = json.loads(v[v["verdict"] != "unchanged"].to_json(orient="records"))
    text = request.getfixturevalue("hl").summary_table(rows)
    assert NEEDS in text and NOISY in text and "-29.8% [-89.6, +373.3]" in text


# ---------------------------------------------------------------------------------------------
# the tools' footers say what docs/statistics.md says, word for word


def _words(text: str) -> str:
    return " ".join(text.replace("note: ", " ").split())


def _samples(tag: str, scale: float) -> pd.DataFrame:
    rng = np.random.default_rng(len(tag))
    return pd.DataFrame([{"point": "p", "kernel": k, "metric": "dur_ns", "unit": f"{tag}/{u}", "value": v}
                         for u in range(4) for k in ("k1", "k2", "k3")
                         for v in 1e4 * scale * np.exp(0.01 * rng.standard_normal(20))])


def _docs_paragraph() -> str:
    """The paragraph "What each printed number is" of docs/statistics.md, its words only."""
    doc = (ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")
    start = doc.index("**What each printed number is.**")
    return _words(doc[start:doc.index("\n\n", start)].replace("**What each printed number is.**", ""))


def test_footers_and_docs_describe_the_printed_numbers_alike(tmp_path, capsys, request):
    text = _docs_paragraph()

    _samples("b", 1.0).to_parquet(tmp_path / "b.parquet")
    _samples("c", 1.0).to_parquet(tmp_path / "c.parquet")
    assert cli_main(["compare", str(tmp_path / "b.parquet"), str(tmp_path / "c.parquet"),
                     "--out", str(tmp_path / "o"), "--no-report"]) == 0
    assert text in _words(capsys.readouterr().out)

    store = BaselineStore(tmp_path / "baselines")
    store.save(BaselineRecord(test_id="t.py::t", hw_key="hw", samples=_samples("b", 1.0)))
    assert cli_main(["baseline", "show", "t.py::t", "--baseline-dir", str(store.root)]) == 0
    shown = capsys.readouterr().out
    assert text in _words(shown)
    # the median baseline show prints is the one the footer names (over processes)
    med = per_process_medians(_samples("b", 1.0))[("p", "k1", "dur_ns")]
    line = next(x for x in shown.splitlines() if " k1 " in f" {x} ")
    assert any(abs(float(w) - med) <= 1e-6 * med for w in line.split() if re.fullmatch(r"[\d.e+]+", w))
    # and the words are one constant in the code, which the tools print
    assert _words(request.getfixturevalue("hl").PRINTED_NUMBERS) == text


# ---------------------------------------------------------------------------------------------
# gemmperf compare with its arguments swapped


def _results(root: Path) -> Path:
    (root / "perf_tests_test_x.py__test_y" / "th256").mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"status": "complete", "hardware_key": "hw"}))
    return root


def _store(root: Path) -> Path:
    rec = root / "hw" / "perf_tests_test_x.py__test_y"
    rec.mkdir(parents=True)
    (rec / "meta.json").write_text(json.dumps({"test_id": "perf_tests/test_x.py::test_y", "hw_key": "hw"}))
    return root


@pytest.mark.parametrize("cand_level", ["root", "hw", "record"])
def test_a_store_given_as_the_candidate_is_refused_with_the_corrected_command(tmp_path, capsys, cand_level):
    results, store = _results(tmp_path / "my run"), _store(tmp_path / "baselines")
    cand = {"root": store, "hw": store / "hw", "record": store / "hw" / "perf_tests_test_x.py__test_y"}[cand_level]
    out = tmp_path / "o"
    rc = cli_main(["compare", str(results), str(cand), "--out", str(out), "--threshold", "25%"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    fixed = (f"gemmperf compare {shlex.quote(str(cand))} {shlex.quote(str(results))} --out {shlex.quote(str(out))} "
             "--threshold 25%")
    assert err[0].startswith("gemmperf: error: ") and err[0].endswith(f"did you mean: {fixed}"), err[0]
    assert "results directory" in err[0] and not out.exists()


def test_a_store_as_the_only_argument_and_beside_other_candidates(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no project settings of this repository
    results, store = _results(tmp_path / "run"), _store(tmp_path / "baselines")
    other = _results(tmp_path / "run2")
    assert cli_main(["compare", str(store)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"did you mean: gemmperf compare {store} CAND" in err
    assert cli_main(["compare", str(results), str(store), str(other), "--no-report"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"did you mean: gemmperf compare {store} {results} {other} --no-report")
    # the right order is not refused (these results hold no samples: another error, no hint)
    cli_main(["compare", str(store), str(results), "--out", str(tmp_path / "o")])
    assert "did you mean" not in capsys.readouterr().err
