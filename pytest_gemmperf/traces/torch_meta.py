"""Kineto trace metadata: host process, host name, rank, runtime flavour, base time, GPUs.

Split from :mod:`pytest_gemmperf.traces.torch_trace`. Numeric metadata is type-checked like the
events: ``baseTimeNanoseconds`` and the numeric ``deviceProperties`` must be int64 JSON integers
(a float is never truncated into an integer, a boolean never read as 1).
"""

from __future__ import annotations

import os
import re
from typing import Any

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.jsonnum import INT64_MAX, show
from pytest_gemmperf.traces.schema import AGENT_SCHEMA, empty, finalize_agents

#: product name -> gfx target, for ROCm traces whose deviceProperties carry no arch name
_PRODUCT_ARCH = (
    (re.compile(r"MI35\dX?"), "gfx950"),
    (re.compile(r"MI3(00|25)[AX]?"), "gfx942"),
    (re.compile(r"MI2(10|50X?)"), "gfx90a"),
    (re.compile(r"MI100"), "gfx908"),
)


def process_pid(*pid_columns: pd.Series) -> int | None:
    """The host process: the most frequent pid of CPU-side events (GPU lanes use device ids)."""
    pids = pd.concat([c.dropna() for c in pid_columns], ignore_index=True)
    if pids.empty:
        return None
    return int(pids.value_counts().index[0])


#: tensorboard_trace_handler's default file name: <hostname>_<pid>.<time_ns>.pt.trace.json
_HANDLER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(\.gz)?$")


def host_name(doc: Any, path: str, pid: int | None) -> str | None:
    if isinstance(doc.host_name, str) and doc.host_name:
        return doc.host_name
    for name in (os.path.basename(path), os.path.basename(str(doc.traceName or ""))):
        m = _HANDLER_NAME.match(name)
        # trust the name only when its pid is the traced process (the pattern is a convention)
        if m and (pid is None or int(m["pid"]) == pid):
            return m["host"]
    return None


def rank_of(info: Any) -> int | None:
    if isinstance(info, dict):
        r = info.get("rank")
        if isinstance(r, int) and not isinstance(r, bool):
            return r
        if isinstance(r, str) and r.strip().isdigit():
            return int(r)
    return None


def flavor_of(doc: Any, runtime_names: list[str]) -> str:
    """The runtime under the trace, from its version keys, else from the names of its first
    runtime calls (``runtime_names``: up to 200)."""
    if doc.rocprofiler_sdk_version is not None:
        return "rocprofiler-sdk"
    if doc.roctracer_version is not None or doc.hip_runtime_version is not None:
        return "roctracer"
    if doc.cuda_runtime_version is not None or doc.cuda_driver_version is not None \
            or doc.cupti_version is not None:
        return "cupti"
    names = {n[:3] for n in runtime_names[:200] if isinstance(n, str)}
    if "hip" in names:
        return "roctracer"
    if "cud" in names:
        return "cupti"
    return "unknown"


def base_time(doc: Any, path: str) -> int | None:
    """``baseTimeNanoseconds``: absent, or an int64 JSON integer (never truncated from a float)."""
    v = doc.baseTimeNanoseconds
    if v is None:
        return None
    if type(v) is not int or not -INT64_MAX - 1 <= v <= INT64_MAX:
        raise GemmperfInputError(path, f"baseTimeNanoseconds is not an int64 JSON integer: {show(v)}")
    return v


def product_arch(product: str | None) -> str | None:
    if not product:
        return None
    for rx, arch in _PRODUCT_ARCH:
        if rx.search(product):
            return arch
    return None


def agents_table(props: Any, path: str, host: str | None, pid: int | None) -> pd.DataFrame:
    if not isinstance(props, list) or not props:
        return empty(AGENT_SCHEMA)
    rows = []
    for k, p in enumerate(props):
        if not isinstance(p, dict):
            continue
        for key in ("id", "numSms", "warpSize", "computeMajor", "computeMinor"):
            v = p.get(key)
            if v is not None and (type(v) is not int or not 0 <= v <= INT64_MAX):
                raise GemmperfInputError(path, f"{key} is not a non-negative int64 JSON integer: "
                                               f"{show(v)}", record=f"deviceProperties[{k}]")
        name = p.get("name")
        arch = p.get("gcnArchName")
        if isinstance(arch, str):
            arch = arch.split(":")[0]
        elif isinstance(p.get("computeMajor"), int) and "AMD" not in str(name):
            arch = f"sm_{p['computeMajor']}{p.get('computeMinor', 0)}"
        else:
            arch = product_arch(name)
        rows.append({"source": "torch", "host": host, "pid": pid, "gpu_index": p.get("id"),
                     "type": "GPU", "gpu_arch": arch, "product": name,
                     "cu_count": p.get("numSms"), "wave_size": p.get("warpSize")})
    return finalize_agents(pd.DataFrame(rows), path)
