"""Summary tables of matched collectives: per-group statistics, best sweep point, stragglers,
and aorta's ``nccl_master_all_configs`` sheet.

Split from :mod:`pytest_gemmperf.analysis.collectives` (the public entry). Every table uses only
the ``valid`` collectives (complete on every rank of their group, metadata consistent) of a
:class:`~pytest_gemmperf.analysis.collective_match.CollectiveMatch`, and raises a
:class:`~pytest_gemmperf.errors.GemmperfInputError` when none is left rather than return an
empty table.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.collective_formulas import MB_BYTES
from pytest_gemmperf.analysis.collective_match import CollectiveMatch
from pytest_gemmperf.analysis.variance import parse_point_axes
from pytest_gemmperf.errors import GemmperfInputError

_STATS = ("mean", "median", "min", "max")


def _stats(df: pd.DataFrame, by: Sequence[str], cols: dict[str, str]) -> pd.DataFrame:
    g = df.groupby(list(by), dropna=False, sort=True)
    parts = [g.size().rename("count")]
    for col, out in cols.items():
        a = g[col].agg(list(_STATS))
        a.columns = [f"{out}_{s}" for s in _STATS]
        parts.append(a)
    return pd.concat(parts, axis=1).reset_index()


_SUMMARY_COLS = {"latency_ns": "latency_ns", "start_skew_ns": "start_skew_ns",
                 "end_skew_ns": "end_skew_ns", "algbw_gbps": "algbw_gbps",
                 "busbw_gbps": "busbw_gbps"}


def _valid(coll: pd.DataFrame) -> pd.DataFrame:
    v = coll[coll["valid"]] if "valid" in coll.columns else coll
    if v.empty:
        raise GemmperfInputError(None, "no complete, consistent collective to summarize")
    return v


def collective_summary(collectives: pd.DataFrame,
                       by: Sequence[str] = ("point", "coll_name", "size_bucket")) -> pd.DataFrame:
    """Statistics per group of valid matched collectives (default: point, collective, bucket).

    Columns: ``by``, ``count``, ``n_runs``, ``msg_bytes_min/max``, ``total_latency_ns``, and
    ``{latency_ns, start_skew_ns, end_skew_ns, algbw_gbps, busbw_gbps}_{mean,median,min,max}``.
    """
    v = _valid(collectives)
    out = _stats(v, by, _SUMMARY_COLS)
    g = v.groupby(list(by), dropna=False, sort=True)
    extra = pd.DataFrame({"n_runs": g["run"].nunique(dropna=False),
                          "msg_bytes_min": g["msg_bytes"].min(),
                          "msg_bytes_max": g["msg_bytes"].max(),
                          "total_latency_ns": g["latency_ns"].sum()}).reset_index(drop=True)
    out = pd.concat([out, extra], axis=1)
    first = list(by) + ["count", "n_runs", "msg_bytes_min", "msg_bytes_max", "total_latency_ns"]
    return out[first + [c for c in out.columns if c not in first]]


def best_points(summary: pd.DataFrame, by: Sequence[str] = ("coll_name", "size_bucket"),
                metric: str = "latency_ns_mean") -> pd.DataFrame:
    """aorta's "best config per operation": the point with the lowest ``metric`` per ``by``.

    Adds the worst point and ``worst_over_best`` (how much the choice of point matters).
    """
    s = summary[summary[metric].notna()]
    if s.empty:
        raise GemmperfInputError(None, f"no {metric} to rank points by")
    s = s.sort_values(list(by) + [metric, "point"], kind="stable")
    g = s.groupby(list(by), dropna=False, sort=True)
    best = g.head(1).set_index(list(by))
    worst = s.sort_values(list(by) + [metric, "point"], ascending=[True] * len(by) + [False, True],
                          kind="stable").groupby(list(by), dropna=False, sort=True).head(1).set_index(list(by))
    keep = [c for c in ("point", metric, "busbw_gbps_mean", "algbw_gbps_mean", "count") if c in best.columns]
    out = best[keep].rename(columns={"point": "best_point"})
    out["n_points"] = g["point"].nunique()
    out["worst_point"] = worst["point"]
    out[f"worst_{metric}"] = worst[metric]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["worst_over_best"] = worst[metric] / best[metric]
    return out.reset_index()


def straggler_summary(match: CollectiveMatch, by: Sequence[str] = ("point",)) -> pd.DataFrame:
    """Per (``by``, rank): waits and arrival order over valid collectives (TraceLens
    ``straggler_summary`` columns, in ns; ``mean_wait_ns`` is the skew heat-map cell)."""
    p = match.per_rank[match.per_rank["valid"]]
    if p.empty:
        raise GemmperfInputError(None, "no complete, consistent collective to summarize")
    g = p.groupby(list(by) + ["rank"], dropna=False, sort=True)
    out = pd.DataFrame({
        "n_collectives": g.size(),
        "total_wait_ns": g["wait_ns"].sum(),
        "mean_wait_ns": g["wait_ns"].mean(),
        "max_wait_ns": g["wait_ns"].max(),
        "times_arrived_last": g["is_last"].sum(),
        "times_arrived_first": g["is_first"].sum(),
        "total_coll_dur_ns": g["dur_ns"].sum(),
    })
    out["pct_arrived_last"] = 100.0 * out["times_arrived_last"] / out["n_collectives"]
    return out.reset_index()

# --------------------------------------------------------------------------------------------
# aorta's nccl_master_all_configs


NCCL_MASTER_COLUMNS = (
    "operation_id", "operation_name", "Full msg size (MB)", "In msg nelems",
    "threads_num", "thread_config", "channels_num", "channel_config", "full_config",
    "Collective name", "dtype", "Group size", "count",
    "comm_latency_mean", "comm_latency_median", "comm_latency_min", "comm_latency_max",
    "Total comm latency (ms)",
    "algo bw (GB/s)_mean", "algo bw (GB/s)_median", "algo bw (GB/s)_min", "algo bw (GB/s)_max",
    "bus bw (GB/s)_mean", "bus bw (GB/s)_median", "bus bw (GB/s)_min", "bus bw (GB/s)_max",
    "skew in start time_mean", "skew in start time_median", "skew in start time_min",
    "skew in start time_max",
    "skew in end time_mean", "skew in end time_median", "skew in end time_min",
    "skew in end time_max",
    "Process Group Name", "source_file",
)


def nccl_master_table(match: CollectiveMatch) -> pd.DataFrame:
    """aorta's ``nccl_master_all_configs`` sheet from matched collectives of all points.

    Groups as TraceLens's ``nccl_summary_implicit_sync`` (collective, dtype, input elements,
    process group, group size, full size) per point. Units follow the originals: latencies
    and skews in µs, ``Total comm latency (ms)`` in ms, MB = 2**20 bytes, GB/s = 2**30 B/s.
    ``source_file`` is the directory holding the point's traces. Sorted by operation id,
    threads, channels; ``point`` is appended after aorta's columns.
    """
    v = _valid(match.collectives).copy()
    for c in ("latency_ns", "start_skew_ns", "end_skew_ns"):
        v[c.replace("_ns", "_us")] = v[c] / 1000.0
    by = ["point", "coll_name", "coll_dtype", "in_nelems", "pg_name", "group_size", "msg_bytes"]
    s = _stats(v, by, {"latency_us": "comm_latency", "algbw_gbps": "algo bw (GB/s)",
                       "busbw_gbps": "bus bw (GB/s)", "start_skew_us": "skew in start time",
                       "end_skew_us": "skew in end time"})
    total = v.groupby(by, dropna=False, sort=True)["latency_us"].sum().to_numpy()
    mb = s["msg_bytes"].to_numpy(float) / MB_BYTES
    sizes = np.unique(mb[np.isfinite(mb)])
    op_num = np.searchsorted(sizes, mb) + 1
    axes = parse_point_axes(s["point"])
    files = match.per_rank.groupby("point", sort=True)["file"].agg(_common_dir)
    out = pd.DataFrame({
        "operation_id": [f"OP_{k:02d}" if np.isfinite(x) else "OP_??" for k, x in zip(op_num, mb)],
        "operation_name": [_op_name(x) for x in mb],
        "Full msg size (MB)": mb,
        "In msg nelems": s["in_nelems"],
        "threads_num": axes["threads"],
        "thread_config": [f"{t}thread" if pd.notna(t) else None for t in axes["threads"]],
        "channels_num": axes["channel"],
        "channel_config": [f"{c}ch" if pd.notna(c) else None for c in axes["channel"]],
    })
    out["full_config"] = [f"{t}_{c}" if t and c else p for t, c, p in
                          zip(out["thread_config"], out["channel_config"], s["point"])]
    out["Collective name"] = s["coll_name"]
    out["dtype"] = s["coll_dtype"]
    out["Group size"] = s["group_size"]
    out["count"] = s["count"]
    for col in s.columns:
        if col.startswith(("comm_latency_", "algo bw", "bus bw", "skew in")):
            out[col] = s[col]
    out["Total comm latency (ms)"] = total / 1000.0
    out["Process Group Name"] = s["pg_name"]
    out["source_file"] = s["point"].map(files)
    out["point"] = s["point"]
    out = out[list(NCCL_MASTER_COLUMNS) + ["point"]]
    return out.sort_values(["operation_id", "threads_num", "channels_num", "point"],
                           kind="stable").reset_index(drop=True)


def _op_name(mb: float) -> str:
    if not np.isfinite(mb):
        return "unknown"
    if mb < 0.01:
        return f"tiny_{mb * 1000:.3f}KB"
    if mb < 100:
        return f"medium_{mb:.2f}MB"
    return f"large_{mb:.2f}MB"


def _common_dir(files: pd.Series) -> str | None:
    paths = sorted({os.path.dirname(str(f)) for f in files if f})
    if not paths:
        return None
    try:
        return os.path.commonpath(paths) or paths[0]
    except ValueError:  # mixed absolute/relative paths
        return paths[0]
