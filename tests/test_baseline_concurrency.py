"""4 processes saving and refreshing the same and different baselines at once (``pytest -n 4``):
two save the shared record, two refresh it from results, each also saves a record of its own.

Every record must stay loadable, no temp file may be left, and every point of every record
seen (during the run by the writers themselves, and at the end) must be exactly one writer's
input for that point, never a mix of two writers' files. (A refresh merges per point: a record
may hold one writer's ch28 point and another's ch56 point, as two sequential refreshes would.)
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.record import MAX_HISTORY_RUNS, _samples_to_parquet, normalize_samples, slug_for_test
from pytest_gemmperf.store.results import records_from_results
from pytest_gemmperf.traces.schema import finalize_dispatches

REPO = Path(__file__).resolve().parent.parent
N_PROCS = 4  # twice the cores of the CI machine: the writers overlap; more only repeat the race
ROUNDS = 3
HW = "gfx942-AMD_Instinct_MI300X-x8"
SHARED = "perf_tests/test_shared.py::test_same_record"

WORKER = textwrap.dedent('''
    import hashlib, json, sys, time
    from pathlib import Path
    from pytest_gemmperf.store.baselines import BaselineStore
    from pytest_gemmperf.store.record import BaselineRecord, _samples_to_parquet
    from pytest_gemmperf.store.results import refresh_from_results
    args = json.loads(sys.argv[1])
    wid, store = args["wid"], BaselineStore(args["root"])
    allowed = set(args["allowed"])
    sys.path.insert(0, args["tests"])
    from test_baseline_concurrency import writer_samples as samples  # the parent's inputs

    def digests(rec):
        from pytest_gemmperf.store.record import normalize_samples
        s = rec.samples
        return [hashlib.sha256(_samples_to_parquet(normalize_samples(g))).hexdigest()
                for _p, g in s.groupby(s["point"].astype(str), observed=True)]

    deadline = time.time() + 120
    while not Path(args["go"]).exists():  # start together to maximise overlap
        if time.time() > deadline:
            sys.exit("never got the go signal")
        time.sleep(0.01)
    for r in range(args["rounds"]):
        if wid % 2:
            refresh_from_results(args["results"], store)
        else:
            store.save(BaselineRecord(args["shared"], args["hw"], samples(wid, r), meta={"writer": wid, "round": r}))
        store.save(BaselineRecord(f"perf_tests/test_own.py::test_w{wid}", args["hw"], samples(wid, r)))
        seen = store.load(args["shared"], args["hw"])
        if seen is None or not set(digests(seen)) <= allowed:
            sys.exit(f"writer {wid} round {r}: shared record is not one writer's input")
    print("ok", flush=True)
    # every write is done and checked: skip interpreter teardown, where pyarrow's thread pool
    # now and then aborts the process (apache/arrow#34314), which is not what this test is about
    import os
    os._exit(0)
''')


def writer_samples(w: int, r: int) -> pd.DataFrame:
    rng = np.random.default_rng(1000 * w + r)
    n = 400
    return pd.DataFrame({"point": rng.choice(["ch28-th256", "ch56-th512"], n),
                         "kernel": rng.choice(["Cijk_gemm", "ncclDevKernel_Generic"], n),
                         "metric": "dur_ns", "unit": rng.choice(["a/1/0/0", "a/2/1/0"], n),
                         "value": rng.normal(1e5, 1e3, n).round()})


def digest(samples: pd.DataFrame) -> str:
    return hashlib.sha256(_samples_to_parquet(normalize_samples(samples))).hexdigest()


def point_digests(samples: pd.DataFrame) -> set[str]:
    """The digest of each point's samples."""
    return {digest(g) for _p, g in samples.groupby(samples["point"].astype(str), observed=True)}


def make_results(root: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    n = 120
    start = np.cumsum(rng.integers(10_000, 20_000, n))
    disp = finalize_dispatches(pd.DataFrame({
        "host": "a", "pid": 1 + np.arange(n) % 2, "rank": np.arange(n) % 2, "run": 0, "point": "ch28-th256",
        "kernel": np.where(np.arange(n) % 3 == 0, "Cijk_gemm", "ncclDevKernel_Generic"),
        "start_ns": start, "end_ns": start + rng.integers(5_000, 9_000, n)}), "w.csv")
    pdir = root / slug_for_test(SHARED) / "ch28-th256"
    pdir.mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"hardware_key": HW, "writer_seed": seed}))
    (pdir / "point.json").write_text(json.dumps({"test_id": SHARED, "point": "ch28-th256", "status": "passed"}))
    disp.to_parquet(pdir / "dispatches.parquet")
    return root


@pytest.mark.slow  # concurrent writer processes
def test_parallel_writers_never_mix_records(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    results = {w: str(make_results(tmp_path / f"results{w}", seed=w)) for w in range(1, N_PROCS, 2)}
    allowed = set().union(*(point_digests(writer_samples(w, r)) for w in range(0, N_PROCS, 2) for r in range(ROUNDS)))
    allowed |= set().union(*(point_digests(rec.samples) for w in results for rec in records_from_results(results[w])))
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = []
    for w in range(N_PROCS):
        args = {"wid": w, "root": str(root), "go": str(go), "rounds": ROUNDS, "shared": SHARED, "hw": HW,
                "tests": str(Path(__file__).resolve().parent),
                "results": results.get(w),
                "allowed": sorted(allowed)}
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(args)], cwd=REPO,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    time.sleep(0.5)
    go.touch()
    failures = []
    for w, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        if p.returncode != 0 or out.strip() != "ok":
            failures.append(f"writer {w} rc={p.returncode}: {err.strip().splitlines()[-12:]}")
    assert not failures, failures

    store = BaselineStore(root)
    records = {r.test_id: r for r in store.load_all()}  # every record loads
    assert set(records) == {SHARED} | {f"perf_tests/test_own.py::test_w{w}" for w in range(N_PROCS)}
    assert point_digests(records[SHARED].samples) <= allowed
    assert 1 <= records[SHARED].generation <= N_PROCS * ROUNDS
    for w in range(N_PROCS):  # a record written by one process only ends at its last input
        own = records[f"perf_tests/test_own.py::test_w{w}"]
        assert digest(own.samples) == digest(writer_samples(w, ROUNDS - 1))
        assert own.generation == ROUNDS
    leftovers = [p for p in root.rglob("*") if p.name.endswith(".tmp") or ".pruned-" in p.name]
    assert not leftovers
    assert sorted(p.name for p in (root / ".txn").iterdir()) == [".gitignore"]  # no journal left
    for d in root.iterdir():
        if not d.name.startswith("."):
            for rec_dir in d.iterdir():
                meta = json.loads((rec_dir / "meta.json").read_text())
                # the pointer, its derived summary and exactly the one version it points to
                assert sorted(p.name for p in rec_dir.iterdir()) == ["meta.json", "summary.yaml", meta["version"]]
                names = sorted(p.name for p in (rec_dir / meta["version"]).iterdir())
                # each refresh that replaced samples moved the old run's variance into the history
                assert names in (["meta.json", "samples.parquet", "summary.yaml"],
                                 ["meta.json", "samples.parquet", "summary.yaml", "variance.parquet"])
    for rec in records.values():
        if rec.generation > 1:
            assert rec.variance is not None
            assert 1 <= rec.variance["seq"].nunique() <= rec.generation - 1
            assert rec.variance.groupby("point")["seq"].nunique().max() <= MAX_HISTORY_RUNS
            assert (rec.variance["df"] > 0).all() and (rec.variance["ss"] >= 0).all()


def test_reader_waits_for_writer_cleaning_up(tmp_path: Path) -> None:
    """A reader whose version is being removed under it (a writer switched meta.json to the
    next version and is deleting the old one) must read again -- at last waiting for the
    writers' lock -- and return the new record, not report corruption."""
    import threading

    from pytest_gemmperf.store import record as bl

    store = BaselineStore(tmp_path)
    store.save(bl.BaselineRecord(SHARED, HW, writer_samples(0, 0)))
    d = store.path_for(SHARED, HW)
    new = bl.BaselineRecord(SHARED, HW, normalize_samples(writer_samples(1, 0)))
    old_meta = json.loads((d / "meta.json").read_text())
    plan = store._plan(d, new, old_meta, bl._samples_to_parquet(new.samples), bl.render_summary(new), None)
    lock = store._lock()
    lock.acquire()
    (d / "v1" / "samples.parquet").unlink()  # half-way through the old version's removal
    result: dict = {}

    def read() -> None:
        try:
            result["rec"] = store.load(SHARED, HW)
        except Exception as exc:  # noqa: BLE001 - asserted below
            result["exc"] = exc

    t = threading.Thread(target=read)
    t.start()
    time.sleep(0.2)
    assert t.is_alive() and not result  # waiting on the lock, not failing
    store._commit([plan])  # the writer finishes: v2 switched in, v1 gone
    lock.release()
    t.join(30)
    assert "exc" not in result, result.get("exc")
    assert digest(result["rec"].samples) == digest(writer_samples(1, 0))
    assert result["rec"].generation == 2
