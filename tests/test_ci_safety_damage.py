"""Damage always named: a corrupt baseline store gated from pytest, a complete run that lost
a point, a full disk under an output, truncated side files, over-long test ids, a run recorded
twice into the history, hostile axis values. Each is one line naming what is wrong and the
documented exit status (docs/reference.md, "Exit status"), never a traceback, never a quiet
pass over what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cli_batch import REPO, run_cli_batch  # noqa: E402
from pytest_gemmperf.errors import GemmperfInputError  # noqa: E402
from gemmperf_pytester_support import gp  # noqa: E402,F401  (fixture)

pytest_plugins = ["pytester"]


def _record_files(base: Path) -> list[Path]:
    return sorted(p for p in base.rglob("*") if p.is_file() and p.parent.name.startswith("v"))


def _truncate(path: Path, keep: int = 40) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _outcomes(result) -> dict[str, int]:
    return {k: v for k, v in result.parseoutcomes().items() if not k.startswith("warning")}


@pytest.mark.usefixtures("without_session_reports")
def test_corrupt_baseline_gated_from_pytest_is_an_error_item_of_one_line(gp):
    """A damaged record (its version's meta.json cut short; its samples cut short) fails no
    test as a regression: each item gated against it errors with one line naming the file, no
    traceback, and the session ends with 4 (an input error), as `gemmperf compare` ends with 2."""
    gp(results="res1").assert_outcomes(passed=2)
    for n, name in enumerate(["meta.json", "samples.parquet"]):
        base = gp.path / f"base{n}"
        shutil.copytree(gp.path / "base", base)
        victims = [p for p in _record_files(base) if p.name == name]
        assert len(victims) == 1
        _truncate(victims[0])
        result = gp(f"--gemmperf-baseline-dir={base}", results=f"res-{n}")
        out = "\n".join(result.outlines)
        assert _outcomes(result) == {"errors": 2}, out
        assert result.ret == pytest.ExitCode.USAGE_ERROR, out
        assert "Traceback" not in out and "GemmperfInputError" not in out and "store/" not in out, out
        # each item's whole report is the one line naming the damaged file
        named = [ln for ln in result.outlines if ln.startswith("gemmperf: ") and str(victims[0]) in ln]
        assert len(named) == 2, out
        assert sum(ln.startswith("not gated (") and str(victims[0]) in ln for ln in result.outlines) == 2, out


# ------------------------------------------------------------------ results of real sessions

DTEST = '''
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28, 56], threads=[256], kernels=[r"^aten::mm$"])
def test_a(gemmperf):
    gemmperf.assert_no_regression(gemmperf.profile([sys.executable, {fake!r}, "--dispatches", "20"], repeats=2))

@sweep(channels=[28], threads=[256], kernels=[r"^aten::mm$"])
def test_b(gemmperf):
    gemmperf.assert_no_regression(gemmperf.profile([sys.executable, {fake!r}, "--dispatches", "20"], repeats=2))
'''
#: the points of each session above (``<test slug>/<point>``)
POINTS = ("test_d.py__test_a/ch28-th256", "test_d.py__test_a/ch56-th256", "test_d.py__test_b/ch28-th256")


#: the tests that read a real pytest session's results, then run the commands in one interpreter
slow = pytest.mark.slow


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> Path:
    """A real pytest session of a three-point sweep: ``rec`` records the baselines into
    ``base``; ``cmp`` is a copy of that run for the readers to compare (and to damage)."""
    from gemmperf_pytester_support import FAKE, PLUGIN_ARGS, SUBPROCESS_CONFTEST

    project = tmp_path_factory.mktemp("damage")
    (project / "test_d.py").write_text(DTEST.format(fake=str(FAKE)))
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(SUBPROCESS_CONFTEST)
    env = {k: v for k, v in os.environ.items()
           if k not in ("FAKE_SCALE", "FAKE_FAIL", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    for name in ("rec",):
        proc = subprocess.run([sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "no:cacheprovider",
                               "-p", "no:benchmark", "-p", "no:xdist", "-p", "no:randomly", "--gemmperf-backend", "torch",
                               "--gemmperf-telemetry", "off", "--gemmperf-jobs", "1", "--gemmperf-baseline-dir=base",
                               f"--gemmperf-results-dir={name}", "test_d.py"],
                              cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    shutil.copytree(project / "rec", project / "cmp")
    return project


def _work(sessions: Path, tmp_path: Path, name: str = "w") -> Path:
    """A private copy of the sessions' project to damage."""
    work = tmp_path / name
    shutil.copytree(sessions, work, symlinks=True)
    return work


def _batch(cwd: Path, commands: dict[str, list[str]]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return run_cli_batch(commands, cwd / "stderr", cwd=cwd, env=env)


def _readers(w: str, tag: str, *extra: str) -> dict[str, list[str]]:
    """Every command that reads the results run ``<w>/cmp``, each writing somewhere of its own."""
    run = f"{w}/cmp"
    return {f"{w}-compare{tag}": ["compare", run, "--baseline-dir", f"{w}/base", "--out", f"{w}/o-cmp{tag}",
                                  "--no-report", *extra],
            f"{w}-refresh{tag}": ["baseline", "refresh", "--from", run, "--baseline-dir", f"{w}/b{tag}", *extra],
            f"{w}-history{tag}": ["history", "record", run, "--history", f"{w}/h{tag}", "--run-id", f"r{tag}", *extra],
            f"{w}-merge{tag}": ["merge", run, "--out", f"{w}/o-merge{tag}", "--no-report", *extra],
            f"{w}-analyze{tag}": ["analyze", run, "--out", f"{w}/o-an{tag}", "--no-report", *extra]}


def _one_line(run, *must: str) -> None:
    lines = [ln for ln in run.stderr.splitlines() if ln.strip() and not ln.startswith("note: ")]
    assert run.returncode == 2 and len(lines) == 1, run
    assert "Traceback" not in run.stderr and all(m in lines[0] for m in must), run


@slow
def test_complete_run_that_lost_a_point_is_an_incomplete_run(sessions, tmp_path):
    """run.json records which points were complete; a test folder, a point folder or a
    point.json gone since makes the run incomplete for every reader: exit 2 with one line
    naming the missing point, and --allow-partial reads what is left."""
    cases = {"folder": ("test_d.py__test_b", POINTS[2]), "point": (POINTS[1], POINTS[1]),
             "pointjson": (f"{POINTS[0]}/point.json", POINTS[0])}
    commands = {}
    for w, (victim, _gone) in cases.items():
        path = _work(sessions, tmp_path, w) / "cmp" / victim
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        commands.update({**_readers(w, ""), **_readers(w, "-p", "--allow-partial")})
    got = _batch(tmp_path, commands)
    for name, run in got.items():
        w = name.split("-", 1)[0]
        if name.endswith("-p"):
            assert run.returncode == 0, (name, run)
        else:
            _one_line(run, f"{w}/cmp", cases[w][1], "records as complete", "--allow-partial")


@slow
def test_analyze_of_a_trace_dir_with_an_unreadable_rank_is_refused(sessions, tmp_path):
    """A rank that cannot be read (here a link to nothing) would be missing from every total:
    analyze ends with 2 naming it, as compare does; --allow-partial analyzes the rest."""
    work = _work(sessions, tmp_path)
    raw = next((work / "rec" / POINTS[0]).glob("run*/raw/torch_profiler"))
    shutil.copytree(raw, work / "tp")
    shutil.rmtree(work / "tp" / "rank1")
    (work / "tp" / "rank1").symlink_to(work / "nowhere")
    got = _batch(work, {"analyze": ["analyze", "tp", "--out", "a1", "--no-report"],
                        "analyze-report": ["analyze", "tp", "--out", "a2"],
                        "partial": ["analyze", "tp", "--out", "a3", "--no-report", "--allow-partial"]})
    _one_line(got["analyze"], "tp/rank1", "--allow-partial")
    _one_line(got["analyze-report"], "tp/rank1", "--allow-partial")
    assert got["partial"].returncode == 0 and "tp/rank1" in got["partial"].stderr
    assert not (work / "a1" / "summary.json").exists() and not (work / "a2" / "summary.json").exists()


TABLES = ("counters.parquet", "agents.parquet", "dispatches.parquet", "baseline_samples.parquet",
          "telemetry.parquet")


@slow
def test_damaged_table_of_a_point_is_named_by_every_reader(sessions, tmp_path):
    """A table of a finished point cut short (a telemetry table is planted whole first) is
    named by compare, refresh, history record and merge: exit 2, one line, the file's path."""
    commands = {}
    for n, table in enumerate(TABLES):
        path = _work(sessions, tmp_path, f"t{n}") / "cmp" / POINTS[2] / table
        if not path.exists():
            shutil.copy(path.with_name("agents.parquet"), path)
        _truncate(path, keep=len(path.read_bytes()) // 2)
        commands.update({k: v for k, v in _readers(f"t{n}", "").items() if "-analyze" not in k})
    got = _batch(tmp_path, commands)
    for name, run in got.items():
        n = int(name.split("-", 1)[0][1:])
        _one_line(run, f"t{n}/cmp/{POINTS[2]}/{TABLES[n]}")


@slow
def test_damaged_version_meta_is_named_and_a_damaged_summary_copy_repaired(sessions, tmp_path):
    """The version's own meta.json is read against its pointer: cut short, compare names it
    (exit 2) and refresh names the record it replaces. The derived summary.yaml cut short is
    rewritten by a refresh that changes nothing else, and said."""
    work = _work(sessions, tmp_path)
    record = next((work / "base").glob("*/test_d.py__test_b"))
    vmeta = next(record.glob("v*/meta.json"))
    _truncate(vmeta)
    summary = next((work / "base").glob("*/test_d.py__test_a")) / "summary.yaml"
    _truncate(summary)
    got = _batch(work, {"compare": ["compare", "cmp", "--baseline-dir", "base", "--out", "o1", "--no-report"],
                        "refresh": ["baseline", "refresh", "--from", "rec", "--baseline-dir", "base"],
                        "compare-after": ["compare", "cmp", "--baseline-dir", "base", "--out", "o2", "--no-report"]})
    assert got["compare"].returncode == 2 and str(vmeta.relative_to(work)) in got["compare"].stderr, got
    assert "Traceback" not in got["compare"].stderr
    assert got["refresh"].returncode == 0, got
    assert "replacing damaged record" in got["refresh"].stderr and str(vmeta.relative_to(work)) in got["refresh"].stderr
    assert f"rewrote {summary.relative_to(work)}" in got["refresh"].stderr, got
    assert summary.read_bytes() == next(summary.parent.glob("v*/summary.yaml")).read_bytes()
    assert got["compare-after"].returncode == 0, got


@pytest.fixture
def full_disk(tmp_path):
    """A directory on a real file system with 24 KiB left (a tmpfs mounted here: needs root)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    mount = shutil.which("mount")
    if os.geteuid() != 0 or mount is None:
        pytest.skip("mounting a small tmpfs needs root")
    res = subprocess.run([mount, "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        st = os.statvfs(mnt)
        (mnt / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 24 * 1024))
        yield mnt
    finally:
        subprocess.run([shutil.which("umount") or "umount", str(mnt)], capture_output=True)


@slow
def test_compare_out_onto_a_full_disk_is_exit_2_with_one_line(sessions, tmp_path, full_disk):
    """The verdicts fit, the report does not: exit 2, one error line naming the file and the
    reason, nothing else on stderr (no finalizer's traceback of a half-written workbook)."""
    work = _work(sessions, tmp_path)
    got = _batch(work, {"compare": ["compare", "cmp", "--baseline-dir", "base", "--out", str(full_disk / "o")]})
    run = got["compare"]
    lines = [ln for ln in run.stderr.splitlines() if ln.strip() and not ln.startswith("note: ")]
    assert run.returncode == 2, run
    assert len(lines) == 1 and f"could not write report {full_disk / 'o'}" in lines[0], run
    assert "No space left on device" in lines[0] and "Error" not in lines[0], run
    assert "Traceback" not in run.stderr and "ZipFile" not in run.stderr, run
    assert (full_disk / "o" / "verdicts.csv").is_file()
    assert not [p.name for p in (full_disk / "o").iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------ numeric settings

def _numeric_settings():
    """Every setting whose default reads as a number: each is a count, a time or a size."""
    from pytest_gemmperf.config import SETTINGS

    out = []
    for st in SETTINGS:
        if st.parse is None or st.default is None or isinstance(st.default, bool):
            continue
        try:
            value = st.parse(str(st.default))
        except ValueError:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(st)
    return out


def test_every_numeric_setting_refuses_negative_and_non_finite_values():
    """No count, time or size of ours can be negative or infinite; a time limit or an interval
    cannot be 0 either (no run could meet it)."""
    settings = _numeric_settings()
    assert {"timeout", "repeats", "confirm", "telemetry_interval", "history_window"} <= {s.name for s in settings}
    for st in settings:
        for bad in ("-5", "-0.5", "nan", "inf", "-inf", "1e400", "five"):
            with pytest.raises(ValueError) as ei:
                st.parse(bad)
            assert "\n" not in str(ei.value), (st.name, bad)
    for st in settings:
        if st.name in ("timeout", "telemetry_interval"):
            for bad in ("0", "0.0", "-0"):
                with pytest.raises(ValueError, match="must be"):
                    st.parse(bad)
    from pytest_gemmperf.config import SETTINGS

    timeout = next(s for s in SETTINGS if s.name == "timeout")
    assert timeout.parse("0.5") == 0.5 and timeout.parse("1800") == 1800


@pytest.mark.parametrize("value", ["-5", "0"])
def test_pytest_refuses_a_non_positive_timeout_as_a_usage_error(pytester, value):
    """``--gemmperf-timeout=-5`` (or 0, or in the ini file) is one usage line and exit 4,
    before any workload runs, not a session of points that all "timed out after -5 s"."""
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    for args, ini in (([f"--gemmperf-timeout={value}"], None), ([], f"[pytest]\ngemmperf_timeout = {value}\n")):
        if ini:
            pytester.makeini(ini)
        result = pytester.runpytest("-p", "no:cacheprovider", *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
        err = [ln for ln in result.errlines if ln.strip()]
        assert len(err) == 1 and "timeout" in err[0] and "must be > 0 seconds" in err[0], result.errlines


# ------------------------------------------------------------------ the history

def _history_values(test: str, seed: int):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_history_store import _values

    return _values(test, seed=seed)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_test_ids_of_any_length_reach_the_history_and_stay_apart(tmp_path, seed):
    """Test ids of 100 to 400 characters (ASCII, non-ASCII, every character a file name may
    not hold), some sharing their first 300: each is recorded whole, read back whole, filtered
    by its own id only, counted once per run and pruned; an id that fits keeps its old
    directory name (histories written before stay readable)."""
    import random
    import urllib.parse

    from pytest_gemmperf.history.store import HistoryStore, RunInfo

    rng = random.Random(seed)
    alphabet = "abcXYZ09_-.:/[]|é日本 %~\\"
    stem = "perf/test_long.py::test_" + "".join(rng.choice(alphabet) for _ in range(300))
    ids = [stem + "a", stem + "b", "perf/test_x.py::test_" + "".join(rng.choice(alphabet) for _ in range(rng.randint(80, 400))),
           "perf/test_short.py::test_s[日本]"]
    store = HistoryStore(tmp_path / "h")
    for run in range(2):
        for n, test in enumerate(ids):
            store.append(_history_values(test, seed=10 * run + n), RunInfo(f"r{run}", time=f"2026-11-2{run}T00:00:00Z", hw_key="hw"))
    got = store.read()
    assert sorted(set(got["test"])) == sorted(ids)
    for test in ids:
        one = store.read(test=test)
        assert set(one["test"]) == {test} and set(one["run_id"]) == {"r0", "r1"}
    for p in (tmp_path / "h").rglob("*"):
        assert len(p.name.encode()) <= 255
    short = tmp_path / "h" / "hw_key=hw" / f"test={urllib.parse.quote(ids[-1], safe='')}"
    assert short.is_dir()  # an id that fits: the directory it always had
    runs = store.runs()
    assert list(runs["run_id"]) == ["r0", "r1"] and list(runs["tests"]) == [len(ids)] * 2
    gone = store.prune(keep_last=1, dry_run=False)
    assert sorted(set(gone["test"])) == sorted(ids) and set(store.read()["run_id"]) == {"r1"}


def test_one_runs_values_are_recorded_once_whatever_its_run_id(tmp_path):
    """The same run (its values and time) recorded under more ids adds no run: each is refused
    with one line naming the run that holds it; --replace moves it to the new id; a new
    measurement, identical values at another time, and the same values of another test are
    recorded."""
    from pytest_gemmperf.errors import GemmperfInputError
    from pytest_gemmperf.history.store import HistoryStore, RunInfo

    store = HistoryStore(tmp_path / "h")
    same = _history_values("perf/t.py::test_a", seed=1)
    when = "2026-11-20T10:00:00Z"
    store.append(same, RunInfo("first", time=when, hw_key="hw"))
    for n in range(12):
        shuffled = same.sample(frac=1.0, random_state=n).reset_index(drop=True)  # any row order
        with pytest.raises(GemmperfInputError) as ei:
            store.append(shuffled, RunInfo(f"id{n}", time=when, hw_key="hw"))
        msg = str(ei.value)
        assert "already in the history as run 'first'" in msg and "--replace" in msg and "\n" not in msg
    assert list(store.runs()["run_id"]) == ["first"]
    store.append(same, RunInfo("moved", time=when, hw_key="hw"), replace=True)
    assert list(store.runs()["run_id"]) == ["moved"]
    store.append(_history_values("perf/t.py::test_a", seed=2), RunInfo("second", time=when, hw_key="hw"))
    store.append(same, RunInfo("later", time="2026-11-21T10:00:00Z", hw_key="hw"))
    store.append(same.assign(test="perf/t.py::test_b"), RunInfo("moved", time=when, hw_key="hw"))
    runs = store.runs()
    assert sorted(runs["run_id"]) == ["later", "moved", "second"]
    assert int(runs.loc[runs["run_id"] == "moved", "tests"].iloc[0]) == 2


@slow
def test_history_record_of_one_results_dir_under_many_ids_is_one_run(sessions, tmp_path):
    """`gemmperf history record` of the same results under a second id: exit 2, one line;
    --replace moves the run: the history holds one run."""
    work = _work(sessions, tmp_path)
    got = _batch(work, {"r1": ["history", "record", "cmp", "--history", "h", "--run-id", "one"],
                        "r2": ["history", "record", "cmp", "--history", "h", "--run-id", "two"],
                        "copy": ["history", "record", "rec", "--history", "h", "--run-id", "three"],
                        "move": ["history", "record", "cmp", "--history", "h", "--run-id", "four", "--replace"]})
    assert got["r1"].returncode == 0, got
    _one_line(got["r2"], "already in the history as run 'one'", "--replace")
    _one_line(got["copy"], "already in the history as run 'one'")  # a copy of the run's directory
    assert got["move"].returncode == 0, got
    from pytest_gemmperf.history.store import HistoryStore

    assert list(HistoryStore(work / "h").runs()["run_id"]) == ["four"]


# ------------------------------------------------------------------ a record's own checks

def _good_meta() -> dict:
    from pytest_gemmperf.store.record import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "test_id": "t.py::test_a", "hw_key": "hw", "generation": 3,
            "version": "v3", "files": {"samples.parquet": {"sha256": "a" * 64}, "summary.yaml": {"sha256": "b" * 64}}}


def _meta_cases():
    """(name, change to a good meta.json) -> the words the refusal must hold."""
    def drop(*keys):
        def f(m):
            d = m
            for k in keys[:-1]:
                d = d[k]
            del d[keys[-1]]
        return f

    def put(value, *keys):
        def f(m):
            d = m
            for k in keys[:-1]:
                d = d[k]
            d[keys[-1]] = value
        return f

    return {
        "no samples checksum": (drop("files", "samples.parquet", "sha256"), "checksums"),
        "no summary checksum": (drop("files", "summary.yaml"), "checksums"),
        "checksum not text": (put(5, "files", "samples.parquet", "sha256"), "checksums"),
        "files not a map": (put([], "files"), "checksums"),
        "no files": (drop("files"), "'files'"),
        "older schema": (put(0, "schema_version"), "schema_version 0"),
        "newer schema": (put(2, "schema_version"), "newer gemmperf"),
        "schema as text": (put("1", "schema_version"), "schema_version '1'"),
        "no schema": (drop("schema_version"), "no schema_version"),
        "no test_id": (drop("test_id"), "'test_id'"),
        "empty test_id": (put("", "test_id"), "'test_id'"),
        "test_id not text": (put(7, "test_id"), "'test_id'"),
        "no hw_key": (drop("hw_key"), "'hw_key'"),
        "hw_key null": (put(None, "hw_key"), "'hw_key'"),
        "negative generation": (put(-1, "generation"), "'generation'"),
        "generation bool": (put(True, "generation"), "'generation'"),
        "generation text": (put("3", "generation"), "'generation'"),
        "version outside": (put("../v3", "version"), "'version'"),
        "version not v<n>": (put("3", "version"), "'version'"),
    }


def test_record_meta_validation_refuses_every_damage_with_one_line():
    """Each field meta.json must hold, wrong or missing, is one line naming the file: the
    checks on checksums, schema version, ids, generation and version are each needed."""
    import copy
    import json

    from pytest_gemmperf.errors import GemmperfInputError
    from pytest_gemmperf.store.record import _parse_meta

    path = Path("base/hw/t/meta.json")
    assert _parse_meta(json.dumps(_good_meta()).encode(), path)["version"] == "v3"
    for name, (change, words) in _meta_cases().items():
        meta = copy.deepcopy(_good_meta())
        change(meta)
        with pytest.raises(GemmperfInputError) as ei:
            _parse_meta(json.dumps(meta).encode(), path)
        assert str(ei.value).startswith(f"{path}: ") and words in str(ei.value) and "\n" not in str(ei.value), name
    for raw in (b"", b"{", b"[]", b"\xff\xfe\x00", b"null"):
        with pytest.raises(GemmperfInputError):
            _parse_meta(raw, path)


def _samples_parquet(**columns) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


def test_record_samples_validation_refuses_missing_keys_and_wrong_types():
    """samples.parquet must hold complete string keys and float64 values: a null key, a
    number where a key belongs, integer or text values, a missing column are each refused."""
    import pyarrow as pa

    from pytest_gemmperf.errors import GemmperfInputError
    from pytest_gemmperf.store.record import (_samples_from_parquet, _samples_to_parquet,
                                              normalize_samples)

    import pandas as pd

    good = normalize_samples(pd.DataFrame({"point": ["p", "p"], "kernel": ["k", "k"], "metric": ["dur_ns"] * 2,
                                           "unit": ["u0", "u1"], "value": [1.0, 2.0]}))
    back = _samples_from_parquet(_samples_to_parquet(good), Path("s.parquet"))
    assert back["value"].tolist() == [1.0, 2.0] and str(back["value"].dtype) == "float64"
    keys = {c: pa.array(["x", "y"]) for c in ("point", "kernel", "metric", "unit")}
    cases = {
        "null point": ({**keys, "point": pa.array(["x", None]), "value": pa.array([1.0, 2.0])}, "'point'"),
        "null unit": ({**keys, "unit": pa.array([None, None], pa.string()), "value": pa.array([1.0, 2.0])}, "'unit'"),
        "numeric kernel": ({**keys, "kernel": pa.array([1, 2]), "value": pa.array([1.0, 2.0])}, "'kernel'"),
        "int values": ({**keys, "value": pa.array([1, 2])}, "'value'"),
        "text values": ({**keys, "value": pa.array(["1", "2"])}, "'value'"),
        "float32 values": ({**keys, "value": pa.array([1.0, 2.0], pa.float32())}, "'value'"),
        "no value": (dict(keys), "lack"),
        "no metric": ({k: v for k, v in keys.items() if k != "metric"} | {"value": pa.array([1.0, 2.0])}, "lack"),
    }
    for name, (cols, words) in cases.items():
        with pytest.raises(GemmperfInputError) as ei:
            _samples_from_parquet(_samples_parquet(**cols), Path("s.parquet"))
        assert words in str(ei.value) and str(ei.value).startswith("s.parquet: "), (name, str(ei.value))
    with pytest.raises(GemmperfInputError, match="unreadable parquet"):
        _samples_from_parquet(_samples_to_parquet(good)[:-20], Path("s.parquet"))


def test_record_summary_and_variance_validation():
    """summary.yaml must be this schema's and name the record's test and hardware; the
    variance history must have its columns and df > 0, ss >= 0 on every row."""
    import pyarrow as pa

    from pytest_gemmperf.errors import GemmperfInputError
    from pytest_gemmperf.store.record import SCHEMA_VERSION, _check_summary, _variance_from_parquet

    meta = _good_meta()
    ok = f"schema_version: {SCHEMA_VERSION}\ntest_id: t.py::test_a\nhw_key: hw\n".encode()
    _check_summary(ok, Path("summary.yaml"), meta)
    for bad in (b"[", b"\xff", b"- a\n", ok.replace(b"hw_key: hw", b"hw_key: other"),
                ok.replace(b"test_a", b"test_b"), ok.replace(f"schema_version: {SCHEMA_VERSION}".encode(), b"schema_version: 9"),
                ok.replace(f"schema_version: {SCHEMA_VERSION}\n".encode(), b"")):
        with pytest.raises(GemmperfInputError):
            _check_summary(bad, Path("summary.yaml"), meta)
    row = {"run": pa.array(["r"]), "seq": pa.array([1]), "point": pa.array(["p"]), "kernel": pa.array(["k"]),
           "metric": pa.array(["dur_ns"]), "df": pa.array([3.0]), "ss": pa.array([0.5])}
    assert len(_variance_from_parquet(_samples_parquet(**row), Path("v.parquet"))) == 1
    for change, words in (({"df": pa.array([0.0])}, "df must be > 0"), ({"df": pa.array([float("nan")])}, "df must be > 0"),
                          ({"ss": pa.array([-1.0])}, "ss >= 0"), ({"ss": pa.array([float("nan")])}, "ss >= 0"),
                          ({"seq": None}, "lacks columns")):
        cols = {k: v for k, v in {**row, **change}.items() if v is not None}
        with pytest.raises(GemmperfInputError, match=words):
            _variance_from_parquet(_samples_parquet(**cols), Path("v.parquet"))


def test_history_record_onto_a_full_history_names_the_history_and_records_nothing(tmp_path, capsys, monkeypatch):
    """A write refused at any step of `history record` (file, data, sync, link, directory):
    exit 2, one line naming a file of the history (never the input run), and no file of the
    run left behind, so the same command succeeds once there is room."""
    import errno

    from test_ci_safety_faults import Faults, make_results, spread

    from pytest_gemmperf.cli import main

    results = make_results(tmp_path / "run", seed=3)
    hist = tmp_path / "hist"
    argv = ["history", "record", str(results), "--history", str(hist), "--run-id", "r1"]
    with monkeypatch.context() as m:
        counter = Faults(m, hist)
        assert main(argv) == 0
    capsys.readouterr()
    total = counter.steps
    assert total >= 4
    for n in spread(total, most=6):
        shutil.rmtree(hist)
        with monkeypatch.context() as m:
            Faults(m, hist, fail_at=n, err=errno.ENOSPC)
            rc = main(argv)
        err = capsys.readouterr().err
        if rc == 0:  # a step the call tolerates (a directory that exists)
            continue
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert rc == 2 and len(lines) == 1, (n, err)
        assert f"could not write history file {hist}" in lines[0] and "No space left on device" in lines[0], (n, err)
        assert str(results) + ":" not in lines[0]
        assert not [p for p in hist.rglob("*") if p.is_file()], (n, list(hist.rglob("*")))
        assert main(argv) == 0, capsys.readouterr().err
        capsys.readouterr()


# ------------------------------------------------------------------ point ids

def _ids(**axes) -> list[str]:
    from pytest_gemmperf.sweep import spec_of, sweep

    return [p.id for p in spec_of(sweep(**axes).mark).points()]


def test_non_ascii_axis_values_give_distinct_point_ids_and_ascii_ids_stay():
    """Values that clean to the same text (all non-ASCII, or differing only in non-ASCII
    characters) keep distinct, file-name-safe ids; ASCII values keep the ids they had."""
    import random

    ids = _ids(lang=["日本", "中文", "한국어", "é1", "ü1", "ü", "ascii"])
    assert len(set(ids)) == len(ids)
    assert ids[-1] == "langascii"
    assert all(i.isascii() and "/" not in i and not i.startswith(".") for i in ids), ids
    assert _ids(channels=[28, 56], threads=[256]) == ["ch28-th256", "ch56-th256"]
    assert _ids(mode=["a b", "x.y", "1e-3"]) == ["modea_b", "modex.y", "mode1e_3"]
    rng = random.Random(5)
    words = list({"".join(rng.choice("αβγδ日本中文한국ёж") for _ in range(rng.randint(1, 6))) for _ in range(200)})
    assert len(set(_ids(w=words))) == len(words)


def test_history_show_and_check_print_no_numpy_warning(tmp_path, capsys):
    """Series of any finite values (zeros, negatives, one unit, constant, a change of 600
    orders of magnitude, the float limits) are shown and checked without a raw warning."""
    import warnings

    import pandas as pd

    from pytest_gemmperf.cli import main
    from pytest_gemmperf.history.store import HistoryStore, RunInfo

    series = {"explode": [[1e-300], [1e300]], "collapse": [[1e300, 1e308], [1e-300, 5e-324]],
              "zeros": [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], "neg": [[-1.0, -2.0], [1.0, 2.0], [0.0, 1.0]],
              "one": [[5.0]], "const": [[3.0, 3.0]] * 4, "limits": [[1.7e308], [-1.7e308], [5e-324]]}
    store = HistoryStore(tmp_path / "h")
    for run in range(4):
        frames = [pd.DataFrame({"test": "t", "point": name, "kernel": "k", "metric": "dur_ns",
                                "unit": [f"u{j}" for j in range(len(runs[run]))], "value": runs[run]})
                  for name, runs in series.items() if run < len(runs)]
        store.append(pd.concat(frames, ignore_index=True), RunInfo(f"r{run}", time=f"2026-01-0{run + 1}", hw_key="hw"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["history", "show", "--history", str(tmp_path / "h")]) == 0
        main(["history", "check", "--history", str(tmp_path / "h"), "--out", str(tmp_path / "c"), "--no-report"])
    err = capsys.readouterr().err
    assert [str(w.message) for w in caught] == [] and "Warning" not in err, err


# ------------------------------------------------------------------ signals

def test_interrupt_while_the_command_starts_is_one_line(monkeypatch, capsys):
    """Ctrl-C while the parser is built (the command modules load) is one line and 130,
    as it is later; no traceback."""
    import pytest_gemmperf.cli as cli

    def interrupted(*_command):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["compare", "a", "b"]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["gemmperf: interrupted"]


def _sigint_default() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background runner's child ignores SIGINT


@slow
@pytest.mark.parametrize("sig,rc,line", [("SIGTERM", 143, "gemmperf: terminated (SIGTERM)"),
                                         ("SIGINT", 130, "gemmperf: interrupted")])
def test_a_signal_to_a_running_command_is_one_line_and_a_documented_status(sessions, tmp_path, sig, rc, line):
    """SIGTERM (a cancelled CI job) or SIGINT while a command works: one line, 128 + the
    signal, nothing half-written in its output directory."""
    import signal
    import time

    work = _work(sessions, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    err_path = work / "err"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "pytest_gemmperf.cli", "compare", "cmp", "--baseline-dir", "base",
                                 "--out", "o"], cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                preexec_fn=_sigint_default)
        try:
            deadline = time.monotonic() + 120
            while b"note: " not in err_path.read_bytes():  # the command's own code runs
                assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()
                time.sleep(0.02)
            proc.send_signal(getattr(signal, sig))
            got = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = err_path.read_text()
    assert got == rc, text
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("note: ")]
    assert lines == [line], text
    assert not [p for p in (work / "o").rglob("*.tmp")] if (work / "o").exists() else True


# ------------------------------------------------------------------ the exit status table

def _exit_table() -> dict[str, tuple[str, str]]:
    """docs/reference.md's "Exit status" table: class -> (pytest cell, gemmperf cell)."""
    text = (REPO / "docs" / "reference.md").read_text()
    section = text.split("## Exit status", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].endswith("`"):
            rows[cells[0].strip("`")] = (cells[2], cells[3])
    return rows


def _first_int(cell: str) -> int | None:
    import re

    m = re.match(r"\s*(\d+)", cell)
    return int(m.group(1)) if m else None


def test_exit_status_table_matches_what_each_failure_class_ends_with(tmp_path, monkeypatch, capsys):
    """Every class of the table ends the way the table says: each gemmperf row is run (a
    case of that class, in this process), each pytest row is pytest's exit code of its kind."""
    import json
    import signal as sig

    import pytest_gemmperf.cli as cli
    from test_baseline import make_results
    from test_settings import _samples_csv

    table = _exit_table()
    assert set(table) == {"ok", "regression", "undecided", "test-failure", "usage", "input", "incomplete",
                          "output", "internal", "interrupted", "terminated"}
    pytest_codes = {"ok": pytest.ExitCode.OK, "regression": pytest.ExitCode.TESTS_FAILED,
                    "undecided": pytest.ExitCode.OK,
                    "test-failure": pytest.ExitCode.TESTS_FAILED, "usage": pytest.ExitCode.USAGE_ERROR,
                    "input": pytest.ExitCode.USAGE_ERROR, "incomplete": None, "output": pytest.ExitCode.USAGE_ERROR,
                    "internal": pytest.ExitCode.INTERNAL_ERROR, "interrupted": pytest.ExitCode.INTERRUPTED,
                    "terminated": pytest.ExitCode.INTERRUPTED}
    for name, code in pytest_codes.items():
        assert _first_int(table[name][0]) == (None if code is None else int(code)), name

    monkeypatch.chdir(tmp_path)
    base = _samples_csv(tmp_path / "base.csv", 1.0, 1)
    same = _samples_csv(tmp_path / "same.csv", 1.0, 2)
    slower = _samples_csv(tmp_path / "slower.csv", 1.3, 3)
    run = make_results(tmp_path / "run", seed=1, failed_point=False)
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**doc, "status": "interrupted"}))
    (tmp_path / "a-file").write_text("")

    def status(argv, patch=None) -> int:
        # SIGTERM at its default action, as a command starts with: cli.main takes it over only
        # then (this session's own handler, tests/conftest.py, would keep it and end the session)
        previous = sig.signal(sig.SIGTERM, sig.SIG_DFL)
        try:
            with monkeypatch.context() as m:
                if patch:
                    patch(m)
                try:
                    rc = cli.main([str(a) for a in argv])
                except SystemExit as exc:
                    rc = exc.code
        finally:
            sig.signal(sig.SIGTERM, previous)
        capsys.readouterr()
        return int(rc)

    def raising(exc):
        def func(args):
            raise exc
        return lambda m: m.setattr(cli, "_project_settings", lambda args: setattr(args, "func", func) or {})

    def sigterm(m):
        m.setattr(cli, "_project_settings", lambda args: setattr(
            args, "func", lambda a: (os.kill(os.getpid(), sig.SIGTERM), __import__("time").sleep(5))) or {})

    def interrupt(m):
        m.setattr(cli, "build_parser", lambda *_command: (_ for _ in ()).throw(KeyboardInterrupt()))

    cases = {
        "ok": (["compare", base, same, "--out", "o1", "--no-report"], None),
        "regression": (["compare", base, slower, "--out", "o2", "--no-report"], None),
        "usage": (["compare", base, same, "--threshold", "5"], None),
        "input": (["compare", base, tmp_path / "missing.csv"], None),
        "incomplete": (["baseline", "refresh", "--from", run, "--baseline-dir", "b"], None),
        "output": (["compare", base, same, "--out", tmp_path / "a-file" / "o", "--no-report"], None),
        "internal": (["compare", base, same], raising(RuntimeError("a bug"))),
        "interrupted": (["compare", base, same], interrupt),
        "terminated": (["compare", base, same], sigterm),
    }
    for name, (argv, patch) in cases.items():
        assert status(argv, patch) == _first_int(table[name][1]), name
    assert table["test-failure"][1] == "-"


@pytest.mark.usefixtures("without_session_reports")
def test_pytest_results_dir_full_mid_session_exits_4_not_1(gp, monkeypatch):
    """A results directory that fills up while the points run errors their items and ends the
    session with 4, as a read-only one does at the start: never 1, the exit of a regression."""
    import errno

    from test_ci_safety_faults import Faults

    res = gp.path / "res"
    with monkeypatch.context() as m:
        counter = Faults(m, res, ops=["open", "write", "fsync", "replace", "mkdir"])
        gp(results="res").assert_outcomes(passed=2)
    shutil.rmtree(res)
    with monkeypatch.context() as m:
        Faults(m, res, ops=["open", "write", "fsync", "replace", "mkdir"], fail_at=counter.steps // 2,
               err=errno.ENOSPC, sticky=True)
        result = gp(results="res")
    out = "\n".join(result.outlines)
    outcomes = _outcomes(result)
    assert outcomes.get("errors", 0) >= 1 and "failed" not in outcomes, out
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert "No space left on device" in out and "Traceback" not in out


@slow
def test_the_report_reads_no_planted_link(sessions, tmp_path):
    """Links planted in a results directory (a test's verdicts.csv, a point's telemetry table
    and point.json, run.json, a whole test directory) pointing at another file: the report
    refuses each with one line naming the link; the target's text never reaches a report."""
    from pytest_gemmperf.report import write_results_reports

    secret = tmp_path / "secret.csv"
    secret.write_text("test,point,kernel,metric,verdict,note\nSECRET-TEXT,p,k,m,regression,x\n")
    plants = {"verdicts": (f"{POINTS[0].split('/')[0]}/verdicts.csv", secret),
              "telemetry": (f"{POINTS[0]}/telemetry.parquet", None),
              "run.json": ("run.json", secret),
              "test dir": ("test_d.py__test_link", None)}
    for n, (name, (rel, target)) in enumerate(plants.items()):
        work = _work(sessions, tmp_path, f"l{n}")
        link = work / "cmp" / rel
        if target is None:
            target = tmp_path / f"target{n}"
            if name == "test dir":
                shutil.copytree(work / "cmp" / "test_d.py__test_b", target)
                (target / "verdicts.csv").write_text(secret.read_text())
            else:
                shutil.copy(work / "cmp" / POINTS[0] / "agents.parquet", target)
        if link.exists():
            link.unlink()
        link.symlink_to(target)
        with pytest.raises(GemmperfInputError) as ei:
            write_results_reports(work / "cmp", work / "report")
        assert "symbolic link" in str(ei.value) and str(link) in str(ei.value), (name, str(ei.value))
        assert not any("SECRET-TEXT" in p.read_text(errors="replace") for p in (work / "report").rglob("*")
                       if p.is_file()) if (work / "report").exists() else True
