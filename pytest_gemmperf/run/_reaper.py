"""A tiny launcher that outlives nothing it started: ``python _reaper.py GRACE PARENT LOG_FD -- argv...``.

``run_process`` starts this script (stdlib only, run as a file with ``-I -S`` so it starts in a
few tens of milliseconds and imports nothing of the project) in the workload's new session.
It makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux >= 3.4): every
orphan among its descendants, including a daemon that double-forked and called ``setsid`` to
leave the process group, is re-parented to it instead of to init. Orphans therefore stay
findable by walking parent links down from this process, and this process reaps them.

Why a separate process rather than making the pytest process the subreaper: the flag is
per-process and permanent, so on pytest it would adopt the orphans of every subprocess any
plugin or test starts for the rest of the session (and leave them as zombies nobody reaps).

Contract:

* runs ``argv`` (``execvp`` in a forked child; exit 127 with one line when it cannot start);
* when the workload's main process exits, every remaining descendant is sent SIGTERM, then
  SIGKILL after ``GRACE`` seconds, and reaped; each killed process is named with its pid and
  command line on ``LOG_FD`` (the point's log, written directly: the workload's own output
  goes through the runner, which may be gone by then; ``-`` for stderr);
* on SIGTERM/SIGINT/SIGHUP (the runner's timeout or Ctrl-C), and when ``PARENT`` (the runner)
  dies (``PR_SET_PDEATHSIG``), the same cleanup runs at once;
* exits like the workload: its exit status, or the signal that killed it re-raised on itself
  (so the runner still sees ``returncode < 0`` for a signal), with core dumps disabled.

Where ``prctl`` is unavailable the script simply ``exec``-s the workload (the runner's process
group and environment-marker sweeps still apply).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _prctl(option: int, arg: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, pgid, state) for every visible process (from /proc/<pid>/stat)."""
    out: dict[int, tuple[int, int, str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                raw = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        rest = raw[raw.rfind(")") + 2:].split()  # the command name may hold spaces and ')'
        if len(rest) >= 3:
            out[int(name)] = (int(rest[1]), int(rest[2]), rest[0])
    return out


def descendants(root: int) -> set[int]:
    """Live (non-zombie) descendants of ``root``, following parent links in /proc."""
    table = {pid: (ppid, st) for pid, (ppid, _, st) in proc_table().items()}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        if table[pid][1] != "Z":
            found.add(pid)
        stack.extend(children.get(pid, ()))
    return found


def _redact():
    """``pytest_gemmperf/redact.py``; loaded by path when this file runs as an isolated script
    (the package is not importable there), only once a process has to be named."""
    try:
        # lazy: this file also runs as an isolated script, where the package is not importable
        from pytest_gemmperf import redact
    except ImportError:
        # lazy: needed only when the package is not importable
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "redact.py")
        spec = importlib.util.spec_from_file_location("_gemmperf_redact", path)
        redact = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(redact)
    return redact


def describe(pid: int, limit: int = 300) -> str:
    """``pid (command line)``, the command line cut to ``limit`` characters."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().rstrip(b"\0").decode("utf-8", "replace").split("\0")
        # named in the point's log, a CI artifact: secret arguments hidden
        cmd = " ".join(_redact().redact_argv(args)) if args != [""] else ""
    except OSError:
        cmd = ""
    if not cmd:
        try:
            with open(f"/proc/{pid}/comm", "rb") as fh:
                cmd = "[" + fh.read().decode("utf-8", "replace").strip() + "]"
        except OSError:
            cmd = "?"
    if len(cmd) > limit:
        cmd = cmd[: limit - 3] + "..."
    return f"{pid} ({cmd})"


class _Reaper:
    def __init__(self, main_pid: int) -> None:
        self.main_pid = main_pid
        self.main_status: int | None = None

    def reap(self, block: bool = False) -> None:
        """Collect exited children (adopted orphans included); remember the workload's status."""
        while True:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.main_pid:
                self.main_status = status
                if block:
                    return

    def sweep(self, grace_s: float, why: str) -> None:
        """SIGTERM every descendant, SIGKILL after ``grace_s``, reap; name each on stderr."""
        me = os.getpid()
        named: set[int] = set()
        deadline = time.monotonic() + grace_s
        hard_stop = deadline + 10.0  # SIGKILL cannot be ignored; this only bounds a D-state wait
        killing = False
        while True:
            self.reap()
            live = descendants(me)
            if not live or time.monotonic() > hard_stop:
                return
            sig = signal.SIGKILL if killing else signal.SIGTERM
            for pid in sorted(live - named) if not killing else sorted(live):
                if pid not in named:
                    if pid != self.main_pid:
                        _say(f"killed leftover process {describe(pid)} {why}")
                    named.add(pid)
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            if not killing and time.monotonic() >= deadline:
                killing = True
                continue
            time.sleep(0.02)


#: where this launcher's own lines go (``LOG_FD``)
_log_fd = 2


def _say(text: str) -> None:
    try:
        os.write(_log_fd, f"[gemmperf] {text}\n".encode("utf-8", "replace"))
    except OSError:
        pass


def _exit_like(status: int | None, signum: int | None) -> None:
    """Leave with the workload's exit status or its fatal signal."""
    sig = None
    code = 1
    if status is not None:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
        elif os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
    elif signum is not None:
        sig = signum
    if sig is not None:
        try:
            # lazy: Unix-only stdlib module, needed only to re-raise a fatal signal
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # re-raising SIGSEGV: no core file
        except (ImportError, ValueError, OSError):
            pass
        for s in _STOP_SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL/SIGSTOP: always default
            pass
        os.kill(os.getpid(), sig)
        time.sleep(1.0)  # a stop signal would land here; fall through to an exit status
        code = 128 + sig
    os._exit(code)


def main(argv: list[str]) -> None:
    global _log_fd
    if len(argv) < 6 or argv[4] != "--":
        _say("usage: _reaper.py GRACE_S PARENT_PID LOG_FD -- COMMAND...")
        os._exit(2)
    grace_s, parent, cmd = float(argv[1]), int(argv[2]), argv[5:]
    if argv[3] != "-":
        _log_fd = int(argv[3])
        os.set_inheritable(_log_fd, False)  # the workload writes to its stdout, not here

    def on_signal(signum, frame):
        raise _Stop(signum)

    for s in _STOP_SIGNALS:
        signal.signal(s, on_signal)
    if not _prctl(PR_SET_CHILD_SUBREAPER, 1):
        for s in _STOP_SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        _exec(cmd)
    # the runner killed with SIGKILL cannot clean up; we get SIGTERM and do it instead. (The
    # signal follows the death of the runner *thread* that forked us; run_process blocks that
    # thread until we exit, so it cannot end early.)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the prctl took effect
        os._exit(128 + signal.SIGTERM)
    stopped_by = None
    reaper = None
    try:
        # no handler may run in the child between fork and exec: block the stop signals over
        # the fork; the child restores their default action before unblocking (a pending one
        # then ends it as it would end the workload), the parent unblocks into its handler
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        pid = os.fork()
        if pid == 0:
            try:
                for s in _STOP_SIGNALS:
                    signal.signal(s, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
                _exec(cmd)
            finally:
                os._exit(127)
        reaper = _Reaper(pid)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        while reaper.main_status is None:
            reaper.reap(block=True)
    except _Stop as exc:
        stopped_by = exc.signum
    # from here on a repeated SIGTERM must not cut the cleanup short (the runner's SIGKILL,
    # after its own grace period, still can)
    for s in _STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    if reaper is None:  # stopped before the fork returned: nothing of ours can be running
        _exit_like(None, stopped_by)
    why = ("when the workload ended" if stopped_by is None
           else f"on {signal.Signals(stopped_by).name} (timeout or interrupt)")
    reaper.sweep(grace_s, why)
    reaper.reap()
    _exit_like(reaper.main_status, stopped_by if reaper.main_status is None else None)


def _exec(cmd: list[str]) -> None:
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        _say(f"cannot start {cmd[0]!r}: {exc.strerror or exc}")
        os._exit(126 if isinstance(exc, PermissionError) else 127)


if __name__ == "__main__":
    main(sys.argv)
