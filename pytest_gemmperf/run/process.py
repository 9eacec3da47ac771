"""Launch a workload in its own process group, under a timeout, with its output in a log file.

Why a process group: a profiled workload is a tree (rocprofv3 -> torchrun -> N workers, or
mpirun -> ranks). Killing only the direct child leaves the workers running and holding GPUs,
which wedges every later test. Each launch gets a new session (``start_new_session=True``), so
the whole tree can be signalled at once; descendants that moved to another group are found
through ``/proc`` parent links and killed as well.

No survivors: a daemon that double-forks and calls ``setsid`` leaves both the group and the
parent chain (it is re-parented to init), and on a GPU box it would keep using the GPU during
the next point. On Linux the workload therefore runs under a small launcher,
``run/_reaper.py``, that makes itself a child subreaper, so such orphans are re-parented to
*it*; it kills and reaps every remaining descendant when the workload's main process ends or
the runner stops it (timeout, Ctrl-C, runner death), naming each in the log. As a second net
every launch carries a per-run marker variable (``GEMMPERF_RUN_MARKER``); after the run, any
process whose initial environment holds the marker is killed too and named in the log (this
also covers kernels without ``PR_SET_CHILD_SUBREAPER``). A process that scrubs its environment
*and* escapes a subreaper is beyond both; a cgroup would be needed for that.
"""

from __future__ import annotations

import errno
import os
import secrets
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from pytest_gemmperf import safe_io
from pytest_gemmperf.redact import (StreamRedactor, argv_secret_values, known_values, redact_argv, redact_text,
                                    remember, secret_values)
from pytest_gemmperf.run._reaper import describe, proc_table as _proc_table
from datetime import timedelta

#: Launchers that ``launch_argv`` knows by name.
KNOWN_LAUNCHERS = ("none", "torchrun", "srun", "mpirun")

_PYTHON_NAMES = {"python", "python3", os.path.basename(sys.executable)}

#: environment variable that tags every process of one ``run_process`` call
MARKER_VAR = "GEMMPERF_RUN_MARKER"
_REAPER = Path(__file__).with_name("_reaper.py")
#: whether launches go through the subreaper launcher (Linux with /proc); tests turn it off
#: to exercise the environment-marker net alone
USE_REAPER = (sys.platform.startswith("linux") and os.path.isdir("/proc") and _REAPER.is_file()
              and bool(sys.executable))


@dataclass(frozen=True)
class ProcessResult:
    """Outcome of one ``run_process`` call. ``returncode`` < 0 means killed by that signal."""

    argv: tuple[str, ...]
    returncode: int | None
    duration_s: float
    timed_out: bool
    interrupted: bool
    log_path: Path
    pid: int = -1
    #: stopped through ``run_process(cancel=...)`` (another node agent of the run failed)
    cancelled: bool = False
    #: secret values of the environment it ran with, hidden in what quotes its command line
    redact_values: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.interrupted

    def describe(self) -> str:
        """Short human phrase for the outcome (used in failure messages)."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f} s (process group killed)"
        if self.interrupted:
            return "interrupted (process group killed)"
        if self.cancelled:
            return "stopped because another node agent of the run failed (process group killed)"
        rc = self.returncode
        if rc is None:
            return "did not finish"
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            return f"killed by {name}"
        return f"exit status {rc}"

    def tail(self, n_lines: int = 40) -> str:
        """Last ``n_lines`` lines of the log (empty string when there is no log)."""
        return log_tail(self.log_path, n_lines)


class WorkloadError(Exception):
    """The workload failed (non-zero exit, signal, timeout). ``str()`` ends with the log tail."""

    def __init__(self, message: str, result: ProcessResult | None = None,
                 tail_lines: int = 40) -> None:
        self.message = message
        self.result = result
        self.log_tail = result.tail(tail_lines) if result is not None else ""
        text = message
        if result is not None:
            text += f"\ncommand: {shlex.join(redact_argv(result.argv, result.redact_values))}\nlog: {result.log_path}"
            if self.log_tail:
                text += f"\n--- last {tail_lines} lines of the log ---\n{self.log_tail}"
        super().__init__(text)


def log_tail(path: Path | str, n_lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            # logs can be huge (NCCL debug output); read only the end
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(deque(lines, maxlen=n_lines))


def _command_list(command: str | Sequence[str]) -> list[str]:
    if isinstance(command, str):
        parts = shlex.split(command)
    else:
        parts = [os.fspath(c) if isinstance(c, os.PathLike) else str(c) for c in command]
    if not parts:
        raise ValueError("empty workload command")
    return parts


def _torchrun_program(cmd: list[str]) -> list[str]:
    """torchrun runs ``python <script>`` itself: drop an explicit interpreter, map ``python -m``
    to torchrun's ``-m``, and use ``--no-python`` for anything that is not a Python script."""
    head = os.path.basename(cmd[0])
    if head in _PYTHON_NAMES or cmd[0] == sys.executable:
        rest = cmd[1:]
        if rest[:1] == ["-m"] and len(rest) >= 2:
            return ["-m", *rest[1:]]
        if rest and rest[0].startswith("-"):
            raise ValueError(f"torchrun cannot pass interpreter options {rest[0]!r}; "
                             "set them through the environment instead")
        if not rest:
            raise ValueError("torchrun needs a script after the interpreter")
        return rest
    if cmd[0].endswith(".py"):
        return cmd
    return ["--no-python", *cmd]


def split_launch(command: str | Sequence[str], launcher: str | Sequence[str] | None = None,
                 nproc: int = 1, nnodes: int = 1,
                 extra: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """Return ``(outer, inner)``: ``outer + profiler + inner`` is the profiled command line.

    rocprofv3 must sit *inside* srun/mpirun (each rank is profiled) but *outside* torchrun (the
    tool library is inherited by the workers), see rocprofv3-cli.md §1. So srun/mpirun (and
    custom launchers given as a list or a multi-word string) go to ``outer``; torchrun goes to
    ``inner`` together with the command. torchrun for one process on one node (and no option
    beyond where to meet) is no torchrun at all: :func:`one_rank_argv` starts its only worker
    directly; a launcher given as a list (``["torchrun", ...]``) is kept as written.
    """
    if nproc < 1 or nnodes < 1:
        raise ValueError(f"nproc and nnodes must be >= 1, got {nproc}, {nnodes}")
    cmd = _command_list(command)
    extra = [str(e) for e in extra]
    if launcher is None or (isinstance(launcher, str) and launcher.strip().lower() in ("", "none")):
        return [], cmd
    if not isinstance(launcher, str):
        return [str(x) for x in launcher] + extra, cmd
    words = shlex.split(launcher)
    if len(words) > 1:
        return words + extra, cmd
    name = words[0].lower()
    if name == "torchrun":
        if nnodes > 1 and not _has_rendezvous(extra):
            # one torchrun call with --nnodes 2 and no rendezvous waits for the other node forever
            raise ValueError(f"torchrun with nnodes={nnodes} needs a rendezvous: give launcher_args "
                             "(--rdzv-backend c10d --rdzv-endpoint HOST:PORT) and start the other "
                             "nodes' agents, or use the torch backend, which starts one agent per "
                             "node on this machine (node_launch_argvs)")
        if nproc == 1 and nnodes == 1 and _agent_only(extra):
            return [], one_rank_argv(cmd)
        return [], [*_torchrun_prefix(), "--nnodes", str(nnodes), "--nproc_per_node", str(nproc), *extra,
                    *_torchrun_program(cmd)]
    if name == "srun":
        return ["srun", f"--nodes={nnodes}", f"--ntasks-per-node={nproc}", *extra], cmd
    if name == "mpirun":
        return ["mpirun", "-np", str(nproc * nnodes), *extra], cmd
    raise ValueError(f"unknown launcher {launcher!r}; use one of {', '.join(KNOWN_LAUNCHERS)}, "
                     "or give the launcher command as a list")


#: torchrun options that say where the nodes meet (both spellings torchrun accepts)
_RENDEZVOUS_FLAGS = ("--rdzv-endpoint", "--rdzv_endpoint", "--master-addr", "--master_addr",
                     "--master-port", "--master_port", "--standalone")


def _has_rendezvous(extra: Sequence[str]) -> bool:
    return any(str(e).split("=", 1)[0] in _RENDEZVOUS_FLAGS for e in extra)


#: what torchrun gives the only worker of a world of one (local_elastic_agent's worker
#: environment without its TORCHELASTIC_* variables). MASTER_PORT 0: rank 0 of an ``env://``
#: group serves the store itself and binds whatever port the kernel gives it, so there is no
#: port picked in advance that another process could take first.
ONE_RANK_ENV = (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", "1"),
                ("GROUP_RANK", "0"), ("GROUP_WORLD_SIZE", "1"), ("ROLE_RANK", "0"),
                ("ROLE_WORLD_SIZE", "1"), ("ROLE_NAME", "default"), ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "0"))

#: torchrun options about how agents meet and watch their workers, with whether each takes a
#: value: a world of one run without an agent needs none of them. Any other option (restarts,
#: log redirection, ...) keeps the agent.
_AGENT_ONLY_OPTIONS = {
    "--standalone": False, "--rdzv-backend": True, "--rdzv-endpoint": True, "--rdzv-id": True,
    "--rdzv-conf": True, "--master-addr": True, "--master-port": True, "--local-addr": True,
    "--monitor-interval": True, "--start-method": True,
}


def _agent_only(extra: Sequence[str]) -> bool:
    """Whether every option in ``extra`` only concerns torchrun's agent (see above)."""
    words = iter(extra)
    for word in words:
        name, has_value = word.split("=", 1)[0], "=" in word
        takes = _AGENT_ONLY_OPTIONS.get(name.replace("_", "-"))
        if takes is None or (has_value and not takes):
            return False
        if takes and not has_value and next(words, None) is None:
            return False
    return True


def one_rank_argv(command: str | Sequence[str]) -> list[str]:
    """``env <rendezvous variables> python -u <script> ...``: the worker torchrun would start
    for ``nproc=1, nnodes=1`` (same interpreter, ``-u``, ``-m`` or ``--no-python`` handling),
    started directly. torchrun's agent is a second Python process importing torch
    (docs/performance.md) and adds nothing to a world of one. Inherited
    ``TORCHELASTIC_*`` variables are removed (``TORCHELASTIC_USE_AGENT_STORE`` would make rank 0
    wait for an agent's store that does not exist)."""
    program = _torchrun_program(_command_list(command))
    if program[0] == "--no-python":
        run = program[1:]
    else:
        run = [os.environ.get("PYTHON_EXEC", sys.executable), "-u", *program]
    unset = [w for name in sorted(os.environ) if name.startswith("TORCHELASTIC_") for w in ("-u", name)]
    return ["env", *unset, *(f"{k}={v}" for k, v in ONE_RANK_ENV), *run]


def _torchrun_prefix() -> list[str]:
    return ["torchrun"] if shutil.which("torchrun") else [sys.executable, "-m", "torch.distributed.run"]


def is_local_multinode(launcher: str | Sequence[str] | None, nnodes: int) -> bool:
    """Whether ``profile(launcher="torchrun", nnodes>1)`` runs as several local node agents."""
    return (isinstance(launcher, str) and launcher.strip().lower() == "torchrun" and nnodes > 1)


def node_launch_argvs(command: str | Sequence[str], nproc: int, nnodes: int, extra: Sequence[str] = (),
                      *, master_addr: str = "127.0.0.1", master_port: int | None = None) -> list[list[str]]:
    """One torchrun node agent per node, all on this machine: ``--nnodes N``, node ``k``
    running global ranks ``k*nproc .. k*nproc+nproc-1``.

    Without ``master_port`` the agents meet through torch's ``c10d`` rendezvous in a store
    this process holds open (:func:`local_rendezvous_endpoint`): a port picked by binding port
    0 and closing it can be taken by anyone before the agent binds it again (EADDRINUSE under
    parallel CI jobs), a listener that never closes cannot. Each node gets a loopback
    ``--local-addr`` that sorts in node order, because the c10d rendezvous numbers nodes by
    sorted address; rank 0's agent then serves its workers' store on a port it binds itself
    (port 0, kept open). ``master_port`` given: torchrun's static rendezvous at
    ``master_addr:master_port`` (``--node_rank k``), the caller owning that port.

    On a cluster the agents run on different hosts and the scheduler starts them, e.g.
    ``srun --nodes 2 --ntasks-per-node 1 torchrun --nnodes 2 --nproc_per_node 8
    --rdzv-backend c10d --rdzv-endpoint $HEAD:29500 train.py`` given to ``profile`` as a list
    launcher (README "Multi-node points"); rendezvous options in ``extra`` replace ours."""
    if nproc < 1 or nnodes < 2:
        raise ValueError(f"node agents need nproc >= 1 and nnodes >= 2, got {nproc}, {nnodes}")
    extra = [str(e) for e in extra]
    program = _torchrun_program(_command_list(command))
    head = [*_torchrun_prefix(), "--nnodes", str(nnodes), "--nproc_per_node", str(nproc)]
    if _has_rendezvous(extra):
        meets: list[list[str]] = [[] for _ in range(nnodes)]
    elif master_port is not None:
        meets = [["--master_addr", master_addr, "--master_port", str(int(master_port))] for _ in range(nnodes)]
    else:
        endpoint = local_rendezvous_endpoint(master_addr)
        rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id",
                f"gemmperf-{secrets.token_hex(8)}", "--rdzv-conf", "is_host=false"]
        meets = [[*rdzv, "--local-addr", node_local_addr(master_addr, k)] for k in range(nnodes)]
    return [[*head, "--node_rank", str(k), *meets[k], *extra, *program] for k in range(nnodes)]


def node_local_addr(master_addr: str, k: int) -> str:
    """Node ``k``'s ``--local-addr``: ``master_addr`` for node 0 (its agent serves the workers'
    store there), then loopback addresses whose text sorts after it and in node order
    (``127.100.100.100``, ``127.100.100.101``, ...: every octet three digits, so text order is
    number order; Linux routes all of 127/8 to the loopback device)."""
    if k == 0:
        return master_addr
    i = k - 1
    return f"127.{100 + i // 10_000 % 100}.{100 + i // 100 % 100}.{100 + i % 100}"


_STORES: dict[str, object] = {}
_STORES_LOCK = threading.Lock()


def local_rendezvous_endpoint(host: str = "127.0.0.1") -> str:
    """``host:port`` of a c10d rendezvous store this process serves for as long as it lives
    (one per host, created on first use, bound to port 0 by the store itself so no other
    process can take the port). Every launch uses its own ``--rdzv-id``, so one store serves
    any number of launches. torch is imported here, on the first multi-node launch only."""
    with _STORES_LOCK:
        store = _STORES.get(host)
        if store is None:
            # lazy: optional dependency
            from torch.distributed import TCPStore

            store = TCPStore(host, 0, is_master=True, wait_for_workers=False, multi_tenant=True,
                             timeout=timedelta(seconds=300))
            _STORES[host] = store
        return f"{host}:{store.port}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now. Racy (another process may bind it before the caller
    does): launches use :func:`local_rendezvous_endpoint` instead."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launch_argv(command: str | Sequence[str], launcher: str | Sequence[str] | None = None,
                nproc: int = 1, nnodes: int = 1, extra: Sequence[str] = ()) -> list[str]:
    """argv that runs ``command`` under ``launcher`` (torchrun, srun, mpirun, none or custom)."""
    outer, inner = split_launch(command, launcher, nproc, nnodes, extra)
    return outer + inner


# ---------------------------------------------------------------------------------------------
# process-tree bookkeeping (Linux /proc; elsewhere only the process group is used)

def live_processes(pgid: int, root_pid: int | None = None) -> set[int]:
    """Non-zombie processes in group ``pgid`` plus descendants of ``root_pid`` (any group)."""
    table = _proc_table()
    found = {pid for pid, (_, pg, st) in table.items() if pg == pgid and st != "Z"}
    if root_pid is not None:
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        stack = list(children.get(root_pid, ()))
        while stack:
            pid = stack.pop()
            if table[pid][2] != "Z":
                found.add(pid)
            stack.extend(children.get(pid, ()))
        if root_pid in table and table[root_pid][2] != "Z":
            found.add(root_pid)
    return found


def _signal_all(pgid: int, pids: Iterable[int], sig: int) -> None:
    """Signal group ``pgid`` (skipped when negative) and each of ``pids``."""
    if pgid > 0:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(proc: subprocess.Popen, grace_s: float) -> dict[int, str]:
    """SIGTERM the group and every descendant, wait ``grace_s``, SIGKILL what is left, reap.

    Returns ``{pid: "pid (command line)"}`` of the processes it signalled (read before the
    signal, so the log can name them)."""
    pgid = proc.pid  # start_new_session makes the child its own group leader
    targets = live_processes(pgid, proc.pid)
    named = {pid: describe(pid) for pid in targets}
    _signal_all(pgid, targets, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        targets = live_processes(pgid, proc.pid) | {p for p in targets if _alive(p)}
        if not targets:
            break
        for pid in targets - named.keys():
            named[pid] = describe(pid)  # forked during the shutdown
        time.sleep(0.05)
    leftovers = live_processes(pgid, proc.pid) | {p for p in targets if _alive(p)}
    if leftovers:
        for pid in leftovers - named.keys():
            named[pid] = describe(pid)
        _signal_all(pgid, leftovers, signal.SIGKILL)
    try:
        proc.wait(timeout=max(grace_s, 5.0))
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        pass
    _wait_gone(leftovers, 2.0)
    return named


def marked_processes(marker: str) -> set[int]:
    """Live processes (other than this one) whose initial environment holds
    ``GEMMPERF_RUN_MARKER=<marker>``: everything a run started, wherever it was re-parented.

    /proc/<pid>/environ is the environment at exec time, readable for our own user's
    processes only, which are the only ones a workload we started can be."""
    needle = f"{MARKER_VAR}={marker}".encode()
    me = os.getpid()
    found: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if needle in data.split(b"\0") and _alive(int(name)):
            found.add(int(name))
    return found


def kill_marked(marker: str, grace_s: float) -> dict[int, str]:
    """SIGTERM every process carrying ``marker``, SIGKILL after ``grace_s``; returns
    ``{pid: "pid (command line)"}`` of those signalled."""
    targets = marked_processes(marker)
    if not targets:
        return {}
    named = {pid: describe(pid) for pid in targets}
    _signal_all(-1, targets, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while targets and time.monotonic() < deadline:
        time.sleep(0.05)
        targets = {p for p in targets if _alive(p)} | marked_processes(marker)
        for pid in targets - named.keys():
            named[pid] = describe(pid)
            _signal_all(-1, [pid], signal.SIGTERM)
    if targets:
        _signal_all(-1, targets, signal.SIGKILL)
        _wait_gone(targets, 2.0)
    return named


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
        return raw[raw.rfind(")") + 2:].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: Iterable[int], timeout_s: float) -> None:
    pending = set(pids)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        pending = {p for p in pending if _alive(p)}
        if pending:
            time.sleep(0.02)


def run_process(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                cwd: str | os.PathLike | None = None, timeout_s: float | None,
                log_path: str | os.PathLike, grace_s: float = 5.0,
                cancel: threading.Event | None = None) -> ProcessResult:
    """Run ``argv`` (no shell) in a new session; stdout and stderr go to ``log_path``.

    On timeout or Ctrl-C the whole tree is killed (SIGTERM, ``grace_s``, SIGKILL) and reaped;
    KeyboardInterrupt is re-raised after the cleanup. Processes the workload left behind after
    a normal exit are killed too (its group, its descendants under the subreaper launcher, and
    anything carrying this run's environment marker), so nothing outlives the call; the log
    names each process killed (``[gemmperf] killed ...``: pid and command line). The log is
    opened with ``O_NOFOLLOW``: a symbolic link at its name is refused, not written through.
    ``cancel`` (set from another thread) stops the tree the same way (``result.cancelled``):
    the node agents of one multi-node run stop together when one of them fails.

    The log is a CI artifact: the workload's output reaches it through a pipe and
    :class:`~pytest_gemmperf.redact.StreamRedactor`, which hides every secret value known to
    the run (the environment's, ``env``'s secret-named variables, the values of the command
    line's secret-named options), remembered from now on for every other text.
    """
    argv = tuple(os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in argv)
    if not argv:
        raise ValueError("empty argv")
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    marker = secrets.token_hex(12)
    child_env = dict(os.environ if env is None else env)
    child_env[MARKER_VAR] = marker
    remember([*secret_values(child_env), *argv_secret_values(argv)])
    secrets_of_run = known_values(secret_values(child_env))
    if USE_REAPER:
        # the launcher execs the command itself: fail here, as Popen would, when it cannot
        _require_executable(argv[0], child_env, cwd)
    timed_out = interrupted = cancelled = False
    killed: dict[int, str] = {}
    with safe_io.open_append(log_path) as log:
        log.write(f"$ {shlex.join(redact_argv(argv, secrets_of_run))}\n".encode())
        log.flush()
        launched, keep_fds = list(argv), ()
        if USE_REAPER:  # it names what it kills in the log itself: it may outlive this process
            launched = [sys.executable, "-I", "-S", str(_REAPER), repr(max(0.0, 0.8 * grace_s)),
                        str(os.getpid()), str(log.fileno()), "--", *argv]
            keep_fds = (log.fileno(),)
        read_fd, write_fd = os.pipe()
        try:
            start = time.monotonic()
            proc = subprocess.Popen(launched, stdin=subprocess.DEVNULL, stdout=write_fd,
                                    stderr=subprocess.STDOUT, env=child_env, cwd=cwd,
                                    start_new_session=True, close_fds=True, pass_fds=keep_fds)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        pump = _LogPump(read_fd, log, secrets_of_run)
        try:
            cancelled = _wait(proc, timeout_s, cancel)
            if cancelled:
                killed.update(kill_tree(proc, grace_s))
        except subprocess.TimeoutExpired:
            timed_out = True
            killed.update(kill_tree(proc, grace_s))
        except KeyboardInterrupt:
            interrupted = True
            killed.update(kill_tree(proc, grace_s))
            raise
        finally:
            duration_s = time.monotonic() - start
            if not (timed_out or interrupted) and live_processes(proc.pid):
                killed.update(kill_tree(proc, min(grace_s, 1.0)))
            # the second net: whatever still carries this run's marker
            killed.update(kill_marked(marker, min(grace_s, 2.0)))
            killed.pop(proc.pid, None) if USE_REAPER else None  # the launcher itself
            pump.finish()
            why = ("on timeout" if timed_out else "on interrupt" if interrupted
                   else "as another node agent failed" if cancelled else "after the workload exited")
            for pid in sorted(killed):
                named = redact_text(killed[pid], secrets_of_run)
                log.write(f"[gemmperf] killed process {named} {why}\n".encode("utf-8", "replace"))
            if timed_out:
                log.write(f"\n[gemmperf] timed out after {timeout_s} s; process group killed\n"
                          .encode())
        pump.raise_failure()
    return ProcessResult(argv=argv, returncode=proc.returncode, duration_s=duration_s,
                         timed_out=timed_out, interrupted=interrupted, log_path=log_path,
                         pid=proc.pid, cancelled=cancelled, redact_values=secrets_of_run)


class _LogPump:
    """Copies a workload's output from its pipe to the log through a
    :class:`~pytest_gemmperf.redact.StreamRedactor`, in a thread, flushing as it goes (the
    log can be followed while the workload runs)."""

    #: after the workload's end, how long output still arriving is copied: a process that
    #: escaped every kill and keeps the pipe open must not hold the runner
    DRAIN_S = 2.0

    def __init__(self, read_fd: int, log, values: tuple[str, ...]) -> None:
        self._fd = read_fd
        self._log = log
        self._redactor = StreamRedactor(self._write, values)
        self._stop_at: float | None = None
        self._failure: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="gemmperf-log", daemon=True)
        self._thread.start()

    def _write(self, data: bytes) -> None:
        if self._failure is not None:
            return  # the log cannot be written (full disk): keep the pipe drained, report it after
        try:
            self._log.write(data)
            self._log.flush()
        except OSError as exc:
            self._failure = exc

    def _run(self) -> None:
        try:
            while True:
                stopping = self._stop_at is not None
                if stopping and time.monotonic() > self._stop_at:
                    break
                ready, _, _ = select.select([self._fd], [], [], 0.1)
                if not ready:
                    if stopping:
                        break
                    continue
                data = os.read(self._fd, 65536)
                if not data:
                    break
                self._redactor.feed(data)
        finally:
            self._redactor.close()

    def finish(self) -> None:
        """Copy what is left (until the pipe closes, or :attr:`DRAIN_S`), then close it."""
        self._stop_at = time.monotonic() + self.DRAIN_S
        self._thread.join(self.DRAIN_S + 1.0)
        os.close(self._fd)

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure


def _wait(proc: subprocess.Popen, timeout_s: float | None, cancel: threading.Event | None) -> bool:
    """Wait for ``proc``; True when ``cancel`` was set first. Raises ``TimeoutExpired``."""
    if cancel is None:
        proc.wait(timeout=timeout_s)
        return False
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        try:
            proc.wait(timeout=0.1 if left is None else min(0.1, left))
            return False
        except subprocess.TimeoutExpired:
            if cancel.is_set():
                return True


def _require_executable(program: str, env: Mapping[str, str], cwd: str | os.PathLike | None) -> None:
    """Raise ``FileNotFoundError``/``PermissionError`` like ``Popen`` for a program that
    cannot be executed (a relative path counts from ``cwd``, a bare name is looked up in the
    child's PATH)."""
    if os.sep in program:
        path = program if os.path.isabs(program) else os.path.join(os.fspath(cwd or "."), program)
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
        return
    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def require_success(result: ProcessResult, what: str = "workload",
                    tail_lines: int = 40) -> ProcessResult:
    """Raise ``WorkloadError`` (with the log tail) unless the process exited 0 in time."""
    if not result.ok:
        raise WorkloadError(f"{what} {result.describe()}", result, tail_lines)
    return result


__all__ = ["KNOWN_LAUNCHERS", "MARKER_VAR", "ProcessResult", "WorkloadError", "free_port",
           "is_local_multinode", "kill_marked", "local_rendezvous_endpoint", "node_local_addr", "kill_tree", "launch_argv", "node_launch_argvs", "live_processes", "marked_processes", "log_tail", "one_rank_argv", "require_success", "run_process", "split_launch"]
