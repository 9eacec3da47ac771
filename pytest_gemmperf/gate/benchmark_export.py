"""Export kernel timings as a pytest-benchmark saved-JSON file.

Layout of pytest-benchmark 5.x (``plugin.pytest_benchmark_generate_json`` and
``stats.Metadata.as_dict``): top level ``machine_info, commit_info, benchmarks, datetime,
version``; per benchmark ``group, name, fullname, params, param, extra_info, options, stats``
with ``stats`` = ``min, max, mean, stddev, rounds, median, iqr, q1, q3, iqr_outliers,
stddev_outliers, outliers, ld15iqr, hd15iqr, ops, total, iterations`` (+ ``data`` when asked).

One benchmark per (point, kernel): its rounds are the kernel's dispatch durations of all
processes, in **seconds** (pytest-benchmark's unit). ``group`` is the point, so
``pytest-benchmark compare A.json B.json`` lines kernels up per point. Quartiles follow
pytest-benchmark's own definitions so that its table shows the same numbers it would have
computed from the raw data.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.metrics import DUR_NS
from pytest_gemmperf.gate.samples import samples_from_dispatches
from pytest_gemmperf.jsonsafe import clean
from pytest_gemmperf.safe_io import write_text

#: pytest-benchmark version whose layout is written (``version`` field).
PYTEST_BENCHMARK_LAYOUT = "5.1.0"


def _quartiles(x: np.ndarray) -> tuple[float, float]:
    """q1, q3 as ``pytest_benchmark.stats.Stats`` computes them (Wikipedia methods 2 and 3)."""
    n = len(x)
    if n == 1:
        return float(x[0]), float(x[0])
    if n % 2:
        m, r = n // 4, n % 4
        if r == 1:
            q1 = 0.25 * x[m - 1] + 0.75 * x[m]
            q3 = 0.75 * x[3 * m] + 0.25 * x[3 * m + 1]
        else:
            q1 = 0.75 * x[m] + 0.25 * x[m + 1]
            q3 = 0.25 * x[3 * m + 1] + 0.75 * x[3 * m + 2]
        return float(q1), float(q3)
    return float(np.median(x[: n // 2])), float(np.median(x[n // 2:]))


def benchmark_stats(seconds: np.ndarray, include_data: bool = False) -> dict[str, Any]:
    """pytest-benchmark ``stats`` dict of one benchmark (values in seconds)."""
    x = np.sort(np.asarray(seconds, float))
    n = len(x)
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if n > 1 else 0.0
    q1, q3 = _quartiles(x)
    iqr = q3 - q1
    lo_f, hi_f = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    sd_out = int(((x < mean - sd) | (x > mean + sd)).sum())
    iqr_out = int(((x < lo_f) | (x > hi_f)).sum())
    total = float(x.sum())
    out = {
        "min": float(x[0]), "max": float(x[-1]), "mean": mean, "stddev": sd, "rounds": n,
        "median": float(np.median(x)), "iqr": iqr, "q1": q1, "q3": q3,
        "iqr_outliers": iqr_out, "stddev_outliers": sd_out, "outliers": f"{sd_out};{iqr_out}",
        "ld15iqr": float(x[np.searchsorted(x, lo_f, side="left")]) if n > 1 else float(x[0]),
        "hd15iqr": float(x[np.searchsorted(x, hi_f, side="right") - 1]) if n > 1 else float(x[0]),
        "ops": n / total if total else 0.0, "total": total, "iterations": 1,
    }
    if include_data:
        out["data"] = x.tolist()
    return out


def default_machine_info() -> dict[str, Any]:
    """The host fields pytest-benchmark writes (without py-cpuinfo's ``cpu`` block)."""
    return {
        "node": platform.node(), "processor": platform.processor(), "machine": platform.machine(),
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(),
        "python_version": platform.python_version(), "python_build": list(platform.python_build()),
        "release": platform.release(), "system": platform.system(), "cpu": {},
    }


def _as_samples(data: pd.DataFrame) -> pd.DataFrame:
    if {"metric", "value", "kernel"} <= set(data.columns):
        d = data[data["metric"].astype(str) == DUR_NS]
        return pd.DataFrame({"point": d["point"].astype(str) if "point" in d else "-",
                             "kernel": d["kernel"].astype(str), "unit": d["unit"].astype(str) if "unit" in d else "-",
                             "value": d["value"].to_numpy(float)})
    if {"kernel", "dur_ns"} <= set(data.columns):

        return _as_samples(samples_from_dispatches(data, categories=False))
    raise GemmperfInputError(None, "benchmark export needs a samples table (point, kernel, metric, unit, "
                                   "value) or a dispatches table (kernel, dur_ns, ...)")


def to_pytest_benchmark_json(data: pd.DataFrame, machine_info: dict | None = None,
                             commit_info: dict | None = None, *, include_data: bool = False,
                             test: str = "gemmperf", datetime: str | None = None) -> dict[str, Any]:
    """pytest-benchmark saved-JSON dict of a samples or dispatches table."""
    s = _as_samples(data)
    if s.empty:
        raise GemmperfInputError(None, "benchmark export: no dur_ns samples")
    s = s[s["value"] > 0]
    benches = []
    for (point, kernel), g in s.groupby(["point", "kernel"], sort=True):
        stats = benchmark_stats(g["value"].to_numpy(float) * 1e-9, include_data)
        benches.append({
            "group": point,
            "name": f"{kernel}[{point}]",
            "fullname": f"{test}::{kernel}[{point}]",
            "params": {"point": point},
            "param": point,
            "extra_info": {"kernel": kernel, "point": point, "processes": int(g["unit"].nunique()),
                           "source": "pytest-gemmperf"},
            "options": {"disable_gc": False, "timer": "gpu-kernel-trace", "min_rounds": 1,
                        "max_time": 0.0, "min_time": 0.0, "warmup": False},
            "stats": stats,
        })
    return {
        "machine_info": machine_info if machine_info is not None else default_machine_info(),
        "commit_info": commit_info if commit_info is not None else {},
        "benchmarks": benches,
        "datetime": datetime or _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "version": PYTEST_BENCHMARK_LAYOUT,
    }


def write_pytest_benchmark_json(path: str | os.PathLike, data: pd.DataFrame, **kwargs: Any) -> Path:
    """Write :func:`to_pytest_benchmark_json` to ``path`` (atomically) and return it."""
    p = Path(path)
    doc = to_pytest_benchmark_json(data, **kwargs)
    p.parent.mkdir(parents=True, exist_ok=True)

    # private temp file + rename: a link planted at the path (or at a fixed temp name) is
    # never written through
    return write_text(p, json.dumps(clean(doc), indent=2, ensure_ascii=True))
