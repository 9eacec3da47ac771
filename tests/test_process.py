"""Process launching: launcher command lines, logs, timeouts and process-tree cleanup."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pytest_gemmperf.run import process
from pytest_gemmperf.run.process import (
    WorkloadError, launch_argv, live_processes, require_success, run_process, split_launch)

PY = sys.executable


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def _script(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "work.py"
    p.write_text(textwrap.dedent(body))
    return p


# a workload that leaves a grandchild in its group and one that escaped into its own session
TREE = """
    import subprocess, sys, time
    pids = open(sys.argv[1], "w")
    a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                         start_new_session=True)
    pids.write(f"{a.pid} {b.pid}\\n"); pids.close()
    print("tree up", flush=True)
    if sys.argv[2] == "hang":
        time.sleep(300)
"""


# --- launch_argv ------------------------------------------------------------------------------

def test_launch_argv_none_and_shlex():
    assert launch_argv("python train.py --cfg 'a b.yaml'") == ["python", "train.py", "--cfg",
                                                               "a b.yaml"]
    assert launch_argv(["./app", 3], "none") == ["./app", "3"]
    with pytest.raises(ValueError):
        launch_argv("")


def test_launch_argv_torchrun(monkeypatch):
    monkeypatch.setattr(process.shutil, "which", lambda name: "/usr/bin/torchrun")
    assert launch_argv("python train.py --x 1", "torchrun", nproc=8) == [
        "torchrun", "--nnodes", "1", "--nproc_per_node", "8", "train.py", "--x", "1"]
    assert launch_argv([PY, "-m", "pkg.train"], "torchrun", nproc=2)[-2:] == ["-m", "pkg.train"]
    assert launch_argv("./bench --n 3", "torchrun", nproc=2)[5:] == ["--no-python", "./bench",
                                                                     "--n", "3"]
    monkeypatch.setattr(process.shutil, "which", lambda name: None)
    assert launch_argv("train.py", "torchrun", nproc=4)[:3] == [PY, "-m", "torch.distributed.run"]


def test_launch_argv_srun_mpirun_custom():
    assert launch_argv("./app", "srun", nproc=4, nnodes=2) == [
        "srun", "--nodes=2", "--ntasks-per-node=4", "./app"]
    assert launch_argv("./app", "mpirun", nproc=4, nnodes=2, extra=["--bind-to", "none"]) == [
        "mpirun", "-np", "8", "--bind-to", "none", "./app"]
    assert launch_argv("./app", "mpiexec -n 2") == ["mpiexec", "-n", "2", "./app"]
    assert launch_argv("./app", ["flux", "run", "-n2"]) == ["flux", "run", "-n2", "./app"]
    with pytest.raises(ValueError, match="unknown launcher"):
        launch_argv("./app", "torchrn")


def test_split_launch_puts_profiler_inside_mpi_but_outside_torchrun(monkeypatch):
    monkeypatch.setattr(process.shutil, "which", lambda name: "/usr/bin/torchrun")
    outer, inner = split_launch("./app", "mpirun", nproc=2)
    assert outer == ["mpirun", "-np", "2"] and inner == ["./app"]
    outer, inner = split_launch("train.py", "torchrun", nproc=2)
    assert outer == [] and inner[0] == "torchrun"


# --- run_process ------------------------------------------------------------------------------

def test_run_process_success_logs_output(tmp_path):
    res = run_process([PY, "-c", "import os,sys; print('out', os.environ['GP_X']);"
                                 "print('err', file=sys.stderr)"],
                      env=dict(os.environ, GP_X="42"), timeout_s=30, log_path=tmp_path / "l.log")
    assert res.ok and res.returncode == 0 and not res.timed_out
    text = res.log_path.read_text()
    assert "out 42" in text and "err" in text and text.startswith("$ ")
    assert set(res.tail(2).splitlines()) == {"out 42", "err"}   # stdout/stderr order may vary


def test_nonzero_exit_is_an_error_with_tail(tmp_path):
    res = run_process([PY, "-c", "import sys\nfor i in range(100): print('line', i)\nsys.exit(3)"],
                      timeout_s=30, log_path=tmp_path / "l.log")
    assert res.returncode == 3 and not res.ok
    with pytest.raises(WorkloadError) as err:
        require_success(res, "workload", tail_lines=5)
    text = str(err.value)
    assert "workload exit status 3" in text
    assert "line 99" in text and "line 90" not in text


def test_no_shell_interpretation(tmp_path):
    marker = tmp_path / "pwned"
    res = run_process(launch_argv(f"echo hi; touch {marker}"), timeout_s=30,
                      log_path=tmp_path / "l.log")
    assert res.ok and not marker.exists()
    assert f"hi; touch {marker}" in res.log_path.read_text()


def test_timeout_kills_group_and_escaped_descendants(tmp_path):
    pid_file = tmp_path / "pids"
    start = time.monotonic()
    res = run_process([PY, str(_script(tmp_path, TREE)), str(pid_file), "hang"], timeout_s=0.8,
                      log_path=tmp_path / "l.log", grace_s=1.0)
    assert res.timed_out and "timed out" in res.describe()
    assert time.monotonic() - start < 10
    grand, escaped = map(int, pid_file.read_text().split())
    assert not _running(grand) and not _running(escaped)
    assert live_processes(res.pid) == set()
    assert "timed out after 0.8 s" in res.tail(3)


@pytest.mark.slow  # waits out a real timeout and grace period; the inner loop keeps the group kill
def test_sigterm_ignoring_workload_gets_sigkill(tmp_path):
    body = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" \
           "print('ready', flush=True)\ntime.sleep(300)\n"
    res = run_process([PY, "-c", body], timeout_s=0.8, grace_s=0.3, log_path=tmp_path / "l.log")
    assert res.timed_out and res.returncode == -signal.SIGKILL


def test_leftovers_after_normal_exit_are_killed(tmp_path):
    pid_file = tmp_path / "pids"
    res = run_process([PY, str(_script(tmp_path, TREE)), str(pid_file), "exit"], timeout_s=30,
                      log_path=tmp_path / "l.log", grace_s=1.0)
    assert res.returncode == 0
    grand, escaped = map(int, pid_file.read_text().split())
    # the grandchild stayed in the group; the escaped one left it and lost its parent when the
    # workload exited: the subreaper launcher adopted it, so both are gone
    assert not _running(grand) and not _running(escaped)
    assert f"killed leftover process {escaped} (" in res.log_path.read_text()


def test_ctrl_c_kills_the_tree_and_reraises(tmp_path):
    pid_file = tmp_path / "pids"
    returned = threading.Event()
    main = threading.main_thread().ident

    def interrupt() -> None:
        # wait until the tree is up, then deliver Ctrl-C to the main thread (again every 10 s
        # until run_process returns, as a user would press it again)
        for _ in range(1500):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            time.sleep(0.02)
        for _ in range(5):
            signal.pthread_kill(main, signal.SIGINT)
            if returned.wait(10):
                return

    # a shell starts background jobs with SIGINT ignored (no job control), and Python then keeps
    # it ignored: that, not the runner, was why the interrupt went unseen in a backgrounded CI run
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    t = threading.Thread(target=interrupt)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_process([PY, str(_script(tmp_path, TREE)), str(pid_file), "hang"], timeout_s=120,
                        log_path=tmp_path / "l.log", grace_s=1.0)
    finally:
        returned.set()
        t.join()
        signal.signal(signal.SIGINT, old)
    grand, escaped = map(int, pid_file.read_text().split())
    assert not _running(grand) and not _running(escaped)


# --- no survivors: daemons that leave the group and the parent chain ------------------------

# double fork + setsid: the classic daemon. The daemon's parent exits at once, so it is
# re-parented (to init, or to the nearest subreaper) and is in another session and group.
DAEMON = """
    import os, sys, time
    pid_file, mode = sys.argv[1], sys.argv[2]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pid_file + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.rename(pid_file + ".tmp", pid_file)
            os.execvp("sleep", ["sleep", "301"])
        os._exit(0)
    os.wait()
    for _ in range(500):
        if os.path.exists(pid_file):
            break
        time.sleep(0.01)
    print("daemon up", flush=True)
    if mode == "hang":
        time.sleep(300)
"""


def _daemon_pid(pid_file: Path) -> int:
    return int(pid_file.read_text())


def _wait_dead(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        time.sleep(0.02)
    return False


def _sid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[3])


def test_setsid_daemon_is_killed_when_the_workload_ends(tmp_path):
    pid_file = tmp_path / "daemon.pid"
    res = run_process([PY, str(_script(tmp_path, DAEMON)), str(pid_file), "exit"], timeout_s=30,
                      log_path=tmp_path / "l.log", grace_s=1.0)
    assert res.returncode == 0 and res.ok
    daemon = _daemon_pid(pid_file)
    assert _wait_dead(daemon, 0.1), "the setsid daemon outlived its point"
    log = res.log_path.read_text()
    assert f"killed leftover process {daemon} (sleep 301) when the workload ended" in log
    assert "daemon up" in log


@pytest.mark.slow  # waits out a real timeout; the inner loop keeps the group kill
def test_setsid_daemon_is_killed_on_timeout(tmp_path):
    pid_file = tmp_path / "daemon.pid"
    start = time.monotonic()
    res = run_process([PY, str(_script(tmp_path, DAEMON)), str(pid_file), "hang"], timeout_s=1.0,
                      log_path=tmp_path / "l.log", grace_s=1.0)
    assert res.timed_out and time.monotonic() - start < 10
    daemon = _daemon_pid(pid_file)
    assert _wait_dead(daemon, 0.1)
    log = res.log_path.read_text()
    assert f"{daemon} (sleep 301)" in log and "[gemmperf] killed" in log
    assert "timed out after 1.0 s" in res.tail(3)


def test_environment_marker_net_without_the_subreaper(tmp_path, monkeypatch):
    """Where the subreaper launcher is not used, the daemon is found by the run's marker."""
    monkeypatch.setattr(process, "USE_REAPER", False)
    pid_file = tmp_path / "daemon.pid"
    res = run_process([PY, str(_script(tmp_path, DAEMON)), str(pid_file), "exit"], timeout_s=30,
                      log_path=tmp_path / "l.log", grace_s=1.0)
    assert res.returncode == 0
    daemon = _daemon_pid(pid_file)
    assert _wait_dead(daemon, 0.1)
    assert (f"[gemmperf] killed process {daemon} (sleep 301) after the workload exited"
            in res.log_path.read_text())


def test_runner_killed_with_sigkill_leaves_no_survivors(tmp_path):
    """The launcher gets SIGTERM when its runner dies (PR_SET_PDEATHSIG) and cleans up."""
    import subprocess

    pid_file = tmp_path / "daemon.pid"
    runner = tmp_path / "runner.py"
    runner.write_text(textwrap.dedent(f"""
        import sys
        from pytest_gemmperf.run.process import run_process
        run_process([sys.executable, {str(_script(tmp_path, DAEMON))!r}, {str(pid_file)!r}, "hang"],
                    timeout_s=300, log_path={str(tmp_path / "l.log")!r}, grace_s=1.0)
    """))
    proc = subprocess.Popen([PY, str(runner)])
    try:
        for _ in range(1000):
            if pid_file.exists():
                break
            time.sleep(0.01)
        daemon = _daemon_pid(pid_file)
        # a real daemon: a session of its own, apart from the runner's and the workload's
        assert _running(daemon) and _sid(daemon) not in (os.getsid(0), _sid(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    assert _wait_dead(daemon, 5.0), "the daemon survived its runner's SIGKILL"
    assert f"{daemon} (sleep 301)" in (tmp_path / "l.log").read_text()


def test_pytest_itself_is_not_made_a_subreaper(tmp_path):
    import ctypes

    run_process([PY, "-c", "pass"], timeout_s=30, log_path=tmp_path / "l.log")
    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(-1)
    assert libc.prctl(37, ctypes.byref(flag), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
    assert flag.value == 0


def test_launcher_keeps_the_workload_outcome(tmp_path):
    res = run_process([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGABRT)"],
                      timeout_s=30, log_path=tmp_path / "a.log")
    assert res.returncode == -signal.SIGABRT and "killed by SIGABRT" in res.describe()
    with pytest.raises(FileNotFoundError):
        run_process(["no-such-program-gemmperf"], timeout_s=30, log_path=tmp_path / "b.log")
    with pytest.raises(FileNotFoundError):
        run_process(["./missing.sh"], timeout_s=30, log_path=tmp_path / "c.log", cwd=tmp_path)
    # a clean run writes nothing of ours after the command line
    res = run_process([PY, "-c", "print('only')"], timeout_s=30, log_path=tmp_path / "d.log")
    assert res.log_path.read_text().splitlines()[1:] == ["only"]


def test_log_symlink_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "l.log").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        run_process([PY, "-c", "print('x')"], timeout_s=30, log_path=tmp_path / "l.log")
    assert victim.read_text() == "precious\n"
