"""Provenance a reviewer trusts: run.json and the report say whether the working tree had
uncommitted changes (``git describe --dirty`` and a hash of the diff), and recording it never
fails where git is absent or the directory is no repository."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_gemmperf.report import working_tree_text
from pytest_gemmperf.store import hardware
from pytest_gemmperf.store.hardware import collect_metadata, git_state

pytest_plugins = ["pytester"]

from gemmperf_pytester_support import gp  # noqa: E402,F401  (fixture)

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout


def _repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    (path / "kernel.py").write_text("SIZE = 256\n")
    _git(path, "add", "kernel.py")
    _git(path, "commit", "-qm", "first")
    return path


@needs_git
def test_clean_and_dirty_trees_are_told_apart(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "r")
    clean = git_state(repo)
    assert clean["git_dirty"] is False and clean["git_diff_sha256"] is None and clean["git_untracked"] == 0
    assert not clean["git_describe"].endswith("-dirty")
    (repo / "kernel.py").write_text("SIZE = 512\n")
    dirty = git_state(repo)
    diff = subprocess.run(["git", "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff"], cwd=repo,
                          capture_output=True, check=True).stdout
    assert dirty["git_dirty"] is True and dirty["git_describe"].endswith("-dirty")
    assert dirty["git_diff_sha256"] == hashlib.sha256(diff).hexdigest()
    (repo / "kernel.py").write_text("SIZE = 1024\n")
    assert git_state(repo)["git_diff_sha256"] != dirty["git_diff_sha256"]  # another edit, another hash
    _git(repo, "add", "kernel.py")  # staged only: still not the commit
    assert git_state(repo)["git_dirty"] is True
    (repo / "new_test.py").write_text("x = 1\n")
    assert git_state(repo)["git_untracked"] == 1


def test_no_git_or_no_repository_is_never_an_error(tmp_path: Path, monkeypatch) -> None:
    empty = {"git_describe": None, "git_dirty": None, "git_diff_sha256": None, "git_untracked": None}
    if shutil.which("git"):
        assert git_state(tmp_path) == empty  # not a repository
    monkeypatch.setattr(hardware.shutil, "which", lambda name: None)  # git absent
    assert git_state(tmp_path) == empty
    meta = collect_metadata(tmp_path)
    assert meta["git_commit"] is None and meta["git_dirty"] is None
    assert working_tree_text(meta) is None


def test_the_reports_words() -> None:
    assert working_tree_text({"git_dirty": False, "git_describe": "abc123def456"}) == "clean; abc123def456"
    text = working_tree_text({"git_dirty": True, "git_diff_sha256": "0123456789abcdef" * 4,
                              "git_describe": "v1-2-gabc-dirty", "git_untracked": 2})
    assert text == "uncommitted changes (diff sha256 0123456789ab); v1-2-gabc-dirty; 2 untracked file(s)"


@needs_git
def test_run_json_and_the_report_record_an_uncommitted_edit(gp, monkeypatch) -> None:
    root = gp.path
    _git(root, "init", "-q")
    _git(root, "add", "test_gpsweep.py")
    _git(root, "commit", "-qm", "sweep")
    (root / "test_gpsweep.py").write_text((root / "test_gpsweep.py").read_text() + "\n# an uncommitted edit\n")
    res = gp("--gemmperf-update-baselines")
    assert res.ret == 0, res.stdout.str()
    run = json.loads((root / "res" / "run.json").read_text())
    v = run["versions"]
    assert v["git_dirty"] is True and v["git_describe"].endswith("-dirty") and len(v["git_diff_sha256"]) == 64
    html = (root / ".gemmperf" / "report" / "report.html").read_text(encoding="utf-8")
    assert "working tree" in html and f"uncommitted changes (diff sha256 {v['git_diff_sha256'][:12]})" in html
    md = (root / ".gemmperf" / "report" / "summary.md").read_text(encoding="utf-8")
    assert "uncommitted changes" in md
