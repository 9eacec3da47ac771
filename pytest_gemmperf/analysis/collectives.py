"""Collective communication across ranks: matching, latency, skew, bandwidth.

The public entry of the collective analysis; the method lives in the modules it re-exports:

* :mod:`~pytest_gemmperf.analysis.collective_match`: matching the k-th collective of a process
  group (or stream, or kernel) across ranks, and the per-collective latency / skew / wait table
  (:func:`match_collectives`, :func:`rocprof_alignment`, :class:`CollectiveMatch`);
* :mod:`~pytest_gemmperf.analysis.collective_formulas`: message sizes, algorithm and bus
  bandwidth (TraceLens units: GB = 2**30 bytes), size buckets;
* :mod:`~pytest_gemmperf.analysis.collective_tables`: summaries, best points, stragglers and
  aorta's ``nccl_master_all_configs`` sheet.

This module itself turns matched collectives into gate samples (:func:`collective_samples`)
and gives the per-rank collective time and overlap that needs no metadata
(:func:`collective_time_per_rank`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.collective_formulas import (DTYPE_BYTES, GB_BYTES, MB_BYTES,
                                                          algbw_gbps, busbw_factor,
                                                          collective_kind, msg_bytes, size_bucket)
from pytest_gemmperf.analysis.collective_match import (MATCH_KERNEL, MATCH_PG, MATCH_STREAM,
                                                       CollectiveMatch, _text, collective_mask,
                                                       match_collectives, rocprof_alignment)
from pytest_gemmperf.analysis.collective_tables import (NCCL_MASTER_COLUMNS, _valid, best_points,
                                                        collective_summary, nccl_master_table,
                                                        straggler_summary)
from pytest_gemmperf.analysis.intervals import (GroupedTimeline, group_codes, grouped_union,
                                                intersect)
from pytest_gemmperf.errors import GemmperfInputError

METRIC_LATENCY = "coll_latency_ns"
METRIC_BUSBW = "coll_busbw_gbps"


# --------------------------------------------------------------------------------------------
# gate


def collective_samples(collectives: pd.DataFrame | CollectiveMatch) -> pd.DataFrame:
    """Gate samples (``point, kernel, metric, unit, value``) of valid matched collectives.

    One row per (point, run, ``<coll_name>:<size bucket>``) and metric: the median over the
    run's collectives of ``latency_ns`` (``coll_latency_ns``, lower is better) and of
    ``busbw_gbps`` (``coll_busbw_gbps``, higher is better). The unit is the whole multi-rank
    run, written ``-/-/-/<run>`` in the gate's ``host/pid/rank/run`` form.
    """
    coll = collectives.collectives if isinstance(collectives, CollectiveMatch) else collectives
    v = _valid(coll)
    kernel = _text(v["coll_name"]) + ":" + _text(v["size_bucket"])
    f = pd.DataFrame({"point": _text(v["point"]), "kernel": kernel,
                      "unit": "-/-/-/" + _text(v["run"]),
                      METRIC_LATENCY: v["latency_ns"].to_numpy(float),
                      METRIC_BUSBW: v["busbw_gbps"].to_numpy(float)})
    med = f.groupby(["point", "kernel", "unit"], sort=True)[[METRIC_LATENCY, METRIC_BUSBW]].median()
    out = med.reset_index().melt(id_vars=["point", "kernel", "unit"], var_name="metric",
                                 value_name="value").dropna(subset=["value"])
    return out[["point", "kernel", "metric", "unit", "value"]].reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# per-rank view without metadata (rocprofv3 kernel traces)


RANK_KEYS = ("point", "run", "rank", "host", "pid", "agent")


def collective_time_per_rank(dispatches: pd.DataFrame, keys: Sequence[str] = RANK_KEYS,
                             mask: np.ndarray | None = None) -> pd.DataFrame:
    """Per rank (process-GPU): collective kernel count and time, and their overlap.

    ``coll_kernel_ns`` sums kernel durations; ``coll_busy_ns`` is the union of collective
    intervals (their difference is time collectives ran concurrently with each other,
    ``coll_self_overlap_ns``); ``overlapped_ns`` is the part of the union covered by
    non-collective kernels of the same GPU, ``exposed_ns`` the rest. Works for any trace; for
    rocprofv3 this is what can be said without message sizes.
    """
    sel = collective_mask(dispatches) if mask is None else np.asarray(mask, dtype=bool)
    if not sel.any():
        raise GemmperfInputError(None, f"no collective kernels among {len(dispatches)} dispatches")
    keys = [k for k in keys if k in dispatches.columns]
    codes = group_codes(dispatches, keys)
    start = dispatches["start_ns"].to_numpy(np.int64)
    end = dispatches["end_ns"].to_numpy(np.int64)
    tl = GroupedTimeline.build(codes, start, end)
    coll_u = grouped_union(tl, codes, start, end, mask=sel)
    other_u = grouped_union(tl, codes, start, end, mask=~sel)
    busy = tl.sum_by_group(coll_u)
    overlapped = tl.sum_by_group(intersect(coll_u, other_u))
    n = np.bincount(codes[sel], minlength=tl.n_groups)
    ksum = np.bincount(codes[sel], weights=(end - start)[sel], minlength=tl.n_groups).astype(np.int64)
    _, first = np.unique(codes, return_index=True)
    out = dispatches.iloc[first][keys].reset_index(drop=True)
    out["n_collectives"] = n
    out["coll_kernel_ns"] = ksum
    out["coll_busy_ns"] = busy
    out["coll_self_overlap_ns"] = ksum - busy
    out["overlapped_ns"] = overlapped
    out["exposed_ns"] = busy - overlapped
    with np.errstate(divide="ignore", invalid="ignore"):
        out["overlap_fraction"] = np.where(busy > 0, overlapped / np.maximum(busy, 1), np.nan)
    return out[out["n_collectives"] > 0].reset_index(drop=True)


__all__ = [
    "CollectiveMatch", "DTYPE_BYTES", "GB_BYTES", "MB_BYTES", "MATCH_KERNEL", "MATCH_PG",
    "MATCH_STREAM", "METRIC_BUSBW", "METRIC_LATENCY", "NCCL_MASTER_COLUMNS", "algbw_gbps",
    "best_points", "busbw_factor", "collective_kind", "collective_mask", "collective_samples",
    "collective_summary", "collective_time_per_rank", "match_collectives", "msg_bytes",
    "nccl_master_table", "rocprof_alignment", "size_bucket", "straggler_summary",
]
