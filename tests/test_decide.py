"""Decide or say so: every gated point ends passed / failed / undecided / error, the same in
pytest, ``gemmperf compare`` and the reports; compare takes pytest's decision again from what
the gate recorded (row by row: verdict, change, CI, q, reason)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.gemmperf_pytester_support import gp  # noqa: F401 - the pytester fixture
from pytest_gemmperf import cli
from pytest_gemmperf.gate.outcome import ERROR, FAILED, PASSED, UNDECIDED, point_outcome, point_outcomes
from pytest_gemmperf.run import environment

pytest_plugins = ["pytester"]
# no test here reads a session's report.html / report.xlsx (conftest.py: without_session_reports)
pytestmark = pytest.mark.usefixtures("without_session_reports")

SLUG = "test_gpsweep.py__test_gpsweep"
ROW = ["point", "kernel", "metric"]
SAME = ["verdict", "ratio", "ci_low", "ci_high", "q_value", "note"]
_REAL_PROC_STAT = environment.read_proc_stat


def _rows(**cols) -> pd.DataFrame:
    n = len(next(iter(cols.values())))
    base = {"test": ["t"] * n, "point": ["p"] * n, "ratio": [1.0] * n, "ci_low": [0.9] * n,
            "ci_high": [1.1] * n, "q_value": [0.5] * n, "threshold": [0.05] * n, "note": [""] * n,
            "n_base": [4] * n, "n_cand": [4] * n}
    base.update(cols)
    return pd.DataFrame(base)


def test_point_outcome_reads_the_rows():
    assert point_outcome(_rows(kernel=["a"], metric=["dur_ns"], verdict=["unchanged"])).outcome == PASSED
    failed = point_outcome(_rows(kernel=["a", "b"], metric=["dur_ns"] * 2, verdict=["regression", "inconclusive"]))
    assert failed.outcome == FAILED and failed.rows == 1 and "1 regression(s)" in failed.reason
    crosses = dict(kernel=["a", "b"], metric=["dur_ns"] * 2, verdict=["unchanged", "inconclusive"],
                   note=["", "CI crosses the 25% threshold: needs >= 113 processes per side"],
                   ratio=[1.0, 1.634], ci_low=[0.9, 1.106], ci_high=[1.1, 2.416], q_value=[0.5, 0.002],
                   threshold=[0.25, 0.25])
    und = point_outcome(_rows(**crosses))
    assert und.outcome == UNDECIDED and und.rows == 1
    assert "b dur_ns +63.4% [+10.6, +141.6]" in und.reason
    assert und.decide == "113 processes per side (more --gemmperf-repeats on both sides)"
    # an estimate inside the threshold whose CI crosses it (a noisy kernel, every clean run of
    # hundreds of kernels has some) does not hold the point; nor does a slower-looking row the
    # screen finds unremarkable (q > 0.5), nor a faster one
    inside = dict(crosses, ratio=[1.0, 1.10], ci_low=[0.9, 0.8], ci_high=[1.1, 1.4])
    assert point_outcome(_rows(**inside)).outcome == PASSED
    assert point_outcome(_rows(**dict(crosses, q_value=[0.5, 0.9]))).outcome == PASSED
    faster = dict(crosses, ratio=[1.0, 0.6], ci_low=[0.9, 0.4], ci_high=[1.1, 0.9])
    assert point_outcome(_rows(**faster)).outcome == PASSED
    few = point_outcome(_rows(kernel=["a"], metric=["dur_ns"], verdict=["inconclusive"], q_value=[np.nan],
                              note=["too few processes (1 base, 1 cand): needs >= 2 per side"]))
    assert few.outcome == UNDECIDED and few.decide.startswith("2 processes per side")
    noisy = point_outcome(_rows(kernel=["a"], metric=["dur_ns"], verdict=["inconclusive"],
                                note=["noisy environment: 8.0 runnable threads on 2 cores (was regression)"]))
    assert noisy.outcome == UNDECIDED and noisy.decide == "a re-run on a quiet machine"
    # a context row (never gated) decides nothing
    ctx = point_outcome(_rows(kernel=["a", "a"], metric=["dur_ns", "dispatch_count"],
                              verdict=["unchanged", "inconclusive"]))
    assert ctx.outcome == PASSED
    assert point_outcome(_rows(kernel=[], metric=[], verdict=[])).outcome == ERROR
    # one outcome per point of a table
    two = pd.concat([_rows(kernel=["a"], metric=["dur_ns"], verdict=["inconclusive"], note=["(was regression)"]),
                     _rows(kernel=["a"], metric=["dur_ns"], verdict=["unchanged"], point=["q"])])
    assert [(k, o.outcome) for k, o in point_outcomes(two)] == [(("t", "p"), UNDECIDED), (("t", "q"), PASSED)]


def _busy_host(monkeypatch) -> None:
    """A busy host as /proc/stat would show it: 8 runnable threads besides the sampler and
    other processes' CPU time (the contention double of tests/test_plugin.py)."""
    clock = {"busy": 0.0}

    def busy(*a, **k):
        clock["busy"] += 50.0
        return {"busy": clock["busy"], "steal": 0.0, "total": clock["busy"] * 2, "procs_running": 9.0}

    monkeypatch.setattr(environment, "read_proc_stat", busy)


def _compare(path: Path, results: str, *extra: str, out: str) -> tuple[int, pd.DataFrame]:
    cwd = os.getcwd()
    os.chdir(path)
    try:
        rc = cli.main(["compare", "base", results, "--out", out, "--no-report", *extra])
    finally:
        os.chdir(cwd)
    return rc, pd.read_csv(path / out / "verdicts.csv")


def _same_rows(path: Path, results: str, compared: pd.DataFrame) -> None:
    """compare's verdicts equal pytest's on every row: verdict, change, CI, q and reason."""
    gated = pd.read_csv(path / results / SLUG / "verdicts.csv")
    a = gated.set_index(ROW).sort_index()[SAME]
    b = compared.set_index(ROW).sort_index()[SAME]
    assert list(a.index) == list(b.index)
    for col in SAME:
        x, y = a[col], b[col]
        if col == "note" or col == "verdict":
            diff = x.fillna("").astype(str) != y.fillna("").astype(str)
        else:
            diff = ~((x == y) | (x.isna() & y.isna()))
        assert not diff.any(), f"{col} differs:\n{pd.concat([x[diff], y[diff]], axis=1)}"


def test_disturbed_point_is_undecided_everywhere_and_compare_agrees(gp, monkeypatch):  # noqa: F811
    gp("-k", "ch28", results="rec").assert_outcomes(passed=1, deselected=1)
    _busy_host(monkeypatch)
    monkeypatch.setenv("FAKE_SCALE", "1.4")
    common = ("-k", "ch28", "--gemmperf-confirm", "1", "--gemmperf-quiet-wait", "0.2")
    # --gemmperf-learn-variance: the store's variance history grows after the gate read it;
    # compare must judge with the history the gate used
    out = gp(*common, "-ra", "--junitxml=j.xml", "--gemmperf-learn-variance", results="busy")
    # skip (the default): reported skipped with the reason and what would decide it; exit 0
    out.assert_outcomes(skipped=1, deselected=1)
    assert out.ret == 0
    text = out.stdout.str()
    assert "SKIPPED" in text and "gemmperf: undecided: " in text and "to decide: a re-run on a quiet machine" in text
    out.stdout.fnmatch_lines(["gemmperf ■ test_gpsweep[[]ch28-th256[]] skipped in * (undecided; compared: *)",
                              "points: 1 undecided", "undecided: *test_gpsweep[[]ch28-th256[]]: *(test skipped)"])
    pj = json.loads((gp.path / "busy" / SLUG / "ch28-th256" / "point.json").read_text())
    assert pj["outcome"]["outcome"] == UNDECIDED and pj["gate"]["first"]["disturbance"]["disturbed"]
    # the disturbed point's confirmation round waited for a quiet machine, within its budget
    assert pj["gate"]["rounds"][0]["kind"] == "confirm" and 0.1 <= pj["gate"]["rounds"][0]["waited_s"] < 5
    assert "still disturbed after" in text
    out.stdout.fnmatch_lines(["variance of 1 point run(s) added to the baselines' history"])
    assert pj["gate"]["baseline"]["history_runs"] == []
    junit = (gp.path / "j.xml").read_text()
    assert 'name="gemmperf_outcome"' in junit and "undecided" in junit
    # compare judges the run as the gate did, row by row, and exits 4 (undecided, skip)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)
    rc, v = _compare(gp.path, "busy", out="c1")
    assert rc == 4
    _same_rows(gp.path, "busy", v)
    assert _compare(gp.path, "busy", "--undecided", "fail", out="c2")[0] == 1
    assert _compare(gp.path, "busy", "--undecided", "pass", out="c3")[0] == 0
    # fail: the test fails with the reason (exit 1); pass: accepted (exit 0)
    _busy_host(monkeypatch)
    out = gp(*common, "--gemmperf-undecided", "fail", results="busy_fail")
    out.assert_outcomes(failed=1, deselected=1)
    assert out.ret == 1
    out.stdout.fnmatch_lines(["*undecided*noisy environment*[[]--gemmperf-undecided fail[]]*"])
    out = gp(*common, "--gemmperf-undecided", "pass", results="busy_pass")
    out.assert_outcomes(passed=1, deselected=1)
    assert out.ret == 0
    out.stdout.fnmatch_lines(["undecided: *(accepted: --gemmperf-undecided pass)"])


def _record_metas(store: Path) -> list[dict]:
    """The metadata of each record of a store (``HW/TEST/meta.json``)."""
    return [json.loads(m.read_text())["metadata"] for m in sorted(store.glob("*/*/meta.json"))]


def test_a_baseline_recorded_on_a_busy_machine_is_allowed_for_everywhere(gp, monkeypatch):  # noqa: F811
    """A slow baseline hides a slower candidate: the recording run's contention is kept with the
    record, and a quiet comparison whose CI could reach beyond the threshold once that is
    allowed for is undecided in pytest and in `gemmperf compare` (replayed and compared anew);
    re-recorded on a quiet machine, the same comparison passes."""
    _busy_host(monkeypatch)
    rec = gp("-k", "ch28", results="rec")
    rec.assert_outcomes(passed=1, deselected=1)
    kept = [m["points"]["ch28-th256"]["disturbance"] for m in _record_metas(gp.path / "base")]
    assert len(kept) == 1 and kept[0]["disturbed"] and kept[0]["factor"] > 1.25
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)  # quiet from here
    out = gp("-k", "ch28", "--gemmperf-confirm", "0", "-ra", results="quiet")
    out.assert_outcomes(skipped=1, deselected=1)
    out.stdout.fnmatch_lines(["*undecided*disturbed baseline: recorded while*",
                              "*to decide: the baseline re-recorded on a quiet machine*"])
    pj = json.loads((gp.path / "quiet" / SLUG / "ch28-th256" / "point.json").read_text())
    gated_base = pj["gate"]["baseline"]["disturbance"]
    assert pj["outcome"]["outcome"] == UNDECIDED and gated_base["reasons"] == kept[0]["reasons"]
    assert gated_base["factor"] == pytest.approx(kept[0]["factor"], rel=1e-12)
    assert not pj["gate"]["first"]["disturbance"]["disturbed"]
    rc, v = _compare(gp.path, "quiet", out="c1")
    assert rc == 4
    _same_rows(gp.path, "quiet", v)
    # compared anew (another rule than the gate's): the store's record says the same
    rc, v = _compare(gp.path, "quiet", "--threshold", "0.05", out="c2")
    assert rc == 4 and v["note"].fillna("").str.contains("disturbed baseline").any()
    # a baseline refreshed from the busy run keeps what it was recorded under
    assert cli.main(["baseline", "refresh", "--from", str(gp.path / "rec"), "--baseline-dir", str(gp.path / "ref")]) == 0
    assert [m["points"]["ch28-th256"]["disturbance"]["disturbed"] for m in _record_metas(gp.path / "ref")] == [True]
    # re-recorded on a quiet machine: nothing to allow for, the point is decided
    gp("-k", "ch28", "--gemmperf-update-baselines", results="rerec").assert_outcomes(passed=1, deselected=1)
    assert [m["points"]["ch28-th256"].get("disturbance") for m in _record_metas(gp.path / "base")] == [None]
    gp("-k", "ch28", "--gemmperf-confirm", "0", results="after").assert_outcomes(passed=1, deselected=1)


def test_confirmation_rounds_and_compare_agree_on_every_row(gp, capsys):  # noqa: F811
    gp("-k", "ch28", results="rec").assert_outcomes(passed=1, deselected=1)
    os.environ["FAKE_SCALE"] = "1.4"  # a real slowdown of every process: confirmed by a re-run
    try:
        out = gp("-k", "ch28", "--gemmperf-confirm", "2", results="slow")
    finally:
        del os.environ["FAKE_SCALE"]
    out.assert_outcomes(failed=1, deselected=1)
    out.stdout.fnmatch_lines(["outcome: failed: * regression(s), e.g. *", "points: 1 failed",
                              "failed: *test_gpsweep[[]ch28-th256[]]: * regression(s)*"])
    pj = json.loads((gp.path / "slow" / SLUG / "ch28-th256" / "point.json").read_text())
    assert pj["outcome"]["outcome"] == FAILED and len(pj["gate"]["rounds"]) >= 1
    assert pj["gate"]["rounds"][0]["runs"] == [2, 3] and pj["gate"]["first"]["runs"] == [0, 1]
    rc, v = _compare(gp.path, "slow", out="c")
    assert rc == 1
    _same_rows(gp.path, "slow", v)
    # the same run compared as one look (what compare did before: no rounds) differs
    doc = dict(pj)
    doc.pop("gate")
    (gp.path / "slow" / SLUG / "ch28-th256" / "point.json").write_text(json.dumps(doc))
    capsys.readouterr()
    rc, one_look = _compare(gp.path, "slow", out="c_old")
    err = capsys.readouterr().err
    assert "ch28-th256]: gated without a record of the gate's evidence" in err and "may differ" in err
    gated = pd.read_csv(gp.path / "slow" / SLUG / "verdicts.csv").set_index(ROW).sort_index()
    assert not gated["note"].equals(one_look.set_index(ROW).sort_index()["note"])


BURNER = "import time\nend = time.time() + 120\nwhile time.time() < end:\n    pass\n"


@pytest.fixture
def burners():
    """3 CPU-bound processes per core, started on demand; always stopped."""
    procs: list[subprocess.Popen] = []

    def start() -> None:
        for _ in range(3 * max(1, len(os.sched_getaffinity(0)))):
            procs.append(subprocess.Popen([sys.executable, "-c", BURNER]))

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_a_3x_slower_workload_on_a_busy_machine_is_never_a_plain_pass(gp, monkeypatch, burners):  # noqa: F811
    """Measured contention (real burner processes, /proc/stat read for real) and a workload
    whose timings do not depend on the host's load: 3x slower is failed or undecided; the
    unchanged workload never gets a regression verdict."""
    gp("-k", "ch28", results="rec").assert_outcomes(passed=1, deselected=1)
    burners()
    monkeypatch.setattr(environment, "read_proc_stat", _REAL_PROC_STAT)
    args = ("-k", "ch28", "--gemmperf-confirm", "1", "--gemmperf-quiet-wait", "0.5")
    monkeypatch.setenv("FAKE_SCALE", "3")
    got = gp(*args, results="slow").parseoutcomes()
    assert got.get("passed", 0) == 0 and got.get("failed", 0) + got.get("skipped", 0) == 1
    pj = json.loads((gp.path / "slow" / SLUG / "ch28-th256" / "point.json").read_text())
    assert pj["environment"]["samples"] >= 1  # measured, not a double
    assert pj["outcome"]["outcome"] in (FAILED, UNDECIDED)
    monkeypatch.delenv("FAKE_SCALE")
    got = gp(*args, results="same").parseoutcomes()
    assert got.get("failed", 0) == 0
    v = pd.read_csv(gp.path / "same" / SLUG / "verdicts.csv")
    assert not (v["verdict"] == "regression").any()


def test_report_banner_and_summary_state_the_outcome(tmp_path):
    from pytest_gemmperf.report.data import overall_status, point_outcome_counts
    from pytest_gemmperf.report.tables import STATUS_TEXT

    v = pd.concat([_rows(kernel=["a"], metric=["dur_ns"], verdict=["inconclusive"], q_value=[0.01], ratio=[1.3],
                         ci_low=[1.01], ci_high=[1.6]),
                   _rows(kernel=["a"], metric=["dur_ns"], verdict=["unchanged"], point=["q"], q_value=[0.5])])
    assert overall_status(v) == UNDECIDED and STATUS_TEXT[UNDECIDED] == "UNDECIDED"
    assert point_outcome_counts(v) == {PASSED: 1, UNDECIDED: 1}
    # a results directory's failed point is an error in the banner's counts and status
    from types import SimpleNamespace

    from pytest_gemmperf.report import failed_points
    from pytest_gemmperf.report.data import ReportData

    for name, status in (("ok", "complete"), ("bad", "failed")):
        (tmp_path / "t" / name).mkdir(parents=True)
        (tmp_path / "t" / name / "point.json").write_text(json.dumps({"test_id": "t.py::t", "point": name,
                                                                      "status": status}))
    errors = failed_points(tmp_path)
    assert errors == ["t.py::t[bad]"]
    fake = SimpleNamespace(verdicts=v, meta={"point_errors": errors})
    counts = ReportData.outcome_counts.fget(fake)
    assert counts == {PASSED: 1, UNDECIDED: 1, ERROR: 1}
    fake.outcome_counts = counts
    assert ReportData.status.fget(fake) == ERROR and STATUS_TEXT[ERROR] == "ERROR"


def test_exit_status_table_is_the_one_the_command_uses():
    """docs/reference.md's "Exit status" table states compare's undecided exit per setting as
    compare_impl returns it."""
    from pytest_gemmperf.commands.compare_impl import EXIT_UNDECIDED

    doc = (Path(__file__).resolve().parent.parent / "docs" / "reference.md").read_text()
    section = doc.split("## Exit status", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if line.startswith("| `undecided`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    pytest_cell, gemmperf_cell = cells[2], cells[3]
    assert pytest_cell.startswith("0, the item SKIPPED") and "`--gemmperf-undecided fail`: 1" in pytest_cell
    assert "`pass`: 0" in pytest_cell
    assert gemmperf_cell.startswith(f"{EXIT_UNDECIDED['skip']} (`compare --undecided skip`")
    assert f"`--undecided fail`: {EXIT_UNDECIDED['fail']}" in gemmperf_cell
    assert f"`pass`: {EXIT_UNDECIDED['pass']}" in gemmperf_cell


def _samples(rng: np.random.Generator, units: range, factor: float, sd_unit: float = 0.03) -> pd.DataFrame:
    """60 dispatches of one kernel per process; each process a lognormal factor of its own."""
    rows = []
    for u in units:
        f = factor * np.exp(rng.normal(0, sd_unit))
        rows.append(pd.DataFrame({"point": "p", "kernel": "gemm", "metric": "dur_ns", "unit": f"h/{u}/0/{u}",
                                  "value": 1e5 * f * np.exp(rng.normal(0, 0.01, 60))}))
    return pd.concat(rows, ignore_index=True)


def test_decide_plan_reads_the_processes_the_cis_need():
    from pytest_gemmperf.gate.outcome import candidate_processes_for, decide_plan, processes_needed

    lean = _rows(kernel=["a"], metric=["dur_ns"], verdict=["inconclusive"], ratio=[1.08], ci_low=[1.01],
                 ci_high=[1.16], q_value=[0.02], n_base=[12], n_cand=[4],
                 note=["CI crosses the 5% threshold: needs >= 10 processes per side"])
    assert processes_needed(lean) == (10, 12)
    assert candidate_processes_for(10, 12) == 9  # 1/12 + 1/9 <= 2/10
    assert candidate_processes_for(10, 4) is None  # the baseline alone is too small
    plan = decide_plan(lean, units=4, runs_done=2, max_runs=16)
    assert (plan.need, plan.target, plan.stopped) == (10, 9, "")
    assert decide_plan(lean, units=4, runs_done=2, max_runs=3).target is None  # 5 more runs needed
    small = decide_plan(lean.assign(n_base=[4]), units=4, runs_done=2, max_runs=16)
    assert small.target is None and "re-record the baseline with 10 processes" in small.stopped
    # a disturbed or transient point: more processes in the same storm would not decide it
    assert decide_plan(lean.assign(note=["noisy environment: x (was regression)"]), 4, 2, 16) is None


@pytest.mark.parametrize("later, expected", [(1.0, PASSED), (1.12, FAILED)])
def test_decide_rounds_settle_an_undecided_point(later, expected):
    """An undecided first look (CI across the threshold) with the processes the plan asks for:
    the same workload unchanged is then passed, a real slowdown failed (reproduced by the
    re-runs alone); what was undecided on 2 processes is decided on the target."""
    from pytest_gemmperf.gate.compare import GateConfig, compare
    from pytest_gemmperf.gate.confirm import DECIDE, ConfirmConfig, PointJudge
    from pytest_gemmperf.gate.outcome import decide_plan

    rng = np.random.default_rng(11)
    base = _samples(rng, range(12), 1.0)
    first = _samples(rng, range(100, 102), 1.07, sd_unit=0.05)
    judge = PointJudge(lambda c, g: compare(base, c, g), first, GateConfig(), ConfirmConfig(rounds=0))
    assert point_outcome(judge.verdicts).outcome == UNDECIDED
    plan = decide_plan(judge.verdicts, units=2, runs_done=2, max_runs=40)
    assert plan is not None and plan.target is not None
    units, n = 2, 0
    while units < plan.target and point_outcome(judge.verdicts).outcome == UNDECIDED:
        judge.add_round(_samples(rng, range(200 + 2 * n, 202 + 2 * n), later), kind=DECIDE)
        units, n = units + 2, n + 1
    assert point_outcome(judge.verdicts).outcome == expected, judge.verdicts[["verdict", "ratio", "note"]]


def test_wait_for_quiet_stops_when_the_machine_is_quiet():
    from pytest_gemmperf.run.environment import Disturbance, wait_for_quiet

    seen, heard = [], []

    def measure(seconds):
        seen.append(seconds)
        return {"busy": len(seen) < 3}

    def judge(ev):
        return Disturbance(True, ("busy",), 2.0) if ev["busy"] else Disturbance(False)

    waited, last = wait_for_quiet(10.0, judge, probe_s=0.01, measure=measure,
                                  on_wait=lambda w, d: heard.append(d.text))
    assert not last.disturbed and len(seen) == 3 and heard == ["noisy environment: busy"] * 2
    # a machine that stays busy: the budget ends the wait, the last assessment says why
    waited, last = wait_for_quiet(0.05, lambda ev: Disturbance(True, ("busy",), 2.0), probe_s=0.01,
                                  measure=lambda s: {})
    assert last.disturbed and 0.04 <= waited < 1.0
