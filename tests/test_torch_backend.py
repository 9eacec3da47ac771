"""torch backend (trace collection per rank, CPU traces), backend selection, results helpers,
and one real run of the bundled gemm_comm workload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.run import backend as be
from pytest_gemmperf.analysis.selection import select_kernels
from pytest_gemmperf.store.verdicts_file import merge_verdicts
from pytest_gemmperf.run import results as res
from pytest_gemmperf.run import torch_backend as tb
from pytest_gemmperf.traces.torch_trace import read_torch_cpu_trace
from tests.conftest import shared_file

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "fixtures" / "gemmperf_plugin" / "fake_kineto_workload.py"
GEMM_COMM = REPO / "perf_tests" / "workloads" / "gemm_comm.py"


def _cpu_trace(path: Path, rank: int | None, ops: list[tuple[str, float, float]], pid: int = 4242) -> Path:
    events = [{"ph": "X", "cat": "cpu_op", "name": n, "pid": pid, "tid": pid + 1, "ts": ts, "dur": d}
              for n, ts, d in ops]
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": pid,
                   "tid": pid + 1, "ts": 0.5, "dur": 1000.0})
    doc = {"schemaVersion": 1, "traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_collect_rank_traces_groups_by_rank_dir(tmp_path):
    _cpu_trace(tmp_path / "rank1" / "b_step2.json", 1, [("aten::mm", 1.0, 2.0)])
    _cpu_trace(tmp_path / "rank0" / "a.json", 0, [("aten::mm", 1.0, 2.0)])
    _cpu_trace(tmp_path / "rank10" / "nested" / "c.json.gz", 10, [("aten::mm", 1.0, 2.0)])
    _cpu_trace(tmp_path / "loose.json", None, [("aten::mm", 1.0, 2.0)])
    (tmp_path / "rank0" / "notes.txt").write_text("not a trace")
    files = tb.collect_rank_traces(tmp_path)
    assert sorted(files, key=lambda r: -1 if r is None else r) == [None, 0, 1, 10]
    assert [p.name for p in files[0]] == ["a.json"]
    assert tb.collect_rank_traces(tmp_path / "absent") == {}


def test_read_cpu_trace_exact_values_and_nesting(tmp_path):
    # aten::matmul encloses aten::mm on the same thread: both rows kept, not flagged; the outer
    # op is timed by its self time (5.5 - 5.0 us) so the thread's time is counted once
    path = _cpu_trace(tmp_path / "t.json", 1, [("aten::matmul", 10.0, 5.5), ("aten::mm", 10.25, 5.0),
                                               ("c10d::allreduce_", 20.0, 0.75)])
    d = read_torch_cpu_trace(path).dispatches
    assert list(d["kernel"].astype(str)) == ["aten::matmul", "aten::mm", "c10d::allreduce_"]
    assert list(d["start_ns"]) == [10_000, 10_250, 20_000]
    assert list(d["dur_ns"]) == [500, 5_000, 750]
    assert set(d["rank"]) == {1} and set(d["pid"]) == {4242} and set(d["thread_id"]) == {4243}
    assert not d["queue_overlap"].any()
    assert d["source"].astype(str).eq("torch").all()


def test_read_cpu_trace_rejects_traces_without_ops(tmp_path):
    p = tmp_path / "empty.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [{"ph": "M", "name": "process_name"}]}))
    with pytest.raises(GemmperfInputError, match="empty.json: no cpu_op events"):
        read_torch_cpu_trace(p)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GemmperfInputError, match="bad.json"):
        read_torch_cpu_trace(bad)


def test_load_rank_traces_tags_point_run_and_directory_rank(tmp_path):
    _cpu_trace(tmp_path / "rank0" / "a.json", None, [("aten::mm", 1.0, 2.0)], pid=10)
    _cpu_trace(tmp_path / "rank1" / "a.json", None, [("aten::mm", 1.0, 3.0), ("aten::mm", 9.0, 3.0)], pid=11)
    files = tb.collect_rank_traces(tmp_path)
    t = tb.load_rank_traces(files, point="th1", run=2, reader=lambda p: tb.read_trace(p, "cpu"))
    d = t.dispatches
    assert len(d) == 3 and set(d["point"].astype(str)) == {"th1"} and set(d["run"]) == {2}
    assert d.groupby("rank")["pid"].first().to_dict() == {0: 10, 1: 11}
    with pytest.raises(GemmperfInputError, match="no PyTorch profiler traces"):
        tb.load_rank_traces({}, point="th1", run=0)


def test_expand_placeholders_and_env(tmp_path):
    argv = tb.expand_placeholders(["train.py", "--override", "training.output_dir={output_dir}",
                                   "--trace={trace_dir}"], tmp_path / "run0")
    assert argv[2] == f"training.output_dir={tmp_path / 'run0' / 'raw'}"
    assert argv[3] == f"--trace={tmp_path / 'run0' / 'raw' / 'torch_profiler'}"
    env = tb.torch_env(tmp_path / "run0", "cpu")
    assert env == {"GEMMPERF_OUTPUT_DIR": str(tmp_path / "run0" / "raw"),
                   "GEMMPERF_TRACE_DIR": str(tmp_path / "run0" / "raw" / "torch_profiler"),
                   "GEMMPERF_DEVICE": "cpu"}


def test_run_torch_point_runs_and_collects(tmp_path):
    run = tb.run_torch_point([sys.executable, str(FAKE), "--dispatches", "5"],
                             env={**os.environ, "NCCL_MAX_NCHANNELS": "28"}, run_dir=tmp_path / "run0",
                             run=0, device="cpu", timeout_s=60)
    assert run.returncode == 0 and not run.timed_out
    assert sorted(run.files) == [0, 1]
    seen = json.loads((tmp_path / "run0" / "raw" / "env_seen.json").read_text())
    assert seen["NCCL_MAX_NCHANNELS"] == "28" and seen["GEMMPERF_DEVICE"] == "cpu"
    assert "fake workload: 2 ranks" in run.log.read_text()


def test_read_trace_on_gpu_uses_the_kineto_reader():
    path = shared_file("aorta/smci350-zts-gtu-c6-25_200691.1758927066581847260.pt.trace.json")
    d = tb.read_trace(path, "rocm").dispatches
    assert len(d) == 20 and d["kernel"].astype(str).str.startswith("Cijk_").sum() == 6


# ------------------------------------------------------------------------- backend selection

def test_select_backend_auto(monkeypatch):
    monkeypatch.setattr(be, "rocm_gpu_present", lambda: True)
    monkeypatch.setattr(be.shutil, "which", lambda exe: "/opt/rocm/bin/rocprofv3")
    assert be.select_backend("auto").name == "rocprofv3"
    monkeypatch.setattr(be.shutil, "which", lambda exe: None)
    assert be.select_backend("auto") == be.BackendChoice("torch", "rocm", "ROCm GPU present, rocprofv3 not on PATH")
    monkeypatch.setattr(be, "rocm_gpu_present", lambda: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: True)
    assert (be.select_backend("auto").name, be.select_backend("auto").device) == ("torch", "cuda")
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    assert (be.select_backend("auto").name, be.select_backend("auto").device) == ("torch", "cpu")
    assert be.select_backend("auto", replay_dir="/x").name == "replay"
    with pytest.raises(ValueError, match="not on PATH"):
        be.select_backend("rocprofv3")
    with pytest.raises(ValueError, match="needs --gemmperf-replay"):
        be.select_backend("replay")
    with pytest.raises(ValueError, match="unknown backend"):
        be.select_backend("nsys")


def test_rocm_gpu_detection_reads_kfd_topology(tmp_path, monkeypatch):
    for node, version in (("0", "0"), ("1", "90402")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "properties").write_text(f"cpu_cores_count 0\ngfx_target_version {version}\n")
    monkeypatch.setattr(be.os.path, "exists", lambda p: p == "/dev/kfd")
    assert be.rocm_gpu_present(str(tmp_path))
    (tmp_path / "1" / "properties").write_text("gfx_target_version 0\n")
    assert not be.rocm_gpu_present(str(tmp_path))


# ------------------------------------------------------------------------- results helpers

def test_results_names_and_verdict_merge(tmp_path):
    assert res.base_test_id("perf_tests/test_x.py::test_y[ch28-th256]") == "perf_tests/test_x.py::test_y"
    assert res.slugify_test_id("perf_tests/test_x.py::test_y") == "perf_tests_test_x.py__test_y"
    import datetime as dt

    now = dt.datetime(2026, 1, 2, 3, 4, 5)
    first = res.timestamped_dir(tmp_path, now)
    assert first.is_dir() and first.name.startswith("2026-01-02T03-04-05-")
    assert res.timestamped_dir(tmp_path, now) != first
    v = lambda point, verdict: pd.DataFrame({"point": [point], "kernel": ["k"], "verdict": [verdict]})
    merge_verdicts(tmp_path, "ch28", v("ch28", "unchanged"))
    merge_verdicts(tmp_path, "ch56", v("ch56", "regression"))
    merge_verdicts(tmp_path, "ch28", v("ch28", "improvement"))
    merged = pd.read_csv(tmp_path / "verdicts.csv")
    assert merged[["point", "verdict"]].values.tolist() == [["ch28", "improvement"], ["ch56", "regression"]]


@pytest.mark.slow  # a real torch process and profiler, about 0.9 s
def test_gemm_comm_workload_runs_for_real_on_cpu(tmp_path):
    """The bundled workload, one process (no torchrun): real GEMMs, real profiler trace."""
    pytest.importorskip("torch")
    env = {**os.environ, "GEMMPERF_TRACE_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(GEMM_COMM), "--shape", "64x32x48", "--steps", "2",
                           "--warmup-steps", "1", "--gemms-per-step", "3", "--comm-mb", "0.01"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = tb.collect_rank_traces(tmp_path)
    assert list(files) == [0]
    d = tb.load_rank_traces(files, point="x", run=0, reader=lambda p: tb.read_trace(p, "cpu")).dispatches
    mm = d[d["kernel"].astype(str) == "aten::mm"]
    assert len(mm) == 2 * 3 and (mm["dur_ns"] > 0).all()
    assert (d["kernel"].astype(str) == "c10d::allreduce_").sum() == 2
    assert set(d["rank"]) == {0}


def test_gemm_comm_rejects_bad_shape():
    proc = subprocess.run([sys.executable, str(GEMM_COMM), "--shape", "64x32"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "MxNxK" in proc.stderr


def test_select_kernels_regex_search_on_names():
    d = pd.DataFrame({"kernel": pd.Categorical(["Cijk_Ailk_x", "ncclDevKernel", "my_gemm_kernel", "Cijk_Ailk_x"]),
                      "dur_ns": [1, 2, 3, 4]})
    assert select_kernels(d, [r"^Cijk_", "gemm"])["dur_ns"].tolist() == [1, 3, 4]
    assert select_kernels(d, [])["dur_ns"].tolist() == [1, 2, 3, 4]
    assert select_kernels(d, ["^nothing$"]).empty
