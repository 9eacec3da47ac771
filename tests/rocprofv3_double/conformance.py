"""Conformance of the runner's invocations with AMD's real front end, release by release.

For every release folder and every invocation the runner can produce (:data:`CASES`), the
command line built by ``pytest_gemmperf.run.rocprofv3_cli`` runs through the release's own
``main(argv)`` (``realfront.run_inprocess``), and the environment each recorded exec would hand
the tool library is compared, variable by variable, with :func:`expected_env` - the table below,
written from the front ends' ``update_env`` calls and the tool's ``config.hpp``, not from the
recorded output. ``scripts/conformance_matrix.py`` renders :func:`matrix` as
``docs/rocprofv3-conformance.md``; ``tests/test_rocprofv3_frontend.py`` checks every cell and
that the committed document is current.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import realfront
from pytest_gemmperf.commands.rocprof_config_impl import build_job
from pytest_gemmperf.run.rocprofv3_cli import (MPI_RANK_PREFIX, RANK_PREFIX, RANK_SHIM,
                                               RocprofVersion, counter_pass_argv, job_file,
                                               kernel_include_regex, profiler_env,
                                               timing_pass_argv, truncated_names)

VERSION = {"6.2.0": RocprofVersion(6, 2, 0), "6.3": RocprofVersion(6, 3, 0),
           "6.4": RocprofVersion(6, 4, 0), "7.0": RocprofVersion(7, 0, 0),
           "develop-2025-08": RocprofVersion(7, 1, 0)}

OUT = "/gemmperf/out"
APP = ["python3", "app.py", "--steps", "10"]
TORCHRUN = ["torchrun", "--nproc_per_node", "8", "train.py"]
TEMPLATED = "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>(float*)"
CNAME = "Cijk_Ailk_Bljk_HHS_BH_MT128x128x64_MI32x32x8"


@dataclass
class Invocation:
    argv: list[str]                      # rocprofv3 ... -- app (what follows the launcher)
    env: dict[str, str]                  # environment the front end starts from
    expected: list[dict[str, str]]       # ROCPROF_* per exec, in order
    job: dict | None = None              # job file content, written to <tmp>/job.json
    launcher_env: dict[str, str] | None = None   # rank variables for RANK_SHIM


def expected_env(release: str, *, prefix: str, out: str, formats=("csv", "json"),
                 kernel_trace: bool = True, stats: bool = False, pmc=None, regex=None,
                 names=None) -> dict[str, str]:
    """``ROCPROF_*`` the release's front end sets for one exec (its ``update_env`` calls)."""
    v = VERSION[release]
    e = {"ROCPROF_OUTPUT_FILE_NAME": prefix, "ROCPROF_OUTPUT_PATH": out,
         "ROCPROF_OUTPUT_FORMAT": ",".join(formats)}
    if not v.at_least(6, 3):
        e["ROCPROF_OUTPUT_LIST_METRICS_FILE"] = "1"          # 6.2: set whenever -o/-d is given
    elif not v.at_least(7, 0):
        e["ROCPROF_OUTPUT_LIST_AVAIL_FILE"] = "1"            # 6.3/6.4: idem, renamed
        e["ROCPROF_STATS_SUMMARY_OUTPUT"] = "stderr"         # 6.3/6.4 always write it
    if kernel_trace:
        e["ROCPROF_KERNEL_TRACE"] = "1"
        if v.at_least(6, 3) and not v.at_least(7, 0) and not pmc:
            e["ROCPROF_COUNTER_COLLECTION"] = "0"            # 6.3/6.4: explicit off
    if stats:
        e["ROCPROF_STATS"] = "1"
    if pmc:
        e["ROCPROF_COUNTER_COLLECTION"] = "1"
        e["ROCPROF_COUNTERS"] = "pmc: " + " ".join(pmc)
    if regex and v.kernel_filter:
        e["ROCPROF_KERNEL_FILTER_INCLUDE_REGEX"] = regex
    if names and v.kernel_names_option:
        e["ROCPROF_KERNEL_NAMES"] = ",".join(names)
    return e


def _sub(release: str, i: int) -> str:
    return f"{OUT}/{'pmc_' if release == '6.2.0' else 'pass_'}{i}"


def _timing(release, **kw) -> Invocation:
    v = VERSION[release]
    fmts = kw.pop("formats", ("csv", "json"))
    stats = kw.pop("stats", False)
    workload = kw.pop("workload", APP)
    prefix = kw.pop("prefix", RANK_PREFIX)
    argv = timing_pass_argv(v, OUT, workload, fmts, stats=stats, output_prefix=prefix)
    return Invocation(argv, kw.pop("env", {}),
                      [expected_env(release, prefix=prefix, out=OUT, formats=fmts, stats=stats)],
                      launcher_env=kw.pop("launcher_env", None))


def _counters(release, groups, regexes=(), names=(), *, job=None) -> Invocation:
    v = VERSION[release]
    job = job if job is not None else job_file(v, groups, regexes, ("csv",), kernel_names=names)
    argv = counter_pass_argv(v, OUT, "JOB", APP, ("csv",), kernel_names=names)
    regex = kernel_include_regex(regexes, names) if v.kernel_filter else None
    tnames = truncated_names(names) if (names and v.kernel_names_option) else None
    expected = [expected_env(release, prefix=RANK_PREFIX, out=_sub(release, i), formats=("csv",),
                             kernel_trace=False, pmc=g, regex=regex, names=tnames)
                for i, g in enumerate(groups, start=1)]
    return Invocation(argv, {}, expected, job=job)


def _launcher(release, rank_env) -> Invocation:
    """rocprofv3 behind RANK_SHIM: files named by the launcher's rank, never %rank%."""
    return _timing(release, prefix=MPI_RANK_PREFIX, launcher_env=rank_env)


def _inherited(release) -> Invocation:
    """A user environment full of ROCPROF_* (mismatch 5): the runner's profiler_env cleans it."""
    dirty = {"ROCPROF_OUTPUT_FORMAT": "rocpd", "ROCPROF_KERNEL_FILTER_INCLUDE_REGEX": "nothing",
             "ROCPROF_OUTPUT_FILE_NAME": "user", "ROCPROF_OUTPUT_PATH": "/elsewhere",
             "ROCPROF_PRELOAD": "/lib/evil.so", "ROCPROF_COUNTERS": "pmc: SQ_WAVES"}
    inv = _timing(release)
    inv.env = profiler_env(dirty)[0]
    return inv


def _rocprof_config(release) -> Invocation:
    v = VERSION[release]
    counters = ["SQ_BUSY_CU_CYCLES", "SQ_WAVES", "SQ_WAVE_CYCLES", "SQ_INSTS_MFMA"]
    job = build_job([TEMPLATED, CNAME], counters, v, max_per_pass=2)
    groups = [counters[:2], counters[2:]]
    return _counters(release, groups, (), (TEMPLATED, CNAME), job=job)


#: invocation name -> builder(release); every kind of command line the runner produces
CASES: dict[str, Callable[[str], Invocation]] = {
    "timing (csv, json)": lambda r: _timing(r),
    "timing csv only": lambda r: _timing(r, formats=("csv",)),
    "timing --stats": lambda r: _timing(r, stats=True),
    "timing, torchrun workload": lambda r: _timing(r, workload=TORCHRUN),
    "srun (SLURM_PROCID)": lambda r: _launcher(r, {"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}),
    "mpirun Open MPI": lambda r: _launcher(r, {"OMPI_COMM_WORLD_RANK": "1",
                                               "OMPI_COMM_WORLD_SIZE": "2"}),
    "mpirun MPICH (PMI_RANK)": lambda r: _launcher(r, {"PMI_RANK": "1", "PMI_SIZE": "2",
                                                       "MPI_LOCALRANKID": "0"}),
    "inherited ROCPROF_* removed": _inherited,
    "counters, 1 pass": lambda r: _counters(r, [["SQ_WAVES", "GRBM_COUNT"]]),
    "counters, 2 passes + regex": lambda r: _counters(r, [["SQ_WAVES", "GRBM_COUNT"],
                                                          ["SQ_INSTS_VALU"]], ["Cijk_", "gemm"]),
    "counters, exact templated names": lambda r: _counters(r, [["SQ_WAVES"]], (),
                                                           (TEMPLATED, CNAME)),
    "gemmperf rocprof-config job": _rocprof_config,
}


def shim_rank(launcher_env: dict[str, str]) -> str:
    """GEMMPERF_RANK as RANK_SHIM exports it (runs the real /bin/sh)."""
    out = subprocess.run([*RANK_SHIM, "sh", "-c", 'printf %s "$GEMMPERF_RANK"'],
                         env={"PATH": "/usr/bin:/bin", **launcher_env}, capture_output=True,
                         text=True, timeout=30, check=True)
    return out.stdout


@dataclass
class Cell:
    accepted: bool
    env_ok: bool
    detail: str = ""

    def text(self) -> str:
        if self.accepted and self.env_ok:
            return "accepted, env ="
        return ("accepted" if self.accepted else "REJECTED") + \
            ("" if self.env_ok else ", env DIFFERS") + (f" ({self.detail})" if self.detail else "")


def check(release: str, case: str, root: Path, tmp: Path) -> Cell:
    """Run one invocation through the release's front end and compare the environment."""
    inv = CASES[case](release)
    argv = list(inv.argv)
    if inv.job is not None:
        job_path = tmp / f"job_{release}_{abs(hash(case))}.json"
        job_path.write_text(json.dumps(inv.job))
        argv = [str(job_path) if a == "JOB" else a for a in argv]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), **inv.env}
    if inv.launcher_env is not None:
        env.update(inv.launcher_env)
        env["GEMMPERF_RANK"] = shim_rank(inv.launcher_env)
    outcome = realfront.run_inprocess(root, argv[1:], env)
    if not outcome.accepted:
        last = (outcome.stderr.strip().splitlines() or ["no exec"])[-1]
        return Cell(False, False, f"exit {outcome.code}: {last[:120]}")
    problems = []
    if len(outcome.execs) != len(inv.expected):
        problems.append(f"{len(outcome.execs)} execs, expected {len(inv.expected)}")
    tool = str(root / realfront.TOOL_LIB)
    for i, ((app, got), want) in enumerate(zip(outcome.execs, inv.expected), start=1):
        seen = {k: v for k, v in got.items() if k.startswith("ROCPROF_")}
        if seen != want:
            diff = sorted(set(seen.items()) ^ set(want.items()))
            problems.append(f"exec {i}: {diff[:4]}")
        if app != argv[argv.index("--") + 1:]:
            problems.append(f"exec {i}: argv {app}")
        if got.get("ROCPROFILER_LIBRARY_CTOR") != "1" or got.get("ROCP_TOOL_LIBRARIES") != tool \
                or tool not in got.get("LD_PRELOAD", "").split(":"):
            problems.append(f"exec {i}: tool library not preloaded")
        if inv.launcher_env is not None and got.get("GEMMPERF_RANK") != "1":
            problems.append(f"exec {i}: GEMMPERF_RANK={got.get('GEMMPERF_RANK')!r}, expected '1'")
    return Cell(True, not problems, "; ".join(problems))


def matrix(trees: dict[str, Path], tmp: Path) -> tuple[str, int]:
    """Markdown table (invocation x release) and the number of cells that do not conform."""
    releases = [r for r in realfront.RELEASES if r in trees]
    lines = ["| invocation | " + " | ".join(releases) + " |",
             "|---|" + "---|" * len(releases)]
    bad = 0
    for case in CASES:
        cells = [check(r, case, trees[r], tmp) for r in releases]
        bad += sum(not (c.accepted and c.env_ok) for c in cells)
        lines.append(f"| {case} | " + " | ".join(c.text() for c in cells) + " |")
    return "\n".join(lines) + "\n", bad


HEADER = """# rocprofv3 conformance matrix

Generated by `scripts/conformance_matrix.py` (checked by `tests/test_rocprofv3_frontend.py`,
which fails when this file is stale). Every invocation the runner
(`pytest_gemmperf/run/rocprofv3_cli.py`) builds was run through AMD's own `rocprofv3.py` of each
release folder in `../shared/data/rocprofv3/frontend` (in a fake ROCm tree; only the final exec
and the library files are stubbed). "accepted" = the release's argparse and job-file reader took
it and it reached the exec; "env =" = every `ROCPROF_*` variable each exec receives equals the
expected table in `tests/rocprofv3_double/conformance.py` (none missing, none extra), the tool
library is preloaded and, under a launcher, `GEMMPERF_RANK` carries the launcher's rank.

"""


def document(trees: dict[str, Path], tmp: Path) -> tuple[str, int]:
    table, bad = matrix(trees, tmp)
    return HEADER + table + f"\nMismatches: {bad}.\n", bad
