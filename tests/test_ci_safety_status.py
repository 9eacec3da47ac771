"""An interrupted run is never taken for a finished one.

Real pytest sessions of a three-point sweep (the CPU stand-in workload) are cut short at
different moments: SIGINT while a point's workload runs, ``kill -9`` while it runs, ``-x``
after a failing point, a point whose test raises KeyboardInterrupt. Then every reader of
results (``compare``, ``baseline refresh|diff|learn``, ``history record``, ``merge``,
``analyze``) is run on the run directory itself and on the parent of all runs: the parent's
newest run is its newest *complete* one (a note names the newer interrupted ones), a run given
directly is refused with one line and exit 2, and ``--allow-partial`` reads its complete points
and nothing of the others. Results written before the status fields existed still read.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from gemmperf_pytester_support import FAKE, PLUGIN_ARGS, SUBPROCESS_CONFTEST
from pytest_gemmperf.cli import main

SLUG = "test_st.py__test_st"
POINTS = ("ch28-th256", "ch56-th256", "ch64-th256")

WRAP = f'''
import os, sys, time
mode = os.environ.get("ST_MODE_" + os.environ.get("NCCL_MIN_NCHANNELS", ""), "")
if mode == "hang":
    with open(os.environ["ST_MARKER"], "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(120)
if mode == "fail":
    sys.exit(3)
os.execv(sys.executable, [sys.executable, {str(FAKE)!r}, *sys.argv[1:]])
'''

TEST_FILE = '''
import os, sys
from pytest_gemmperf import sweep

@sweep(channels=[28, 56, 64], threads=[256], kernels=[r"^aten::mm$"])
def test_st(gemmperf):
    result = gemmperf.profile([sys.executable, "wrap.py", "--dispatches", "20"], repeats=2)
    gemmperf.assert_no_regression(result)
    mode = os.environ.get("ST_RAISE_" + str(gemmperf.point.values["channels"]), "")
    if mode == "interrupt":
        raise KeyboardInterrupt
    if mode == "error":
        raise RuntimeError("the test's own check failed")
'''

# (environment, extra pytest args, signal to send once the hanging workload runs) per scenario;
# each leaves ch28 complete and ch64 never run
SCENARIOS = {
    "sigint": ({"ST_MODE_56": "hang"}, [], signal.SIGINT),
    "sigterm": ({"ST_MODE_56": "hang"}, [], signal.SIGTERM),
    "kill9": ({"ST_MODE_56": "hang"}, [], signal.SIGKILL),
    "stop_x": ({"ST_MODE_56": "fail"}, ["-x"], None),
    "raises": ({"ST_RAISE_56": "interrupt"}, [], None),
}
#: what each scenario left complete
COMPLETE_POINTS = {"sigint": {"ch28-th256"}, "sigterm": {"ch28-th256"}, "kill9": {"ch28-th256"}, "stop_x": {"ch28-th256"},
                   "raises": {"ch28-th256", "ch56-th256"}}


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(project: Path, results: Path | None, env: dict, args: list[str], marker: Path) -> subprocess.Popen:
    marker.unlink(missing_ok=True)
    full_env = {**os.environ, "ST_MARKER": str(marker), **env}
    for k in ("FAKE_SCALE", "FAKE_FAIL", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS"):
        full_env.pop(k, None)
    cmd = [sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
           "-p", "no:xdist", "--gemmperf-backend", "torch", "--gemmperf-telemetry", "off", "--gemmperf-jobs", "1",
           "--gemmperf-baseline-dir=base", *([f"--gemmperf-results-dir={results}"] if results else []),
           *args, "test_st.py"]
    # a runner started in the background (`cmd &`, nohup) ignores SIGINT, and a child inherits
    # that: Python then installs no KeyboardInterrupt handler and the SIGINT below would be lost
    return subprocess.Popen(cmd, cwd=project, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=_sigint_default)


def _signal_when_hanging(proc: subprocess.Popen, marker: Path, sig) -> None:
    deadline = time.monotonic() + 120
    while not (marker.is_file() and marker.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, "the session never reached ch56"
        time.sleep(0.05)
    proc.send_signal(sig)


def _reap(proc: subprocess.Popen, marker: Path) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if marker.is_file() and marker.read_text():  # kill -9 leaves the workload behind
        try:
            os.kill(int(marker.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _sessions(project: Path, runs: dict[str, tuple[Path | None, dict, list[str], signal.Signals | None]]
              ) -> dict[str, int]:
    """Run one session per entry at once (each its own results directory and hang marker);
    each signalled once its workload hangs at ch56. Returns each session's exit status."""
    started: dict[str, tuple[subprocess.Popen, Path]] = {}
    try:
        for name, (results, env, args, _sig) in runs.items():
            marker = project / f"hang-{name}.pid"
            started[name] = (_start(project, results, env, args, marker), marker)
        for name, (proc, marker) in started.items():
            if runs[name][3] is not None:
                _signal_when_hanging(proc, marker, runs[name][3])
        return {name: proc.wait(timeout=180) for name, (proc, _marker) in started.items()}
    finally:
        for proc, marker in started.values():
            _reap(proc, marker)


# every test reads the module fixture, which runs six real pytest sessions
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One complete session (it records the baselines; one point's test raises an ordinary
    error, which is still a finished point), then the interrupted sessions; all the
    interrupted runs are newer than the complete one under ``.gemmperf/results``."""
    project = tmp_path_factory.mktemp("status")
    (project / "wrap.py").write_text(WRAP)
    (project / "test_st.py").write_text(TEST_FILE)
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(SUBPROCESS_CONFTEST)  # no test here reads the reports
    parent = project / ".gemmperf" / "results"
    rc = _sessions(project, {"complete": (None, {"ST_RAISE_64": "error"}, [], None)})["complete"]
    assert rc == 1, rc
    out = {"complete": next(c for c in parent.iterdir() if not c.is_symlink())}
    # newer names than the complete run's timestamp: each is "the newest run" by name
    for n, name in enumerate(SCENARIOS):
        out[name] = parent / f"9999-12-31T00-00-0{n}"
    # the interrupted sessions run at the same time: each has its own results directory and
    # what they share (the baselines they gate against, the history) is safe to share
    _sessions(project, {name: (out[name], *SCENARIOS[name]) for name in SCENARIOS})
    out["parent"] = parent
    out["base"] = project / "base"
    return out


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _refusal(name: str) -> str:
    n = len(COMPLETE_POINTS[name])
    return f"was interrupted: {n} of 3 points complete"


# ------------------------------------------------------------------------------ what is written

@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_interrupted_session_is_recorded_as_not_complete(runs, name):
    """run.json never says complete after an interruption; a point's status says how far it
    got, and the points that finished are listed (kill -9 can write nothing: it stays running)."""
    from pytest_gemmperf.run.results import run_state

    doc = json.loads((runs[name] / "run.json").read_text())
    assert doc["status"] == ("running" if name == "kill9" else "interrupted")
    state = run_state(runs[name])
    assert state.status == "interrupted" and not state.is_complete
    assert {p.split("/", 1)[1] for p in state.complete} == COMPLETE_POINTS[name]
    assert state.points_total == 3
    pj = json.loads((runs[name] / SLUG / "ch28-th256" / "point.json").read_text())
    assert pj["status"] == "complete" and pj["processes_complete"] == [0, 1]
    mid = json.loads((runs[name] / SLUG / "ch56-th256" / "point.json").read_text())
    expected_mid = {"sigint": "interrupted", "sigterm": "interrupted", "kill9": "running", "stop_x": "failed", "raises": "complete"}
    assert mid["status"] == expected_mid[name]
    assert not (runs[name] / SLUG / "ch64-th256").exists()
    if name != "kill9":
        assert doc["points_complete"] == len(COMPLETE_POINTS[name]) and doc["points_total"] == 3
        assert doc["points_failed"] == (1 if name == "stop_x" else 0)


def test_complete_session_whatever_its_verdicts(runs):
    """A session whose points all ran is complete, though one test failed; ``latest`` is it."""
    doc = json.loads((runs["complete"] / "run.json").read_text())
    assert doc["status"] == "complete" and doc["points_complete"] == 3 and doc["points_total"] == 3
    assert sorted(doc["complete_points"]) == [f"{SLUG}/{p}" for p in POINTS]
    latest = runs["parent"] / "latest"
    assert latest.is_symlink() and latest.resolve() == runs["complete"].resolve()


# ----------------------------------------------------------------------------- the newest run

def test_compare_parent_takes_newest_complete_run(runs, capsys, tmp_path):
    rc, _, err = _cli(capsys, "compare", runs["base"], runs["parent"], "--out", tmp_path / "o", "--no-report",
                      "--jobs", "1")
    assert rc == 0, err
    assert runs["complete"].name in err and runs["sigint"].name in err and "was interrupted" in err
    v = pd.read_csv(tmp_path / "o" / "verdicts.csv")
    assert set(v["point"]) == set(POINTS)


@pytest.mark.parametrize("sub", ["refresh", "diff", "learn"])
def test_baseline_from_parent_takes_newest_complete_run(runs, capsys, tmp_path, sub):
    store = tmp_path / "store"
    if sub != "refresh":  # refresh into an empty store: the record is the run's, not a merge
        shutil.copytree(runs["base"], store)
    rc, out, err = _cli(capsys, "baseline", sub, "--from", runs["parent"], "--baseline-dir", store, "--jobs", "1")
    assert rc == 0, err
    assert "was interrupted" in err and runs["kill9"].name in err
    if sub == "refresh":
        from pytest_gemmperf.store.baselines import BaselineStore

        (rec,) = BaselineStore(store).load_all()
        assert rec.meta["results_dir"] == runs["complete"].name


def test_history_record_parent_takes_newest_complete_run(runs, capsys, tmp_path):
    rc, _, err = _cli(capsys, "history", "record", runs["parent"], "--history", tmp_path / "h", "--run-id", "r1")
    assert rc == 0, err
    assert "was interrupted" in err
    from pytest_gemmperf.history.store import HistoryStore

    values = HistoryStore(str(tmp_path / "h")).read()
    assert set(values["point"].astype(str)) == set(POINTS)


def test_analyze_parent_does_not_pool_interrupted_runs(runs, capsys, tmp_path):
    rc, _, err = _cli(capsys, "analyze", runs["parent"], "--out", tmp_path / "a", "--no-report", "--jobs", "1")
    assert rc == 0, err
    for name in SCENARIOS:
        assert runs[name].name in err
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    rc, _, err = _cli(capsys, "analyze", runs["complete"], "--out", tmp_path / "b", "--no-report", "--jobs", "1")
    assert rc == 0, err
    alone = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["n_dispatches"] == alone["n_dispatches"]


# ------------------------------------------------------------------ an interrupted run directly

def _commands(runs, name: str, tmp_path: Path) -> dict[str, list]:
    store = tmp_path / "store"
    if not store.exists():
        shutil.copytree(runs["base"], store)
    run = runs[name]
    return {
        "compare": ["compare", runs["base"], run, "--out", tmp_path / "c", "--no-report", "--jobs", "1"],
        "refresh": ["baseline", "refresh", "--from", run, "--baseline-dir", tmp_path / "fresh", "--jobs", "1"],
        "diff": ["baseline", "diff", "--from", run, "--baseline-dir", store, "--jobs", "1"],
        "learn": ["baseline", "learn", "--from", run, "--baseline-dir", store, "--jobs", "1"],
        "history": ["history", "record", run, "--history", tmp_path / "h", "--run-id", "r"],
        "merge": ["merge", run, "--out", tmp_path / "m", "--no-report"],
        "analyze": ["analyze", run, "--out", tmp_path / "a", "--no-report", "--jobs", "1"],
    }


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("cmd", ["compare", "refresh", "diff", "learn", "history", "merge", "analyze"])
def test_interrupted_run_given_directly_is_refused(runs, capsys, tmp_path, name, cmd):
    rc, _, err = _cli(capsys, *_commands(runs, name, tmp_path)[cmd])
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and _refusal(name) in lines[0] and runs[name].name in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("cmd", ["compare", "refresh", "history", "merge", "analyze"])
def test_allow_partial_takes_complete_points_only(runs, capsys, tmp_path, name, cmd):
    argv = _commands(runs, name, tmp_path)[cmd]
    rc, _, err = _cli(capsys, *argv, "--allow-partial")
    assert rc == 0, err
    want = COMPLETE_POINTS[name]
    if cmd == "compare":
        v = pd.read_csv(tmp_path / "c" / "verdicts.csv")
        got = set(v.loc[v["verdict"] != "missing", "point"])  # the others: in the baseline only
    elif cmd == "refresh":
        from pytest_gemmperf.store.baselines import BaselineStore

        (rec,) = BaselineStore(tmp_path / "fresh").load_all()
        assert rec.meta["results_dir"] == runs[name].name
        got = set(rec.samples["point"].astype(str))
    elif cmd == "history":
        from pytest_gemmperf.history.store import HistoryStore

        got = set(HistoryStore(str(tmp_path / "h")).read()["point"].astype(str))
    elif cmd == "merge":
        merged = {p.parent.name: json.loads(p.read_text())["status"] for p in (tmp_path / "m").glob("*/*/point.json")}
        assert json.loads((tmp_path / "m" / "run.json").read_text())["status"] == "interrupted"
        # a failed point finished (its status travels with it); an interrupted one is left out
        got = {p for p, st in merged.items() if st != "failed"}
        assert set(merged.values()) <= {"complete", "failed"}
    else:
        summary = json.loads((tmp_path / "a" / "summary.json").read_text())
        got = {str(r["point"]) for r in summary["per_point_rank"]}
    assert got == want


# -------------------------------------------------------------------------- older results dirs

def _strip_status(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    for f in [dst / "run.json", *dst.glob("*/*/point.json")]:
        doc = json.loads(f.read_text())
        for k in ("status", "points_total", "points_complete", "points_failed", "complete_points", "writer",
                  "processes_complete"):
            doc.pop(k, None)
        f.write_text(json.dumps(doc))
    return dst


def test_results_without_status_fields_still_read(runs, capsys, tmp_path):
    """A run written before the status fields is complete (its points have their tables): read
    directly, and chosen as a parent's newest complete run over a newer interrupted one."""
    parent = tmp_path / "results"
    old = _strip_status(runs["complete"], parent / "2000-01-01T00-00-00")
    shutil.copytree(runs["sigint"], parent / "2000-01-02T00-00-00")
    for given in (old, parent):
        rc, _, err = _cli(capsys, "compare", runs["base"], given, "--out", tmp_path / "c", "--no-report",
                          "--jobs", "1")
        assert rc == 0, err
        v = pd.read_csv(tmp_path / "c" / "verdicts.csv")
        assert set(v.loc[v["verdict"] != "missing", "point"]) == set(POINTS), err
    rc, _, err = _cli(capsys, "baseline", "diff", "--from", old, "--baseline-dir", runs["base"], "--jobs", "1")
    assert rc == 0, err


@pytest.mark.parametrize("status", ["running", None])
def test_old_results_with_a_point_left_running_are_interrupted(runs, capsys, tmp_path, status):
    """The older writer left ``running`` (or nothing) in an interrupted point's point.json and
    no table: that run is not complete either."""
    old = _strip_status(runs["sigint"], tmp_path / "old")
    pj = old / SLUG / "ch56-th256" / "point.json"
    doc = json.loads(pj.read_text())
    if status:
        doc["status"] = status
    pj.write_text(json.dumps(doc))
    rc, _, err = _cli(capsys, "compare", runs["base"], old, "--out", tmp_path / "c", "--no-report", "--jobs", "1")
    assert rc == 2 and "was interrupted: 1 of 2 points complete" in err, err


# ------------------------------------------------------------------- a rank lost to a bad file

@pytest.mark.parametrize("damage", ["fifo", "dangling_link"])
def test_comparison_missing_a_rank_does_not_pass_quietly(runs, capsys, tmp_path, damage):
    raw = runs["complete"] / SLUG / "ch28-th256" / "run0" / "raw"
    base, cand = tmp_path / "base", tmp_path / "cand"
    shutil.copytree(raw, base)
    shutil.copytree(raw, cand)
    rank1 = next(cand.rglob("rank1"))
    victim = next(rank1.glob("*.json"))
    victim.unlink()
    if damage == "fifo":
        os.mkfifo(victim)
    else:
        victim.symlink_to(tmp_path / "gone.pt.trace.json")
    argv = ["compare", base, cand, "--out", tmp_path / "o", "--no-report", "--jobs", "1"]
    rc, _, err = _cli(capsys, *argv)
    lines = [ln for ln in err.splitlines() if ln.startswith("gemmperf: error")]
    assert rc == 2 and len(lines) == 1 and str(rank1) in lines[0] and "could not be read" in lines[0], err
    assert "Traceback" not in err
    rc, _, err = _cli(capsys, *argv, "--allow-partial")
    # compared without the lost rank: one process a side is too few to decide (exit 4, undecided)
    assert rc == 4 and "compared without" in err and "undecided: " in err, err
