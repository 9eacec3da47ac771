"""rocprofv3 backend: version detection, command lines, ``--input`` job files, passes, checks.

Rules (rocprofv3-cli.md): timing runs use ``--kernel-trace`` only (counters serialize
dispatches, §9) with an explicit output format (7.x defaults to rocpd, formats §1.5); counters
run in separate passes from an ``--input`` file (``metrics:`` for 6.2, ``jobs:`` from 6.3, §3);
the exit status does not prove counters were collected, so every pass is checked for its files
and counter names (§6.1); everything runs under a timeout with the process group killed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from .process import ProcessResult, WorkloadError, require_success, run_process

# --- errors -------------------------------------------------------------------------------------


class ProfilerError(Exception):
    """Base class of rocprofv3 backend errors."""


class ProfilerSetupError(ProfilerError):
    """rocprofv3 missing, or its version cannot be determined."""


class CounterConfigError(ProfilerError):
    """A requested counter cannot be collected at all (unknown name, or alone too big)."""


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


# --- version ------------------------------------------------------------------------------------

#: rocprofiler-sdk version -> ROCm release (formats §0).
SDK_TO_ROCM = {(0, 4): (6, 2), (0, 5): (6, 3), (0, 6): (6, 4), (1, 0): (7, 0)}

_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class RocprofVersion:
    """ROCm release the rocprofv3 belongs to; ``source`` says how it was found."""

    major: int
    minor: int
    patch: int = 0
    raw: str = ""
    source: str = ""

    def at_least(self, major: int, minor: int = 0) -> bool:
        return (self.major, self.minor) >= (major, minor)

    @property
    def jobs_schema(self) -> bool:
        """``jobs:`` input schema (>= 6.3); 6.2 reads ``metrics:``."""
        return self.at_least(6, 3)

    @property
    def placeholders(self) -> bool:
        """``%env{NAME}%`` / ``%pid%`` in ``-o``/``-d``: documented and confirmed from 6.3/7.0
        only; the 6.2 guide documents none (default prefix there is the bare pid)."""
        return self.at_least(6, 3)

    @property
    def kernel_filter(self) -> bool:
        """``kernel_include_regex`` (and ``--pmc``) exist from 6.3."""
        return self.at_least(6, 3)

    @property
    def output_formats(self) -> frozenset[str]:
        base = {"csv", "json", "pftrace", "otf2"}
        return frozenset(base | {"rocpd"}) if self.at_least(7, 0) else frozenset(base)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch} (from {self.source})"


def parse_version_output(text: str) -> tuple[int, int, int] | None:
    """ROCm version from ``rocprofv3 --version`` (7.x prints ``key: value`` lines, one of them
    ``rocm_version``; ``version`` is the SDK version)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, val = line.partition(":")
        if sep:
            fields[key.strip()] = val.strip()
    m = _VERSION_RE.match(fields.get("rocm_version", ""))
    if m:
        return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    m = _VERSION_RE.match(fields.get("version", ""))
    if m:
        sdk = (int(m.group(1)), int(m.group(2)))
        if sdk in SDK_TO_ROCM:
            return (*SDK_TO_ROCM[sdk], 0)
        if sdk[0] == 1:  # SDK 1.x ships with ROCm 7.x; the minor does not map 1:1
            return (7, 0, 0)
    return None


def _rocm_version_file(path: Path) -> tuple[int, int, int] | None:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return None
    m = _VERSION_RE.match(text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def detect_version(exe: str = "rocprofv3", env: Mapping[str, str] | None = None,
                   timeout_s: float = 60.0) -> RocprofVersion:
    """Version of ``exe``: ``--version`` (7.x), else the ``.info/version`` of the ROCm tree the
    executable lives in (the wrapper picks its libraries from there, not from ROCM_PATH), else
    ``$ROCM_PATH`` and ``/opt/rocm``."""
    env = dict(os.environ if env is None else env)
    path = shutil.which(exe, path=env.get("PATH"))
    if path is None:
        raise ProfilerSetupError(f"rocprofv3 not found: {exe!r} is not on PATH")
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, env=env,
                              timeout=timeout_s, stdin=subprocess.DEVNULL)
        out = proc.stdout + proc.stderr
        if proc.returncode == 0:
            found = parse_version_output(out)
            if found:
                return RocprofVersion(*found, raw=out.strip(), source=f"{path} --version")
    except (OSError, subprocess.TimeoutExpired):
        pass
    candidates = [Path(os.path.realpath(path)).parent.parent / ".info" / "version"]
    if env.get("ROCM_PATH"):
        candidates.append(Path(env["ROCM_PATH"]) / ".info" / "version")
    candidates.append(Path("/opt/rocm/.info/version"))
    for cand in candidates:
        found = _rocm_version_file(cand)
        if found:
            return RocprofVersion(*found, raw=cand.read_text(errors="replace").strip(),
                                  source=str(cand))
    raise ProfilerSetupError(f"cannot determine the ROCm version of {path}: `--version` is not "
                             f"supported before 7.0 and none of {', '.join(map(str, candidates))} "
                             "exists")


# --- command lines ------------------------------------------------------------------------------

#: Per-process prefix: rank from torchrun's RANK, pid keeps re-spawned workers apart (cli §2.1).
RANK_PREFIX = "rank%env{RANK}%_%pid%"
#: Same under srun/mpirun, which export the rank through SLURM_PROCID / the MPI runtime.
MPI_RANK_PREFIX = "rank%rank%_%pid%"


def _check_formats(version: RocprofVersion, formats: Sequence[str]) -> list[str]:
    fmts = [f.lower() for f in formats]
    if not fmts:
        raise ValueError("at least one output format is needed")
    bad = [f for f in fmts if f not in version.output_formats]
    if bad:
        raise ValueError(f"rocprofv3 {version.major}.{version.minor} cannot write {bad}; "
                         f"supported: {sorted(version.output_formats)}")
    return fmts


def default_prefix(version: RocprofVersion) -> str | None:
    """``-o`` value for per-process files, or None to keep 6.2's default ``<pid>`` prefix."""
    return RANK_PREFIX if version.placeholders else None


def timing_pass_argv(version: RocprofVersion, out_dir: str | os.PathLike,
                     workload_argv: Sequence[str], formats: Sequence[str] = ("csv", "json"), *,
                     exe: str = "rocprofv3", output_prefix: str | None = None,
                     stats: bool = False) -> list[str]:
    """Kernel-trace-only run with explicit formats and per-process file names."""
    argv = [exe, "--kernel-trace"]
    if stats:
        argv.append("--stats")
    argv += ["--output-format", *_check_formats(version, formats), "-d", os.fspath(out_dir)]
    prefix = output_prefix if output_prefix is not None else default_prefix(version)
    if prefix:
        argv += ["-o", prefix]
    return argv + ["--", *workload_argv]


def counter_pass_argv(version: RocprofVersion, out_dir: str | os.PathLike,
                      job_path: str | os.PathLike, workload_argv: Sequence[str],
                      formats: Sequence[str] = ("csv",), *, exe: str = "rocprofv3",
                      output_prefix: str | None = None) -> list[str]:
    """Counter passes from a job file. From 6.3 the format is inside the job (a CLI value that
    differs from the job's is a conflict error), 6.2 reads only ``pmc`` from the file."""
    fmts = _check_formats(version, formats)
    argv = [exe, "-i", os.fspath(job_path), "-d", os.fspath(out_dir)]
    prefix = output_prefix if output_prefix is not None else default_prefix(version)
    if prefix:
        argv += ["-o", prefix]
    if not version.jobs_schema:
        argv += ["--output-format", *fmts]
    return argv + ["--", *workload_argv]


# --- counter groups and job files ---------------------------------------------------------------

PmcCheck = Callable[[Sequence[str]], tuple[bool, str]]


def pmc_checker(exe: str = "rocprofv3-avail", env: Mapping[str, str] | None = None,
                timeout_s: float = 60.0) -> PmcCheck | None:
    """``rocprofv3-avail pmc-check`` as a function (None when the tool is not on PATH)."""
    env = dict(os.environ if env is None else env)
    path = shutil.which(exe, path=env.get("PATH"))
    if path is None:
        return None

    def check(counters: Sequence[str]) -> tuple[bool, str]:
        try:
            proc = subprocess.run([path, "pmc-check", *counters], capture_output=True, text=True,
                                  env=env, timeout=timeout_s, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"{exe} pmc-check failed: {exc}"
        return proc.returncode == 0, (proc.stdout + proc.stderr).strip()

    return check


def _dedupe(counters: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for c in counters:
        c = str(c).strip()
        if c:
            seen.setdefault(c, None)
    return list(seen)


def counter_groups(counters: Iterable[str], max_per_pass: int = 8,
                   checker: PmcCheck | None = None) -> list[list[str]]:
    """Split counters into passes. With a checker (``pmc_checker()``), each counter joins the
    first group the checker still accepts it in; without, at most ``max_per_pass`` per group."""
    if max_per_pass < 1:
        raise ValueError("max_per_pass must be >= 1")
    names = _dedupe(counters)
    if checker is None:
        return [names[i:i + max_per_pass] for i in range(0, len(names), max_per_pass)]
    groups: list[list[str]] = []
    for name in names:
        # first fit: fewer passes than closing a group at the first refusal
        for group in groups:
            if len(group) < max_per_pass and checker([*group, name])[0]:
                group.append(name)
                break
        else:
            ok, message = checker([name])
            if not ok:
                raise CounterConfigError(f"counter {name} cannot be collected: {message}")
            groups.append([name])
    return groups


def kernel_include_regex(kernel_regexes: Sequence[str]) -> str | None:
    """One ECMAScript regex (std::regex_search) matching any of the point's kernel regexes."""
    regs = [r for r in kernel_regexes if r]
    if not regs:
        return None
    if len(regs) == 1:
        return regs[0]
    return "|".join(f"({r})" for r in regs)


def job_file(version: RocprofVersion, groups: Sequence[Sequence[str]],
             kernel_regexes: Sequence[str] = (), formats: Sequence[str] = ("csv",)) -> dict:
    """``--input`` content: one pass per group; ``metrics:`` for 6.2, ``jobs:`` from 6.3."""
    if not groups or any(not g for g in groups):
        raise ValueError("counter groups must be non-empty")
    if not version.jobs_schema:
        # 6.2 reads only `pmc` (kernel filtering does not exist yet): the analysis filters
        return {"metrics": [{"pmc": list(g)} for g in groups]}
    fmts = _check_formats(version, formats)
    regex = kernel_include_regex(kernel_regexes)
    jobs = []
    for g in groups:
        job: dict = {"pmc": list(g)}
        if regex:
            job["kernel_include_regex"] = regex
        job["output_format"] = list(fmts)
        jobs.append(job)
    return {"jobs": jobs}


def write_job_file(job: Mapping, path: str | os.PathLike) -> Path:
    """Write a job file; ``.json`` (no PyYAML needed by rocprofv3) or ``.yaml``/``.yml``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(json.dumps(job, indent=2) + "\n")
    elif path.suffix in (".yaml", ".yml"):
        import yaml
        path.write_text(yaml.safe_dump(dict(job), sort_keys=False))
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
    import pandas as pd

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
    import pandas as pd

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
                  tail_lines: int = 40) -> ProfileResult:
    """Profile one sweep point: ``repeats`` timing runs (separate processes, each into
    ``run<k>/raw`` with ``run<k>/logs/rocprofv3.log``), then counter passes into
    ``counters/raw`` (log ``counters/logs/rocprofv3.log``).

    ``launcher_prefix`` goes outside rocprofv3 (srun/mpirun); torchrun belongs in
    ``workload_argv``. Raises ``WorkloadError`` (workload failed or hung; the log tail is in the
    message), ``ProfilerOutputError`` (a pass lacks its files/counters); a GPU that cannot read
    counters gives ``counters_skipped`` instead of an error.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    base_env = dict(os.environ if env is None else env)
    base_env.update({str(k): str(v) for k, v in point_env.items()})
    version = version or detect_version(exe, base_env)
    prefix = MPI_RANK_PREFIX if (launcher_prefix and version.placeholders) else None
    out_dir = Path(out_dir)
    runs: list[RunRecord] = []
    for k in range(repeats):
        raw = out_dir / f"run{k}" / "raw"
        log = out_dir / f"run{k}" / "logs" / "rocprofv3.log"
        raw.mkdir(parents=True, exist_ok=True)
        argv = [*launcher_prefix,
                *timing_pass_argv(version, raw, workload_argv, formats, exe=exe,
                                  output_prefix=prefix)]
        res = run_process(argv, env=base_env, cwd=cwd, timeout_s=timeout_s, log_path=log,
                          grace_s=grace_s)
        require_success(res, f"timing run {k} (rocprofv3 --kernel-trace)", tail_lines)
        runs.append(RunRecord(k, res, raw, check_timing_output(raw, formats, log)))
    result = ProfileResult(version=version, runs=runs)
    if not counters:
        return result

    reason = counters_unavailable_reason(None, gpu_archs(runs[0].files))
    if reason:
        result.counters_skipped = reason
        return result
    # pmc-check arrived with 7.0 (cli §7); an older rocprofv3 next to a newer avail lies
    checker = pmc_checker(avail_exe, base_env) if version.at_least(7, 0) else None
    groups = counter_groups(counters, max_counters_per_pass, checker)
    cdir = out_dir / "counters"
    job_path = write_job_file(job_file(version, groups, kernel_regexes, ("csv",)),
                              cdir / "job.json")
    raw = cdir / "raw"
    log = cdir / "logs" / "rocprofv3.log"
    raw.mkdir(parents=True, exist_ok=True)
    argv = [*launcher_prefix,
            *counter_pass_argv(version, raw, job_path, workload_argv, ("csv",), exe=exe,
                               output_prefix=prefix)]
    # the application re-runs once per pass
    budget = None if timeout_s is None else timeout_s * len(groups)
    res = run_process(argv, env=base_env, cwd=cwd, timeout_s=budget, log_path=log, grace_s=grace_s)
    result.counter_groups, result.job_path, result.counter_result = groups, job_path, res
    if res.timed_out or res.interrupted:
        raise WorkloadError(f"counter passes {res.describe()}", res, tail_lines)
    if res.returncode != 0:
        reason = counters_unavailable_reason(log)
        if reason:
            result.counters_skipped = reason
            return result
        raise ProfilerOutputError(f"counter passes failed: rocprofv3 {res.describe()} "
                                  f"(groups: {groups})", log)
    try:
        result.counter_check = check_counter_output(raw, groups, log)
    except CountersUnavailable as exc:
        result.counters_skipped = exc.reason
    return result


__all__ = [
    "COUNTERLESS_ARCHS", "CounterCheck", "CounterConfigError", "CountersUnavailable",
    "MPI_RANK_PREFIX", "ProfileResult", "ProfilerError", "ProfilerOutputError",
    "ProfilerSetupError", "RANK_PREFIX",
    "RocprofVersion", "RunRecord", "check_counter_output", "check_timing_output",
    "counter_groups", "counter_pass_argv", "counters_unavailable_reason", "default_prefix",
    "detect_version", "gpu_archs", "job_file", "kernel_include_regex", "parse_version_output",
    "pmc_checker", "profile_point", "relevant_log_lines", "timing_pass_argv", "write_job_file",
]
