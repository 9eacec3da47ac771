"""A test's ``verdicts.csv`` in a results directory, written point by point by the pytest session.

The store layer owns it (it writes the gate's verdicts, in :func:`~pytest_gemmperf.gate.verdict.verdicts_csv_order`,
the column order ``gemmperf compare`` writes too); the run layer only provides the layout
(``run.results.VERDICTS_CSV``), the atomic write and the writers' lock, so the dependency runs
store -> gate -> run, never back.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pytest_gemmperf import safe_io
from pytest_gemmperf.errors import writing
from pytest_gemmperf.gate.verdict import verdicts_csv_order
from pytest_gemmperf.run.results import VERDICTS_CSV, atomic_write_text, file_lock


def merge_verdicts(test_dir: Path, point_id: str, verdicts: pd.DataFrame) -> Path:
    """Replace this point's rows of ``<test_dir>/verdicts.csv`` and return its path.

    Several xdist workers gate different points of one test, so the read-modify-write runs
    under the test directory's lock and the file is replaced atomically. Rows are kept in
    point order (stable: a point's own row order is preserved), formula-looking cells are
    neutralised on write and restored on read (``safe_io``)."""
    path = test_dir / VERDICTS_CSV
    # a full or read-only results directory: one line, and the earlier verdicts stay whole
    with writing(path, kept="the previous verdicts.csv is kept"):
        _merge(test_dir, path, point_id, verdicts)
    return path


def _merge(test_dir: Path, path: Path, point_id: str, verdicts: pd.DataFrame) -> None:
    test_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(test_dir / ".verdicts.lock"):
        # a link at the name is not ours: it is replaced, and never read as earlier verdicts
        if path.exists() and not path.is_symlink() and path.stat().st_size:
            old = safe_io.unneutralise_frame(pd.read_csv(path, dtype={"point": str}))
            old = old[old["point"].astype(str) != point_id]
            frames = [f for f in (old, verdicts) if len(f)]
            merged = pd.concat(frames, ignore_index=True) if frames else verdicts
        else:
            merged = verdicts
        if "point" in merged.columns:
            merged = merged.sort_values("point", kind="stable")
        atomic_write_text(path, safe_io.csv_text(verdicts_csv_order(merged)))


__all__ = ["merge_verdicts"]
