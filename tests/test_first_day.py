"""The first day of a real user: what a new user notices first, each fixed and kept fixed.

1. ``gemmperf history record PATH`` without ``--test``: one stable test id for inputs that carry
   none (whatever the directory is called), one line saying so; results directories keep theirs.
2. Every default output goes under ``.gemmperf/`` (``.gemmperf/<command>/<time>-<random>/``), and
   a new ``.gemmperf/`` git-ignores itself.
3. ``gemmperf --version`` prints ``gemmperf X``, not ``Gemmperf X``.
4. ``gemmperf baseline diff`` of a new record shows dashes, not ``NaN`` / ``<NA>``.
5. A CPU-only run's telemetry line says nothing of GPU throttling.
6. No pytest outcome letter alone on a line between progress lines.
7. GPUs are counted per host (``2 hosts x 8 x ...``), never summed over hosts.
8. A single unnamed run shows no ``sweep: run`` row.
9. A missing baseline or history store is one error line (exit 2), not an empty store.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from gemmperf_pytester_support import FAKE, PLUGIN_ARGS, TEST_FILE, gp  # noqa: F401 - gp: the fixture
from pytest_gemmperf import __version__
from pytest_gemmperf.cli import main
from pytest_gemmperf.commands import baseline_impl as baseline_cmd
from pytest_gemmperf.history.store import HistoryStore
# modules, not names: each test fails on its own where a function is missing
from pytest_gemmperf import report as report_mod
from pytest_gemmperf.report import data as report_data
from pytest_gemmperf.report.tables import _telemetry_md, summary_markdown
from pytest_gemmperf.report.telemetry import read_results_telemetry
from pytest_gemmperf.run.telemetry import TelemetrySampler, summarise, write_telemetry
from pytest_gemmperf.run.telemetry_sources import HostSource
from pytest_gemmperf.traces.discover import load

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
TRACE_JSON = REPO / "tests" / "fixtures" / "rocprof_json" / "v62_results.json"
TORCH_4GPU = REPO / "tests" / "fixtures" / "torch" / "rocm_sdk_rank3.pt.trace.json"
TEST_ID = "test_gpsweep.py::test_gpsweep"
#: a line holding nothing but pytest outcome letters (and maybe its progress percentage)
LONE_LETTERS = re.compile(r"^[.FEsxX]+\s*(\[\s*\d+%\])?$")


def _cli(capsys, *argv: str) -> tuple[int, str, list[str]]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, [ln for ln in cap.err.splitlines() if ln.strip()]


def _samples_file(path: Path, level: float, seed: int) -> Path:
    """A samples table (3 processes x 31 dispatches of one GEMM): compare's simplest input."""
    rng = np.random.default_rng(seed)
    rows = [("ch28", "Cijk_gemm", "dur_ns", f"h/{seed}{u}/0/0", float(v))
            for u in range(3) for v in level * np.exp(rng.normal(0, 0.01, 31))]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=["point", "kernel", "metric", "unit", "value"]).to_parquet(path)
    return path


# ------------------------------------------------------------ one real pytest session, read by many

def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The plugin on the CPU stand-in workload in a project of its own, as a user runs it:
    results in the default place, telemetry on, an 80-column terminal."""
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("FAKE_SCALE", None)
    env.pop("FAKE_FAIL", None)
    return subprocess.run([sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "no:cacheprovider",
                           "-p", "no:benchmark", "-p", "no:xdist", "--gemmperf-backend", "torch",
                           "--gemmperf-baseline-dir=base", "--gemmperf-confirm=0", *args, "test_gpsweep.py"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A fresh git project that ran the 2-point CPU sweep twice: default verbosity (records the
    baselines), then ``-q`` (compares). ``.out``/``.quiet``: their terminal output."""
    root = tmp_path_factory.mktemp("project")
    (root / "test_gpsweep.py").write_text(TEST_FILE)
    (root / "pytest.ini").write_text("[pytest]\n")
    git = shutil.which("git") is not None
    if git:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    first = _pytest(root)
    assert first.returncode == 0, first.stdout + first.stderr
    second = _pytest(root, "-q")
    assert second.returncode == 0, second.stdout + second.stderr
    runs = sorted(p for p in (root / ".gemmperf" / "results").iterdir() if p.name != "latest")
    return SimpleNamespace(root=root, out=first.stdout, quiet=second.stdout, runs=runs, git=git)


# ------------------------------------------------------------------ 1. history record's test id

@pytest.mark.parametrize("names", [("ci-job-4711", "ci-job-4712", "ci-job-4713"),
                                   ("nightly/2026-01-01", "nightly/2026-01-02", "pr 17 (rerun)")])
def test_history_record_names_one_series_whatever_the_directory(tmp_path, capsys, names):
    hist = tmp_path / "hist"
    for i, name in enumerate(names):
        job = tmp_path / name
        job.mkdir(parents=True)
        shutil.copy(TRACE_JSON, job / TRACE_JSON.name)  # a CI job's rocprofv3 output
        rc, _, err = _cli(capsys, "history", "record", str(job), "--history", str(hist), "--run-id", f"r{i}",
                          "--time", f"2026-01-0{i + 1}T00:00:00")
        assert rc == 0
        notes = [ln for ln in err if "test id" in ln]
        assert len(notes) == 1, err
        assert "'gemmperf-history-record'" in notes[0] and "--test" in notes[0] and name in notes[0]
    h = HistoryStore(hist).read()
    assert set(h["test"]) == {"gemmperf-history-record"}
    # every series holds all the runs: change points can be found across jobs
    per_series = h.groupby(["test", "point", "kernel", "metric"], dropna=False)["run_id"].nunique()
    assert (per_series == len(names)).all()


def test_history_record_test_option_overrides_and_a_trace_file_too(tmp_path, capsys):
    hist = tmp_path / "hist"
    f = tmp_path / "build-77" / "1234_results.json"
    f.parent.mkdir()
    shutil.copy(TRACE_JSON, f)
    rc, _, err = _cli(capsys, "history", "record", str(f), "--history", str(hist), "--run-id", "a")
    assert rc == 0 and sum("test id" in ln for ln in err) == 1
    rc, _, err = _cli(capsys, "history", "record", str(f), "--history", str(hist), "--run-id", "b",
                      "--test", "perf/test_mm.py::test_mm")
    assert rc == 0 and not [ln for ln in err if "test id" in ln], err
    h = HistoryStore(hist).read()
    assert set(h.groupby("run_id")["test"].first().items()) == {("a", "gemmperf-history-record"),
                                                               ("b", "perf/test_mm.py::test_mm")}
    # gemmperf compare --history: a trace candidate lands in the same series
    cand = _samples_file(tmp_path / "ci-job-9" / "cand.parquet", 1000.0, 2)
    base = _samples_file(tmp_path / "base.parquet", 1000.0, 1)
    rc, _, err = _cli(capsys, "compare", str(base), str(cand), "--out", str(tmp_path / "cmp"), "--no-report",
                      "--history", str(tmp_path / "h2"), "--run-id", "c")
    assert rc == 0 and sum("test id" in ln for ln in err) == 1
    assert set(HistoryStore(tmp_path / "h2").read()["test"]) == {"gemmperf-history-record"}


@pytest.mark.slow  # the module fixture runs two real pytest sessions
def test_history_record_of_a_results_dir_keeps_its_test_ids(project, tmp_path, capsys):
    for src in (project.runs[0], project.root / ".gemmperf" / "results"):  # a run, or its parent
        hist = tmp_path / src.name
        rc, _, err = _cli(capsys, "history", "record", str(src), "--history", str(hist), "--run-id", "x",
                          "--test", "ignored::for_results")
        assert rc == 0 and not [ln for ln in err if "test id" in ln], err
        assert set(HistoryStore(hist).read()["test"]) == {TEST_ID}


# ------------------------------------------------------------------------ 2. outputs out of the way

def _compare(tmp_path: Path, *extra: str) -> list[str]:
    base = _samples_file(tmp_path / "in" / "base.parquet", 1000.0, 1)
    cand = _samples_file(tmp_path / "in" / "cand.parquet", 1001.0, 2)
    return ["compare", str(base), str(cand), "--no-report", *extra]


def _history(tmp_path: Path, *extra: str) -> list[str]:
    hist = tmp_path / "in" / "hist"
    if not hist.exists():
        for i in range(3):
            f = _samples_file(tmp_path / "in" / f"s{i}.parquet", 1000.0, i)
            assert main(["history", "record", str(f), "--history", str(hist), "--run-id", f"n{i}",
                         "--test", "t::t", "--time", f"2026-01-0{i + 1}T00:00:00"]) == 0
    return ["history", "check", "--history", str(hist), "--no-report", *extra]


COMMANDS = {
    "analyze": (lambda tmp: ["analyze", str(TRACE_JSON), "--no-report"], "kernels.csv"),
    "compare": (_compare, "verdicts.csv"),
    "history-check": (_history, "changes.csv"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_default_outputs_go_under_dot_gemmperf(tmp_path, capsys, monkeypatch, command):
    make_argv, product = COMMANDS[command]
    project = tmp_path / "proj"
    project.mkdir()
    argv = make_argv(tmp_path)
    capsys.readouterr()
    monkeypatch.chdir(project)
    outs = []
    for _ in range(2):  # a second call never overwrites the first's files
        rc, out, _ = _cli(capsys, *argv)
        assert rc == 0
        made = sorted((project / ".gemmperf" / command).glob(f"*/{product}"))
        new = [p for p in made if p not in outs]
        assert len(new) == 1, made
        outs += new
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-[0-9a-f]+", new[0].parent.name)
        assert str(Path(".gemmperf") / command / new[0].parent.name / product) in out  # says where
    assert sorted(p.name for p in project.iterdir()) == [".gemmperf"]  # nothing else in the project
    assert (project / ".gemmperf" / ".gitignore").read_text() == "*\n"
    # --out still puts it where asked
    rc, _, _ = _cli(capsys, *argv, "--out", str(tmp_path / "mine"))
    assert rc == 0 and (tmp_path / "mine" / product).is_file()


def test_an_existing_dot_gemmperf_is_left_as_the_user_arranged_it(tmp_path, capsys, monkeypatch):
    for own in (None, "results/\n!keep.txt\n"):
        project = tmp_path / f"proj{own is None}"
        (project / ".gemmperf").mkdir(parents=True)
        if own is not None:
            (project / ".gemmperf" / ".gitignore").write_text(own)
        monkeypatch.chdir(project)
        assert main(["analyze", str(TRACE_JSON), "--no-report"]) == 0
        ignore = project / ".gemmperf" / ".gitignore"
        assert (ignore.read_text() == own) if own is not None else not ignore.exists()
    capsys.readouterr()


@pytest.mark.slow  # the module fixture runs two real pytest sessions
def test_a_fresh_project_using_the_plugin_gets_dot_gemmperf_ignored(project):
    assert (project.root / ".gemmperf" / ".gitignore").read_text() == "*\n"
    assert project.runs and all((r / "run.json").is_file() for r in project.runs)
    assert not (project.root / ".gitignore").exists()  # the project's own file is never touched
    if not project.git:
        pytest.skip("git is not installed")
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=project.root,
                            capture_output=True, text=True, check=True).stdout
    # untracked: the user's own files and the baselines they commit; results, history and the
    # report are all ignored
    untracked = [line[3:] for line in status.splitlines()]
    assert {"pytest.ini", "test_gpsweep.py"} <= set(untracked), status
    assert all(p in ("pytest.ini", "test_gpsweep.py") or p.startswith("base/") for p in untracked), status


def test_a_session_that_profiles_nothing_leaves_no_dot_gemmperf(pytester):
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:xdist").assert_outcomes(passed=1)
    assert not (pytester.path / ".gemmperf").exists()


# ---------------------------------------------------------------------------------- 3. --version

def test_version_is_spelled_as_the_command(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["--version"])
    assert ei.value.code == 0
    assert capsys.readouterr().out == f"gemmperf {__version__}\n"


# ----------------------------------------------------------------------- 4. baseline diff cells

@pytest.mark.slow  # the module fixture runs two real pytest sessions
def test_baseline_diff_of_a_new_record_has_no_nan_cells(project, tmp_path, capsys):
    for store in (tmp_path / "empty-store", tmp_path / "not" / "made" / "yet"):
        rc, out, _ = _cli(capsys, "baseline", "diff", "--from", str(project.runs[0]), "--baseline-dir", str(store))
        assert rc == 0 and "new baseline" in out and "added" in out
        assert "NaN" not in out and "<NA>" not in out and "nan" not in out, out
        row = next(ln for ln in out.splitlines() if "aten::mm" in ln and "dur_ns" in ln)
        # no old median, no old process count ("—"), and no tested change: the change cell is
        # compare's text for a change it cannot test ("-"); baseline diff has no ratio column
        assert row.count("—") == 2, row  # old median, old process count
        head = next(ln for ln in out.splitlines() if ln.startswith("point "))
        assert "change [95% CI]" in head and "ratio" not in head, head
        assert " - " in row and "— -> " in row, row
    # a stored record diffs with numbers, as before
    rc, out, _ = _cli(capsys, "baseline", "diff", "--from", str(project.runs[1]), "--baseline-dir",
                      str(project.root / "base"), "--all")
    assert rc == 0 and "—" not in out and "unchanged" in out


def test_printed_tables_show_a_dash_for_missing_numbers(capsys):
    df = pd.DataFrame({"kernel": ["a", "b"], "old": [np.nan, 2.5], "n": pd.array([pd.NA, 4], dtype="Int64"),
                       "note": [None, "x"]})
    baseline_cmd._print_table(df)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["a", "—", "—"] and lines[2].split() == ["b", "2.5", "4", "x"]


# ------------------------------------------------------------------------------- 5. telemetry

def _telemetry(devices: list[str], throttle: float = 0.0) -> pd.DataFrame:
    return pd.DataFrame([{"test": "t::t", "point": p, "process": "0", "device": d, "clock_median_mhz": 2100.0,
                          "throttle_s": throttle} for p in ("ch28", "ch56") for d in devices])


@pytest.mark.parametrize("devices", [["host"], ["host", "cpu0", "cpu1"]])
def test_telemetry_of_a_cpu_run_says_nothing_of_gpu_throttling(devices):
    lines = _telemetry_md(SimpleNamespace(telemetry=pd.DataFrame(), telemetry_summary=_telemetry(devices)))
    assert lines[0] == "Telemetry: host only (no GPU seen) in 2 point(s)."
    assert "GPU throttling" not in " ".join(lines)
    gpu = _telemetry_md(SimpleNamespace(telemetry=pd.DataFrame(), telemetry_summary=_telemetry(devices + ["gpu0"])))
    assert gpu[0] == "Telemetry: no GPU throttling or clock drop in 2 point(s)."


def _sampled_point(root: Path, point: str, *, marked: bool) -> None:
    """A point sampled by the real host source at a 60 s interval: the sampler reads at start
    and stop only, so a marked process (shorter than the interval) holds no sample and gets no
    summary row; an unmarked point is summarised as a whole."""
    sampler = TelemetrySampler(60.0, sources=[HostSource()])
    with sampler:
        if marked:
            with sampler.process(0):
                pass
    frame = sampler.frame()
    summary = summarise(frame, sampler.windows, sampler.interval_s)
    assert bool(summary) is not marked
    point_dir = root / "test_gpsweep.py__test_gpsweep" / point
    point_dir.mkdir(parents=True)
    write_telemetry(point_dir, frame)
    (point_dir / "point.json").write_text(json.dumps({"test_id": TEST_ID, "point": point,
                                                      "telemetry": {**sampler.metadata(), "summary": summary}}))


@pytest.mark.parametrize("marked", [(True, False), (True, True)], ids=["one-short", "both-short"])
def test_host_only_line_counts_points_whose_processes_were_shorter_than_the_interval(tmp_path, marked):
    for point, m in zip(("ch28", "ch56"), marked):
        _sampled_point(tmp_path / "res", point, marked=m)
    samples, summary, _ = read_results_telemetry(tmp_path / "res")
    lines = _telemetry_md(SimpleNamespace(telemetry=samples, telemetry_summary=summary))
    assert lines[:1] == ["Telemetry: host only (no GPU seen) in 2 point(s)."], lines


@pytest.mark.slow  # the module fixture runs two real pytest sessions
def test_cpu_session_summary_says_host_only(project):
    md = (project.root / ".gemmperf" / "report" / "summary.md").read_text(encoding="utf-8")
    # both points were sampled, whether or not a sample fell inside one of their processes
    assert "Telemetry: host only (no GPU seen) in 2 point(s)." in md, md
    assert "GPU throttling" not in md


# ---------------------------------------------------------------------------- 6. progress letters

def _no_lone_letters(text: str) -> None:
    lines = text.splitlines()
    lone = [i for i, ln in enumerate(lines) if LONE_LETTERS.match(ln.strip())]
    assert not lone, "\n".join(lines)
    ends = [ln for ln in lines if "gemmperf ■" in ln]
    assert len(ends) == 2 and all(ln.startswith("gemmperf ■ test_gpsweep[ch") for ln in ends), ends


@pytest.mark.slow  # the module fixture runs two real pytest sessions
def test_no_lone_outcome_letter_between_progress_lines(project):
    _no_lone_letters(project.out)
    # default verbosity: each letter stays behind pytest's file name, as without progress lines
    assert len(re.findall(r"^test_gpsweep\.py \.", project.out, re.M)) == 2, project.out
    _no_lone_letters(project.quiet)  # -q: the letter behind the end line
    # whatever the outcome: on a busy host (another xdist worker) the comparison may rightly end
    # undecided, skipped by default; where the letter goes is the same
    assert len(re.findall(r"^gemmperf ■ .*\) [.s]", project.quiet, re.M)) == 2, project.quiet
    assert "\n\nresults: " not in project.out  # the summary does not open with an empty line


def test_no_lone_letters_in_process_and_verbose(gp):
    out = gp(results="r1")
    out.assert_outcomes(passed=2)
    _no_lone_letters(out.stdout.str())
    out = gp("-v", results="r2")
    out.assert_outcomes(passed=2)
    text = out.stdout.str()
    _no_lone_letters(text)
    # -v: pytest's PASSED line first, then the end line of its own
    assert re.search(r"test_gpsweep\[ch28-th256\] PASSED.*\ngemmperf ■ test_gpsweep\[ch28-th256\] passed", text)


# ---------------------------------------------------------------------------------- 7. GPU count

def _agents(hosts: dict[str | None, int], product: str = "AMD Instinct MI350X") -> pd.DataFrame:
    return pd.DataFrame([{"host": h, "gpu_index": i, "node_id": pd.NA, "type": "GPU", "product": product,
                          "gpu_arch": "gfx950", "cu_count": 256} for h, n in hosts.items() for i in range(n)])


@pytest.mark.parametrize("hosts,text", [
    ({"node-a": 8, "node-b": 8}, "2 hosts x 8 x AMD Instinct MI350X (gfx950, 256 CUs)"),
    ({"a": 8, "b": 8, "c": 8, "d": 8}, "4 hosts x 8 x AMD Instinct MI350X (gfx950, 256 CUs)"),
    ({"node-a": 8}, "8 x AMD Instinct MI350X (gfx950, 256 CUs)"),
    ({None: 8}, "8 x AMD Instinct MI350X (gfx950, 256 CUs)"),
    ({"a": 8, "b": 4}, "2 hosts (8 + 4) x AMD Instinct MI350X (gfx950, 256 CUs)"),
])
def test_gpus_are_counted_per_host(hosts, text):
    agents = _agents(hosts)
    # every rank's trace lists its node's agents: duplicates count once
    assert report_mod.hardware_from_agents(pd.concat([agents, agents], ignore_index=True)) == text


def test_gpu_count_text():
    assert report_mod.gpu_count_text([2]) == "2 x"
    assert report_mod.gpu_count_text([8, 8]) == "2 hosts x 8 x"
    assert report_mod.gpu_count_text([4, 2, 2]) == "3 hosts (4 + 2 + 2) x"


def test_analyze_of_two_hosts_traces_counts_gpus_per_host(tmp_path, capsys):
    inp = tmp_path / "in"
    inp.mkdir()
    for host in ("gpu-node-01", "gpu-node-02"):  # two 4-GPU hosts' traces (host from the file name)
        shutil.copy(TORCH_4GPU, inp / f"{host}_4242.1700000000000000000.pt.trace.json")
    assert main(["analyze", str(inp), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    for text in (md, html):
        assert "2 hosts x 4 x AMD Instinct MI300X (gfx942, 304 CUs)" in text
        assert "8 x AMD" not in text


# --------------------------------------------------------------------------------- 8. sweep row

def test_a_single_unnamed_run_shows_no_sweep_row():
    d = load([TRACE_JSON]).dispatches
    build, fact = report_data.build_report_data, report_data.sweep_fact
    assert fact(build(d)) is None
    assert fact(build(d, meta={"label": "nightly"})) == ("sweep", ["nightly"])
    assert fact(build([d, d], labels=["base", "cand"])) == ("sweeps", ["base", "cand"])
    assert "sweeps: `run`" not in summary_markdown(build(d))
    assert "* sweeps: `base`, `cand`" in summary_markdown(build([d, d], labels=["base", "cand"]))


@pytest.mark.slow  # the module fixture runs two real pytest sessions
def test_plugin_reports_show_no_sweep_run_row(project):
    rep = project.root / ".gemmperf" / "report"
    html = (rep / "report.html").read_text(encoding="utf-8")
    md = (rep / "summary.md").read_text(encoding="utf-8")
    assert "<th>sweep</th>" not in html and "<th>sweeps</th>" not in html
    assert "sweep: run" not in md and "sweeps: `run`" not in md
    assert "ch28-th256" in html  # the points are still named


# -------------------------------------------------------------------------- 9. missing stores

@pytest.mark.parametrize("where", ["/nonexistent", "rel/missing-store", "{tmp}/no such/dir"])
def test_a_missing_store_is_one_error_line(tmp_path, capsys, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    path = where.format(tmp=tmp_path)
    for argv, what in ((["baseline", "show", "--baseline-dir", path], "baseline"),
                       (["baseline", "show", "t::t", "--baseline-dir", path], "baseline"),
                       (["history", "check", "--history", path], "history"),
                       (["history", "show", "--history", path], "history")):
        rc, out, err = _cli(capsys, *argv)
        assert rc == 2 and out == "" and err == [f"gemmperf: error: no {what} store at {path}"], (argv, out, err)
    assert not (tmp_path / ".gemmperf").exists()  # nothing written for a check that did not run


def test_an_existing_empty_store_keeps_its_message(tmp_path, capsys):
    (tmp_path / "baselines").mkdir()
    (tmp_path / "hist").mkdir()
    rc, out, _ = _cli(capsys, "baseline", "show", "--baseline-dir", str(tmp_path / "baselines"))
    assert rc == 0 and out.strip() == f"no baselines in {tmp_path / 'baselines'}"
    rc, _, err = _cli(capsys, "history", "check", "--history", str(tmp_path / "hist"))
    assert rc == 2 and err == [f"gemmperf: error: {tmp_path / 'hist'}: history holds no runs"]
