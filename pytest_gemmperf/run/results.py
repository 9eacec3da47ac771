"""The results layout: one directory per pytest session, one subdirectory per test and point.

```
<results_dir>/run.json
<results_dir>/<test_slug>/<point_id>/point.json
<results_dir>/<test_slug>/<point_id>/run<k>/logs/*.log, run<k>/raw/...
<results_dir>/<test_slug>/<point_id>/{dispatches,counters,agents}.parquet
<results_dir>/<test_slug>/verdicts.csv
```

Everything analysis, reports and ``gemmperf baseline refresh`` need is here, so none of them
has to touch a GPU again. Several pytest-xdist workers write into one directory: each point
directory has one writer; the shared files (``run.json``, ``verdicts.csv``) are written under a
file lock and replaced atomically.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from pytest_gemmperf import safe_io
from pytest_gemmperf.paths import contained

RUN_JSON = "run.json"
POINT_JSON = "point.json"
VERDICTS_CSV = "verdicts.csv"
TABLE_FILES = {"dispatches": "dispatches.parquet", "counters": "counters.parquet",
               "agents": "agents.parquet"}
TIMESTAMP_FORMAT = "%Y-%m-%dT%H-%M-%S"

_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def base_test_id(nodeid: str) -> str:
    """Node id without the parameter part: ``a/t.py::test_x[ch28]`` -> ``a/t.py::test_x``."""
    return nodeid.split("[", 1)[0]


def slugify_test_id(test_id: str) -> str:
    """``perf_tests/test_x.py::test_y`` -> ``perf_tests_test_x.py__test_y`` (one path segment)."""
    s = test_id.replace("::", "__").replace("/", "_").replace("\\", "_")
    return _SLUG_UNSAFE.sub("_", s)


def timestamped_dir(base: Path, now: _dt.datetime | None = None) -> Path:
    """``base/<YYYY-mm-ddTHH-MM-SS>``, with ``-1``, ``-2``... when a session of the same second
    already used the name (two CI jobs sharing a workspace)."""
    stamp = (now or _dt.datetime.now()).strftime(TIMESTAMP_FORMAT)
    candidate = base / stamp
    n = 0
    while candidate.exists():
        n += 1
        candidate = base / f"{stamp}-{n}"
    return candidate


def atomic_write_text(path: Path, text: str) -> None:
    """Write through a private temp file + fsync + rename (``safe_io``: never through a link)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_io.write_text(path, text)


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


@dataclass(frozen=True)
class ResultsDir:
    """One session's results directory (shared by all xdist workers of the session)."""

    root: Path

    # every directory below the root is built by paths.contained: a test or point name that
    # is not one plain name, or a link planted in a reused results directory, is refused
    # (GemmperfInputError naming it) instead of sending writes and removals elsewhere
    def test_dir(self, test_id: str) -> Path:
        return contained(self.root, slugify_test_id(test_id))

    def point_dir(self, test_id: str, point_id: str) -> Path:
        return contained(self.root, slugify_test_id(test_id), point_id)

    def run_dir(self, test_id: str, point_id: str, run: int) -> Path:
        return contained(self.root, slugify_test_id(test_id), point_id, f"run{run}")

    def ensure(self, session_meta: Mapping[str, Any]) -> None:
        """Create the directory and ``run.json`` once (the first writer wins)."""
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.root / RUN_JSON
        if target.exists():
            return
        with file_lock(self.root / ".run.json.lock"):
            if not target.exists():
                write_json(target, dict(session_meta))

    def update_run_json(self, **fields: Any) -> None:
        """Add fields to ``run.json`` (e.g. the hardware key once a point has run)."""
        target = self.root / RUN_JSON
        with file_lock(self.root / ".run.json.lock"):
            data = json.loads(target.read_text(encoding="utf-8")) if target.exists() else {}
            changed = False
            for k, v in fields.items():
                if data.get(k) != v:
                    data[k] = v
                    changed = True
            if changed:
                write_json(target, data)


def write_point_json(point_dir: Path, record: Mapping[str, Any]) -> Path:
    path = point_dir / POINT_JSON
    write_json(path, dict(record))
    return path


def write_tables(point_dir: Path, tables: Mapping[str, pd.DataFrame]) -> dict[str, Path]:
    """Write the canonical tables of a point as parquet (categories survive the round trip)."""
    out = {}
    for name, fname in TABLE_FILES.items():
        df = tables.get(name)
        if df is None:
            continue
        path = point_dir / fname
        safe_io.write_parquet(df.reset_index(drop=True), path, index=False)
        out[name] = path
    return out


def read_tables(point_dir: Path) -> dict[str, pd.DataFrame]:
    return {name: pd.read_parquet(point_dir / fname)
            for name, fname in TABLE_FILES.items() if (point_dir / fname).exists()}


def link_latest(results_root: Path) -> None:
    """Point ``<base>/latest`` at this session's directory (best effort: not all file systems
    allow symlinks, and nothing depends on it)."""
    latest = results_root.parent / "latest"
    try:
        if latest.is_symlink() or latest.exists():
            if not latest.is_symlink():
                return
            latest.unlink()
        latest.symlink_to(results_root.name, target_is_directory=True)
    except OSError:
        pass


def file_lock(path: Path):
    """The writers' lock of a shared results file (``run.json``, a test's ``verdicts.csv``):
    xdist workers of one session write them in turn."""
    from filelock import FileLock

    return FileLock(str(path), timeout=600)
