"""report.html's before/after panels: the per-process evidence behind each notable verdict.

Each row that is not ``unchanged`` gets a panel beside the forest plot. The panel has one dot
per process on each side (baseline and candidate) over a box of those processes. When a side
is empty (a ``new`` or ``missing`` row) the panel says which side. ``gemmperf compare`` and the
pytest session both hand the compared samples to the report.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gemmperf_pytester_support import gp  # noqa: F401 - the pytester fixture
from test_report_html import NASTY, XSS, DevTools, _chromium, _sweep
from pytest_gemmperf.gate.compare import compare
from pytest_gemmperf.gate.samples import gate_samples
from pytest_gemmperf.report import write_reports
from pytest_gemmperf.traces.schema import finalize_dispatches

pytest_plugins = ["pytester"]

POINTS = ("ch28-th256", "ch56-th256")
#: processes per point in _sweep: 2 ranks x 3 runs
PROCESSES = 6
GEMM = "Cijk_Ailk_Bljk_HHS_BH_MT128x128x64_MI32x32x8"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"


class _Panels(HTMLParser):
    """Every ``figure.before-after``: its data attributes, dot counts per side and text."""

    def __init__(self) -> None:
        super().__init__()
        self.panels: list[dict] = []
        self._cur: dict | None = None
        self._depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure" and "before-after" in (a.get("class") or "").split():
            self._cur = {k[5:]: v for k, v in a.items() if k.startswith("data-")}
            self._cur.update(base=0, cand=0, text=[])
            self._depth = 0
            self.panels.append(self._cur)
        if self._cur is None:
            return
        if tag == "figure":
            self._depth += 1
        if tag == "circle":
            cls = (a.get("class") or "").split()
            if "dot" in cls:
                self._cur["base" if "base" in cls else "cand"] += 1

    def handle_endtag(self, tag):
        if self._cur is not None and tag == "figure":
            self._depth -= 1
            if self._depth == 0:
                self._cur["text"] = " ".join(self._cur["text"])
                self._cur = None

    def handle_data(self, data):
        if self._cur is not None:
            self._cur["text"].append(data)


def panels_of(html: str) -> list[dict]:
    p = _Panels()
    p.feed(html)
    return p.panels


def _report(tmp_path: Path, base: pd.DataFrame, cand: pd.DataFrame, **kw) -> tuple[str, pd.DataFrame]:
    from pytest_gemmperf.report import ComparedSamples

    sb, sc = gate_samples(base), gate_samples(cand)
    v = compare(sb, sc, test="t.py::test_x")
    files = write_reports(tmp_path, dispatches=[base, cand], labels=["base", "cand"], verdicts=v,
                          compared=[ComparedSamples("t.py::test_x", sb, sc)], formats=["html"], **kw)
    return files["report.html"].read_text(encoding="utf-8"), v


@pytest.fixture(scope="module")
def slow_pair():
    return _sweep(0, points=POINTS), _sweep(1, slow_kernel=NASTY, factor=1.3, points=POINTS)


def test_regression_row_has_a_panel_with_every_process_unchanged_row_none(tmp_path, slow_pair):
    base, cand = slow_pair
    html, v = _report(tmp_path, base, cand)
    panels = panels_of(html)
    reg = [p for p in panels if p["kernel"] == NASTY and p["metric"] == "dur_ns"]
    assert {p["point"] for p in reg} == set(POINTS)
    for p in reg:
        assert p["verdict"] == "regression"
        assert (p["base"], p["cand"]) == (PROCESSES, PROCESSES)
    unchanged = v[v["verdict"] == "unchanged"]
    assert GEMM in set(unchanged["kernel"]) and len(unchanged) > 0
    drawn = {(p["point"], p["kernel"], p["metric"]) for p in panels}
    assert not drawn & set(zip(unchanged["point"], unchanged["kernel"], unchanged["metric"]))
    assert all(p["verdict"] != "unchanged" for p in panels)
    # worst first: the regressions lead
    assert panels[0]["verdict"] == "regression"


def test_dots_are_the_gates_per_process_medians(slow_pair):
    """The median of a side's dots is the verdict table's base / cand median."""
    from pytest_gemmperf.report.before_after import ComparedSamples, before_after

    base, cand = slow_pair
    sb, sc = gate_samples(base), gate_samples(cand)
    v = compare(sb, sc, test="t")
    ba = before_after(v, [ComparedSamples("t", sb, sc)])
    assert ba.n_notable == int((v["verdict"] != "unchanged").sum()) and ba.panels
    for p in ba.panels:
        row = p.row
        if row["verdict"] in ("new", "missing"):
            continue
        assert len(p.base) == row["n_base"] and len(p.cand) == row["n_cand"]
        assert np.median(p.base["value"]) == pytest.approx(row["base_median_ns"], rel=1e-9)
        assert np.median(p.cand["value"]) == pytest.approx(row["cand_median_ns"], rel=1e-9)


def test_panels_are_capped_worst_first_and_the_rest_listed(slow_pair):
    from pytest_gemmperf.report.before_after import ComparedSamples, before_after

    base, cand = slow_pair
    sb, sc = gate_samples(base), gate_samples(cand)
    v = compare(sb, sc, test="t")
    ba = before_after(v, [ComparedSamples("t", sb, sc)], max_panels=2)
    assert len(ba.panels) == 2 and len(ba.rest) == ba.n_notable - 2
    ratios = [p.row["ratio"] for p in ba.panels if p.row["verdict"] == "regression"]
    regs = v[v["verdict"] == "regression"]["ratio"].astype(float)
    assert max(ratios) == pytest.approx(float(np.exp(np.abs(np.log(regs)).max())))


def _without(d: pd.DataFrame, kernel: str) -> pd.DataFrame:
    keep = d[d["kernel"].astype(str) != kernel].drop(columns=["kernel_short", "category"], errors="ignore")
    return finalize_dispatches(keep.reset_index(drop=True), "synthetic")


def test_new_and_missing_rows_say_which_side_is_empty(tmp_path):
    full = _sweep(0, points=POINTS[:1])
    less = _without(_sweep(1, points=POINTS[:1]), XSS)
    html, v = _report(tmp_path / "missing", full, less)
    missing = [p for p in panels_of(html) if p["kernel"] == XSS and p["metric"] == "dur_ns"]
    assert len(missing) == 1 and missing[0]["verdict"] == "missing"
    assert (missing[0]["base"], missing[0]["cand"]) == (PROCESSES, 0)
    assert "missing from the candidate" in missing[0]["text"]
    assert "<script>alert(1)</script>" not in html  # the kernel name is text, not markup

    html, v = _report(tmp_path / "new", less, full)
    new = [p for p in panels_of(html) if p["kernel"] == XSS and p["metric"] == "dur_ns"]
    assert len(new) == 1 and new[0]["verdict"] == "new"
    assert (new[0]["base"], new[0]["cand"]) == (0, PROCESSES)
    assert "no baseline process has it" in new[0]["text"]


def test_a_swapped_kernel_draws_the_new_names_processes(tmp_path):
    """A kernel swap is one row under the baseline's name: the candidate's dots are the new
    kernel's processes."""
    base = _sweep(0, points=POINTS[:1])
    cand = _sweep(1, slow_kernel=FILL, factor=1.4, points=POINTS[:1])
    renamed = cand.assign(kernel=cand["kernel"].astype(str).str.replace("FillFunctor", "ZeroFunctor"))
    cand = finalize_dispatches(renamed.drop(columns=["kernel_short", "category"]), "synthetic")
    html, v = _report(tmp_path, base, cand)
    row = v[(v["kernel"] == FILL) & (v["metric"] == "dur_ns")]
    assert len(row) == 1 and "ZeroFunctor" in str(row["swapped_to"].iloc[0])
    assert row["verdict"].iloc[0] == "regression"
    swap = [p for p in panels_of(html) if p["kernel"] == FILL and p["metric"] == "dur_ns"]
    assert len(swap) == 1 and (swap[0]["base"], swap[0]["cand"]) == (PROCESSES, PROCESSES)


def test_report_without_compared_samples_says_so(tmp_path, slow_pair):
    base, cand = slow_pair
    v = compare(gate_samples(base), gate_samples(cand), test="t")
    html = write_reports(tmp_path, dispatches=cand, verdicts=v, formats=["html"])["report.html"] \
        .read_text(encoding="utf-8")
    assert "did not reach this report" in html
    panels = panels_of(html)
    assert panels and all(p["base"] == 0 and p["cand"] == 0 for p in panels)


# ---------------------------------------------------------------------------------------------
# both callers hand the samples over


def test_cli_compare_report_has_the_panels(tmp_path, capsys):
    from pytest_gemmperf.cli import main

    dirs = []
    for name, (seed, factor) in {"base": (0, 1.0), "cand": (1, 1.3)}.items():
        d = tmp_path / name
        d.mkdir()
        _sweep(seed, slow_kernel=NASTY, factor=factor, points=POINTS, n_per_kernel=30) \
            .to_parquet(d / "dispatches.parquet")
        dirs.append(str(d))
    out = tmp_path / "out"
    assert main(["compare", *dirs, "--out", str(out)]) == 1
    capsys.readouterr()
    v = pd.read_csv(out / "verdicts.csv", keep_default_na=False)
    panels = panels_of((out / "report.html").read_text(encoding="utf-8"))
    reg = [p for p in panels if p["kernel"] == NASTY and p["metric"] == "dur_ns"]
    assert len(reg) == len(POINTS) and all((p["base"], p["cand"]) == (PROCESSES, PROCESSES) for p in reg)
    # no panel for an unchanged row (the point gates aten::mm: its category total and overlap rows)
    verdict_of = {(r.point, r.kernel, r.metric): r.verdict for r in v.itertuples()}
    drawn_keys = {(p["point"], p["kernel"], p["metric"]) for p in panels}
    assert drawn_keys and all(verdict_of.get(k) != "unchanged" for k in drawn_keys)


def test_pytest_session_report_has_the_panels(gp, monkeypatch):  # noqa: F811 - the fixture
    out = gp(results="res1")
    out.assert_outcomes(passed=2)
    monkeypatch.setenv("FAKE_SCALE", "1.4")
    out = gp("--gemmperf-warn-only", "--gemmperf-report-dir=rep", results="res2")
    out.assert_outcomes(passed=2)
    res = gp.path / "res2"
    slug = next(p for p in res.iterdir() if p.is_dir())
    for point in ("ch28-th256", "ch56-th256"):
        assert (slug / point / "baseline_samples.parquet").is_file()
    v = pd.read_csv(slug / "verdicts.csv", keep_default_na=False)
    reg = v[(v["metric"] == "dur_ns") & (v["verdict"] == "regression")]
    assert set(reg["point"]) == {"ch28-th256", "ch56-th256"}
    panels = panels_of((gp.path / "rep" / "report.html").read_text(encoding="utf-8"))
    drawn = [p for p in panels if p["kernel"] == "aten::mm" and p["metric"] == "dur_ns"]
    assert {p["point"] for p in drawn} == {"ch28-th256", "ch56-th256"}
    # 2 repeats x 2 ranks a side, and the candidate's confirmation re-runs: as the gate counted
    for p in drawn:
        row = reg[(reg["point"] == p["point"]) & (reg["kernel"] == "aten::mm")].iloc[0]
        assert (p["base"], p["cand"]) == (row["n_base"], row["n_cand"]), (p, row)
        assert p["base"] == 4 and p["cand"] >= 4
    # no panel for an unchanged row (the point gates aten::mm: its category total and overlap rows)
    verdict_of = {(r.point, r.kernel, r.metric): r.verdict for r in v.itertuples()}
    drawn_keys = {(p["point"], p["kernel"], p["metric"]) for p in panels}
    assert drawn_keys and all(verdict_of.get(k) != "unchanged" for k in drawn_keys)


@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (Debian package 'chromium'; "
                                                "installed by .ci/run)")
def test_panels_render_in_headless_chromium(tmp_path, slow_pair):
    base, cand = slow_pair
    _report(tmp_path / "report", base, cand)
    browser = DevTools(_chromium(), tmp_path / "profile")
    try:
        browser.open((tmp_path / "report" / "report.html").resolve().as_uri())
        figs = ("Array.from(document.querySelectorAll('#before-after figure.before-after'))"
                f".filter(f => f.dataset.kernel === {json.dumps(NASTY)})")
        assert browser.evaluate(f"{figs}.length") == len(POINTS)
        first = browser.evaluate(f"(() => {{ const f = {figs}[0]; const r = f.querySelector('svg')"
                                 ".getBoundingClientRect(); return {verdict: f.dataset.verdict, "
                                 "kernel: f.dataset.kernel, w: r.width, h: r.height, "
                                 "base: f.querySelectorAll('circle.dot.base').length, "
                                 "cand: f.querySelectorAll('circle.dot.cand').length}; })()")
        assert first["verdict"] == "regression" and first["w"] > 300 and first["h"] > 80
        assert (first["base"], first["cand"]) == (PROCESSES, PROCESSES)
        # each dot names its process on hover
        tips = browser.evaluate(f"Array.from({figs}[0].querySelectorAll('circle.dot title')).map(t => t.textContent)")
        assert len(tips) == 2 * PROCESSES and all(" process " in t for t in tips)
        assert browser.errors() == []
    finally:
        browser.close()


def test_panels_follow_the_headline_tables_order():
    """Within a verdict the tables list the largest ratio first; the panels once ordered by
    |log ratio|, so a 0.5x improvement came before the 0.9x one the table lists first."""
    from pytest_gemmperf.gate.headline import format_verdict_table, notable
    from pytest_gemmperf.report.before_after import notable_rows

    rows = [("k_reg_small", "regression", 1.1), ("k_imp_half", "improvement", 0.5),
            ("k_imp_slight", "improvement", 0.9), ("k_reg_big", "regression", 1.6),
            ("k_new", "new", float("nan")), ("k_same", "unchanged", 1.0),
            ("k_inconclusive", "inconclusive", 0.95)]
    v = pd.DataFrame({"test": "t", "point": "p", "kernel": [r[0] for r in rows], "metric": "dur_ns",
                      "verdict": [r[1] for r in rows], "ratio": [r[2] for r in rows],
                      "ci_low": [r[2] * 0.98 for r in rows], "ci_high": [r[2] * 1.02 for r in rows]})
    panels = [r["kernel"] for r in notable_rows(v)]
    assert panels == notable(v)["kernel"].tolist()
    table = format_verdict_table(v, verdicts=tuple(v["verdict"].unique()), footnote=False)
    assert sorted(panels, key=table.index) == panels
    assert panels.index("k_imp_slight") < panels.index("k_imp_half")
