"""``gemmperf analyze`` of inputs whose reports need the full tables (collective metadata
matched across ranks, counters, ranks with and without the metadata) reads each source once:
the sources that force the full tables hand their whole reads back from the per-source pass and
only the others are read again. Its files are those of reading everything again after the
reduction was refused (the way it was done before)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pytest_gemmperf.analysis import source_totals
from pytest_gemmperf.cli import main
from pytest_gemmperf.commands import analyze_impl
from pytest_gemmperf.traces.discover import load
from test_compare_read_once import reads  # noqa: F401  (the fixture: how often each source is read)
from test_gate_slim_samples import JSON_V7, _tree

FILES = ("kernels.csv", "summary.json", "summary.md", "report.html")
#: when a report was written (report.html says it)
WRITTEN_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?")


def _read_again(paths, *, jobs=1, warmup=0, point=None, rules=(), reports=True, meanwhile=None):
    """The reduction, else every source read once more (the files' reference)."""
    reduced = source_totals.reduce_sources(paths, jobs=jobs, warmup=warmup, point=point, rules=rules,
                                           reports=reports, meanwhile=meanwhile)
    return load(paths, point=point, jobs=jobs) if reduced is None else reduced


def _input(kind: str, tmp_path: Path) -> Path:
    if kind == "counters":
        (tmp_path / "c").mkdir()
        return Path(shutil.copy(JSON_V7, tmp_path / "c" / JSON_V7.name))
    return _tree(kind, tmp_path / "in", 11)


@pytest.mark.parametrize("kind", ["torch-collectives", "torch-mixed-collectives", "counters"])
@pytest.mark.parametrize("warmup", [0, 2])
def test_analyze_reads_each_source_once_and_writes_the_same_files(tmp_path, monkeypatch, reads, kind, warmup):
    src = _input(kind, tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = ["analyze", str(src), "--jobs", "1", "--warmup", str(warmup)]
    assert main([*argv, "--out", str(tmp_path / "once")]) == 0
    counted = {str(Path(path).relative_to(src if src.is_dir() else src.parent).parent): n
               for path, n in reads.items()}
    # the ranks without collective metadata (those _tree writes so) are read again, no other
    again = {"256thread/nccl_4channels/rank1", "512thread/nccl_4channels/rank0",
             "512thread/nccl_4channels/rank1"} if kind == "torch-mixed-collectives" else set()
    assert counted and counted == {where: 2 if where in again else 1 for where in counted}, counted
    monkeypatch.setattr(analyze_impl, "reduce_or_read", _read_again)
    assert main([*argv, "--out", str(tmp_path / "twice")]) == 0
    for name in FILES:
        once, twice = (WRITTEN_AT.sub("TIME", (tmp_path / out / name).read_text(encoding="utf-8")
                                      .replace(str(tmp_path / out), "OUT")) for out in ("once", "twice"))
        assert once == twice, name
