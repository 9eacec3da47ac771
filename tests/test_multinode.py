"""Multi-node points: ``profile(launcher="torchrun", nnodes=2)`` as two torchrun node agents on
this machine (a c10d rendezvous in a store the launcher holds, gloo on the CPU), their rank traces gathered into one point;
the ``srun`` command line; agents stopping together when one fails."""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.run import backend as be
from pytest_gemmperf.run import environment, process
from pytest_gemmperf.run.process import launch_argv, node_launch_argvs, split_launch
from pytest_gemmperf.run.torch_backend import load_rank_traces, read_trace, run_torch_nodes

pytest_plugins = ["pytester"]

# pytester's in-process runs drop the modules they imported afterwards; pyarrow extension types
# cannot be registered twice, so everything the inner sessions use is imported here, once.
import pandas.core.arrays.arrow.extension_types  # noqa: E402,F401
import pyarrow.parquet  # noqa: E402,F401

import pytest_gemmperf.gate.compare  # noqa: E402,F401
import pytest_gemmperf.gate.samples  # noqa: E402,F401
import pytest_gemmperf.store.baselines  # noqa: E402,F401
import pytest_gemmperf.store.hardware  # noqa: E402,F401
import pytest_gemmperf.store.results  # noqa: E402,F401
import pytest_gemmperf.traces.torch_trace  # noqa: E402,F401

REPO = Path(__file__).resolve().parent.parent
GEMM_COMM = REPO / "perf_tests" / "workloads" / "gemm_comm.py"
FAKE = REPO / "tests" / "fixtures" / "gemmperf_plugin" / "fake_kineto_workload.py"
PY = sys.executable
#: a tiny CPU step: the test is about ranks and nodes, not about the GEMMs
TINY = ["--shape", "32x32x32", "--steps", "2", "--warmup-steps", "1", "--gemms-per-step", "2",
        "--comm-mb", "0.05"]

PLUGIN_ARGS = ([] if any(ep.value == "pytest_gemmperf.plugin"
                         for ep in importlib.metadata.entry_points(group="pytest11"))
               else ["-p", "pytest_gemmperf.plugin"])


def test_node_agent_command_lines(monkeypatch):
    monkeypatch.setattr(process.shutil, "which", lambda name: "/usr/bin/torchrun")
    nodes = node_launch_argvs([PY, "train.py", "--x", "1"], nproc=4, nnodes=2, master_port=29555)
    assert nodes == [["torchrun", "--nnodes", "2", "--nproc_per_node", "4", "--node_rank", str(k),
                      "--master_addr", "127.0.0.1", "--master_port", "29555", "train.py", "--x", "1"]
                     for k in (0, 1)]
    # the user's rendezvous replaces ours; the port is free and differs per call otherwise
    mine = node_launch_argvs("train.py", 1, 3, ["--rdzv-backend", "c10d", "--rdzv-endpoint=head:29400"])
    assert len(mine) == 3 and all("--master_port" not in a and "--rdzv-endpoint=head:29400" in a for a in mine)
    # by default the agents meet in a c10d store this process holds open: no port to lose
    agents = node_launch_argvs("train.py", 1, 2)
    endpoints = {a[a.index("--rdzv-endpoint") + 1] for a in agents}
    assert len(endpoints) == 1 and 0 < int(endpoints.pop().rsplit(":", 1)[1]) < 65536
    assert all("--master_port" not in a and "is_host=false" in a for a in agents)
    assert [a[a.index("--local-addr") + 1] for a in agents] == ["127.0.0.1", "127.100.100.100"]
    with pytest.raises(ValueError, match="nnodes >= 2"):
        node_launch_argvs("train.py", 1, 1)


def test_srun_and_torchrun_multinode_command_lines():
    # srun starts every task itself; rank and host come from SLURM_PROCID / SLURMD_NODENAME in
    # the tasks' environment, and rocprofv3 goes inside srun (each rank profiled)
    assert launch_argv("./app --n 3", "srun", nproc=8, nnodes=2) == [
        "srun", "--nodes=2", "--ntasks-per-node=8", "./app", "--n", "3"]
    outer, inner = split_launch("./app", "srun", nproc=2, nnodes=4, extra=["--gpus-per-task=1"])
    assert outer == ["srun", "--nodes=4", "--ntasks-per-node=2", "--gpus-per-task=1"] and inner == ["./app"]
    # one torchrun call for 2 nodes without a rendezvous would wait forever: refused
    with pytest.raises(ValueError, match="needs a rendezvous"):
        launch_argv("train.py", "torchrun", nproc=2, nnodes=2)
    ok = launch_argv("train.py", "torchrun", nproc=2, nnodes=2,
                     extra=["--rdzv-backend=c10d", "--rdzv-endpoint=head:29400"])
    assert ok[-3:] == ["--rdzv-backend=c10d", "--rdzv-endpoint=head:29400", "train.py"]


@pytest.mark.slow  # two real node agents
def test_two_node_agents_gather_all_ranks(tmp_path):
    """2 agents x 2 processes, gloo on the CPU: 4 rank traces, ranks 0..3, one world."""
    nodes = node_launch_argvs([PY, str(GEMM_COMM), *TINY], nproc=2, nnodes=2)
    t0 = time.monotonic()
    run = run_torch_nodes(nodes, env=dict(__import__("os").environ), run_dir=tmp_path / "run0", run=0,
                          device="cpu", timeout_s=120, world_size=4)
    assert run.returncode == 0, run.tail
    assert time.monotonic() - t0 < 90
    assert sorted(run.files) == [0, 1, 2, 3] and run.missing_ranks == []
    # node addresses sort in node order: node k runs global ranks 2k, 2k+1, in its own tree and log
    assert run.node_ranks == {0: [0, 1], 1: [2, 3]}
    for rank, paths in run.files.items():
        assert all(f"node{rank // 2}" in p.parts for p in paths)
    assert [p.name for p in run.node_logs] == ["node0.log", "node1.log"]
    trace = load_rank_traces(run.files, point="p", run=0, reader=lambda p: read_trace(p, "cpu"))
    d = trace.dispatches
    assert sorted(d["rank"].dropna().astype(int).unique()) == [0, 1, 2, 3]
    per_rank = d.groupby("rank", observed=True)["pid"].nunique()
    assert (per_rank == 1).all() and d["pid"].nunique() == 4  # four processes, one per rank
    assert d["host"].astype(str).nunique() == 1 and d["host"].astype(str).iloc[0] not in ("", "nan")


def test_a_failing_agent_stops_the_others(tmp_path):
    nodes = [[PY, "-c", "import time; time.sleep(120)"],
             [PY, "-c", "import sys; print('node 1 broke'); sys.exit(3)"]]
    t0 = time.monotonic()
    run = run_torch_nodes(nodes, env=dict(__import__("os").environ), run_dir=tmp_path / "r", run=0,
                          device="cpu", timeout_s=120, world_size=2)
    assert time.monotonic() - t0 < 30          # not the 120 s the sleeping agent asked for
    assert run.returncode == 3 and "node 1 broke" in run.tail and run.log.name == "node1.log"
    assert "as another node agent failed" in (tmp_path / "r" / "logs" / "node0.log").read_text()


def test_same_rank_from_two_nodes_is_an_error(tmp_path):
    # two agents that never rendezvoused: each thinks it is rank 0 of a world of one
    nodes = [[PY, str(FAKE), "--ranks", "1", "--dispatches", "3"]] * 2
    with pytest.raises(GemmperfInputError, match="rank 0 written by node 0 and node 1"):
        run_torch_nodes(nodes, env=dict(__import__("os").environ), run_dir=tmp_path / "r", run=0,
                        device="cpu", timeout_s=60, world_size=2)


@pytest.mark.usefixtures("without_session_reports")  # no session report is read here
def test_plugin_point_with_two_node_agents(pytester, monkeypatch):
    """``gemmperf.profile(..., launcher="torchrun", nnodes=2)`` end to end: one point, both
    nodes' ranks in its tables and point.json."""
    monkeypatch.setattr(be, "rocm_gpu_present", lambda *a: False)
    monkeypatch.setattr(be, "cuda_gpu_present", lambda: False)
    monkeypatch.setattr(environment, "read_proc_stat", lambda *a, **k: None)
    pytester.makepyfile(test_mn=f"""
import sys
from pytest_gemmperf import sweep

@sweep(kernels=[r"^aten::mm$"])
def test_mn(gemmperf):
    r = gemmperf.profile([sys.executable, {str(GEMM_COMM)!r}, *{TINY!r}], launcher="torchrun",
                         nproc=1, nnodes=2, repeats=1, timeout_s=120)
    assert sorted(r.dispatches["rank"].dropna().astype(int).unique()) == [0, 1]
""")
    out = pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:benchmark",
                             "--gemmperf-results-dir=res", "--gemmperf-baseline-dir=base",
                             "--gemmperf-telemetry=off")
    out.assert_outcomes(passed=1)
    point = pytester.path / "res" / "test_mn.py__test_mn" / "default"
    pj = json.loads((point / "point.json").read_text())
    run = pj["runs"][0]
    assert [n["ranks"] for n in run["nodes"]] == [[0], [1]] and run["missing_ranks"] == []
    assert sorted(run["files"]) == ["0", "1"]
    assert len(pj["node_commands"]) == 2 and pj["node_commands"][1][pj["node_commands"][1].index("--node_rank") + 1] == "1"
    d = pd.read_parquet(point / "dispatches.parquet")
    assert sorted(d["rank"].dropna().astype(int).unique()) == [0, 1] and d["pid"].nunique() == 2


# ------------------------------------------------------------------ srun: SLURM -> torch env

def test_slurm_host_lists_and_task_counts():
    from pytest_gemmperf.run.slurm_env import first_host, tasks_per_node

    assert first_host("gpu[07-09,12],cpu1") == "gpu07"
    assert first_host("node3,node[1-2]") == "node3"
    assert first_host("a[001-004]-ib") == "a001-ib"
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(ValueError, match="cannot read"):
        tasks_per_node("2(y3)")


def test_slurm_task_env_maps_to_torch_distributed():
    from pytest_gemmperf.run.slurm_env import torch_env

    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "6", "SLURM_LOCALID": "1",
             "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "4,2", "SLURM_STEP_NODELIST": "gpu[07-08]"}
    assert torch_env(slurm) == {"RANK": "5", "WORLD_SIZE": "6", "LOCAL_RANK": "1", "GROUP_RANK": "1",
                                "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "gpu07", "MASTER_PORT": "29500"}
    assert torch_env({**slurm, "MASTER_ADDR": "head-ib", "MASTER_PORT": "4000"})["RANK"] == "5"
    assert "MASTER_ADDR" not in torch_env({**slurm, "MASTER_ADDR": "head-ib"})  # the user's wins
    assert torch_env({"PATH": "/bin"}) == {}  # not a SLURM task: nothing added


def test_srun_torch_command_runs_the_workload_through_the_mapping(tmp_path):
    import os
    import subprocess

    from pytest_gemmperf.run.slurm_env import wrap_command

    argv = launch_argv(wrap_command("train.py --x 1"), "srun", nproc=8, nnodes=2)
    assert argv == ["srun", "--nodes=2", "--ntasks-per-node=8", PY, "-m", "pytest_gemmperf.run.slurm_env",
                    "--", "train.py", "--x", "1"]
    # what one srun task does: the shim maps the variables and execs the workload in place
    show = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR')}), os.getpid())"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(SLURM_PROCID="3", SLURM_NTASKS="4", SLURM_JOB_NODELIST="n[1-2]", PYTHONPATH=str(REPO))
    proc = subprocess.Popen(wrap_command([PY, "-c", show]), env=env, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    doc, pid = out.rsplit(" ", 1)
    assert json.loads(doc) == {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "n1"}
    assert int(pid) == proc.pid  # exec: the profiler sees the workload's own process
    bad = subprocess.run(wrap_command(["/nonexistent/prog"]), env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 127 and "cannot run '/nonexistent/prog'" in bad.stderr
