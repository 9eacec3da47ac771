"""Replay backend: map declared sweep points onto outputs that already exist; run nothing.

Two layouts are understood:

* aorta sweep (aorta-pipeline.md §2.1): ``<dir>/<T>thread/nccl_<C>channels/`` is point
  ``ch<C>-th<T>``;
* this project's results (ARCHITECTURE.md): ``<dir>/<test_slug>/<point>/`` under a results
  directory that holds ``run.json`` (``<dir>`` may also be the parent of several timestamped
  results directories: the newest is used).

A declared id matches a stored one when every declared ``<abbr><value>`` token is among the
stored tokens, so ``th256`` finds ``ch28-th256`` as long as only one stored point fits.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GemmperfInputError
from .results import base_test_id, slugify_test_id
from ..traces import discover as _discover
from ..traces import kinds

_AORTA_THREADS = re.compile(r"^(\d+)thread$")
_AORTA_CHANNELS = re.compile(r"^nccl_(\d+)channels$")
# abbreviation = leading lower-case letters (ch, th, algo...), value = the rest
_TOKEN = re.compile(r"^([a-z_]+)(.*)$")


class ReplayMissing(Exception):
    """A declared point has no data in the replay directory (the plugin skips or fails it)."""

    def __init__(self, point_id: str, replay_dir: Path, reason: str,
                 available: list[str]) -> None:
        self.point_id = point_id
        self.replay_dir = replay_dir
        self.available = available
        shown = ", ".join(available[:20]) + (" ..." if len(available) > 20 else "")
        super().__init__(f"replay {replay_dir}: point {point_id}: {reason} "
                         f"(available: {shown or 'none'})")


@dataclass(frozen=True)
class ReplayResult:
    point: str
    stored_point: str
    layout: str                      # "aorta" or "results"
    directory: Path
    files: tuple[Path, ...]
    test_slug: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def sources(self) -> list:
        """``traces.discover.discover`` on the point directory (imported lazily)."""
        return _discover.discover(self.directory)

    def load(self):
        """One ``Trace`` of every file of the point (``traces.discover.load``)."""
        return _discover.load(list(self.files))


def point_tokens(point_id: str) -> dict[str, str]:
    """``ch28-th256`` -> ``{"ch": "28", "th": "256"}``."""
    tokens: dict[str, str] = {}
    for tok in point_id.split("-"):
        m = _TOKEN.match(tok)
        if not tok:
            raise ValueError(f"point id {point_id!r} has an empty token")
        if m and m.group(2):
            tokens[m.group(1)] = m.group(2)
        else:  # no separable value: the whole token must match
            tokens[tok] = ""
    return tokens


def default_test_slug(test_id: str) -> str:
    """``perf_tests/test_x.py::test_y[ch28]`` -> ``perf_tests_test_x.py__test_y`` (the results
    writer's rule before items had their own identity)."""
    return slugify_test_id(base_test_id(test_id))


def results_test_slug(root: Path, test_id: str) -> str:
    """The directory of ``test_id`` in the results directory ``root``: the writer's name for the
    test's id (``item_test_id``), else, for results written before items had their own
    identity, the old name (:func:`default_test_slug`); the new name when neither exists."""
    for slug in (slugify_test_id(test_id), default_test_slug(test_id)):
        if (root / slug).is_dir():
            return slug
    return slugify_test_id(test_id)


def trace_files(directory: Path) -> list[Path]:
    """The files below a stored point that some source kind reads (its ``replay_globs``)."""
    # traces is the layer above run: imported when a point is replayed, as in ReplayResult

    found: set[Path] = set()
    for pattern in kinds.replay_globs():
        found.update(p for p in directory.glob(pattern) if p.is_file())
    return sorted(found)


def aorta_points(replay_dir: Path) -> dict[str, Path]:
    points: dict[str, Path] = {}
    for tdir in sorted(replay_dir.iterdir()):
        mt = _AORTA_THREADS.match(tdir.name)
        if not (mt and tdir.is_dir()):
            continue
        for cdir in sorted(tdir.iterdir()):
            mc = _AORTA_CHANNELS.match(cdir.name)
            if mc and cdir.is_dir():
                points[f"ch{int(mc.group(1))}-th{int(mt.group(1))}"] = cdir
    return points


def results_root(replay_dir: Path) -> Path | None:
    """The results directory itself, or the newest timestamped one below ``replay_dir``."""
    if (replay_dir / "run.json").is_file():
        return replay_dir
    runs = sorted(p for p in replay_dir.iterdir() if (p / "run.json").is_file())
    return runs[-1] if runs else None


def results_points(root: Path, slug: str | None) -> dict[tuple[str, str], Path]:
    points: dict[tuple[str, str], Path] = {}
    tests = [root / slug] if slug else sorted(p for p in root.iterdir() if p.is_dir())
    for tdir in tests:
        if not tdir.is_dir():
            continue
        for pdir in sorted(tdir.iterdir()):
            if pdir.is_dir() and ((pdir / "point.json").is_file()
                                  or any(pdir.glob("run*/raw"))):
                points[(tdir.name, pdir.name)] = pdir
    return points


def _match(point_id: str, stored: list[str]) -> list[str]:
    if point_id in stored:
        return [point_id]
    want = point_tokens(point_id)
    hits = []
    for sid in stored:
        try:
            have = point_tokens(sid)
        except ValueError:
            continue
        if all(_same_value(have.get(k), v) for k, v in want.items()):
            hits.append(sid)
    return hits


def _same_value(stored: str | None, declared: str) -> bool:
    if stored is None:
        return False
    if stored == declared:
        return True
    try:
        return float(stored) == float(declared)
    except ValueError:
        return False


def replay_point(replay_dir: str | os.PathLike, point_id: str,
                 test_id: str | None = None) -> ReplayResult:
    """Files of ``point_id`` in ``replay_dir``. Raises ``ReplayMissing`` when the point has no
    data (or matches several stored points), ``GemmperfInputError`` when the directory is not
    a sweep or results directory."""
    replay_dir = Path(replay_dir)
    if not replay_dir.is_dir():
        raise GemmperfInputError(replay_dir, "replay directory does not exist")
    aorta = aorta_points(replay_dir)
    if aorta:
        return _pick(replay_dir, point_id, "aorta", {k: (None, v) for k, v in aorta.items()})
    root = results_root(replay_dir)
    if root is None:
        raise GemmperfInputError(replay_dir, "not a sweep directory: expected aorta "
                                 "<T>thread/nccl_<C>channels/ folders or a gemmperf results "
                                 "directory (run.json)")
    slug = results_test_slug(root, test_id) if test_id else None
    stored = results_points(root, slug)
    if slug and not stored:
        tests = sorted(p.name for p in root.iterdir() if p.is_dir())
        raise ReplayMissing(point_id, root, f"no results for test {slug}", tests)
    by_point: dict[str, tuple[str | None, Path]] = {}
    clashes: set[str] = set()
    for (tslug, pid), path in stored.items():
        if pid in by_point:
            clashes.add(pid)
        by_point[pid] = (tslug, path)
    result = _pick(root, point_id, "results", by_point)
    if result.stored_point in clashes:
        tests = sorted(t for (t, p) in stored if p == result.stored_point)
        raise ReplayMissing(point_id, root, "stored under several tests; pass the test id",
                            tests)
    return result


def _pick(root: Path, point_id: str, layout: str,
          points: dict[str, tuple[str | None, Path]]) -> ReplayResult:
    available = sorted(points)
    hits = _match(point_id, available)
    if not hits:
        raise ReplayMissing(point_id, root, "no stored point matches", available)
    if len(hits) > 1:
        raise ReplayMissing(point_id, root, f"ambiguous, matches {', '.join(hits)}; declare "
                            "the missing axes", available)
    slug, directory = points[hits[0]]
    files = trace_files(directory)
    if not files:
        raise ReplayMissing(point_id, root, f"{directory} holds no trace files", available)
    return ReplayResult(point=point_id, stored_point=hits[0], layout=layout,
                        directory=directory, files=tuple(files), test_slug=slug)


def available_points(replay_dir: str | os.PathLike, test_id: str | None = None) -> list[str]:
    """Point ids stored in ``replay_dir`` (for listings and error messages)."""
    replay_dir = Path(replay_dir)
    aorta = aorta_points(replay_dir)
    if aorta:
        return sorted(aorta)
    root = results_root(replay_dir)
    if root is None:
        return []
    return sorted({p for (_, p) in results_points(root, results_test_slug(root, test_id) if test_id else None)})


__all__ = ["ReplayMissing", "ReplayResult", "aorta_points", "available_points",
           "default_test_slug", "point_tokens", "replay_point", "results_root", "results_test_slug", "trace_files"]
