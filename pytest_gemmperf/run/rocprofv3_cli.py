"""rocprofv3 input side: version, command lines, ``--input`` job files, environment, regexes.

Every rule here was checked against AMD's own front end of each release line (6.2.0, 6.3, 6.4,
7.0, develop 2025-08; ``tests/test_rocprofv3_frontend.py`` runs them) and the tool-library
sources that read its ``ROCPROF_*`` variables:

* output formats: 6.2 ``csv json pftrace``; 6.3/6.4 add ``otf2``; 7.0 adds ``rocpd`` (and makes it
  the default, so the format is always given explicitly);
* ``-o``/``-d`` placeholders exist in every release (6.2 expands ``%pid%``, ``%rank%``,
  ``%env{NAME}%`` but has no ``%hostname%``);
* kernel filters for counters: 6.2 ``--kernel-names`` (exact *truncated* names, comma-split by the
  tool, command line only); from 6.3 ``kernel_include_regex`` (ECMAScript ``std::regex_search``);
* ``%rank%`` comes from ``SLURM_PROCID`` or Open MPI / MVAPICH / generic ``MPI_RANK`` variables,
  else 0 - never from MPICH's ``PMI_RANK`` - so under a launcher the runner names files by a rank
  it exports itself (:data:`RANK_SHIM`);
* the front end *appends* to ``ROCPROF_OUTPUT_FORMAT`` and reads other ``ROCPROF_*`` defaults
  from the environment, so the runner removes every inherited ``ROCPROF_*`` (:func:`profiler_env`);
* job files: ``metrics:`` on 6.2, ``jobs:`` from 6.3; a job key that the command line also sets
  with another value is a ``RuntimeError`` in the front end. The runner writes neither; a user's
  own file is checked first (:func:`validate_job_file`) and failures read as one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.schema import short_name
import yaml

# --- errors -------------------------------------------------------------------------------------


class ProfilerError(Exception):
    """Base class of rocprofv3 backend errors."""


class ProfilerSetupError(ProfilerError):
    """rocprofv3 missing, its version unknown, or a request it cannot express."""


class CounterConfigError(ProfilerError):
    """A requested counter cannot be collected at all (unknown name, or alone too big)."""


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
        """``%pid%``, ``%rank%``, ``%env{NAME}%`` in ``-o``/``-d``: every release (6.2.0's
        ``config.cpp`` expands them)."""
        return True

    @property
    def hostname_placeholder(self) -> bool:
        """``%hostname%`` (and the default ``%hostname%/%pid%`` prefix) from 6.3."""
        return self.at_least(6, 3)

    @property
    def kernel_filter(self) -> bool:
        """``kernel_include_regex`` (and ``--pmc``) exist from 6.3."""
        return self.at_least(6, 3)

    @property
    def kernel_names_option(self) -> bool:
        """6.2 only: ``--kernel-names`` (exact truncated names; not settable from a job file)."""
        return (self.major, self.minor) == (6, 2)

    @property
    def unknown_counter_aborts(self) -> bool:
        """6.2 and 6.3 abort on an unknown counter (glog FATAL); 6.4 only warns."""
        return not self.at_least(6, 4)

    @property
    def output_formats(self) -> frozenset[str]:
        base = {"csv", "json", "pftrace"}
        if self.at_least(6, 3):
            base.add("otf2")
        if self.at_least(7, 0):
            base.add("rocpd")
        return frozenset(base)

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
    """Version of ``exe``: ``--version`` (7.0+; 6.x's argparse rejects it with exit 2), else the
    ``.info/version`` of the ROCm tree the executable lives in (the front end picks its libraries
    from there, not from ROCM_PATH), else ``$ROCM_PATH`` and ``/opt/rocm``."""
    env = dict(os.environ if env is None else env)
    path = shutil.which(exe, path=env.get("PATH"))
    if path is None:
        raise ProfilerSetupError(f"rocprofv3 not found: {exe!r} is not on PATH")
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True,
                              env=profiler_env(env)[0], timeout=timeout_s, stdin=subprocess.DEVNULL)
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


# --- environment --------------------------------------------------------------------------------

#: Inherited variables the front end or tool library would read as configuration.
_CONTROLLED = re.compile(r"^(ROCPROF_|ROCP_TOOL_LIBRARIES$)")


def profiler_env(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """``env`` without any ``ROCPROF_*`` / ``ROCP_TOOL_LIBRARIES``, and the names removed.

    Why: the front end appends to ``ROCPROF_OUTPUT_FORMAT`` (a user's ``rocpd`` turns a csv run
    into ``rocpd,csv``), 6.2 takes ``-o``/``-d``/``--preload`` defaults from
    ``ROCPROF_OUTPUT_FILE_NAME``/``ROCPROF_OUTPUT_PATH``/``ROCPROF_PRELOAD``, and the tool reads
    every ``ROCPROF_*`` the front end does not overwrite (``ROCPROF_KERNEL_FILTER_*``, ...)."""
    clean = {str(k): str(v) for k, v in env.items() if not _CONTROLLED.match(str(k))}
    return clean, sorted(str(k) for k in env if _CONTROLLED.match(str(k)))


# --- kernel filters -----------------------------------------------------------------------------

#: ECMAScript SyntaxCharacter set (ECMA-262 §22.2.1) plus "/", which is harmless to escape
_ECMA_SPECIAL = frozenset("^$\\.*+?()[]{}|/")
#: Python-only regex syntax that std::regex (ECMAScript) rejects or reads differently
_PY_ONLY = re.compile(r"\(\?P[<=>]|\(\?#|\(\?[aiLmsux-]+[:)]|\\[AZ]|\(\?<[A-Za-z_]")


def ecma_escape(name: str) -> str:
    """``name`` as an ECMAScript (and Python ``re``) regex that matches it literally."""
    return "".join("\\" + ch if ch in _ECMA_SPECIAL else ch for ch in name)


def anchored_regex(names: Sequence[str]) -> str:
    """One regex matching exactly the given names (whole-string, via ``regex_search``)."""
    if not names:
        raise ValueError("no kernel names")
    return "^(?:" + "|".join(ecma_escape(n) for n in names) + ")$"


def check_ecma_regex(regex: str) -> str:
    """``regex`` unchanged if Python ``re`` and ECMAScript read it alike; else ProfilerSetupError.
    (Kernel regexes are written for Python, which selects kernels in the analysis; rocprofv3
    applies the same text with ``std::regex``.)"""
    try:
        re.compile(regex)
    except re.error as exc:
        raise ProfilerSetupError(f"kernel regex {regex!r} is not a valid regex: {exc}") from None
    m = _PY_ONLY.search(regex)
    if m:
        raise ProfilerSetupError(f"kernel regex {regex!r} uses Python-only syntax {m.group(0)!r}; "
                                 "rocprofv3 applies it with ECMAScript std::regex")
    return regex


def kernel_include_regex(kernel_regexes: Sequence[str] = (),
                         kernel_names: Sequence[str] = ()) -> str | None:
    """One ECMAScript regex (std::regex_search) matching any of the point's kernel regexes or
    exactly any of ``kernel_names`` (names are escaped: ``(``, ``*``, ``<`` ... are literal)."""
    regs = [check_ecma_regex(r) for r in kernel_regexes if r]
    names = [n for n in kernel_names if n]
    if names:
        regs.append(anchored_regex(names))
    if not regs:
        return None
    if len(regs) == 1:
        return regs[0]
    return "|".join(f"({r})" for r in regs)


def truncated_names(kernel_names: Sequence[str]) -> list[str]:
    """6.2 ``--kernel-names`` values: the 6.2 tool compares each with the kernel's
    ``truncated_kernel_name`` (``tool.cpp``: ``name == kernel_info.truncated_kernel_name``) after
    splitting the list on commas. That is the base name without return type, namespaces,
    templates and parameters, except that a C-named kernel (no parameter list, ``Cijk_*``) keeps
    its ``.kd`` suffix, as real ``*_results.json`` files show."""
    def one(name: str) -> str:
        if "(" in name:
            return short_name(name)
        for suffix in ("[clone .kd]", ".kd"):   # demangled C names may carry either
            name = name[:-len(suffix)].rstrip() if name.endswith(suffix) else name
        return name + ".kd"

    out = list(dict.fromkeys(one(n) for n in kernel_names if n))
    bad = [n for n in out if "," in n or not re.search(r"[A-Za-z0-9_]", n)]
    if bad:
        raise ProfilerSetupError(f"rocprofv3 6.2 --kernel-names cannot express {bad!r} (the tool "
                                 "splits names on commas and drops names without a word character)")
    return out


# --- command lines ------------------------------------------------------------------------------

#: Per-process prefix: rank from torchrun's RANK, pid keeps re-spawned workers apart (cli §2.1).
RANK_PREFIX = "rank%env{RANK}%_%pid%"
#: Under srun/mpirun: the rank :data:`RANK_SHIM` exports (never ``%rank%``, which reads 0 for
#: every MPICH rank and MPI_LOCALRANKID on 7.x).
MPI_RANK_PREFIX = "rank%env{GEMMPERF_RANK}%_%pid%"
#: Goes between the launcher and rocprofv3: exports the launcher's global rank as GEMMPERF_RANK
#: (Open MPI, MPICH/Intel MPI PMI, PMIx, MVAPICH, then Slurm; empty when none is set).
RANK_SHIM = ("/bin/sh", "-c",
             'GEMMPERF_RANK="${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-'
             '${MV2_COMM_WORLD_RANK:-${SLURM_PROCID:-}}}}}"; export GEMMPERF_RANK; exec "$@"',
             "gemmperf-rank")


def _check_formats(version: RocprofVersion, formats: Sequence[str]) -> list[str]:
    fmts = [f.lower() for f in formats]
    if not fmts:
        raise ValueError("at least one output format is needed")
    bad = [f for f in fmts if f not in version.output_formats]
    if bad:
        raise ValueError(f"rocprofv3 {version.major}.{version.minor} cannot write {bad}; "
                         f"supported: {sorted(version.output_formats)}")
    return fmts


def default_prefix(version: RocprofVersion) -> str:
    """``-o`` value for per-process files (placeholders work in every release)."""
    return RANK_PREFIX


def timing_pass_argv(version: RocprofVersion, out_dir: str | os.PathLike,
                     workload_argv: Sequence[str], formats: Sequence[str] = ("csv", "json"), *,
                     exe: str = "rocprofv3", output_prefix: str | None = None,
                     stats: bool = False) -> list[str]:
    """Kernel-trace-only run with explicit formats and per-process file names."""
    argv = [exe, "--kernel-trace"]
    if stats:
        argv.append("--stats")
    argv += ["--output-format", *_check_formats(version, formats), "-d", os.fspath(out_dir)]
    argv += ["-o", output_prefix or default_prefix(version)]
    return argv + ["--", *workload_argv]


def counter_pass_argv(version: RocprofVersion, out_dir: str | os.PathLike,
                      job_path: str | os.PathLike, workload_argv: Sequence[str],
                      formats: Sequence[str] = ("csv",), *, exe: str = "rocprofv3",
                      output_prefix: str | None = None,
                      kernel_names: Sequence[str] = ()) -> list[str]:
    """Counter passes from a job file. From 6.3 the format is inside the job (a CLI value that
    differs from the job's is a conflict error); 6.2 reads only ``pmc`` from the file, so its
    format and ``--kernel-names`` filter go on the command line."""
    fmts = _check_formats(version, formats)
    argv = [exe, "-i", os.fspath(job_path), "-d", os.fspath(out_dir),
            "-o", output_prefix or default_prefix(version)]
    if not version.jobs_schema:
        argv += ["--output-format", *fmts]
        if kernel_names:
            argv += ["--kernel-names", *truncated_names(kernel_names)]
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


def job_file(version: RocprofVersion, groups: Sequence[Sequence[str]],
             kernel_regexes: Sequence[str] = (), formats: Sequence[str] = ("csv",), *,
             kernel_names: Sequence[str] = ()) -> dict:
    """``--input`` content: one pass per group; ``metrics:`` for 6.2 (``pmc`` only: its kernel
    filter is ``--kernel-names`` on the command line), ``jobs:`` from 6.3 with the format and
    the include regex inside each job (the command line then sets neither)."""
    if not groups or any(not g for g in groups):
        raise ValueError("counter groups must be non-empty")
    if not version.jobs_schema:
        return {"metrics": [{"pmc": list(g)} for g in groups]}
    fmts = _check_formats(version, formats)
    regex = kernel_include_regex(kernel_regexes, kernel_names)
    jobs = []
    for g in groups:
        job: dict = {"pmc": list(g)}
        if regex:
            job["kernel_include_regex"] = regex
        job["output_format"] = list(fmts)
        jobs.append(job)
    return {"jobs": jobs}


def _load_job(path: Path) -> object:
    text = path.read_text(errors="replace")
    if path.suffix == ".json":
        return json.loads(text)
    return yaml.safe_load(text)


def validate_job_file(version: RocprofVersion, path: str | os.PathLike, *,
                      cli: Mapping[str, object] | None = None) -> list[list[str]]:
    """Counter groups of a user's ``--input`` file, checked the way ``version``'s front end
    reads it; ``cli`` holds the dest -> value pairs the runner's command line sets (a job key
    with another value is the front end's ``RuntimeError: conflicting value``). Raises
    ``GemmperfInputError`` (one line naming the file) where rocprofv3 would die with a
    traceback, ``Fatal error: 'metrics'``/``'jobs'`` or a conflict."""
    path = Path(path)
    suffix = path.suffix
    if suffix not in (".txt", ".json", ".yaml", ".yml"):
        raise GemmperfInputError(path, "rocprofv3 reads only .txt, .json, .yaml or .yml inputs")
    try:
        if suffix == ".txt":
            lines = [ln.split("#", 1)[0].replace("pmc:", " ").split()
                     for ln in path.read_text(errors="replace").splitlines() if "pmc:" in ln]
            groups = [g for g in lines if g]
            if not groups:
                raise GemmperfInputError(path, "no `pmc:` line with counters (rocprofv3 would run "
                                               "without collecting any)")
            return groups
        data = _load_job(path)
    except (OSError, ValueError) as exc:
        raise GemmperfInputError(path, f"unreadable job file: {exc}") from None
    except ImportError:
        raise GemmperfInputError(path, "YAML job files need PyYAML") from None
    except Exception as exc:  # yaml.YAMLError without importing yaml at module level
        raise GemmperfInputError(path, f"unreadable job file: {str(exc).splitlines()[0]}") from None
    key, other = ("jobs", "metrics") if version.jobs_schema else ("metrics", "jobs")
    vtxt = f"{version.major}.{version.minor}"
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        if isinstance(data, dict) and other in data:
            raise GemmperfInputError(path, f"`{other}:` job schema, but rocprofv3 {vtxt} reads "
                                           f"`{key}:` (it would die with KeyError: '{key}')")
        raise GemmperfInputError(path, f"no top-level `{key}:` list (rocprofv3 {vtxt} would die "
                                       f"with KeyError: '{key}')")
    groups = []
    for i, job in enumerate(data[key], start=1):
        if not isinstance(job, dict):
            raise GemmperfInputError(path, f"{key}[{i}] is not a mapping")
        pmc = job.get("pmc")
        if not version.jobs_schema and not isinstance(pmc, list):
            raise GemmperfInputError(path, f"metrics[{i}] has no `pmc:` list (rocprofv3 6.2 "
                                           "would die with KeyError: 'pmc')")
        if version.jobs_schema:
            for dest, have in (cli or {}).items():
                val = job.get(dest)
                if have is not None and val is not None and val != have:
                    raise GemmperfInputError(path, f"jobs[{i}] sets {dest} = {val!r} but the "
                                                   f"command line has {have!r} (rocprofv3 raises "
                                                   f"RuntimeError: conflicting value for {dest})")
        groups.append([str(c) for c in (pmc or [])])
    if not any(groups):
        raise GemmperfInputError(path, f"no `pmc` counters in any of its {len(groups)} job(s)")
    return [g for g in groups if g]


_FRONTEND_FAILURES = (
    (re.compile(r"KeyError: '(metrics|jobs|pmc)'|Fatal error: '(metrics|jobs|pmc)'"),
     lambda g: f"the job file lacks the `{g[0] or g[1]}` key this rocprofv3 reads (wrong job "
               "schema for the release)"),
    # 6.3 names only the key; 6.4+ add "<command line> vs <job>"
    (re.compile(r"conflicting value for (\w+)(?: : (.*) vs (.*))?"),
     lambda g: f"the job file sets {g[0]}" + (f" = {g[2].strip()} but the command line has "
                                              f"{g[1].strip()}" if g[1] is not None else
                                              " to another value than the command line")),
    (re.compile(r"rocprofv3: error: (.*)"),
     lambda g: f"rocprofv3 rejected its command line: {g[0].strip()}"),
)


def explain_frontend_error(log_text: str) -> str | None:
    """One line for a front-end failure found in a rocprofv3 log, or None."""
    for rx, say in _FRONTEND_FAILURES:
        m = rx.search(log_text)
        if m:
            return say(m.groups())
    return None
