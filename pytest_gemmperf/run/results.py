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
import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from pytest_gemmperf import safe_io
from pytest_gemmperf.redact import redact_record
from pytest_gemmperf.paths import contained

RUN_JSON = "run.json"
POINT_JSON = "point.json"
VERDICTS_CSV = "verdicts.csv"
TABLE_FILES = {"dispatches": "dispatches.parquet", "counters": "counters.parquet",
               "agents": "agents.parquet"}
TIMESTAMP_FORMAT = "%Y-%m-%dT%H-%M-%S"
#: longest test directory name: file systems allow 255 bytes, and the point and run
#: directories below must still fit typical path limits
MAX_SLUG = 150
#: names tried before giving up on a fresh run directory (each collision draws a new suffix)
_CREATE_TRIES = 100

_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
# ``<path>::<Class>::<function>[<parameter ids>]``: the first ``::name[`` opens the parameter
# part (file and directory names may hold brackets, parameter ids may hold anything)
_PARAMETRIZED = re.compile(r"^(?P<head>.*?::[A-Za-z_][A-Za-z0-9_]*)\[(?P<ids>.*)\]$", re.DOTALL)


def base_test_id(nodeid: str) -> str:
    """The key records were stored under before items had their own identity: the node id cut
    at its first ``[`` (``a/t.py::test_x[ch28]`` -> ``a/t.py::test_x``). Only for finding
    those records again; :func:`item_test_id` is the key of a test now."""
    return nodeid.split("[", 1)[0]


def item_test_id(nodeid: str, point_id: str) -> str:
    """The id of the test an item belongs to: its node id without the sweep point.

    Everything else that tells two pytest items apart stays: the file path (brackets and all),
    classes, the function and the ids of other parametrizations, so no two items share a
    results folder, a baseline record or a history series. ``test_y[ch28-th256]`` ->
    ``test_y`` (what an ordinary sweep test was always keyed by); ``test_y[ch28-th256-fp16]``
    -> ``test_y[fp16]``; ``test_y[fp16]`` of a test without a sweep (point ``default``) stays
    ``test_y[fp16]``. The point is removed only where it stands as whole ``-``-separated
    parameter ids exactly once; anywhere else the node id is kept whole, which is still
    distinct."""
    head, ids = split_nodeid(nodeid)
    if ids is None:
        return nodeid
    rest = _without_point(ids.split("-"), point_id.split("-"))
    if rest is None:
        return nodeid
    return f"{head}[{'-'.join(rest)}]" if rest else head


def split_nodeid(nodeid: str) -> tuple[str, str | None]:
    """``(path::Class::function, parameter ids)``; ids None for an unparametrized item."""
    m = _PARAMETRIZED.match(nodeid)
    return (nodeid, None) if m is None else (m.group("head"), m.group("ids"))


def _without_point(tokens: list[str], point: list[str]) -> list[str] | None:
    """``tokens`` with the one run equal to ``point`` removed; None when it occurs not exactly
    once (then nobody can say which run is the sweep's)."""
    n = len(point)
    hits = [i for i in range(len(tokens) - n + 1) if tokens[i:i + n] == point]
    if len(hits) != 1:
        return None
    return tokens[:hits[0]] + tokens[hits[0] + n:]


def slugify_test_id(test_id: str) -> str:
    """``perf_tests/test_x.py::test_y`` -> ``perf_tests_test_x.py__test_y``: one path segment of
    at most :data:`MAX_SLUG` characters. When sanitizing loses information (brackets, spaces,
    anything outside ``[A-Za-z0-9._+-]``) or the name is too long, a hash of the whole id is
    appended, so ``test_f[1]`` and ``test_f(1)`` keep apart; plain ids keep their old names."""
    plain = test_id.replace("::", "__").replace("/", "_")
    return distinct_slug(test_id, plain, _SLUG_UNSAFE.sub("_", plain), MAX_SLUG)


def distinct_slug(test_id: str, plain: str, cleaned: str, max_len: int, digits: int = 8) -> str:
    """``cleaned`` when it is exactly ``plain`` (nothing lost), short enough and no special
    directory name; otherwise its start plus ``-`` and ``digits`` hex digits of the SHA-256 of
    ``test_id``, within ``max_len``."""
    if cleaned == plain and len(cleaned) <= max_len and cleaned not in ("", ".", ".."):
        return cleaned
    digest = hashlib.sha256(test_id.encode("utf-8", "surrogatepass")).hexdigest()[:digits]
    return f"{cleaned[:max_len - digits - 1]}-{digest}"


def _random_suffix() -> str:
    return secrets.token_hex(3)


def timestamped_dir(base: Path, now: _dt.datetime | None = None, *,
                    suffix: Callable[[], str] = _random_suffix) -> Path:
    """Create and return ``base/<YYYY-mm-ddTHH-MM-SS>-<random>``, this session's own directory.

    Made at once with an ``mkdir`` that fails when the name exists (then a new suffix is drawn),
    so two sessions started in the same second -- two CI jobs on one runner, a developer and a
    cron job -- never share a directory, whatever the clock says. Raises ``OSError`` when the
    directory cannot be made."""
    stamp = (now or _dt.datetime.now()).strftime(TIMESTAMP_FORMAT)
    base.mkdir(parents=True, exist_ok=True)
    for _ in range(_CREATE_TRIES):
        candidate = base / f"{stamp}-{suffix()}"
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{base}: no free run directory name for {stamp} after {_CREATE_TRIES} tries")


def missing_ancestor(path: Path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist yet (what creating
    ``path`` makes); None when ``path`` exists."""
    top = None
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            break
        top = p
    return top


def remove_unused(path: Path, top: Path | None) -> None:
    """Remove ``path`` and its parents up to ``top`` while they are empty: a session that
    profiled nothing leaves no directory behind. Anything not empty stays untouched."""
    if top is None:
        return
    for p in (path, *path.parents):
        try:
            p.rmdir()
        except OSError:
            return
        if p == top:
            return


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
    # the last net for secrets of this process's environment (results are CI artifacts)
    write_json(path, redact_record(dict(record)))
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
