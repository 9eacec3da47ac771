"""Work beside a pool: ``traces.parallel.map_ordered``'s ``meanwhile`` (this process's own work
while the workers read) and ``traces.parallel.beside`` (one process forked from the fork server
for work that runs beside this process's, such as report.xlsx written while this process writes
report.html): the same results and the same one-line errors as in this process, the work done
here where that process died, and nothing started where no fork server runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pytest_gemmperf.errors import GemmperfInputError, OutputError
from pytest_gemmperf.traces import parallel
from pytest_gemmperf.traces.discover import load
from test_parallel_reports import _report_files

CSV_DIR = Path(__file__).parent / "fixtures" / "rocprof_csv" / "v7" / "mi350-n1"
EXCEL = "pytest_gemmperf.report.excel"


@pytest.fixture
def fork_server(monkeypatch):
    """As after a pool read this process's inputs: its fork server runs (or starts on demand)."""
    monkeypatch.setattr(parallel, "_fork_server_started", True)


def _pid(_: object = None) -> int:
    return os.getpid()


def _imported(name: str) -> bool:
    return name in sys.modules


def _bad(path: str) -> None:
    raise GemmperfInputError(path, "bad input", line=3)


def _dies_beside(parent: int) -> int:
    if os.getpid() != parent:
        os._exit(9)  # killed while it worked (the OOM killer, a signal)
    return 42


@pytest.mark.slow  # a process pool
def test_meanwhile_runs_once_in_this_process_while_a_pool_reads():
    calls: list[int] = []
    assert parallel.map_ordered(_pid, [1, 2, 3], jobs=2, meanwhile=lambda: calls.append(os.getpid())) != [os.getpid()] * 3
    assert calls == [os.getpid()]
    # serial: nothing runs beside it, so nothing is done meanwhile
    assert parallel.map_ordered(_pid, [1, 2], jobs=1, meanwhile=lambda: calls.append(0)) == [os.getpid()] * 2
    assert calls == [os.getpid()]


@pytest.mark.slow  # a process pool
def test_what_meanwhile_raises_propagates():
    def fail() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        parallel.map_ordered(_pid, [1, 2], jobs=2, meanwhile=fail)


def test_no_process_beside_without_a_fork_server(monkeypatch):
    monkeypatch.setattr(parallel, "_fork_server_started", False)
    assert parallel.beside((EXCEL,)) is None


@pytest.mark.slow  # a forked process
def test_beside_runs_in_another_process_with_its_preload(fork_server):
    with parallel.beside((EXCEL,)) as helper:
        assert helper.submit(_pid)() != os.getpid()
        assert helper.submit(_imported, EXCEL)() is True
        assert helper.submit(_imported, "pytest_gemmperf.report.history_page")() is False
    with parallel.beside() as helper:
        assert helper.submit(_imported, EXCEL)() is False


@pytest.mark.slow  # a forked process
def test_beside_raises_the_one_line_error_of_this_process(fork_server):
    with pytest.raises(GemmperfInputError) as here:
        _bad("trace.csv")
    with parallel.beside() as helper:
        wait = helper.submit(_bad, "trace.csv")
        with pytest.raises(GemmperfInputError) as there:
            wait()
    assert str(there.value) == str(here.value) and there.value.line == 3


@pytest.mark.slow  # a forked process
def test_work_of_a_dead_process_beside_is_done_here(fork_server):
    with parallel.beside() as helper:
        assert helper.submit(_dies_beside, os.getpid())() == 42
        assert helper.submit(_dies_beside, os.getpid())() == 42  # and after it died


class _Recording(parallel.Beside):
    """A process beside that notes what it was given."""

    def __init__(self, helper: parallel.Beside) -> None:
        super().__init__(helper._pool)
        self.given: list[str] = []

    def submit(self, fn, *args, **kwargs):
        self.given.append(fn.__name__)
        return super().submit(fn, *args, **kwargs)


@pytest.mark.slow  # a forked process
def test_the_workbook_written_beside_is_the_one_written_here(tmp_path, fork_server):
    from pytest_gemmperf.report import write_reports

    d = load([CSV_DIR]).dispatches
    here = write_reports(tmp_path / "here", dispatches=d)
    with parallel.beside((EXCEL,)) as helper:
        recording = _Recording(helper)
        there = write_reports(tmp_path / "beside", dispatches=d, beside=recording)
    assert recording.given == ["_write_excel"]
    assert list(there) == list(here)  # the same files, listed in the same order
    # summary.json lists the files where they were written
    got = {k: v.replace(b"/beside/", b"/here/") for k, v in _report_files(tmp_path / "beside").items()}
    assert got == _report_files(tmp_path / "here")


@pytest.mark.slow  # a forked process
def test_a_workbook_that_cannot_be_written_beside_is_the_same_one_line(tmp_path, fork_server):
    from pytest_gemmperf.report import write_reports

    d = load([CSV_DIR]).dispatches
    lines = []
    for name, helper in (("here", None), ("beside", parallel.beside((EXCEL,)))):
        (tmp_path / name / "report.xlsx").mkdir(parents=True)  # not a file: the write fails
        with pytest.raises(OutputError) as exc:
            write_reports(tmp_path / name, dispatches=d, beside=helper)
        if helper is not None:
            helper.close()
        lines.append(str(exc.value).replace(name, "OUT"))
    assert lines[0] == lines[1] and "report.xlsx" in lines[0] and "\n" not in lines[0]
