"""Damage always named: a corrupt baseline store gated from pytest, a complete run that lost
a point, a full disk under an output, truncated side files, over-long test ids, a run recorded
twice into the history, hostile axis values. Each is one line naming what is wrong and the
documented exit status (docs/reference.md, "Exit status"), never a traceback, never a quiet
pass over what is missing.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
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
