"""Cheap processes: a one-rank torchrun point runs its worker without torchrun's agent, a
multi-rank point keeps the agent, and each process of the example workload says where its time
went (``gemmperf-timing:`` lines, tabulated by ``scripts/process_breakdown.py``)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gemmperf.run import backend as be
from pytest_gemmperf.run import environment, process
from pytest_gemmperf.run.process import ONE_RANK_ENV, launch_argv, run_process, split_launch

pytest_plugins = ["pytester"]

# pytester's in-process runs drop the modules they imported afterwards; pyarrow extension types
# cannot be registered twice, so everything the inner sessions use is imported here, once.
import pandas.core.arrays.arrow.extension_types  # noqa: E402,F401
import pyarrow.parquet  # noqa: E402,F401

import pytest_gemmperf.store.baselines  # noqa: E402,F401
import pytest_gemmperf.store.results  # noqa: E402,F401
import pytest_gemmperf.gate.compare  # noqa: E402,F401
import pytest_gemmperf.store.hardware  # noqa: E402,F401
import pytest_gemmperf.gate.samples  # noqa: E402,F401
import pytest_gemmperf.traces.torch_trace  # noqa: E402,F401

REPO = Path(__file__).resolve().parent.parent
GEMM_COMM = REPO / "perf_tests" / "workloads" / "gemm_comm.py"
BREAKDOWN = REPO / "scripts" / "process_breakdown.py"
PY = sys.executable
#: a tiny CPU step: these tests are about launching and timing, not about the GEMMs
TINY = ["--shape", "32x32x32", "--steps", "2", "--warmup-steps", "1", "--gemms-per-step", "2",
        "--comm-mb", "0.05"]
RENDEZVOUS = [f"{k}={v}" for k, v in ONE_RANK_ENV]
PHASES = ["start_to_first_kernel_s", "profiled_s", "export_s", "exit_s"]

PLUGIN_ARGS = ([] if any(ep.value == "pytest_gemmperf.plugin"
                         for ep in importlib.metadata.entry_points(group="pytest11"))
               else ["-p", "pytest_gemmperf.plugin"])


def _no_torchrun(argv: list[str]) -> bool:
    return not any("torchrun" in a or "torch.distributed.run" in a for a in argv)


@pytest.fixture
def no_elastic_env(monkeypatch):
    for name in [n for n in os.environ if n.startswith("TORCHELASTIC_")]:
        monkeypatch.delenv(name)


# --- command lines ---------------------------------------------------------------------------

def test_one_rank_torchrun_starts_the_worker_itself(no_elastic_env):
    assert launch_argv("python train.py --x 1", "torchrun", nproc=1, extra=["--standalone"]) == [
        "env", *RENDEZVOUS, PY, "-u", "train.py", "--x", "1"]
    assert launch_argv([PY, "-m", "pkg.train"], "torchrun")[-4:] == [PY, "-u", "-m", "pkg.train"]
    assert launch_argv("./bench --n 3", "torchrun")[-3:] == ["./bench", "--n", "3"]
    # options about where agents meet mean nothing to a world of one
    meet = ["--rdzv-backend", "c10d", "--rdzv_endpoint=localhost:0", "--master-port", "29500",
            "--monitor-interval=1"]
    assert _no_torchrun(launch_argv("train.py", "torchrun", extra=meet))
    # the profiler goes right before the worker (nothing left outside it)
    outer, inner = split_launch("train.py", "torchrun", nproc=1)
    assert outer == [] and inner[0] == "env" and "WORLD_SIZE=1" in inner


def test_torchrun_is_kept_for_more_ranks_nodes_or_agent_options(monkeypatch, no_elastic_env):
    monkeypatch.setattr(process.shutil, "which", lambda name: "/usr/bin/torchrun")
    assert launch_argv("train.py", "torchrun", nproc=2)[:5] == ["torchrun", "--nnodes", "1",
                                                                  "--nproc_per_node", "2"]
    assert launch_argv("train.py", "torchrun", nproc=1, nnodes=2, extra=["--standalone"])[0] == "torchrun"
    # restarts, log redirection: what the agent does for the worker, so the agent stays
    for extra in (["--max-restarts", "3"], ["--redirects=3"], ["--standalone=1"], ["--rdzv-endpoint"]):
        assert launch_argv("train.py", "torchrun", nproc=1, extra=extra)[0] == "torchrun", extra
    # a launcher written as a list is run as written
    assert launch_argv("train.py", ["torchrun", "--nproc_per_node", "1"]) == [
        "torchrun", "--nproc_per_node", "1", "train.py"]


def test_one_rank_worker_sees_torchruns_variables_and_no_elastic_ones(tmp_path, monkeypatch):
    # inherited from a runner itself started by torchrun: rank 0 would wait for an agent's store
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "outer")
    show = tmp_path / "show.py"
    show.write_text("import json, os\nprint(json.dumps(dict(os.environ)))\n")
    argv = launch_argv([PY, str(show)], "torchrun", nproc=1, extra=["--standalone"])
    res = run_process(argv, env=dict(os.environ), timeout_s=60, log_path=tmp_path / "w.log")
    assert res.ok, res.tail()
    seen = json.loads(res.tail().splitlines()[-1])
    assert {k: seen.get(k) for k, _ in ONE_RANK_ENV} == dict(ONE_RANK_ENV)
    assert not [k for k in seen if k.startswith("TORCHELASTIC_")]
    assert "-u TORCHELASTIC_RUN_ID -u TORCHELASTIC_USE_AGENT_STORE" in " ".join(argv)


@pytest.mark.slow  # a real process that imports torch and starts a gloo group
def test_world_of_one_needs_no_port(tmp_path, no_elastic_env):
    """MASTER_PORT=0: rank 0 of an ``env://`` group binds whatever port the kernel gives it."""
    pytest.importorskip("torch")
    script = tmp_path / "one.py"
    script.write_text("import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
                      "t = torch.ones(2)\ndist.all_reduce(t)\n"
                      "print('world', dist.get_world_size(), t.tolist())\ndist.destroy_process_group()\n")
    res = run_process(launch_argv([PY, str(script)], "torchrun"), env=dict(os.environ), timeout_s=120,
                      log_path=tmp_path / "w.log")
    assert res.ok, res.tail()
    assert "world 1 [1.0, 1.0]" in res.tail()


# --- the breakdown script --------------------------------------------------------------------

def _breakdown(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PY, str(BREAKDOWN), str(path)], capture_output=True, text=True, timeout=60)


def test_breakdown_table_from_timing_lines(tmp_path):
    point = tmp_path / "res" / "t" / "th1"
    (point / "run0" / "logs").mkdir(parents=True)
    (point / "run1" / "logs").mkdir(parents=True)
    (point / "run0" / "logs" / "workload.log").write_text(
        "$ env RANK=0 python -u w.py\nnoise\n"
        "gemmperf-timing: rank=1 start_to_first_kernel_s=5.000 profiled_s=0.500 export_s=0.100 exit_s=0.050\n"
        "[rank0]:gemmperf-timing: rank=0 start_to_first_kernel_s=4.000 profiled_s=0.400 export_s=0.200 exit_s=0.010\n"
        "gemmperf-timing: rank=0 start_to_first_kernel_s=4.0 profiled_s=\n")  # cut off: ignored
    (point / "run1" / "logs" / "workload.log").write_text("another workload, no timing line\n")
    (point / "point.json").write_text(json.dumps({
        "test_id": "t.py::test_x", "point": "th1",
        "runs": [{"run": 0, "duration_s": 12.5, "log": "run0/logs/workload.log"},
                 {"run": 1, "duration_s": 3.0, "log": "run1/logs/workload.log"}]}))
    out = _breakdown(tmp_path / "res")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["test", "point", "run", "rank", *PHASES, "process_s", "run_s"]
    rows = [line.split() for line in lines[1:] if line.strip()]
    assert rows[0] == ["t.py::test_x", "th1", "0", "0", "4.000", "0.400", "0.200", "0.010", "4.610", "12.500"]
    assert rows[1] == ["t.py::test_x", "th1", "0", "1", "5.000", "0.500", "0.100", "0.050", "5.650", "12.500"]
    assert rows[2] == ["t.py::test_x", "th1", "1", "-", "-", "-", "-", "-", "-", "3.000"]
    assert rows[3] == ["t.py::test_x", "th1", "median", "n=2", "4.500", "0.450", "0.150", "0.030", "5.130", "12.500"]


def test_breakdown_refuses_what_is_not_a_results_folder(tmp_path):
    out = _breakdown(tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == f"process_breakdown: {tmp_path}: no point.json below it: not a gemmperf results folder"
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "point.json").write_text("{not json")
    out = _breakdown(tmp_path)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    assert str(tmp_path / "p" / "point.json") in out.stderr and "not valid JSON" in out.stderr


# --- end to end on the CPU -------------------------------------------------------------------

@pytest.mark.usefixtures("without_session_reports")  # no session report is read here
def test_one_rank_point_runs_without_torchrun_and_two_ranks_with_it(pytester, monkeypatch):
    """Two torch points of the example workload through the plugin: one rank (no agent: the
    recorded command is the worker itself) and two ranks (torchrun, as before); both gated
    tables complete, and the breakdown script reads each process's four phases."""
    pytest.importorskip("torch")
    monkeypatch.setattr(be, "rocm_gpu_present", lambda *a: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)
    for name in [n for n in os.environ if n.startswith("TORCHELASTIC_")]:
        monkeypatch.delenv(name)
    pytester.makepyfile(test_ranks=f"""
import sys
from pytest_gemmperf import Axis, sweep

@sweep(ranks=Axis([1, 2], abbr="r"), kernels=[r"^aten::mm$"])
def test_ranks(gemmperf):
    r = gemmperf.profile([sys.executable, {str(GEMM_COMM)!r}, *{TINY!r}], launcher="torchrun",
                         nproc=gemmperf.point.values["ranks"], launcher_args=["--standalone"],
                         env={{"OMP_NUM_THREADS": "1"}}, repeats=1, timeout_s=300)
    assert sorted(r.dispatches["rank"].dropna().astype(int).unique()) == list(range(gemmperf.point.values["ranks"]))
""")
    out = pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
                             "--gemmperf-backend", "torch", "--gemmperf-telemetry=off",
                             "--gemmperf-results-dir=res", "--gemmperf-baseline-dir=base")
    out.assert_outcomes(passed=2)
    res = pytester.path / "res"
    one = json.loads((res / "test_ranks.py__test_ranks" / "r1" / "point.json").read_text())
    two = json.loads((res / "test_ranks.py__test_ranks" / "r2" / "point.json").read_text())
    assert one["status"] == two["status"] == "complete"
    assert _no_torchrun(one["resolved_command"]), one["resolved_command"]
    assert one["resolved_command"][0] == "env" and "WORLD_SIZE=1" in one["resolved_command"]
    assert not _no_torchrun(two["resolved_command"]) and "--nproc_per_node" in two["resolved_command"]

    table = _breakdown(res)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[4:8] == PHASES
    rows = [line.split() for line in lines[1:] if line.strip() and "median" not in line]
    assert sorted((r[1], r[3]) for r in rows) == [("r1", "0"), ("r2", "0"), ("r2", "1")]
    for r in rows:
        phases = [float(x) for x in r[4:8]]
        assert all(v >= 0 for v in phases) and phases[0] > 0, r
        # the process's own lifetime fits inside the launch the runner timed
        assert float(r[8]) <= float(r[9]) + 0.05, r
