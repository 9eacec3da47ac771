"""``gemmperf rocprof-config --from RESULTS_OR_CSV --top-k K --out FILE.yaml``

Writes a rocprofv3 ``--input`` job file that collects hardware counters for the top-K GEMM
kernels by time variance, and ``FILE_kernel_list.txt`` beside it (one kernel name per line).

* kernels come from a top-variance CSV (aorta's ``top5_gemm_kernels_time_variance*.csv`` or
  ours: column ``kernel_name``, ranked by ``time_diff_us``), or are ranked here from any
  profiler output ``gemmperf analyze`` reads;
* the filter is one ECMAScript regex (rocprofv3 runs ``std::regex_search`` on the formatted
  kernel name): every name escaped and the alternation anchored, ``^(?:a|b)$``, so it matches
  exactly those names and no kernel that merely contains one of them;
* counters default to aorta's ``rocprof_cu_only.yaml`` set; the file follows the schema of the
  installed rocprofv3 (``jobs:`` from ROCm 6.3, ``metrics:`` on 6.2, which cannot filter
  kernels from a job file: its filter is ``--kernel-names`` on the command line, printed here);
* a CPU-only run (PyTorch profiler on the CPU: its "kernels" are CPU operators such as
  ``aten::mm``) gets a warning line: such a regex matches no GPU kernel under rocprofv3.
"""
# the job's schema per release: pytest_gemmperf.run.rocprofv3.job_file

from __future__ import annotations

import argparse

from pytest_gemmperf.collector import gc_paused
from pytest_gemmperf.commands.argtypes import non_negative, positive
from pytest_gemmperf.commands.helpfmt import command_description
from pytest_gemmperf.commands.defaults import ROCPROF_CU_ONLY_COUNTERS as AORTA_CU_ONLY_COUNTERS
from pytest_gemmperf.commands.defaults import ROCPROF_VERSION as DEFAULT_VERSION


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "rocprof-config", help="rocprofv3 counter job for the top-K variance kernels",
        description=command_description(__doc__))
    p.add_argument("--from", dest="sources", action="append", required=True, metavar="RESULTS_OR_CSV",
                   help="top-variance CSV, results directory or profiler output (repeatable)")
    p.add_argument("--top-k", type=positive, default=5, metavar="K",
                   help="number of distinct kernels to target (default 5)")
    p.add_argument("--out", required=True, metavar="FILE.yaml",
                   help="job file to write (.yaml, .yml or .json)")
    p.add_argument("--counters", metavar="A,B,...",
                   help=f"counters (default aorta's rocprof_cu_only set: {', '.join(AORTA_CU_ONLY_COUNTERS)})")
    p.add_argument("--rocprof-version", metavar="X.Y",
                   help="ROCm release of the target rocprofv3 (default: detect the installed one, "
                        f"else {DEFAULT_VERSION})")
    p.add_argument("--rocprofv3", default="rocprofv3", metavar="EXE",
                   help="rocprofv3 executable whose version picks the job schema (default: rocprofv3 on PATH)")
    p.add_argument("--max-per-pass", type=positive, default=8, metavar="N",
                   help="counters per pass when rocprofv3-avail cannot check groups (default 8)")
    p.add_argument("--sort-by", choices=("range", "robust"), default="range",
                   help="ranking when reading traces: aorta's max-min range or the robust CV (default: range)")
    p.add_argument("--warmup", type=non_negative, default=0, metavar="N",
                   help="dispatches per kernel and process ignored when ranking traces (default 0)")
    p.set_defaults(func=run)
    return p


def _impl():
    """The command's work, imported when it runs, with the cyclic collector paused (collector.py)."""
    with gc_paused():
        # lazy: keeps gemmperf --help fast
        from pytest_gemmperf.commands import rocprof_config_impl

    return rocprof_config_impl


def run(args: argparse.Namespace) -> int:
    return _impl().run(args)
