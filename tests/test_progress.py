"""Progress lines of a pytest session (pytest_gemmperf/pytest_glue/progress.py), option metavars and help
defaults (pytest_glue/options.py), and the progress events of the rocprofv3 runner."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from gemmperf_pytester_support import gp  # noqa: F401 - the fixture
from pytest_gemmperf.pytest_glue import progress as pg

pytest_plugins = ["pytester"]
# no test here reads report.html / report.xlsx (conftest.py: without_session_reports)
pytestmark = pytest.mark.usefixtures("without_session_reports")

LINE = re.compile(r"(\[gw\d+\] )?gemmperf [▶■ ] ")


def _progress_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if "gemmperf ▶" in ln or "gemmperf ■" in ln
            or re.search(r"gemmperf   \S+ (run|counter)", ln)]


def _all_whole(lines: list[str]) -> None:
    """Every progress line starts its own line: never behind pytest's dots or another line."""
    assert lines
    for ln in lines:
        assert LINE.match(ln), f"progress text not at the start of its line: {ln!r}"
        assert ln.count("gemmperf") == 1, ln


def test_pytest_session_shows_a_line_per_point_and_process(gp):
    out = gp(results="r1")
    out.assert_outcomes(passed=2)
    text = out.stdout.str()
    out.stdout.fnmatch_lines([
        "gemmperf ▶ test_gpsweep[[]ch28-th256[]] start: 2 process(es) (torch)",
        "gemmperf   test_gpsweep[[]ch28-th256[]] run 1/2 started (elapsed *)",
        "gemmperf   test_gpsweep[[]ch28-th256[]] run 1/2 done in * s (elapsed * s, ETA * (this point))",
        "gemmperf   test_gpsweep[[]ch28-th256[]] run 2/2 started (elapsed *, ETA *)",
        "gemmperf   test_gpsweep[[]ch28-th256[]] run 2/2 done in * s (elapsed *, ETA 0.0 s (this point))",
        "gemmperf ■ test_gpsweep[[]ch28-th256[]] passed in * s (baseline-recorded)",
        "gemmperf ▶ test_gpsweep[[]ch56-th256[]] start: 2 process(es) (torch)",
    ])
    lines = _progress_lines(text)
    _all_whole(lines)
    assert len(lines) == 2 * (1 + 2 * 2 + 1)  # per point: start, 2 x (start, end), end

    # the second session knows each point's duration from the baseline it recorded
    meta = next((gp.path / "base").glob("*/test_gpsweep.py__test_gpsweep/meta.json"))
    points = json.loads(meta.read_text())["metadata"]["points"]
    assert len(points["ch28-th256"]["run_durations_s"]) == 2
    out = gp(results="r2")
    out.assert_outcomes(passed=2)
    out.stdout.fnmatch_lines([
        "gemmperf ▶ test_gpsweep[[]ch28-th256[]] start: 2 process(es) (torch), ETA * s (baseline)",
        "gemmperf   test_gpsweep[[]ch28-th256[]] run 1/2 done in * (elapsed *, ETA * (baseline))",
        "gemmperf ■ test_gpsweep[[]ch28-th256[]] passed in * s (passed; compared: *)",
    ])


def test_quiet_off_and_capture_off(gp):
    out = gp("-q", results="q1")
    out.assert_outcomes(passed=2)
    lines = _progress_lines(out.stdout.str())
    _all_whole(lines)
    assert [ln.split()[1] for ln in lines] == ["▶", "■", "▶", "■"]  # -q: point lines only
    for args in (["-qq"], ["--gemmperf-progress", "off"]):
        # one point is enough to show that no line is printed; a results dir of its own: an
        # earlier session's is never replaced
        out = gp(*args, "-k", "ch28", results=f"q2-{len(args)}")
        assert out.ret == 0  # -qq prints no outcome line to parse
        assert not _progress_lines(out.stdout.str() + out.stderr.str()), args
    # -s: the workload's output goes to its log, each event is still one clean line
    out = gp("-s", results="q3", inprocess=False)
    out.assert_outcomes(passed=2)
    lines = _progress_lines(out.stdout.str())
    _all_whole(lines)
    assert len(lines) == 12


def test_bad_progress_value_is_a_usage_error(gp):
    out = gp("--gemmperf-progress", "loud", "--collect-only")
    assert out.ret == pytest.ExitCode.USAGE_ERROR
    out.stderr.fnmatch_lines(["*--gemmperf-progress: 'loud' is not on or off*"])


def test_xdist_workers_write_whole_prefixed_lines(xdist_sweep):
    out = xdist_sweep.out
    out.assert_outcomes(passed=2)
    lines = _progress_lines(out.stdout.str() + "\n" + out.stderr.str())
    workers = {m.group(1) for ln in lines if (m := re.search(r"\[(gw\d)\]", ln))}
    assert workers == {"gw0", "gw1"}
    for point in ("ch28-th256", "ch56-th256"):
        mine = [ln for ln in lines if f"[{point}]" in ln]
        assert len(mine) == 6, mine
        # one worker ran the whole point; its lines are whole, never split or merged
        assert len({re.search(r"\[(gw\d)\]", ln).group(1) for ln in mine}) == 1
        for ln in mine:
            assert re.search(r"\[gw\d\] gemmperf [▶■ ] ", ln), ln
            assert ln.count("gemmperf") == 1, ln
    # the end lines are the controller's (stdout, from the reports), each on its own line
    ends = [ln for ln in out.stdout.lines if "gemmperf ■" in ln]
    # pytest's outcome letter (and progress percentage) behind it, never alone on a line
    assert len(ends) == 2 and all(re.match(r"\[gw\d\] gemmperf ■ test_gpsweep\[ch\d\d-th256\] passed in "
                                           r"[0-9.]+ s \(baseline-recorded\) \.( *\[ *\d+%\])?$", ln)
                                  for ln in ends), ends
    assert "gemmperf ■" not in out.stderr.str()


def test_every_option_has_a_metavar_and_states_its_default(pytest_help):
    from pytest_gemmperf.config import SETTINGS

    entries: dict[str, str] = {}  # "--flag[=METAVAR]" -> its help text, joined
    key = None
    for line in pytest_help.splitlines():
        if re.match(r"^  -", line):
            key = None
            m = re.match(r"^  (--gemmperf-\S+)\s*(.*)$", line)
            if m:
                key = m.group(1)
                entries[key] = m.group(2)
        elif key and re.match(r"^ {10,}\S", line):
            entries[key] += " " + line.strip()
        else:
            key = None
    for s in SETTINGS:
        flag, metavar = s.flag, s.metavar
        if s.kind == "bool":
            assert flag in entries, flag
            help_text = entries[flag]
        else:
            assert metavar and metavar != "VALUE", flag
            assert f"{flag}={metavar}" in entries, (flag, sorted(entries))
            help_text = entries[f"{flag}={metavar}"]
        assert "default" in help_text, (flag, help_text)
    assert not [k for k in entries if k.endswith("=VALUE")]


# --- units ----------------------------------------------------------------------------------------

class _Writer:
    def __init__(self):
        self.lines: list[tuple[int, str]] = []
        self.enabled = True

    def write(self, line: str, level: int = 1) -> None:
        self.lines.append((level, line))


def test_eta_from_baseline_then_from_the_point_itself():
    now = [100.0]
    w = _Writer()
    p = pg.PointProgress(w, "t[p]", [10.0, 12.0, 11.0], lambda: now[0])
    p("point_start", repeats=3, backend="rocprofv3", counter_passes=2)
    assert w.lines[-1] == (0, "gemmperf ▶ t[p] start: 3 process(es) + 2 counter pass(es) (rocprofv3), "
                              "ETA 55.0 s (baseline)")
    p("run_start", run=0, total=3)
    now[0] = 111.0
    p("run_end", run=0, total=3, duration_s=11.0, ok=True)
    # 2 runs + 2 passes left at the baseline's median 11 s
    assert w.lines[-1] == (1, "gemmperf   t[p] run 1/3 done in 11.0 s (elapsed 11.0 s, ETA 44.0 s (baseline))")
    p("run_end", run=1, total=3, duration_s=None, ok=False)
    assert "run 2/3 FAILED" in w.lines[-1][1]
    # no baseline: the mean of the finished processes
    q = pg.PointProgress(w, "t[q]", [], lambda: now[0])
    q("point_start", repeats=4, backend="torch")
    assert w.lines[-1][1].endswith("(torch)")           # nothing to estimate from yet
    q("run_end", run=0, total=4, duration_s=2.0)
    q("run_end", run=1, total=4, duration_s=4.0)
    assert w.lines[-1][1].endswith("ETA 6.0 s (this point))")
    # only a total recorded: total - elapsed until a process has finished
    r = pg.PointProgress(w, "t[r]", [], lambda: now[0], baseline_total=130.0)
    r("point_start", repeats=2, backend="torch")
    now[0] = 171.0
    r("run_start", run=0, total=2)
    assert w.lines[-1][1].endswith("(elapsed 60.0 s, ETA 70.0 s (baseline))")
    # a confirmation round keeps the point's clock and says which round it is
    r("point_start", repeats=2, backend="torch", round=1)
    assert "confirmation round 1: start" in w.lines[-1][1]
    # an exception inside never reaches the runner
    r("run_end")


def test_baseline_durations_reads_meta_only_and_never_raises(tmp_path):
    rec = tmp_path / "gfx942-x" / "t.py__test_a"
    rec.mkdir(parents=True)
    points = {"p1": {"run_durations_s": [3.0, 5.0, "x", -1], "duration_s": 8.0}}
    (rec / "meta.json").write_text(json.dumps({"stats": {"points": 1}, "metadata": {"points": points}}))
    assert pg.baseline_durations(tmp_path, "t.py__test_a", "p1") == ([3.0, 5.0], 8.0)
    assert pg.baseline_durations(tmp_path, "t.py__test_a", "p1", "gfx942-x") == ([3.0, 5.0], 8.0)
    assert pg.baseline_durations(tmp_path, "t.py__test_a", "p2") == ([], None)
    assert pg.baseline_durations(tmp_path, "t.py__test_a", "p1", "other") == ([], None)
    other = tmp_path / "gfx90a-y" / "t.py__test_a"     # two hardware keys, none named: no guess
    other.mkdir(parents=True)
    (other / "meta.json").write_text("{not json")
    assert pg.baseline_durations(tmp_path, "t.py__test_a", "p1") == ([], None)
    assert pg.baseline_durations(tmp_path, "t.py__test_a", "p1", "gfx90a-y") == ([], None)


def test_rocprofv3_runner_reports_timing_runs_and_counter_passes(tmp_path):
    """The run layer's callback, against AMD's real front end (skips without ../shared)."""
    double = Path(__file__).resolve().parent / "rocprofv3_double"
    sys.path.insert(0, str(double))
    import realfront

    if not realfront.available():
        pytest.skip(realfront.skip_reason())
    if "7.0" not in realfront.releases():
        pytest.skip("release folder 7.0 is absent")
    from test_rocprofv3_runner import _env

    from pytest_gemmperf.run.rocprofv3 import profile_point

    trees = {"7.0": realfront.install("7.0", tmp_path / "rocm")}
    events: list[tuple[str, dict]] = []
    profile_point({}, [sys.executable, str(double / "fake_app.py"), "--kernels", "Cijk_A=3@20000"],
                  tmp_path / "pt", counters=["SQ_WAVES"], kernel_regexes=["Cijk_"], repeats=2,
                  timeout_s=60, env=_env(trees, "7.0"),
                  progress=lambda event, **f: events.append((event, f)))
    assert [e for e, _ in events] == ["run_start", "run_end", "run_start", "run_end",
                                      "passes_start", "passes_end"]
    assert events[1][1]["run"] == 0 and events[3][1]["total"] == 2 and events[3][1]["ok"] is True
    assert events[1][1]["duration_s"] > 0 and events[4][1] == {"groups": 1}


def test_pytest_session_on_the_rocprofv3_backend_shows_runs_and_counter_passes(pytester, monkeypatch, tmp_path):
    """A whole session on AMD's real rocprofv3 front end and the fake tool (skips without
    ../shared): the timing runs and the counter passes each get their lines."""
    double = Path(__file__).resolve().parent / "rocprofv3_double"
    sys.path.insert(0, str(double))
    import realfront

    if not realfront.available() or "7.0" not in realfront.releases():
        pytest.skip(realfront.skip_reason() if not realfront.available() else "release folder 7.0 is absent")
    from test_rocprofv3_runner import _env

    from gemmperf_pytester_support import PLUGIN_ARGS

    env = _env({"7.0": realfront.install("7.0", tmp_path / "rocm")}, "7.0")
    monkeypatch.setenv("PATH", env["PATH"])
    pytester.makepyfile(test_rp=f"""
import sys

def test_rp(gemmperf):
    gemmperf.profile([sys.executable, {str(double / 'fake_app.py')!r}, "--kernels", "Cijk_A=3@20000"],
                     counters=["SQ_WAVES"], repeats=2)
""")
    out = pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
                             "--gemmperf-backend", "rocprofv3", "--gemmperf-telemetry", "off",
                             "--gemmperf-results-dir=res", "--gemmperf-baseline-dir=base")
    out.assert_outcomes(passed=1)
    out.stdout.fnmatch_lines([
        "gemmperf ▶ test_rp[[]default[]] start: 2 process(es) + 1 counter pass(es) (rocprofv3)",
        "gemmperf   test_rp[[]default[]] run 1/2 started (elapsed *)",
        "gemmperf   test_rp[[]default[]] run 1/2 done in * (elapsed *, ETA * (this point))",
        "gemmperf   test_rp[[]default[]] run 2/2 done in * (elapsed *, ETA * (this point))",
        "gemmperf   test_rp[[]default[]] counter passes 1-1/1 started (one rocprofv3 call; elapsed *, ETA *)",
        "gemmperf   test_rp[[]default[]] counter passes done in * (elapsed *)",
        "gemmperf ■ test_rp[[]default[]] passed in *",
    ])
    _all_whole(_progress_lines(out.stdout.str()))
