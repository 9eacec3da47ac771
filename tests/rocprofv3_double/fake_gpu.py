"""Workload side of the rocprofv3 double: stands in for the GPU runtime plus the tool library.

The real tool library lives inside every profiled process, sees each dispatch, expands the
output placeholders with that process's pid and environment, and writes files at exit. Here
``dispatch()`` records a kernel launch; at normal interpreter exit the process's record
(pid, environment, argv, dispatches) goes to ``$FAKE_ROCPROFV3_RECORD_DIR/<pid>.json``, from
which the ``rocprofv3`` double writes the documented files. A process that dies from a signal
writes nothing, as with the real tool.

Messages the tool would print inside the application (counter warnings, fatal aborts) arrive in
``FAKE_ROCPROFV3_TOOL`` (JSON) and are emitted at the first dispatch, which is where rocprofv3
builds its counter profile (rocprofv3-cli.md §6.1).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time

_DISPATCHES: list[dict] = []
_STATE = {"first": True}


def _profiled() -> bool:
    return bool(os.environ.get("FAKE_ROCPROFV3_RECORD_DIR")) and \
        os.environ.get("ROCPROFILER_LIBRARY_CTOR") == "1"


def _tool_messages() -> dict:
    raw = os.environ.get("FAKE_ROCPROFV3_TOOL")
    return json.loads(raw) if raw else {}


def _now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME)


def dispatch(kernel: str, dur_ns: int = 10_000, grid=(1024, 1, 1), wg=(256, 1, 1)) -> None:
    if _STATE["first"]:
        _STATE["first"] = False
        if _profiled():
            msgs = _tool_messages()
            pid = os.getpid()
            for line in msgs.get("warn", []):
                sys.stderr.write(line.replace("{pid}", str(pid)) + "\n")
            if msgs.get("abort"):
                for line in msgs["abort"]:
                    sys.stderr.write(line.replace("{pid}", str(pid)) + "\n")
                sys.stderr.flush()
                os.abort()
    # one queue: a dispatch starts when the previous one has finished
    start = max(_now_ns(), _DISPATCHES[-1]["end_ns"] + 1_000) if _DISPATCHES else _now_ns()
    _DISPATCHES.append({"kernel": kernel, "start_ns": start, "end_ns": start + int(dur_ns),
                        "grid": list(grid), "wg": list(wg), "tid": os.getpid()})


def _flush() -> None:
    if not _profiled():
        return
    out_dir = os.environ["FAKE_ROCPROFV3_RECORD_DIR"]
    record = {"pid": os.getpid(), "ppid": os.getppid(), "argv": [sys.executable] + sys.argv,
              "env": dict(os.environ), "dispatches": _DISPATCHES}
    tmp = os.path.join(out_dir, f".{os.getpid()}.json.tmp")
    try:
        with open(tmp, "w") as fh:
            json.dump(record, fh)
        os.replace(tmp, os.path.join(out_dir, f"{os.getpid()}.json"))
    except OSError:
        pass  # the wrapper was killed and removed the directory


atexit.register(_flush)
