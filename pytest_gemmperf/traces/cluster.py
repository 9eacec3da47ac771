"""The optional Dask engine behind ``--jobs dask://HOST:PORT``: the per-input work as tasks of a
Dask distributed cluster, results in input order.

Method: :func:`map_on_cluster` connects a ``distributed.Client`` to the scheduler, submits
``call(item)`` once per item (the items taken first get the highest priority: the caller passes
the largest input first, as the process pool takes them) and yields the results in the order of
``items``, never in completion order, so every table built from them equals the serial path's.
The callable and each item travel pickled: the function by reference (module and name: every
worker imports its own installed ``pytest_gemmperf``), its options and the item (a discovery
Source: file paths and provenance) by value, with this process's working directory and its
``GEMMPERF_*`` environment variables (the readers' limits and budgets). A worker runs each task
in that directory with those variables set, one task at a time per worker process, so a
relative path and a setting mean what they mean here. The workers open the files at the same
paths as this process and send back what the function returns: per-source reductions, or a
source's tables where the reports need every dispatch.

Contract:

* ``distributed`` is imported here only, when an address is given; without the extra
  (``pip install 'pytest-gemmperf[dask]'``) that is one GemmperfInputError line naming the
  address.
* A scheduler that cannot be reached within :data:`CONNECT_TIMEOUT_S`, or that has no worker for
  :data:`NO_WORKERS_TIMEOUT_S` (at the start, or later when every worker has left and none came
  back), is one line naming the address; so is a connection to it lost mid-run.
* Nothing waits on the scheduler without a deadline: ``distributed`` itself waits for ever on a
  peer that accepts the connection and then says nothing (its handshake and its requests have
  no timeout), so every call into the client runs in a helper thread (:func:`_within`) and this
  process gives up on it at the deadline. Connecting, handshake included, ends within
  :data:`CONNECT_TIMEOUT_S` (+ :data:`GRACE_S`); while a result is awaited the scheduler must
  answer a request every :data:`POLL_S` within :data:`ANSWER_TIMEOUT_S` (a task may run, and its
  result travel, as long as it takes); closing takes at most :data:`CLOSE_TIMEOUT_S`. A missed
  deadline is one line naming the address and what did not answer. A call given up on is left
  to its thread (a daemon: it never holds the process at exit); a client that connects after
  its deadline is closed there.
* Each task returns, with its result, the fingerprint of the code that computed it (the package
  version and a digest of its source files, :func:`code_fingerprint`). A result from a worker
  running other code than this process is refused with one line naming the worker, never
  merged: the output bytes equal ``--jobs 1``'s only when every reduction ran the same code.
* A worker that cannot enter this process's working directory (it does not see the same file
  system) is one line naming the worker and the directory.
* A worker that dies (killed, out of memory) while it runs a task: the scheduler runs the task
  again on another worker, up to its ``distributed.scheduler.allowed-failures`` times. The task
  is pure (it reads its files and returns a value), so a retried result is the result. Past
  that, one line naming the file (``distributed.KilledWorker``); a task the scheduler cancelled
  is one line too. Any other error a task raises propagates as raised, as from the pool.
* The client is closed when the results have been read or the caller stops early (an error in
  an earlier item); pending tasks are cancelled, not left running.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
import uuid
from concurrent.futures import CancelledError
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pytest_gemmperf.config import ClusterAddress
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.version import __version__

#: seconds to wait for the scheduler to answer a connection (handshake included)
CONNECT_TIMEOUT_S = 20.0
#: seconds without any worker (at the start, or after every worker left) before giving up
NO_WORKERS_TIMEOUT_S = 60.0
#: seconds between checks that the scheduler answers and workers remain while a result is awaited
POLL_S = 2.0
#: seconds the scheduler may take to answer one request (a scheduler busy with a large graph
#: answers in well under a second; one that takes this long is stopped, or not a scheduler)
ANSWER_TIMEOUT_S = 30.0
#: seconds closing the client may take (cancelling what is pending included)
CLOSE_TIMEOUT_S = 10.0
#: added to a deadline that ``distributed`` keeps itself, so that its own error, which says more,
#: comes first where it comes at all
GRACE_S = 2.0
#: what installs the engine
INSTALL = "pip install 'pytest-gemmperf[dask]'"
#: every task's key starts with this (the scheduler's dashboard shows it)
KEY_PREFIX = "gemmperf-read"
#: the package whose source the fingerprint digests
PACKAGE_DIR = Path(__file__).resolve().parent.parent
#: environment variables that carry settings the readers read (travel with every task)
SETTINGS_ENV_PREFIX = "GEMMPERF_"
#: a worker process runs one task at a time in its client's directory and environment (both
#: belong to the whole process)
_CONTEXT_LOCK = threading.Lock()


@functools.cache
def code_fingerprint() -> str:
    """This process's pytest-gemmperf: its version and a digest of every source file of the
    package (path and bytes), computed once per process."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for part in (path.relative_to(PACKAGE_DIR).as_posix().encode(), path.read_bytes()):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
    return f"{__version__}+{digest.hexdigest()[:16]}"


@dataclass(frozen=True)
class _NoDirectory:
    """A worker could not enter the client's working directory (a task's result)."""

    cwd: str
    reason: str


@dataclass(frozen=True)
class _Task:
    """``call(item)`` on a worker, in the client's working directory ``cwd`` with its settings
    ``env`` (``GEMMPERF_*`` variables), returned with the worker's code fingerprint and address.
    The item is bound here, not passed as the task's argument: Dask reads a task's arguments as
    possible tasks (releases before 2024.12, which the extra allows, run a tuple whose first
    element is callable)."""

    call: Callable[[Any], Any]
    cwd: str
    env: tuple[tuple[str, str], ...]
    item: Any = None

    def __call__(self) -> tuple[str, str, Any]:
        # lazy: runs on a Dask worker, which has the engine installed
        from distributed import get_worker

        worker = get_worker().address
        with _CONTEXT_LOCK:
            try:
                before: str | None = os.getcwd()
            except OSError:  # the worker's own directory was removed: nothing to go back to
                before = None
            try:
                os.chdir(self.cwd)
            except OSError as exc:
                return code_fingerprint(), worker, _NoDirectory(self.cwd, exc.strerror or str(exc))
            saved = _settings_env()
            _set_settings_env(dict(self.env))
            try:
                return code_fingerprint(), worker, self.call(self.item)
            finally:
                _set_settings_env(saved)
                if before is not None:
                    os.chdir(before)


def _settings_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(SETTINGS_ENV_PREFIX)}


def _set_settings_env(env: dict[str, str]) -> None:
    """Make ``env`` this process's ``GEMMPERF_*`` variables, exactly."""
    for k in _settings_env():
        if k not in env:
            del os.environ[k]
    os.environ.update(env)


def map_on_cluster(call: Callable[[Any], Any], items: Sequence[Any], cluster: ClusterAddress, *,
                   order: Sequence[int], label: Callable[[Any], str | None]) -> Iterator[Any]:
    """``call(item)`` for every item on the workers of ``cluster``'s scheduler, yielded in the
    order of ``items``; ``order``: the indices of ``items``, the first to be run first; ``label``:
    the file an item stands for, for error lines. Close the iterator (or read it to the end)
    to close the client."""
    distributed = _engine(cluster)
    client = _connect(distributed, cluster)
    futures: list[Any] = []
    answering = True
    try:
        _wait_for_workers(client, cluster)
        cwd, env = os.getcwd(), tuple(sorted(_settings_env().items()))
        batch = uuid.uuid4().hex[:12]
        futures = [None] * len(items)
        for rank, i in enumerate(order):
            futures[i] = client.submit(_Task(call, cwd, env, items[i]), key=f"{KEY_PREFIX}-{batch}-{i}",
                                       priority=len(items) - rank, retries=0)
        ours = code_fingerprint()
        for i, fut in enumerate(futures):
            theirs, worker, result = _result(distributed, client, fut, cluster, label(items[i]))
            if theirs != ours:
                raise GemmperfInputError(cluster.text, f"Dask worker {worker} runs pytest-gemmperf {theirs}, "
                                                       f"this process {ours}: install the same version on "
                                                       f"every worker")
            if isinstance(result, _NoDirectory):
                raise GemmperfInputError(cluster.text, f"Dask worker {worker} cannot enter {result.cwd} "
                                                       f"({result.reason}): the workers must see the input "
                                                       f"files at the same paths as this process (a shared "
                                                       f"file system)")
            yield result
    except _Silent:
        answering = False
        raise
    finally:
        _close(client, futures, answering)


class _NoAnswer(Exception):
    """A call into the client did not return by its deadline (:func:`_within`)."""


class _Silent(GemmperfInputError):
    """The scheduler stopped answering: closing it politely would wait on it again."""


class _Background:
    """``call()`` started in a daemon thread: nothing can interrupt a thread blocked in
    ``distributed``, so the caller waits on this instead, with a deadline of its own, and may
    leave the call to finish alone (a daemon thread never holds the process at exit)."""

    def __init__(self, call: Callable[[], Any], late: Callable[[Any], None] | None = None) -> None:
        self._call, self._late = call, late
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._outcome: tuple[bool, Any] = (False, None)
        self._abandoned = False
        threading.Thread(target=self._run, name="gemmperf-dask-call", daemon=True).start()

    def _run(self) -> None:
        try:
            outcome: tuple[bool, Any] = (True, self._call())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread as raised
            outcome = (False, exc)
        with self._lock:
            self._outcome = outcome
            self._done.set()
            abandoned = self._abandoned
        if abandoned and outcome[0] and self._late is not None:
            try:
                self._late(outcome[1])
            except Exception:  # noqa: BLE001 - nobody is left to tell
                pass

    def wait(self, seconds: float) -> bool:
        """Whether the call has returned within ``seconds``."""
        return self._done.wait(seconds)

    def abandon(self) -> bool:
        """Leave the call to its thread unless it has returned; ``late`` then gets its value
        there. False when it had returned after all (read :meth:`value`)."""
        with self._lock:
            self._abandoned = not self._done.is_set()
            return self._abandoned

    def value(self) -> Any:
        """The call's result, or its exception raised here (only once it has returned)."""
        ok, got = self._outcome
        if ok:
            return got
        raise got


def _within(seconds: float, call: Callable[[], Any], *, late: Callable[[Any], None] | None = None) -> Any:
    """``call()``'s result (or its exception, raised here), or :class:`_NoAnswer` when it has not
    returned within ``seconds``; ``late(value)`` runs on what it returns after that."""
    background = _Background(call, late)
    if not background.wait(seconds) and background.abandon():
        raise _NoAnswer(seconds)
    return background.value()


def _engine(cluster: ClusterAddress) -> Any:
    """The ``distributed`` module, or one line saying how to install it."""
    try:
        # lazy: the optional engine, loaded only when a scheduler address is given
        import distributed
    except ImportError as exc:
        missing = exc.name or "distributed"
        raise GemmperfInputError(cluster.text, f"the Dask engine is not installed ({missing} is missing): "
                                               f"{INSTALL}") from None
    return distributed


def _connect(distributed: Any, cluster: ClusterAddress) -> Any:
    """A client connected to the scheduler, within :data:`CONNECT_TIMEOUT_S` whatever the peer
    does: ``distributed``'s own timeout covers reaching the port, not a peer that accepts and
    then never completes the handshake (another service on that port, a stopped scheduler)."""
    try:
        return _within(CONNECT_TIMEOUT_S + GRACE_S,
                       lambda: distributed.Client(cluster.address, timeout=CONNECT_TIMEOUT_S,
                                                  set_as_default=False),
                       late=lambda client: client.close(timeout=CLOSE_TIMEOUT_S))
    except _NoAnswer:
        raise GemmperfInputError(cluster.text, f"the Dask scheduler at {cluster.address} did not complete the "
                                               f"connection within {CONNECT_TIMEOUT_S:g} s (the port accepts "
                                               f"connections but does not answer as a Dask scheduler: a "
                                               f"stopped scheduler, or another service on that port?)") from None
    except (OSError, TimeoutError) as exc:
        raise GemmperfInputError(cluster.text, f"cannot reach the Dask scheduler at {cluster.address} "
                                               f"within {CONNECT_TIMEOUT_S:g} s ({_first_line(exc)})") from None


def _silent(cluster: ClusterAddress, what: str) -> _Silent:
    return _Silent(cluster.text, f"the Dask scheduler at {cluster.address} did not answer within "
                                 f"{ANSWER_TIMEOUT_S:g} s ({what}); is it stopped or overloaded?")


def _wait_for_workers(client: Any, cluster: ClusterAddress) -> None:
    try:
        _within(NO_WORKERS_TIMEOUT_S + ANSWER_TIMEOUT_S,
                lambda: client.wait_for_workers(1, timeout=NO_WORKERS_TIMEOUT_S))
    except _NoAnswer:
        raise _silent(cluster, "asked for its workers") from None
    except (OSError, TimeoutError):
        raise GemmperfInputError(cluster.text, f"no Dask worker joined the scheduler at {cluster.address} within "
                                               f"{NO_WORKERS_TIMEOUT_S:g} s (start some: dask worker "
                                               f"{cluster.address})") from None


def _result(distributed: Any, client: Any, fut: Any, cluster: ClusterAddress, where: str | None) -> Any:
    """``fut``'s result, waited for while the scheduler answers and has workers; the engine's
    failures as one line (``where``: the file the task reads), a task's own error as raised.

    The wait (the task's run, then its result's transfer) has no deadline of its own: a large
    trace takes what it takes. What must hold meanwhile is checked every :data:`POLL_S`."""
    waiting = _Background(fut.result)
    alone_since: float | None = None
    while not waiting.wait(POLL_S):
        alone_since = _check_workers(client, cluster, alone_since)
    try:
        return waiting.value()
    except distributed.KilledWorker as exc:
        raise GemmperfInputError(where, f"the Dask workers reading this died {exc.allowed_failures + 1} "
                                        f"time(s) (killed, or out of memory?); give the workers more "
                                        f"memory, or rerun with --jobs 1") from None
    except CancelledError as exc:
        raise GemmperfInputError(where, f"the Dask scheduler at {cluster.address} cancelled this task "
                                        f"({_first_line(exc)}); was it restarted?") from None
    except ImportError as exc:
        if fut.status == "error" and (exc.name or "").split(".")[0] == "pytest_gemmperf":
            raise GemmperfInputError(cluster.text, f"a Dask worker cannot import {exc.name}: install "
                                                   f"pytest-gemmperf (this version) on every worker") from None
        raise
    except OSError as exc:  # TimeoutError included
        if fut.status == "error":
            raise  # the task's own error (a file it could not read): as the serial path raises it
        raise GemmperfInputError(cluster.text, f"lost the Dask scheduler at {cluster.address} "
                                               f"({_first_line(exc)})") from None


def _check_workers(client: Any, cluster: ClusterAddress, alone_since: float | None) -> float | None:
    """None while the scheduler answers and has workers, else since when it has had none; one
    line once that is longer than :data:`NO_WORKERS_TIMEOUT_S`, or when it does not answer
    within :data:`ANSWER_TIMEOUT_S`."""
    try:
        workers = _within(ANSWER_TIMEOUT_S, client.nthreads)
    except _NoAnswer:
        raise _silent(cluster, "asked for its workers while a result was awaited") from None
    except (OSError, TimeoutError) as exc:
        raise GemmperfInputError(cluster.text, f"lost the Dask scheduler at {cluster.address} "
                                               f"({_first_line(exc)})") from None
    if workers:
        return None
    now = time.monotonic()
    if alone_since is not None and now - alone_since > NO_WORKERS_TIMEOUT_S:
        raise GemmperfInputError(cluster.text, f"every Dask worker left the scheduler at {cluster.address} "
                                               f"and none came back within {NO_WORKERS_TIMEOUT_S:g} s")
    return now if alone_since is None else alone_since


def _close(client: Any, futures: list[Any], answering: bool) -> None:
    """Cancel what is still pending and close the client, within :data:`CLOSE_TIMEOUT_S`; a
    scheduler already gone, or silent, is no error here (the reason the run stopped is reported
    instead). A silent scheduler is not asked to cancel anything (it would not answer)."""
    pending = [f for f in futures if f is not None and not f.done()] if answering else []

    def close() -> None:
        try:
            if pending:
                client.cancel(pending)
        except Exception:  # noqa: BLE001 - best effort while stopping
            pass
        client.close(timeout=CLOSE_TIMEOUT_S)

    try:  # a silent scheduler: closing goes on in the background, nobody waits for it
        _within(CLOSE_TIMEOUT_S + GRACE_S if answering else 0.0, close)
    except Exception:  # noqa: BLE001 - best effort while stopping (_NoAnswer included)
        pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
