"""benchmarks/example_gate.py: how it classifies a gated run, and the README's one edit it makes."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("example_gate", REPO / "benchmarks" / "example_gate.py")
eg = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("example_gate", eg)  # its dataclasses look their module up
_spec.loader.exec_module(eg)


@pytest.mark.parametrize("rc, points, tests, outcome, plain", [
    (1, {"failed": 1, "undecided": 1}, {"failed": 1, "passed": 1}, "failed", False),
    (0, {"undecided": 1, "passed": 1}, {"passed": 2}, "undecided", True),  # accepted: a plain pass
    (0, {"undecided": 1, "passed": 1}, {"skipped": 1, "passed": 1}, "undecided", False),
    (0, {"passed": 2}, {"passed": 2}, "passed", True),
    (0, {"error": 1, "undecided": 1}, {"failed": 1, "passed": 1}, "error", False),
    (0, {}, {"passed": 2}, "error", True),  # no point.json: nothing was gated
    (2, {"passed": 2}, {"passed": 2}, "error", False),
])
def test_a_run_is_classified_by_the_gates_outcomes_and_pytests_status(rc, points, tests, outcome, plain):
    r = eg.RunResult("aa", rc, 1.0, Counter(), Counter(tests), Counter(points))
    assert r.outcome == outcome and r.plain_pass is plain


def test_the_counts_come_from_verdicts_csv_point_json_and_junit(tmp_path):
    d = tmp_path / "run" / "t"
    d.mkdir(parents=True)
    (d / "verdicts.csv").write_text("test,verdict,kernel\nt,regression,a\nt,unchanged,b\nt,unchanged,c\n")
    assert eg.verdict_counts(tmp_path / "run") == Counter({"unchanged": 2, "regression": 1})
    for name, outcome in (("p1", {"outcome": "failed"}), ("p2", {"outcome": "passed"}), ("p3", None)):
        (d / name).mkdir()
        (d / name / "point.json").write_text(json.dumps({"outcome": outcome}))
    assert eg.point_outcomes(tmp_path / "run") == Counter({"failed": 1, "passed": 1, "error": 1})
    (tmp_path / "j.xml").write_text('<testsuites><testsuite><testcase name="a"/><testcase name="b"><failure/>'
                                    '</testcase><testcase name="c"><skipped/></testcase></testsuite></testsuites>')
    assert eg.junit_counts(tmp_path / "j.xml") == Counter({"passed": 1, "failed": 1, "skipped": 1})
    assert eg.junit_counts(tmp_path / "none.xml") == Counter()


def test_the_edit_is_the_readmes_and_is_undone(tmp_path):
    eg.copy_suite(tmp_path)
    test_file = tmp_path / eg.TEST_FILE
    before = test_file.read_text()
    assert eg.SHAPE_BEFORE in before  # the suite still holds the shape the README names
    readme = (REPO / "README.md").read_text()
    assert f"`{eg.SHAPE_BEFORE}` to `{eg.SHAPE_AFTER}`" in readme
    eg.set_heavy(tmp_path, True)
    after = test_file.read_text()
    assert eg.SHAPE_AFTER in after and after.count(eg.SHAPE_AFTER) == 1
    eg.set_heavy(tmp_path, False)
    assert test_file.read_text() == before


def test_the_baselines_contention_is_read_from_the_store(tmp_path):
    store = tmp_path / "baselines"
    assert eg.baseline_contention(store) == "none"  # no store yet
    rec = store / "cpu-x" / "t.py__t"
    rec.mkdir(parents=True)
    points = {"th2": {"disturbance": {"disturbed": True, "reasons": ["3.1 runnable threads on 2 cores"],
                                      "factor": 1.55}},
              "th1": {"duration_s": 3.0}}
    (rec / "meta.json").write_text(json.dumps({"metadata": {"points": points}}))
    assert eg.baseline_contention(store) == "th2 x1.55 (3.1 runnable threads on 2 cores)"
    del points["th2"]["disturbance"]
    (rec / "meta.json").write_text(json.dumps({"metadata": {"points": points}}))
    assert eg.baseline_contention(store) == "none"
