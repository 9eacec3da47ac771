"""Build the gate's samples table (``point, kernel, metric, unit, value``) from dispatches.

The unit is one profiled process, ``host/pid/rank/run`` (ARCHITECTURE.md "The process unit";
missing parts are written ``-``). Per dispatch the table holds ``dur_ns``; per unit it holds
``category_total_ns`` for every kernel category (kernel ``category:<cat>``), so that a kernel
replaced by a slower one shows up in the totals even though it appears as "missing + new".
Sums (category totals, computation, exposed communication) are **per step** of the unit
(:func:`unit_steps`): a run with fewer iterations is neither faster nor slower.
Further unit-level metrics (overlap fraction, interference slowdown, exposed communication,
collective metrics) come from analysis tables passed in as already-computed DataFrames, or,
in :func:`gate_samples` (the one function pytest, ``baseline refresh`` and ``gemmperf compare``
use), from the analysis layer, imported inside the function (gate -> analysis is allowed, the
module stays importable without it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.analysis.selection import select_kernels
from pytest_gemmperf.analysis.overlap import category_mask, gemm_overlap
from pytest_gemmperf.analysis.timeline import gpu_timeline
from pytest_gemmperf.analysis import collectives as C

SAMPLE_COLUMNS = ("point", "kernel", "metric", "unit", "value")
#: rows written by :func:`compact_samples`: dispatches per (point, kernel, unit) before
#: compaction; context for the gate, never gated themselves
DISPATCH_COUNT = "dispatch_count"
UNIT_PARTS = ("host", "pid", "rank", "run")
#: optional dispatch columns telling how many steps (iterations) a unit ran; see unit_steps()
STEPS_COLUMN = "profiler_steps"  # per dispatch: ProfilerStep#N ranges in its trace file
STEP_COLUMN = "step"  # per dispatch: id of the step (marker / ROCTx range) it ran in


def _text(s: pd.Series) -> np.ndarray:
    return s.astype(object).where(s.notna(), "-").astype(str).to_numpy()


def unit_ids(df: pd.DataFrame) -> np.ndarray:
    """``host/pid/rank/run`` per row (``-`` for a missing part or column)."""
    if "unit" in df.columns:
        return _text(df["unit"])
    parts = [(_text(df[c]) if c in df.columns else np.full(len(df), "-", dtype=object)) for c in UNIT_PARTS]
    out = parts[0].astype(object)
    for p in parts[1:]:
        out = out + "/" + p
    return out


def _points(df: pd.DataFrame) -> np.ndarray:
    return _text(df["point"]) if "point" in df.columns else np.full(len(df), "-", dtype=object)


@dataclass
class _Prepared:
    """Dispatches reduced to integer codes, in the gate's order (point, unit, kernel, start).

    Codes are ranks of the sorted text labels, so integer order is the labels' order. Only
    dispatches with a positive duration are kept (``zero_dur`` and zero-length ones are
    timestamp artefacts; the log of their duration is undefined).
    """

    point_of: np.ndarray   # per (point, unit) group: point label
    unit_of: np.ndarray    # per (point, unit) group: unit label
    kernels: np.ndarray    # kernel labels, sorted
    categories: np.ndarray  # category labels, sorted
    rows: np.ndarray       # positions in the input, sorted
    pu: np.ndarray         # per kept row: (point, unit) group code
    kernel: np.ndarray     # per kept row: kernel code
    category: np.ndarray   # per kept row: category code
    value: np.ndarray      # per kept row: dur_ns as float
    pos: np.ndarray        # per kept row: position in its (point, unit, kernel) after warm-up
    pu_row: np.ndarray     # per input row: (point, unit) group code
    full_key: np.ndarray = None   # sorted (point, unit) * n_kernels + kernel keys before warm-up
    full_count: np.ndarray = None  # dispatches per full_key before warm-up (positive durations)


def _sorted_factor(col: pd.Series, missing: str) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, sorted distinct labels); one ``str()`` per distinct value."""
    codes, uniq = pd.factorize(col, use_na_sentinel=True)
    lab = [str(u) for u in uniq]
    if (codes < 0).any():
        codes = np.where(codes < 0, len(lab), codes)
        lab.append(missing)
    labels, inv = np.unique(np.asarray(lab, dtype=object), return_inverse=True)
    return inv.reshape(-1)[codes].astype(np.int64), labels


def _unit_groups(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group code per row, point label and unit label per group); groups sorted by (point,
    unit). Labels come from :func:`_points` / :func:`unit_ids` on one row per group, the same
    functions that label analysis tables, so unit ids agree everywhere."""
    n = len(df)
    cols = [c for c in ("point", *(("unit",) if "unit" in df.columns else UNIT_PARTS)) if c in df.columns]
    if not cols or n == 0:
        gid = np.zeros(n, dtype=np.int64)
    else:
        gid = df.groupby(cols, observed=True, dropna=False, sort=False).ngroup().to_numpy(np.int64)
    _, first = np.unique(gid, return_index=True)
    heads = df.iloc[first]
    point_lab = _points(heads)
    unit_lab = unit_ids(heads)
    # "\x1f" sorts below every printable character: joined order == (point, unit) order, and
    # groups whose raw keys differ but print the same (1 and "1") become one unit
    joined = np.asarray(point_lab, dtype=object) + "\x1f" + np.asarray(unit_lab, dtype=object)
    uniq, first_of, inv = np.unique(joined, return_index=True, return_inverse=True)
    return (inv.reshape(-1)[gid].astype(np.int64), np.asarray(point_lab, dtype=object)[first_of],
            np.asarray(unit_lab, dtype=object)[first_of])


def _prepare(dispatches: pd.DataFrame, warmup: int) -> _Prepared:
    for col in ("kernel", "dur_ns", "start_ns"):
        if col not in dispatches.columns:
            raise GemmperfInputError(None, f"dispatches table lacks column {col!r}")
    pu_row, point_of, unit_of = _unit_groups(dispatches)
    kcode, klab = _sorted_factor(dispatches["kernel"], "nan")
    if "category" in dispatches.columns:
        ccode, clab = _sorted_factor(dispatches["category"], "-")
    else:
        ccode, clab = np.zeros(len(dispatches), np.int64), np.asarray(["other"], dtype=object)
    start = dispatches["start_ns"].to_numpy(np.int64)
    value = dispatches["dur_ns"].to_numpy(np.int64).astype(float)
    ok = value > 0
    if "zero_dur" in dispatches.columns:
        ok &= ~dispatches["zero_dur"].to_numpy(bool)
    idx = np.flatnonzero(ok)
    rows = idx[np.lexsort((start[idx], kcode[idx], pu_row[idx]))]  # stable: ties keep input order
    pu, kern = pu_row[rows], kcode[rows]
    new = np.r_[True, (pu[1:] != pu[:-1]) | (kern[1:] != kern[:-1])] if len(rows) else np.zeros(0, bool)
    run_start = np.flatnonzero(new)
    pos = np.arange(len(rows)) - run_start[np.cumsum(new) - 1] if len(rows) else np.zeros(0, np.int64)
    full_key, full_count = np.unique(pu * len(klab) + kern, return_counts=True)
    if warmup:
        keep = pos >= warmup
        rows, pu, kern, pos = rows[keep], pu[keep], kern[keep], pos[keep] - warmup
    return _Prepared(point_of=point_of, unit_of=unit_of, kernels=klab, categories=clab, rows=rows,
                     pu=pu, kernel=kern, category=ccode[rows], value=value[rows], pos=pos,
                     pu_row=pu_row, full_key=full_key, full_count=full_count)


def _cap(p: _Prepared, max_per_unit: int | None) -> np.ndarray:
    """Mask of the kept rows after the per-(point, unit, kernel) cap."""
    if not max_per_unit:
        return np.ones(len(p.rows), dtype=bool)
    key = p.pu * len(p.kernels) + p.kernel
    _, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
    n = counts[inv.reshape(-1)]
    k = int(max_per_unit)
    pos = p.pos
    # keep positions round(j (n-1)/(k-1)), j = 0..k-1: evenly spaced over the run
    with np.errstate(divide="ignore", invalid="ignore"):
        j = np.rint(pos * (k - 1) / np.maximum(n - 1, 1))
        back = np.rint(j * (n - 1) / max(k - 1, 1))
    return (n <= k) | (back == pos) if k > 1 else (pos == (n - 1) // 2)


def _dur_frame(p: _Prepared, mask: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"point": p.point_of[p.pu[mask]], "kernel": p.kernels[p.kernel[mask]],
                         "metric": "dur_ns", "unit": p.unit_of[p.pu[mask]], "value": p.value[mask]})


def _count_frame(p: _Prepared, mask: np.ndarray) -> pd.DataFrame:
    """``dispatch_count`` rows, as :func:`compact_samples` writes them."""
    key = p.pu[mask] * len(p.kernels) + p.kernel[mask]
    uniq, n = np.unique(key, return_counts=True)
    pu, kern = uniq // len(p.kernels), uniq % len(p.kernels)
    return pd.DataFrame({"point": p.point_of[pu], "kernel": p.kernels[kern], "metric": DISPATCH_COUNT,
                         "unit": p.unit_of[pu], "value": n.astype(float)})


def _category_frame(p: _Prepared, steps: np.ndarray) -> pd.DataFrame:
    """``category_total_ns`` per (point, unit, category): GPU time per step of the unit.

    Each kernel contributes its kept (post-warm-up) time scaled by ``dispatches / kept
    dispatches`` -- its warm-up dispatches count at the kernel's steady-state mean, since the
    steps they belong to are in ``steps`` -- and the unit's sum is divided by its step count
    (``steps[pu]``, :func:`unit_steps`)."""
    n_k, n_c = len(p.kernels), len(p.categories)
    pk = p.pu * n_k + p.kernel
    kept_key, inv_k = np.unique(pk, return_inverse=True)
    kept_sum = np.bincount(inv_k.reshape(-1), weights=p.value, minlength=len(kept_key))
    kept_n = np.bincount(inv_k.reshape(-1), minlength=len(kept_key))
    full_n = p.full_count[np.searchsorted(p.full_key, kept_key)]
    pu_k = kept_key // n_k
    cat_k = np.zeros(n_k, np.int64)
    cat_k[p.kernel] = p.category  # a kernel name has one category (categorize() of its name)
    key = pu_k * n_c + cat_k[kept_key % n_k]
    uniq, inv = np.unique(key, return_inverse=True)
    tot = np.bincount(inv.reshape(-1), weights=kept_sum * full_n / kept_n, minlength=len(uniq))
    pu, cat = uniq // n_c, uniq % n_c
    return pd.DataFrame({"point": p.point_of[pu], "kernel": "category:" + p.categories[cat].astype(object),
                         "metric": "category_total_ns", "unit": p.unit_of[pu],
                         "value": tot.astype(float) / steps[pu]})


def _finish(frames: list[pd.DataFrame]) -> pd.DataFrame:
    out = pd.concat(frames, ignore_index=True)
    for c in ("point", "kernel", "metric", "unit"):
        out[c] = out[c].astype(str)
    return out[list(SAMPLE_COLUMNS)]


def samples_from_dispatches(dispatches: pd.DataFrame, warmup: int = 0, max_per_unit: int | None = None,
                            *, unit_metrics: Mapping[str, pd.DataFrame] | None = None,
                            categories: bool = True) -> pd.DataFrame:
    """Samples table of a canonical dispatches table.

    * ``warmup``: drop the first N dispatches of every (point, unit, kernel) in start order.
    * ``zero_dur`` dispatches are left out of ``dur_ns`` (timestamp artefacts; log undefined).
    * ``max_per_unit``: keep at most K evenly spaced dispatches per (point, unit, kernel) in
      start order, so long runs do not dominate memory; the median is barely affected.
    * category totals are summed over the kept dispatches after warm-up, before the cap, per
      step of the unit (:func:`unit_steps`).
    * ``unit_metrics``: ``{metric: frame}``, each frame one row per unit with the unit columns
      (``host, pid, rank, run`` or ``unit``), optional ``point`` and ``kernel`` (default
      ``*``) and a ``value`` column (or a column named like the metric); see
      :func:`unit_metric_samples`.

    The gate itself uses :func:`gate_samples`, which adds the kernel selection and the
    analysis metrics on top of these rows.
    """
    p = _prepare(dispatches, warmup)
    frames = [_dur_frame(p, _cap(p, max_per_unit))]
    if categories and len(p.rows):
        frames.append(_category_frame(p, unit_steps(dispatches, p)[0]))
    for metric, frame in (unit_metrics or {}).items():
        frames.append(unit_metric_samples(frame, metric))
    return _finish(frames)


# --------------------------------------------------------------------------------------------
# the gate's samples: one function for pytest, ``baseline refresh`` and ``gemmperf compare``

#: unit-level metrics :func:`gate_samples` adds (besides ``category_total_ns``)
OVERLAP_FRACTION = "overlap_fraction"
INTERFERENCE = "interference_slowdown"
EXPOSED_COMM = "exposed_comm_ns"
COMPUTATION = "computation_ns"
GEMM_KERNEL = "category:gemm"


def gate_samples(dispatches: pd.DataFrame, *, kernels: Sequence[str] | None = None, warmup: int = 0,
                 compact: bool = True, path: str | os.PathLike | None = None) -> pd.DataFrame:
    """Everything the gate compares for a dispatches table (one or more points).

    * ``dur_ns`` per dispatch of the kernels the ``kernels`` regexes select
      (:func:`~pytest_gemmperf.analysis.selection.select_kernels`; all kernels when None),
      after ``warmup`` dispatches per (point, unit, kernel).
    * ``category_total_ns`` per unit and category over ALL dispatches of the point (after the
      same warm-up), so a gated kernel replaced by a slower, differently named one shows up
      as a category regression, not only as "missing" + "new". Per step of the unit
      (:func:`unit_steps`), like ``exposed_comm_ns`` and ``computation_ns``: a candidate that
      runs fewer iterations reads the same. ``samples.attrs["steps"]`` (columns as lists:
      point, unit, steps, source) holds the step count of every unit and where it came from.
    * Per unit, on points that have both GEMM and collective dispatches (categories):
      ``overlap_fraction`` (kernel ``category:gemm``; GEMM time covered by same-GPU
      collectives / GEMM time, higher is better) and ``interference_slowdown`` (the unit's
      per-kernel ratios median overlapped / median isolated GEMM duration, geometric mean
      weighted by dispatch count; absent when no GEMM both overlapped and ran alone).
    * Per unit, on points with communication kernels (the timeline's rule):
      ``exposed_comm_ns`` and ``computation_ns`` (kernel ``*``; TraceLens definitions, whole
      trace: a timeline has no per-kernel warm-up), per step.
    * When the dispatches carry torch collective metadata (``coll_name``): ``coll_latency_ns``
      and ``coll_busbw_gbps`` per (point, ``<collective>:<size bucket>``), the unit being the
      whole multi-rank run (``-/-/-/<run>``); collectives that cannot be matched across ranks
      (one rank's trace only) are skipped with a note in ``samples.attrs["notes"]``.
    * ``compact``: shrink ``dur_ns`` rows with :func:`compact_samples` (what a baseline stores).
    """
    if len(dispatches) == 0:
        raise GemmperfInputError(path, "no dispatches")
    d = dispatches.reset_index(drop=True)
    if "end_ns" not in d.columns and {"start_ns", "dur_ns"} <= set(d.columns):
        d = d.assign(end_ns=d["start_ns"].to_numpy(np.int64) + d["dur_ns"].to_numpy(np.int64))
    p = _prepare(d, warmup)
    wanted = np.ones(len(p.kernels), dtype=bool)
    if kernels:
        hit = select_kernels(pd.DataFrame({"kernel": pd.Categorical(p.kernels)}), kernels, path)
        wanted = np.isin(p.kernels, hit["kernel"].astype(object).to_numpy())
        if not wanted.any():
            seen = ", ".join(map(str, p.kernels[:10]))
            raise GemmperfInputError(path, f"no dispatch matches the kernel regexes "
                                           f"({', '.join(map(str, kernels))}); kernels seen: {seen}")
    notes: list[str] = []
    dur = wanted[p.kernel]
    if not dur.any():
        raise GemmperfInputError(path, f"no dispatch of the gated kernels left after a warm-up of {warmup} "
                                       "per kernel and process; profile more steps or lower the warm-up")
    frames = [_dur_frame(p, _compact_order(p, dur) if compact else dur)]
    if compact:
        frames.append(_count_frame(p, dur))
    steps, source = unit_steps(d, p)
    if len(p.rows):
        frames.append(_category_frame(p, steps))
    frames += _overlap_frames(d, p)
    frames += _timeline_frames(d, p, steps)
    frames += _collective_frames(d, warmup, notes)
    out = _finish(frames)
    out.attrs["notes"] = notes + _steps_notes(source)
    # plain lists, not a DataFrame: pandas compares attrs when concatenating tables
    out.attrs["steps"] = {"point": [str(x) for x in p.point_of], "unit": [str(x) for x in p.unit_of],
                          "steps": [float(x) for x in steps], "source": [str(x) for x in source]}
    return out


#: where a unit's step count came from (``samples.attrs["steps"]["source"]``)
STEPS_PROFILER = "ProfilerStep ranges"
STEPS_MARKERS = "step ranges"
STEPS_ESTIMATED = "estimated: median dispatches per kernel"


def unit_steps(d: pd.DataFrame, p: _Prepared) -> tuple[np.ndarray, np.ndarray]:
    """(steps, source) per (point, unit) group of ``p``: the unit of work sums are divided by.

    In order of preference:

    1. ``profiler_steps`` (per dispatch, the number of PyTorch ``ProfilerStep#N`` ranges in its
       trace file; the torch backend adds it): summed over the unit's files.
    2. ``step`` (per dispatch, the id of the marker / ROCTx range it ran in): distinct ids.
    3. Otherwise an estimate: the median, over the unit's kernels, of each kernel's dispatch
       count (before warm-up). A step loop launches every kernel a fixed number of times per
       step, so every count -- and their median -- is proportional to the steps run; the
       median (not the total count) keeps a few added, removed or renamed kernels from moving
       it. It is a step of "the median kernel's launches", not an iteration: comparable
       between runs of the same workload, which is what the gate needs.
    """
    n_pu = len(p.point_of)
    steps = np.full(n_pu, np.nan)
    source = np.full(n_pu, "", dtype=object)
    if STEPS_COLUMN in d.columns:
        v = pd.to_numeric(d[STEPS_COLUMN], errors="coerce").to_numpy(float)
        f = (pd.factorize(d["file"])[0] if "file" in d.columns else np.zeros(len(d), np.int64))
        g = pd.DataFrame({"pu": p.pu_row, "f": f, "v": v}).dropna()
        per = g.groupby(["pu", "f"], sort=False)["v"].max().groupby(level="pu").sum()
        per = per[per > 0]
        steps[per.index.to_numpy(np.int64)] = per.to_numpy(float)
        source[per.index.to_numpy(np.int64)] = STEPS_PROFILER
    todo = np.isnan(steps)
    if todo.any() and STEP_COLUMN in d.columns:
        g = pd.DataFrame({"pu": p.pu_row, "s": d[STEP_COLUMN].to_numpy(object)}).dropna()
        g = g[todo[g["pu"].to_numpy(np.int64)]]
        per = g.groupby("pu", sort=False)["s"].nunique()
        per = per[per > 0]
        steps[per.index.to_numpy(np.int64)] = per.to_numpy(float)
        source[per.index.to_numpy(np.int64)] = STEPS_MARKERS
    todo = np.isnan(steps)
    if todo.any() and len(p.full_key):
        pu = p.full_key // max(len(p.kernels), 1)
        med = pd.Series(p.full_count.astype(float)).groupby(pu).median()
        idx = med.index.to_numpy(np.int64)
        sel = todo[idx]
        steps[idx[sel]] = med.to_numpy(float)[sel]
        source[idx[sel]] = STEPS_ESTIMATED
    left = np.isnan(steps)
    steps[left] = 1.0  # no positive dispatch at all: nothing is summed for this unit
    source[left] = "none"
    return steps, source


def _steps_notes(source: np.ndarray) -> list[str]:
    if (source == STEPS_ESTIMATED).any():
        return ["sums (category totals, computation, exposed communication) are per step, the steps "
                "estimated from dispatch counts (no ProfilerStep or marker ranges in the trace)"]
    return []


def _compact_order(p: _Prepared, mask: np.ndarray, per_unit: int = 21) -> np.ndarray:
    """Kept-row indices :func:`compact_samples` would keep, on codes (no text sort)."""
    idx = np.flatnonzero(mask)
    idx = idx[np.lexsort((p.value[idx], p.kernel[idx], p.pu[idx]))]
    key = p.pu[idx] * len(p.kernels) + p.kernel[idx]
    new = np.r_[True, key[1:] != key[:-1]] if len(idx) else np.zeros(0, bool)
    first = np.flatnonzero(new)
    gid = np.cumsum(new) - 1
    n = np.diff(np.r_[first, len(idx)])[gid]
    pos = np.arange(len(idx)) - first[gid]
    return idx[_kept_quantile_positions(n, pos, per_unit)]


def _kept_quantile_positions(n: np.ndarray, pos: np.ndarray, k: int) -> np.ndarray:
    """Which sorted positions ``pos`` of groups of size ``n`` are the K quantiles kept.

    Kept positions are floor((j + 1/2) n / K), j = 0..K-1 (distinct when n > K); in integers
    the only candidate j for position pos is ceil((2 pos K - n) / 2n). Groups of at most K
    values are kept whole.
    """
    j = -((n - 2 * pos * k) // (2 * n))
    return (n <= k) | ((j >= 0) & (j < k) & (((2 * j + 1) * n) // (2 * k) == pos))


def _points_with(p: _Prepared, pu_row: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per (point, unit) group: does its point have a row in ``mask``?"""
    hit = np.zeros(len(p.point_of), dtype=bool)
    hit[np.unique(pu_row[mask])] = True
    points = np.unique(p.point_of[hit])
    return np.isin(p.point_of, points)


def _overlap_frames(d: pd.DataFrame, p: _Prepared) -> list[pd.DataFrame]:
    if "category" not in d.columns or "end_ns" not in d.columns:
        return []
    gm = category_mask(d, None, "gemm")
    cm = category_mask(d, None, "collective")
    both = _points_with(p, p.pu_row, gm) & _points_with(p, p.pu_row, cm)
    if not both.any():
        return []
    ov = gemm_overlap(d, names=False)
    kept = np.zeros(len(d), dtype=bool)
    kept[p.rows] = True  # positive duration, after warm-up
    rows = ov.index.to_numpy()
    sel = kept[rows] & both[p.pu_row[rows]]
    rows = rows[sel]
    if len(rows) == 0:
        return []
    pu = p.pu_row[rows]
    kern = np.zeros(len(d), dtype=np.int64)
    kern[p.rows] = p.kernel
    dur = ov["dur_ns"].to_numpy(float)[sel]
    cov = ov["overlap_ns"].to_numpy(float)[sel]
    n_pu = len(p.point_of)
    tot = np.bincount(pu, weights=dur, minlength=n_pu)
    has = np.bincount(pu, minlength=n_pu) > 0
    frac = np.bincount(pu, weights=cov, minlength=n_pu)[has] / tot[has]
    frames = [pd.DataFrame({"point": p.point_of[has], "kernel": GEMM_KERNEL, "metric": OVERLAP_FRACTION,
                            "unit": p.unit_of[has], "value": frac})]
    g = pd.DataFrame({"pu": pu, "k": kern[rows], "ov": cov > 0, "dur": dur})
    med = g.groupby(["pu", "k", "ov"], sort=True)["dur"].agg(["median", "size"]).unstack("ov")
    if True in med["median"].columns and False in med["median"].columns:
        ratio = np.log(med["median"][True] / med["median"][False])
        weight = med["size"][True].fillna(0) + med["size"][False].fillna(0)
        ok = ratio.notna()
        if ok.any():
            num = (ratio[ok] * weight[ok]).groupby(level="pu").sum()
            den = weight[ok].groupby(level="pu").sum()
            pu_i = num.index.to_numpy()
            frames.append(pd.DataFrame({"point": p.point_of[pu_i], "kernel": GEMM_KERNEL,
                                        "metric": INTERFERENCE, "unit": p.unit_of[pu_i],
                                        "value": np.exp((num / den).to_numpy(float))}))
    return frames


def _timeline_frames(d: pd.DataFrame, p: _Prepared, steps: np.ndarray) -> list[pd.DataFrame]:
    if "end_ns" not in d.columns:
        return []
    tl = gpu_timeline(d)
    tl = tl.assign(_point=_points(tl), _unit=unit_ids(tl))
    per_unit = tl.groupby(["_point", "_unit"], sort=True)[
        ["exposed_comm_time_ns", "computation_time_ns", "total_comm_time_ns"]].sum()
    comm_points = per_unit.groupby(level="_point")["total_comm_time_ns"].sum()
    per_unit = per_unit[per_unit.index.get_level_values("_point").isin(comm_points[comm_points > 0].index)]
    if per_unit.empty:
        return []
    pt = per_unit.index.get_level_values("_point").to_numpy(object)
    un = per_unit.index.get_level_values("_unit").to_numpy(object)
    by_label = pd.Series(steps, index=pd.MultiIndex.from_arrays([p.point_of, p.unit_of]))
    n = by_label.reindex(pd.MultiIndex.from_arrays([pt, un])).fillna(1.0).to_numpy(float)
    return [pd.DataFrame({"point": pt, "kernel": "*", "metric": m, "unit": un,
                          "value": per_unit[col].to_numpy(float) / n})
            for m, col in ((EXPOSED_COMM, "exposed_comm_time_ns"), (COMPUTATION, "computation_time_ns"))]


def _collective_frames(d: pd.DataFrame, warmup: int, notes: list[str]) -> list[pd.DataFrame]:
    if "coll_name" not in d.columns or not d["coll_name"].notna().any():
        return []

    try:
        match = C.match_collectives(d, warmup=warmup, strict=False)
        out = C.collective_samples(match)
    except GemmperfInputError as exc:
        notes.append(f"collective metrics skipped: {exc}")
        return []
    notes += match.notes
    return [out]


def unit_metric_samples(frame: pd.DataFrame, metric: str, value_col: str | None = None,
                        kernel: str = "*") -> pd.DataFrame:
    """Rows of a unit-level metric (overlap_fraction, interference_slowdown, exposed_comm_ns...).

    ``frame`` is an analysis result with one row per unit (and per kernel, when it has a
    ``kernel`` column). The value column is ``value_col``, else ``value``, else ``metric``.
    """
    col = value_col or ("value" if "value" in frame.columns else metric)
    if col not in frame.columns:
        raise GemmperfInputError(None, f"{metric}: analysis table has no {col!r} column")
    kern = (frame["kernel"].astype(object).astype(str).to_numpy() if "kernel" in frame.columns
            else np.full(len(frame), kernel, dtype=object))
    return pd.DataFrame({"point": _points(frame), "kernel": kern, "metric": metric,
                         "unit": unit_ids(frame),
                         "value": pd.to_numeric(frame[col], errors="coerce").to_numpy(float)}
                        ).dropna(subset=["value"])


def compact_samples(samples: pd.DataFrame, per_unit: int = 21) -> pd.DataFrame:
    """Shrink ``dur_ns`` rows to at most ``per_unit`` quantiles per (point, kernel, unit).

    A baseline store keeps the order statistics at probabilities ``(i + 0.5) / K``: real
    observed values, the same median (exactly, for odd K and odd counts), the same spread and
    tails, so the gate can be re-run on the stored baseline. Unit-level rows pass unchanged.
    """
    if per_unit < 1:
        raise ValueError("per_unit must be >= 1")
    is_dur = (samples["metric"] == "dur_ns").to_numpy()
    dur = samples[is_dur].sort_values(["point", "kernel", "unit", "value"], kind="stable")
    keys = ["point", "kernel", "unit"]
    n = dur.groupby(keys, sort=False)["value"].transform("size").to_numpy()
    pos = dur.groupby(keys, sort=False).cumcount().to_numpy()
    keep = _kept_quantile_positions(n, pos, per_unit)
    # how many dispatches each compacted group stood for: the gate's noise floor for a
    # per-process median depends on it, and it is never gated itself
    counts = (dur.groupby(keys, sort=False, observed=True).size().rename("value").reset_index()
              .assign(metric=DISPATCH_COUNT))
    prior = samples[(samples["metric"] == DISPATCH_COUNT).to_numpy()]
    if len(prior):  # already compacted once: keep the original counts
        counts = counts.iloc[:0]
    out = pd.concat([samples[~is_dur], dur[keep], counts[list(SAMPLE_COLUMNS)]], ignore_index=True)
    return out[list(SAMPLE_COLUMNS)]
