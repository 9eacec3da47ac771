"""Full, read-only or failing disks: one line naming the file, the right exit code, nothing
half-written, nothing lost.

Faults are injected in general ways: :class:`Faults` makes the N-th write step under a
directory (create/open for writing, ``write(2)``, ``fsync(2)``, rename, mkdir) raise
``OSError`` with ENOSPC, EROFS, EACCES, EDQUOT or EIO, for every N a write takes; a read-only
directory is a real read-only bind mount where this process may mount (root with
CAP_SYS_ADMIN), and otherwise simulated by refusing every write under it with EROFS. Tests run
as root here, where ``chmod`` does not stop a write, so ``chmod`` is never relied on.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

try:
    from pytest_gemmperf.errors import OutputError
except ImportError:  # code without one-line write errors: the tests here fail, not the import
    OutputError = None  # type: ignore[assignment,misc]
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.record import BaselineRecord
from pytest_gemmperf.store.verdicts_file import merge_verdicts

sys.path.insert(0, str(Path(__file__).parent))
from gemmperf_pytester_support import gp  # noqa: E402,F401  (fixture)

HW = "gfx950-AMD_Instinct_MI350X-x8"
TEST = "perf_tests/test_gemm.py::test_overlap"


def make_results(root: Path, seed: int) -> Path:
    """A finished run in the documented results layout (tests/test_baseline.py's); imported
    here, not at module level, so pytester's inner sessions never see that test module."""
    from test_baseline import make_results as make

    return make(root, seed=seed, failed_point=False)


def make_samples(seed: int, n: int) -> pd.DataFrame:
    from test_baseline import make_samples as make

    return make(seed, n=n)

pytest_plugins = ["pytester"]

ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.EIO)
OPS = ("open", "write", "fsync", "replace", "mkdir")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Faults:
    """Counts the write steps under ``root`` (of the kinds ``ops``) and makes step number
    ``fail_at`` (0-based; every step from it on with ``sticky``) raise ``OSError(err)``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path, ops=OPS, fail_at: int | None = None,
                 err: int = errno.ENOSPC, sticky: bool = False) -> None:
        self.root = str(Path(root).resolve())
        self.ops = set(ops)
        self.fail_at = fail_at
        self.err = err
        self.sticky = sticky
        self.steps = 0
        self.failed = 0
        real = {name: getattr(os, name) for name in ("open", "write", "fsync", "replace", "rename", "mkdir")}
        self._real = real

        def under(p) -> bool:
            try:
                full = os.path.abspath(os.fsdecode(p))
            except TypeError:
                return False
            return full == self.root or full.startswith(self.root + os.sep)

        def fd_under(fd: int) -> bool:
            try:
                return under(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                return False

        def fake_open(path, flags, *a, **k):
            if flags & _WRITE_FLAGS and "dir_fd" not in k and under(path):
                self._step("open", path)
            return real["open"](path, flags, *a, **k)

        def fake_write(fd, data):
            if fd_under(fd):
                self._step("write", None)
            return real["write"](fd, data)

        def fake_fsync(fd):
            if fd_under(fd):
                self._step("fsync", None)
            return real["fsync"](fd)

        def fake_replace(src, dst, *a, **k):
            if under(dst):
                self._step("replace", src, dst)
            return real["replace"](src, dst, *a, **k)

        def fake_rename(src, dst, *a, **k):
            if under(dst):
                self._step("replace", src, dst)
            return real["rename"](src, dst, *a, **k)

        def fake_mkdir(path, *a, **k):
            if "dir_fd" not in k and under(path):
                self._step("mkdir", path)
            return real["mkdir"](path, *a, **k)

        for name, fn in (("open", fake_open), ("write", fake_write), ("fsync", fake_fsync),
                         ("replace", fake_replace), ("rename", fake_rename), ("mkdir", fake_mkdir)):
            monkeypatch.setattr(os, name, fn)

    def _step(self, kind: str, path, path2=None) -> None:
        if kind not in self.ops:
            return
        n = self.steps
        self.steps += 1
        if self.fail_at is not None and (n == self.fail_at or (self.sticky and n > self.fail_at)):
            self.failed += 1
            if path2 is not None:
                raise OSError(self.err, os.strerror(self.err), os.fsdecode(path), None, os.fsdecode(path2))
            if path is not None:
                raise OSError(self.err, os.strerror(self.err), os.fsdecode(path))
            raise OSError(self.err, os.strerror(self.err))


def refuse_writes(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """A simulated read-only ``root``: every create, write, rename, mkdir, unlink and rmdir
    under it fails with EROFS (what a read-only mount answers)."""
    top = str(Path(root).resolve())
    real_open, real_io_open = os.open, io.open

    def under(p) -> bool:
        try:
            full = os.path.abspath(os.fsdecode(p))
        except TypeError:
            return False
        return full == top or full.startswith(top + os.sep)

    def refuse(p):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(p))

    def guard(name: str, arg: int = 0):
        real = getattr(os, name)

        def fn(*a, **k):
            if under(a[arg]):
                refuse(a[arg])
            return real(*a, **k)
        return fn

    def fake_open(path, flags, *a, **k):
        if flags & _WRITE_FLAGS and under(path):
            refuse(path)
        return real_open(path, flags, *a, **k)

    def fake_io_open(file, mode="r", *a, **k):
        if isinstance(file, (str, bytes, os.PathLike)) and set(mode) & set("wax+") and under(file):
            refuse(file)
        return real_io_open(file, mode, *a, **k)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_io_open)
    monkeypatch.setattr("builtins.open", fake_io_open)
    for name, arg in (("mkdir", 0), ("unlink", 0), ("remove", 0), ("rmdir", 0), ("link", 1), ("symlink", 1)):
        monkeypatch.setattr(os, name, guard(name, arg))
    for name in ("replace", "rename"):
        monkeypatch.setattr(os, name, guard(name, 1))


@pytest.fixture(params=["simulated", "bind-mount"])
def make_readonly(request, monkeypatch) -> Callable[[Path], None]:
    """``make_readonly(dir)``: ``dir`` becomes read-only for the rest of the test."""
    mounted: list[Path] = []

    def make(path: Path) -> None:
        if request.param == "simulated":
            refuse_writes(monkeypatch, path)
            return
        mount = shutil.which("mount")
        if os.geteuid() != 0 or mount is None:
            pytest.skip("a read-only bind mount needs root (simulated variant covers this)")
        res = subprocess.run([mount, "--bind", "-o", "ro", str(path), str(path)], capture_output=True)
        if res.returncode != 0:
            pytest.skip(f"cannot bind-mount read-only here: {res.stderr.decode().strip()}")
        mounted.append(path)
        probe = path / ".probe"
        try:
            probe.touch()
        except OSError:
            return
        probe.unlink()
        pytest.skip("bind mount did not become read-only")

    yield make
    for p in mounted:
        subprocess.run([shutil.which("umount") or "umount", str(p)], capture_output=True)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``: file bytes, None for a directory."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


def spread(total: int, most: int = 8) -> list[int]:
    """Step numbers to fail: the first, the last and evenly spaced ones between (every step
    when there are few), so first file, middle, rename and the final steps are all hit."""
    if total <= most:
        return list(range(total))
    return sorted({round(i * (total - 1) / (most - 1)) for i in range(most)})


def temp_files(root: Path) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".tmp")]


def assert_one_line(text: str, *must: str) -> None:
    text = text.strip()
    assert "\n" not in text, text
    assert "Traceback" not in text, text
    for m in must:
        assert m in text, (m, text)


def assert_error_line(stderr: str, *must: str) -> None:
    """Exactly one ``gemmperf:`` line (notes of other kinds may precede it), no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("gemmperf:")]
    assert len(lines) == 1, stderr
    assert_one_line(lines[0], *must)


def _record(seed: int) -> BaselineRecord:
    return BaselineRecord(test_id=TEST, hw_key=HW, samples=make_samples(seed, n=200), meta={"seed": seed})


# ------------------------------------------------------------------------- the baseline store

@pytest.mark.parametrize("op", OPS)
def test_store_write_refused_at_any_step_is_one_line_and_old_or_new_whole(tmp_path, monkeypatch, op):
    """Steps of a baseline write refused in turn (first, middle, last; errnos in rotation):
    one line naming a file in the store; before the commit the store is byte for byte as
    before, after it the record reads as new; no temp file stays; the next write succeeds. A
    refused call the write can do without (creating a lock directory that exists) changes
    nothing."""
    template = tmp_path / "template"
    BaselineStore(template).save(_record(1))
    before = snapshot(template)
    root = tmp_path / "baselines"
    shutil.copytree(template, root)
    new = _record(2)
    with monkeypatch.context() as m:
        counter = Faults(m, root, ops=[op])
        BaselineStore(root).save(new, merge=True)
    total = counter.steps
    assert total >= 1
    for n in spread(total):
        shutil.rmtree(root)
        shutil.copytree(template, root)
        err = ERRNOS[n % len(ERRNOS)]
        with monkeypatch.context() as m:
            faults = Faults(m, root, ops=[op], fail_at=n, err=err)
            try:
                BaselineStore(root).save(new, merge=True)
            except OutputError as exc:
                line = str(exc)
            else:
                line = None
        assert faults.failed == 1
        assert temp_files(root) == []
        if line is None:
            assert BaselineStore(root).load(TEST, HW).meta["seed"] == 2
            continue
        assert_one_line(line, "could not write", str(root), os.strerror(err))
        if "previous record is kept" in line or "no baseline was changed" in line:
            assert snapshot(root) == before, (op, n, line)
        else:
            assert "committed" in line, line
            assert BaselineStore(root).load(TEST, HW).meta["seed"] == 2
        if n == total - 1:  # the next writer finishes or undoes what the failed one left
            BaselineStore(root).save(_record(3), merge=True)
            assert BaselineStore(root).load(TEST, HW).meta["seed"] == 3
            assert not list((root / ".txn").glob("*.json"))


def test_store_readonly_refuses_every_write_with_one_line_and_reads_work(tmp_path, make_readonly):
    """A read-only store: load/list work; save, learn, prune, recover each give one line
    naming the store, and the store is unchanged."""
    root = tmp_path / "baselines"
    BaselineStore(root).save(_record(1))
    before = snapshot(root)
    make_readonly(root)
    store = BaselineStore(root)
    assert store.load(TEST, HW).meta["seed"] == 1
    assert len(store.load_all()) == 1
    writes = {
        "save": lambda: store.save(_record(2), merge=True),
        "learn": lambda: store.learn(TEST, HW, make_samples(5, n=200), "run-x"),
        "prune": lambda: store.prune(keep_test_ids=[]),
        "recover": lambda: store.recover(),
    }
    for name, write in writes.items():
        with pytest.raises(OutputError) as exc:
            write()
        assert_one_line(str(exc.value), "could not write", str(root), "Read-only file system")
    assert snapshot(root) == before


# ------------------------------------------------------------------------- results directory

@pytest.mark.parametrize("op", ["open", "fsync", "replace"])
def test_verdicts_csv_write_refused_keeps_the_previous_file(tmp_path, monkeypatch, op):
    """A test's verdicts.csv in a full or read-only results directory: one line naming it, the
    earlier verdicts byte for byte, no temp file."""
    res = tmp_path / "res"
    test_dir = res / "t"
    rows = pd.DataFrame({"point": ["p1"], "kernel": ["k"], "verdict": ["unchanged"]})
    merge_verdicts(test_dir, "p1", rows)
    before = (test_dir / "verdicts.csv").read_bytes()
    with monkeypatch.context() as m:
        counter = Faults(m, res, ops=[op])
        merge_verdicts(test_dir, "p2", rows.assign(point="p2"))
    total = counter.steps
    for n in spread(total):
        shutil.rmtree(res, ignore_errors=True)
        merge_verdicts(test_dir, "p1", rows)
        err = ERRNOS[n % len(ERRNOS)]
        with monkeypatch.context() as m:
            faults = Faults(m, res, ops=[op], fail_at=n, err=err)
            try:
                merge_verdicts(test_dir, "p2", rows.assign(point="p2"))
            except OutputError as exc:
                line = str(exc)
            else:
                line = None
        assert faults.failed == 1
        assert temp_files(res) == []
        if line is None:  # a step it can do without (the lock file's directory exists)
            assert b"p2" in (test_dir / "verdicts.csv").read_bytes()
            continue
        assert_one_line(line, "could not write", str(test_dir), os.strerror(err))
        assert (test_dir / "verdicts.csv").read_bytes() == before


# ------------------------------------------------------------------------- the CLI

def _refresh(results: Path, base: Path) -> list[str]:
    return ["baseline", "refresh", "--from", str(results), "--baseline-dir", str(base)]


def test_cli_refresh_into_readonly_store_exits_2_with_one_line(tmp_path, capsys, make_readonly):
    from pytest_gemmperf.cli import main

    results = make_results(tmp_path / "r1" / "2026-11-20T10-00-00", seed=1)
    base = tmp_path / "baselines"
    assert main(_refresh(results, base)) == 0
    second = make_results(tmp_path / "r2" / "2026-11-21T10-00-00", seed=2)
    before = snapshot(base)
    capsys.readouterr()
    make_readonly(base)
    assert main(_refresh(second, base)) == 2
    err = capsys.readouterr().err
    assert_error_line(err, "gemmperf: could not write", str(base), "Read-only file system")
    assert snapshot(base) == before
    # reading a read-only store works
    assert main(["baseline", "show", "--baseline-dir", str(base)]) == 0


@pytest.mark.slow  # a refresh per injected fault
@pytest.mark.parametrize("op", ["write", "replace"])
def test_cli_refresh_into_full_store_exits_2_at_every_step(tmp_path, capsys, monkeypatch, op):
    from pytest_gemmperf.cli import main

    results = make_results(tmp_path / "r1" / "2026-11-20T10-00-00", seed=1)
    second = make_results(tmp_path / "r2" / "2026-11-21T10-00-00", seed=2)
    base = tmp_path / "baselines"
    assert main(_refresh(results, base)) == 0
    keep = tmp_path / "keep"
    shutil.copytree(base, keep)
    with monkeypatch.context() as m:
        counter = Faults(m, base, ops=[op])
        assert main(_refresh(second, base)) == 0
    total = counter.steps
    for n in spread(total, 3):
        shutil.rmtree(base)
        shutil.copytree(keep, base)
        before = snapshot(base)
        capsys.readouterr()
        err = ERRNOS[n % len(ERRNOS)]
        with monkeypatch.context() as m:
            Faults(m, base, ops=[op], fail_at=n, err=err)
            rc = main(_refresh(second, base))
        text = capsys.readouterr().err
        assert rc == 2, (op, n, text)
        assert_error_line(text, "gemmperf: could not write", str(base), os.strerror(err))
        assert temp_files(base) == []
        if "committed" not in text:
            assert snapshot(base) == before, (op, n, text)


@pytest.mark.parametrize("exc", [RuntimeError("boom\nsecond line"), KeyError("k"), ZeroDivisionError(),
                                 AttributeError("'NoneType' object has no attribute 'x'")])
@pytest.mark.parametrize("log_dir_writable", [True, False])
def test_cli_unexpected_error_exits_3_with_one_line_and_a_log(tmp_path, capsys, monkeypatch, exc,
                                                              log_dir_writable):
    """Exit 1 means a regression only: a bug exits 3, one line naming the log holding the
    traceback (the temporary directory when .gemmperf/logs cannot be written)."""
    from pytest_gemmperf import cli
    from pytest_gemmperf.commands import baseline as baseline_cmd

    def broken(args):
        raise exc

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(baseline_cmd, "run_show", broken)
    if not log_dir_writable:
        refuse_writes(monkeypatch, tmp_path)
    rc = cli.main(["baseline", "show", "--baseline-dir", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert rc == 3
    assert_one_line(err, "gemmperf: internal error:", type(exc).__name__)
    log = Path(err.split("traceback in ", 1)[1].split(";", 1)[0])
    monkeypatch.undo()
    assert log.is_file()
    assert (tmp_path in log.parents) == log_dir_writable
    assert "Traceback" in log.read_text() and type(exc).__name__ in log.read_text()
    if not log_dir_writable:
        log.unlink()


# ------------------------------------------------------------------------- pytest

def _outcome_lines(result) -> str:
    return "\n".join(result.outlines)


def test_pytest_results_dir_fault_errors_the_item_with_one_line(gp, monkeypatch):
    """A refused write in the results directory (first, middle and last step; each errno):
    the item errors (not a regression failure) with one line naming the file; the gemmperf
    summary names it; no traceback, no temp file."""
    res = gp.path / "res"
    with monkeypatch.context() as m:
        counter = Faults(m, res, ops=["open", "fsync", "replace", "mkdir"])
        gp(results="res").assert_outcomes(passed=2)
    total = counter.steps
    picks = sorted({0, total // 2, total - 1})
    for i, n in enumerate(picks):
        shutil.rmtree(res, ignore_errors=True)
        err = ERRNOS[i % len(ERRNOS)]
        with monkeypatch.context() as m:
            Faults(m, res, ops=["open", "fsync", "replace", "mkdir"], fail_at=n, err=err)
            result = gp(results="res")
        out = _outcome_lines(result)
        if result.ret == pytest.ExitCode.USAGE_ERROR:
            # the run's folder is made when the session starts: refusing that is one line
            # before any item runs
            err_lines = [ln for ln in result.errlines if ln.strip()]
            assert len(err_lines) == 1 and f"cannot create {res}" in err_lines[0], result.errlines
            assert os.strerror(err) in err_lines[0] and "Traceback" not in out
            continue
        # pytest's own warning count is not an outcome of the gate
        outcomes = {k: v for k, v in result.parseoutcomes().items() if not k.startswith("warning")}
        if outcomes == {"passed": 2} and "not written" not in out:
            # a step the OS call tolerates (mkdir of a folder that exists): the write went
            # through whole, which is as good as no fault
            from pytest_gemmperf.run.results import run_state

            assert run_state(res).is_complete, out
            continue
        assert outcomes.get("errors", 0) + outcomes.get("error", 0) >= 1, out
        assert "Traceback" not in out and "OSError" not in out, out
        assert f"could not write {res}" in out and os.strerror(err) in out, out
        assert "not written (" in out, out  # the gemmperf summary names it
        assert temp_files(res) == [] if res.exists() else True


@pytest.mark.usefixtures("without_session_reports")  # no session report is read here
def test_pytest_gates_against_a_readonly_store(gp, make_readonly):
    """Plain gating reads the store only: a read-only store passes, nothing is written there;
    recording into it errors the items with one line naming the store."""
    gp(results="res1").assert_outcomes(passed=2)
    base = gp.path / "base"
    before = snapshot(base)
    make_readonly(base)
    result = gp(results="res2")
    result.assert_outcomes(passed=2)
    assert snapshot(base) == before
    result = gp("--gemmperf-update-baselines", results="res3")
    out = _outcome_lines(result)
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", 0) + outcomes.get("error", 0) == 2, out
    assert "Traceback" not in out, out
    assert f"could not write the baseline store's lock {base}" in out and "Read-only file system" in out, out
    assert snapshot(base) == before


def test_pytest_history_and_report_faults_are_warnings_in_the_summary(gp, monkeypatch):
    """History (over quota) and report (read-only) writes that fail do not fail the gate, and
    are not silent: the terminal summary names them."""
    gp(results="res1").assert_outcomes(passed=2)
    hist = gp.path / "hist"
    hist.mkdir()
    report = gp.path / "rep"
    report.mkdir()
    Faults(monkeypatch, hist, fail_at=0, err=errno.EDQUOT, sticky=True)
    Faults(monkeypatch, report, fail_at=0, err=errno.EROFS, sticky=True)
    result = gp(f"--gemmperf-history={hist}", f"--gemmperf-report-dir={report}", results="res2")
    out = _outcome_lines(result)
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    warnings = [line for line in result.outlines if line.startswith("warning:")]
    assert len(warnings) == 2 and all("history not recorded" in w and os.strerror(errno.EDQUOT) in w
                                      for w in warnings), out
    report_line = [line for line in result.outlines if line.startswith("report not written:")]
    assert len(report_line) == 1 and str(report) in report_line[0], out
    assert os.strerror(errno.EROFS) in report_line[0], out
    assert "Traceback" not in out, out
