"""Dispatches reduced to the codes every metric builder works on: process units, kernels, steps.

The gate's independent unit is one profiled process, ``host/pid/rank/run`` (ARCHITECTURE.md
"The process unit"; missing parts are written ``-``). :func:`prepare` turns a dispatches table
into integer codes in the gate's order (point, unit, kernel, start), drops warm-up dispatches
and remembers the dispatch counts before warm-up; :func:`unit_steps` tells how many steps
(iterations) each unit ran, the divisor of the per-step sums. The builders of
``gate/metrics.py`` read these, and ``gate/samples.py`` assembles their rows into the samples
table (:data:`SAMPLE_COLUMNS`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate import SAMPLE_COLUMNS  # noqa: F401 - public here too
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


def point_labels(df: pd.DataFrame) -> np.ndarray:
    """Point label per row (``-`` for a missing value or column)."""
    return _text(df["point"]) if "point" in df.columns else np.full(len(df), "-", dtype=object)


@dataclass
class Prepared:
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
    unit). Labels come from :func:`point_labels` / :func:`unit_ids` on one row per group, the same
    functions that label analysis tables, so unit ids agree everywhere."""
    n = len(df)
    cols = [c for c in ("point", *(("unit",) if "unit" in df.columns else UNIT_PARTS)) if c in df.columns]
    if not cols or n == 0:
        gid = np.zeros(n, dtype=np.int64)
    else:
        gid = df.groupby(cols, observed=True, dropna=False, sort=False).ngroup().to_numpy(np.int64)
    _, first = np.unique(gid, return_index=True)
    heads = df.iloc[first]
    point_lab = point_labels(heads)
    unit_lab = unit_ids(heads)
    # "\x1f" sorts below every printable character: joined order == (point, unit) order, and
    # groups whose raw keys differ but print the same (1 and "1") become one unit
    joined = np.asarray(point_lab, dtype=object) + "\x1f" + np.asarray(unit_lab, dtype=object)
    uniq, first_of, inv = np.unique(joined, return_index=True, return_inverse=True)
    return (inv.reshape(-1)[gid].astype(np.int64), np.asarray(point_lab, dtype=object)[first_of],
            np.asarray(unit_lab, dtype=object)[first_of])


def prepare(dispatches: pd.DataFrame, warmup: int) -> Prepared:
    """The codes of ``dispatches``, without the first ``warmup`` dispatches of every (point,
    unit, kernel) in start order."""
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
    return Prepared(point_of=point_of, unit_of=unit_of, kernels=klab, categories=clab, rows=rows,
                    pu=pu, kernel=kern, category=ccode[rows], value=value[rows], pos=pos,
                    pu_row=pu_row, full_key=full_key, full_count=full_count)


#: where a unit's step count came from (``samples.attrs["steps"]["source"]``)
STEPS_PROFILER = "ProfilerStep ranges"
STEPS_MARKERS = "step ranges"
STEPS_ESTIMATED = "estimated: median dispatches per kernel"


def unit_steps(d: pd.DataFrame, p: Prepared) -> tuple[np.ndarray, np.ndarray]:
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


def steps_notes(source: np.ndarray) -> list[str]:
    """The samples table's note when some unit's steps were estimated (``source`` of
    :func:`unit_steps`)."""
    if (source == STEPS_ESTIMATED).any():
        return ["sums (category totals, computation, exposed communication) are per step, the steps "
                "estimated from dispatch counts (no ProfilerStep or marker ranges in the trace)"]
    return []


def compact_order(p: Prepared, mask: np.ndarray, per_unit: int = 21) -> tuple[np.ndarray, np.ndarray]:
    """Kept-row indices and values ``samples.compact_samples`` would keep, on codes (no text
    sort); the values are :func:`compacted_values` of the sorted groups."""
    idx = np.flatnonzero(mask)
    idx = idx[np.lexsort((p.value[idx], p.kernel[idx], p.pu[idx]))]
    key = p.pu[idx] * len(p.kernels) + p.kernel[idx]
    new = np.r_[True, key[1:] != key[:-1]] if len(idx) else np.zeros(0, bool)
    first = np.flatnonzero(new)
    gid = np.cumsum(new) - 1
    n = np.diff(np.r_[first, len(idx)])[gid]
    pos = np.arange(len(idx)) - first[gid]
    keep = kept_quantile_positions(n, pos, per_unit)
    return idx[keep], compacted_values(p.value[idx], n, pos, per_unit)[keep]


def kept_quantile_positions(n: np.ndarray, pos: np.ndarray, k: int) -> np.ndarray:
    """Which sorted positions ``pos`` of groups of size ``n`` are the K quantiles kept.

    Kept positions are floor((j + 1/2) n / K), j = 0..K-1 (distinct when n > K); in integers
    the only candidate j for position pos is ceil((2 pos K - n) / 2n). Groups of at most K
    values are kept whole.
    """
    j = -((n - 2 * pos * k) // (2 * n))
    return (n <= k) | ((j >= 0) & (j < k) & (((2 * j + 1) * n) // (2 * k) == pos))


def compacted_values(values: np.ndarray, n: np.ndarray, pos: np.ndarray, k: int) -> np.ndarray:
    """``values`` (sorted within groups of size ``n``, ``pos`` the position in the group) as a
    compacted group stores them: every value itself, except the middle kept quantile of a group
    of an even number n > K of values (odd K), which becomes the geometric midpoint of the two
    middle values: the gate's per-process summary is the median of the log durations, so the
    kept values' summary is then the group's exactly, as that of a group kept whole (n <= K)
    is. The order statistic at floor(n / 2) alone is the upper of the two: for a kernel name
    that covers two shapes in a fixed mix it is the slower shape where the group has more than
    K values and the midpoint where it has fewer, so a run with more iterations read as a
    40-60 % change of such a kernel.
    """
    out = np.asarray(values, float).copy()
    if k % 2 == 0:  # no middle kept quantile: the kept median is a midpoint of two quantiles anyway
        return out
    mid = np.flatnonzero((n > k) & (n % 2 == 0) & (2 * pos == n))
    lo, hi = out[mid - 1], out[mid]
    with np.errstate(invalid="ignore"):
        # durations are positive; any other value keeps the plain midpoint
        out[mid] = np.where((lo > 0) & (hi > 0), np.sqrt(lo * hi), (lo + hi) / 2)
    return out


def points_with(p: Prepared, pu_row: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per (point, unit) group: does its point have a row in ``mask``?"""
    hit = np.zeros(len(p.point_of), dtype=bool)
    hit[np.unique(pu_row[mask])] = True
    points = np.unique(p.point_of[hit])
    return np.isin(p.point_of, points)
