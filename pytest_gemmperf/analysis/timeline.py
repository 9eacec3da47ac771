"""GPU timeline breakdown per process-GPU group, with TraceLens's definitions.

PyTorch mode (aorta-pipeline.md §4.1): every dispatch is MEMCPY, COMM or COMP; each class becomes
a union of intervals; ``exposed_comm = |U(COMM) − U(COMP)|``,
``exposed_memcpy = |U(MEMCPY) − U(COMP) − U(COMM)|``, ``busy = |U(all)|``,
``total = last end − first start``, ``idle = total − busy``; so
computation + exposed_comm + exposed_memcpy + idle == total exactly (integer ns).

rocprof mode (§4.2): ``total = fini − init`` (process lifetime) when given, kernel, memory, busy,
idle; no compute/communication split.

One sweep over the three class unions of all groups at once gives every quantity: a segment's
bit mask says which classes cover it.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.intervals import (
    GPU_KEYS, GroupedTimeline, group_codes, grouped_union, merge, sweep,
)
from pytest_gemmperf.analysis.small_tables import taken

#: TraceLens's communication rule (case-insensitive search in the kernel name).
COMM_PATTERN = r"nccl|rccl|cross_device_reduce"
#: Memory copies that show up as kernels: ROCm's blit kernels and rocprofv3-converted copies;
#: ``Memcpy ...`` is how PyTorch names its ``gpu_memcpy`` events.
MEMCPY_PATTERN = r"^__amd_rocclr_copyBuffer|^MEMORY_COPY_|^Memcpy\b"
#: Columns a torch reader may carry the Kineto event category in.
TORCH_CAT_COLUMNS = ("torch_cat", "cat")

COMP, COMM, MEMCPY = 0, 1, 2

PYTORCH_TYPES = ("computation_time", "exposed_comm_time", "exposed_memcpy_time", "busy_time",
                 "idle_time", "total_time", "total_comm_time", "total_memcpy_time")
ROCPROF_TYPES = ("total_time", "kernel", "memory", "busy_time", "idle")
_ROCPROF_COLS = {"total_time": "total_time_ns", "kernel": "kernel_time_ns",
                 "memory": "memory_time_ns", "busy_time": "busy_time_ns", "idle": "idle_time_ns"}


def timeline_classes(dispatches: pd.DataFrame, *, comm_pattern: str = COMM_PATTERN,
                     memcpy_pattern: str = MEMCPY_PATTERN,
                     memcpy_mask: np.ndarray | None = None) -> np.ndarray:
    """COMP (0) / COMM (1) / MEMCPY (2) per dispatch; regexes run once per distinct name."""
    names = dispatches["kernel"]
    cat = names if isinstance(names.dtype, pd.CategoricalDtype) else names.astype("category")
    comm_rx = re.compile(comm_pattern, re.IGNORECASE)
    mem_rx = re.compile(memcpy_pattern)
    per_name = np.asarray(
        [MEMCPY if mem_rx.search(str(n)) else COMM if comm_rx.search(str(n)) else COMP
         for n in cat.dtype.categories] + [COMP], dtype=np.int8)
    out = per_name[cat.array.codes]  # the codes off the array: the ``.cat`` accessor costs more
    for col in TORCH_CAT_COLUMNS:
        if col in dispatches.columns:
            out = np.where((dispatches[col] == "gpu_memcpy").to_numpy(dtype=bool, na_value=False),
                           MEMCPY, out).astype(np.int8)
            break
    if memcpy_mask is not None:
        out = np.where(np.asarray(memcpy_mask, dtype=bool), MEMCPY, out).astype(np.int8)
    return out


def _group_frame(d: pd.DataFrame, codes: np.ndarray, keys: Sequence[str],
                 values: dict[str, np.ndarray] | None = None, *, text: bool = False) -> pd.DataFrame:
    """Per group its keys (from its first row; ``text``: categoricals as objects, None for
    missing), ``n_dispatches`` and the columns ``values``, built as one frame from the picked
    values of each key column (a column set, a row selection or a conversion of a small frame
    costs as much as building it)."""
    _, first = np.unique(codes, return_index=True)
    return pd.DataFrame({**{c: taken(d[c], first, text=text) for c in keys if c in d.columns},
                         "n_dispatches": np.bincount(codes, minlength=len(first)), **(values or {})})


def gpu_timeline(dispatches: pd.DataFrame, *, keys: Sequence[str] = GPU_KEYS,
                 comm_pattern: str = COMM_PATTERN, memcpy_pattern: str = MEMCPY_PATTERN,
                 memcpy_mask: np.ndarray | None = None, codes: np.ndarray | None = None,
                 text: bool = False) -> pd.DataFrame:
    """TraceLens PyTorch-mode timeline, one row per process-GPU group (``*_time_ns`` int64).
    ``codes``: the rows' ``group_codes(dispatches, keys)`` where the caller has them; ``text``:
    categorical keys as objects (None for missing), as the reports show them."""
    d = dispatches
    if len(d) == 0:
        raise ValueError("gpu_timeline needs at least one dispatch")
    start = d["start_ns"].to_numpy(np.int64)
    end = d["end_ns"].to_numpy(np.int64)
    codes = group_codes(d, keys) if codes is None else codes
    tl = GroupedTimeline.build(codes, start, end)
    cls = timeline_classes(d, comm_pattern=comm_pattern, memcpy_pattern=memcpy_pattern,
                           memcpy_mask=memcpy_mask)
    unions = [grouped_union(tl, codes, start, end, cls == c) for c in (COMP, COMM, MEMCPY)]
    s, e, m = sweep(unions)

    def length(pick: np.ndarray) -> np.ndarray:
        return tl.sum_by_group((s[pick], e[pick]))

    busy = length(m != 0)
    total = tl.hi - tl.lo
    return _group_frame(d, codes, keys, {
        "computation_time_ns": length((m & 1) != 0),
        "exposed_comm_time_ns": length((m & 3) == 2),
        "exposed_memcpy_time_ns": length(m == 4),
        "busy_time_ns": busy,
        "total_time_ns": total,
        "idle_time_ns": total - busy,
        "total_comm_time_ns": length((m & 2) != 0),
        "total_memcpy_time_ns": length((m & 4) != 0)}, text=text)


def rocprof_timeline(dispatches: pd.DataFrame, init_ns: int | None = None,
                     fini_ns: int | None = None, *, memory_copies: pd.DataFrame | None = None,
                     keys: Sequence[str] = GPU_KEYS) -> pd.DataFrame:
    """TraceLens rocprof-mode timeline per group: ``total_time_ns`` (``fini − init`` when both
    are given — one rocprofv3 process —, else last end − first start), ``kernel_time_ns``,
    ``memory_time_ns``, ``busy_time_ns``, ``idle_time_ns``.

    ``memory_copies`` (``start_ns``, ``end_ns`` and any of the key columns) are attributed to
    the group they share keys with; a key they lack must have a single value in ``dispatches``.
    """
    d = dispatches
    if len(d) == 0:
        raise ValueError("rocprof_timeline needs at least one dispatch")
    keys = [k for k in keys if k in d.columns]
    n = len(d)
    start = d["start_ns"].to_numpy(np.int64)
    end = d["end_ns"].to_numpy(np.int64)
    is_mem = np.zeros(n, dtype=bool)
    frame = d[keys]
    if memory_copies is not None and len(memory_copies):
        mc = memory_copies.copy()
        for k in keys:
            if k not in mc.columns:
                vals = d[k].drop_duplicates()
                if len(vals) != 1:
                    raise ValueError(f"memory copies lack {k!r} and dispatches have several values")
                mc[k] = pd.Series([vals.iloc[0]] * len(mc), index=mc.index, dtype=d[k].dtype)
        frame = pd.concat([frame, mc[keys]], ignore_index=True)
        start = np.concatenate([start, mc["start_ns"].to_numpy(np.int64)])
        end = np.concatenate([end, mc["end_ns"].to_numpy(np.int64)])
        is_mem = np.concatenate([is_mem, np.ones(len(mc), dtype=bool)])
    codes = group_codes(frame, keys)
    tl = GroupedTimeline.build(codes, start, end)
    u_kernel = grouped_union(tl, codes, start, end, ~is_mem)
    u_mem = grouped_union(tl, codes, start, end, is_mem)
    u_all = merge(np.concatenate([u_kernel[0], u_mem[0]]), np.concatenate([u_kernel[1], u_mem[1]]))
    out = _group_frame(frame, codes, keys)
    out["n_dispatches"] = np.bincount(codes[~is_mem], minlength=tl.n_groups)
    if init_ns is not None and fini_ns is not None:
        if fini_ns < init_ns:
            raise ValueError(f"fini_ns {fini_ns} < init_ns {init_ns}")
        out["total_time_ns"] = np.int64(fini_ns - init_ns)
    else:
        out["total_time_ns"] = tl.hi - tl.lo
    out["kernel_time_ns"] = tl.sum_by_group(u_kernel)
    out["memory_time_ns"] = tl.sum_by_group(u_mem)
    out["busy_time_ns"] = tl.sum_by_group(u_all)
    out["idle_time_ns"] = out["total_time_ns"] - out["busy_time_ns"]
    return out


def timeline_ms(timeline: pd.DataFrame) -> pd.DataFrame:
    """View with every ``*_ns`` metric column as float ``*_ms``."""
    out = timeline.copy()
    for c in [c for c in out.columns if c.endswith("_time_ns")]:
        out[c[:-3] + "_ms"] = out.pop(c).astype("float64") / 1e6
    return out


def tracelens_sheet(row: pd.Series, mode: str = "pytorch") -> pd.DataFrame:
    """One group's timeline as TraceLens's ``gpu_timeline`` sheet: ``type, time ms, percent``."""
    rows = tracelens_rows(row, mode)
    return pd.DataFrame({
        "type": [t for t, _, _ in rows],
        "time ms": [ms for _, ms, _ in rows],
        "percent": [pct for _, _, pct in rows],
    })


def tracelens_rows(row: pd.Series | dict[str, float], mode: str = "pytorch") -> list[tuple[str, float, float]]:
    """:func:`tracelens_sheet`'s rows as ``(type, time ms, percent)`` of Python floats, from any
    mapping of the ``*_ns`` columns (a report writes one sheet row per type and group: no frame
    needed on the way)."""
    if mode == "pytorch":
        cols = {t: f"{t}_ns" for t in PYTORCH_TYPES}
    elif mode == "rocprof":
        cols = _ROCPROF_COLS
    else:
        raise ValueError(f"mode must be 'pytorch' or 'rocprof', not {mode!r}")
    total = float(row[cols["total_time"]])
    values = [float(row[c]) for c in cols.values()]
    return [(t, v / 1e6, 100.0 * v / total if total else np.nan) for t, v in zip(cols, values)]


__all__ = ["COMM_PATTERN", "MEMCPY_PATTERN", "gpu_timeline", "rocprof_timeline",
           "timeline_classes", "timeline_ms", "tracelens_rows", "tracelens_sheet"]
