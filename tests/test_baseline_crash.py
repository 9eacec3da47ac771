"""The baseline store survives ``kill -9`` at every instant of every write.

Fault injection, not timing: every create / write / fsync / rename / unlink / mkdir / rmdir the
store does goes through ``store.fs`` and announces itself there first (a file write is
announced half-way too, so half-written files are visited). For each operation -- a
multi-record refresh that merges one record per point, rewrites another, migrates an
old-layout record and writes a first one; a single save; learn (new and old layout); prune --
``test_kill_at_every_step`` runs it once and copies the whole store before each step k: exactly
what a kill at step k leaves on disk. For every k it checks, with a fresh ``BaselineStore``:

* every record reads fully as its old state or fully as its new one, the records of one
  refresh all old or all new together, each with its variance history exactly as expected;
* ``baseline show``'s verification lists nothing as damaged;
* the next writer (recovery, and every 4th step and at each rename a real save of an unrelated
  record) rolls the interrupted write forward or back without changing what readers saw, and
  leaves no journal, temp file, staged or old version.

Also: the next writer killed at every step of its recovery; the writer killed in-process by a
``_Killed`` exception (a BaseException no store code catches, so no cleanup handler runs -- as
with SIGKILL) at every step of a save; and real subprocess writers killed by SIGKILL.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.store import fs as store_fs
from pytest_gemmperf.store.baselines import BaselineStore
from pytest_gemmperf.store.record import (SCHEMA_VERSION, BaselineRecord, _samples_to_parquet, _sha256,
                                          _variance_to_parquet, normalize_samples, render_summary)

REPO = Path(__file__).resolve().parent.parent
HW = "gfx942-AMD_Instinct_MI300X-x8"
A, B, C, L, Z = (f"perf/test_crash.py::test_{n}" for n in ("a", "b", "c", "legacy", "unrelated"))


class _Killed(BaseException):
    """The injected kill: a BaseException, so ``except Exception`` cleanup never runs."""


def run_samples(seed: int, points=("p1", "p2"), scale: float = 1.0) -> pd.DataFrame:
    """Four processes' dispatches of two kernels per point (enough for a variance contribution)."""
    return _run_samples(seed, tuple(points), scale).copy()


@functools.lru_cache(maxsize=None)
def _run_samples(seed: int, points: tuple[str, ...], scale: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for p in points:
        for u in range(4):
            shift = rng.normal(0, 0.02)
            for k in ("gemm", "nccl"):
                v = rng.lognormal(np.log(1e4) + shift, 0.01, 6) * scale
                rows.append(pd.DataFrame({"point": p, "kernel": k, "metric": "dur_ns",
                                          "unit": f"h/{100 + u}/{u}/0", "value": v.round()}))
    return pd.concat(rows, ignore_index=True)


def write_legacy(root: Path, rec: BaselineRecord, variance: pd.DataFrame | None) -> None:
    """A record as gemmperf wrote it before versions: data files beside meta.json."""
    store = BaselineStore(root)
    d = store.path_for(rec.test_id, rec.hw_key)
    d.mkdir(parents=True)
    samples = normalize_samples(rec.samples)
    blobs = {"samples.parquet": _samples_to_parquet(samples),
             "summary.yaml": render_summary(rec, samples)}
    if variance is not None:
        blobs["variance.parquet"] = _variance_to_parquet(variance)
    for n, b in blobs.items():
        (d / n).write_bytes(b)
    meta = {"schema_version": SCHEMA_VERSION, "test_id": rec.test_id, "hw_key": rec.hw_key, "generation": 3,
            "created": "2026-01-01T00:00:00+00:00", "updated": "2026-01-02T00:00:00+00:00",
            "files": {n: {"sha256": _sha256(b), "bytes": len(b)} for n, b in blobs.items()},
            "stats": {}, "metadata": {"writer": "old gemmperf"}}
    (d / "meta.json").write_text(json.dumps(meta, indent=2))


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A store with A (with history), B, the old-layout L (with history); C does not exist."""
    root = tmp_path_factory.mktemp("template") / "baselines"
    store = BaselineStore(root)
    store.save(BaselineRecord(A, HW, run_samples(1), meta={"points": {"p1": {"r": 1}, "p2": {"r": 1}}}))
    store.save(BaselineRecord(A, HW, run_samples(2)))  # generation 1 moves into A's history
    assert store.learn(A, HW, run_samples(3), "run3")
    store.save(BaselineRecord(B, HW, run_samples(4)))
    legacy_hist = store.load(A, HW).variance.assign(run="legacy run")
    write_legacy(root, BaselineRecord(L, HW, run_samples(5)), legacy_hist)
    assert store.load(L, HW).variance is not None
    return root


def snapshot(root: Path) -> dict[str, tuple[str, str | None]]:
    """test id -> (samples digest, history digest) of every record a fresh store reads."""
    out = {}
    for rec in BaselineStore(root).load_all():
        hist = None if rec.variance is None else hashlib.sha256(
            _variance_to_parquet(rec.variance)).hexdigest()
        out[rec.test_id] = (hashlib.sha256(_samples_to_parquet(rec.samples)).hexdigest(), hist)
    return out


def assert_clean(root: Path) -> None:
    """No journal, temp file, staged, old or pruned leftovers; each record its canonical files."""
    assert sorted(p.name for p in (root / ".txn").iterdir()) == [".gitignore"]
    stray = [p for p in root.rglob("*") if p.name.endswith(".tmp") or ".pruned-" in p.name]
    assert not stray, stray
    for hw in root.iterdir():
        if hw.name.startswith("."):
            continue
        for d in hw.iterdir():
            meta = json.loads((d / "meta.json").read_text())
            if "version" not in meta:  # an old-layout record no write has touched yet
                assert {p.name for p in d.iterdir()} <= {"meta.json", "summary.yaml", "samples.parquet",
                                                         "variance.parquet"}, d
                continue
            assert sorted(p.name for p in d.iterdir()) == ["meta.json", "summary.yaml", meta["version"]], d
            assert (d / "meta.json").read_bytes() == (d / meta["version"] / "meta.json").read_bytes()
            assert (d / "summary.yaml").read_bytes() == (d / meta["version"] / "summary.yaml").read_bytes()


def steps_of(root: Path, op: Callable[[BaselineStore], object]) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    store_fs.hook = lambda kind, path: seen.append((kind, path.name))
    try:
        op(BaselineStore(root))
    finally:
        store_fs.hook = None
    return seen


def kill_at(root: Path, op: Callable[[BaselineStore], object], k: int) -> None:
    count = [0]

    def hook(kind: str, path: Path) -> None:
        if count[0] == k:
            raise _Killed(f"step {k}: {kind} {path}")
        count[0] += 1

    store_fs.hook = hook
    try:
        with pytest.raises(_Killed):
            op(BaselineStore(root))
    finally:
        store_fs.hook = None


OPS: dict[str, tuple[Callable[[BaselineStore], object], list[str]]] = {
    # one refresh of four records: A and B rewritten (A merged per point: its p2 is kept),
    # L migrated from the old layout, C written for the first time
    "refresh": (lambda s: s.save_many([BaselineRecord(A, HW, run_samples(10, points=("p1",))),
                                       BaselineRecord(B, HW, run_samples(11)),
                                       BaselineRecord(C, HW, run_samples(12)),
                                       BaselineRecord(L, HW, run_samples(13))], merge=True), [A, B, C, L]),
    "save": (lambda s: s.save(BaselineRecord(A, HW, run_samples(20))), [A]),
    "learn": (lambda s: s.learn(A, HW, run_samples(21), "run21"), [A]),
    "learn_legacy": (lambda s: s.learn(L, HW, run_samples(22), "run22"), [L]),
    "prune": (lambda s: s.prune(keep_test_ids=[A]), [B, L]),
}


def disk_states(root: Path, op: Callable[[BaselineStore], object], out: Path) -> list[tuple[str, str]]:
    """Run ``op`` once; before each of its steps copy the whole store to ``out/<k>``: exactly
    what a kill at step k leaves on disk (the step not done, every earlier one done)."""
    steps: list[tuple[str, str]] = []

    def hook(kind: str, path: Path) -> None:
        shutil.copytree(root, out / str(len(steps)), symlinks=True)
        steps.append((kind, path.name))

    store_fs.hook = hook
    try:
        op(BaselineStore(root))
    finally:
        store_fs.hook = None
    return steps


def tree_digest(root: Path) -> str:
    """Digest of everything below ``root``: each entry's path, kind, link target and bytes."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):  # links are listed, never followed
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            h.update(f"\0{rel}/{name}\0".encode())
            if os.path.islink(path):
                h.update(b"link:" + os.readlink(path).encode())
            else:
                with open(path, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
        for name in dirnames:
            h.update(f"\0{rel}/{name}/\0".encode())
    return h.hexdigest()


#: what a fresh store reads over a tree (snapshot, list(verify=True)), by the tree's digest
_READS: dict[tuple[str, str], object] = {}


def read_once(kind: str, root: Path, read: Callable[[Path], object]) -> object:
    """``read(root)``, done once per distinct tree: a reader's answer depends on the bytes on
    disk alone, and most kill points leave a tree that an earlier one left too (a kill at an
    fsync leaves what a kill at the next step leaves; a recovery, the clean old or new state)."""
    key = (kind, tree_digest(root))
    if key not in _READS:
        _READS[key] = read(root)
    return _READS[key]


def check_after_kill(root: Path, old: dict, new: dict, together: bool, where: str,
                     full_writer: bool = True) -> str:
    """A fresh store over a killed writer's directory reads every record old or new (all of
    one refresh together), lists nothing damaged; the next writer cleans up without changing
    what readers saw. Returns 'old', 'new' or 'old+new' (a prune: records on their own)."""
    got = dict(read_once("snapshot", root, snapshot))  # before any writer repaired anything
    got.pop(Z, None)  # the next writer's own record (tests that kill the next writer too)
    state = set()
    for t in old.keys() | new.keys():
        if got.get(t) == old.get(t) and old.get(t) != new.get(t):
            state.add("old")
        elif got.get(t) == new.get(t) and old.get(t) != new.get(t):
            state.add("new")
        elif got.get(t) != old.get(t):
            pytest.fail(f"{where}: {t} is neither its old nor its new state")
    if together:
        assert state != {"old", "new"}, f"{where}: the records of one refresh are mixed"
    listed = read_once("list", root, lambda r: BaselineStore(r).list(verify=True))
    assert not listed["status"].str.startswith("damaged").any(), (where, listed[["test_id", "status"]])
    if full_writer:  # the next writer: recovery, then its own write
        BaselineStore(root).save(BaselineRecord(Z, HW, run_samples(99)))
    else:  # what every writer does first, under the lock (cheaper: no encoding)
        BaselineStore(root).recover()
    after = dict(read_once("snapshot", root, snapshot))
    after.pop(Z, None)
    assert after == got, f"{where}: recovery changed what readers saw"
    assert_clean(root)
    return "+".join(sorted(state))


@pytest.mark.slow  # a kill at every step of a save, one store copy each
@pytest.mark.parametrize("name", sorted(OPS))
def test_kill_at_every_step(template: Path, tmp_path: Path, name: str) -> None:
    op, touched = OPS[name]
    old = snapshot(template)
    full = tmp_path / "full"
    shutil.copytree(template, full)
    steps = disk_states(full, op, tmp_path / "at")
    new = snapshot(full)
    for t in touched:
        assert old.get(t) != new.get(t), f"{name} must change {t}"
    kinds = {k for k, _ in steps}
    assert kinds >= ({"rename", "unlink", "rmdir"} if name == "prune" else
                     {"create", "write", "fsync", "rename", "unlink", "mkdir"}), kinds
    together = len(touched) > 1 and name != "prune"  # a prune removes each record on its own
    # every 4th step (and each rename, where the state flips) the next writer is a real save
    seen = [check_after_kill(tmp_path / "at" / str(k), old, new, together, f"{name}, killed at step {k} {steps[k]}",
                             full_writer=k % 4 == 0 or steps[k][0] == "rename")
            for k in range(len(steps))]
    assert "old" in seen and "new" in seen  # both sides of the commit point were visited


@pytest.mark.slow  # a kill at every step of every recovery step
def test_kill_during_recovery(template: Path, tmp_path: Path) -> None:
    """The next writer killed too, at every step of its recovery and write: still all old or
    all new (recovery is idempotent), and the writer after that cleans up."""
    op, touched = OPS["refresh"]
    old = snapshot(template)
    full = tmp_path / "full"
    shutil.copytree(template, full)
    steps = disk_states(full, op, tmp_path / "at")
    new = snapshot(full)
    journal_renames = [i for i, (kind, name) in enumerate(steps)
                       if kind == "rename" and name.endswith(".json") and name != "meta.json"]
    switches = [i for i, (kind, name) in enumerate(steps) if kind == "rename" and name == "meta.json"]
    # staged half-way (rolled back), committed with nothing switched, two of four switched
    for k, expect in ((journal_renames[1] - 5, "old"), (journal_renames[1] + 1, "new"), (switches[2], "new")):
        first = tmp_path / "at" / str(k)
        # the next writer's recovery (what it does first under the lock, before its own write)
        inner = disk_states(first, lambda s: s.recover(), tmp_path / f"again{k}")
        assert any(kind == "rmdir" or kind == "rename" for kind, _ in inner)
        for j in range(len(inner)):
            state = check_after_kill(tmp_path / f"again{k}" / str(j), old, new, True,
                                     f"killed at {k} {steps[k]}, then at {j} {inner[j]}", full_writer=j % 4 == 0)
            assert state == expect


@pytest.mark.slow  # a kill at every step
@pytest.mark.parametrize("name", ["save"])
def test_injected_kill_runs_no_cleanup_and_the_next_writer_recovers(template: Path, tmp_path: Path,
                                                                    name: str) -> None:
    """The same, by raising ``_Killed`` inside the writer at every step: what an exception
    unwinding through the store leaves (lock released, no cleanup) is recoverable too."""
    op, touched = OPS[name]
    old = snapshot(template)
    full = tmp_path / "full"
    shutil.copytree(template, full)
    n = len(steps_of(full, op))
    new = snapshot(full)
    for k in range(n):
        root = tmp_path / f"k{k}"
        shutil.copytree(template, root)
        kill_at(root, op, k)
        check_after_kill(root, old, new, False, f"{name}, _Killed at step {k}", full_writer=k % 4 == 0)
        shutil.rmtree(root)


def test_history_survives_repair_of_a_damaged_record(template: Path, tmp_path: Path) -> None:
    root = tmp_path / "b"
    shutil.copytree(template, root)
    store = BaselineStore(root)
    hist = store.load(A, HW).variance
    fdir = store.files_dir(A, HW)
    (fdir / "samples.parquet").write_bytes(b"PAR1 damaged")  # the samples no longer match
    listed = store.list(verify=True).set_index("test_id")["status"]
    assert listed[A].startswith("damaged:") and "samples.parquet" in listed[A]
    assert listed[B] == "ok"  # the damaged record does not hide or break the others
    damaged: list = []
    assert sorted(r.test_id for r in store.load_all(damaged=damaged)) == [B, L]
    assert len(damaged) == 1 and "samples.parquet" in str(damaged[0])
    notes: list[str] = []
    store.save_many([BaselineRecord(A, HW, run_samples(30))], report=notes.append)
    assert any("kept the variance history" in n for n in notes)
    pd.testing.assert_frame_equal(store.load(A, HW).variance, hist)
    # meta.json lost too: the newest version directory that vouches for the history still does
    (store.path_for(A, HW) / "meta.json").write_text("{broken")
    store.save(BaselineRecord(A, HW, run_samples(31)))
    pd.testing.assert_frame_equal(store.load(A, HW).variance, hist)


def test_legacy_record_loads_and_migrates(template: Path, tmp_path: Path) -> None:
    root = tmp_path / "b"
    shutil.copytree(template, root)
    store = BaselineStore(root)
    d = store.path_for(L, HW)
    before = store.load(L, HW)
    assert before.generation == 3 and store.files_dir(L, HW) == d
    store.save(BaselineRecord(L, HW, run_samples(40)))
    after = store.load(L, HW)
    assert after.generation == 4 and store.files_dir(L, HW) == d / "v4"
    assert sorted(p.name for p in d.iterdir()) == ["meta.json", "summary.yaml", "v4"]  # old files gone
    # the replaced run joined the history; the legacy history is kept
    assert set(before.variance["run"]) < set(after.variance["run"])


SIGKILL_WORKER = textwrap.dedent('''
    import json, os, signal, sys, traceback
    from pytest_gemmperf.store import fs as store_fs
    sys.path.insert(0, sys.argv[2])
    from test_baseline_crash import OPS
    from pytest_gemmperf.store.baselines import BaselineStore
    # the imports are paid once: each writer is a child forked from here, killed at its step k
    status = {}
    for root, k in json.loads(sys.argv[1]):
        pid = os.fork()
        if pid == 0:
            n = [0]
            def hook(kind, path):
                if n[0] == k:
                    os.kill(os.getpid(), signal.SIGKILL)
                n[0] += 1
            store_fs.hook = hook
            try:
                OPS["refresh"][0](BaselineStore(root))
            except BaseException:
                traceback.print_exc()
            os._exit(1)  # never reached by a writer killed at step k
        status[root] = os.waitpid(pid, 0)[1]
    print(json.dumps(status))
''')


@pytest.mark.slow  # writer processes, each killed
def test_real_sigkill_of_a_subprocess_writer(template: Path, tmp_path: Path) -> None:
    op, touched = OPS["refresh"]
    old = snapshot(template)
    full = tmp_path / "full"
    shutil.copytree(template, full)
    steps = steps_of(full, op)
    new = snapshot(full)
    # the journal is renamed into place twice: "staging", then "committed" (the commit point)
    journal_renames = [i for i, (kind, name) in enumerate(steps)
                       if kind == "rename" and name.endswith(".json") and name != "meta.json"]
    commit = journal_renames[1]
    cases = {tmp_path / f"k{k}": (k, expect)
             for k, expect in ((5, "old"), (commit, "old"), (commit + 1, "new"), (len(steps) - 3, "new"))}
    for root in cases:
        shutil.copytree(template, root)
    # no thread but the main one in the process that forks the writers (jemalloc's background
    # thread, OpenBLAS's pool): a fork copies no other thread, nor any lock one of them held
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "ARROW_DEFAULT_MEMORY_POOL": "system", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    work = json.dumps([[str(root), k] for root, (k, _expect) in cases.items()])
    proc = subprocess.run([sys.executable, "-c", SIGKILL_WORKER, work, str(Path(__file__).parent)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    status = json.loads(proc.stdout)
    for root, (k, expect) in cases.items():
        st = status[str(root)]
        assert os.WIFSIGNALED(st) and os.WTERMSIG(st) == signal.SIGKILL, (k, st, proc.stderr[-2000:])
        got = snapshot(root)
        want = old if expect == "old" else new
        assert {t: got.get(t) for t in touched} == {t: want.get(t) for t in touched}, (k, steps[k])
        BaselineStore(root).recover()
        assert snapshot(root) == got
        assert_clean(root)


def test_readers_never_see_half_of_a_live_multi_record_refresh(template: Path, tmp_path: Path) -> None:
    """A writer paused between switching A's and B's meta.json: a lock-free ``load`` of either
    already reads the new state (the committed journal), ``load_all`` waits for the writer's
    lock and returns the whole new state."""
    import threading

    root = tmp_path / "b"
    shutil.copytree(template, root)
    op = lambda s: s.save_many([BaselineRecord(A, HW, run_samples(60)), BaselineRecord(B, HW, run_samples(61))])  # noqa: E731
    full = tmp_path / "full"
    shutil.copytree(template, full)
    op(BaselineStore(full))
    new = snapshot(full)
    paused, go, switches = threading.Event(), threading.Event(), []

    def hook(kind: str, path: Path) -> None:
        if kind == "rename" and path.name == "meta.json":
            switches.append(path)
            if len(switches) == 2:  # A switched, B not yet
                paused.set()
                go.wait(30)

    store_fs.hook = hook
    writer = threading.Thread(target=op, args=(BaselineStore(root),))
    try:
        writer.start()
        assert paused.wait(30)
        store = BaselineStore(root)
        for t in (A, B):
            rec = store.load(t, HW)
            assert hashlib.sha256(_samples_to_parquet(rec.samples)).hexdigest() == new[t][0]
        result: dict = {}
        reader = threading.Thread(target=lambda: result.setdefault("all", snapshot(root)))
        reader.start()
        reader.join(0.2)
        assert reader.is_alive()  # waiting for the writer's lock
        go.set()
        writer.join(30)
        reader.join(30)
    finally:
        go.set()
        store_fs.hook = None
    assert result["all"] == new


def test_hostile_journal_and_planted_links_touch_nothing_outside(template: Path, tmp_path: Path) -> None:
    root = tmp_path / "b"
    shutil.copytree(template, root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    store = BaselineStore(root)
    d = store.path_for(A, HW)
    # a link named like a stale version, pointing outside the store
    (d / "v99").symlink_to(outside, target_is_directory=True)
    store.save(BaselineRecord(A, HW, run_samples(70)))
    assert (outside / "precious").read_text() == "keep me" and not (d / "v99").exists()
    # a journal naming a directory outside the store is refused, not followed
    (root / ".txn" / "00000000000000000001-1-ab.json").write_text(json.dumps(
        {"state": "staging", "records": [{"dir": str(outside), "version": "v1"}]}))
    with pytest.raises(GemmperfInputError, match="invalid or unreadable baseline journal"):
        store.save(BaselineRecord(A, HW, run_samples(71)))
    assert (outside / "precious").read_text() == "keep me"
    assert store.load(A, HW) is not None  # readers ignore it
