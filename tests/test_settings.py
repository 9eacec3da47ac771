"""One settings model (``pytest_gemmperf/config.py``): pytest and the ``gemmperf`` command read
the same project configuration, parse a threshold the same way, and gate the same runs alike.

Each project here is a temporary directory with a pytest configuration file; the command runs
from a subdirectory of it, as pytest would find its inifile from there.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

# pytester's in-process runs drop the modules they imported afterwards; pyarrow extension types
# cannot be registered twice, so everything the inner sessions use is imported here, once.
import pandas.core.arrays.arrow.extension_types  # noqa: F401
import pyarrow.parquet  # noqa: F401

import pytest_gemmperf.store.baselines  # noqa: F401
import pytest_gemmperf.store.results  # noqa: F401
import pytest_gemmperf.gate.compare  # noqa: F401
import pytest_gemmperf.store.hardware  # noqa: F401
import pytest_gemmperf.gate.verdict  # noqa: F401
import pytest_gemmperf.run.replay  # noqa: F401
import pytest_gemmperf.traces.discover  # noqa: F401
from pytest_gemmperf.pytest_glue import options as glue_options
from pytest_gemmperf.cli import main as cli_main
from pytest_gemmperf.config import BY_NAME, SETTINGS, find_project, parse_threshold
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.run.results import slugify_test_id, write_tables
from pytest_gemmperf.traces.schema import finalize_dispatches

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
HW = "gfx942-AMD_Instinct_MI300X-x1"
TEST_ID = "perf/test_mm.py::test_mm"
POINT = "ch28-th256"
KERNELS = ("Cijk_gemm_a", "Cijk_gemm_b", "elementwise_add")


def _dispatches(seed: int, scale: float = 1.0, processes: int = 4, n: int = 60, point: str = POINT) -> pd.DataFrame:
    """``processes`` processes of ``n`` dispatches per kernel, ~1 % noise, every kernel ``scale``
    times slower."""
    rng = np.random.default_rng(seed)
    frames = []
    for proc in range(processes):
        kernel = np.tile(KERNELS, n)
        base = np.tile([100_000.0, 150_000.0, 20_000.0], n) * scale * rng.lognormal(0, 0.005)
        dur = (base * rng.lognormal(0, 0.01, len(kernel))).astype(np.int64)
        start = 1_000_000 + np.cumsum(dur + 5_000)
        frames.append(pd.DataFrame({
            "host": "node0", "pid": 5000 + proc, "rank": 0, "run": proc, "point": point, "agent": 0,
            "dispatch_id": np.arange(len(kernel)), "kernel": kernel, "start_ns": start, "end_ns": start + dur,
            "source": "rocprofv3-csv"}))
    return finalize_dispatches(pd.concat(frames, ignore_index=True), "synthetic.csv")


def _results(root: Path, dispatches: pd.DataFrame, *, test_id: str = TEST_ID, point: str = POINT) -> Path:
    """A finished results directory as the plugin leaves it (run.json, point.json, tables)."""
    pdir = root / slugify_test_id(test_id) / point
    pdir.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"hardware_key": HW}))
    doc = {"test_id": test_id, "point": point, "status": "ok", "kernels": [], "backend": "rocprofv3", "runs": []}
    (pdir / "point.json").write_text(json.dumps(doc))
    write_tables(pdir, {"dispatches": dispatches})
    return root


CONFIG_FILES = {
    "pyproject.toml": "[tool.pytest.ini_options]\n{key} = \"{value}\"\n",
    "pytest.ini": "[pytest]\n{key} = {value}\n",
    "tox.ini": "[tox]\nenvlist = py\n\n[pytest]\n{key} = {value}\n",
    "setup.cfg": "[metadata]\nname = x\n\n[tool:pytest]\n{key} = {value}\n",
}


def _project(root: Path, name: str, key: str, value: str) -> Path:
    """A project at ``root`` whose configuration file ``name`` sets ``gemmperf_<key>``; returns
    its subdirectory ``sub`` (where the commands run)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(CONFIG_FILES[name].format(key=f"gemmperf_{key}", value=value))
    (root / "sub").mkdir()
    return root / "sub"


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli_main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# ------------------------------------------------------------- the command reads the project's file


@pytest.mark.parametrize("name", sorted(CONFIG_FILES))
def test_baseline_commands_use_the_projects_store(name, tmp_path, monkeypatch, capsys):
    """``baseline refresh`` writes the store the project configures (the one pytest gates
    against), ``baseline show`` lists it, and it says which file it read."""
    project = tmp_path / "proj"
    sub = _project(project, name, "baseline_dir", ".gemmperf/baselines")
    run = _results(tmp_path / "run", _dispatches(1))
    monkeypatch.chdir(sub)
    rc, out, err = _cli(capsys, "baseline", "refresh", "--from", str(run))
    assert rc == 0, err
    store = project / ".gemmperf" / "baselines"
    assert BaselineStore(store).load(TEST_ID, HW) is not None
    assert not (sub / "baselines").exists() and not (project / "baselines").exists()
    assert f"gemmperf: settings from {project / name}" in err.splitlines()
    rc, out, err = _cli(capsys, "baseline", "show")
    assert rc == 0 and "no baselines" not in out and TEST_ID in out, out


def test_cli_and_pytest_resolve_the_store_to_the_same_path(pytester, monkeypatch, capsys):
    """A relative ``gemmperf_baseline_dir`` is relative to the ini file's directory for both,
    wherever below it they start; a flag wins over the file; unset, both use
    ``<rootdir>/baselines``."""
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ngemmperf_baseline_dir = "store/here"\n')
    sub = pytester.mkdir("a")
    (sub / "b").mkdir()
    monkeypatch.chdir(sub / "b")
    from_pytest = glue_options.resolve_options(pytester.parseconfig(), pytester.path).baseline_dir
    run = _results(pytester.path / "run", _dispatches(1))
    assert _cli(capsys, "baseline", "refresh", "--from", str(run))[0] == 0
    assert (pytester.path / "store" / "here").resolve() == Path(from_pytest).resolve()
    assert BaselineStore(from_pytest).load(TEST_ID, HW) is not None
    # the flag wins over the file, relative to where the command runs
    assert _cli(capsys, "baseline", "refresh", "--from", str(run), "--baseline-dir", "mine")[0] == 0
    assert BaselineStore(sub / "b" / "mine").load(TEST_ID, HW) is not None
    (pytester.path / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-ra"\n')
    default = glue_options.resolve_options(pytester.parseconfig(), pytester.path).baseline_dir
    assert Path(default).resolve() == (pytester.path / "baselines").resolve()
    assert _cli(capsys, "baseline", "refresh", "--from", str(run))[0] == 0
    assert BaselineStore(pytester.path / "baselines").load(TEST_ID, HW) is not None


def test_compare_against_the_projects_store(tmp_path, monkeypatch, capsys):
    """``gemmperf compare CAND`` gates against the configured store, as pytest does; naming a
    directory that holds no baseline says where the project's store is."""
    sub = _project(tmp_path / "proj", "pyproject.toml", "baseline_dir", ".gemmperf/baselines")
    monkeypatch.chdir(sub)
    assert _cli(capsys, "baseline", "refresh", "--from", str(_results(tmp_path / "r1", _dispatches(1))))[0] == 0
    cand = _results(tmp_path / "r2", _dispatches(2))
    rc, out, err = _cli(capsys, "compare", str(cand), "--out", str(tmp_path / "o"), "--no-report")
    assert rc == 0, err
    assert "comparing against the baseline store" in err and "unchanged" in out
    (sub / "baselines").mkdir()  # empty, as in a checkout whose store lives elsewhere
    rc, out, err = _cli(capsys, "compare", "baselines", str(cand), "--out", str(tmp_path / "o2"), "--no-report")
    lines = [ln for ln in err.splitlines() if ln.startswith("gemmperf: error")]
    assert rc == 2 and len(lines) == 1 and str(tmp_path / "proj" / ".gemmperf" / "baselines") in lines[0], err


def test_help_reads_no_configuration_and_a_broken_file_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options\nbroken")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    with pytest.raises(SystemExit) as ei:
        cli_main(["baseline", "show", "--help"])
    assert ei.value.code == 0 and "--baseline-dir" in capsys.readouterr().out
    rc, out, err = _cli(capsys, "baseline", "show")
    assert rc == 2 and err.count("\n") == 1 and str(tmp_path / "pyproject.toml") in err, err


def test_find_project_follows_pytest(tmp_path):
    """pytest.ini counts without a [pytest] section; tox.ini / setup.cfg / pyproject.toml only
    with theirs; a bare pyproject.toml names the rootdir when nothing else is found."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    found = find_project(tmp_path / "a" / "b")
    assert found.path == tmp_path / "pyproject.toml" and not found.has_settings and found.root == tmp_path
    (tmp_path / "a" / "tox.ini").write_text("[tox]\nenvlist = py\n")
    assert find_project(tmp_path / "a" / "b").path == tmp_path / "pyproject.toml"
    (tmp_path / "a" / "setup.cfg").write_text("[tool:pytest]\ngemmperf_jobs = 2\n")
    found = find_project(tmp_path / "a" / "b")
    assert found.path == tmp_path / "a" / "setup.cfg" and found.values == {"gemmperf_jobs": "2"}
    (tmp_path / "a" / "pytest.ini").write_text("")
    found = find_project(tmp_path / "a" / "b")
    assert found.path == tmp_path / "a" / "pytest.ini" and found.values == {} and found.has_settings


# ------------------------------------------------------------------------- history defaults


def test_history_commands_default_to_the_configured_store(tmp_path, monkeypatch, capsys):
    sub = _project(tmp_path / "proj", "pytest.ini", "history", "hist")
    monkeypatch.chdir(sub)
    run = _results(tmp_path / "run", _dispatches(1))
    rc, out, err = _cli(capsys, "history", "record", str(run), "--run-id", "r1")
    assert rc == 0, err
    assert (tmp_path / "proj" / "hist").is_dir() and not (sub / "hist").exists()
    rc, out, err = _cli(capsys, "history", "show")
    assert rc == 0 and "1 run(s)" in out, err
    rc, out, err = _cli(capsys, "history", "check", "--out", str(tmp_path / "hc"), "--no-report")
    assert rc == 0, err


def test_history_defaults_to_dot_gemmperf_history_and_off_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    run = _results(tmp_path / "run", _dispatches(1))
    assert _cli(capsys, "history", "record", str(run), "--run-id", "r1")[0] == 0
    assert (tmp_path / ".gemmperf" / "history").is_dir()
    (tmp_path / "pytest.ini").write_text("[pytest]\ngemmperf_history = off\n")
    rc, out, err = _cli(capsys, "history", "show")
    assert rc == 2 and err.splitlines()[-1].startswith("gemmperf: error: no history store") and \
        "gemmperf_history in" in err, err


# ---------------------------------------------------------------------------- one threshold parser

GOOD = [("0", 0.0), ("0%", 0.0), ("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125), ("150%", 1.5)]
BAD = [("5", "threshold '5' is ambiguous: write 5% (or 0.05)"),
       ("12", "threshold '12' is ambiguous: write 12% (or 0.12)"),
       ("lots", "threshold 'lots' is not a number"),
       ("-5%", "threshold '-5%' is negative"),
       ("nan", "threshold 'nan' is not a finite number"),
       ("inf%", "threshold 'inf%' is not a finite number")]


@pytest.mark.parametrize("text,value", GOOD)
def test_threshold_accepted_alike_by_pytest(text, value, pytester):
    assert glue_options.resolve_options(pytester.parseconfig(f"--gemmperf-threshold={text}"), pytester.path).threshold == value
    pytester.makeini(f"[pytest]\ngemmperf_threshold = {text}\n")
    assert glue_options.resolve_options(pytester.parseconfig(), pytester.path).threshold == value


@pytest.mark.parametrize("text,message", BAD)
def test_threshold_refused_alike_by_pytest(text, message, pytester):
    with pytest.raises(pytest.UsageError) as ei:
        glue_options.resolve_options(pytester.parseconfig(f"--gemmperf-threshold={text}"), pytester.path)
    assert str(ei.value).startswith(f"--gemmperf-threshold: {message}") and "\n" not in str(ei.value)
    pytester.makeini(f"[pytest]\ngemmperf_threshold = {text}\n")
    with pytest.raises(pytest.UsageError, match=re.escape(f"gemmperf_threshold (ini): {message}")):
        glue_options.resolve_options(pytester.parseconfig(), pytester.path)


def _samples_csv(path: Path, scale: float, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    rows = [(POINT, k, "dur_ns", f"u{u}", base * scale * rng.lognormal(0, 0.01))
            for u in range(4) for k, base in (("k_a", 1e5), ("k_b", 2e5)) for _ in range(20)]
    pd.DataFrame(rows, columns=["point", "kernel", "metric", "unit", "value"]).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def sides(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sides")
    return _samples_csv(root / "base.csv", 1.0, 1), _samples_csv(root / "cand.csv", 1.0, 2)


@pytest.mark.parametrize("text,value", GOOD)
def test_threshold_accepted_alike_by_the_command(text, value, sides, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _cli(capsys, "compare", str(sides[0]), str(sides[1]), f"--threshold={text}",
                        "--out", str(tmp_path / "o"), "--no-report")
    assert rc in (0, 1), err
    assert set(pd.read_csv(tmp_path / "o" / "verdicts.csv")["threshold"].dropna()) <= {value, 1.0}  # 1.0: cv_robust
    assert f"threshold: {100 * value:g}% (--threshold)" in out.splitlines()


@pytest.mark.parametrize("text,message", BAD)
def test_threshold_refused_alike_by_the_command(text, message, sides, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _cli(capsys, "compare", str(sides[0]), str(sides[1]), f"--threshold={text}",
                        "--out", str(tmp_path / "o"), "--no-report")
    assert rc == 2 and err.startswith(f"gemmperf: error: --threshold: {message}") and err.count("\n") == 1, err
    # the project file is read with the same parser, the message naming the file
    (tmp_path / "pytest.ini").write_text(f"[pytest]\ngemmperf_threshold = {text}\n")
    rc, out, err = _cli(capsys, "compare", str(sides[0]), str(sides[1]), "--out", str(tmp_path / "o"), "--no-report")
    assert rc == 2 and f"{tmp_path / 'pytest.ini'}: gemmperf_threshold: {message}" in err, err


def test_python_api_threshold_values():
    assert parse_threshold(0.05) == 0.05 and parse_threshold(0) == 0.0
    for bad in (5, 1.0, True, -0.1, float("nan")):
        with pytest.raises(ValueError):
            parse_threshold(bad)


def test_bad_threshold_option_exits_4_with_one_line(pytester):
    # in this process: a usage error's one line in a real pytest process is test_sweep.py's
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    out = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning",
                                       "--gemmperf-threshold", "5")
    assert out.ret == 4
    errors = [ln for ln in out.stderr.lines if ln.strip()]
    assert errors == ["ERROR: --gemmperf-threshold: threshold '5' is ambiguous: write 5% (or 0.05)"], errors


# --------------------------------------------------------------- the same runs, the same verdicts

PLUGIN_ARGS = ([] if any(ep.value == "pytest_gemmperf.plugin"
                         for ep in importlib.metadata.entry_points(group="pytest11"))
               else ["-p", "pytest_gemmperf.plugin"])
RULE_TEST = """
from pytest_gemmperf import sweep

@sweep(channels=[28], threads=[256])
def test_mm(gemmperf):
    gemmperf.assert_no_regression(gemmperf.profile(["true"]), threshold={threshold!r})
"""


def test_compare_gates_with_the_tests_own_threshold(pytester, monkeypatch, capsys):
    """pytest gates a test that says ``threshold=0.25`` at 25 %: a 12 % slower run passes. The
    rule is recorded with the run and the baseline, so ``gemmperf compare`` of the same runs (or
    of the store and the run) gives the same verdict and says which threshold it used;
    ``--threshold`` given overrides it."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    (pytester.path / "perf").mkdir()
    (pytester.path / "perf" / "test_mm.py").write_text(RULE_TEST.format(threshold="25%"))
    _results(pytester.path / "stored_base", _dispatches(1))
    _results(pytester.path / "stored_slow", _dispatches(2, scale=1.12))

    def session(replay: str, results: str):
        return pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark", "perf",
                                  f"--gemmperf-replay={replay}", f"--gemmperf-results-dir={results}",
                                  "--gemmperf-baseline-dir=base", "--gemmperf-report-dir=rep",
                                  "--gemmperf-confirm=0", "--gemmperf-telemetry=off", "--gemmperf-history=off")

    session("stored_base", "r1").assert_outcomes(passed=1)
    session("stored_slow", "r2").assert_outcomes(passed=1)
    r1, r2, out_dir = (str(pytester.path / n) for n in ("r1", "r2", "out"))
    rc, out, err = _cli(capsys, "compare", r1, r2, "--out", out_dir, "--no-report")
    assert rc == 0, out + err
    stored, = BaselineStore(pytester.path / "base").load_all()
    assert stored.meta["points"][POINT]["threshold"] == 0.25
    assert f"threshold: 25% (per-test rule recorded with the candidate run of {TEST_ID})" in out.splitlines()
    assert set(pd.read_csv(Path(out_dir) / "verdicts.csv").query("metric == 'dur_ns'")["threshold"]) == {0.25}
    rc, out, err = _cli(capsys, "compare", str(pytester.path / "base"), r2, "--out", out_dir, "--no-report")
    assert rc == 0, out + err
    # the rule travels with a refreshed baseline too
    assert _cli(capsys, "baseline", "refresh", "--from", r1, "--baseline-dir", "refreshed")[0] == 0
    refreshed, = BaselineStore(pytester.path / "refreshed").load_all()
    assert refreshed.meta["points"][POINT]["threshold"] == 0.25
    rc, out, err = _cli(capsys, "compare", str(pytester.path / "refreshed"), str(pytester.path / "stored_slow"),
                        "--out", out_dir, "--no-report")
    assert rc == 0 and f"threshold: 25% (per-test rule recorded with the baseline of {TEST_ID})" in out, out + err
    # told otherwise: the flag applies to every test
    rc, out, err = _cli(capsys, "compare", r1, r2, "--threshold", "5%", "--out", out_dir, "--no-report")
    assert rc == 1 and "threshold: 5% (--threshold)" in out.splitlines(), out + err


def test_a_bad_threshold_in_the_test_fails_it_with_one_line(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    (pytester.path / "perf").mkdir()
    (pytester.path / "perf" / "test_mm.py").write_text(RULE_TEST.format(threshold="5"))
    _results(pytester.path / "stored_base", _dispatches(1))
    out = pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark", "perf",
                             "--gemmperf-replay=stored_base", "--gemmperf-results-dir=r1",
                             "--gemmperf-baseline-dir=base", "--gemmperf-telemetry=off", "--gemmperf-history=off")
    out.assert_outcomes(failed=1)
    out.stdout.fnmatch_lines(["*assert_no_regression: threshold '5' is ambiguous: write 5% (or 0.05)*"])
    assert "Traceback" not in out.stdout.str()


# ----------------------------------------------------------------------- options from the table

#: every option and ini key before the table existed: users' files and CI lines keep working
EXISTING = ("channels", "threads", "kernels", "axis", "results_dir", "baseline_dir", "report_dir", "backend",
            "replay", "repeats", "threshold", "warmup", "timeout", "gpus_per_point", "rocprofv3",
            "update_baselines", "warn_only", "progress", "benchmark_json", "confirm", "learn_variance",
            "telemetry", "telemetry_interval", "history", "history_check", "history_window", "shard", "jobs")


def test_every_setting_is_a_pytest_option_and_an_ini_key(pytest_help):
    assert set(EXISTING) <= set(BY_NAME)
    for s in SETTINGS:
        spelled = s.flag if s.kind == "bool" else f"{s.flag}={s.metavar}"
        assert re.search(rf"^  {re.escape(spelled)}\b", pytest_help, re.M), spelled
        assert re.search(rf"^  {s.ini} \({s.kind}\):", pytest_help, re.M), s.ini


def test_the_commands_flags_state_the_tables_default(capsys):
    for argv, flag, setting in ((["baseline", "refresh"], "--baseline-dir", "baseline_dir"),
                                (["compare"], "--jobs", "jobs"),
                                (["history", "show"], "--history", "history")):
        with pytest.raises(SystemExit):
            cli_main([*argv, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert f"{flag} {BY_NAME[setting].metavar}" in text
        assert f"the project's gemmperf_{setting}, else {BY_NAME[setting].shown}" in text, text
