"""The work of ``gemmperf rocprof-config``: rank the kernels, write the rocprofv3 job file and
the kernel list. Its parser is :mod:`pytest_gemmperf.commands.rocprof_config`, which imports this
module only when the command runs, so ``gemmperf rocprof-config --help`` loads no pandas.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from pytest_gemmperf.commands.defaults import ROCPROF_CU_ONLY_COUNTERS as AORTA_CU_ONLY_COUNTERS
from pytest_gemmperf.commands.defaults import ROCPROF_VERSION as DEFAULT_VERSION
from pytest_gemmperf.errors import GemmperfInputError
# one escaping rule for every name-derived regex the project hands to rocprofv3
from pytest_gemmperf.run.rocprofv3_cli import anchored_regex, ecma_escape  # noqa: F401
from pytest_gemmperf.textsafe import printable
from pytest_gemmperf.safe_io import unneutralise_cell  # our CSVs prefix formula-like names
from pytest_gemmperf.analysis.variance import top_variance
from pytest_gemmperf.traces.discover import load
from pytest_gemmperf.run.rocprofv3 import (ProfilerSetupError, RocprofVersion, _VERSION_RE,
    detect_version)
from pytest_gemmperf.run.rocprofv3 import counter_groups, job_file
import shlex
from pytest_gemmperf.run.rocprofv3 import CounterConfigError, pmc_checker, write_job_file
from pytest_gemmperf.safe_io import write_text  # temp file + rename: never through a link
from pytest_gemmperf.run.rocprofv3_cli import ProfilerSetupError, truncated_names

#: PyTorch operator namespaces: names a CPU-only profile ranks, never a GPU kernel's name
_CPU_OP_NAME = re.compile(r"^(?:aten|c10d|_c10d_functional|prim|profiler|torch|mkldnn|quantized)::")


def kernels_from_csv(path: Path, top_k: int) -> list[str]:
    try:
        df = pd.read_csv(path, dtype={"kernel_name": str}, keep_default_na=False)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise GemmperfInputError(path, f"unreadable CSV: {exc}") from None
    if "kernel_name" not in df.columns:
        raise GemmperfInputError(path, "no 'kernel_name' column (expected a top-variance CSV such as "
                                       "top5_gemm_kernels_time_variance.csv)")
    if "time_diff_us" in df.columns:
        df = df.assign(_d=pd.to_numeric(df["time_diff_us"], errors="coerce"))
        df = df.sort_values("_d", ascending=False, kind="stable", na_position="last")

    names = [unneutralise_cell(n) for n in df["kernel_name"].astype(str) if n.strip() and n != "*"]
    return list(dict.fromkeys(names))[:top_k]


def cpu_op_kernels(d: pd.DataFrame) -> set[str]:
    """Kernel names of ``d`` that are CPU operators, not GPU kernels: a CPU-only PyTorch profile
    (``traces.torch_trace.read_torch_cpu_trace``) makes each operator its own dispatch, so the
    row has no GPU agent and its kernel is its own ``op_name``. Vectorised over the table."""
    if "op_name" not in d.columns or len(d) == 0:
        return set()
    kernel = d["kernel"].astype(object)
    cpu = (d["source"].astype(object) == "torch") & d["agent"].isna() & (kernel == d["op_name"].astype(object))
    return set(kernel[cpu.fillna(False).to_numpy(bool)].astype(str).unique())


def looks_like_cpu_op(name: str) -> bool:
    """A PyTorch operator name (``aten::mm``, ``c10d::allreduce_``): what a top-variance CSV of a
    CPU-only run lists, never a GPU kernel name (those are ``Cijk_...``, ``void at::native::...``)."""
    return _CPU_OP_NAME.match(name) is not None


def kernels_from_traces(paths: Sequence[str], top_k: int, *, sort_by: str = "range",
                        warmup: int = 0, cpu_ops: set[str] | None = None) -> list[str]:
    """The top-K GEMM kernel names by variance; ``cpu_ops``, when given, receives the names
    among them that are CPU operators (:func:`cpu_op_kernels`)."""

    d = load(list(paths)).dispatches
    if cpu_ops is not None:
        cpu_ops |= cpu_op_kernels(d)
    top = top_variance(d, k=top_k, warmup=warmup, sort_by=sort_by)
    if len(top) == 0:
        raise GemmperfInputError(paths[0], "no GEMM dispatches (category 'gemm') to rank")
    key = "time_diff_us" if sort_by == "range" else "mad_cv"
    ranked = top.sort_values(key, ascending=False, kind="stable")["kernel_name"].astype(str)
    return list(dict.fromkeys(ranked))[:top_k]


def select_kernels(sources: Sequence[str], top_k: int, *, sort_by: str = "range",
                   warmup: int = 0, cpu_ops: set[str] | None = None) -> list[str]:
    """Kernel names to target, CSVs first; ``cpu_ops`` (optional) receives those that are CPU
    operators (:func:`cpu_op_kernels` for traces, :func:`looks_like_cpu_op` for any name)."""
    csvs = [s for s in sources if Path(s).is_file() and Path(s).suffix.lower() == ".csv"
            and not Path(s).name.endswith(("_kernel_trace.csv", "_counter_collection.csv",
                                           "_agent_info.csv", "_kernel_stats.csv"))]
    others = [s for s in sources if s not in csvs]
    for s in sources:
        if not Path(s).exists():
            raise GemmperfInputError(s, "no such file or directory")
    names: list[str] = []
    for c in csvs:
        names += kernels_from_csv(Path(c), top_k)
    if others:
        names += kernels_from_traces(others, top_k, sort_by=sort_by, warmup=warmup, cpu_ops=cpu_ops)
    names = list(dict.fromkeys(names))[:top_k]
    if not names:
        raise GemmperfInputError(sources[0], "no kernels found to target")
    if cpu_ops is not None:
        cpu_ops |= {n for n in names if looks_like_cpu_op(n)}
    return names


def cpu_warning(names: Sequence[str], cpu_ops: set[str]) -> str | None:
    """One warning line when some target names are CPU operators, else None."""
    hit = [n for n in names if n in cpu_ops]
    if not hit:
        return None
    shown = ", ".join(hit[:3]) + (", ..." if len(hit) > 3 else "")
    return (f"warning: {len(hit)} of {len(names)} kernel(s) are CPU operators of a CPU-only PyTorch "
            f"profile ({shown}): the regex selects CPU ops and would match no GPU kernel under "
            "rocprofv3; rank the kernels of a GPU run instead")


def _version(args: argparse.Namespace):

    if args.rocprof_version:
        m = _VERSION_RE.match(args.rocprof_version.strip())
        if not m:
            raise GemmperfInputError(None, f"--rocprof-version {args.rocprof_version!r}: expected X.Y")
        return RocprofVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0),
                              raw=args.rocprof_version, source="--rocprof-version"), None
    try:
        return detect_version(args.rocprofv3), None
    except ProfilerSetupError as exc:
        major, minor = (int(x) for x in DEFAULT_VERSION.split("."))
        return (RocprofVersion(major, minor, 0, raw=DEFAULT_VERSION, source="default"),
                f"{exc}; writing the ROCm >= 6.3 `jobs:` schema (use --rocprof-version for another)")


def build_job(names: Sequence[str], counters: Sequence[str], version, *, max_per_pass: int = 8,
              checker=None) -> dict:

    groups = counter_groups(counters, max_per_pass, checker)
    return job_file(version, groups, (), ("csv",), kernel_names=names)


def _shell_quote(text: str) -> str:
    return shlex.quote(text)


def kernel_list_path(out: Path) -> Path:
    return out.with_name(out.stem + "_kernel_list.txt")


def run(args: argparse.Namespace) -> int:

    out = Path(args.out)
    if out.suffix not in (".yaml", ".yml", ".json"):
        raise GemmperfInputError(out, "job files must end in .yaml, .yml or .json")
    counters = ([c.strip() for c in args.counters.split(",") if c.strip()] if args.counters
                else list(AORTA_CU_ONLY_COUNTERS))
    if not counters:
        raise GemmperfInputError(None, "--counters: no counter names given")
    cpu_ops: set[str] = set()
    names = select_kernels(args.sources, args.top_k, sort_by=args.sort_by, warmup=args.warmup,
                           cpu_ops=cpu_ops)
    version, note = _version(args)
    # pmc-check exists from 7.0 (an older rocprofv3 beside a newer avail would mislead)
    checker = pmc_checker() if version.at_least(7, 0) and version.source != "default" else None
    try:
        job = build_job(names, counters, version, max_per_pass=args.max_per_pass, checker=checker)
    except CounterConfigError as exc:
        raise GemmperfInputError(None, str(exc)) from None
    try:
        write_job_file(job, out)

        write_text(kernel_list_path(out), "".join(n + "\n" for n in names))
    except OSError as exc:
        raise GemmperfInputError(out, f"cannot write: {exc.strerror or exc}") from None
    if note:
        print(printable(f"note: {note}"), file=sys.stderr)
    warning = cpu_warning(names, cpu_ops)
    if warning:
        print(printable(warning), file=sys.stderr)
    if version.kernel_names_option:

        try:
            opt = "--kernel-names " + " ".join(_shell_quote(n) for n in truncated_names(names))
            print(printable(f"note: rocprofv3 6.2 reads no kernel filter from a job file; add `{opt}` to "
                            f"the rocprofv3 command line ({kernel_list_path(out).name} lists the full names)"),
                  file=sys.stderr)
        except ProfilerSetupError as exc:
            print(printable(f"note: {exc}; the job collects counters for every kernel"), file=sys.stderr)
    passes = len(job.get("jobs", job.get("metrics", [])))
    print(printable(f"gemmperf rocprof-config: {len(names)} kernel(s), {len(counters)} counter(s) in {passes} "
                    f"pass(es) for rocprofv3 {version.major}.{version.minor} -> {out}, {kernel_list_path(out)}"))
    return 0


__all__ = ["AORTA_CU_ONLY_COUNTERS", "anchored_regex", "build_job", "cpu_op_kernels", "cpu_warning",
           "ecma_escape", "kernel_list_path", "kernels_from_csv", "kernels_from_traces", "looks_like_cpu_op",
           "select_kernels"]
