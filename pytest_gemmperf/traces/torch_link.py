"""Linking Kineto GPU events to the CPU ops that launched them (exact int64 ns throughout).

Split from :mod:`pytest_gemmperf.traces.torch_trace`: the id lookups and the time-containment
search. Every time and id here is int64; nothing passes through float64, so epoch-based
nanosecond timestamps (beyond 2**53) keep their last digit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pytest_gemmperf.traces.schema import INT


def lookup(keys: pd.Series, table_keys: pd.Series) -> np.ndarray:
    """Row index in ``table_keys`` (unique) for each key; -1 when absent or key is null."""
    if len(table_keys) == 0:
        return np.full(len(keys), -1, dtype=np.int64)
    # int64 all the way: ids above 2**53 would collide after a float detour
    table = table_keys.to_numpy(dtype=np.int64)
    k = keys if str(keys.dtype) == INT else keys.astype(INT)
    values = k.to_numpy(dtype=np.int64, na_value=0)
    # a binary search of the sorted keys: an index's hash table costs more to build on the few
    # ids of a small trace, and about as much as the sort on many
    order = np.argsort(table, kind="stable")
    ordered = table[order]
    at = np.minimum(np.searchsorted(ordered, values), len(table) - 1)
    found = (ordered[at] == values) & ~k.isna().to_numpy()
    return np.where(found, order[at], -1).astype(np.int64)


def take(col: pd.Series, rows: np.ndarray) -> pd.Series:
    """``col[rows]`` with -1 -> missing, keeping nullable dtypes."""
    if len(col) == 0:
        dtype = col.dtype if str(col.dtype) == INT else object
        return pd.Series([None] * len(rows), dtype=dtype)
    if col.dtype == object:  # numpy's take, None where no row
        vals = col.to_numpy()[np.maximum(rows, 0)]
        vals[rows < 0] = None
        return pd.Series(vals, dtype=object, name=col.name)
    array = col.array
    if isinstance(array, pd.api.extensions.ExtensionArray) and not isinstance(array, pd.arrays.NumpyExtensionArray):
        # nullable and string columns: the array's own take, missing where no row
        return pd.Series(array.take(rows, allow_fill=True), name=col.name)
    # numpy columns (numbers, booleans): missing where no row, as pandas' mask makes it
    return col.iloc[np.where(rows < 0, 0, rows)].reset_index(drop=True).mask(pd.Series(rows < 0))


def innermost_enclosing(op_group: np.ndarray, op_start: np.ndarray, op_end: np.ndarray,
                        pt_group: np.ndarray, pt_time: np.ndarray) -> np.ndarray:
    """Index of the innermost op (per group, e.g. thread) whose [start, end] holds each point.

    Ops on one thread nest like brackets, so the innermost open op at a time is the most recent
    open at the current nesting depth. One sort of open/close/point events, a cumulative sum for
    depth and a segmented running max find it for every point at once. Returns -1 where no op
    encloses the point. Zero-length ops cannot enclose anything and are ignored.
    """
    n_pt = len(pt_time)
    result = np.full(n_pt, -1, dtype=np.int64)
    keep = np.flatnonzero(op_end > op_start)
    if n_pt == 0 or len(keep) == 0:
        return result
    g_op, s, e = op_group[keep], op_start[keep], op_end[keep]
    n = len(keep)
    grp = np.concatenate([g_op, g_op, pt_group])
    time = np.concatenate([s, e, pt_time])
    # at equal times: closes, then opens (outer first), then points
    kind = np.concatenate([np.ones(n), np.zeros(n), np.full(n_pt, 2)])
    # int64 zeros: a float array here would turn the epoch-ns keys into float64 and merge
    # neighbouring nanoseconds
    tie = np.concatenate([-e, -s, np.zeros(n_pt, dtype=np.int64)])
    delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64), np.zeros(n_pt, np.int64)])
    ref = np.concatenate([keep, keep, np.arange(n_pt)])
    order = np.lexsort((tie, kind, time, grp))
    depth = np.cumsum(delta[order])  # per group it returns to 0, so one global cumsum suffices
    is_open = (kind[order] == 1)
    is_pt = (kind[order] == 2)
    sel = np.flatnonzero(is_open | is_pt)
    g2, lvl, op_flag = grp[order][sel], depth[sel], is_open[sel]
    order2 = np.lexsort((np.arange(len(sel)), lvl, g2))
    g3, l3, f3 = g2[order2], lvl[order2], op_flag[order2]
    seg_start = np.ones(len(order2), dtype=bool)
    seg_start[1:] = (g3[1:] != g3[:-1]) | (l3[1:] != l3[:-1])
    seg_first = np.maximum.accumulate(np.where(seg_start, np.arange(len(order2)), 0))
    last_open = np.maximum.accumulate(np.where(f3, np.arange(len(order2)), -1))
    found = f3 == False  # noqa: E712  (points only)
    found &= (last_open >= seg_first) & (l3 > 0)
    pos_pt = np.flatnonzero(found)
    orig = sel[order2]  # index into the sorted event array
    pts = ref[order][orig[pos_pt]]
    ops = ref[order][orig[last_open[pos_pt]]]
    result[pts] = ops
    # improper nesting (rounded timestamps) can break the bracket rule: verify containment
    hit = result >= 0
    r = result[hit]
    ok = (op_start[r] <= pt_time[hit]) & (pt_time[hit] <= op_end[r]) & (op_group[r] == pt_group[hit])
    idx = np.flatnonzero(hit)
    result[idx[~ok]] = -1
    return result


def self_times(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Self time of each op: the part of its [start, end) in which it is the innermost open op
    of its group (thread).

    The group's time line is cut at every start and end; each piece goes to the innermost op
    open at its beginning (:func:`innermost_enclosing`), or to none. Pieces are disjoint, so a
    group's self times sum to the length of the union of its ops, never more, even when
    timestamps nest improperly. int64 throughout.
    """
    n = len(start)
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    pg = np.concatenate([group, group])
    pt = np.concatenate([start, end])
    order = np.lexsort((pt, pg))
    pg, pt = pg[order], pt[order]
    keep = np.ones(len(pt), dtype=bool)
    keep[1:] = (pg[1:] != pg[:-1]) | (pt[1:] != pt[:-1])
    pg, pt = pg[keep], pt[keep]
    # a piece runs from one cut to the next cut of the same group
    last = np.ones(len(pt), dtype=bool)
    last[:-1] = pg[1:] != pg[:-1]
    piece_g, piece_t = pg[~last], pt[~last]
    piece_len = pt[1:][~last[:-1]] - piece_t
    owner = innermost_enclosing(group, start, end, piece_g, piece_t)
    # a piece starting where its op ends lies outside it (improper nesting): nobody's
    has = owner >= 0
    has[has] = end[owner[has]] > piece_t[has]
    np.add.at(out, owner[has], piece_len[has])
    return out


def group_codes(*frames_cols: tuple[pd.Series, pd.Series]) -> list[np.ndarray]:
    """Shared integer codes for (pid, tid) pairs across several frames (missing ids -> -1)."""
    keys = [(p.fillna(-1).to_numpy(dtype=np.int64) << 32) ^ (t.fillna(-1).to_numpy(dtype=np.int64)
                                                              & 0xFFFFFFFF)
            for p, t in frames_cols]
    codes, _ = pd.factorize(np.concatenate(keys))
    out, start = [], 0
    for k in keys:
        out.append(codes[start:start + len(k)])
        start += len(k)
    return out


def enclosing_ops(ops: pd.DataFrame, rt: pd.DataFrame, rt_rows: np.ndarray) -> np.ndarray:
    """Innermost op of ``ops`` around the runtime call of each dispatch (-1 if none)."""
    n = len(rt_rows)
    if len(ops) == 0 or len(rt) == 0:
        return np.full(n, -1, dtype=np.int64)
    valid = ops["ts_ns"].notna() & ops["dur_ns"].notna()
    ops = ops[valid]
    op_codes, rt_codes = group_codes((ops["pid"], ops["tid"]), (rt["pid"], rt["tid"]))
    s = ops["ts_ns"].to_numpy(dtype=np.int64)
    e = s + ops["dur_ns"].to_numpy(dtype=np.int64)
    per_rt = innermost_enclosing(op_codes, s, e, rt_codes, rt["ts_ns"].to_numpy(dtype=np.int64))
    per_rt = np.where(per_rt >= 0, ops.index.to_numpy()[np.maximum(per_rt, 0)], -1)
    return np.where(rt_rows >= 0, per_rt[np.maximum(rt_rows, 0)], -1)


def link_ops(df: pd.DataFrame, ops: pd.DataFrame, rt: pd.DataFrame, rt_row: np.ndarray,
              rt_ext: pd.Series) -> np.ndarray:
    """Row in ``ops`` of the op that launched each dispatch (-1 if none): the dispatch's own
    External id, else its runtime call's, else the innermost op enclosing the runtime call."""
    if len(ops) == 0:
        return np.full(len(df), -1, dtype=np.int64)
    by_ext = ops["external_id"].dropna()
    by_ext = by_ext[~by_ext.duplicated()]
    row = np.full(len(df), -1, dtype=np.int64)
    if len(by_ext):  # traces without External ids (older Kineto) link by time alone
        op_rows = by_ext.index.to_numpy()
        keys = pd.Series(by_ext.to_numpy())
        row = lookup(df["_ext"], keys)
        row = np.where(row >= 0, op_rows[np.maximum(row, 0)], -1)
        row2 = lookup(rt_ext, keys)
        row2 = np.where(row2 >= 0, op_rows[np.maximum(row2, 0)], -1)
        row = np.where(row >= 0, row, row2)
    missing = row < 0
    if missing.any():
        row = np.where(missing, enclosing_ops(ops, rt, rt_row), row)
    return row
