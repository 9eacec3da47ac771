"""Hardware counters: long → wide, joined to timing dispatches, derived metrics.

rocprofv3 collects counter groups in separate passes (separate processes, ``pass``/``pmc_N``),
and dispatch ids restart in each. Counter collection also serialises dispatches, so timings come
from a separate kernel-trace run. Rows are therefore matched by *what* ran, not by id: the same
process identity (point, rank, run, host, agent — not pid, file or pass, which differ between
runs), the same kernel, and the same per-kernel invocation index (n-th call of that kernel in
that process, in dispatch order).
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.intervals import group_codes
from pytest_gemmperf.traces.schema import DISPATCH_KEY

#: Identity of one profiled process across the timing run and the counter passes.
JOIN_IDENTITY = ("point", "rank", "run", "host", "agent")
#: Groups a table into the runs in which dispatch order (and dispatch ids) is defined.
_RUN_KEYS = ("source", "file", "host", "pid", "rank", "point", "run", "pass", "agent")
DERIVED = ("active_cus", "cu_utilization", "waves", "mfma_insts", "valu_insts",
           "wave_cycles_per_wave")


def _codes(frame: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    return group_codes(frame, cols)


@functools.cache
def _counter_name() -> re.Pattern[str]:
    """A counter column's name (``SQ_WAVES``, ``TCC_HIT[3]``), compiled when counters are first
    joined (most inputs have none)."""
    return re.compile(r"^[A-Z][A-Z0-9_]*(\[\d+\])?$")


def counter_columns(frame: pd.DataFrame) -> list[str]:
    """Columns of a wide/joined table that hold raw counter values (upper-case names)."""
    return [c for c in frame.columns if isinstance(c, str) and _counter_name().match(c)]


def wide_counters(counters: pd.DataFrame) -> pd.DataFrame:
    """One row per dispatch key, one float column per counter (NaN where not collected).

    Repeated (dispatch, counter) records are summed, the same reduction rocprofv3 applies over
    dimensions and instances.
    """
    key = [c for c in DISPATCH_KEY if c in counters.columns]
    carry = [c for c in ("kernel_id", "kernel", "start_ns", "end_ns") if c in counters.columns]
    if len(counters) == 0:
        return pd.DataFrame({c: counters[c] for c in key + carry})
    row = _codes(counters, key)
    col, names = pd.factorize(counters["counter"].astype("object"), sort=True)
    n_rows, n_cols = int(row.max()) + 1, len(names)
    flat = row * n_cols + col
    values = counters["value"].to_numpy(np.float64)
    total = np.bincount(flat, weights=values, minlength=n_rows * n_cols)
    seen = np.bincount(flat, minlength=n_rows * n_cols) > 0
    matrix = np.where(seen, total, np.nan).reshape(n_rows, n_cols)
    _, first = np.unique(row, return_index=True)
    out = counters.iloc[first][key + carry].reset_index(drop=True)
    wide = pd.DataFrame(matrix, columns=[str(n) for n in names])
    return pd.concat([out, wide], axis=1)


def invocation_index(frame: pd.DataFrame, *, kernel_col: str = "kernel") -> np.ndarray:
    """0-based n-th invocation of each kernel within its run (process, pass, agent), ordered
    by dispatch id where known, then start time."""
    n = len(frame)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    run = _codes(frame, _RUN_KEYS)
    kern = pd.factorize(frame[kernel_col], use_na_sentinel=False)[0]
    did = (frame["dispatch_id"].astype("Float64").fillna(np.inf).to_numpy(np.float64)
           if "dispatch_id" in frame.columns else np.zeros(n))
    start = (frame["start_ns"].astype("Float64").fillna(np.inf).to_numpy(np.float64)
             if "start_ns" in frame.columns else np.zeros(n))
    order = np.lexsort((start, did, kern, run))
    r, k = run[order], kern[order]
    new = np.r_[True, (r[1:] != r[:-1]) | (k[1:] != k[:-1])]
    first = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) - first
    return out


def _joint_codes(left: pd.DataFrame, right: pd.DataFrame,
                 cols: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes for the ``cols`` combination, shared by both frames (NA matches NA)."""
    both = pd.concat([left[cols].astype("object"), right[cols].astype("object")],
                     ignore_index=True)
    codes = both.groupby(cols, dropna=False, sort=False).ngroup().to_numpy(np.int64)
    return codes[: len(left)], codes[len(left):]


def join_counters(dispatches: pd.DataFrame, counters: pd.DataFrame, *,
                  agents: pd.DataFrame | None = None,
                  identity: Sequence[str] = JOIN_IDENTITY,
                  kernel_col: str = "kernel") -> pd.DataFrame:
    """``dispatches`` (index kept) with every counter as a column and the derived metrics.

    Counter passes of the same process identity are combined first (a counter present in
    several passes keeps the value of the lowest pass number). ``counter_passes`` says how many
    passes matched each dispatch (0: none).
    """
    wide = wide_counters(counters)
    names = counter_columns(wide)
    ident = [c for c in identity if c in dispatches.columns and c in wide.columns]
    wide["_inv"] = invocation_index(wide, kernel_col=kernel_col)
    disp = dispatches.copy()
    disp_inv = invocation_index(disp, kernel_col=kernel_col)
    cols = ident + [kernel_col]
    dcode, wcode = _joint_codes(disp, wide, cols)
    wide["_key"] = wcode
    if "pass" in wide.columns:  # "first pass" means the lowest pass number, not record order
        wide = wide.sort_values("pass", kind="stable", na_position="last")
    disp_key = pd.MultiIndex.from_arrays([dcode, disp_inv])
    grouped = wide.groupby(["_key", "_inv"], sort=False)
    combined = grouped[names].first() if names else pd.DataFrame(index=grouped.size().index)
    combined["counter_passes"] = grouped.size()
    matched = combined.reindex(disp_key)
    for c in names:
        disp[c] = matched[c].to_numpy(np.float64)
    disp["counter_passes"] = matched["counter_passes"].fillna(0).to_numpy(np.int64)
    return add_derived(disp, agents=agents)


def _agent_info(frame: pd.DataFrame, agents: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-row CU and XCC counts from the agents table (GPU index + host), NaN when unknown."""
    n = len(frame)
    nan = np.full(n, np.nan)
    if agents is None or len(agents) == 0 or "agent" not in frame.columns:
        return nan, nan.copy()
    gpus = agents[agents["type"].astype("object") == "GPU"] if "type" in agents.columns else agents
    gpus = gpus.dropna(subset=["gpu_index"])
    by_host = "host" in frame.columns and gpus["host"].notna().any()
    on = ["host", "gpu_index"] if by_host else ["gpu_index"]
    table = (gpus[on + ["cu_count", "xcc_count"]].astype({c: "object" for c in on})
             .drop_duplicates(on))
    left = frame[[c if c != "gpu_index" else "agent" for c in on]].astype("object")
    left.columns = on
    merged = left.merge(table, on=on, how="left")
    return (merged["cu_count"].astype("Float64").to_numpy(np.float64, na_value=np.nan),
            merged["xcc_count"].astype("Float64").to_numpy(np.float64, na_value=np.nan))


def add_derived(frame: pd.DataFrame, *, agents: pd.DataFrame | None = None) -> pd.DataFrame:
    """Derived metrics where their inputs exist (NaN otherwise)."""
    out = frame.copy()
    n = len(out)

    def col(name: str) -> np.ndarray:
        return out[name].to_numpy(np.float64) if name in out.columns else np.full(n, np.nan)

    cu_count, xcc_count = _agent_info(out, agents)
    with np.errstate(divide="ignore", invalid="ignore"):
        # rocprof-compute's numActiveCUs (ROCm/rocprofiler-compute src/utils/utils_common.py
        # BUILD_IN_VARS, also AMDResearch/omniperf src/utils/parser.py):
        #   4 * SQ_BUSY_CU_CYCLES / GRBM_GUI_ACTIVE_PER_XCD, GRBM_GUI_ACTIVE_PER_XCD =
        #   GRBM_GUI_ACTIVE / num_xcd, capped at the CU count. SQ_BUSY_CU_CYCLES counts
        #   quad-cycles summed over CUs, GRBM_GUI_ACTIVE is summed over XCDs. Its extra
        #   rounding to whole waves-per-CU groups is left out: we want a continuous quantity.
        active = 4.0 * col("SQ_BUSY_CU_CYCLES") / (col("GRBM_GUI_ACTIVE") / xcc_count)
        active = np.where(np.isfinite(cu_count), np.minimum(active, cu_count), active)
        out["active_cus"] = np.where(np.isfinite(active), active, np.nan)
        out["cu_utilization"] = out["active_cus"].to_numpy() / cu_count
        out["waves"] = col("SQ_WAVES")
        mfma = col("SQ_INSTS_MFMA")
        valu_mfma = [c for c in out.columns
                     if isinstance(c, str) and c.startswith("SQ_INSTS_VALU_MFMA_")]
        if "SQ_INSTS_MFMA" not in out.columns and valu_mfma:
            parts = out[valu_mfma].to_numpy(np.float64)
            mfma = np.where(np.isnan(parts).all(axis=1), np.nan, np.nansum(parts, axis=1))
        out["mfma_insts"] = mfma
        out["valu_insts"] = col("SQ_INSTS_VALU")
        # in the counter's own unit (quad-cycles on CDNA, per the MI200 counter list)
        out["wave_cycles_per_wave"] = col("SQ_WAVE_CYCLES") / col("SQ_WAVES")
    return out


def counter_summary(joined: pd.DataFrame, by: Sequence[str] = ("point", "kernel")) -> pd.DataFrame:
    """Median of every counter, derived metric and ``dur_ns`` per ``by`` group, with the number
    of dispatches (``count``) and of dispatches that have counters (``n_with_counters``)."""
    by = [c for c in by if c in joined.columns]
    values = counter_columns(joined) + [c for c in DERIVED if c in joined.columns]
    if "dur_ns" in joined.columns:
        values.append("dur_ns")
    frame = joined[by + values].copy()
    has = "counter_passes" in joined.columns
    if has:
        frame["_has"] = (joined["counter_passes"] > 0).to_numpy()
    grp = frame.groupby(by, observed=True, dropna=False, sort=True)
    out = grp[values].median() if values else pd.DataFrame(index=grp.size().index)
    out.insert(0, "count", grp.size())
    if has:
        out.insert(1, "n_with_counters", grp["_has"].sum().astype("int64"))
    return out.reset_index()


__all__ = ["DERIVED", "JOIN_IDENTITY", "add_derived", "counter_columns", "counter_summary",
           "invocation_index", "join_counters", "wide_counters"]
