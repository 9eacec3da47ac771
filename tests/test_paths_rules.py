"""The containment rules (paths.py) pinned on small trees in a temporary directory: which names
may be one level below a root (at the edges: the longest name a file system takes, a name that
cannot be encoded), the refusals of contained paths, globs and relative paths, and what
``remove_tree`` removes, refuses and reports."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.paths import component_problem, contained, contained_glob, contained_relative, remove_tree


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


# -- names ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["a", "run-1", "test_x.py__test_y[1]", "日本", "x" * 255, "é" * 127 + "x",
                                  "..a", ".hidden", "a b"])
def test_a_plain_name_up_to_255_bytes_is_one_level(name):
    assert component_problem(name) is None


@pytest.mark.parametrize("name, problem", [
    (None, "None is not a name"), (3, "3 is not a name"), (Path("a"), "is not a name"),
    ("", "'' is not a usable name"), (".", "'.' is not a usable name"), ("..", "'..' is not a usable name"),
    ("a\x00b", "holds a NUL character"), ("a/b", "holds a path separator"), ("a\\b", "holds a path separator"),
    ("/", "holds a path separator"), ("\ud800", "cannot be encoded as a file name"),
    ("x" * 256, "name of 256 bytes is longer than 255"), ("é" * 128, "name of 256 bytes is longer than 255"),
])
def test_a_name_that_is_not_one_plain_level_says_why(name, problem):
    assert problem in component_problem(name)


def test_a_name_from_undecodable_bytes_is_a_name():
    # os.listdir gives undecodable bytes as lone surrogates (surrogateescape): a real file's name
    assert component_problem(os.fsdecode(b"caf\xe9")) is None


# -- contained paths -----------------------------------------------------------------------------

def test_contained_joins_plain_levels_and_the_root_alone_is_the_root(tmp_path):
    assert contained(tmp_path, "a", "b") == tmp_path / "a" / "b"
    assert contained(str(tmp_path)) == tmp_path
    (tmp_path / "a").mkdir()
    assert contained(tmp_path, "a") == tmp_path / "a"


def test_contained_names_the_level_it_refuses(tmp_path):
    with pytest.raises(GemmperfInputError) as err:
        contained(tmp_path, "a", "..", "b")
    assert str(err.value) == f"{tmp_path / 'a'}: refusing a path level below this directory: '..' is not a usable name"


def test_a_link_below_the_root_is_refused_even_when_it_points_inside(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(GemmperfInputError, match="is a symbolic link"):
        contained(tmp_path, "link")


def test_a_link_the_level_check_misses_is_still_refused_by_where_the_path_resolves(tmp_path, monkeypatch):
    # a link planted between the checks of the levels and the write: the final check of the
    # resolved path refuses it
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "root" / "a").symlink_to(tmp_path / "outside", target_is_directory=True)
    monkeypatch.setattr(Path, "is_symlink", lambda self: False)
    with pytest.raises(GemmperfInputError) as err:
        contained(tmp_path / "root", "a", "b")
    assert str(err.value) == f"{tmp_path / 'root' / 'a' / 'b'}: resolves outside {tmp_path / 'root'}; refusing to write there"
    monkeypatch.undo()
    assert contained(tmp_path / "root", "b", "c") == tmp_path / "root" / "b" / "c"


def test_contained_relative_splits_on_either_separator_and_refuses_absolute_paths(tmp_path):
    assert contained_relative(tmp_path, "a/b\\c") == tmp_path / "a" / "b" / "c"
    assert contained_relative(tmp_path, Path("a") / "b") == tmp_path / "a" / "b"
    with pytest.raises(GemmperfInputError, match="an absolute path where a path inside"):
        contained_relative(tmp_path, "/etc/passwd")
    with pytest.raises(GemmperfInputError, match="'..' is not a usable name"):
        contained_relative(tmp_path, "a/../../b")


def test_contained_glob_lists_what_matches_sorted_and_refuses_a_planted_link(tmp_path):
    for rel in ("b/x.json", "a/x.json", "a/y.txt"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text("{}")
    assert contained_glob(tmp_path, "*/x.json") == [tmp_path / "a" / "x.json", tmp_path / "b" / "x.json"]
    assert contained_glob(tmp_path, "*/none") == []
    (tmp_path / "elsewhere.json").write_text("secret")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(GemmperfInputError, match="symbolic link"):
        contained_glob(tmp_path, "*/x.json")


# -- removal -------------------------------------------------------------------------------------

def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "run" / "point").mkdir(parents=True)
    (root / "run" / "point" / "f.json").write_text("{}")
    (root / "keep").mkdir()
    (root / "keep" / "g.json").write_text("{}")
    return root


def test_remove_tree_removes_one_directory_and_nothing_beside_it(tmp_path):
    root = _tree(tmp_path)
    remove_tree(root, "run")
    assert _files(root) == ["keep", "keep/g.json"]
    remove_tree(root, "run")  # already gone: nothing to do
    remove_tree(root, "never", "made")
    assert _files(root) == ["keep", "keep/g.json"]


def test_remove_tree_never_removes_a_whole_root(tmp_path):
    root = _tree(tmp_path)
    with pytest.raises(GemmperfInputError) as err:
        remove_tree(root)
    assert str(err.value) == f"{root}: refusing to remove a whole root directory"
    assert _files(root) == ["keep", "keep/g.json", "run", "run/point", "run/point/f.json"]


def test_remove_tree_refuses_a_file(tmp_path):
    root = _tree(tmp_path)
    with pytest.raises(GemmperfInputError) as err:
        remove_tree(root, "run", "point", "f.json")
    assert str(err.value) == f"{root / 'run' / 'point' / 'f.json'}: is not a directory; refusing to remove it"
    assert (root / "run" / "point" / "f.json").read_text() == "{}"


@pytest.mark.parametrize("filename", ["/r/run/point/f.json", None])
def test_a_removal_the_system_refuses_is_one_line_naming_the_file(tmp_path, monkeypatch, filename):
    root = _tree(tmp_path)

    def refuse(path, *a, **kw):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), filename)

    monkeypatch.setattr(shutil, "rmtree", refuse)
    with pytest.raises(GemmperfInputError) as err:
        remove_tree(root, "run")
    assert str(err.value) == f"{filename or root / 'run'}: cannot remove: Permission denied"


def test_a_removal_error_without_a_reason_shows_the_error(tmp_path, monkeypatch):
    root = _tree(tmp_path)
    monkeypatch.setattr(shutil, "rmtree", lambda *a, **kw: (_ for _ in ()).throw(OSError("device gone")))
    with pytest.raises(GemmperfInputError) as err:
        remove_tree(root, "run")
    assert str(err.value) == f"{root / 'run'}: cannot remove: device gone"

