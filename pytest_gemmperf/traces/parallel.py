"""A bounded process pool for reading many trace files at once, results in input order.

Method: :func:`map_ordered` runs one picklable function over a list of items in a
``concurrent.futures.ProcessPoolExecutor`` with the ``forkserver`` start method (``fork`` would
copy a parent whose pyarrow / BLAS threads may hold locks; ``forkserver`` forks workers from a
clean server that never runs a reader instead), ``max_workers = min(jobs, len(items))``, and returns the
results in the order of ``items`` - never in completion order - so every table built from them
equals the serial path's row for row. The workers take the items largest input first
(:func:`submission_order`), so that the pool does not end on one large file while the other
workers idle. ``jobs == 1`` (or a single item) runs the same function in this process, without
a pool: the serial path.

Contract:

* ``jobs``: None or 0 (``auto``, the setting's default) mean :func:`default_jobs`:
  :func:`usable_cores` (the CPUs this process may run on, which a container or ``taskset`` may
  make fewer than the machine has) divided by the number of pytest-xdist workers sharing them
  (``PYTEST_XDIST_WORKER_COUNT``; under ``pytest -n K`` every worker sizes its own pool, and K
  pools of all cores would oversubscribe the machine K times), at least 1. An explicit positive
  ``jobs`` (``--gemmperf-jobs N``, ``gemmperf ... --jobs N``) is taken as given: the user chose
  it per process. A negative or non-integer value is a
  :class:`~pytest_gemmperf.errors.GemmperfInputError`.
* A :class:`~pytest_gemmperf.errors.GemmperfInputError` raised in a worker is re-raised in the
  parent as the same one-line error naming the same file (the exception is carried across as
  its fields: its constructor takes keyword arguments, which default exception pickling loses).
  When several items fail, the first failing item in input order wins - the error the serial
  path would have stopped at. Pending work is cancelled.
* Each worker gets ``default_jobs() // workers`` pyarrow threads (at least 1), so a pool of n
  workers does not start n x cores reader threads, nor K xdist workers K times that.
* :func:`pool_jobs` keeps small inputs serial. With ``auto`` it asks :func:`pool_pays`: the
  serial reading time is estimated from the inputs, ``files x PER_FILE_S + bytes /
  READ_BYTES_PER_S`` (a gzip file's bytes count ``GZIP_FACTOR`` times: its text is that much
  larger), and a pool of w workers is used only when it would save more than it costs to start,
  ``serial x (1 - 1/w) > POOL_START_S``. The constants are measured (docs/performance.md): the
  rocprofv3 CSV and JSON readers parse 100-200 MB/s per core (Kineto 50 MB/s) and take some
  30 ms per file besides, and the pool's start costs under a second (the fork server starts and
  imports the readers once; workers are forked from it). An explicit
  ``N`` uses the pool above ``POOL_MIN_BYTES`` of input.
* The fork server preloads the readers (:data:`PRELOAD`): a worker then starts as a fork of an
  idle process that has imported pandas and pyarrow, not as a fresh interpreter importing them
  (up to a CPU-second each). The server never runs a reader, so the threads those imports
  start (OpenBLAS's pool, jemalloc's background thread) hold no locks when it forks.
  :func:`prestart` starts it before a command imports its own work, so that the two imports run
  at once on two cores instead of one after the other, when a bounded look at the inputs
  (:data:`PRESTART_MAX_ENTRIES` directory entries) says the pool will be used. A worker freezes
  what it inherited out of the cyclic garbage collector when it starts (a full collection
  would walk every inherited object and write to it, copying the server's pages), and sends
  its results through a pipe that holds one source's reductions (:data:`RESULT_PIPE_BYTES`).
* ``jobs`` a :class:`~pytest_gemmperf.config.ClusterAddress` (``--jobs dask://HOST:PORT``): the
  same function runs as tasks of that Dask scheduler's workers instead of a local pool
  (:mod:`pytest_gemmperf.traces.cluster`), whatever the input's size; results, ordering and the
  first error in input order as above.
* ``meanwhile`` (:func:`map_ordered`): work of this process that does not need the results
  (importing what comes next) runs after the items were handed to the workers and before
  their results are read, so that it shares the cores with the pool instead of running after it.
* :func:`beside`: one process for work that can run beside this one's (a second report file
  written while this process writes the first), forked from this process's fork server and only
  where that server already runs: forking from it costs some 20 ms, a fresh interpreter a pandas
  import. Its result or its GemmperfInputError come back as from a pool worker; where it died,
  the work is done in this process instead (same result, later).
"""

from __future__ import annotations

import gc
import importlib
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NamedTuple, Sequence, TypeVar, Union

from pytest_gemmperf.config import ClusterAddress
from pytest_gemmperf.errors import GemmperfInputError

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

try:
    import fcntl
except ImportError:  # not POSIX: the result pipe keeps its default size
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")
R = TypeVar("R")
#: a ``jobs`` setting: a worker count (None or 0: auto) or a Dask scheduler
Jobs = Union[int, ClusterAddress, None]

#: an explicit ``jobs`` N: below this many bytes of input in total, reading stays serial
POOL_MIN_BYTES = 16 * 1024 * 1024
#: ``auto``: wall seconds a pool costs before its first result (fork server, imports, forks)
POOL_START_S = 1.0
#: ``auto``: seconds of fixed work per input file (opening, small tables, provenance)
PER_FILE_S = 0.03
#: ``auto``: input bytes one core reads and reduces per second (rocprofv3 CSV and JSON: 100-200
#: MB/s, Kineto 50 MB/s)
READ_BYTES_PER_S = 100e6
#: ``auto``: a gzip file's text is about this many times its size on disk
GZIP_FACTOR = 10
#: directory entries :func:`prestart` looks at before it gives up guessing
PRESTART_MAX_ENTRIES = 20_000
#: modules the fork server imports once, so that each worker starts as a fork of it
PRELOAD = ("pytest_gemmperf.traces.discover",)
#: the start method: never "fork" (see the module docstring)
START_METHOD = "forkserver"
#: bytes the pipe carrying the workers' results holds (Linux ``F_SETPIPE_SZ``; 64 KiB by default):
#: one source's reductions (about 0.26 MB for a 44k-dispatch file) then leave its worker in one
#: write instead of waiting for the parent to drain the pipe 64 KiB at a time
RESULT_PIPE_BYTES = 1 << 20
#: set by pytest-xdist in each worker: how many workers the session started
XDIST_COUNT_ENV = "PYTEST_XDIST_WORKER_COUNT"

#: whether this process started its fork server (:func:`prestart`, :func:`map_ordered`): it runs
#: until this process exits, and :func:`beside` forks from it
_fork_server_started = False


def usable_cores() -> int:
    """CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where the
    platform has no affinity call)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def xdist_workers() -> int:
    """How many pytest-xdist workers share this machine's cores: ``PYTEST_XDIST_WORKER_COUNT``
    (set by xdist in each worker), 1 outside xdist or when the value is not a positive integer
    (a malformed variable must not stop the reading, only its sharing)."""
    try:
        n = int(os.environ.get(XDIST_COUNT_ENV, "").strip() or 1)
    except ValueError:
        return 1
    return max(1, n)


def default_jobs() -> int:
    """This process's share of the cores: ``usable_cores() // xdist_workers()``, at least 1."""
    return max(1, usable_cores() // xdist_workers())


def resolve_jobs(jobs: int | None, *, where: str | None = None) -> int:
    """``jobs`` as a worker count >= 1: None or 0 mean :func:`default_jobs`; a positive
    integer is returned as given."""
    if jobs is None:
        return default_jobs()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise GemmperfInputError(where, f"jobs must be a non-negative integer (0 = all usable cores), "
                                        f"got {jobs!r}")
    return default_jobs() if jobs == 0 else jobs


def pool_jobs(jobs: Jobs, files: Iterable[os.PathLike | str], *,
              min_bytes: int | None = None) -> int | ClusterAddress:
    """Workers worth starting for reading ``files``: ``resolve_jobs(jobs)`` capped at the number
    of files; then 1 when the pool would not pay: with ``auto`` (``jobs`` None or 0, no
    ``min_bytes``) as :func:`pool_pays` estimates, otherwise when the files total fewer than
    ``min_bytes`` (default :data:`POOL_MIN_BYTES`). A file that cannot be stat'ed counts as
    large: its reader reports the problem. A Dask scheduler is returned as given: the user
    chose to read there."""
    if isinstance(jobs, ClusterAddress):
        return jobs
    files = list(files)
    n = min(resolve_jobs(jobs), len(files))
    if n <= 1:
        return 1
    size = input_bytes(files)
    if size is None:
        return n
    if min_bytes is None and jobs in (None, 0):
        return n if pool_pays(n, len(files), size) else 1
    return n if size >= (POOL_MIN_BYTES if min_bytes is None else min_bytes) else 1


def input_bytes(files: Iterable[os.PathLike | str]) -> int | None:
    """The text the readers will parse, in bytes: file sizes, a ``.gz`` file's times
    :data:`GZIP_FACTOR`; None when a file cannot be stat'ed."""
    total = 0
    for f in files:
        try:
            size = os.stat(f).st_size
        except OSError:
            return None
        total += size * GZIP_FACTOR if os.fspath(f).endswith(".gz") else size
    return total


def serial_seconds(n_files: int, n_bytes: int) -> float:
    """Estimated seconds one core takes to read and reduce ``n_files`` totalling ``n_bytes``."""
    return n_files * PER_FILE_S + n_bytes / READ_BYTES_PER_S


def pool_pays(workers: int, n_files: int, n_bytes: int) -> bool:
    """Whether ``workers`` processes read ``n_files`` (``n_bytes`` of text) sooner than one:
    the time the pool saves, ``serial x (1 - 1/workers)``, exceeds its start-up
    :data:`POOL_START_S`. Pure: the decision of ``jobs=auto``."""
    if workers <= 1 or n_files <= 1:
        return False
    serial = serial_seconds(n_files, n_bytes)
    return serial * (1 - 1 / min(workers, n_files)) > POOL_START_S


# the two below are named tuples, not frozen dataclasses: every command defines them at import,
# only a pool, a cluster or the process beside uses them (a dataclass's generated methods cost
# ~0.4 ms each to make)


class _Failed(NamedTuple):
    """A worker's GemmperfInputError, as plain fields (picklable whatever the constructor)."""

    path: str | None
    message: str
    line: int | None
    record: str | None

    def raise_(self) -> None:
        raise GemmperfInputError(self.path, self.message, line=self.line, record=self.record)


class _Call(NamedTuple):
    """``fn(item)`` with a GemmperfInputError turned into a :class:`_Failed` value."""

    fn: Callable[[Any], Any]

    def __call__(self, item: Any) -> Any:
        try:
            return self.fn(item)
        except GemmperfInputError as exc:
            return _Failed(exc.path, exc.message, exc.line, exc.record)


def map_ordered(fn: Callable[[T], R], items: Sequence[T], jobs: Jobs = 1, *,
                meanwhile: Callable[[], Any] | None = None) -> list[R]:
    """``[fn(x) for x in items]``, on up to ``jobs`` worker processes (or a Dask scheduler's
    workers), in the order of ``items``.

    ``fn`` and the items must be picklable (a module-level function or a
    ``functools.partial`` of one). ``jobs == 1`` runs in this process (errors propagate as
    raised). ``meanwhile``: called in this process once a local pool has the items, before their
    results are read (never on the serial path or a cluster, where nothing runs beside it);
    what it raises propagates after the pool's work is cancelled. See the module docstring for
    errors and ordering.
    """
    items = list(items)
    if isinstance(jobs, ClusterAddress):
        # lazy: the engine's module only where a scheduler is named
        from pytest_gemmperf.traces.cluster import map_on_cluster

        return _collect(map_on_cluster(_Call(fn), items, jobs, order=submission_order(items), label=_label))
    n = min(resolve_jobs(jobs), len(items))
    if n <= 1:
        return [fn(x) for x in items]
    # lazy: a serial run (a small input, --jobs 1) starts faster without the pool's modules
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool  # lazy: as ProcessPoolExecutor

    ctx = _pool_context()
    call = _Call(fn)
    threads = worker_threads(n)
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init_worker,
                             initargs=(threads,)) as pool:
        _widen_result_pipe(pool)
        futures: list[Any] = [None] * len(items)
        for i in submission_order(items):
            futures[i] = pool.submit(call, items[i])
        out: list[R] = []
        try:
            if meanwhile is not None:
                meanwhile()
            for i, fut in enumerate(futures):  # input order, not completion order
                try:
                    r = fut.result()
                except BrokenProcessPool:
                    # a worker was killed (OOM killer, signal): one line, not a pool traceback
                    raise GemmperfInputError(_label(items[i]), "a worker process died while reading this "
                                             "(killed, or out of memory?); rerun with fewer jobs "
                                             "(jobs=1: no worker processes)") from None
                if isinstance(r, _Failed):
                    r.raise_()
                out.append(r)
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    return out


def _pool_context():
    """The pool's multiprocessing context: the fork server (its preload set, noted as started:
    the pool starts it if :func:`prestart` did not), or ``spawn`` where the platform has none
    (also fork-free)."""
    global _fork_server_started
    # lazy: a serial run (a small input, --jobs 1) starts faster without the pool's modules
    import multiprocessing

    if START_METHOD not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context(START_METHOD)
    # no effect once this process's fork server runs: it is started once and kept
    ctx.set_forkserver_preload(list(PRELOAD))
    _fork_server_started = True
    return ctx


def fork_server_started() -> bool:
    """Whether this process has started its fork server (a pool read, or :func:`prestart`
    expected one): a process forked from it then costs little (:func:`beside`)."""
    return _fork_server_started


class Beside:
    """One worker process beside this one (:func:`beside`); a context manager that shuts it down."""

    def __init__(self, pool: ProcessPoolExecutor) -> None:
        self._pool = pool

    def submit(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> Callable[[], R]:
        """Start ``fn(*args, **kwargs)`` in the worker (``fn`` and its arguments picklable);
        returns the call that waits for its result (a GemmperfInputError raised as in this
        process). Where the worker died (killed, out of memory), that call runs ``fn`` here."""
        # lazy: as ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        call, item = _Call(_apply), (fn, args, kwargs)
        try:
            fut = self._pool.submit(call, item)
        except BrokenProcessPool:
            fut = None

        def wait() -> R:
            try:
                r = fut.result() if fut is not None else call(item)
            except BrokenProcessPool:
                r = call(item)
            if isinstance(r, _Failed):
                r.raise_()
            return r

        return wait

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "Beside":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _apply(item: tuple[Callable[..., Any], tuple, dict]) -> Any:
    fn, args, kwargs = item
    return fn(*args, **kwargs)


def beside(preload: Sequence[str] = ()) -> Beside | None:
    """A worker process for work that can run beside this process's (:class:`Beside`), forked
    now from this process's fork server and importing ``preload`` (module names) while this
    process carries on; None where no fork server runs (nothing read on a pool: starting a
    fresh interpreter would cost more than the work saves)."""
    if not _fork_server_started:
        return None
    # lazy: as map_ordered
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=1, mp_context=_pool_context(), initializer=_init_beside,
                               initargs=(tuple(preload),))
    pool.submit(int)  # forks the worker now: its imports run while this process works
    return Beside(pool)


def _init_beside(preload: Sequence[str]) -> None:
    """A :func:`beside` worker's start: one pyarrow thread (this process keeps the others), what
    it inherited frozen out of the collector as a pool worker's, then ``preload`` imported."""
    _init_worker(1)
    for name in preload:
        importlib.import_module(name)


def _collect(results: Iterator[Any]) -> list[Any]:
    """Results read in input order up to the first failed item, whose error is raised; the
    iterator is closed either way (the engine stops the rest)."""
    out = []
    try:
        for r in results:
            if isinstance(r, _Failed):
                r.raise_()
            out.append(r)
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()
    return out


def submission_order(items: Sequence[Any]) -> list[int]:
    """The indices of ``items`` as :func:`map_ordered` hands them to its workers: largest input
    first (:func:`input_bytes` of the files an item stands for, 0 where unknown), ties in input
    order. A pool that takes a large file last leaves it to one worker while the others idle;
    taken first, the small ones fill in around it. Results still come back in input order."""
    sizes = [input_bytes(_files(x)) or 0 for x in items]
    return sorted(range(len(items)), key=lambda i: -sizes[i])


def prestart(jobs: Jobs, paths: Iterable[os.PathLike | str]) -> bool:
    """Start this process's fork server now when reading ``paths`` will likely use a pool (as
    :func:`pool_jobs` decides on the regular files found within :data:`PRESTART_MAX_ENTRIES`
    entries; no link followed). A guess that only moves work earlier: a wrong one costs an
    idle server. Returns whether it started one."""
    if isinstance(jobs, ClusterAddress):
        return False
    try:
        if resolve_jobs(jobs) <= 1:
            return False
    except GemmperfInputError:
        return False  # the command reports it
    files: list[str] = []
    budget = PRESTART_MAX_ENTRIES
    for top in paths:
        budget -= _regular_files(os.fspath(top), files, budget)
        if budget <= 0:
            break
    if pool_jobs(jobs, files) <= 1:
        return False
    # lazy: a serial run (a small input, --jobs 1) starts faster without the pool's modules
    import multiprocessing
    from multiprocessing import forkserver  # lazy: as multiprocessing

    if START_METHOD not in multiprocessing.get_all_start_methods():
        return False
    _pool_context()
    forkserver.ensure_running()
    return True


def _regular_files(top: str, out: list[str], budget: int) -> int:
    """Append the regular files under ``top`` (or ``top`` itself) to ``out``, looking at no more
    than ``budget`` entries; returns how many it looked at."""
    seen = 0
    todo = [top]
    while todo and seen < budget:
        path = todo.pop()
        try:
            with os.scandir(path) as it:
                for entry in it:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        out.append(entry.path)
                    if seen >= budget:
                        break
        except NotADirectoryError:
            out.append(path)
            seen += 1
        except OSError:
            seen += 1
    return seen


def worker_threads(workers: int) -> int:
    """pyarrow threads for each of ``workers`` pool processes: this process's share of the
    cores (:func:`default_jobs`) split between them, at least 1."""
    return max(1, default_jobs() // max(1, int(workers)))


def _widen_result_pipe(pool: ProcessPoolExecutor) -> None:
    """Give the pipe the workers send their results through :data:`RESULT_PIPE_BYTES`, where the
    platform allows it (the system's ``pipe-max-size`` may refuse): a worker whose result
    does not fit waits, off the CPU, for the parent's result thread to be scheduled and read."""
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setsize is None:
        return
    try:
        # CPython's executor sends every result through one SimpleQueue, i.e. one pipe
        fcntl.fcntl(pool._result_queue._reader.fileno(), setsize, RESULT_PIPE_BYTES)
    except (AttributeError, OSError, ValueError):
        pass  # the default pipe: slower, never wrong


def _init_worker(threads: int) -> None:
    """Share the cores between the workers: pyarrow's CSV reader (``use_threads=True``) would
    otherwise start a thread per core in every worker, and n workers x all cores threads
    oversubscribe the machine. Freeze what the worker inherited from the fork server (the
    imported modules) out of the cyclic garbage collector: a full collection would otherwise
    walk, and write to, every inherited object, copying each of their pages from the server."""
    gc.freeze()
    try:
        # lazy: only the processes that read traces set pyarrow's thread pools
        import pyarrow
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        return
    pyarrow.set_cpu_count(threads)
    pyarrow.set_io_thread_count(max(2, threads))


def _files(item: Any) -> list[os.PathLike | str]:
    """The files an item stands for: a discovery Source's files, or the item when it is a path."""
    files = getattr(item, "files", None)
    if files:
        return list(files)
    return [item] if isinstance(item, (str, os.PathLike)) else []


def _label(item: Any) -> str | None:
    """The file an item stands for, for an error line: a discovery Source's first file."""
    files = _files(item)
    return os.fspath(files[0]) if files else None
