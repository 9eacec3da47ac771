"""Pool sizes under pytest-xdist (``traces/parallel.py``): each of ``pytest -n K``'s workers
takes a 1/K share of the cores for its reader pool and its pyarrow threads, never all of them."""

from __future__ import annotations

import json

import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces import parallel

pytest_plugins = ["pytester"]


@pytest.fixture
def cores8(monkeypatch):
    """An 8-core machine, outside xdist until a test says otherwise."""
    monkeypatch.setattr(parallel, "usable_cores", lambda: 8)
    monkeypatch.delenv(parallel.XDIST_COUNT_ENV, raising=False)
    return monkeypatch


@pytest.mark.parametrize("count, expected", [(None, 8), ("1", 8), ("2", 4), ("3", 2), ("8", 1),
                                             ("16", 1),              # more workers than cores: 1
                                             ("0", 8), ("-2", 8), ("abc", 8), ("", 8)])  # malformed
def test_default_jobs_is_the_cores_share_of_one_xdist_worker(cores8, count, expected):
    if count is not None:
        cores8.setenv(parallel.XDIST_COUNT_ENV, count)
    assert parallel.default_jobs() == expected
    assert parallel.resolve_jobs(None) == parallel.resolve_jobs(0) == expected


def test_explicit_jobs_and_worker_threads_under_xdist(cores8, tmp_path):
    cores8.setenv(parallel.XDIST_COUNT_ENV, "2")
    assert parallel.resolve_jobs(6) == 6            # an explicit setting is taken as given
    with pytest.raises(GemmperfInputError, match="non-negative"):
        parallel.resolve_jobs(-1)
    # pyarrow threads per pool worker: this xdist worker's 4 cores split between the pool
    assert [parallel.worker_threads(n) for n in (1, 2, 3, 4, 8)] == [4, 2, 1, 1, 1]
    files = []
    for i in range(6):
        f = tmp_path / f"f{i}"
        f.write_bytes(b"x")
        files.append(f)
    assert parallel.pool_jobs(0, files, min_bytes=0) == 4   # the share, not the 8 cores
    assert parallel.pool_jobs(6, files, min_bytes=0) == 6
    cores8.delenv(parallel.XDIST_COUNT_ENV)
    assert parallel.pool_jobs(0, files, min_bytes=0) == 6   # alone: all 8 cores, capped at 6 files


def _pyarrow_threads(_: int) -> int:
    import pyarrow

    return pyarrow.cpu_count()


def test_pool_workers_get_the_shared_thread_count(cores8):
    """The pool's initializer really sets each worker's pyarrow CPU pool to its share."""
    cores8.setenv(parallel.XDIST_COUNT_ENV, "2")
    assert parallel.map_ordered(_pyarrow_threads, [0, 1], jobs=2) == [2, 2]


def test_real_xdist_workers_see_their_share(pytester):
    """Under a real ``pytest -n 2`` each worker's default pool is half of this machine's cores
    (at least 1): xdist sets the variable the module reads."""
    pytest.importorskip("xdist")
    pytester.makepyfile(test_share="""
        import json, os
        from pathlib import Path
        from pytest_gemmperf.traces import parallel

        def test_a(request):
            name = os.environ.get("PYTEST_XDIST_WORKER", "main") + "-" + request.node.name
            Path(name + ".share").write_text(json.dumps([os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
                                                         parallel.usable_cores(), parallel.default_jobs()]))

        test_b = test_a
    """)
    # the plugin is not loaded: the pool size is a function of xdist's variable and the cores alone
    out = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "-p", "no:gemmperf")
    out.assert_outcomes(passed=2)
    shares = {p.name: json.loads(p.read_text()) for p in pytester.path.glob("*.share")}
    assert len(shares) == 2 and all(n.startswith("gw") for n in shares), shares
    for count, cores, share in shares.values():
        assert count == "2" and share == max(1, cores // 2)
