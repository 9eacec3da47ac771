"""Collective communication across ranks: matching, latency, skew, bandwidth (issue 6).

Input is a dispatches table holding every rank of one or more sweep points (``point`` and
``run`` attached by discovery). PyTorch traces carry the collective metadata that
``traces/torch_trace.py`` appends (``coll_name, pg_name, pg_ranks, group_size, coll_dtype,
in_nelems, out_nelems``); rocprofv3 traces carry none.

Matching (TraceLens NCCL analyser rules, aorta-pipeline.md §4.4): within one (point, run), the
k-th collective of process group P on one rank is the k-th collective of P on every other rank
of P. Without process-group metadata the channel is the rank's k-th collective stream (TraceLens
"simplified mode"), and without streams the kernel name (rocprofv3); the ``match`` column says
which rule aligned a collective, because order-only alignment cannot detect a rank that missed a
collective when no metadata is there to disagree.

Per matched collective (times are ns; ranks' clocks must be comparable, which holds for ranks
on one host; across hosts skew includes the clock offset):

* ``latency_ns``: minimum duration over ranks (TraceLens ``comm_latency``, "implicit sync": the
  rank that arrives last waits least, so its kernel time is the transfer itself).
* ``max_dur_ns``: the longest rank's kernel (transfer + waiting for the last arrival).
* ``start_skew_ns`` = latest start - earliest start; ``end_skew_ns`` = latest end - earliest
  end; per rank ``wait_ns`` = latest start - own start; ``last_rank`` arrived last.
* ``msg_bytes``: output elements for all-gather, else input elements, times the dtype size.
* ``algbw_gbps`` = msg_bytes / 2**30 / latency_s. TraceLens (hence aorta) divides by 1024**3
  and labels it "GB/s"; the real llama-70B report is reproduced only with 2**30 (tests), so the
  same unit is used here to keep numbers comparable with aorta's sheets.
* ``busbw_gbps`` = algbw * factor: all-reduce 2(n-1)/n; reduce-scatter, all-gather, all-to-all
  (n-1)/n; broadcast and reduce 1 (nccl-tests convention); n = group size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.intervals import (GroupedTimeline, group_codes, grouped_union,
                                                intersect)
from pytest_gemmperf.analysis.variance import parse_point_axes
from pytest_gemmperf.errors import GemmperfInputError

#: TraceLens's "GB" and "MB" (binary), see the module docstring.
GB_BYTES = 2 ** 30
MB_BYTES = 2 ** 20

#: bytes per element for the dtype names ``record_param_comms`` writes (c10 ScalarType names)
DTYPE_BYTES: dict[str, int] = {
    "Bool": 1, "Byte": 1, "Char": 1, "UInt8": 1, "Int8": 1,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
    "Short": 2, "Int16": 2, "UInt16": 2, "Half": 2, "BFloat16": 2,
    "Int": 4, "Int32": 4, "UInt32": 4, "Float": 4, "Float32": 4, "ComplexHalf": 4,
    "Long": 8, "Int64": 8, "UInt64": 8, "Double": 8, "Float64": 8, "ComplexFloat": 8,
    "ComplexDouble": 16,
}

KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "p2p",
         "barrier", "other")

#: match rules, in the ``match`` column
MATCH_PG = "process-group order"
MATCH_STREAM = "stream order (no process-group metadata)"
MATCH_KERNEL = "kernel order (no metadata)"

METRIC_LATENCY = "coll_latency_ns"
METRIC_BUSBW = "coll_busbw_gbps"

_META = ("coll_name", "coll_dtype", "in_nelems", "out_nelems", "group_size")
_STATS = ("mean", "median", "min", "max")


@dataclass
class CollectiveMatch:
    """Result of :func:`match_collectives`."""

    #: one row per (collective, rank): ids, metadata, ``start_ns, end_ns, dur_ns, wait_ns``,
    #: ``is_last, is_first``
    per_rank: pd.DataFrame
    #: one row per matched collective (see the module docstring); ``valid`` = complete and
    #: consistent, the only rows summaries and samples use
    collectives: pd.DataFrame
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# formulas


def collective_kind(names: pd.Series | Sequence[str]) -> np.ndarray:
    """Operation family of PyTorch collective names (``_allgather_base`` -> ``allgather``)."""
    s = pd.Series(names, dtype="object")
    codes, uniq = pd.factorize(s, use_na_sentinel=True)
    kinds = np.asarray([_kind_of(str(u)) for u in uniq] + ["other"], dtype=object)
    return kinds[codes]


def _kind_of(name: str) -> str:
    n = name.lower().replace("_", "").replace(" ", "")
    for needle, kind in (("reducescatter", "reducescatter"), ("allreduce", "allreduce"),
                         ("allgather", "allgather"), ("alltoall", "alltoall"),
                         ("broadcast", "broadcast"), ("barrier", "barrier"),
                         ("send", "p2p"), ("recv", "p2p"), ("reduce", "reduce")):
        if needle in n:
            return kind
    return "other"


def busbw_factor(kinds: Sequence[str] | np.ndarray, group_size) -> np.ndarray:
    """Bus-bandwidth factor per row (NaN where the family has none, or n is unknown)."""
    k = np.asarray(kinds, dtype=object)
    n = pd.to_numeric(pd.Series(np.asarray(group_size, dtype=object)), errors="coerce").to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ring = (n - 1) / n
    out = np.full(len(k), np.nan)
    out = np.where(k == "allreduce", 2 * ring, out)
    out = np.where(np.isin(k, ["allgather", "reducescatter", "alltoall"]), ring, out)
    out = np.where(np.isin(k, ["broadcast", "reduce"]), 1.0, out)
    return np.where(n > 0, out, np.nan)


def msg_bytes(kinds, in_nelems, out_nelems, dtypes) -> np.ndarray:
    """TraceLens "Full msg size" in bytes: output elements for all-gather, else input."""
    k = np.asarray(kinds, dtype=object)
    inn = _float(in_nelems)
    out = _float(out_nelems)
    size = pd.Series(np.asarray(dtypes, dtype=object)).map(DTYPE_BYTES).to_numpy(float)
    return np.where(k == "allgather", out, inn) * size


def algbw_gbps(nbytes, latency_ns) -> np.ndarray:
    """Algorithm bandwidth in TraceLens "GB/s" (2**30 bytes per second)."""
    b = _float(nbytes)
    t = _float(latency_ns)
    with np.errstate(divide="ignore", invalid="ignore"):
        bw = (b / GB_BYTES) / (t / 1e9)
    return np.where(t > 0, bw, np.nan)


def size_bucket(nbytes) -> np.ndarray:
    """Power-of-two message-size bucket label: ``4MiB`` holds sizes in [4 MiB, 8 MiB)."""
    b = _float(nbytes)
    ok = np.isfinite(b) & (b > 0)
    exp = np.where(ok, np.floor(np.log2(np.where(ok, b, 1))), -1).astype(np.int64)
    uniq, inv = np.unique(exp, return_inverse=True)
    labels = np.asarray([_bucket_label(int(e)) for e in uniq], dtype=object)
    out = labels[inv.reshape(-1)]
    return np.where(np.isfinite(b) & (b == 0), "0B", out)


def _bucket_label(exp: int) -> str:
    if exp < 0:
        return "unknown"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if exp >= shift:
            return f"{2 ** (exp - shift)}{unit}"
    return f"{2 ** exp}B"


def _float(values) -> np.ndarray:
    if isinstance(values, pd.Series):
        return pd.to_numeric(values, errors="coerce").astype("Float64").to_numpy(float, na_value=np.nan)
    arr = np.asarray(values)
    if arr.dtype.kind in "fiu":
        return arr.astype(float)
    return _float(pd.Series(arr, dtype="object"))


# --------------------------------------------------------------------------------------------
# matching


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    if name in df.columns:
        return df[name].reset_index(drop=True)
    return pd.Series([None] * len(df), dtype="object")



def _text(s: pd.Series) -> np.ndarray:
    """``str`` of each value as an object array ('-' for missing), one ``str()`` per distinct value."""
    codes, uniq = pd.factorize(s.astype("object"), use_na_sentinel=True)
    labels = np.asarray([str(u) for u in uniq] + ["-"], dtype=object)
    return labels[codes]


def collective_mask(dispatches: pd.DataFrame) -> np.ndarray:
    """Collective kernels: category ``collective`` or torch collective metadata present."""
    m = np.zeros(len(dispatches), dtype=bool)
    if "category" in dispatches.columns:
        m |= (dispatches["category"] == "collective").to_numpy(dtype=bool, na_value=False)
    if "coll_name" in dispatches.columns:
        m |= dispatches["coll_name"].notna().to_numpy()
    return m


def _participants(d: pd.DataFrame) -> np.ndarray:
    """One code per rank: the rank where known, else the (host, pid, agent) that ran it."""
    rank = d["rank"]
    known = rank.notna()
    keys = pd.DataFrame({
        "rank": rank,
        "host": d["host"].astype("object").where(~known, None),
        "pid": d["pid"].astype("object").where(~known, None),
        "agent": d["agent"].astype("object").where(~known, None),
        "file": d["file"].astype("object").where(~known & d["pid"].isna(), None),
    })
    return keys.groupby(list(keys.columns), dropna=False, sort=True).ngroup().to_numpy(np.int64)


def _channels(d: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Matching channel and rule per row: process group, else stream ordinal, else kernel."""
    has_pg = d["pg_name"].notna().to_numpy()
    has_stream = d["stream"].notna().to_numpy()
    # k-th distinct metadata-less collective stream of the rank (ids may differ across ranks,
    # their order does not)
    ordinal = (d[["point", "run", "part", "stream"]]
               .assign(stream=d["stream"].astype("Float64").where(~has_pg))
               .groupby(["point", "run", "part"], dropna=False, sort=False)["stream"]
               .rank(method="dense").to_numpy(float, na_value=np.nan))
    ordinal = np.nan_to_num(ordinal, nan=0).astype(np.int64)
    key = np.where(has_pg, "pg:" + _text(d["pg_name"]),
                   np.where(has_stream, "stream#" + _text(pd.Series(ordinal)),
                            "kernel:" + _text(d["kernel"])))
    rule = np.where(has_pg, MATCH_PG, np.where(has_stream, MATCH_STREAM, MATCH_KERNEL))
    return key.astype(object), rule.astype(object)


def _frame(dispatches: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    src = dispatches[mask]
    d = pd.DataFrame({c: _col(src, c) for c in
                      ("point", "run", "rank", "host", "pid", "agent", "stream", "file", "kernel",
                       "pg_name", "pg_ranks", *_META)})
    d["point"] = d["point"].astype("object").where(d["point"].notna(), "-")
    d["run"] = pd.to_numeric(d["run"], errors="coerce").astype("Int64")
    d["rank"] = pd.to_numeric(d["rank"], errors="coerce").astype("Int64")
    for c in ("in_nelems", "out_nelems", "group_size"):
        d[c] = pd.to_numeric(d[c], errors="coerce").astype("Int64")
    for c in ("coll_name", "coll_dtype", "pg_name", "pg_ranks", "kernel", "file", "host"):
        d[c] = d[c].astype("object").where(d[c].notna(), None)
    d["start_ns"] = src["start_ns"].to_numpy(np.int64)
    d["end_ns"] = src["end_ns"].to_numpy(np.int64)
    d["dur_ns"] = d["end_ns"] - d["start_ns"]
    d["part"] = _participants(d)
    d["key"], d["match"] = _channels(d)
    return d


def match_collectives(dispatches: pd.DataFrame, *, warmup: int = 0, strict: bool = True,
                      mask: np.ndarray | None = None) -> CollectiveMatch:
    """Match the collective kernels of all ranks of each (point, run); see the module docstring.

    ``warmup`` drops the first N collectives of every channel (after matching positions are
    fixed, so ranks stay aligned). ``strict``: ranks that disagree on a matched collective's
    metadata (name, dtype, sizes, group size) mean the traces do not cover the same
    collectives; raise :class:`GemmperfInputError` (else flag ``consistent=False``).
    Incomplete collectives (fewer ranks than the group size, e.g. at the edge of a profiler
    window) are kept, flagged ``complete=False`` and left out of every summary.
    """
    sel = collective_mask(dispatches) if mask is None else np.asarray(mask, dtype=bool)
    if not sel.any():
        raise GemmperfInputError(None, f"no collective kernels among {len(dispatches)} dispatches")
    d = _frame(dispatches, sel)
    d = d.sort_values(["point", "run", "part", "key", "start_ns"], kind="stable", na_position="first")
    d["seq"] = d.groupby(["point", "run", "part", "key"], dropna=False, sort=False).cumcount()
    if warmup:
        d = d[d["seq"] >= warmup]
        if d.empty:
            raise GemmperfInputError(None, f"warm-up of {warmup} removes every collective")
    d["cid"] = d.groupby(["point", "run", "key", "seq"], dropna=False, sort=True).ngroup()
    d = d.sort_values(["cid", "part"], kind="stable").reset_index(drop=True)
    coll, per_rank = _aggregate(d)
    notes = _check(coll, per_rank, strict)
    return CollectiveMatch(per_rank=per_rank, collectives=coll, notes=notes)


def _aggregate(d: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    cid = d["cid"].to_numpy(np.int64)
    bounds = np.flatnonzero(np.r_[True, cid[1:] != cid[:-1]])
    start = d["start_ns"].to_numpy(np.int64)
    end = d["end_ns"].to_numpy(np.int64)
    dur = end - start
    n_ranks = np.diff(np.r_[bounds, len(d)])
    first_start = np.minimum.reduceat(start, bounds)
    last_start = np.maximum.reduceat(start, bounds)
    first_end = np.minimum.reduceat(end, bounds)
    last_end = np.maximum.reduceat(end, bounds)
    min_dur = np.minimum.reduceat(dur, bounds)
    max_dur = np.maximum.reduceat(dur, bounds)
    wait = last_start[cid] - start
    part = d["part"].to_numpy(np.int64)
    # ties in arrival go to the lowest rank
    last_row = np.lexsort((part, -start, cid))[bounds]
    first_row = np.lexsort((part, start, cid))[bounds]

    head = d.iloc[bounds].reset_index(drop=True)
    meta = d.groupby("cid", sort=True)[list(_META) + ["pg_name", "pg_ranks"]].first()
    meta_code = d.groupby(list(_META), dropna=False, sort=False).ngroup().to_numpy()
    consistent = np.minimum.reduceat(meta_code, bounds) == np.maximum.reduceat(meta_code, bounds)
    expected = meta["group_size"].to_numpy(float, na_value=np.nan)
    # without a group size the group is unknown: expect every rank of the (point, run)
    seen = d.groupby(["point", "run"], dropna=False, sort=False)["part"].transform("nunique")
    expected = np.where(np.isnan(expected), seen.to_numpy(float)[bounds], expected)

    kind = collective_kind(meta["coll_name"])
    nbytes = msg_bytes(kind, meta["in_nelems"], meta["out_nelems"], meta["coll_dtype"])
    latency = min_dur.astype(np.int64)
    algbw = algbw_gbps(nbytes, latency)
    rank = d["rank"]
    coll = pd.DataFrame({
        "point": head["point"], "run": head["run"], "collective_id": head["cid"],
        "match": head["match"], "channel": head["key"], "seq": head["seq"],
        "pg_name": meta["pg_name"].to_numpy(object), "pg_ranks": meta["pg_ranks"].to_numpy(object),
        "coll_name": meta["coll_name"].to_numpy(object), "coll_kind": kind,
        "coll_dtype": meta["coll_dtype"].to_numpy(object),
        "in_nelems": meta["in_nelems"].reset_index(drop=True),
        "out_nelems": meta["out_nelems"].reset_index(drop=True),
        "group_size": meta["group_size"].reset_index(drop=True),
        "kernel": head["kernel"],
        "n_ranks": n_ranks, "complete": n_ranks == expected, "consistent": consistent,
        "msg_bytes": nbytes, "size_bucket": size_bucket(nbytes),
        "start_ns": first_start, "end_ns": last_end, "span_ns": last_end - first_start,
        "latency_ns": latency, "max_dur_ns": max_dur,
        "start_skew_ns": last_start - first_start, "end_skew_ns": last_end - first_end,
        "avg_wait_ns": np.add.reduceat(wait, bounds) / n_ranks,
        "first_rank": rank.iloc[first_row].reset_index(drop=True),
        "last_rank": rank.iloc[last_row].reset_index(drop=True),
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * busbw_factor(kind, meta["group_size"]),
    })
    coll["valid"] = coll["complete"] & coll["consistent"]
    coll["coll_name"] = coll["coll_name"].where(coll["coll_name"].notna(),
                                                coll["kernel"].astype("object"))
    is_last = np.zeros(len(d), dtype=bool)
    is_last[last_row] = True
    is_first = np.zeros(len(d), dtype=bool)
    is_first[first_row] = True
    per_rank = d.drop(columns=["part", "key"]).rename(columns={"cid": "collective_id"})
    per_rank["dur_ns"] = dur
    per_rank["wait_ns"] = wait
    per_rank["is_last"] = is_last
    per_rank["is_first"] = is_first
    per_rank["valid"] = coll["valid"].to_numpy()[cid]
    return coll, per_rank


def _check(coll: pd.DataFrame, per_rank: pd.DataFrame, strict: bool) -> list[str]:
    notes: list[str] = []
    bad = ~coll["consistent"].to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        c = coll.iloc[i]
        rows = per_rank[per_rank["collective_id"] == c["collective_id"]]
        desc = "; ".join(f"rank {_s(r['rank'])}: {_s(r['coll_name'])} {_s(r['coll_dtype'])} "
                         f"in {_s(r['in_nelems'])} out {_s(r['out_nelems'])}"
                         for _, r in rows.head(4).iterrows())
        msg = (f"collective #{c['seq']} of {c['channel']} (point {c['point']}, run {_s(c['run'])}): "
               f"ranks disagree on its metadata ({desc}); the rank traces do not cover the same "
               f"collectives (different profiler windows?); {int(bad.sum())} such collectives")
        if strict:
            path = next((f for f in rows["file"] if f), None)
            raise GemmperfInputError(path, msg)
        notes.append(msg)
    incomplete = ~coll["complete"].to_numpy()
    if incomplete.all():
        raise GemmperfInputError(
            None, f"no collective was seen on all ranks of its group (ranks present: "
                  f"{sorted({_s(r) for r in per_rank['rank'].unique()})}, group sizes "
                  f"{sorted({_s(g) for g in coll['group_size'].unique()})}): pass the traces of every rank")
    if incomplete.any():
        notes.append(f"{int(incomplete.sum())} of {len(coll)} collectives were not seen on every rank "
                     "of their group (left out of summaries)")
    order_only = coll["match"] != MATCH_PG
    if order_only.any():
        notes.append(f"{int(order_only.sum())} collectives aligned by per-rank order only "
                     f"({', '.join(sorted(set(coll.loc[order_only, 'match'])))})")
    return notes


def _s(v) -> str:
    return "-" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


# --------------------------------------------------------------------------------------------
# summaries


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


def rocprof_alignment(dispatches: pd.DataFrame, *, warmup: int = 0) -> CollectiveMatch:
    """Cross-rank alignment of collective kernels by per-rank order only (no metadata).

    Every collective carries ``match`` = kernel/stream order; bandwidths are NaN (no sizes);
    latency and skews follow the same definitions as :func:`match_collectives`. A note is
    added where ranks ran different numbers of a kernel, which makes order alignment unsound.
    """
    sel = collective_mask(dispatches)
    stripped = dispatches.drop(columns=[c for c in (*_META, "pg_name", "pg_ranks")
                                        if c in dispatches.columns])
    m = match_collectives(stripped, warmup=warmup, strict=False, mask=sel)
    counts = m.per_rank.groupby(["point", "run", "kernel", "rank"], dropna=False, sort=True).size()
    spread = counts.groupby(level=[0, 1, 2], dropna=False).agg(["min", "max"])
    uneven = spread[spread["min"] != spread["max"]]
    for (point, run, kern), row in uneven.head(5).iterrows():
        m.notes.append(f"point {point} run {_s(run)}: ranks ran {row['min']}..{row['max']} "
                       f"'{kern}' kernels; order alignment of that kernel is unreliable")
    return m


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


__all__ = [
    "CollectiveMatch", "DTYPE_BYTES", "GB_BYTES", "MB_BYTES", "MATCH_KERNEL", "MATCH_PG",
    "MATCH_STREAM", "METRIC_BUSBW", "METRIC_LATENCY", "NCCL_MASTER_COLUMNS", "algbw_gbps",
    "best_points", "busbw_factor", "collective_kind", "collective_mask", "collective_samples",
    "collective_summary", "collective_time_per_rank", "match_collectives", "msg_bytes",
    "nccl_master_table", "rocprof_alignment", "size_bucket", "straggler_summary",
]
