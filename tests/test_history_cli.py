"""``gemmperf history record|show|check|prune``, ``gemmperf compare --history`` and the pytest
wiring (``--gemmperf-history``, ``--gemmperf-history-check``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import SHARED_DATA

# pytester's in-process runs drop the modules they imported afterwards; pyarrow's dataset and
# extension types cannot be registered twice, so what the inner sessions use is imported here
import pandas.core.arrays.arrow.extension_types  # noqa: F401
import pyarrow.dataset  # noqa: F401
import pyarrow.parquet  # noqa: F401

import pytest_gemmperf.gate.compare  # noqa: F401
import pytest_gemmperf.history.changepoints  # noqa: F401
import pytest_gemmperf.history.suspects  # noqa: F401
import pytest_gemmperf.pytest_glue.history  # noqa: F401
import pytest_gemmperf.run.process  # noqa: F401
import pytest_gemmperf.run.torch_backend  # noqa: F401
import pytest_gemmperf.store.baselines  # noqa: F401
import pytest_gemmperf.store.hardware  # noqa: F401
import pytest_gemmperf.store.results  # noqa: F401
import pytest_gemmperf.traces.torch_trace  # noqa: F401
from pytest_gemmperf.cli import main
from pytest_gemmperf.history.changepoints import CHANGE_COLUMNS
from pytest_gemmperf.history.store import HistoryStore, RunInfo
from pytest_gemmperf.run import backend as be
from pytest_gemmperf.run import environment

pytest_plugins = ["pytester"]
# no test here reads report.html / report.xlsx (conftest.py: without_session_reports)
pytestmark = pytest.mark.usefixtures("without_session_reports")

REPO = Path(__file__).resolve().parent.parent
FIXTURE_TRACE = REPO / "tests" / "fixtures" / "rocprof_json" / "v62_results.json"
FAKE = REPO / "tests" / "fixtures" / "gemmperf_plugin" / "fake_kineto_workload.py"
SHARED = SHARED_DATA


def _samples_file(path: Path, level: float, seed: int) -> Path:
    """A samples table: 3 processes x 31 dispatches of one GEMM plus a unit-level metric."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(3):
        for v in level * np.exp(rng.normal(0, 0.01, 31)):
            rows.append(("ch28", "Cijk_gemm", "dur_ns", f"h/{seed}{u}/0/0", float(v)))
        rows.append(("ch28", "*", "exposed_comm_ns", f"h/{seed}{u}/0/0", 500.0 * (1 + rng.normal(0, 0.01))))
    pd.DataFrame(rows, columns=["point", "kernel", "metric", "unit", "value"]).to_parquet(path)
    return path


def _record_series(tmp_path: Path, hist: Path, levels: list[float]) -> None:
    for i, level in enumerate(levels):
        f = _samples_file(tmp_path / f"s{i:02d}.parquet", level, i)
        rc = main(["history", "record", str(f), "--history", str(hist), "--run-id", f"nightly-{i:02d}",
                   "--test", "perf/test_g.py::test_g", "--hw", "gfx942-MI300X-x8", "--commit", f"{i:02d}abcdef",
                   "--time", f"2026-10-{i + 1:02d}T03:00:00"])
        assert rc == 0


def test_record_check_show_find_a_recent_step(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # `history show` fits the terminal; xdist workers have none
    hist = tmp_path / "hist"
    _record_series(tmp_path, hist, [1000.0] * 9 + [1150.0] * 3)  # +15 % from run 9 on
    capsys.readouterr()
    out_dir = tmp_path / "out"
    rc = main(["history", "check", "--history", str(hist), "--out", str(out_dir), "--window", "5"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert (out_dir / "history.html").stat().st_size > 0 and (out_dir / "history.xlsx").is_file()
    assert "nightly-09" in (out_dir / "history.html").read_text(encoding="utf-8")
    changes = pd.read_csv(out_dir / "changes.csv")
    assert tuple(changes.columns[: len(CHANGE_COLUMNS)]) == CHANGE_COLUMNS
    step = changes[(changes["kernel"] == "Cijk_gemm") & (changes["metric"] == "dur_ns")]
    assert len(step) == 1
    row = step.iloc[0]
    assert (row["run_before"], row["run_after"], row["direction"]) == ("nightly-08", "nightly-09", "regression")
    assert row["ratio"] == pytest.approx(1.15, rel=0.01) and row["commit_after"] == "09abcdef"
    assert "perf/test_g.py::test_g[ch28] Cijk_gemm dur_ns: x1.15" in out
    assert "between runs nightly-08 -> nightly-09 commit 09abcdef" in out
    # the step is 3 runs old: outside a window of 2, so not a recent regression
    assert main(["history", "check", "--history", str(hist), "--out", str(out_dir), "--window", "2"]) == 0
    assert "no regression change point within the last 2 run(s)" in capsys.readouterr().out

    assert main(["history", "show", "--history", str(hist), "-k", "gemm", "--last", "4"]) == 0
    out = capsys.readouterr().out
    assert "12 run(s)" in out and "regression +15." in out and "nightly-09" in out
    line = next(ln for ln in out.splitlines() if "Cijk_gemm" in ln)
    assert "+15." in line  # trend over the last 4 run medians: 1000 -> 1150
    assert "exposed_comm_ns" not in out  # -k filters kernels


def test_check_on_a_flat_history_passes_and_improvements_do_not_fail(tmp_path, capsys):
    hist = tmp_path / "hist"
    _record_series(tmp_path, hist, [1000.0] * 8 + [850.0] * 2)  # faster: an improvement
    rc = main(["history", "check", "--history", str(hist), "--out", str(tmp_path / "o"), "--no-report"])
    assert rc == 0 and not (tmp_path / "o" / "history.html").exists()
    ch = pd.read_csv(tmp_path / "o" / "changes.csv")
    assert set(ch.loc[ch["kernel"] == "Cijk_gemm", "direction"]) == {"improvement"}


def test_record_a_trace_reads_hardware_key_and_run_json_of_a_results_dir(tmp_path, capsys):
    hist = tmp_path / "hist"
    assert main(["history", "record", str(FIXTURE_TRACE), "--history", str(hist), "--run-id", "import-1",
                 "--branch", "release/7.0"]) == 0
    runs = HistoryStore(hist).runs()
    assert runs["run_id"].tolist() == ["import-1"] and runs["branch"].tolist() == ["release/7.0"]
    assert runs["hw_key"].iloc[0].startswith("gfx950")  # from the trace's agents
    h = HistoryStore(hist).read()
    assert set(h["test"]) == {"gemmperf-history-record"} and (h["metric"] == "dur_ns").any()
    assert (h["metric"] == "category_total_ns").any()


def test_record_a_real_rocprofv3_output_directory(tmp_path):
    if not SHARED.is_dir():
        pytest.skip("../shared/data is absent")
    cands = sorted(p.parent for p in (SHARED / "rocprofv3").rglob("*_kernel_trace.csv")
                   if p.stat().st_size < 5_000_000)
    if not cands:
        pytest.skip("no small rocprofv3 kernel_trace.csv under ../shared/data/rocprofv3")
    hist = tmp_path / "hist"
    assert main(["history", "record", str(cands[0]), "--history", str(hist), "--run-id", "site-b-1",
                 "--test", "imported::mi300", "--time", "2025-12-24T08:00:00Z"]) == 0
    h = HistoryStore(hist).read(test="imported::mi300")
    assert len(h) > 0 and set(h["run_id"]) == {"site-b-1"}
    assert h["time"].iloc[0] == pd.Timestamp("2025-12-24T08:00:00", tz="UTC")


def test_damaged_history_file_is_one_stderr_line_and_exit_2(tmp_path, capsys):
    hist = tmp_path / "hist"
    _record_series(tmp_path, hist, [1000.0] * 3)
    bad = sorted(hist.rglob("*.parquet"))[1]
    bad.write_bytes(bad.read_bytes()[:100])
    capsys.readouterr()
    for sub in (["show"], ["check", "--out", str(tmp_path / "o")], ["prune", "--keep-last", "1"]):
        rc = main(["history", *sub, "--history", str(hist)])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, err
        assert err[0].startswith(f"gemmperf: error: {bad}: not a readable Parquet history file")


def test_empty_history_and_bad_arguments(tmp_path, capsys):
    (tmp_path / "none").mkdir()  # an existing store without runs (a missing one: test_first_day.py)
    assert main(["history", "show", "--history", str(tmp_path / "none")]) == 2
    assert "history holds no runs" in capsys.readouterr().err
    assert main(["history", "prune", "--history", str(tmp_path)]) == 2
    assert "--keep-last" in capsys.readouterr().err
    assert main(["history", "record", str(tmp_path / "missing"), "--history", str(tmp_path / "h"),
                 "--run-id", "x"]) == 2
    assert "no such file" in capsys.readouterr().err
    f = _samples_file(tmp_path / "s.parquet", 1.0, 0)
    assert main(["history", "record", str(f), "--history", str(tmp_path / "h"), "--run-id", "x",
                 "--time", "not-a-time"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_prune_dry_run_then_yes(tmp_path, capsys):
    hist = tmp_path / "hist"
    _record_series(tmp_path, hist, [1000.0] * 4)
    capsys.readouterr()
    assert main(["history", "prune", "--history", str(hist), "--keep-last", "2"]) == 0
    out = capsys.readouterr().out
    assert "would delete 2 run(s), 2 file(s)" in out and "nightly-00" in out and "nightly-01" in out
    assert len(HistoryStore(hist).runs()) == 4
    assert main(["history", "prune", "--history", str(hist), "--keep-last", "2", "--yes"]) == 0
    assert "deleted 2 run(s)" in capsys.readouterr().out
    assert HistoryStore(hist).runs()["run_id"].tolist() == ["nightly-02", "nightly-03"]


def test_compare_appends_the_candidate_to_the_history(tmp_path, capsys):
    hist = tmp_path / "hist"
    base = _samples_file(tmp_path / "base.parquet", 1000.0, 1)
    cand = _samples_file(tmp_path / "cand.parquet", 1001.0, 2)
    rc = main(["compare", str(base), str(cand), "--out", str(tmp_path / "cmp"), "--no-report",
               "--history", str(hist), "--run-id", "pr-42"])
    assert rc == 0, capsys.readouterr().err
    h = HistoryStore(hist).read()
    assert set(h["run_id"]) == {"pr-42"} and set(h["test"]) == {"gemmperf-history-record"}
    med = h[(h["metric"] == "dur_ns")]["value"]
    assert len(med) == 3 and med.between(990, 1012).all()  # per-process medians, not dispatches


# ------------------------------------------------------------------------------------ pytest

TEST_ID = "test_hsweep.py::test_hsweep"
TEST_FILE = f"""
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28, 56], threads=[256], kernels=[r"^aten::mm$"])
def test_hsweep(gemmperf):
    result = gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "30"], repeats=2)
    gemmperf.assert_no_regression(result)
"""


@pytest.fixture
def gp(pytester, monkeypatch):
    """pytester with the plugin on the CPU stand-in workload (as tests/test_plugin.py)."""
    import importlib.metadata

    monkeypatch.setattr(be, "rocm_gpu_present", lambda *a: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)
    monkeypatch.delenv("FAKE_SCALE", raising=False)
    pytester.makepyfile(test_hsweep=TEST_FILE)
    loaded = any(ep.value == "pytest_gemmperf.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))

    def run(*args, results, inprocess=True):
        go = pytester.runpytest if inprocess else pytester.runpytest_subprocess
        return go(*([] if loaded else ["-p", "pytest_gemmperf.plugin"]), "-p", "no:cacheprovider",
                  "-p", "no:benchmark", f"--gemmperf-results-dir={results}",
                  "--gemmperf-baseline-dir=base", "--gemmperf-telemetry=off", *args)

    run.path = pytester.path
    return run


def test_pytest_sessions_append_and_history_check_fails_slow_creep(gp, monkeypatch):
    root = gp.path
    # 1. default location: .gemmperf/history under the rootdir; each session is one run
    gp(results="r1").assert_outcomes(passed=2)
    gp(results="r2").assert_outcomes(passed=2)
    st = HistoryStore(root / ".gemmperf" / "history")
    runs = st.runs()
    assert len(runs) == 2 and all(r.startswith(("r1-", "r2-")) for r in runs["run_id"])
    assert runs["files"].tolist() == [2, 2]  # one immutable file per point
    h = st.read(test=TEST_ID)
    assert set(h["point"]) == {"ch28-th256", "ch56-th256"}
    mm = h[(h["kernel"] == "aten::mm") & (h["metric"] == "dur_ns")]
    assert len(mm) == 2 * 2 * 2 * 2  # runs x points x (2 repeats x 2 ranks) per-process medians
    assert mm["value"].between(80_000, 125_000).all()  # ~100 us per aten::mm, in ns
    hw = runs["hw_key"].iloc[0]

    # 2. off: nothing appended
    gp("--gemmperf-history=off", results="r3").assert_outcomes(passed=2)
    assert len(st.runs()) == 2

    # 3. slow creep: 8 earlier runs at 1/1.3 of today's level (injected through the store),
    # then r1, r2 and this run at today's level -> a +30 % change point at r1, within the
    # last 5 runs: the gate against the baseline passes, the history check fails
    other = root / "hist2"
    st2 = HistoryStore(other)
    base_vals = h[h["run_id"] == runs["run_id"].iloc[0]]
    rng = np.random.default_rng(5)
    for i in range(8):
        v = base_vals.assign(value=base_vals["value"] / 1.3 * np.exp(rng.normal(0, 0.003, len(base_vals))),
                             unit=base_vals["unit"] + f"-old{i}")
        st2.append(v, RunInfo(f"old-{i}", time=pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(days=i),
                              commit=f"old{i}", hw_key=hw))
    for f in (root / ".gemmperf" / "history").rglob("*.parquet"):  # r1, r2 as they are
        dest = other / f.relative_to(root / ".gemmperf" / "history")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)
    out = gp(f"--gemmperf-history={other}", "--gemmperf-history-check", results="r4")
    out.assert_outcomes(failed=2)
    out.stdout.fnmatch_lines([
        f"*gemmperf: history of {TEST_ID}[[]ch28-th256[]] on {hw} *regression change point(s) within the "
        f"last 5 run(s) (slow creep)*",
        "*aten::mm dur_ns: x1.[23]*between runs old-7 -> r1-*"])  # 1.3 with noise: x1.295 seen
    assert len(st2.runs()) == 8 + 2 + 1  # this run was appended before it was checked
    # the same history with a window of 1: the change (2 runs back) is not recent
    gp(f"--gemmperf-history={other}", "--gemmperf-history-check", "--gemmperf-history-window=1",
       results="r5").assert_outcomes(passed=2)
    # a results directory imported later: same hardware key, run.json's time, same values
    assert main(["history", "record", str(root / "r1"), "--history", str(root / "imp"), "--run-id", "imp-1"]) == 0
    imp = HistoryStore(root / "imp")
    run_json = __import__("json").loads((root / "r1" / "run.json").read_text())
    assert imp.runs()["hw_key"].tolist() == [hw]
    assert imp.runs()["time"].iloc[0] == pd.Timestamp(run_json["created"])
    got = imp.read().sort_values(["point", "kernel", "metric", "unit"])["value"].to_numpy()
    first = h[h["run_id"] == runs["run_id"].iloc[0]].sort_values(["point", "kernel", "metric", "unit"])
    np.testing.assert_allclose(got, first["value"].to_numpy(), rtol=1e-12)
    # warn-only reports the creep without failing
    out = gp(f"--gemmperf-history={other}", "--gemmperf-history-check", "--gemmperf-history-window=9",
             "--gemmperf-warn-only", "-s", results="r6")
    out.assert_outcomes(passed=2)
    assert "slow creep" in out.stdout.str() + out.stderr.str()


def test_history_check_names_a_suspect_newest_run_in_the_summary_without_failing(gp):
    """Six earlier runs at a third of today's level: this run is 3x its series at once. One run
    is not a change point (no creep failure; the gate against the baseline passes), but the
    terminal summary says "suspect" and how many more runs would confirm it."""
    root = gp.path
    gp(results="r1").assert_outcomes(passed=2)
    h = HistoryStore(root / ".gemmperf" / "history").read(test=TEST_ID)
    hw = h["hw_key"].iloc[0]
    other = HistoryStore(root / "hist3")
    rng = np.random.default_rng(11)
    for i in range(6):
        other.append(h.assign(value=h["value"] / 3 * np.exp(rng.normal(0, 0.02, len(h)))),
                     RunInfo(f"old-{i}", time=pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(days=i), hw_key=hw))
    out = gp(f"--gemmperf-history={other.url}", "--gemmperf-history-check", results="r2")
    out.assert_outcomes(passed=2)
    text = out.stdout.str()
    assert "slow creep" not in text
    out.stdout.fnmatch_lines([f"*warning: suspect: {TEST_ID}[[]ch28-th256[]] aten::mm dur_ns: x[23].* at run r2-* vs "
                              f"the median of its 6 earlier runs*: * more run* at this level would confirm it as a "
                              f"change point (history, {hw})"])
    # a flat history (runs that vary by 5 %, as a shared runner's do): the same check stays quiet
    flat = HistoryStore(root / "hist4")
    for i in range(6):
        flat.append(h.assign(value=h["value"] * np.exp(rng.normal(0, 0.05, len(h)))),
                    RunInfo(f"flat-{i}", time=pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(days=i), hw_key=hw))
    out = gp(f"--gemmperf-history={flat.url}", "--gemmperf-history-check", results="r3")
    out.assert_outcomes(passed=2)
    assert "warning: suspect" not in out.stdout.str()


def test_history_check_with_history_off_is_a_usage_error(gp):
    out = gp("--gemmperf-history=none", "--gemmperf-history-check", results="r1")
    assert out.ret == pytest.ExitCode.USAGE_ERROR
    out = gp("--gemmperf-history-window=0", results="r1")
    assert out.ret == pytest.ExitCode.USAGE_ERROR


def test_xdist_workers_append_one_run_concurrently(xdist_sweep):
    """Two xdist workers gate one point each and append at the same time: one run (the
    controller's id), one file per point, each written by its own worker."""
    out = xdist_sweep.out
    if "GEMMPERF_DEVICE" in out.stdout.str():  # pragma: no cover - only on GPU machines
        pytest.skip("GPU machine: the stand-in workload writes CPU traces")
    out.assert_outcomes(passed=2)
    hx = xdist_sweep.path / "hx"
    runs = HistoryStore(hx).runs()
    assert len(runs) == 1 and runs["run_id"].iloc[0].startswith("resx-") and runs["files"].iloc[0] == 2
    h = HistoryStore(hx).read()
    assert set(h["point"]) == {"ch28-th256", "ch56-th256"}
    files = sorted(hx.rglob("*.parquet"))
    workers = {pd.read_parquet(f, columns=["run_meta"])["run_meta"].iloc[0] for f in files}
    assert {__import__("json").loads(w)["xdist_worker"] for w in workers} <= {"gw0", "gw1"}


def test_unwritable_history_warns_and_fails_only_with_the_check(gp):
    (gp.path / "blocker").write_text("a regular file where the history directory should be\n")
    out = gp("--gemmperf-history=blocker", "-s", results="r1")
    out.assert_outcomes(passed=2)  # the gate's own result stands
    assert "history not recorded in" in out.stdout.str() + out.stderr.str()
    out = gp("--gemmperf-history=blocker", "--gemmperf-history-check", results="r2")
    out.assert_outcomes(failed=2)
    out.stdout.fnmatch_lines(["*gemmperf: test_hsweep.py::test_hsweep[[]ch28-th256[]]: history not recorded in *blocker*"])
