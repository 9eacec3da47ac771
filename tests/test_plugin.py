"""The pytest plugin end to end, with pytester and a fast stand-in workload that writes small
CPU Kineto traces (tests/fixtures/gemmperf_plugin/fake_kineto_workload.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from pytest_gemmperf.run import backend as be
from pytest_gemmperf.run import environment

pytest_plugins = ["pytester"]
# no test here reads report.html / report.xlsx (conftest.py: without_session_reports)
pytestmark = pytest.mark.usefixtures("without_session_reports")

# the modules the inner sessions use are imported once there (pytester drops them afterwards)
from gemmperf_pytester_support import FAKE, PLUGIN_ARGS, REPO  # noqa: E402,F401 - FAKE: imported by other tests

SLUG = "test_gpsweep.py__test_gpsweep"
TEST_ID = "test_gpsweep.py::test_gpsweep"

TEST_FILE = f"""
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28, 56], threads=[256], kernels=[r"^aten::mm$"])
def test_gpsweep(gemmperf):
    result = gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "40"], repeats=2)
    assert set(result.gated_dispatches["kernel"].astype(str)) == {{"aten::mm"}}
    gemmperf.assert_no_regression(result)
"""


@pytest.fixture
def gp(pytester, monkeypatch):
    """pytester with the plugin, CPU backend forced (the stand-in writes CPU traces), and
    results/baselines under the test directory."""
    monkeypatch.setattr(be, "rocm_gpu_present", lambda *a: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    monkeypatch.delenv("FAKE_SCALE", raising=False)
    monkeypatch.delenv("FAKE_FAIL", raising=False)
    # this machine's own load must not decide these verdicts (run/environment.py reads
    # /proc/stat; test_contention_* below feeds it a busy host on purpose)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)
    pytester.makepyfile(test_gpsweep=TEST_FILE)

    def run(*args, results="res", inprocess=True):
        full = [*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
                *([f"--gemmperf-results-dir={results}"] if results else []),
                "--gemmperf-baseline-dir=base", *args]
        return pytester.runpytest(*full) if inprocess else pytester.runpytest_subprocess(*full)

    run.path = pytester.path
    return run


def _point_json(root: Path, point: str) -> dict:
    return json.loads((root / SLUG / point / "point.json").read_text())


def test_ids_and_cli_ini_overrides(gp, pytester):
    out = gp("--collect-only", "-q")
    out.stdout.fnmatch_lines(["test_gpsweep.py::test_gpsweep[[]ch28-th256[]]",
                              "test_gpsweep.py::test_gpsweep[[]ch56-th256[]]"])
    out = gp("--collect-only", "-q", "--gemmperf-channels", "70,84")
    out.stdout.fnmatch_lines(["*test_gpsweep[[]ch70-th256[]]", "*test_gpsweep[[]ch84-th256[]]"])
    pytester.makeini("[pytest]\ngemmperf_threads = 128,512\ngemmperf_channels = 42\n")
    out = gp("--collect-only", "-q")
    out.stdout.fnmatch_lines(["*[[]ch42-th128[]]", "*[[]ch42-th512[]]"])
    assert "ch28" not in out.stdout.str()
    out = gp("--collect-only", "-q", "--gemmperf-axis", "threads=64")  # command line beats ini
    out.stdout.fnmatch_lines(["*[[]ch42-th64[]]"])
    assert "th128" not in out.stdout.str()


def test_bad_override_is_a_usage_error(gp):
    out = gp("--collect-only", "--gemmperf-axis", "threads")
    assert out.ret == pytest.ExitCode.USAGE_ERROR
    out.stderr.fnmatch_lines(["*expected NAME=V1,V2*"])
    out = gp("--collect-only", "--gemmperf-threshold", "banana")
    assert out.ret == pytest.ExitCode.USAGE_ERROR


def test_baseline_lifecycle_regression_warn_only_and_junit(gp, monkeypatch):
    root = gp.path
    # 1. first run: no baseline -> recorded, passes, says so
    out = gp("--junitxml=first.xml", results="res1")
    out.assert_outcomes(passed=2)
    out.stdout.fnmatch_lines(["*no baseline for test_gpsweep.py::test_gpsweep[[]ch28-th256[]] — recorded one at *base*"])
    from pytest_gemmperf.store.baselines import BaselineStore

    records = BaselineStore(root / "base").load_all()
    assert len(records) == 1 and records[0].test_id == TEST_ID
    assert set(records[0].samples["point"].astype(str)) == {"ch28-th256", "ch56-th256"}

    # results layout and recorded environment
    res1 = root / "res1"
    assert json.loads((res1 / "run.json").read_text())["hardware_key"] == records[0].hw_key
    pj = _point_json(res1, "ch28-th256")
    assert pj["status"] == "complete" and pj["test_id"] == TEST_ID and pj["backend"] == "torch"
    assert pj["env"]["NCCL_MIN_NCHANNELS"] == "28" and pj["env"]["RCCL_THREADS_PER_BLOCK"] == "256"
    assert pj["env"]["HSA_ENABLE_SDMA"] == "0"
    assert [r["run"] for r in pj["runs"]] == [0, 1]
    assert pj["runs"][0]["files"] == {"0": ["run0/raw/torch_profiler/rank0/fake_trace.json"],
                                      "1": ["run0/raw/torch_profiler/rank1/fake_trace.json"]}
    seen = json.loads((res1 / SLUG / "ch28-th256" / "run1" / "raw" / "env_seen.json").read_text())
    assert seen["NCCL_MAX_NCHANNELS"] == "28" and seen["NCCL_NTHREADS"] == "256"
    assert (res1 / SLUG / "ch28-th256" / "run0" / "logs" / "workload.log").is_file()
    disp = pd.read_parquet(res1 / SLUG / "ch56-th256" / "dispatches.parquet")
    assert len(disp) == 2 * 2 * 80 and set(disp["run"]) == {0, 1} and set(disp["rank"]) == {0, 1}
    assert set(disp["point"].astype(str)) == {"ch56-th256"}

    # 2. second run: compared, unchanged
    out = gp("--junitxml=second.xml", results="res2")
    out.assert_outcomes(passed=2)
    out.stdout.fnmatch_lines(["*compared 2 point(s) with their baselines*"])
    verdicts = pd.read_csv(root / "res2" / SLUG / "verdicts.csv")
    mm = verdicts[(verdicts["kernel"] == "aten::mm") & (verdicts["metric"] == "dur_ns")]
    assert set(mm["point"]) == {"ch28-th256", "ch56-th256"} and set(mm["verdict"]) == {"unchanged"}
    props = _junit_props(root / "second.xml")
    assert props["test_gpsweep[ch28-th256]"]["gemmperf_status"].startswith("compared:")

    # 3. an injected 40% slowdown fails with the compact table
    monkeypatch.setenv("FAKE_SCALE", "1.4")
    out = gp("--junitxml=third.xml", results="res3")
    out.assert_outcomes(failed=2)
    out.stdout.fnmatch_lines(["*gemmperf: 2 regression(s) in test_gpsweep.py::test_gpsweep[[]ch28-th256[]]*",
                              "*verdict*point*kernel*metric*change*q*reason*",
                              "*regression*ch28-th256*aten::mm*dur_ns*+[34]?.?%*"])
    props = _junit_props(root / "third.xml")["test_gpsweep[ch56-th256]"]
    verdict, ratio = props["gemmperf:ch56-th256:dur_ns:aten::mm"].split()[:2]
    assert verdict == "regression" and float(ratio.split("=")[1]) == pytest.approx(1.4, rel=0.05)
    rows = json.loads(props["gemmperf_verdicts"])
    assert {r["verdict"] for r in rows if r["metric"] == "dur_ns"} == {"regression"}
    out.stdout.fnmatch_lines(["*= gemmperf =*", "*regression*test_gpsweep[[]ch28-th256[]]*aten::mm*dur_ns*"])

    # 4. warn-only reports but passes
    out = gp("--gemmperf-warn-only", results="res4")
    out.assert_outcomes(passed=2)
    out.stdout.fnmatch_lines(["*regression*test_gpsweep[[]ch56-th256[]]*aten::mm*",
                              "*--gemmperf-warn-only: regressions reported, not failed*"])

    # 5. accept the slower numbers for one point only (-k): the other point keeps its baseline
    before = BaselineStore(root / "base").load(TEST_ID, records[0].hw_key).samples
    out = gp("--gemmperf-update-baselines", "-k", "ch56", results="res5")
    out.assert_outcomes(passed=1, deselected=1)
    out.stdout.fnmatch_lines(["*baseline updated for test_gpsweep.py::test_gpsweep[[]ch56-th256[]]*"])
    after = BaselineStore(root / "base").load(TEST_ID, records[0].hw_key).samples

    def med(s, point):
        sel = (s["point"].astype(str) == point) & (s["kernel"].astype(str) == "aten::mm") & (s["metric"] == "dur_ns")
        return s.loc[sel, "value"].median()

    assert med(after, "ch56-th256") / med(before, "ch56-th256") == pytest.approx(1.4, rel=0.05)
    assert med(after, "ch28-th256") == med(before, "ch28-th256")
    # the replaced ch56 run went into the variance history; ch28 was not replaced
    hist = BaselineStore(root / "base").load(TEST_ID, records[0].hw_key).variance
    assert set(hist["point"]) == {"ch56-th256"} and hist["seq"].nunique() == 1
    # gate, then learn this run's between-process variance (samples unchanged)
    out = gp("-k", "ch56", "--gemmperf-learn-variance", results="res6")
    out.assert_outcomes(passed=1, deselected=1)
    out.stdout.fnmatch_lines(["*variance of 1 point run(s) added to the baselines' history*"])
    rec = BaselineStore(root / "base").load(TEST_ID, records[0].hw_key)
    assert med(rec.samples, "ch56-th256") == med(after, "ch56-th256")
    assert sorted(set(rec.variance["run"])) == sorted(set(hist["run"]) | {"res6/ch56-th256"})
    out = gp("-k", "ch56", results="res6b")  # the next comparison pools both earlier runs
    out.assert_outcomes(passed=1, deselected=1)
    v = pd.read_csv(root / "res6b" / SLUG / "verdicts.csv")
    mm = v[(v["kernel"] == "aten::mm") & (v["metric"] == "dur_ns")].iloc[0]
    assert mm["history_df"] == 2 * (4 - 1)  # two earlier runs of 2 ranks x 2 repeats

    # 6. replay the first run's results (no workload runs): same data as the baseline of ch28
    out = gp("--gemmperf-replay", "res1", "--gemmperf-channels", "28,99", "-rs", results="res7")
    out.assert_outcomes(passed=1, skipped=1)
    out.stdout.fnmatch_lines(["*SKIPPED*point ch99-th256*"])
    pj = _point_json(root / "res7", "ch28-th256")
    assert pj["backend"] == "replay" and pj["runs"] == [] and pj["replay"]["stored_point"] == "ch28-th256"
    v = pd.read_csv(root / "res7" / SLUG / "verdicts.csv")
    row = v[(v["kernel"] == "aten::mm") & (v["metric"] == "dur_ns")].iloc[0]
    assert row["verdict"] == "unchanged" and row["ratio"] == pytest.approx(1.0, abs=1e-9)


def _junit_props(path: Path) -> dict[str, dict[str, str]]:
    tree = ET.parse(path)
    out = {}
    for case in tree.iter("testcase"):
        out[case.get("name")] = {p.get("name"): p.get("value") for p in case.iter("property")}
    return out


def test_workload_failure_fails_with_log_tail(gp, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "1")
    out = gp("-k", "ch28")
    out.assert_outcomes(failed=1, deselected=1)
    out.stdout.fnmatch_lines(["*ch28-th256*run 0 exited with status 3*", "*simulated crash (FAKE_FAIL)*"])
    assert "Traceback" not in out.stdout.str()
    assert _point_json(gp.path / "res", "ch28-th256")["status"] == "failed"


def test_default_point_gpu_binding_and_kernel_mismatch(gp, pytester, monkeypatch):
    # the in-process inner session is no xdist worker, even when this suite runs under -n
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_plain=f"""
import sys
import pytest

def test_plain(gemmperf):
    assert gemmperf.point.id == "default"
    env = gemmperf.env()
    assert env["HIP_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == "0,1"
    result = gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "3"], repeats=1)
    assert result.dir.name == "default" and len(result.dispatches) == 2 * 6

def test_needs_fixture_for_sweep():
    pass
""")
    out = gp("test_plain.py", "--gemmperf-gpus-per-point", "2", results=None)
    out.assert_outcomes(passed=2)
    # default location: .gemmperf/results/<timestamp>/ under the rootdir, plus a "latest" link
    runs = [p for p in (gp.path / ".gemmperf" / "results").iterdir() if p.name != "latest"]
    assert len(runs) == 1 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-[0-9a-f]{6}", runs[0].name)
    assert (gp.path / ".gemmperf" / "results" / "latest").resolve() == runs[0].resolve()
    pj = json.loads((runs[0] / "test_plain.py__test_plain" / "default" / "point.json").read_text())
    assert pj["env_set"]["HIP_VISIBLE_DEVICES"] == "0,1"

    pytester.makepyfile(test_nomatch=f"""
import sys
from pytest_gemmperf import sweep

@sweep(threads=[1], kernels=["^Cijk_"])
def test_nomatch(gemmperf):
    gemmperf.assert_no_regression(gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "3"], repeats=1))
""")
    out = gp("test_nomatch.py")
    out.assert_outcomes(failed=1)
    out.stdout.fnmatch_lines(["*no dispatches match the kernel regexes (^Cijk_); kernels seen: aten::add, aten::mm*"])


def test_sweep_without_fixture_is_a_usage_error(gp, pytester):
    pytester.makepyfile(test_bad="""
from pytest_gemmperf import sweep

@sweep(channels=[28])
def test_bad():
    pass
""")
    out = gp("test_bad.py")
    assert out.ret != 0
    assert "needs the gemmperf (or gemmperf_point) fixture" in out.stdout.str() + out.stderr.str()


def test_xdist_workers_share_one_results_dir_and_one_baseline_record(xdist_sweep, gp, monkeypatch):
    # workers are fresh interpreters: they import the package from the checkout and must not
    # pick a GPU backend on a GPU machine
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    out = xdist_sweep.out
    if "GEMMPERF_DEVICE" in out.stdout.str():  # pragma: no cover - only on GPU machines
        pytest.skip("GPU machine: the stand-in workload writes CPU traces")
    out.assert_outcomes(passed=2)
    root = xdist_sweep.path / "resx"
    assert sorted(p.name for p in (root / SLUG).iterdir() if p.is_dir()) == ["ch28-th256", "ch56-th256"]
    assert [p.name for p in root.iterdir() if p.name == "run.json"] == ["run.json"]
    workers = {_point_json(root, p)["xdist_worker"] for p in ("ch28-th256", "ch56-th256")}
    assert workers <= {"gw0", "gw1"} and None not in workers
    from pytest_gemmperf.store.baselines import BaselineStore

    records = BaselineStore(xdist_sweep.path / "base").load_all()
    assert len(records) == 1
    assert set(records[0].samples["point"].astype(str)) == {"ch28-th256", "ch56-th256"}
    # the next run gates and learns on both workers at once: both points reach the history.
    # When the baseline's points ran beside each other, its record says so and the comparison
    # may be undecided (a disturbed baseline); what is tested here is the sharing: accepted
    shutil.copytree(xdist_sweep.path / "base", gp.path / "base")
    out = gp("-n", "2", "--gemmperf-backend", "torch", "--gemmperf-learn-variance", "--gemmperf-undecided", "pass",
             results="resy", inprocess=False)
    out.assert_outcomes(passed=2)
    out.stdout.fnmatch_lines(["*variance of 2 point run(s) added to the baselines' history*"])
    (rec,) = BaselineStore(gp.path / "base").load_all()
    assert sorted(set(rec.variance["run"])) == ["resy/ch28-th256", "resy/ch56-th256"]
    assert rec.samples.equals(records[0].samples)


# ------------------------------------------------------------------ confirmation and contention

#: runs 0-1 (the first look) get $TRANSIENT_SCALE, later runs (the confirmation) $FAKE_SCALE
TRANSIENT_WRAPPER = f"""
import os, re, runpy, sys
k = int(re.search(r"run(\\d+)", os.environ["GEMMPERF_OUTPUT_DIR"]).group(1))
if k < 2:
    os.environ["FAKE_SCALE"] = os.environ.get("TRANSIENT_SCALE", "1.0")
sys.argv = [{str(FAKE)!r}, *sys.argv[1:]]
runpy.run_path({str(FAKE)!r}, run_name="__main__")
"""

TRANSIENT_TEST = """
import sys
from pathlib import Path
from pytest_gemmperf import sweep

@sweep(channels=[28], threads=[256], kernels=[r"^aten::mm$"])
def test_gpsweep(gemmperf):
    wrapper = str(Path(__file__).parent / "transient.py")
    result = gemmperf.profile([sys.executable, wrapper, "--dispatches", "40"], repeats=2)
    gemmperf.assert_no_regression(result)
"""


def test_confirmation_rerun_joins_the_candidate_transient_passes_real_fails(gp, pytester, monkeypatch):
    pytester.makepyfile(test_gpsweep=TRANSIENT_TEST)
    (pytester.path / "transient.py").write_text(TRANSIENT_WRAPPER)
    gp(results="rec").assert_outcomes(passed=1)
    # a transient: the first look's processes are 40 % slower, the re-run is clean
    monkeypatch.setenv("TRANSIENT_SCALE", "1.4")
    out = gp("--junitxml=t.xml", results="transient")
    # the re-runs clear the transient: never a failure; the combined sample may still leave the
    # point undecided (its CI across the threshold), which the default reports as skipped
    got = out.parseoutcomes()
    assert got.get("failed", 0) == 0 and got.get("passed", 0) + got.get("skipped", 0) == 1
    # (the default 3 rounds go on while the point stays suspicious: the diluted transient may
    # still lie beyond the threshold after one round)
    out.stdout.fnmatch_lines(["*confirmation of test_gpsweep[[]ch28-th256[]] (aten::mm dur_ns regression +[34]?.?% [[]*): "
                              "[123] round(s), +* processes: *aten::mm dur_ns: regression -> *"])
    pj = _point_json(gp.path / "transient", "ch28-th256")
    conf = pj["confirmation"]
    rounds = conf["rounds"]
    assert 1 <= rounds <= 3 and conf["extra_processes"] == 4 * rounds  # 2 runs of 2 units a round
    assert conf["fdr_per_round"] == pytest.approx([0.001, 0.001, 0.008][:rounds])  # one budget, shared
    assert [r["run"] for r in pj["runs"]] == list(range(2 + 2 * rounds))
    assert {"kernel": "aten::mm", "metric": "dur_ns", "before": "regression"}.items() <= conf["changes"][0].items()
    assert "environment" in pj and "disturbance" in pj
    disp = pd.read_parquet(gp.path / "transient" / SLUG / "ch28-th256" / "dispatches.parquet")
    assert sorted(set(disp["run"])) == list(range(2 + 2 * rounds))  # the re-runs joined the candidate
    v = pd.read_csv(gp.path / "transient" / SLUG / "verdicts.csv")
    mm = v[(v["kernel"] == "aten::mm") & (v["metric"] == "dur_ns")].iloc[0]
    assert mm["verdict"] != "regression" and mm["n_cand"] == 4 + 4 * rounds
    assert "confirmation: regression -> " in mm["note"]
    # a real slowdown: every process slower; the re-run confirms it and the test fails
    monkeypatch.setenv("FAKE_SCALE", "1.4")
    monkeypatch.setenv("TRANSIENT_SCALE", "1.4")
    out = gp(results="real")
    out.assert_outcomes(failed=1)
    out.stdout.fnmatch_lines(["*regression*aten::mm*dur_ns*",
                              "confirmation ran (1 round(s), +4 processes; triggered by *): no verdict changed"])
    v = pd.read_csv(gp.path / "real" / SLUG / "verdicts.csv")
    assert "confirmed by a re-run (8 candidate processes)" in v[v["kernel"] == "aten::mm"]["note"].iloc[0]
    # --gemmperf-confirm 0: no re-run, the first look decides
    out = gp("--gemmperf-confirm", "0", results="noconf")
    out.assert_outcomes(failed=1)
    assert "confirmation" not in _point_json(gp.path / "noconf", "ch28-th256")
    assert "confirmation of" not in out.stdout.str()


def test_bad_confirm_value_is_a_usage_error(gp):
    out = gp("--gemmperf-confirm", "-1")
    assert out.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gemmperf-confirm must be 0..10" in out.stderr.str()


def test_contention_is_recorded_and_turns_a_regression_inconclusive(gp, monkeypatch):
    gp("-k", "ch28", results="rec").assert_outcomes(passed=1, deselected=1)
    # a busy host: 9 runnable threads (8 besides the sampler) and other processes' CPU time
    clock = {"busy": 0.0}

    def busy_host(*a, **k):
        clock["busy"] += 50.0
        return {"busy": clock["busy"], "steal": 0.0, "total": clock["busy"] * 2, "procs_running": 9.0}

    monkeypatch.setattr(environment, "read_proc_stat", busy_host)
    monkeypatch.setenv("FAKE_SCALE", "1.4")
    out = gp("-k", "ch28", "--gemmperf-confirm", "0", "-ra", results="busy")
    # undecided: reported skipped with the reason, never a plain pass
    out.assert_outcomes(skipped=1, deselected=1)
    out.stdout.fnmatch_lines(["SKIPPED *gemmperf: undecided: *noisy environment*to decide: a re-run on a quiet machine*"])
    out.stdout.fnmatch_lines(["noisy environment: 8.0 runnable threads on * cores*while "
                              "test_gpsweep.py::test_gpsweep[[]ch28-th256[]] ran",
                              "*inconclusive*aten::mm*dur_ns*"])
    pj = _point_json(gp.path / "busy", "ch28-th256")
    assert pj["environment"]["runnable_mean"] == 8.0 and pj["environment"]["foreign_cpu_cores"] > 1
    assert pj["disturbance"]["disturbed"] and "8.0 runnable threads" in pj["disturbance"]["reasons"][0]
    v = pd.read_csv(gp.path / "busy" / SLUG / "verdicts.csv")
    mm = v[(v["kernel"] == "aten::mm") & (v["metric"] == "dur_ns")].iloc[0]
    assert mm["verdict"] == "inconclusive" and "noisy environment: " in mm["note"]
    assert "was regression" in mm["note"]
