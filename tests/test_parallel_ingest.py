"""Parallel, bounded ingest (issue 14 item 1): the pool path equals the serial path exactly.

``traces.parallel.map_ordered`` (process pool, input order) under ``discover.load(jobs=)``, and
``gate.file_reduce.gate_inputs`` (per-source reduction) against ``gate_samples`` /
``kernel_stats`` on the full concatenated table: same rows, same order, same dtypes (category
columns included), same attrs, notes and sources - on rocprofv3 7.x CSV, rocprofv3 JSON and
Kineto inputs. The pool is forced on small fixtures by setting ``POOL_MIN_BYTES`` to 0.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis.kernel_stats import kernel_stats
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.compare import GateConfig, compare
from pytest_gemmperf.gate.file_reduce import gate_inputs
from pytest_gemmperf.gate.samples import compact_samples, gate_samples
from pytest_gemmperf.traces import parallel
from pytest_gemmperf.traces.discover import load

pytest_plugins = ["pytester"]

FIX = Path(__file__).parent / "fixtures"
CSV_DIR = FIX / "rocprof_csv" / "v7" / "mi350-n1"
JSON_V7 = FIX / "rocprof_json" / "v7_two_processes_counters_results.json"
TORCH = FIX / "torch"


@pytest.fixture(autouse=True)
def _pool_on_small_inputs(monkeypatch):
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)


def _csv_tree(root: Path) -> Path:
    """Two ranks x one rocprofv3 process each (<host>/<pid>_* under rank<R>/)."""
    for r in range(2):
        d = root / "csv" / f"rank{r}" / "mi350-n1"
        d.mkdir(parents=True)
        for f in CSV_DIR.glob("5358_*"):
            shutil.copy(f, d / f.name.replace("5358", str(5358 + r)))
    return root / "csv"


def _json_tree(root: Path) -> Path:
    """Two rank directories, each one JSON holding two processes."""
    for r in range(2):
        d = root / "json" / f"rank{r}"
        d.mkdir(parents=True)
        shutil.copy(JSON_V7, d / "x_results.json")
    return root / "json"


def _torch_tree(root: Path) -> Path:
    """Two runs of the two torch fixtures (one plain, one gzipped), plus four ranks of a
    Kineto trace with collective metadata (collective metrics match across files)."""
    from test_collectives import write_rank_trace

    for r in range(2):
        d = root / "torch" / f"run{r}"
        d.mkdir(parents=True)
        for f in TORCH.iterdir():
            shutil.copy(f, d / f.name)
    for r in range(4):
        write_rank_trace(root / "torch" / "coll" / "run2" / f"rank{r}" / "trace.json", r)
    return root / "torch"


TREES = {"csv": _csv_tree, "json": _json_tree, "torch": _torch_tree}


def _same(a, b) -> None:
    """Deep equality of meta dicts that hold DataFrames (torch cpu_ops)."""
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b or (a != a and b != b), (a, b)


@pytest.mark.parametrize("fmt", sorted(TREES))
def test_load_jobs_equals_serial(tmp_path, fmt):
    root = TREES[fmt](tmp_path)
    serial = load([root], jobs=1)
    pooled = load([root], jobs=2)
    for name in ("dispatches", "counters", "agents"):
        pd.testing.assert_frame_equal(getattr(serial, name), getattr(pooled, name), check_exact=True)
    assert (serial.dispatches.dtypes == pooled.dispatches.dtypes).all()
    assert isinstance(pooled.dispatches["kernel"].dtype, pd.CategoricalDtype)
    assert serial.files == pooled.files
    _same(serial.meta, pooled.meta)
    assert serial.dispatches["file"].nunique() >= 2  # several sources: the pool had work to share


@pytest.mark.slow  # a process pool
@pytest.mark.parametrize("fmt", sorted(TREES))
@pytest.mark.parametrize("compact,warmup", [(False, 0), (True, 1)])
def test_gate_inputs_equal_gate_samples(tmp_path, fmt, compact, warmup):
    root = TREES[fmt](tmp_path)
    full = load([root])
    want = gate_samples(full.dispatches, warmup=warmup, compact=compact)
    for jobs in (1, 2):
        got = gate_inputs([root], jobs=jobs, warmup=warmup, compact=compact)
        assert got.reduced  # one process per source here: the per-source path was taken
        pd.testing.assert_frame_equal(want, got.samples, check_exact=True)
        assert want.attrs == got.samples.attrs
        ks = kernel_stats(full.dispatches, by=got.stats_by, warmup=warmup)
        pd.testing.assert_frame_equal(ks, got.kernel_stats, check_exact=True)
        assert got.notes == full.meta["notes"]
        assert got.sources == full.meta["sources"]
        assert got.n_dispatches == len(full.dispatches)
        verdicts = compare(compact_samples(want), got.samples, GateConfig(), test="t")
        pd.testing.assert_frame_equal(compare(compact_samples(want), want, GateConfig(), test="t"), verdicts,
                                      check_exact=True)
    if fmt == "torch":  # the cross-file collective matching ran
        assert {"coll_latency_ns", "coll_busbw_gbps"} <= set(want["metric"])


def test_point_level_conditions_across_files(tmp_path):
    """GEMMs in one process, collectives in another process of the same point: the GEMM
    process still gets its overlap_fraction (0 covered) and timeline rows, as on the full table."""
    lines = (CSV_DIR / "5358_kernel_trace.csv").read_text().splitlines()
    head, rows = lines[0], lines[1:]
    gemm = [r for r in rows if "Cijk" in r or "gemm" in r.lower()]
    other = [r for r in rows if r not in gemm]
    assert gemm and any("nccl" in r for r in other)
    d = tmp_path / "point" / "mi350-n1"
    d.mkdir(parents=True)
    for pid, part in ((100, gemm), (200, other)):
        (d / f"{pid}_kernel_trace.csv").write_text("\n".join([head, *part]) + "\n")
        shutil.copy(CSV_DIR / "5358_agent_info.csv", d / f"{pid}_agent_info.csv")
    full = load([tmp_path / "point"])
    want = gate_samples(full.dispatches, compact=False)
    got = gate_inputs([tmp_path / "point"], jobs=2, compact=False)
    pd.testing.assert_frame_equal(want, got.samples, check_exact=True)
    ov = want[want["metric"] == "overlap_fraction"]
    assert (ov["unit"].str.contains("/100/")).any() and (ov["value"] == 0).all()
    assert (want[want["metric"] == "computation_ns"]["unit"].str.contains("/100/")).any()


@pytest.mark.slow  # a process pool
def test_process_in_two_sources_falls_back_to_full_tables(tmp_path):
    """The same process copied into two directories: not reducible per source, still exact."""
    for sub in ("a", "b"):
        d = tmp_path / "dup" / sub / "mi350-n1"
        d.mkdir(parents=True)
        for f in CSV_DIR.glob("5358_*"):
            shutil.copy(f, d / f.name)
    full = load([tmp_path / "dup"])
    got = gate_inputs([tmp_path / "dup"], jobs=2, warmup=1)
    assert not got.reduced
    pd.testing.assert_frame_equal(gate_samples(full.dispatches, warmup=1), got.samples, check_exact=True)


@pytest.mark.slow  # a process pool
def test_kernel_regexes_and_selection_errors(tmp_path):
    root = _csv_tree(tmp_path)
    full = load([root])
    want = gate_samples(full.dispatches, kernels=["nccl"], warmup=1, path=root)
    got = gate_inputs([root], jobs=2, kernels=["nccl"], warmup=1, path=root)
    pd.testing.assert_frame_equal(want, got.samples, check_exact=True)
    for kw in ({"kernels": ["no_such_kernel"]}, {"warmup": 10_000}):
        with pytest.raises(GemmperfInputError) as serial:
            gate_samples(full.dispatches, path=root, **kw)
        with pytest.raises(GemmperfInputError) as pooled:
            gate_inputs([root], jobs=2, path=root, **kw)
        assert str(pooled.value) == str(serial.value)


@pytest.mark.parametrize("reader", ["load", "gate_inputs"])
def test_worker_error_is_the_serial_one_line(tmp_path, reader):
    root = _json_tree(tmp_path)
    bad = root / "rank1" / "x_results.json"
    doc = json.loads(bad.read_text())
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][0]["start_timestamp"] = "x"
    bad.write_text(json.dumps(doc))
    fn = load if reader == "load" else gate_inputs
    with pytest.raises(GemmperfInputError) as serial:
        fn([root], jobs=1)
    with pytest.raises(GemmperfInputError) as pooled:
        fn([root], jobs=2)
    assert str(pooled.value) == str(serial.value)
    assert str(bad) in str(pooled.value) and "\n" not in str(pooled.value)
    assert pooled.value.path == serial.value.path and pooled.value.record == serial.value.record


@pytest.mark.slow  # a process pool
def test_map_ordered_keeps_input_order_and_first_error():
    items = [0.3, 0.0, 0.2, 0.1]  # the first item finishes last
    assert parallel.map_ordered(_sleep_then_return, items, jobs=2) == items
    with pytest.raises(GemmperfInputError, match=r"^item-2: bad item$"):
        parallel.map_ordered(_fail_on_even, [1, 3, 2, 4], jobs=2)


def test_workers_take_the_largest_inputs_first(tmp_path):
    sizes = {"a.csv": 10, "b.csv": 300, "c.json.gz": 20, "d.csv": 300, "e.csv": 0}  # .gz: 10x its text
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x" * size)
    paths = [str(tmp_path / name) for name in sizes]
    # b and d tie: input order; c's 20 bytes of gzip stand for about 200 of text
    assert parallel.submission_order(paths) == [1, 3, 2, 0, 4]

    class Src:  # a discovery Source: its size is its files'
        def __init__(self, *names):
            self.files = [tmp_path / n for n in names]

    assert parallel.submission_order([Src("a.csv"), Src("a.csv", "b.csv"), tmp_path / "missing"]) == [1, 0, 2]
    assert parallel.submission_order([3, 1, 2]) == [0, 1, 2]  # no files: input order


@pytest.mark.slow  # a process pool
def test_largest_first_still_returns_input_order(tmp_path):
    paths = []
    for i, size in enumerate([1, 5000, 10, 2000]):
        paths.append(str(tmp_path / f"{i}.csv"))
        Path(paths[-1]).write_bytes(b"x" * size)
    assert parallel.map_ordered(os.path.basename, paths, jobs=2) == ["0.csv", "1.csv", "2.csv", "3.csv"]


@pytest.mark.slow  # a process pool
def test_results_larger_than_the_result_pipe_arrive_whole():
    sizes = [3 * parallel.RESULT_PIPE_BYTES + 7, 10, parallel.RESULT_PIPE_BYTES]
    assert [len(b) for b in parallel.map_ordered(_bytes_of, sizes, jobs=2)] == sizes


def test_the_result_pipe_holds_a_sources_reductions():
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("no pipe sizes on this platform")
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        parallel._widen_result_pipe(pool)
        size = fcntl.fcntl(pool._result_queue._reader.fileno(), fcntl.F_GETPIPE_SZ)
    max_size = Path("/proc/sys/fs/pipe-max-size")
    limit = int(max_size.read_text()) if max_size.exists() else 0
    assert size == parallel.RESULT_PIPE_BYTES or limit < parallel.RESULT_PIPE_BYTES


@pytest.mark.slow  # a process pool
def test_a_worker_keeps_what_it_inherited_out_of_full_collections():
    assert all(n > 0 for n in parallel.map_ordered(_frozen_objects, [1, 2], jobs=2))


def _frozen_objects(_: int) -> int:
    import gc

    return gc.get_freeze_count()


def _bytes_of(n: int) -> bytes:
    return bytes(n)


def test_killed_worker_is_one_line(tmp_path):
    f = tmp_path / "trace.json"
    f.write_text("{}")
    with pytest.raises(GemmperfInputError) as exc:
        parallel.map_ordered(_die, [str(f), str(f)], jobs=2)
    assert str(exc.value).startswith(f"{f}: a worker process died") and "\n" not in str(exc.value)


def _die(x: str) -> str:
    os._exit(9)


def _sleep_then_return(x: float) -> float:
    import time

    time.sleep(x)
    return x


def _fail_on_even(x: int) -> int:
    if x % 2 == 0:
        raise GemmperfInputError(f"item-{x}", "bad item")
    return x


def test_jobs_resolution(tmp_path):
    assert parallel.resolve_jobs(None) == parallel.default_jobs() == parallel.resolve_jobs(0)
    assert parallel.resolve_jobs(3) == 3
    with pytest.raises(GemmperfInputError, match="non-negative"):
        parallel.resolve_jobs(-1)
    small = tmp_path / "a"
    small.write_bytes(b"x" * 10)
    assert parallel.pool_jobs(8, [small, small], min_bytes=1000) == 1  # not worth a worker start
    assert parallel.pool_jobs(8, [small, small], min_bytes=0) == 2  # capped at the file count
    assert parallel.pool_jobs(1, [small, small], min_bytes=0) == 1


@pytest.mark.slow  # a process pool
def test_cli_compare_jobs_gives_the_same_verdicts(tmp_path, capsys):
    from pytest_gemmperf.cli import main

    root = _csv_tree(tmp_path)
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"out{jobs}"
        rc = main(["compare", str(root), str(root), "--no-report", "--jobs", jobs, "--out", str(out)])
        assert rc == 0
        outs.append((out / "verdicts.csv").read_bytes())
    assert outs[0] == outs[1] and len(outs[0].splitlines()) > 1


def test_cli_rejects_negative_jobs(capsys):
    from pytest_gemmperf.cli import main

    assert main(["analyze", "x", "--jobs", "-1"]) == 2  # one line, as every setting's error (config.py)
    assert "--jobs" in capsys.readouterr().err


@pytest.mark.slow  # a process pool
def test_results_dir_points_read_in_parallel(tmp_path):
    """``baseline refresh|learn|diff`` and ``compare`` read results points with jobs workers."""
    from pytest_gemmperf.store.results import records_from_results, results_samples

    root = tmp_path / "res"
    disp = load([CSV_DIR]).dispatches
    for test, pid in (("t_a", 1), ("t_b", 2)):
        for point in ("ch28-th256", "ch56-th256"):
            d = root / test / point
            d.mkdir(parents=True)
            disp.to_parquet(d / "dispatches.parquet")
            (d / "point.json").write_text(json.dumps({"test_id": f"x.py::{test}", "point": point,
                                                      "status": "passed", "warmup": 1}))
    (root / "run.json").write_text(json.dumps({"hardware_key": "hw"}))
    serial = results_samples(root, jobs=1)
    pooled = results_samples(root, jobs=2)
    assert list(serial) == list(pooled) == ["x.py::t_a", "x.py::t_b"]
    for k in serial:
        pd.testing.assert_frame_equal(serial[k], pooled[k], check_exact=True)
    recs1, recs2 = records_from_results(root, jobs=1), records_from_results(root, jobs=2)
    assert [r.test_id for r in recs1] == [r.test_id for r in recs2]
    for a, b in zip(recs1, recs2):
        pd.testing.assert_frame_equal(a.samples, b.samples, check_exact=True)
    assert np.isfinite(serial["x.py::t_a"]["value"]).all()


def test_pytest_jobs_option_and_ini(pytester):
    """``--gemmperf-jobs N`` wins over ini ``gemmperf_jobs``; the default 0 means every usable
    core; a negative value is a usage error naming the option."""
    from pytest_gemmperf.pytest_glue import options as glue_options

    assert glue_options.resolve_options(pytester.parseconfig(), pytester.path).jobs == 0
    pytester.makeini("[pytest]\ngemmperf_jobs = 2\n")
    assert glue_options.resolve_options(pytester.parseconfig(), pytester.path).jobs == 2
    assert glue_options.resolve_options(pytester.parseconfig("--gemmperf-jobs", "3"), pytester.path).jobs == 3
    with pytest.raises(pytest.UsageError, match="--gemmperf-jobs"):
        glue_options.resolve_options(pytester.parseconfig("--gemmperf-jobs", "-1"), pytester.path)
