"""Matching collective kernels across ranks, and the per-collective latency and skew table.

Split from :mod:`pytest_gemmperf.analysis.collectives` (the public entry). Input is a dispatches
table holding every rank of one or more sweep points (``point`` and ``run`` attached by
discovery). PyTorch traces carry the collective metadata that ``traces/torch_trace.py`` appends
(``coll_name, pg_name, pg_ranks, group_size, coll_dtype, in_nelems, out_nelems``); rocprofv3
traces carry none.

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
* ``msg_bytes``, ``algbw_gbps``, ``busbw_gbps``, ``size_bucket``: see
  :mod:`~pytest_gemmperf.analysis.collective_formulas`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.collective_formulas import (algbw_gbps, busbw_factor,
                                                          collective_kind, msg_bytes, size_bucket)
from pytest_gemmperf.errors import GemmperfInputError

#: match rules, in the ``match`` column
MATCH_PG = "process-group order"
MATCH_STREAM = "stream order (no process-group metadata)"
MATCH_KERNEL = "kernel order (no metadata)"

#: the metadata ranks must agree on for one matched collective
_META = ("coll_name", "coll_dtype", "in_nelems", "out_nelems", "group_size")


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
