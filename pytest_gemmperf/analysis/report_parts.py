"""What the reports read of the dispatches, reduced where each source is read.

Besides the kernel statistics (duration rows, ``analysis/kernel_stats.DurationRows``) and the
category totals (``analysis/source_totals.dispatch_totals``), report.html, report.xlsx and the
report CSVs show views that each read every dispatch of a sweep. :func:`report_part` reduces
one source's dispatches to what those views need, in a worker (``analysis/source_totals.py``),
and :func:`merge_parts` joins the sources' parts in input order, so that the parent of
``gemmperf analyze --jobs N`` never concatenates every dispatch:

* **short kernels**: per kernel name, the count and the duration sum of the dispatches shorter
  than the threshold, and the count per histogram bin: integers, summed exactly;
* **kernel details**: the longest dispatches. A source's own :data:`KERNEL_DETAILS_TOP`
  longest (ties: the earlier row) hold the sweep's: a dispatch that is not among its source's
  has that many before it in the sweep's order too;
* **the GPU timeline**: one row per process-GPU group (``intervals.GPU_KEYS``, which name the
  trace ``file``): the intervals of a group lie in one source, so its row is computed where
  that source is read and the sources' rows are concatenated. A group found in two sources
  (one file read twice) cannot be; :func:`shared_gpu_groups` tells (from the groups each part
  names where it is read, :func:`gpu_group_keys`), and the caller reads the full tables
  instead. The details and the timeline travel with their text as text (:func:`decategorized`);
* **GEMM dispatches**: the top-variance table (quantiles, MAD, the min and max instances), the
  overlap table's medians and the plotted boxes are order statistics over groups that span
  sources, which no per-source summary merges exactly. Each GEMM dispatch travels as a few
  integers: its ``(point, rank, kernel)`` key's index, duration and start, the nanoseconds
  its GPU's collectives cover of it (the per-GPU interval union of ``analysis/overlap.py``,
  computed where the source is read), whether it is past its GPU group's warm-up, that
  group's number and its row number;
* **collective intervals** (start, end, GPU group, display name): what the top-variance rows'
  overlap columns read of the collectives beside each row's longest instance.

Collective matching across ranks (torch collective metadata) and the counter table join
dispatches of several sources; a sweep that has them is reported from the full tables
(:attr:`ReportPart.needs_full`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.intervals import GPU_KEYS, group_codes
from pytest_gemmperf.analysis.kernel_stats import DurationRows, packed
from pytest_gemmperf.analysis.overlap import category_mask, display_values, gemm_overlap_ns, overlap_fraction
from pytest_gemmperf.analysis.small_tables import SMALL_TABLE_ROWS, descending_order, object_values, plain_index, taken
from pytest_gemmperf.analysis.timeline import gpu_timeline
from pytest_gemmperf.analysis.variance import select_samples
from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA, concat_tables

#: TraceLens's ``--short_kernel_threshold_us`` as aorta runs it.
DEFAULT_SHORT_KERNEL_US = 50.0
#: bins of the short-kernel duration histogram (0 .. the threshold)
SHORT_HIST_BINS = 20
#: TraceLens ``--topk_kernels`` (longest single dispatches listed in kernel_details).
KERNEL_DETAILS_TOP = 100
#: the columns of the kernel details table, those the dispatches have
DETAIL_COLUMNS = ("point", "rank", "run", "host", "pid", "agent", "queue", "stream", "thread_id",
                  "dispatch_id", "kernel", "category", "start_ns", "dur_ns", "grid_x", "grid_y", "grid_z",
                  "wg_x", "wg_y", "wg_z")
#: the keys of a GEMM dispatch's statistics (top variance, overlap, boxes)
GEMM_KEYS = ("point", "rank", "kernel")


@dataclass
class GemmRows:
    """The GEMM dispatches of a source (or of several, merged), one array entry each, in row
    order: ``keys`` holds each distinct ``(point, rank, kernel)`` once and ``group`` each
    dispatch's index into it; ``gpu`` numbers the process-GPU groups (as the timeline's rows);
    ``row`` is the dispatch's row number in the source (merged: in the sweep)."""

    keys: pd.DataFrame
    group: np.ndarray
    dur_ns: np.ndarray
    start_ns: np.ndarray
    overlap_ns: np.ndarray
    warm: np.ndarray          # past its GPU group's warm-up (``variance.select_samples``)
    gpu: np.ndarray
    row: np.ndarray

    def __len__(self) -> int:
        return len(self.dur_ns)


@dataclass
class CommRows:
    """A source's collective dispatches in row order: GPU group, interval, display name."""

    gpu: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    name: pd.Categorical
    row: np.ndarray

    def __len__(self) -> int:
        return len(self.start_ns)


@dataclass
class ReportPart:
    """One source's reduction for the reports (picklable: a few bytes per GEMM dispatch, a
    small table per view); several merged by :func:`merge_parts`."""

    n_dispatches: int
    short: pd.DataFrame                   # name, count, sum_ns of the short dispatches
    short_hist: np.ndarray                # their count per bin
    total_ns: int                         # duration sum of every dispatch
    details: pd.DataFrame                 # the longest dispatches, DETAIL_COLUMNS, row order
                                          # (text columns as text: :func:`decategorized`)
    warmup: int                           # GEMM dispatches dropped per GPU group and kernel
    short_us: float                       # the short-kernel threshold
    timeline: pd.DataFrame                # analysis.timeline.gpu_timeline, text as text
    gemm: GemmRows | None = None
    comm: CommRows | None = None          # only beside GEMM dispatches: what their rows read
    has_comm: bool = False                # the source has collective dispatches
    needs_full: list[str] = field(default_factory=list)  # views that need the full tables, and why
    gpu_groups: frozenset[tuple] | None = None  # the timeline rows' keys (:func:`gpu_group_keys`)

    @property
    def n_gpu_groups(self) -> int:
        return len(self.timeline)


def report_part(d: pd.DataFrame, *, warmup: int = 0,
                short_us: float = DEFAULT_SHORT_KERNEL_US) -> ReportPart:
    """The reports' reduction of the dispatches ``d`` (one source, or a whole sweep read in
    full; ``category`` as the reports use it)."""
    if not plain_index(d):
        d = d.reset_index(drop=True)  # row numbers are the labels every part refers to
    dur = d["dur_ns"].to_numpy(np.int64)
    start = d["start_ns"].to_numpy(np.int64)
    end = d["end_ns"].to_numpy(np.int64)
    codes = group_codes(d, GPU_KEYS)
    short, hist = short_part(d, short_us)
    # the tables travel with their text as text: the parent joins them with one pd.concat (joining
    # categoricals of many small tables costs a fixed price per table and column), and the
    # reports show them as text
    timeline = gpu_timeline(d, codes=codes, text=True)
    part = ReportPart(n_dispatches=len(d), short=short, short_hist=hist, total_ns=int(dur.sum()),
                      details=_details_part(d), warmup=int(warmup), short_us=float(short_us),
                      timeline=timeline, gpu_groups=gpu_group_keys(timeline))
    if "coll_name" in d.columns and d["coll_name"].notna().any():
        part.needs_full.append("collective metadata (cross-rank matching)")
    gm = category_mask(d, None, "gemm")
    cm = category_mask(d, None, "collective")
    part.has_comm = bool(cm.any())
    if not gm.any():
        return part
    gi = np.flatnonzero(gm)
    if warmup > 0:
        # the columns the warm-up reads, not every column of every GEMM row
        narrow = d[[c for c in (*GPU_KEYS, "kernel", "start_ns", "category") if c in d.columns]]
        warm = np.zeros(len(d), dtype=bool)
        warm[select_samples(narrow, category="gemm", warmup=warmup).index.to_numpy()] = True
    else:
        warm = gm  # no warm-up: every GEMM dispatch is a sample
    keys = [c for c in GEMM_KEYS if c in d.columns]
    group = group_codes(d, keys, rows=gi)
    first = gi[np.unique(group, return_index=True)[1]]
    part.gemm = GemmRows(keys=pd.DataFrame({c: taken(d[c], first) for c in keys}), group=packed(group),
                         dur_ns=packed(dur[gi]), start_ns=start[gi],
                         overlap_ns=packed(gemm_overlap_ns(codes, start, end, gm, cm)), warm=warm[gi],
                         gpu=packed(codes[gi]), row=packed(gi.astype(np.int64)))
    if part.has_comm:
        ci = np.flatnonzero(cm)
        part.comm = CommRows(gpu=packed(codes[ci]), start_ns=start[ci], end_ns=end[ci],
                             name=_text_categorical(display_values(d, ci)), row=packed(ci.astype(np.int64)))
    return part


def _text_categorical(values: np.ndarray) -> pd.Categorical:
    """Text values (an object array, missing ones null) as a categorical of their sorted distinct
    values as objects: each name travels once. Built from ``pd.factorize``'s codes: inferring a
    text dtype for the categories costs ten times as much, and only the values are read back."""
    codes, uniques = pd.factorize(values, sort=True)
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(pd.Index(uniques, dtype=object)),
                                     validate=False)


# ------------------------------------------------------------------------------ short kernels

def short_part(d: pd.DataFrame, threshold_us: float) -> tuple[pd.DataFrame, np.ndarray]:
    """Per kernel name (named rows only) the count and int64 duration sum of the dispatches
    shorter than ``threshold_us``, and their count per histogram bin."""
    dur = d["dur_ns"].to_numpy(np.int64)
    short = dur < threshold_us * 1e3
    names = d["kernel"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    # per-name sums over category codes: no string grouping over millions of rows (read off the
    # array: the ``.cat`` accessor costs more than a small table's sums)
    codes = names.array.codes[short]
    cats = np.asarray(names.dtype.categories, dtype=object)
    keep = codes >= 0
    codes, sdur = codes[keep], dur[short][keep]
    count = np.bincount(codes, minlength=len(cats))
    sums = np.zeros(len(cats), dtype=np.int64)
    np.add.at(sums, codes, sdur)
    hit = count > 0
    table = pd.DataFrame({"name": cats[hit].astype(str), "count": count[hit].astype(np.int64),
                          "sum_ns": sums[hit]})
    counts, _ = np.histogram(dur[short] / 1e3, bins=short_edges(threshold_us))
    return table, counts.astype(np.int64)


def short_edges(threshold_us: float) -> np.ndarray:
    """The short-kernel histogram's bin edges, µs."""
    return np.linspace(0.0, threshold_us, SHORT_HIST_BINS + 1)


# ------------------------------------------------------------------------------ kernel details

def _details_part(d: pd.DataFrame) -> pd.DataFrame:
    """The source's :data:`KERNEL_DETAILS_TOP` longest dispatches (ties: the earlier row), in
    row order, text as text (:func:`decategorized`): the sources' details joined in input order
    are in the sweep's row order, which decides its ties. One frame built from the picked values
    of each column: a column set, a row selection or a conversion of a small frame costs as much
    as building it."""
    dur = d["dur_ns"]
    if len(d) <= KERNEL_DETAILS_TOP:
        top = np.arange(len(d), dtype=np.int64)  # every dispatch is among the longest
    elif len(d) <= SMALL_TABLE_ROWS and isinstance(dur.dtype, np.dtype) and dur.dtype.kind == "i":
        # nlargest's pick (ties: the earlier row) from one stable sort, without its fixed costs
        top = np.sort(descending_order(dur.to_numpy(), kind="stable")[:KERNEL_DETAILS_TOP])
    else:
        top = np.sort(dur.nlargest(KERNEL_DETAILS_TOP).index.to_numpy())
    return pd.DataFrame({c: taken(d[c], top, text=True) for c in DETAIL_COLUMNS if c in d.columns})


# ------------------------------------------------------------------------------ merging

@dataclass
class ReportParts:
    """Every source's report reduction, merged in input order (rows numbered across the
    sweep). Built by :func:`merge_parts`; a single part is a whole sweep's."""

    n_dispatches: int
    short: pd.DataFrame
    short_hist: np.ndarray
    total_ns: int
    details: pd.DataFrame       # a subsequence of the sweep's rows, in its order
    timeline: pd.DataFrame
    gemm: GemmRows | None
    comm: CommRows | None
    has_comm: bool
    warmup: int
    short_us: float


def merge_parts(parts: Sequence[ReportPart]) -> ReportParts:
    """The sources' parts as one sweep's, in their order."""
    parts = list(parts)
    if len({(p.warmup, p.short_us) for p in parts}) != 1:
        raise ValueError("report parts reduced with different warm-ups or short-kernel thresholds")
    rows = np.cumsum([0] + [p.n_dispatches for p in parts])
    gpus = np.cumsum([0] + [p.n_gpu_groups for p in parts])
    short = parts[0].short if len(parts) == 1 else \
        pd.concat([p.short for p in parts], ignore_index=True).groupby("name", sort=True).sum().reset_index()
    gemm = _merge_gemm([(p.gemm, rows[i], gpus[i]) for i, p in enumerate(parts) if p.gemm is not None])
    comm = _merge_comm([(p.comm, rows[i], gpus[i]) for i, p in enumerate(parts) if p.comm is not None])
    return ReportParts(n_dispatches=int(rows[-1]), short=short,
                       short_hist=np.sum([p.short_hist for p in parts], axis=0),
                       total_ns=sum(p.total_ns for p in parts), details=_joined([p.details for p in parts]),
                       timeline=_joined([p.timeline for p in parts]),
                       gemm=gemm, comm=comm, has_comm=any(p.has_comm for p in parts),
                       warmup=parts[0].warmup, short_us=parts[0].short_us)


def _joined(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The parts' tables (text columns as text) one after the other, with a new index."""
    if len(frames) == 1:
        return frames[0]
    kept = [f for f in frames if len(f)] or frames[:1]  # an empty table adds no row, only warnings
    return pd.concat(kept, ignore_index=True)


def decategorized(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its categorical columns as object columns (None for missing): text is what
    the reports show, and categoricals of different tables have different categories."""
    # the dtypes in one pass as plain lists: a column taken out of the frame per name, or an
    # iteration over the dtypes Series or a text column index, costs far more
    cats = [c for c, dtype in zip(df.columns.tolist(), df.dtypes.to_numpy().tolist())
            if isinstance(dtype, pd.CategoricalDtype)]
    if not cats:
        return df
    df = df.copy()
    for c in cats:
        df[c] = as_objects(df[c])
    return df


def as_objects(s: pd.Series) -> pd.Series:
    """``s.astype(object).where(s.notna(), None)``: Python objects, None for missing
    (:func:`object_values` as a Series of ``s``'s index and name)."""
    return pd.Series(object_values(s), index=s.index, name=s.name, dtype=object)


def _widened(arrays: list[np.ndarray], offsets: list[int]) -> np.ndarray:
    return np.concatenate([a.astype(np.int64) + np.int64(o) for a, o in zip(arrays, offsets)])


def _merge_gemm(parts: list[tuple[GemmRows, int, int]]) -> GemmRows | None:
    if not parts:
        return None
    key_off = np.cumsum([0] + [len(g.keys) for g, _, _ in parts])[:-1]
    return GemmRows(
        keys=concat_tables([g.keys for g, _, _ in parts], DISPATCH_SCHEMA),
        group=_widened([g.group for g, _, _ in parts], list(key_off)),
        dur_ns=_widened([g.dur_ns for g, _, _ in parts], [0] * len(parts)),
        start_ns=np.concatenate([g.start_ns for g, _, _ in parts]),
        overlap_ns=_widened([g.overlap_ns for g, _, _ in parts], [0] * len(parts)),
        warm=np.concatenate([g.warm for g, _, _ in parts]),
        gpu=_widened([g.gpu for g, _, o in parts], [o for _, _, o in parts]),
        row=_widened([g.row for g, _, _ in parts], [r for _, r, _ in parts]))


def _merge_comm(parts: list[tuple[CommRows, int, int]]) -> CommRows | None:
    if not parts:
        return None
    names = pd.Series(pd.api.types.union_categoricals([c.name for c, _, _ in parts], ignore_order=True))
    return CommRows(gpu=_widened([c.gpu for c, _, o in parts], [o for _, _, o in parts]),
                    start_ns=np.concatenate([c.start_ns for c, _, _ in parts]),
                    end_ns=np.concatenate([c.end_ns for c, _, _ in parts]), name=names.array,
                    row=_widened([c.row for c, _, _ in parts], [r for _, r, _ in parts]))


@dataclass
class SweepReduction:
    """A sweep's dispatches as the reports read them when every source was reduced where it
    was read: the kernel statistics' duration rows (warm-up dropped), the category totals
    (``source_totals.dispatch_totals``) and the merged report parts."""

    rows: DurationRows
    totals: pd.DataFrame
    parts: ReportParts
    #: views of the reports already being computed elsewhere (``report/data.py``'s
    #: ``views_beside``): what they were asked with, and the call that returns them
    ahead: tuple[Any, Callable[[], Any]] | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return self.parts.n_dispatches


def gpu_group_keys(timeline: pd.DataFrame) -> frozenset[tuple]:
    """The process-GPU groups of a part's timeline, as the rows of its :data:`GPU_KEYS` columns
    (Python values, nulls as None)."""
    return frozenset(_row_set(timeline, [c for c in GPU_KEYS if c in timeline.columns]))


def shared_gpu_groups(parts: Sequence[ReportPart]) -> bool:
    """Whether a process-GPU group (a timeline row's keys) appears in more than one part."""
    return _in_two(p.gpu_groups if p.gpu_groups is not None else gpu_group_keys(p.timeline) for p in parts)


def row_in_two(frames) -> bool:
    """Whether some row (nulls alike) appears in more than one of ``frames``."""
    return _in_two(_row_set(f) for f in frames)


def _in_two(row_sets) -> bool:
    """Whether some row appears in more than one of ``row_sets`` (taken one at a time, so that
    a hit stops before the rest are made)."""
    seen: set[tuple] = set()
    for rows in row_sets:
        if seen & rows:
            return True
        seen |= rows
    return False


def _row_set(f: pd.DataFrame, columns: Sequence[str] | None = None) -> set[tuple]:
    """The rows of ``f`` (of its ``columns``, default all) as tuples of Python values, every null
    as None. Column by column (``tolist``): a frame's ``astype(object)`` costs pandas' fixed
    price per column and frame, which for one small frame per source summed to a tenth of a
    second on 24 sources; the columns picked from ``f`` itself, not from a frame of them."""
    columns = list(f.columns) if columns is None else list(columns)
    if not columns:
        return {()} if len(f) else set()
    return set(zip(*(_values(f[c]) for c in columns)))


def _values(col: pd.Series) -> list:
    """A column's values as Python objects, every null as None (a categorical's through its
    codes: its ``tolist`` converts the whole column first)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = col.dtype.categories.tolist()
        return [cats[i] if i >= 0 else None for i in col.array.codes.tolist()]
    return [None if _null(v) else v for v in col.tolist()]


def _null(v) -> bool:
    """A scalar null as ``tolist`` gives it: None, NaN, pd.NA, NaT."""
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and v != v)


# ------------------------------------------------------------------------------ sweep frames

def gemm_frame(gemm: GemmRows) -> pd.DataFrame:
    """The GEMM dispatches as a table (``point, rank, kernel, dur_ns, start_ns, end_ns,
    overlap_ns, overlap_fraction, gpu``) indexed by their row numbers: what the top-variance,
    overlap and box views read of the sweep's dispatches."""
    group = gemm.group.astype(np.intp)
    dur = gemm.dur_ns.astype(np.int64)
    start = gemm.start_ns.astype(np.int64)
    overlap = gemm.overlap_ns.astype(np.int64)
    # made into a frame once: each column set on a frame copies its blocks
    return pd.DataFrame({**{c: taken(col, group) for c, col in gemm.keys.items()},
                         "dur_ns": dur, "start_ns": start, "end_ns": start + dur, "overlap_ns": overlap,
                         "overlap_fraction": overlap_fraction(overlap, dur), "gpu": gemm.gpu.astype(np.int64)},
                        index=pd.Index(gemm.row.astype(np.int64)))


def collective_frame(gemm: pd.DataFrame, comm: CommRows | None) -> tuple[pd.DataFrame, np.ndarray]:
    """The GEMM rows ``gemm`` (a :func:`gemm_frame`) and the collectives beside them (None:
    none) as one table indexed by row number, with the mask of its collective rows: what
    ``variance.with_collective_overlap`` reads (keys ``("gpu",)``, names in ``kernel_short``).
    Built as one frame from the two sides' arrays (no frame of either side on the way)."""
    if comm is None:
        comm = CommRows(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64),
                        pd.Categorical([]), np.empty(0, np.int64))
    n = len(gemm)
    rows = np.concatenate([gemm.index.to_numpy(np.int64), comm.row.astype(np.int64)])
    order = np.argsort(rows, kind="stable")  # the sweep's row order

    def joined(g: np.ndarray, c: np.ndarray) -> np.ndarray:
        return np.concatenate([g, c])[order]

    names = np.empty(n + len(comm), dtype=object)  # None on the GEMM rows
    names[n:] = np.asarray(comm.name, dtype=object)
    names = names[order]
    mask = np.zeros(len(rows), dtype=bool)
    mask[n:] = True
    both = pd.DataFrame({"gpu": joined(gemm["gpu"].to_numpy(np.int64), comm.gpu.astype(np.int64)),
                         "start_ns": joined(gemm["start_ns"].to_numpy(np.int64), comm.start_ns.astype(np.int64)),
                         "end_ns": joined(gemm["end_ns"].to_numpy(np.int64), comm.end_ns.astype(np.int64)),
                         "kernel_short": pd.Series(names, dtype=object), "kernel": pd.Series(names.copy(), dtype=object)})
    both.index = pd.Index(rows[order])
    return both, mask[order]


__all__ = ["CommRows", "DEFAULT_SHORT_KERNEL_US", "DETAIL_COLUMNS", "GemmRows", "KERNEL_DETAILS_TOP",
           "ReportPart", "ReportParts", "SHORT_HIST_BINS", "SweepReduction", "as_objects", "collective_frame",
           "decategorized", "gemm_frame", "gpu_group_keys", "merge_parts", "object_values", "report_part",
           "row_in_two", "shared_gpu_groups", "short_edges", "short_part", "taken"]
