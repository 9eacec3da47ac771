"""Shard balancing reads what the baseline store really writes: records saved through
``BaselineStore.save`` (versioned layout, per-point metadata merge, sanitised hardware keys)
give ``shard.baseline_durations`` the recorded seconds, and ``ShardHooks`` plans by them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf import shard
from pytest_gemmperf.pytest_glue.shard_hooks import ShardHooks
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.record import BaselineRecord

TEST = "perf_tests/test_gemm.py::test_sweep"
HW_A = "gfx942-AMD Instinct MI300X-x8"   # sanitised on disk: the reader must not rebuild it
HW_B = "gfx950-AMD Instinct MI355X-x8"


def _samples(point: str, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"point": point, "kernel": "Cijk_gemm", "metric": "dur_ns",
                         "unit": [f"host/{100 + i}/0/0" for i in range(4)],
                         "value": rng.lognormal(10, 0.05, 4)})


def _save(store: BaselineStore, hw: str, point: str, seconds: float | None, seed: int = 0) -> None:
    """What the pytest session does after a point is profiled (gate_step.GateStep.save_baseline):
    one point's samples and metadata, merged into the stored record."""
    info = {"backend": "torch", "run_durations_s": [1.0]}
    if seconds is not None:
        info["duration_s"] = seconds
    store.save(BaselineRecord(test_id=TEST, hw_key=hw, samples=_samples(point, seed),
                              meta={"host": "ci-1", "points": {point: info}}), merge=True)


@pytest.fixture
def store(tmp_path):
    s = BaselineStore(tmp_path / "baselines")
    _save(s, HW_A, "ch28", 40.0)
    _save(s, HW_A, "ch56", 5.0)         # a second point: merged, ch28's metadata kept
    _save(s, HW_A, "ch28", 30.0, 1)     # re-recorded: a new version, the pointer moves
    _save(s, HW_A, "ch70", None)        # no run times (a replayed point): unknown
    _save(s, HW_B, "ch56", 8.0)         # another hardware key knows ch56 longer
    return s


def test_durations_of_records_written_by_the_store(store):
    rec = store.load(TEST, HW_A)
    assert sorted(rec.meta["points"]) == ["ch28", "ch56", "ch70"] and rec.meta["points"]["ch28"]["duration_s"] == 30.0
    meta = json.loads((store.path_for(TEST, HW_A) / "meta.json").read_text())
    assert meta["version"] != "v1"     # the versioned layout, read through its pointer
    got = shard.baseline_durations(store.root, [TEST, "perf_tests/test_gemm.py::test_other"])
    assert got == {f"{TEST}[ch28]": 30.0, f"{TEST}[ch56]": 8.0}


def _item(point: str | None, test: str = TEST):
    """A collected item as ShardHooks sees it: node id and, on a sweep, its point."""
    nodeid = f"{test}[{point}]" if point else test
    params = {"gemmperf_point": SimpleNamespace(id=point)} if point else {}
    return SimpleNamespace(nodeid=nodeid, callspec=SimpleNamespace(params=params) if point else None)


def test_shard_plan_uses_the_recorded_durations(store):
    items = [_item(p) for p in ("ch28", "ch56", "ch70", "ch84")]
    deselected = []
    config = SimpleNamespace(hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
    plans = []
    for index in (1, 2):
        gp = SimpleNamespace(options=SimpleNamespace(baseline_dir=store.root), run_fields={})
        hooks = ShardHooks(shard.Shard(index, 2), gp)
        mine = list(items)
        hooks.pytest_collection_modifyitems(None, config, mine)
        assert hooks.info["timed"] == 2 and gp.run_fields["shard"] is hooks.info
        assert "balanced by the recorded durations of 2" in hooks.line()
        plans.append((hooks.info["plan"], [it.nodeid for it in mine]))
    assert plans[0][0] == plans[1][0]
    # LPT on ch28=30 s, ch56=8 s, ch70/ch84 unknown at the median 19 s: {ch28} | {ch56, ch70, ch84}
    ids = [it.nodeid for it in items]
    durations = {f"{TEST}[ch28]": 30.0, f"{TEST}[ch56]": 8.0}
    assert shard.plan_digest(ids, durations, 2) == plans[0][0] != shard.plan_digest(ids, None, 2)
    assert sorted(map(sorted, (plans[0][1], plans[1][1]))) == [
        [f"{TEST}[ch28]"], [f"{TEST}[ch56]", f"{TEST}[ch70]", f"{TEST}[ch84]"]]
    assert sorted(shard.shard_loads(ids, durations, 2)) == [30.0, 46.0]
    assert len(deselected) == 4    # each item deselected by exactly one of the two shards
