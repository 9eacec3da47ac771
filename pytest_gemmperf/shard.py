"""Sharded sweeps: which sweep-point items one CI job of ``N`` runs (``--gemmperf-shard I/N``).

The unit is one collected item (one test x one sweep point): a point is never split, because
its processes and its verdicts belong together.

Method (:func:`assign`): longest-processing-time-first greedy. Items with a known duration
(the baseline's recorded profiling time of that test and point) are placed first, longest
first, each on the shard with the smallest load so far; items without one are given the
median of the known durations (1.0 when nothing is known, i.e. a balanced *count*) and placed
after them. Ties -- equal durations, equal loads -- are broken by a stable hash of the item id
(SHA-256, never Python's salted ``hash``) and then by the lowest shard index, so every job of
the matrix computes the same assignment from the same ids and durations, whatever order
pytest collected them in. LPT is within 4/3 of the optimal makespan; with equal durations it
deals the items out round-robin in hash order (shard sizes differ by at most one).

Contract: the assignment depends only on ``(ids, durations, count)``; each id lands in exactly
one shard. The shards must therefore see the same durations: read them from the shared
baseline store, which only the refresh job writes (see :func:`baseline_durations`).

:func:`plan_digest` fingerprints an assignment; each shard writes it to ``run.json`` and
``gemmperf merge`` refuses shards whose plans differ (they would miss or repeat points).

The plugin reads ``--gemmperf-shard`` (:func:`parse_shard`) in every pytest session, so numpy
and the baseline store are imported only by the functions that plan or read baselines.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np

#: environment variable holding ``I/N`` (between the command line and the ini file)
SHARD_ENV = "GEMMPERF_SHARD"

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based, as written on the command line) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/4"`` -> ``Shard(2, 4)``. Raises ``ValueError`` with what is wrong."""
    m = _SHARD.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not I/N (e.g. 1/4)")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"{text!r}: need 1 <= I <= N and N >= 1")
    return Shard(index, count)


def stable_hash(item_id: str) -> int:
    """64-bit hash of an id that is the same on every machine and Python run."""
    return int.from_bytes(hashlib.sha256(item_id.encode("utf-8")).digest()[:8], "big")


def assign(ids: Sequence[str], durations: Mapping[str, float] | None, count: int) -> np.ndarray:
    """0-based shard of each id (LPT greedy; see the module docstring).

    ``durations`` maps an id to its expected seconds; missing, non-finite or non-positive
    values count as unknown. Duplicate ids are an error (the plan would be ambiguous)."""
    # lazy: keeps every pytest session fast (the plugin loads this module; only a plan needs numpy)
    import numpy as np

    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    ids = [str(i) for i in ids]
    if len(set(ids)) != len(ids):
        dup = sorted(k for k, c in Counter(ids).items() if c > 1)[0]
        raise ValueError(f"item id {dup!r} collected twice; cannot shard")
    n = len(ids)
    out = np.zeros(n, dtype=np.int64)
    if n == 0 or count == 1:
        return out
    durations = durations or {}
    dur = np.array([_as_seconds(durations.get(i)) for i in ids], dtype=float)
    known = np.isfinite(dur)
    fill = float(np.median(dur[known])) if known.any() else 1.0
    dur = np.where(known, dur, fill)
    hashes = np.array([stable_hash(i) for i in ids], dtype=np.uint64)
    # known first, then longest first, then by hash (np.lexsort: last key is the primary one)
    order = np.lexsort((hashes, -dur, ~known))
    load = np.zeros(count, dtype=float)
    # the greedy step depends on the loads so far: one pass over n items, O(count) each
    for i in order:
        s = int(np.argmin(load))  # argmin takes the lowest index among equal loads
        out[i] = s
        load[s] += dur[i]
    return out


def select(ids: Sequence[str], durations: Mapping[str, float] | None, shard: Shard) -> np.ndarray:
    """Boolean mask of the ids shard ``shard`` runs."""
    return assign(ids, durations, shard.count) == shard.index - 1


def plan_digest(ids: Sequence[str], durations: Mapping[str, float] | None, count: int) -> str:
    """Short fingerprint of the full assignment (ids, their shards): equal in every shard of
    one matrix, different when the shards saw different items or durations."""
    a = assign(ids, durations, count)
    text = json.dumps(sorted(zip(map(str, ids), a.tolist())), separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def shard_loads(ids: Sequence[str], durations: Mapping[str, float] | None, count: int) -> list[float]:
    """Expected seconds per shard under the assignment (unknown items at the fill value)."""
    # lazy: keeps every pytest session fast (the plugin loads this module; only a plan needs numpy)
    import numpy as np

    a = assign(ids, durations, count)
    durations = durations or {}
    dur = np.array([_as_seconds(durations.get(str(i))) for i in ids], dtype=float)
    known = np.isfinite(dur)
    fill = float(np.median(dur[known])) if known.any() else 1.0
    dur = np.where(known, dur, fill)
    return np.bincount(a, weights=dur, minlength=count).tolist()


def item_id(test_id: str, point_id: str) -> str:
    """Key of one sweep point item in the durations map (``test_id[point]``)."""
    return f"{test_id}[{point_id}]"


def baseline_durations(baseline_dir: str | os.PathLike, test_ids: Iterable[str]) -> dict[str, float]:
    """Recorded profiling seconds of each ``test_id[point]`` in a baseline store.

    Reads only each record's ``meta.json`` pointer (``metadata.points.<point>.duration_s``, written
    when the baseline is recorded), for every hardware key; when several hardware keys know a
    point the longest time is used (a conservative estimate, and the same in every shard).
    Unreadable or malformed files are skipped: durations only balance the shards, they never
    decide a verdict."""
    # lazy: keeps every pytest session fast (the plugin loads this module; the store loads pandas)
    from pytest_gemmperf.store.record import slug_for_test

    root = Path(baseline_dir)
    out: dict[str, float] = {}
    if not root.is_dir():
        return out
    for test_id in sorted(set(test_ids)):
        slug = slug_for_test(test_id)
        for meta_path in sorted(root.glob(f"*/{slug}/meta.json")):
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(meta, dict) or meta.get("test_id", test_id) != test_id:
                continue
            # the record's user metadata (store/record.py: meta.json "metadata")
            user = meta.get("metadata")
            points = user.get("points") if isinstance(user, dict) else None
            if not isinstance(points, dict):
                continue
            for point, info in points.items():
                d = _as_seconds(info.get("duration_s") if isinstance(info, dict) else None)
                if math.isfinite(d):
                    key = item_id(test_id, str(point))
                    out[key] = max(out.get(key, 0.0), d)
    return out


def _as_seconds(value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return v if math.isfinite(v) and v > 0 else float("nan")


__all__ = ["SHARD_ENV", "Shard", "assign", "baseline_durations", "item_id", "parse_shard",
           "plan_digest", "select", "shard_loads", "stable_hash"]
