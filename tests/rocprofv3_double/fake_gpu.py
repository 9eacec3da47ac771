"""Workload side of the rocprofv3 double: the GPU runtime plus the (fake) preloaded tool library.

``dispatch()`` records a kernel launch. When the fake tool library is loaded in this process
(``fake_tool.loaded_version``: AMD's front end put it in ``LD_PRELOAD``, which ``exec_stub.py``
moved to ``FAKE_ROCPROFV3_PRELOAD``), the first dispatch builds the counter profile (printing the
tool's warnings, or aborting with SIGABRT as the real tool does), and at normal interpreter exit
the process writes its own output files from its ``ROCPROF_*`` environment, expanding the
placeholders with its own pid and environment (``fake_tool.write_process``). A process that dies
from a signal writes nothing, as with the real tool.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import fake_tool  # noqa: E402

_DISPATCHES: list[dict] = []
_STATE = {"first": True, "collected": []}
_VERSION = fake_tool.loaded_version(os.environ)


def _now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def dispatch(kernel: str, dur_ns: int = 10_000, grid=(1024, 1, 1), wg=(256, 1, 1)) -> None:
    if _STATE["first"]:
        _STATE["first"] = False
        if _VERSION is not None:
            lines, collected, abort = fake_tool.first_dispatch(_VERSION, os.environ)
            for line in lines:
                sys.stderr.write(line.replace("{pid}", str(os.getpid())) + "\n")
            sys.stderr.flush()
            if abort:
                os.abort()
            _STATE["collected"] = collected
    # one queue: a dispatch starts when the previous one has finished
    start = max(_now_ns(), _DISPATCHES[-1]["end_ns"] + 1_000) if _DISPATCHES else _now_ns()
    _DISPATCHES.append({"kernel": kernel, "start_ns": start, "end_ns": start + int(dur_ns),
                        "grid": list(grid), "wg": list(wg), "tid": os.getpid()})


def _finalize() -> None:
    if _VERSION is None:
        return
    fake_tool.write_process(_VERSION, dict(os.environ), os.getpid(), os.getppid(),
                            [sys.executable] + sys.argv, _DISPATCHES, _STATE["collected"])


atexit.register(_finalize)
