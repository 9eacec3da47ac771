"""pytest side of ``--gemmperf-shard I/N``: resolve the setting, deselect the other shards'
items after collection, say what this shard runs. The assignment itself is ``shard.py``.

Registered by ``hooks.py`` (``pytest_configure``) only when a shard is requested.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_gemmperf import shard as shard_mod
from pytest_gemmperf.sweep import DEFAULT_POINT_ID
from pytest_gemmperf.run.results import item_test_id

PLUGIN_NAME = "gemmperf-shard"


def shard_option(config: pytest.Config) -> shard_mod.Shard | None:
    """``--gemmperf-shard`` > ``$GEMMPERF_SHARD`` > ini ``gemmperf_shard``; None: no sharding.
    A malformed value is one ``UsageError`` line naming where it came from."""
    value, flag = config.getoption("gemmperf_shard"), "--gemmperf-shard"
    if value is None and os.environ.get(shard_mod.SHARD_ENV, "").strip():
        value, flag = os.environ[shard_mod.SHARD_ENV], f"${shard_mod.SHARD_ENV}"
    if value is None:
        value, flag = config.getini("gemmperf_shard") or None, "gemmperf_shard (ini)"
    if value in (None, ""):
        return None
    try:
        return shard_mod.parse_shard(value)
    except ValueError as exc:
        raise pytest.UsageError(f"{flag}: {exc}") from None


def item_key(item: pytest.Item) -> str:
    """``test_id[point]`` of a sweep item (durations are recorded per test and point)."""
    return shard_mod.item_id(item_test(item), _point_id(item))


def _point_id(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    point = callspec.params.get("gemmperf_point") if callspec is not None else None
    return getattr(point, "id", None) or DEFAULT_POINT_ID


def item_test(item: pytest.Item) -> str:
    """The test id of an item, as its point's baseline record is keyed (``item_test_id``)."""
    return item_test_id(item.nodeid, _point_id(item))


class ShardHooks:
    """Keeps this shard's items; ``info`` (also written to run.json through the session's
    ``run_fields``) says which, out of how many, under which plan."""

    def __init__(self, shard: shard_mod.Shard, gemmperf_session: Any) -> None:
        self.shard = shard
        self.gp = gemmperf_session
        self.info: dict[str, Any] | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items) -> None:
        """After -k/-m selection (trylast), so every shard of a matrix, given the same
        selection, splits the same list; the other shards' items are reported deselected."""
        if not items:
            return
        ids = [item.nodeid for item in items]
        known = shard_mod.baseline_durations(self.gp.options.baseline_dir, {item_test(i) for i in items})
        durations = {item.nodeid: known[k] for item in items if (k := item_key(item)) in known}
        try:
            keep = shard_mod.select(ids, durations, self.shard)
        except ValueError as exc:
            raise pytest.UsageError(f"--gemmperf-shard: {exc}") from None
        selected = [it for it, k in zip(items, keep) if k]
        deselected = [it for it, k in zip(items, keep) if not k]
        s = self.shard
        self.info = {"shard": str(s), "index": s.index, "count": s.count, "selected": len(selected),
                     "total": len(items), "timed": len(durations),
                     "plan": shard_mod.plan_digest(ids, durations, s.count),
                     "items": [it.nodeid for it in selected]}
        self.gp.run_fields["shard"] = self.info  # run.json: `gemmperf merge` checks the plans agree
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = selected

    def pytest_report_collectionfinish(self, config: pytest.Config, items) -> list[str]:
        return [self.line()] if self.info else []

    def line(self) -> str:
        """``gemmperf shard 1/2: 7 of 13 points (...)``; empty before collection."""
        i = self.info
        if not i:
            return ""
        how = (f"balanced by the recorded durations of {i['timed']}" if i["timed"]
               else "no recorded durations: balanced by count")
        return f"gemmperf shard {i['shard']}: {i['selected']} of {i['total']} points ({how})"


__all__ = ["PLUGIN_NAME", "ShardHooks", "item_key", "shard_option"]
