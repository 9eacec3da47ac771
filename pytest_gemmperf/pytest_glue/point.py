"""The ``gemmperf`` fixture's object: profile a test's sweep point and gate it.

A :class:`PointRunner` runs its point's workload ``repeats`` times in separate processes under
the session's backend, writes the results layout (``run/results.py``: logs, raw outputs, the
canonical tables, ``point.json``) and loads the tables back. What happens around and after a
run is done by collaborators it builds with explicit arguments: :class:`~.reruns.Reruns`
(contention, telemetry, confirmation re-runs) and :class:`~.gate_step.GateStep` (the comparison
with the baseline, ``assert_no_regression``).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.paths import remove_tree
from pytest_gemmperf.pytest_glue.gate_step import GateStep
from pytest_gemmperf.pytest_glue.history import HistorySink
from pytest_gemmperf.pytest_glue.options import Options
from pytest_gemmperf.pytest_glue.reporting import PROP_ENVIRONMENT, PointReporter, emit
from pytest_gemmperf.pytest_glue.reruns import Reruns, WorkloadCall
from pytest_gemmperf.pytest_glue.result import PointResult, _PointFailed, _PointSkipped
from pytest_gemmperf.pytest_glue.session import GemmperfSession
from pytest_gemmperf.redact import redact_argv, redact_command, redact_env, redact_text, secret_values
from pytest_gemmperf.run import rocprofv3
from pytest_gemmperf.run.backend import BackendChoice
from pytest_gemmperf.run.process import (WorkloadError, is_local_multinode, launch_argv, node_launch_argvs,
                                         split_launch)
from pytest_gemmperf.run.replay import ReplayMissing, replay_point
from pytest_gemmperf.run.results import (COMPLETE, FAILED, INTERRUPTED, POINT_JSON, item_test_id,
                                         write_point_json, write_tables)
from pytest_gemmperf.run.slurm_env import wrap_command
from pytest_gemmperf.run.torch_backend import load_rank_traces, read_trace, run_torch_nodes, run_torch_point
from pytest_gemmperf.store.hardware import hardware_key
from pytest_gemmperf.sweep import SweepPoint
from pytest_gemmperf.textsafe import printable_lines
from pytest_gemmperf.traces.discover import load, load_counters
from pytest_gemmperf.traces.schema import (AGENT_SCHEMA, COUNTER_SCHEMA, DISPATCH_SCHEMA, Trace, concat_tables,
                                           set_columns)

#: Inherited variables recorded in point.json besides those the point sets: the ones that change
#: performance (runtime, collective, BLAS, threading and allocator knobs) and the process layout.
#: An allow-list: the rest of a CI environment (tokens, keys, licences) is never recorded.
RECORDED_ENV_NAMES = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_MODULE_LOADING", "CUDA_CACHE_DISABLE", "CUBLAS_WORKSPACE_CONFIG", "NVIDIA_TF32_OVERRIDE",
    "AMD_SERIALIZE_KERNEL", "AMD_SERIALIZE_COPY", "AMD_DIRECT_DISPATCH", "AMD_LOG_LEVEL",
    "GPU_MAX_HW_QUEUES", "GPU_MAX_HEAP_SIZE", "GPU_MAX_ALLOC_PERCENT", "GPU_SINGLE_ALLOC_PERCENT",
    "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TORCH_BLAS_PREFER_HIPBLASLT", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "OPENBLAS_NUM_THREADS", "GOMP_CPU_AFFINITY",
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
})
#: Prefixes of whole families of performance knobs (each the namespace of one library).
RECORDED_ENV_PREFIXES = ("NCCL_", "RCCL_", "HSA_", "HIP_", "ROCR_", "HIPBLASLT_", "ROCBLAS_",
                         "TENSILE_", "MIOPEN_", "OMP_", "KMP_", "MKL_", "TORCH_NCCL_", "PYTORCH_TUNABLEOP_",
                         "TORCHINDUCTOR_", "UCX_", "FI_", "GEMMPERF_")

class GemmperfUsageError(Exception):
    """A test used the fixtures wrongly (bad arguments); shown as a one-line failure."""


def worker_index() -> int:
    """0 for a plain session, N for pytest-xdist worker ``gwN``."""
    wid = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(wid[2:]) if wid.startswith("gw") and wid[2:].isdigit() else 0


def gpu_binding(gpus_per_point: int, index: int | None = None) -> dict[str, str]:
    """Visible-device variables giving xdist worker ``index`` its own GPU set."""
    if gpus_per_point <= 0:
        return {}
    i = worker_index() if index is None else index
    devices = ",".join(str(d) for d in range(i * gpus_per_point, (i + 1) * gpus_per_point))
    return {"HIP_VISIBLE_DEVICES": devices, "CUDA_VISIBLE_DEVICES": devices}


def recorded_env(full_env: Mapping[str, str], set_by_us: Mapping[str, str]) -> dict[str, str]:
    """The environment point.json records: every variable the point set plus the allow-listed
    inherited ones, secret-named values redacted (redact.py)."""
    keep = {k: v for k, v in full_env.items()
            if k in RECORDED_ENV_NAMES or k.startswith(RECORDED_ENV_PREFIXES)}
    keep.update(set_by_us)
    return redact_env(dict(sorted(keep.items())))


def _foreign_point_dir(point_dir: Path, nodeid: str) -> str:
    """Why ``point_dir`` must not be replaced by ``nodeid`` (empty when it may): another item
    wrote it (two ids that sanitize alike), so its outputs are that item's, not a stale run of
    this one."""
    try:
        owner = json.loads((point_dir / POINT_JSON).read_text(encoding="utf-8")).get("nodeid")
    except (OSError, ValueError, AttributeError):
        return ""
    if isinstance(owner, str) and owner != nodeid:
        return (f"{point_dir} already holds the results of {owner}, which maps to the same results "
                "folder (rename one of the two tests)")
    return ""


class PointRunner:
    """The ``gemmperf`` fixture: profile this test's sweep point (:meth:`profile`) and gate it
    (:meth:`assert_no_regression`)."""

    def __init__(self, session: GemmperfSession, point: SweepPoint, nodeid: str,
                 record_property=None, progress=None) -> None:
        self.session = session
        self.point = point
        self.nodeid = nodeid
        #: the test this item belongs to: its node id without the sweep point (run/results.py)
        self.test_id = item_test_id(nodeid, point.id)
        #: test-report properties and the plugin's progress lines (progress.py); no-ops when None
        self.reporter = PointReporter.of(record_property, progress)
        self._call: dict[str, Any] | None = None  # the last profile() call, for re-runs
        #: secret values of the last profile() call's environment, redacted wherever recorded
        self._secrets: tuple[str, ...] = ()
        self._check_dir()

    # -- collaborators, built on first use (the backend is chosen when a point first needs it)
    @functools.cached_property
    def reruns(self) -> Reruns:
        return Reruns(test_id=self.test_id, point=self.point, results=self.session.results,
                      options=self.options, backend=self.backend, reporter=self.reporter,
                      execute=self._execute)

    @functools.cached_property
    def gate(self) -> GateStep:
        s = self.session
        history = (HistorySink(s.history, metadata=s.metadata, results_root=s.results.root,
                               record=self.reporter.record) if s.history is not None else None)
        return GateStep(test_id=self.test_id, point=self.point, results=s.results, options=self.options,
                        store=s.baseline_store(), reporter=self.reporter, reruns=self.reruns,
                        history=history, metadata=s.metadata)

    @property
    def messages(self) -> list[str]:
        """The lines the gate step showed (a recorded baseline's)."""
        return self.gate.messages

    # -- facts a test may want
    @property
    def options(self) -> Options:
        return self.session.options

    @property
    def backend(self) -> BackendChoice:
        return self.session.backend

    @property
    def device(self) -> str:
        """``rocm``, ``cuda`` or ``cpu``: what the workload should run on."""
        return self.backend.device

    @property
    def dir(self) -> Path:
        return self.session.results.point_dir(self.test_id, self.point.id)

    def _dir_problem(self) -> GemmperfInputError | None:
        """Why this point cannot write its directory, or None. Only a directory this session
        made (an earlier try of the same item) may be replaced: an earlier session's results
        in a reused --gemmperf-results-dir, or anything planted there, are never deleted."""
        try:
            point_dir = self.dir
        except GemmperfInputError as exc:
            return exc
        if os.path.lexists(point_dir) and point_dir not in self.session.created_points:
            return GemmperfInputError(point_dir, "exists and was not made by this session; refusing to "
                                                 "replace it (use a fresh --gemmperf-results-dir or move it away)")
        return None

    def _check_dir(self) -> None:
        """Fail the item's set-up with one line when its directory cannot be written."""
        problem = self._dir_problem()
        if problem is not None:
            pytest.fail(printable_lines(f"gemmperf: {self.nodeid}: {problem}"), pytrace=False)

    def _fresh_dir(self) -> Path:
        """This point's directory, empty and made by this session (see :meth:`_dir_problem`)."""
        self._check_dir()
        self.session.results.claim_test_dir(self.test_id)
        point_dir = self.dir
        root = self.session.results.root
        if os.path.lexists(point_dir):  # an earlier try of this item in this session
            clash = _foreign_point_dir(point_dir, self.nodeid)
            if clash:
                pytest.fail(printable_lines(f"gemmperf: {self.test_id}[{self.point.id}]: {clash}"), pytrace=False)
            remove_tree(root, *point_dir.relative_to(root).parts)
        point_dir.mkdir(parents=True)
        self.session.created_points.add(point_dir)
        return self.dir  # checked again: a link planted while the directories were made is refused

    def env(self, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
        """Variables this point sets: axes, base env, GPU binding, then ``extra``."""
        env = dict(self.point.env)
        env.update(gpu_binding(self.options.gpus_per_point))
        env.update({k: str(v) for k, v in (extra or {}).items()})
        return env

    # -- profiling
    def profile(self, command: str | Sequence[str], *, launcher: str | Sequence[str] | None = None,
                nproc: int = 1, nnodes: int = 1, launcher_args: Sequence[str] = (),
                counters: Sequence[str] = (),
                repeats: int | None = None, timeout_s: float | None = None,
                env: Mapping[str, Any] | None = None, cwd: str | os.PathLike | None = None) -> PointResult:
        """Run the workload ``repeats`` times under the session's profiler backend.

        ``command`` is the workload (string or argv; ``{output_dir}``/``{trace_dir}`` are
        replaced per repeat); ``launcher`` is ``torchrun``, ``srun``, ``mpirun``, a full launcher
        command line, or None. ``counters`` are collected in separate rocprofv3 passes (ignored by
        the torch backend). ``launcher_args`` go to a named launcher (``["--standalone"]`` for
        torchrun). Fails the test with the log tail when the workload fails.
        """
        auto = None
        if repeats is None and self.options.repeats_auto:
            # lazy: only --gemmperf-repeats auto loads the statistics before the workload runs
            from pytest_gemmperf.pytest_glue.plan import planned_repeats

            auto = planned_repeats(self.session, self.test_id, self.point.id, self.device)
            repeats = auto.repeats
        repeats = int(repeats or self.options.repeats)
        timeout_s = float(self.options.timeout_s if timeout_s is None else timeout_s)
        if repeats < 1:
            raise GemmperfUsageError(f"repeats must be >= 1, got {repeats}")
        if not (0 < timeout_s < float("inf")):  # NaN too: no run could ever meet it
            raise GemmperfUsageError(f"timeout_s must be > 0 seconds, got {timeout_s:g}")
        results = self.session.ensure_results()
        point_dir = self._fresh_dir()
        env_set = self.env(env)
        full_env = {**os.environ, **env_set}
        # what is recorded is redacted; the workload gets full_env as it is
        self._secrets = secret_values(full_env)
        backend = self.backend
        record: dict[str, Any] = {
            "test_id": self.test_id, "nodeid": self.nodeid, "point": self.point.id,
            "axes": self.point.values, "kernels": list(self.point.kernels),
            "env": recorded_env(full_env, env_set), "env_set": redact_env(env_set),
            "command": redact_command(command if isinstance(command, str) else list(command), self._secrets),
            "launcher": redact_command(launcher if launcher is None or isinstance(launcher, str)
                                       else list(launcher), self._secrets),
            "nproc": nproc, "nnodes": nnodes, "launcher_args": redact_argv(launcher_args, self._secrets),
            "backend": backend.name, "device": backend.device,
            "counters": list(counters), "repeats": repeats, "timeout_s": timeout_s,
            "cwd": str(cwd) if cwd else os.getcwd(), "status": "running", "runs": [],
            "xdist_worker": os.environ.get("PYTEST_XDIST_WORKER"),
        }
        if auto is not None:
            record["repeats_auto"] = auto.note
        write_point_json(point_dir, record)
        self._call = dict(command=command, launcher=launcher, nproc=nproc, nnodes=nnodes,
                          launcher_args=launcher_args, counters=counters, repeats=repeats,
                          timeout_s=timeout_s, full_env=full_env, env_set=env_set, cwd=cwd)
        self.reruns.remember(WorkloadCall(repeats=repeats, full_env=full_env, secrets=self._secrets,
                                          record=record))
        self.reporter.progress("point_start", repeats=repeats, backend=backend.name,
                       counter_passes=_expected_passes(backend.name, counters),
                       note=auto.note if auto is not None else "")
        monitor = self.reruns.monitor()
        sampler = self.reruns.sampler(full_env)
        try:
            with monitor, sampler:
                trace, argv = self._execute(record, 0)
        except _PointSkipped as exc:
            record["status"] = "skipped"
            record["error"] = redact_text(str(exc), self._secrets)
            write_point_json(point_dir, record)
            pytest.skip(printable_lines(f"gemmperf: {record['error']}"))
        except _PointFailed as exc:
            record["status"] = FAILED
            record["failure"] = exc.status
            record["error"] = redact_text(exc.message, self._secrets)
            # a failed or timed-out point keeps its telemetry: was the box healthy?
            self.reruns.store_telemetry(sampler, record, {}, round_no=0)
            write_point_json(point_dir, record)
            pytest.fail(printable_lines(f"gemmperf: {self.test_id}[{self.point.id}]: {record['error']}"), pytrace=False)
        except Exception as exc:
            record["status"] = FAILED
            record["failure"] = "error"
            record["error"] = redact_text(str(exc), self._secrets)
            write_point_json(point_dir, record)
            if isinstance(exc, (GemmperfInputError, GemmperfUsageError, ValueError)):
                pytest.fail(printable_lines(f"gemmperf: {self.test_id}[{self.point.id}]: {record['error']}"), pytrace=False)
            raise
        except BaseException as exc:
            # Ctrl-C or a stop while the workload ran: readers must not take this point's
            # partial runs for a finished point (kill -9 leaves "running", read the same way)
            record["status"] = (FAILED if isinstance(exc, pytest.fail.Exception) else
                                "skipped" if isinstance(exc, pytest.skip.Exception) else INTERRUPTED)
            _mark_processes(record)
            write_point_json(point_dir, record)
            raise
        record["resolved_command"] = redact_argv(argv, self._secrets)
        self.reruns.store_telemetry(sampler, record, monitor.evidence, round_no=0, dispatches=trace.dispatches)
        record["environment"] = monitor.evidence
        disturbance = self.reruns.assess(monitor.evidence)
        record["disturbance"] = disturbance.as_dict()
        if disturbance.disturbed:
            emit(f"gemmperf: {self.test_id}[{self.point.id}]: {disturbance.text}")
            self.reporter.record(PROP_ENVIRONMENT, disturbance.text)
        hw_key = _hardware_key(trace.agents)
        tables = {"dispatches": trace.dispatches, "counters": trace.counters, "agents": trace.agents}
        write_tables(point_dir, tables)
        record["status"] = COMPLETE
        _mark_processes(record)
        record["hardware_key"] = hw_key
        record["dispatches"] = int(len(trace.dispatches))
        write_point_json(point_dir, record)
        results.update_run_json(hardware_key=hw_key)
        return PointResult(test_id=self.test_id, point=self.point, dir=point_dir, backend=backend,
                           dispatches=trace.dispatches, counters=trace.counters, agents=trace.agents,
                           env=record["env"], command=record["resolved_command"], runs=record["runs"],
                           hw_key=hw_key,
                           environment=monitor.evidence)

    def assert_no_regression(self, result: PointResult, *, threshold: float | str | None = None,
                             warmup: int | None = None) -> pd.DataFrame:
        """Compare ``result`` with the stored baseline of this test and point.

        No baseline yet (or ``--gemmperf-update-baselines``): record one and pass. Otherwise fail
        on a regression with the compact verdict table (unless ``--gemmperf-warn-only``). Returns
        the verdicts table (empty when a baseline was recorded). The steps: ``gate_step.py``.
        """
        return self.gate.run(result, threshold=threshold, warmup=warmup)

    def rerun(self, result: PointResult, round_no: int) -> tuple[PointResult, dict[str, Any]] | None:
        """Profile ``repeats`` more processes of this point (:meth:`Reruns.rerun`)."""
        return self.reruns.rerun(result, round_no)

    def _execute(self, record: dict[str, Any], first_run: int) -> tuple[Trace, list[str]]:
        """Run ``repeats`` processes of the last ``profile()`` call, numbered from ``first_run``."""
        c = self._call
        backend = self.backend
        if backend.name == "torch":
            return self._run_torch(c["command"], c["launcher"], c["nproc"], c["nnodes"], c["launcher_args"],
                                   c["repeats"], c["timeout_s"], c["full_env"], c["cwd"], record,
                                   first_run=first_run)
        if backend.name == "rocprofv3":
            # a confirmation round writes its own rocprofv3 tree and skips the counter passes
            out = self.dir if first_run == 0 else self.dir / f"confirm{first_run}"
            return self._run_rocprofv3(c["command"], c["launcher"], c["nproc"], c["nnodes"],
                                       c["launcher_args"], c["counters"] if first_run == 0 else (),
                                       c["repeats"], c["timeout_s"], c["full_env"], c["env_set"],
                                       c["cwd"], record, out_dir=out, run_offset=first_run)
        if first_run:
            raise _PointSkipped("the replay backend cannot re-run a point")
        return self._run_replay(record)

    def _run_torch(self, command, launcher, nproc, nnodes, launcher_args, repeats, timeout_s,
                   full_env, cwd, record, first_run: int = 0):
        # torchrun with nnodes > 1: one node agent per node on this machine (run/torch_backend.py)
        multinode = is_local_multinode(launcher, nnodes)
        if isinstance(launcher, str) and launcher.strip().lower() == "srun":
            command = wrap_command(command)  # srun tasks get RANK/WORLD_SIZE/MASTER_ADDR from SLURM's
        argv = (node_launch_argvs(command, nproc, nnodes, launcher_args)[0] if multinode
                else launch_argv(command, launcher, nproc=nproc, nnodes=nnodes, extra=launcher_args))
        device = self.backend.device
        traces = []
        for k in range(first_run, first_run + repeats):
            self.reporter.progress("run_start", run=k - first_run, total=repeats, round=first_run // repeats)
            with self.reruns.process_window(k):
                if multinode:  # a fresh rendezvous port per repeat
                    nodes = node_launch_argvs(command, nproc, nnodes, launcher_args)
                    record["node_commands"] = redact_command(nodes, self._secrets)
                    run = run_torch_nodes(nodes, env=full_env, run_dir=self.dir / f"run{k}", run=k,
                                          device=device, timeout_s=timeout_s, cwd=cwd,
                                          world_size=nproc * nnodes)
                else:
                    run = run_torch_point(argv, env=full_env, run_dir=self.dir / f"run{k}", run=k,
                                          device=device, timeout_s=timeout_s, cwd=cwd)
            self.reporter.progress("run_end", run=k - first_run, total=repeats, round=first_run // repeats,
                           duration_s=run.duration_s, ok=run.returncode == 0 and not run.timed_out)
            entry = {"run": k, "returncode": run.returncode, "duration_s": round(run.duration_s, 3),
                     "timed_out": run.timed_out, "log": _rel(run.log, self.dir),
                     "files": {("none" if r is None else str(r)): [_rel(p, self.dir) for p in ps]
                               for r, ps in run.files.items()}}
            if run.node_logs:
                entry["nodes"] = [{"node": n, "log": _rel(log, self.dir), "ranks": run.node_ranks.get(n, [])}
                                  for n, log in enumerate(run.node_logs)]
                entry["missing_ranks"] = run.missing_ranks
            record["runs"].append(entry)
            write_point_json(self.dir, record)
            if run.timed_out:
                raise _PointFailed("timeout", f"run {k} timed out after {timeout_s:.0f} s "
                                              f"(log {run.log})\n{run.tail}")
            if run.returncode != 0:
                raise _PointFailed("failed", f"run {k} exited with status {run.returncode} "
                                             f"(log {run.log})\n{run.tail}")
            if not run.files:
                raise _PointFailed("failed", f"run {k} wrote no PyTorch profiler traces under "
                                             f"{self.dir / f'run{k}' / 'raw' / 'torch_profiler'} "
                                             "(the workload must honour $GEMMPERF_TRACE_DIR or "
                                             "{trace_dir}/{output_dir})")
            traces.append(load_rank_traces(run.files, point=self.point.id, run=k,
                                           reader=lambda p: read_trace(p, device)))
        trace = Trace(dispatches=concat_tables([t.dispatches for t in traces], DISPATCH_SCHEMA),
                      counters=concat_tables([t.counters for t in traces], COUNTER_SCHEMA),
                      agents=concat_tables([t.agents for t in traces], AGENT_SCHEMA),
                      files=[f for t in traces for f in t.files])
        return trace, argv

    def _run_rocprofv3(self, command, launcher, nproc, nnodes, launcher_args, counters, repeats,
                       timeout_s, full_env, env_set, cwd, record, out_dir: Path | None = None,
                       run_offset: int = 0):
        # srun/mpirun wrap rocprofv3 (each rank profiled); torchrun runs inside it
        outer, inner = split_launch(command, launcher, nproc=nproc, nnodes=nnodes, extra=launcher_args)
        try:
            out_dir = out_dir or self.dir
            res = rocprofv3.profile_point(env_set, inner, out_dir, counters=list(counters),
                                          kernel_regexes=list(self.point.kernels), repeats=repeats,
                                          timeout_s=timeout_s, exe=self.options.rocprofv3,
                                          launcher_prefix=outer, env=full_env, cwd=cwd,
                                          progress=functools.partial(self.reporter.progress,
                                                                     round=run_offset // repeats))
        except WorkloadError as exc:
            timed_out = exc.result is not None and exc.result.timed_out
            raise _PointFailed("timeout" if timed_out else "failed", str(exc)) from None
        except rocprofv3.ProfilerError as exc:
            raise _PointFailed("error", str(exc)) from None
        disp, agents = [], []
        for run in res.runs:
            record["runs"].append({"run": run.run + run_offset, "returncode": run.result.returncode,
                                   "duration_s": round(run.result.duration_s, 3),
                                   "timed_out": run.result.timed_out,
                                   "log": _rel(run.result.log_path, self.dir),
                                   "files": {"all": [_rel(f, self.dir) for f in run.files]}})
            t = load([run.raw_dir], point=self.point.id, jobs=self.options.jobs)
            disp.append(set_columns(t.dispatches, run=run.run + run_offset))
            agents.append(t.agents)
        ctrs = []
        if counters and out_dir == self.dir and res.counters_skipped is None and res.counter_result is not None:
            ctrs.append(load_counters([self.dir / "counters" / "raw"], point=self.point.id))
        record["rocprofv3_version"] = str(getattr(res.version, "text", None) or res.version)
        record["counter_groups"] = res.counter_groups
        if res.counters_skipped:
            record["counters_skipped"] = res.counters_skipped
        trace = Trace(dispatches=concat_tables(disp, DISPATCH_SCHEMA),
                      counters=concat_tables(ctrs, COUNTER_SCHEMA),
                      agents=concat_tables(agents, AGENT_SCHEMA))
        return trace, [*outer, *inner]

    def _run_replay(self, record):
        try:
            res = replay_point(self.options.replay_dir, self.point.id, test_id=self.test_id)
        except ReplayMissing as exc:
            raise _PointSkipped(str(exc)) from None
        if res.layout == "results":
            # a stored point: read its tables once (ReplayResult.load() lists the three parquet
            # files, and discovery reads the whole table set for each of them)

            trace = load([res.directory], jobs=self.options.jobs)
        else:
            trace = res.load()
        trace.dispatches = set_columns(trace.dispatches, point=self.point.id)
        if len(trace.counters):
            trace.counters = set_columns(trace.counters, point=self.point.id)
        record["replay_dir"] = str(self.options.replay_dir)
        record["replay"] = {"layout": res.layout, "stored_point": res.stored_point,
                            "directory": str(res.directory), "files": [str(f) for f in res.files]}
        return trace, []


# ---------------------------------------------------------------------------------- helpers

def _mark_processes(record: dict[str, Any]) -> None:
    """``processes_complete``: the runs (processes) whose workload ended well, by run number."""
    record["processes_complete"] = [r.get("run") for r in record.get("runs", [])
                                    if isinstance(r, dict) and r.get("returncode") == 0
                                    and not r.get("timed_out")]


def _expected_passes(backend: str, counters: Sequence[str]) -> int:
    """Counter passes a rocprofv3 point will likely run (the ETA's guess; the real grouping
    comes later): at most 8 counters share a pass (``profile_point``'s default)."""
    return -(-len(counters) // 8) if backend == "rocprofv3" and counters else 0


def _hardware_key(agents: pd.DataFrame) -> str:
    return hardware_key(agents if agents is not None and len(agents) else None)


def _rel(path: Path, base: Path) -> str:
    try:
        return str(Path(path).relative_to(base))
    except ValueError:
        return str(path)
