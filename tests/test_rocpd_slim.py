"""The rocpd SQLite dispatch rows fetched and kept a batch at a time (``traces/rocpd_slim.py``)
against the whole read: on random databases (one or two runs, with and without the plain-name
views, view rows dropped by its joins, dispatches on the CPU agent, rows without a queue or a
stream, counters) the slim columns and the coded dispatches' table equal the full table's row
for row; on hostile databases the error is the full read's line."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from pytest_gemmperf.traces import rocpd, rocpd_slim
from pytest_gemmperf.traces.rocpd import read_rocpd_db
from pytest_gemmperf.traces.rocpd_slim import SLIM_COLUMNS
from test_csv_slim import same_read
from test_rocpd import SYMBOLS, T0, UUID_A, UUID_B, _db

#: UPDATEs of one dispatch row (``{id}``) of the kinds the full read refuses or reads exactly
HOSTILE = [
    'start = NULL', '"end" = NULL', '"end" = start - 5', "grid_size_x = 'abc'", "grid_size_x = 1.5",
    "queue_id = 18.0", "kernel_id = 999", "agent_id = 9", "start = 1e30", "dispatch_id = x'00'",
    "stream_id = -1", "tid = NULL", "pid = 4321", "workgroup_size_x = 1e400", '"end" = 9223372036854775807',
]


def random_db(tmp_path: Path, rng: random.Random, name: str, hostile: list[str] = ()) -> Path:
    """A rocpd database of one or two runs with a random number of extra dispatches."""
    runs = [(UUID_A, 1234, 3, T0, {"counters": rng.random() < 0.3})]
    if rng.random() < 0.4:
        runs.append((UUID_B, 1299, 2, T0 + 10**9, {"counters": rng.random() < 0.3}))
    p = _db(tmp_path, runs, views=rng.random() < 0.7, name=name)
    conn = sqlite3.connect(p)
    kernel_ids = [k for k, *_ in SYMBOLS]
    for uuid, pid, gpu, t0, _ in runs:
        s, guid = f"_{uuid}", uuid.replace("_", "-")
        no_queue = rng.choice((0.0, 0.0, 0.5, 1.0))
        t = t0 + 100_000
        for i in range(rng.randint(0, 400)):
            did = 100 + i
            start = t + rng.randint(-2000, 2000)
            t += rng.randint(0, 4000)
            dur = rng.choice((0, 1, rng.randint(2, 300_000)))
            queue = None if rng.random() < no_queue else rng.choice((16, 18, 20))
            conn.execute(f'INSERT INTO "rocpd_event{s}" VALUES (?,?,?,?,?,?,?,?,?)',
                         (did, guid, 1, 100 + did, 100 + did, 9000 + did, "{}", "{}", "{}"))
            conn.execute(f'INSERT INTO "rocpd_kernel_dispatch{s}" VALUES ({",".join("?" * 23)})',
                         (did, guid, 77, pid, rng.choice((pid, pid + 50)), rng.choice((gpu, gpu, 0)),
                          rng.choice(kernel_ids), did, queue, rng.choice((0, 565, 567, None)), start,
                          start + dur, 0, rng.choice((0, 4096)), 256, 1, 1, rng.randint(1, 9000), 1, 1,
                          None, did, "{}"))
        for change in hostile:
            rows = conn.execute(f'SELECT id FROM "rocpd_kernel_dispatch{s}"').fetchall()
            conn.execute(f'UPDATE "rocpd_kernel_dispatch{s}" SET {change} WHERE id = ?',
                         (rng.choice(rows)[0],))
    conn.commit()
    conn.close()
    return p


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of a few rows, so that every query is fetched in many."""
    monkeypatch.setattr(rocpd, "_FETCH_BATCH", 32)


@pytest.mark.parametrize("seed", range(12))
def test_random_databases_read_slim_equal_the_full_read(tmp_path, small_batches, seed):
    rng = random.Random(seed)
    p = random_db(tmp_path, rng, f"node-b/{seed}_results.db")
    same_read(read_rocpd_db, p, expect_slim=True)


@pytest.mark.parametrize("seed", range(16))
def test_hostile_databases_fail_with_the_full_reads_line(tmp_path, small_batches, seed):
    rng = random.Random(500 + seed)
    p = random_db(tmp_path, rng, f"node-b/{seed}_results.db", hostile=rng.sample(HOSTILE, rng.randint(1, 2)))
    same_read(read_rocpd_db, p, expect_slim=None)


@pytest.mark.parametrize("change", HOSTILE)
def test_each_hostile_row_alone(tmp_path, small_batches, change):
    p = random_db(tmp_path, random.Random(change), "node-b/1_results.db", hostile=[change])
    same_read(read_rocpd_db, p, expect_slim=None)


def test_no_dispatches_and_counters_only(tmp_path, small_batches):
    """A run without dispatches is the full read's NoDispatches; one with counters only its table."""
    p = _db(tmp_path, [(UUID_A, 1234, 3, T0, {})], name="a_results.db")
    conn = sqlite3.connect(p)
    conn.execute(f'DELETE FROM "rocpd_kernel_dispatch_{UUID_A}"')
    conn.commit()
    conn.close()
    same_read(read_rocpd_db, p, expect_slim=None)


def test_a_dropped_or_changed_row_is_seen(tmp_path, small_batches, monkeypatch):
    """The comparison fails when the slim read loses a row of a batch."""
    p = random_db(tmp_path, random.Random(4), "node-b/4_results.db")
    real_add = rocpd_slim.SlimRows.add
    monkeypatch.setattr(rocpd_slim.SlimRows, "add", lambda self, df: real_add(self, df.iloc[:-1]))
    with pytest.raises(AssertionError):
        same_read(read_rocpd_db, p)


def test_slim_keeps_a_few_bytes_a_dispatch(tmp_path):
    """The slim read's rows hold a combination code, a start and a duration a dispatch."""
    p = random_db(tmp_path, random.Random(9), "node-b/9_results.db")
    seen = []
    real = rocpd_slim.SlimRows.coded

    def spy(self, columns, table):
        kept = [a for parts in self.parts.values() for a in parts] + self.starts.parts
        seen.append(sum(a.nbytes for a in kept) / self.n)
        return real(self, columns, table)

    rocpd_slim.SlimRows.coded = spy
    try:
        read_rocpd_db(p, columns=SLIM_COLUMNS)
    finally:
        rocpd_slim.SlimRows.coded = real
    assert seen and seen[0] <= 10
