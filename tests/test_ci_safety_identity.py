"""Identity in real CI: two sessions never share a results folder, two pytest items never share a
point (results folder, baseline record, history series), and records written under the old
keys are still found and move to the new key on their next save."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest_plugins = ["pytester"]
# no test here reads report.html / report.xlsx (conftest.py: without_session_reports)
pytestmark = pytest.mark.usefixtures("without_session_reports")

from gemmperf_pytester_support import FAKE, PLUGIN_ARGS, REPO, SUBPROCESS_CONFTEST, gp  # noqa: E402,F401 - gp: fixture

import pytest_gemmperf.run.results as res  # noqa: E402
from pytest_gemmperf.store.baselines import BaselineStore  # noqa: E402
from pytest_gemmperf.store.hardware import sanitize  # noqa: E402
from pytest_gemmperf.store.record import BaselineRecord, slug_for_test  # noqa: E402

HW = "cpu-test"
NOW = dt.datetime(2030, 5, 6, 7, 8, 9)


# --------------------------------------------------------------------------- sessions


@pytest.mark.parametrize("sessions", [2, 7])
def test_sessions_started_in_the_same_second_get_their_own_folder(tmp_path, sessions):
    made = [res.timestamped_dir(tmp_path / "results", NOW) for _ in range(sessions)]
    assert len(set(made)) == sessions
    assert all(p.is_dir() and p.parent == tmp_path / "results" for p in made)
    assert all(p.name.startswith(NOW.strftime(res.TIMESTAMP_FORMAT)) for p in made)


def test_a_taken_name_is_never_reused(tmp_path):
    draws = iter(["aaaaaa", "aaaaaa", "aaaaaa", "bbbbbb"])
    first = res.timestamped_dir(tmp_path, NOW, suffix=lambda: next(draws))
    (first / "run.json").write_text("{}")  # the other session's file stays its own
    second = res.timestamped_dir(tmp_path, NOW, suffix=lambda: next(draws))
    assert first != second and second.name.endswith("bbbbbb")
    assert (first / "run.json").read_text() == "{}" and not any(second.iterdir())


_FROZEN_CLOCK = f"""
import datetime
from pytest_gemmperf.run import results

_made = results.timestamped_dir

def _same_second(base, now=None, **kw):
    return _made(base, datetime.datetime(2030, 5, 6, 7, 8, 9), **kw)

results.timestamped_dir = _same_second
"""

_ONE_POINT = f"""
import sys
from pytest_gemmperf import sweep

@sweep(threads=[1], kernels=[r"^aten::mm$"])
def test_one(gemmperf):
    gemmperf.assert_no_regression(gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "20"]))
"""


def test_two_concurrent_sessions_in_the_same_second_keep_all_their_processes(pytester):
    # both sessions run in a subprocess, and nothing here reads their reports
    pytester.makepyfile(conftest=_FROZEN_CLOCK + SUBPROCESS_CONFTEST, test_one=_ONE_POINT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    procs = {repeats: subprocess.Popen(
        [sys.executable, "-m", "pytest", *PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
         "-p", "no:xdist", "--gemmperf-backend", "torch", "--gemmperf-telemetry", "off",
         f"--gemmperf-repeats={repeats}", f"--gemmperf-baseline-dir=base{repeats}", "test_one.py"],
        cwd=pytester.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for repeats in (2, 3)}
    outs = {r: p.communicate(timeout=300)[0] for r, p in procs.items()}
    for r, p in procs.items():
        assert p.returncode == 0, outs[r]
    runs = [d for d in (pytester.path / ".gemmperf" / "results").iterdir() if d.name != "latest"]
    assert len(runs) == 2, runs
    seen = set()
    for run in runs:
        assert run.name.startswith("2030-05-06T07-08-09")
        point = run / "test_one.py__test_one" / "th1"
        pj = json.loads((point / "point.json").read_text())
        repeats = pj["repeats"]
        seen.add(repeats)
        assert f"--gemmperf-repeats={repeats}" in json.loads((run / "run.json").read_text())["argv"]
        assert sorted(r["run"] for r in pj["runs"]) == list(range(repeats))
        runs_in_table = pd.read_parquet(point / "dispatches.parquet")["run"].astype(int)
        assert sorted(set(runs_in_table)) == list(range(repeats))
    assert seen == {2, 3}


# --------------------------------------------------------------------------- items


HOSTILE_ITEMS = [
    # stacked parametrize on a sweep test, the sweep's ids first or last (conftest hooks run first)
    ["t.py::test_f[th1-1]", "t.py::test_f[th1-2]", "t.py::test_g[1-th1]", "t.py::test_g[2-th1]", "t.py::test_h[th1]"],
    # file and directory names with brackets
    ["test_b[1].py::test_f[th1]", "test_b[2].py::test_f[th1]", "d[x]/t.py::C::f[th1]", "d[y]/t.py::C::f[th1]"],
    # parameter ids holding dashes, colons, brackets, spaces, unicode
    ["t.py::f[th1-a-b]", "t.py::f[th1-a_b]", "t.py::f[th1-a::g[1]]", "t.py::f[th1-a g]", "t.py::f[th1-\u00e9]",
     "t.py::f[th1-a/b]", "t.py::f[th1-a(b)]"],
    # the point id itself among other ids
    ["t.py::f[th1-th1x]", "t.py::f[th1-a-th1]", "t.py::f[th1-xth1]"],
]


@pytest.mark.parametrize("nodeids", HOSTILE_ITEMS, ids=["stacked", "bracket-files", "odd-ids", "point-like"])
def test_distinct_items_get_distinct_tests_and_folders(nodeids):
    point = "th1"
    tests = [res.item_test_id(n, point) for n in nodeids]
    assert len(set(tests)) == len(nodeids), tests
    for slug_of in (res.slugify_test_id, slug_for_test):
        slugs = [slug_of(t) for t in tests]
        assert len(set(slugs)) == len(slugs), slugs
        assert all("/" not in s and "\\" not in s and s not in ("", ".", "..") and len(s) <= 150 for s in slugs)


@pytest.mark.parametrize("nodeid, point, expected", [
    ("perf/t.py::test_y[ch28-th256]", "ch28-th256", "perf/t.py::test_y"),  # ordinary: key unchanged
    ("perf/t.py::test_y", "default", "perf/t.py::test_y"),
    ("perf/t.py::C::test_y[ch28-th256-fp16]", "ch28-th256", "perf/t.py::C::test_y[fp16]"),
    ("perf/t.py::test_y[fp16-ch28-th256]", "ch28-th256", "perf/t.py::test_y[fp16]"),
    ("test_b[1].py::test_f[th1]", "th1", "test_b[1].py::test_f"),
    ("t.py::f[1]", "default", "t.py::f[1]"),
])
def test_test_id_is_the_node_id_without_the_sweep_point(nodeid, point, expected):
    assert res.item_test_id(nodeid, point) == expected
    # ordinary ids keep their folder names (no migration for them); long ones stay bounded
    assert res.slugify_test_id("perf_tests/test_x.py::test_y") == "perf_tests_test_x.py__test_y"
    assert slug_for_test("perf_tests/test_x.py::TestC::test_y") == "perf_tests_test_x.py__TestC__test_y"
    long_id = "t.py::test_" + "p" * 400
    assert len(res.slugify_test_id(long_id)) <= 150 and len(slug_for_test(long_id)) <= 150


_STACKED = f"""
import os
import sys
import pytest
from pytest_gemmperf import sweep

CMD = [sys.executable, {str(FAKE)!r}, "--dispatches", "20"]

@pytest.mark.parametrize("scale", ["1", "3"])
@sweep(threads=[1], kernels=[r"^aten::mm$"])
def test_above(gemmperf, scale):
    gemmperf.assert_no_regression(gemmperf.profile(CMD, repeats=2, env={{"FAKE_SCALE": scale}}))

@sweep(threads=[1], kernels=[r"^aten::mm$"])
def test_hooked(gemmperf, hooked):
    gemmperf.assert_no_regression(gemmperf.profile(CMD, repeats=2, env={{"FAKE_SCALE": hooked}}))
"""

_HOOK = """
def pytest_generate_tests(metafunc):
    if "hooked" in metafunc.fixturenames:  # a conftest hook parametrizes before the sweep
        metafunc.parametrize("hooked", ["1", "3"])
"""

_BRACKET_FILE = f"""
import sys
from pytest_gemmperf import sweep

@sweep(threads=[1], kernels=[r"^aten::mm$"])
def test_f(gemmperf):
    gemmperf.assert_no_regression(gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "20"],
                                                   repeats=2, env={{"FAKE_SCALE": "SCALE"}}))
"""


def test_stacked_parametrize_and_bracket_files_are_distinct_points(gp, pytester):
    # a session that profiles nothing leaves no results folder behind (it is made at start)
    (pytester.path / "test_gpsweep.py").unlink()
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:xdist").assert_outcomes(passed=1)
    assert not (pytester.path / ".gemmperf").exists()
    pytester.makepyfile(conftest=_HOOK, test_stacked=_STACKED,
                        **{"test_b[1]": _BRACKET_FILE.replace("SCALE", "1"),
                           "test_b[2]": _BRACKET_FILE.replace("SCALE", "3")})
    files: list[str] = []  # pytest takes no file argument with brackets: the whole directory
    first = gp(*files, "-p", "no:xdist")
    first.assert_outcomes(passed=7)  # every item recorded its own baseline (+ test_nothing)
    points = sorted((pytester.path / "res").glob("*/th1/point.json"))
    nodeids = {json.loads(p.read_text())["nodeid"] for p in points}
    assert len(points) == len(nodeids) == 6
    records = sorted((pytester.path / "base").glob("*/*/meta.json"))
    tests = {json.loads(p.read_text())["test_id"] for p in records}
    assert len(records) == len(tests) == 6
    assert {"test_b[1].py::test_f", "test_b[2].py::test_f", "test_stacked.py::test_above[1]",
            "test_stacked.py::test_above[3]", "test_stacked.py::test_hooked[1]",
            "test_stacked.py::test_hooked[3]"} == tests
    # each is gated against its own baseline now, and each keeps its outputs
    second = gp("-p", "no:xdist", "-k", "test_above", results="res2")
    second.assert_outcomes(passed=2, deselected=5)
    second.stdout.fnmatch_lines(["compared 2 point(s) with their baselines*"])
    assert len(list((pytester.path / "res2").glob("*/th1/dispatches.parquet"))) == 2


# --------------------------------------------------------------------------- old keys


def _samples(scale: float = 1.0) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    units = [f"h/{p}/0/0" for p in range(4)]
    return pd.DataFrame({"point": "th1", "kernel": "aten::mm", "metric": "dur_ns",
                         "unit": np.repeat(units, 20), "value": np.round(rng.lognormal(10, 0.05, 80) * scale)})


def _old_slug(test_id: str) -> str:
    """The directory name the store used before ids were told apart (no hash when sanitized)."""
    return sanitize(test_id.replace("::", "__").replace("/", "_").replace("\\", "_"))


@pytest.mark.parametrize("new_id, old_id", [
    ("test_b[1].py::test_f", "test_b"),                        # bracket file, cut at its first [
    ("perf/t.py::test_y[fp16]", "perf/t.py::test_y"),         # parametrized beside its sweep
    ("perf/t.py::test_y[1]", "perf/t.py::test_y"),            # parametrized, no sweep
    ("perf dir/t.py::test y", "perf dir/t.py::test y"),       # same id, old folder name
])
def test_a_record_under_the_old_key_is_found_then_written_under_the_new_key(tmp_path, capsys, new_id, old_id):
    store = BaselineStore(tmp_path)
    store.save(BaselineRecord(old_id, HW, _samples()))
    written = tmp_path / sanitize(HW) / slug_for_test(old_id)
    if written.name != _old_slug(old_id):  # where the old code wrote it
        written.rename(written.parent / _old_slug(old_id))
    old_dir = tmp_path / sanitize(HW) / _old_slug(old_id)

    found = store.load(new_id, HW)
    assert found is not None and len(found.samples) == 80
    assert found.migrated_from == old_id

    from pytest_gemmperf.cli import main

    assert main(["baseline", "show", "--baseline-dir", str(tmp_path), new_id]) == 0
    out = capsys.readouterr().out
    assert f"found under old key {old_id!r}" in out and "migrated" in out

    assert store.save(BaselineRecord(new_id, HW, _samples(1.01)), merge=True)
    again = store.load(new_id, HW)
    assert again.migrated_from is None and again.test_id == new_id
    assert (store.path_for(new_id, HW) / "meta.json").is_file() and store.path_for(new_id, HW) != old_dir
    assert (old_dir / "meta.json").is_file()  # the old record is left for its other readers
    assert store.load_path(old_dir).test_id == old_id
    # a folder under the old name that holds another test is never taken for this one
    other = BaselineStore(tmp_path / "other")
    other.save(BaselineRecord("other.py::test_z", HW, _samples()))
    odir = other.path_for("other.py::test_z", HW)
    odir.rename(odir.parent / _old_slug(old_id))
    assert other.load(new_id, HW) is None


# ------------------------------------------------------------- readable names that coincide

#: distinct test ids whose readable folder names are the same
COINCIDING = [("a/b.py::test_x", "a_b.py::test_x"), ("t.py::C::f", "t.py::C__f"),
              ("d/e/f.py::t", "d_e/f.py::t"), ("x.py::t", "x.py__t")]


@pytest.mark.parametrize("first, second", COINCIDING + [(b, a) for a, b in COINCIDING])
def test_tests_whose_readable_names_coincide_never_share_a_record(tmp_path, first, second):
    """Whichever test records first keeps the readable name; the other gets it plus a hash of
    its id, and each loads its own samples back."""
    store = BaselineStore(tmp_path)
    store.save(BaselineRecord(first, HW, _samples(1.0)))
    store.save(BaselineRecord(second, HW, _samples(2.0)))
    assert store.path_for(first, HW) != store.path_for(second, HW)
    a, b = store.load(first, HW), store.load(second, HW)
    assert a.test_id == first and b.test_id == second
    assert b.samples["value"].median() > 1.5 * a.samples["value"].median()
    # saving the first again changes neither record's place
    store.save(BaselineRecord(first, HW, _samples(1.01)), merge=True)
    assert store.load(second, HW).samples["value"].median() == b.samples["value"].median()


@pytest.mark.parametrize("first, second", COINCIDING)
def test_tests_whose_readable_names_coincide_never_share_a_results_folder(tmp_path, first, second):
    results = res.ResultsDir(tmp_path)
    d1, d2 = results.claim_test_dir(first), results.claim_test_dir(second)
    assert d1 != d2 and d1.parent == d2.parent == tmp_path
    assert results.test_dir(first) == d1 and results.test_dir(second) == d2
    assert results.claim_test_dir(first) == d1  # a claim is stable
    assert results.point_dir(second, "th1").parent == d2


# ------------------------------------------------------------- any spelling of a path option

#: the path options of a session: (flag, ini key, what the session reports it as)
PATH_OPTIONS = (("--gemmperf-baseline-dir", "gemmperf_baseline_dir", "baselines"),
                ("--gemmperf-results-dir", "gemmperf_results_dir", "results"),
                ("--gemmperf-history", "gemmperf_history", "history"),
                ("--gemmperf-report-dir", "gemmperf_report_dir", "report"))

_WHERE_CONFTEST = """
import json, os
from pathlib import Path

def pytest_collection_finish(session):
    from pytest_gemmperf.pytest_glue.hooks import _SESSION_KEY
    gp = session.config.stash[_SESSION_KEY]
    where = {"rootdir": str(session.config.rootpath), "ids": [i.nodeid for i in session.items],
             "baselines": str(gp.options.baseline_dir), "results": str(gp.options.results_dir),
             "report": str(gp.options.report_dir), "history": gp.history.url if gp.history else None}
    Path(os.environ["GEMMPERF_WHERE"]).write_text(json.dumps(where))
"""

_PERF_TEST = f"""
import sys
from pytest_gemmperf import sweep

@sweep(threads=[1], kernels=[r"^aten::mm$"])
def test_f(gemmperf):
    gemmperf.assert_no_regression(gemmperf.profile([sys.executable, {str(FAKE)!r}, "--dispatches", "20"], repeats=2))
"""


def _project(base: Path) -> tuple[Path, Path, Path]:
    """``base/w/proj`` (an ini file, ``perf/test_f.py``), ``base/shared`` outside it, and
    ``base/link`` -> the project."""
    proj, shared = base / "w" / "proj", base / "shared"
    (proj / "perf").mkdir(parents=True)
    shared.mkdir()
    (proj / "perf" / "test_f.py").write_text(_PERF_TEST)
    (proj / "perf" / "conftest.py").write_text(_WHERE_CONFTEST)
    (proj / "pytest.ini").write_text("[pytest]\n")
    (base / "link").symlink_to(proj, target_is_directory=True)
    return proj, shared, base / "link"


FORMS = ("=", " ", "ini")
KINDS = ("relative", "absolute", "outside", "via-link")


def _spelled(pairs: list[tuple[str, str]], proj: Path, shared: Path, link: Path
             ) -> tuple[list[str], dict[str, str], dict[str, Path]]:
    """The path options spelled one (form, kind) each: command-line arguments, ini lines, and
    where each must resolve to."""
    args, ini, expect = [], {}, {}
    for (flag, key, name), (form, kind) in zip(PATH_OPTIONS, pairs):
        target = (shared if kind == "outside" else proj) / f"{name}-dir"
        target.mkdir(exist_ok=True)  # pytest takes only an existing path for a test path
        value = {"relative": os.path.relpath(target, proj), "absolute": str(target),
                 "outside": str(target), "via-link": str(link / f"{name}-dir")}[kind]
        if form == "ini":
            ini[key] = value
        else:
            args += [f"{flag}={value}"] if form == "=" else [flag, value]
        expect[name] = target.resolve()
    return args, ini, expect


def _collect(pytester, cwd: Path, args: list[str], ini: dict[str, str]) -> dict:
    (cwd / "pytest.ini").write_text("[pytest]\n" + "".join(f"{k} = {v}\n" for k, v in ini.items()))
    out = cwd.parent / "where.json"
    os.environ["GEMMPERF_WHERE"] = str(out)  # restored by the caller's monkeypatch
    os.chdir(cwd)
    res = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:xdist",
                                       "--co", "-q", "--gemmperf-backend", "torch", *args)
    assert res.ret == 0, res.outlines
    return json.loads(out.read_text())


def test_every_spelling_of_every_path_option_keeps_test_ids_and_outputs(pytester, monkeypatch):
    """``--opt=V``, ``--opt V`` and the ini file, with relative, absolute, outside-the-project
    and symlinked values, from the project directory and through a link to it: the same test
    ids, the rootdir is the project, each option lands where it says and nothing else moves.
    The twelve (spelling, value) pairs are dealt at random to the four options of three
    sessions, so each session mixes spellings and every pair is tried; a fourth gives every
    option after a space with a value outside the project."""
    proj, shared, link = _project(pytester.path)
    monkeypatch.setenv("GEMMPERF_WHERE", "")
    pairs = [(form, kind) for form in FORMS for kind in KINDS]
    seed = random.randrange(2**32)
    random.Random(seed).shuffle(pairs)
    # and the case pytest misreads alone: every value outside the project after a space
    pairs += [(" ", "outside")] * 4
    for n, cwd in enumerate((proj, link, proj, link)):
        dealt = pairs[4 * n:4 * n + 4]
        args, ini, expect = _spelled(dealt, proj, shared, link)
        where = _collect(pytester, cwd, args, ini)
        context = (seed, dealt, str(cwd), where)
        assert where["ids"] == ["perf/test_f.py::test_f[th1]"], context
        assert Path(where["rootdir"]).resolve() == proj.resolve(), context
        for name in ("baselines", "results", "report", "history"):
            assert Path(where[name]).resolve() == expect[name], (name, context)
    # nothing was made at the common ancestor of the project and an outside value
    assert not (pytester.path / "w" / ".gemmperf").exists() and not (pytester.path / ".gemmperf").exists()


def test_default_outputs_stay_in_the_project_whatever_an_option_moves(pytester, monkeypatch):
    proj, shared, _ = _project(pytester.path)
    monkeypatch.setenv("GEMMPERF_WHERE", "")
    (shared / "base").mkdir()
    where = _collect(pytester, proj, ["--gemmperf-baseline-dir", str(shared / "base")], {})
    assert where["ids"] == ["perf/test_f.py::test_f[th1]"]
    assert Path(where["report"]).resolve() == (proj / ".gemmperf" / "report").resolve()
    assert Path(where["results"]).resolve().parent == (proj / ".gemmperf" / "results").resolve()
    assert Path(where["history"]).resolve() == (proj / ".gemmperf" / "history").resolve()


def test_a_store_holding_the_test_under_another_id_is_named_not_recorded_again():
    assert res.moved_test_ids("perf/t.py::test_f", ["w/proj/perf/t.py::test_f", "perf/t.py::test_g",
                                                     "xperf/t.py::test_f", "perf/t.py::test_f"]) \
        == ["w/proj/perf/t.py::test_f"]
    assert res.moved_test_ids("w/proj/perf/t.py::test_f[fp16]", ["perf/t.py::test_f[fp16]", "perf/t.py::test_f"]) \
        == ["perf/t.py::test_f[fp16]"]
    assert res.moved_test_ids("t.py::test_f", ["t.py::test_f"]) == []


def test_another_test_of_the_project_is_not_taken_for_a_moved_one(tmp_path):
    """A monorepo's ``a/perf/t.py`` beside ``perf/t.py``: the other id's file exists under the
    rootdir, so it is another test, and the new one records its own baseline."""
    (tmp_path / "a" / "perf").mkdir(parents=True)
    (tmp_path / "a" / "perf" / "t.py").write_text("")
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "t.py").write_text("")
    assert res.moved_test_ids("perf/t.py::test_f", ["a/perf/t.py::test_f"], tmp_path) == []
    assert res.moved_test_ids("a/perf/t.py::test_f", ["perf/t.py::test_f"], tmp_path) == []
    assert res.moved_test_ids("perf/t.py::test_f", ["w/proj/perf/t.py::test_f"], tmp_path) \
        == ["w/proj/perf/t.py::test_f"]
    results = res.ResultsDir(tmp_path / "run")
    assert results.rootdir() is None
    results.ensure({"rootdir": str(tmp_path)})
    assert results.rootdir() == tmp_path


@pytest.mark.slow  # two profiled sessions
def test_a_store_recorded_with_one_spelling_is_compared_with_another(gp, pytester, monkeypatch):
    """Recorded with the store named in the ini file, gated with it given as ``--opt V`` from a
    path outside the project: the second run compares. From another rootdir the test's id
    moves; that run is refused with one line and leaves the store as it was."""
    proj, shared, link = _project(pytester.path)
    (proj / "perf" / "conftest.py").unlink()
    base_args = [*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:xdist",
                 "-W", "ignore::pytest.PytestAssertRewriteWarning",
                 "--gemmperf-backend", "torch", "--gemmperf-telemetry", "off", "--gemmperf-confirm=0",
                 "--gemmperf-threshold=50%"]
    (proj / "pytest.ini").write_text(f"[pytest]\ngemmperf_baseline_dir = {os.path.relpath(shared / 'base', proj)}\n")
    os.chdir(proj)
    first = pytester.runpytest_inprocess(*base_args)
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["*no baseline for perf/test_f.py::test_f*recorded one*"])
    (proj / "pytest.ini").write_text("[pytest]\n")
    os.chdir(link)
    second = pytester.runpytest_inprocess(*base_args, "--gemmperf-baseline-dir", str(shared / "base"))
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["compared 1 point(s) with their baselines*"])
    records = sorted(p.parent.name for p in (shared / "base").glob("*/*/meta.json"))
    os.chdir(pytester.path / "w")
    moved = pytester.runpytest_inprocess(*base_args, f"--rootdir={pytester.path / 'w'}", "proj/perf",
                                         "--gemmperf-baseline-dir", str(shared / "base"))
    moved.assert_outcomes(failed=1)
    moved.stdout.fnmatch_lines(["*holds this test as 'perf/test_f.py::test_f'*not recording a second one*"])
    assert sorted(p.parent.name for p in (shared / "base").glob("*/*/meta.json")) == records
