"""``--jobs dask://HOST:PORT``: the per-input reducers run as tasks of a Dask distributed cluster
(``traces/cluster.py``), and ``gemmperf analyze`` / ``compare`` write the same bytes as with
``--jobs 1``. The cluster is a local one of two worker processes; the inputs are written here
in the documented formats (rocprofv3 7.x ``kernel_trace.csv``, one process per host, and
PyTorch profiler traces, one per rank). Without the engine installed, the tests that need a
cluster are skipped; the ones about a missing engine or a bad address run either way."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import signal
import socket
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from pytest_gemmperf.cli import main
from pytest_gemmperf.config import BY_NAME, DASK_DEFAULT_PORT, ClusterAddress, parse_cluster_address
from pytest_gemmperf.traces import cluster as engine
from pytest_gemmperf.traces import parallel

KERNEL_TRACE_7X = ("Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
                   "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size",
                   "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X",
                   "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")
KERNELS = ("Cijk_Ailk_Bljk_BBS_BH_MT256x256x64_MI16x16x1_SN_1LDSB1",
           "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
           "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
           "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
           "__amd_rocclr_copyBuffer", "triton_poi_fused_add_mul_0")


def _durations(seed: int, n: int, slow: float) -> list[tuple[int, int]]:
    """(kernel index, duration ns) of ``n`` dispatches, a fixed pseudo-random sequence;
    ``slow`` scales kernel 0 (a regression to find)."""
    state, out = seed * 7919 + 1, []
    for _ in range(n):
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        k = state % len(KERNELS)
        base = (k + 1) * 20_000 * (slow if k == 0 else 1.0)
        out.append((k, int(base + (state >> 33) % 2_000)))
    return out


def write_inputs(root: Path, *, hosts: int = 4, ranks: int = 2, n: int = 150, slow: float = 1.0) -> Path:
    """``hosts`` rocprofv3 7.x processes (``host<k>/<pid>_kernel_trace.csv``) and ``ranks``
    PyTorch profiler traces (``torch/rank<r>.pt.trace.json``) under ``root``."""
    for h in range(hosts):
        d = root / f"host{h}"
        d.mkdir(parents=True)
        lines = [",".join(f'"{c}"' for c in KERNEL_TRACE_7X)]
        t = 1_550_151_853_000_000 + h * 1_000
        for i, (k, dur) in enumerate(_durations(h, n, slow)):
            lines.append(f'"KERNEL_DISPATCH","Agent {2 + h % 2}",1,1,{4000 + h},{i + 1},{k + 10},"{KERNELS[k]}",'
                         f'{i + 1},{t},{t + dur},0,0,8,0,16,256,1,1,1048576,1,1')
            t += dur + 1_500
        (d / f"{5000 + h}_kernel_trace.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for r in range(ranks):
        d = root / "torch"
        d.mkdir(parents=True, exist_ok=True)
        events, ts = [], 1000.0
        for i, (k, dur) in enumerate(_durations(100 + r, n, slow)):
            events.append({"ph": "X", "cat": "kernel", "name": KERNELS[k], "pid": r, "tid": 7,
                           "ts": round(ts, 3), "dur": dur / 1000,
                           "args": {"device": r, "stream": 7, "correlation": i + 1}})
            ts += dur / 1000 + 1.25
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": r, "world_size": ranks},
               "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": events}
        (d / f"rank{r}.pt.trace.json").write_text(json.dumps(doc), encoding="utf-8")
    return root


def _analyze(out: Path, root: Path, jobs: str, *extra: str) -> dict[str, bytes]:
    assert main(["analyze", str(root), "--out", str(out), "--jobs", jobs, *extra]) == 0
    return {f: (out / f).read_bytes() for f in ("kernels.csv", "summary.json")}


def _undated(text: str) -> str:
    """A report's text without the time it was generated."""
    return re.sub(r"generated \d{4}-\d\d-\d\dT[\d:+-]+", "", text)


def _compare(out: Path, base: Path, cand: Path, jobs: str) -> bytes:
    assert main(["compare", str(base), str(cand), "--out", str(out), "--jobs", jobs, "--no-report"]) == 1
    return (out / "verdicts.csv").read_bytes()


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


@contextmanager
def _refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections while the block runs: bound, never
    listening. Held, not closed and handed out: a port closed again is free for anything else
    on the machine to listen on (another test's server, a pytest-xdist worker's cluster), and a
    listener there that answers nothing held the client of a test that expected a refusal."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


class Relay:
    """A plain TCP server on 127.0.0.1 that accepts every connection and forwards it to
    ``target`` (host, port) until :attr:`muted` is set; muted, or without a target, it reads
    what it gets and answers nothing, the connections left open (a stopped scheduler, another
    service on the port)."""

    def __init__(self, target: tuple[str, int] | None = None) -> None:
        self.target = target
        self.muted = threading.Event()
        if target is None:
            self.muted.set()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._socks: list[socket.socket] = [self._server]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            upstream = None
            if not self.muted.is_set():
                try:
                    upstream = socket.create_connection(self.target, timeout=10)
                    upstream.settimeout(None)
                except OSError:
                    conn.close()
                    continue
            with self._lock:
                self._socks += [x for x in (conn, upstream) if x is not None]
            threading.Thread(target=self._pump, args=(conn, upstream), daemon=True).start()
            if upstream is not None:
                threading.Thread(target=self._pump, args=(upstream, conn), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket | None) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if dst is None or self.muted.is_set():
                if not data:
                    return
                continue  # swallowed
            try:
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        with self._lock:
            for x in self._socks:
                try:
                    x.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv / accept
                except OSError:
                    pass
                x.close()


@contextmanager
def relay(target: tuple[str, int] | None = None) -> Iterator[Relay]:
    r = Relay(target)
    try:
        yield r
    finally:
        r.close()


def returns_within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()`` in a daemon thread: a test that fails, not a suite that hangs, when it has not
    returned within ``seconds``."""
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            box.append((False, exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"still waiting after {seconds:g} s: hung")
    ok, value = box[0]
    if not ok:
        raise value
    return value


def analyze_fails_in_time(tmp_path: Path, capsys, port: int) -> tuple[str, str]:
    """``gemmperf analyze --jobs dask://127.0.0.1:PORT`` exits 2 within a minute (a hang fails
    the test) and writes no table: the address and its one error line."""
    root = write_inputs(tmp_path / "in", hosts=2, ranks=0, n=10)
    addr = f"dask://127.0.0.1:{port}"
    argv = ["analyze", str(root), "--no-report", "--out", str(tmp_path / "o"), "--jobs", addr]
    assert returns_within(60, lambda: main(argv)) == 2
    assert not (tmp_path / "o" / "kernels.csv").exists()
    return addr, _one_line(capsys.readouterr().err)


# ------------------------------------------------------------------------ the address, no engine

@pytest.mark.parametrize("text, host, port", [("dask://sched.example:8790", "sched.example", 8790),
                                              ("tcp://10.0.0.7:9000", "10.0.0.7", 9000),
                                              ("DASK://head-node", "head-node", DASK_DEFAULT_PORT),
                                              (" dask://[fd00::1]:8786 ", "fd00::1", 8786)])
def test_jobs_reads_a_scheduler_address(text, host, port):
    got = BY_NAME["jobs"].convert(text)
    assert isinstance(got, ClusterAddress) and (got.host, got.port) == (host, port)
    assert got.address == (f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}")
    assert parse_cluster_address("auto") is None and parse_cluster_address("http://h:1") is None


@pytest.mark.parametrize("bad", ["dask://", "dask://h:70000", "dask://h:0", "tcp://h:x", "dask://h:1/path",
                                 "dask://user@h:1", "tcp://h:1?q=1"])
def test_a_bad_scheduler_address_is_one_line(bad):
    with pytest.raises(ValueError) as exc:
        BY_NAME["jobs"].convert(bad)
    assert "\n" not in str(exc.value) and bad.strip() in str(exc.value)


pytest_plugins = ["pytester"]


def test_pytest_reads_a_scheduler_address(pytester):
    """``gemmperf_jobs`` / ``--gemmperf-jobs`` take the address too: a session's points are then
    read on the cluster (the same value reaches the same readers)."""
    from pytest_gemmperf.pytest_glue.options import resolve_options

    pytester.makeini("[pytest]\ngemmperf_jobs = dask://sched:8790\n")
    assert resolve_options(pytester.parseconfig(), pytester.path).jobs == ClusterAddress("sched", 8790,
                                                                                          "dask://sched:8790")
    got = resolve_options(pytester.parseconfig("--gemmperf-jobs", "tcp://10.1.2.3:9"), pytester.path).jobs
    assert got.address == "tcp://10.1.2.3:9"


def test_an_address_always_reads_on_the_cluster(tmp_path):
    """However small the input, an address is where the user asked the reading to happen; no
    local pool is started for it."""
    f = tmp_path / "a.csv"
    f.write_bytes(b"x")
    addr = parse_cluster_address("dask://127.0.0.1:1")
    assert parallel.pool_jobs(addr, [f, f]) is addr
    assert not parallel.prestart(addr, [tmp_path])


def test_without_the_engine_installed_one_line_exit_2(tmp_path, monkeypatch, capsys):
    root = write_inputs(tmp_path / "in", hosts=2, ranks=0, n=10)
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    assert main(["analyze", str(root), "--no-report", "--out", str(tmp_path / "o"),
                 "--jobs", "dask://127.0.0.1:8786"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "dask://127.0.0.1:8786" in line and "pytest-gemmperf[dask]" in line


# ------------------------------------------------------------------------------ on a cluster

#: the tests below run a Dask client (and most a local cluster); found, not imported, at collection
needs_engine = pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                  reason="the Dask engine is an optional extra (pip install 'pytest-gemmperf[dask]')")


@needs_engine
def test_an_unreachable_scheduler_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_S", 1.0)
    with _refused_port() as port:
        addr, line = analyze_fails_in_time(tmp_path, capsys, port)
    assert addr in line and "cannot reach the Dask scheduler" in line


@needs_engine
def test_a_port_that_accepts_but_never_answers_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    """Something listens on the port but never speaks Dask's protocol (a stopped scheduler,
    another service): ``distributed`` waits for its handshake for ever; the command gives up at
    its connection deadline."""
    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_S", 1.0)
    with relay() as silent:
        addr, line = analyze_fails_in_time(tmp_path, capsys, silent.port)
    assert addr in line and "did not complete the connection within 1 s" in line


KILL_PLUGIN = "gemmperf-test-kill"


def kill_worker_plugin(marker: str | None):
    """A worker plugin that SIGKILLs its worker process when it starts one of gemmperf's
    reading tasks: once in all (``marker`` made), or every time (``marker`` None). Defined
    here, not at module level, so that it travels to the workers by value and the module
    imports no Dask."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class KillWorker(WorkerPlugin):
        def transition(self, key, start, finish, **kwargs) -> None:
            if finish != "executing" or not str(key).startswith(engine.KEY_PREFIX):
                return
            if marker is not None:
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    return
            os.kill(os.getpid(), signal.SIGKILL)

    return KillWorker()


@contextmanager
def worker_plugin(client, plugin) -> Iterator[None]:
    """``plugin`` on every worker while the block runs, and on none after it. Removing it can
    meet a worker that the plugin is killing, or its replacement still registering (the
    scheduler drops the plugin, then its message to that worker fails, or finds no plugin
    there): then every worker is restarted, and the new ones never had it."""
    client.register_plugin(plugin, name=KILL_PLUGIN)
    try:
        yield
    finally:
        try:
            client.unregister_worker_plugin(KILL_PLUGIN)
        except (OSError, KeyError):  # distributed's CommClosedError; the worker's "no such plugin"
            client.restart()


@pytest.fixture(scope="module")
def dask_cluster():
    """Two worker processes, one thread each; a task is tried on at most two workers (one
    retry), so that the tests of dying workers end soon."""
    import dask
    import distributed

    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=None, silence_logs=50)
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield cluster, client
    finally:
        client.close()
        cluster.close()


@pytest.fixture
def address(dask_cluster):
    cluster, client = dask_cluster
    client.wait_for_workers(2, timeout=60)
    return cluster.scheduler_address.replace("tcp://", "dask://")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Two sides (the candidate's first kernel 30 % slower) and their serial outputs: analyze's
    kernels.csv and summary.json of the base, compare's verdicts.csv."""
    root = tmp_path_factory.mktemp("dask-inputs")
    base = write_inputs(root / "base", hosts=3, ranks=1, n=100)
    cand = write_inputs(root / "cand", hosts=3, ranks=1, n=100, slow=1.3)
    analyzed = _analyze(root / "serial-analyze", base, "1", "--no-report")
    verdicts = _compare(root / "serial-compare", base, cand, "1")
    assert b"regression" in verdicts and b"ncclDevKernel_Generic_1" in analyzed["kernels.csv"]
    return base, cand, analyzed, verdicts


@needs_engine
def test_analyze_on_the_cluster_writes_the_serial_bytes(tmp_path, address, inputs):
    base, _, serial, _ = inputs
    assert _analyze(tmp_path / "dask", base, address, "--no-report") == serial
    # with reports the workers send back what each report reads of their sources: every report
    # file is the serial run's (report.html but its generation time)
    full = _analyze(tmp_path / "full", base, address.replace("dask://", "tcp://"))
    assert full["kernels.csv"] == serial["kernels.csv"] and (tmp_path / "full" / "report.html").is_file()
    _analyze(tmp_path / "serial-full", base, "1")
    for name in ("summary.md", "top5_gemm_kernels_time_variance_with_collective_overlap.csv", "report.html"):
        got, want = ((d / name).read_text() for d in (tmp_path / "full", tmp_path / "serial-full"))
        assert _undated(got) == _undated(want), name


@needs_engine
def test_results_slower_to_arrive_than_a_poll_are_no_error(tmp_path, monkeypatch, address, inputs):
    """Waiting for a result has no deadline of its own while the scheduler answers: a task's
    run and its result's transfer (a source's full tables) may take longer than a check of the
    scheduler. Here every wait outlasts a check many times over; the bytes are the serial ones."""
    base, _, serial, _ = inputs
    monkeypatch.setattr(engine, "POLL_S", 0.002)
    full = _analyze(tmp_path / "full", base, address)
    assert full["kernels.csv"] == serial["kernels.csv"]


@needs_engine
def test_compare_on_the_cluster_writes_the_serial_verdicts(tmp_path, address, inputs):
    base, cand, _, verdicts = inputs
    assert _compare(tmp_path / "dask", base, cand, address) == verdicts


@needs_engine
def test_compare_with_reports_on_the_cluster_writes_the_serial_reports(tmp_path, address, inputs):
    """With its reports, compare's workers send back each source's report reduction beside its
    gate rows (``gate_inputs(reports=True)``): every report file is the serial run's."""
    base, cand, _, verdicts = inputs
    for name, jobs in (("dask", address), ("serial", "1")):
        assert main(["compare", str(base), str(cand), "--out", str(tmp_path / name), "--jobs", jobs]) == 1
    assert (tmp_path / "dask" / "verdicts.csv").read_bytes() == verdicts
    for name in ("summary.md", "kernels.csv", "top5_gemm_kernels_time_variance_with_collective_overlap.csv",
                 "report.html"):
        got, want = ((tmp_path / d / name).read_text() for d in ("dask", "serial"))
        assert _undated(got) == _undated(want), name


@needs_engine
def test_a_bad_input_read_on_a_worker_is_the_serial_line(tmp_path, address, capsys):
    root = write_inputs(tmp_path / "in", ranks=0, n=20)
    bad = root / "host2" / "5002_kernel_trace.csv"
    bad.write_text(bad.read_text().replace(",1550151853", ",-1550151853", 3))
    assert main(["analyze", str(root), "--no-report", "--out", str(tmp_path / "a"), "--jobs", "1"]) == 2
    serial = _one_line(capsys.readouterr().err)
    assert main(["analyze", str(root), "--no-report", "--out", str(tmp_path / "b"), "--jobs", address]) == 2
    assert _one_line(capsys.readouterr().err) == serial and str(bad) in serial


@needs_engine
def test_a_worker_running_other_code_is_refused(tmp_path, monkeypatch, address, capsys):
    root = write_inputs(tmp_path / "in", hosts=2, ranks=0, n=20)
    monkeypatch.setattr(engine, "code_fingerprint", lambda: "0.0.0+other")  # this process only
    assert main(["analyze", str(root), "--no-report", "--out", str(tmp_path / "o"), "--jobs", address]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "install the same version on every worker" in line and "this process 0.0.0+other" in line


@needs_engine
def test_relative_paths_and_settings_mean_what_they_mean_here(tmp_path, monkeypatch, address, capsys):
    """The workers started elsewhere (another directory, another environment): each task runs in
    this process's working directory with its ``GEMMPERF_*`` settings."""
    root = write_inputs(tmp_path / "in", hosts=2, ranks=1, n=20)
    monkeypatch.chdir(tmp_path)
    serial = _analyze(tmp_path / "s", Path("in"), "1", "--no-report")
    assert _analyze(tmp_path / "d", Path("in"), address, "--no-report") == serial
    trace = root / "torch" / "rank0.pt.trace.json"
    (tmp_path / "gz").mkdir()
    (tmp_path / "gz" / "rank0.pt.trace.json.gz").write_bytes(gzip.compress(trace.read_bytes()))
    monkeypatch.setenv("GEMMPERF_MAX_DECOMPRESSED_BYTES", "1000")  # a limit the trace exceeds
    capsys.readouterr()
    for jobs in ("1", address):
        assert main(["analyze", "gz", "--no-report", "--out", str(tmp_path / "o"), "--jobs", jobs]) == 2
    serial_line, dask_line = (ln for ln in capsys.readouterr().err.splitlines() if ln.strip())
    assert dask_line == serial_line and "GEMMPERF_MAX_DECOMPRESSED_BYTES" in serial_line


@needs_engine
def test_a_scheduler_that_stops_answering_mid_run_is_one_line_exit_2(tmp_path, monkeypatch, dask_cluster,
                                                                      address, capsys):
    """The scheduler answered the connection, then says nothing more once the tasks are
    submitted (stopped, or the network between went dark): ``distributed`` waits for its answers
    for ever; the command gives up when a request goes unanswered for its deadline."""
    import distributed

    cluster, _ = dask_cluster
    host, port = cluster.scheduler_address.removeprefix("tcp://").rsplit(":", 1)
    monkeypatch.setattr(engine, "ANSWER_TIMEOUT_S", 1.0, raising=False)  # fails, not errors, without one
    monkeypatch.setattr(engine, "POLL_S", 0.2)
    with relay((host, int(port))) as r:
        submit = distributed.Client.submit

        def submit_then_go_silent(self, *args, **kwargs):
            try:
                return submit(self, *args, **kwargs)
            finally:
                r.muted.set()

        monkeypatch.setattr(distributed.Client, "submit", submit_then_go_silent)
        addr, line = analyze_fails_in_time(tmp_path, capsys, r.port)
        assert r.muted.is_set()  # the silence began after the connection
    assert addr in line and "did not answer within 1 s" in line


# ---------------------------------------------------- dying workers (last: the nannies restart them)

@needs_engine
def test_a_worker_killed_mid_run_is_retried_to_the_same_bytes(tmp_path, dask_cluster, address, inputs):
    _, client = dask_cluster
    base, _, serial, _ = inputs
    marker = tmp_path / "killed"
    with worker_plugin(client, kill_worker_plugin(str(marker))):
        assert _analyze(tmp_path / "dask", base, address, "--no-report") == serial
    assert marker.exists()  # a worker did die, mid-run


@needs_engine
def test_workers_that_keep_dying_give_one_line_exit_2(tmp_path, dask_cluster, address, capsys):
    _, client = dask_cluster
    root = write_inputs(tmp_path / "in", hosts=2, ranks=0, n=10)
    with worker_plugin(client, kill_worker_plugin(None)):
        assert main(["analyze", str(root), "--no-report", "--out", str(tmp_path / "o"), "--jobs", address]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "Dask workers reading this died 2 time(s)" in line and str(root / "host0") in line
    assert not (tmp_path / "o" / "kernels.csv").exists()
