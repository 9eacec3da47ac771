"""rocprofv3 backend: runs the passes of one point and checks what they wrote.

Version detection, command lines, job files and the environment rules are in
:mod:`pytest_gemmperf.run.rocprofv3_cli` (re-exported here). Rules (rocprofv3-cli.md): timing runs use ``--kernel-trace`` only (counters serialize
dispatches, §9) with an explicit output format (7.x defaults to rocpd, formats §1.5); counters
run in separate passes from an ``--input`` file (``metrics:`` for 6.2, ``jobs:`` from 6.3, §3);
the exit status does not prove counters were collected, so every pass is checked for its files
and counter names (§6.1); everything runs under a timeout with the process group killed.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from .process import ProcessResult, WorkloadError, require_success, run_process
from .rocprofv3_cli import (  # noqa: F401  (re-exported: the backend's public names)
    MPI_RANK_PREFIX, RANK_PREFIX, RANK_SHIM, SDK_TO_ROCM, _VERSION_RE, CounterConfigError, PmcCheck,
    ProfilerError, ProfilerSetupError, RocprofVersion, anchored_regex, check_ecma_regex,
    counter_groups, counter_pass_argv, default_prefix, detect_version, ecma_escape,
    explain_frontend_error, job_file, kernel_include_regex, parse_version_output, pmc_checker,
    profiler_env, timing_pass_argv, truncated_names, validate_job_file)
from pytest_gemmperf.safe_io import write_text
import yaml
import pandas as pd

# --- errors -------------------------------------------------------------------------------------


class ProfilerOutputError(ProfilerError):
    """A pass did not produce what was asked for. ``str()`` includes the telling log lines."""

    def __init__(self, message: str, log_path: str | os.PathLike | None = None,
                 log_lines: Sequence[str] | None = None) -> None:
        self.message = message
        self.log_path = None if log_path is None else Path(log_path)
        if log_lines is None and self.log_path is not None:
            log_lines = relevant_log_lines(self.log_path)
        self.log_lines = list(log_lines or [])
        text = message
        if self.log_path is not None:
            text += f"\nrocprofv3 log: {self.log_path}"
        if self.log_lines:
            text += "\n" + "\n".join(f"  | {line}" for line in self.log_lines)
        super().__init__(text)


class CountersUnavailable(ProfilerError):
    """This GPU/stack cannot read counters: counter passes are skipped, timing still gates."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def write_job_file(job: Mapping, path: str | os.PathLike) -> Path:
    """Write a job file; ``.json`` (no PyYAML needed by rocprofv3) or ``.yaml``/``.yml``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    if path.suffix == ".json":
        write_text(path, json.dumps(job, indent=2) + "\n")
    elif path.suffix in (".yaml", ".yml"):
        write_text(path, yaml.safe_dump(dict(job), sort_keys=False))
    else:
        raise ValueError(f"{path}: job files must end in .json, .yaml or .yml")
    return path


# --- output checks ------------------------------------------------------------------------------

_LOG_RE = re.compile(r"counter|aqlprofile|exceeds|not supported|unable to find|fatal error|"
                     r"sigabrt|could not construct|hsa_iterate_agents|not collected|"
                     r"invalid counter|pmc|no tracing options|returned non-zero|died with|"
                     r"could not be locked", re.IGNORECASE)

_UNAVAILABLE_RE = re.compile(r"aqlprofile|GFXIP is not supported|"
                             r"Agent HW architecture is not supported|"
                             r"Error Calling hsa_iterate_agents", re.IGNORECASE)

#: Consumer RDNA parts where rocprofv3 counter collection aborts inside aqlprofile
#: (ROCm/legacy-rocm-build issue #5951, ROCm/rocm-systems issue #2169).
COUNTERLESS_ARCHS = frozenset({"gfx1150", "gfx1151", "gfx1152"})


def relevant_log_lines(log_path: str | os.PathLike, max_lines: int = 20) -> list[str]:
    """Lines of a rocprofv3 log that explain missing counters or failed passes."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return []
    # "$ ..." is run_process's own command echo, which names the counters folder
    lines = [ln.rstrip() for ln in text.splitlines()
             if _LOG_RE.search(ln) and not ln.startswith("$ ")]
    return lines[-max_lines:]


def counters_unavailable_reason(log_path: str | os.PathLike | None = None,
                                gpu_archs: Iterable[str] = ()) -> str | None:
    """Why counters cannot be read here, or None."""
    archs = sorted(set(gpu_archs) & COUNTERLESS_ARCHS)
    if archs:
        return (f"rocprofv3 cannot read hardware counters on {', '.join(archs)} (consumer RDNA; "
                "aqlprofile aborts); counter passes skipped, timing still gated")
    if log_path is not None:
        try:
            text = Path(log_path).read_text(errors="replace")
        except OSError:
            return None
        hits = [ln.strip() for ln in text.splitlines() if _UNAVAILABLE_RE.search(ln)]
        if hits:
            return f"rocprofv3 cannot read hardware counters on this GPU: {hits[0]}"
    return None


def gpu_archs(paths: Iterable[Path]) -> set[str]:
    """gfx names of the GPU agents in ``*_agent_info.csv`` files."""
    archs: set[str] = set()
    for p in paths:
        if not p.name.endswith("_agent_info.csv"):
            continue
        try:
            df = pd.read_csv(p, usecols=["Agent_Type", "Name"], dtype=str)
        except (OSError, ValueError):
            continue
        archs.update(df.loc[df["Agent_Type"] == "GPU", "Name"].dropna().tolist())
    return archs


_KERNEL_TRACE_HEAD = '"Kind","Agent_Id"'


def check_timing_output(out_dir: str | os.PathLike, formats: Sequence[str] = ("csv", "json"),
                        log_path: str | os.PathLike | None = None) -> list[Path]:
    """Files of a timing pass; raises ``ProfilerOutputError`` when a requested kind is missing."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise ProfilerOutputError(f"timing pass wrote nothing: {out_dir} does not exist", log_path)
    files: list[Path] = []
    fmts = {f.lower() for f in formats}
    if "csv" in fmts:
        traces = sorted(out_dir.rglob("*_kernel_trace.csv"))
        if not traces:
            raise ProfilerOutputError(
                f"timing pass: no *_kernel_trace.csv under {out_dir} (rocprofv3 writes none when "
                "no kernel was dispatched, or the tool was not loaded)", log_path)
        for t in traces:
            with open(t, errors="replace") as fh:
                head = fh.readline()
                first = fh.readline()
            if not head.startswith(_KERNEL_TRACE_HEAD) or not first.strip():
                raise ProfilerOutputError(f"{t}: not a rocprofv3 kernel trace (header {head[:60]!r}"
                                          f"{'' if first.strip() else ', no rows'})", log_path)
        files += traces + sorted(out_dir.rglob("*_agent_info.csv"))
        files += sorted(out_dir.rglob("*_kernel_stats.csv"))
    for fmt, pattern in (("json", "*_results.json"), ("rocpd", "*_results.db"),
                         ("pftrace", "*_results.pftrace")):
        if fmt in fmts:
            found = sorted(out_dir.rglob(pattern))
            if not found:
                raise ProfilerOutputError(f"timing pass: no {pattern} under {out_dir}", log_path)
            files += found
    return files


@dataclass
class CounterCheck:
    """Counter files per pass (1-based) and counters that were zero on every dispatch."""

    files: dict[int, list[Path]] = field(default_factory=dict)
    zero_counters: list[str] = field(default_factory=list)

    @property
    def all_files(self) -> list[Path]:
        return [f for fs in self.files.values() for f in fs]


def _bare(counter: str) -> str:
    return counter.split(":", 1)[0]   # NAME:device=N


def check_counter_output(out_dir: str | os.PathLike, groups: Sequence[Sequence[str]],
                         log_path: str | os.PathLike | None = None) -> CounterCheck:
    """Pass N must hold ``*_counter_collection.csv`` with every counter of group N, and the pass
    must not be all zero. Raises ``CountersUnavailable`` when the log says the GPU cannot read
    counters, else ``ProfilerOutputError`` with the log lines that explain it."""
    out_dir = Path(out_dir)
    result = CounterCheck()

    def fail(message: str) -> None:
        reason = counters_unavailable_reason(log_path)
        if reason:
            raise CountersUnavailable(reason)
        raise ProfilerOutputError(message, log_path)

    for i, group in enumerate(groups, start=1):
        wanted = [_bare(c) for c in group]
        label = f"counter pass {i} ({', '.join(wanted)})"
        dirs = [d for d in (out_dir / f"pass_{i}", out_dir / f"pmc_{i}") if d.is_dir()]
        files = sorted(f for d in dirs for f in d.rglob("*_counter_collection.csv"))
        if not files:
            where = dirs[0] if dirs else out_dir / f"pass_{i}"
            fail(f"{label}: no *_counter_collection.csv in {where}")
        frames = []
        for f in files:
            try:
                frames.append(pd.read_csv(f, usecols=["Counter_Name", "Counter_Value"],
                                          dtype={"Counter_Name": str}))
            except (ValueError, OSError, pd.errors.ParserError) as exc:
                raise ProfilerOutputError(f"{f}: unreadable counter file: {exc}", log_path) from None
        df = pd.concat(frames, ignore_index=True)
        values = pd.to_numeric(df["Counter_Value"], errors="coerce").abs()
        totals = values.groupby(df["Counter_Name"]).sum()
        missing = [c for c in wanted if c not in totals.index]
        if missing:
            fail(f"{label}: counters missing from {len(files)} counter file(s): "
                 f"{', '.join(missing)} (found: {', '.join(map(str, totals.index)) or 'none'})")
        zeros = [c for c in wanted if totals[c] == 0]
        if len(zeros) == len(wanted):
            fail(f"{label}: every counter is zero on every dispatch ({len(df)} rows) - counters "
                 "were not really read (stable power state? permissions?)")
        result.files[i] = files
        result.zero_counters += zeros
    return result


# --- one point ----------------------------------------------------------------------------------

@dataclass
class RunRecord:
    """One timing repeat: its process result, raw output folder and files."""

    run: int
    result: ProcessResult
    raw_dir: Path
    files: list[Path]


@dataclass
class ProfileResult:
    version: RocprofVersion
    runs: list[RunRecord]
    counter_groups: list[list[str]] = field(default_factory=list)
    counter_check: CounterCheck | None = None
    counter_result: ProcessResult | None = None
    counters_skipped: str | None = None
    job_path: Path | None = None
    #: inherited ROCPROF_* variables removed before running (profiler_env)
    dropped_env: list[str] = field(default_factory=list)

    @property
    def timing_files(self) -> list[Path]:
        return [f for r in self.runs for f in r.files]


def profile_point(point_env: Mapping[str, str], workload_argv: Sequence[str],
                  out_dir: str | os.PathLike, counters: Sequence[str] = (),
                  kernel_regexes: Sequence[str] = (), repeats: int = 1,
                  timeout_s: float | None = 600.0, exe: str = "rocprofv3", *,
                  launcher_prefix: Sequence[str] = (), version: RocprofVersion | None = None,
                  formats: Sequence[str] = ("csv", "json"), env: Mapping[str, str] | None = None,
                  cwd: str | os.PathLike | None = None, grace_s: float = 5.0,
                  max_counters_per_pass: int = 8, avail_exe: str = "rocprofv3-avail",
                  tail_lines: int = 40, kernel_names: Sequence[str] = (),
                  job_path: str | os.PathLike | None = None,
                  progress: Callable[..., None] | None = None) -> ProfileResult:
    """Profile one sweep point: ``repeats`` timing runs (separate processes, each into
    ``run<k>/raw`` with ``run<k>/logs/rocprofv3.log``), then counter passes into
    ``counters/raw`` (log ``counters/logs/rocprofv3.log``).

    ``launcher_prefix`` goes outside rocprofv3 (srun/mpirun), with :data:`RANK_SHIM` between
    them so files are named by the launcher's real rank; torchrun belongs in ``workload_argv``.
    Counter passes are restricted to ``kernel_regexes`` (from 6.3) and the exact
    ``kernel_names`` (6.2: ``--kernel-names``); ``job_path`` runs a user's own job file instead
    of generated groups, after :func:`validate_job_file` (one-line ``GemmperfInputError``).
    Inherited ``ROCPROF_*`` variables are removed (``ProfileResult.dropped_env``); a point
    setting one is a ``ProfilerSetupError``. Raises ``WorkloadError`` (workload failed or hung;
    the log tail is in the message), ``ProfilerOutputError`` (a pass lacks its files/counters);
    a GPU that cannot read counters gives ``counters_skipped`` instead of an error.
    ``progress(event, **fields)``, when given, hears ``run_start``/``run_end`` (run, total,
    duration_s, ok) of each timing run and ``passes_start``/``passes_end`` (groups) of the
    counter passes (the pytest plugin's progress lines; see ``pytest_gemmperf/pytest_glue/progress.py``).
    """
    progress = progress or (lambda event, **fields: None)
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    owned = sorted(k for k in point_env if profiler_env({k: ""})[1])
    if owned:
        raise ProfilerSetupError(f"the point sets {', '.join(owned)}: rocprofv3's variables are "
                                 "set by the runner (it would append to or override them)")
    base_env, dropped = profiler_env(os.environ if env is None else env)
    base_env.update({str(k): str(v) for k, v in point_env.items()})
    version = version or detect_version(exe, base_env)
    launcher = [*launcher_prefix, *RANK_SHIM] if launcher_prefix else []
    prefix = MPI_RANK_PREFIX if launcher_prefix else RANK_PREFIX
    out_dir = Path(out_dir)
    user_groups = None
    if job_path is not None:    # a user's own job: refuse it before anything runs
        cli = {"output_directory": os.fspath(out_dir / "counters" / "raw"), "output_file": prefix}
        user_groups = validate_job_file(version, job_path, cli=cli)
    runs: list[RunRecord] = []
    for k in range(repeats):
        raw = out_dir / f"run{k}" / "raw"
        log = out_dir / f"run{k}" / "logs" / "rocprofv3.log"
        raw.mkdir(parents=True, exist_ok=True)
        argv = [*launcher, *timing_pass_argv(version, raw, workload_argv, formats, exe=exe,
                                             output_prefix=prefix)]
        progress("run_start", run=k, total=repeats)
        res = run_process(argv, env=base_env, cwd=cwd, timeout_s=timeout_s, log_path=log,
                          grace_s=grace_s)
        progress("run_end", run=k, total=repeats, duration_s=res.duration_s,
                 ok=res.ok)
        require_success(res, f"timing run {k} (rocprofv3 --kernel-trace)", tail_lines)
        runs.append(RunRecord(k, res, raw, check_timing_output(raw, formats, log)))
    result = ProfileResult(version=version, runs=runs, dropped_env=dropped)
    if not counters and job_path is None:
        return result

    reason = counters_unavailable_reason(None, gpu_archs(runs[0].files))
    if reason:
        result.counters_skipped = reason
        return result
    cdir = out_dir / "counters"
    raw = cdir / "raw"
    if user_groups is not None:
        groups, job_path = user_groups, Path(job_path)
    else:
        # pmc-check arrived with 7.0 (cli §7); an older rocprofv3 next to a newer avail lies
        checker = pmc_checker(avail_exe, base_env) if version.at_least(7, 0) else None
        groups = counter_groups(counters, max_counters_per_pass, checker)
        job_path = write_job_file(job_file(version, groups, kernel_regexes, ("csv",),
                                           kernel_names=kernel_names), cdir / "job.json")
    log = cdir / "logs" / "rocprofv3.log"
    raw.mkdir(parents=True, exist_ok=True)
    argv = [*launcher,
            *counter_pass_argv(version, raw, job_path, workload_argv, ("csv",), exe=exe,
                               output_prefix=prefix, kernel_names=kernel_names)]
    # the application re-runs once per pass
    budget = None if timeout_s is None else timeout_s * len(groups)
    progress("passes_start", groups=len(groups))
    res = run_process(argv, env=base_env, cwd=cwd, timeout_s=budget, log_path=log, grace_s=grace_s)
    progress("passes_end", groups=len(groups), duration_s=res.duration_s,
             ok=res.ok)
    result.counter_groups, result.job_path, result.counter_result = groups, job_path, res
    if res.timed_out or res.interrupted:
        raise WorkloadError(f"counter passes {res.describe()}", res, tail_lines)
    if res.returncode != 0:
        reason = counters_unavailable_reason(log)
        if reason:
            result.counters_skipped = reason
            return result
        try:
            why = explain_frontend_error(log.read_text(errors="replace"))
        except OSError:
            why = None
        raise ProfilerOutputError(f"counter passes failed: {why + '; ' if why else ''}rocprofv3 "
                                  f"{res.describe()} (groups: {groups})", log)
    try:
        result.counter_check = check_counter_output(raw, groups, log)
    except CountersUnavailable as exc:
        result.counters_skipped = exc.reason
    return result


__all__ = [
    "COUNTERLESS_ARCHS", "CounterCheck", "CounterConfigError", "CountersUnavailable",
    "MPI_RANK_PREFIX", "ProfileResult", "ProfilerError", "ProfilerOutputError",
    "ProfilerSetupError", "RANK_PREFIX", "RANK_SHIM", "anchored_regex", "check_ecma_regex",
    "ecma_escape", "explain_frontend_error", "profiler_env", "truncated_names",
    "validate_job_file",
    "RocprofVersion", "RunRecord", "check_counter_output", "check_timing_output",
    "counter_groups", "counter_pass_argv", "counters_unavailable_reason", "default_prefix",
    "detect_version", "gpu_archs", "job_file", "kernel_include_regex", "parse_version_output",
    "pmc_checker", "profile_point", "relevant_log_lines", "timing_pass_argv", "write_job_file",
]
