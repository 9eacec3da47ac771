"""Nothing gemmperf writes or deletes escapes its folder.

Every path below a results, baseline or history root is one checked name per level and never
goes through a symbolic link that was planted there: hostile sweep labels stay inside the
results root, an earlier run is never deleted, a linked ``<test>`` or point folder in a reused
results directory is refused with one line (its target untouched), and the baseline and history
stores refuse planted links in the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from gemmperf_pytester_support import FAKE, gp  # noqa: F401 - gp: the fixture
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.run.results import ResultsDir
from pytest_gemmperf.sweep import Axis, sweep

pytest_plugins = ["pytester"]

HOSTILE_LABELS = ["../../outside/", "../.", "..", ".", "/abs", "a/b", "a\\b", "", "\x00", "nul\x00x",
                  "x" * 300, "ünïcødé", "-", ".hidden", "a:b"]
#: values that are path syntax themselves ("." after a label "../." made "../..")
HOSTILE_VALUES = [".", "..", "v"]
TEST_ID = "perf/t.py::test_x"


def _label_id(label: str) -> str:
    return repr(label)[:24]


def _points(label: str, values=HOSTILE_VALUES) -> list:
    return sweep(algo=Axis(values, abbr=label)).kwargs["spec"].points()


def _tree(base: Path, skip: Path | None = None) -> dict[str, bytes | str]:
    """Every entry below ``base`` (links by target, files by content), except under ``skip``."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if skip is not None and (p == skip or skip in p.parents):
                continue
            rel = p.relative_to(base).as_posix()
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_bytes()
            else:
                out[rel] = "dir"
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]
    return out


def _one_plain_level(point_dir: Path, test_dir: Path) -> bool:
    name = os.path.basename(os.path.normpath(point_dir))
    return (Path(os.path.normpath(point_dir)).parent == test_dir and name not in ("", ".", "..")
            and "\x00" not in name and len(name.encode("utf-8", "surrogateescape")) <= 255)


# ------------------------------------------------------------------------------ sweep labels

@pytest.mark.parametrize("label", HOSTILE_LABELS, ids=_label_id)
def test_hostile_axis_label_gives_point_dirs_one_level_inside_the_test_dir(tmp_path, label):
    root = tmp_path / "results" / "run2"
    results = ResultsDir(root)
    test_dir = results.test_dir(TEST_ID)
    dirs = [results.point_dir(TEST_ID, p.id) for p in _points(label)]
    assert all(_one_plain_level(d, test_dir) for d in dirs), dirs
    assert len({os.path.normpath(d) for d in dirs}) == len(dirs)


def test_every_hostile_label_at_once_gives_distinct_plain_point_ids(tmp_path):
    test_dir = ResultsDir(tmp_path).test_dir(TEST_ID)
    ids = [p.id for label in HOSTILE_LABELS + ["é", "ü", "α", "a_b", "a/b/"] for p in _points(label, ["v"])]
    assert len(set(ids)) == len(ids)
    assert all(_one_plain_level(test_dir / i, test_dir) for i in ids), ids


LABEL_TEST_FILE = """
import sys
from pytest_gemmperf import sweep
from pytest_gemmperf.sweep import Axis

LABELS = {labels!r}

def _test(label):
    @sweep(algo=Axis(["."], abbr=label))
    def test(gemmperf):
        gemmperf.profile([sys.executable, {fake!r}, "--ranks", "1", "--dispatches", "5"], repeats=1)
    return test

for _i, _label in enumerate(LABELS):
    globals()[f"test_label_{{_i}}"] = _test(_label)
"""


def test_hostile_labels_write_nothing_outside_the_results_root_and_keep_earlier_runs(gp, pytester):
    gp.path.joinpath("res", "run1", "t_slug", "ch28").mkdir(parents=True)
    gp.path.joinpath("res", "run1", "t_slug", "ch28", "point.json").write_text("{}")
    gp.path.joinpath("res", "run1", "run.json").write_text('{"earlier": true}')
    pytester.makepyfile(test_labels=LABEL_TEST_FILE.format(labels=HOSTILE_LABELS, fake=str(FAKE)))
    root = gp.path / "res" / "run2"
    before = _tree(gp.path)
    out = gp("test_labels.py", "--gemmperf-report-dir=res/run2/report", results="res/run2")
    out.assert_outcomes(passed=len(HOSTILE_LABELS))
    assert _tree(gp.path, skip=root) == before, "something outside the results root changed"
    points = [p for t in root.iterdir() if t.is_dir() for p in t.iterdir() if (p / "point.json").is_file()]
    assert len(points) == len(HOSTILE_LABELS)


# ------------------------------------------------------------------- reused results directory

ONE_POINT_FILE = f"""
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28])
def test_one(gemmperf):
    gemmperf.profile([sys.executable, {str(FAKE)!r}, "--ranks", "1", "--dispatches", "5"], repeats=1)
"""
SLUG, POINT = "test_one.py__test_one", "ch28"


def _plant(kind: str, base: Path) -> tuple[Path, str]:
    """A reused results dir ``base/res`` with ``kind`` planted; returns (folder that must stay
    untouched, what the error line says)."""
    victim = base / "victim"
    (victim / POINT / "raw").mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    (victim / POINT / "point.json").write_text('{"someone": "else"}')
    res = base / "res"
    res.mkdir()
    (res / "run.json").write_text("{}")
    if kind == "test_dir_link":
        (res / SLUG).symlink_to(victim, target_is_directory=True)
        return victim, "symbolic link"
    if kind == "point_dir_link":
        (res / SLUG).mkdir()
        (res / SLUG / POINT).symlink_to(victim / POINT, target_is_directory=True)
        return victim, "symbolic link"
    if kind == "dangling_point_link":
        (res / SLUG).mkdir()
        (res / SLUG / POINT).symlink_to(base / "nowhere" / POINT, target_is_directory=True)
        return base, "symbolic link"
    # an earlier session's point folder: a real directory this session did not make
    (res / SLUG / POINT).mkdir(parents=True)
    (res / SLUG / POINT / "point.json").write_text('{"earlier": "session"}')
    return res / SLUG / POINT, "not made by this session"


@pytest.mark.parametrize("kind", ["test_dir_link", "point_dir_link", "dangling_point_link", "earlier_point_dir"])
def test_planted_folder_in_a_reused_results_dir_is_refused_with_one_line(gp, pytester, kind):
    keep, says = _plant(kind, gp.path)
    pytester.makepyfile(test_one=ONE_POINT_FILE)
    before = _tree(keep, skip=gp.path / "res" if keep == gp.path else None)
    out = gp("test_one.py", results="res")
    out.assert_outcomes(errors=1)
    text = out.stdout.str()
    assert "Traceback" not in text and "shutil" not in text
    lines = [ln for ln in text.splitlines() if ln.startswith("gemmperf: ") and says in ln]
    assert len(lines) == 1 and SLUG in lines[0], text
    assert _tree(keep, skip=gp.path / "res" if keep == gp.path else None) == before
    assert not (gp.path / "nowhere").exists()


TWICE_FILE = f"""
import sys
from pytest_gemmperf import sweep

@sweep(channels=[28])
def test_one(gemmperf):
    for _ in range(2):
        gemmperf.profile([sys.executable, {str(FAKE)!r}, "--ranks", "1", "--dispatches", "5"], repeats=1)
"""


def test_a_second_try_in_one_session_still_replaces_the_folder_it_made(gp, pytester):
    pytester.makepyfile(test_one=TWICE_FILE)
    out = gp("test_one.py", results="res")
    out.assert_outcomes(passed=1)
    assert (gp.path / "res" / SLUG / POINT / "point.json").is_file()


# ------------------------------------------------------------------------------- baseline store

def _record():
    from pytest_gemmperf.store.record import BaselineRecord

    samples = pd.DataFrame({"point": ["ch28"] * 6, "kernel": ["k"] * 6, "metric": ["dur_ns"] * 6,
                            "unit": [f"h/{i}/0/0" for i in range(6)], "value": [100.0 + i for i in range(6)]})
    return BaselineRecord("perf/t.py::test_x", "gfx942-MI300X-x8", samples, meta={})


@pytest.mark.parametrize("where", ["hw_dir", "record_dir", ".locks", ".txn"])
def test_planted_link_in_the_baseline_store_is_refused_and_its_target_untouched(tmp_path, where):
    from pytest_gemmperf.store.baselines import BaselineStore

    victim = tmp_path / "victim"
    (victim / "v1").mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    root = tmp_path / "baselines"
    store = BaselineStore(root)
    rec = _record()
    record_dir = store.path_for(rec.test_id, rec.hw_key)
    link = {"hw_dir": record_dir.parent, "record_dir": record_dir, ".locks": root / ".locks",
            ".txn": root / ".txn"}[where]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim, target_is_directory=True)
    before = _tree(victim)
    with pytest.raises(GemmperfInputError) as err:
        store.save(rec)
    assert "\n" not in str(err.value) and "symbolic link" in str(err.value)
    with pytest.raises(GemmperfInputError):
        store.prune(keep_test_ids=[], dry_run=False)
    assert _tree(victim) == before


# -------------------------------------------------------------------------------- history store

def _values(test: str = "perf/t.py::test_x") -> pd.DataFrame:
    return pd.DataFrame({"test": [test] * 3, "point": ["ch28"] * 3, "kernel": ["k"] * 3,
                         "metric": ["dur_ns"] * 3, "unit": [f"h/{i}/0/0" for i in range(3)],
                         "value": [1.0, 2.0, 3.0]})


@pytest.mark.parametrize("level", ["hw_key", "test"])
def test_planted_link_in_the_history_store_is_refused_and_its_target_untouched(tmp_path, level):
    from pytest_gemmperf.history.store import HistoryStore, RunInfo

    other = HistoryStore(tmp_path / "victim")
    other.append(_values(), RunInfo("old-run", time="2020-01-01", hw_key="gfx942"))
    hw_dir = next((tmp_path / "victim").iterdir())
    root = tmp_path / "hist"
    if level == "hw_key":
        root.mkdir()
        (root / hw_dir.name).symlink_to(hw_dir, target_is_directory=True)
    else:
        (root / hw_dir.name).mkdir(parents=True)
        test_dir = next(hw_dir.iterdir())
        (root / hw_dir.name / test_dir.name).symlink_to(test_dir, target_is_directory=True)
    before = _tree(tmp_path / "victim")
    store = HistoryStore(root)
    with pytest.raises(GemmperfInputError) as err:
        store.append(_values(), RunInfo("new-run", time="2020-01-02", hw_key="gfx942"))
    assert "\n" not in str(err.value) and "symbolic link" in str(err.value)
    try:
        store.prune(older_than_days=0, dry_run=False)
    except GemmperfInputError as exc:
        assert "\n" not in str(exc)
    assert _tree(tmp_path / "victim") == before


# ------------------------------------------------------------------------------- containment

HOSTILE_COMPONENTS = ["", ".", "..", "a/b", "/abs", "../x", "a\\b", "\x00", "x\x00y", "y" * 256, "é" * 128]


@pytest.mark.parametrize("name", HOSTILE_COMPONENTS, ids=_label_id)
def test_contained_refuses_any_name_that_is_not_one_plain_level(tmp_path, name):
    from pytest_gemmperf.paths import contained

    with pytest.raises(GemmperfInputError) as err:
        contained(tmp_path, "ok", name)
    assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_contained_accepts_a_linked_root_but_no_link_below_it(tmp_path):
    from pytest_gemmperf.paths import contained, remove_tree

    (tmp_path / "real" / "t").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_text("x")
    (tmp_path / "root").symlink_to(tmp_path / "real", target_is_directory=True)
    assert contained(tmp_path / "root", "t", "p") == tmp_path / "root" / "t" / "p"
    (tmp_path / "real" / "t" / "p").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    for call in (lambda: contained(tmp_path / "root", "t", "p", "q"),
                 lambda: remove_tree(tmp_path / "root", "t", "p")):
        with pytest.raises(GemmperfInputError, match="symbolic link"):
            call()
    assert (tmp_path / "elsewhere" / "f").read_text() == "x"
    with pytest.raises(GemmperfInputError):
        remove_tree(tmp_path / "root")
