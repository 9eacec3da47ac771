"""Build the gate's samples table (``point, kernel, metric, unit, value``) from dispatches.

The unit is one profiled process, ``host/pid/rank/run`` (ARCHITECTURE.md "The process unit";
missing parts are written ``-``). What the table holds is the metric registry's
(``gate/metrics.py``): per dispatch ``dur_ns``, per unit ``category_total_ns`` for every kernel
category (kernel ``category:<cat>``, so that a kernel replaced by a slower one shows up in the
totals even though it appears as "missing + new"), GEMM overlap, the timeline's exposed
communication, and collective metrics per run. Sums are **per step** of the unit
(:func:`~pytest_gemmperf.gate.prepared.unit_steps`): a run with fewer iterations is neither
faster nor slower.

:func:`gate_samples` is the one function pytest, ``baseline refresh`` and ``gemmperf compare``
use. It runs in two stages that ``gate.file_reduce`` runs apart, one per trace source and then
once over all of them: :func:`reduce_table` calls every process builder of the registry on a
table and packs their rows (a :class:`Reduced`), :func:`merge_reduced` keeps the rows whose
point facts hold over all tables, orders them (registry order, then point and unit) and appends
the run builders' rows. One table merged alone is ``gate_samples``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis.selection import select_kernels
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.gate.metrics import DISPATCH_COUNT
from pytest_gemmperf.gate.prepared import (SAMPLE_COLUMNS, STEP_COLUMN, STEPS_COLUMN,  # noqa: F401 - public here
                                           Prepared, compacted_values, kept_quantile_positions, point_labels, prepare,
                                           steps_notes, unit_ids, unit_steps)

_SEG_COLUMNS = ("metric", "key", "point", "keep_if", "start", "stop")


def _cap(p: Prepared, max_per_unit: int | None) -> np.ndarray:
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


def _per_step(rows: M.Rows, p: Prepared, steps: np.ndarray) -> M.Rows:
    """A per-step metric's per-unit sums divided by each unit's steps (1 for a unit ``p`` lacks)."""
    if not M.lookup(rows.metric).per_step or not len(rows.frame):
        return rows
    f = rows.frame
    by_label = pd.Series(steps, index=pd.MultiIndex.from_arrays([p.point_of, p.unit_of]))
    n = by_label.reindex(pd.MultiIndex.from_arrays([f["point"].to_numpy(object), f["unit"].to_numpy(object)])
                         ).fillna(1.0).to_numpy(float)
    return replace(rows, frame=f.assign(value=f["value"].to_numpy(float) / n))


#: the samples table's text columns
TEXT_COLUMNS = ("point", "kernel", "metric", "unit")


def _finish(frames: list[pd.DataFrame], categorical: bool = False) -> pd.DataFrame:
    """The frames as one samples table, its text columns as text (``categorical``: as
    categoricals of the values they hold, the same values; a row per dispatch then costs its
    codes, not its kernel name's bytes)."""
    if categorical:
        frames = unify_categories(frames, TEXT_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    for c in TEXT_COLUMNS:
        out[c] = out[c].cat.remove_unused_categories() if categorical else out[c].astype(str)
    return out[list(SAMPLE_COLUMNS)]


def categorical_samples(samples: pd.DataFrame) -> pd.DataFrame:
    """``samples`` with its text columns as categoricals of the same values (``attrs`` kept)."""
    out = _finish([samples], categorical=True)
    out.attrs = dict(samples.attrs)
    return out


def unify_categories(frames: list[pd.DataFrame], columns: Sequence[str]) -> list[pd.DataFrame]:
    """``frames`` with each of ``columns`` a categorical of one dtype in all of them (the sorted
    text of every value any holds), so that concatenating them keeps the codes; the values as
    ``astype(str)`` writes them (:func:`_texts_codes`: no text made a row)."""
    own = [{c: _texts_codes(f[c]) for c in columns} for f in frames]
    union, dtype = {}, {}
    for c in columns:
        texts = [o[c][0] for o in own]
        union[c] = np.unique(np.concatenate(texts)) if texts else np.zeros(0, object)
        dtype[c] = pd.CategoricalDtype(pd.Index(union[c], dtype=object))
    out = []
    for f, tc in zip(frames, own):
        recoded = {c: _recoded(*tc[c], union[c], dtype[c]) for c in columns}
        out.append(f.assign(**recoded))
    return out


def _recoded(texts: np.ndarray, codes: np.ndarray, union: np.ndarray, dtype: pd.CategoricalDtype) -> pd.Categorical:
    """Rows coded by ``codes`` into ``texts`` as a categorical of ``dtype``, whose categories
    ``union`` (sorted) hold every text: each text's place found by binary search; a missing
    value (code -1) stays missing."""
    where = np.searchsorted(union, texts)
    return pd.Categorical.from_codes(np.where(codes >= 0, where[codes], -1) if len(where) else codes,
                                     dtype=dtype, validate=False)


def _as_text_categorical(s: pd.Series) -> pd.Series:
    """``s.astype(str).astype("category")``, without a text made a row (:func:`_texts_codes`)."""
    texts, codes = _texts_codes(s)
    union = np.unique(texts)
    return pd.Series(_recoded(texts, codes, union, pd.CategoricalDtype(pd.Index(union, dtype=_TEXT_DTYPE))),
                     index=s.index, name=s.name)


#: the dtype ``astype(str)`` gives (pandas 3: ``str``; 2: object)
_TEXT_DTYPE = pd.Series(["x"], dtype=object).astype(str).dtype
#: below this many rows a column is written a row at a time: fewer calls into pandas
_FEW_ROWS = 2048


def _texts_codes(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``s.astype(str)`` as texts (an object array; a text may repeat) and per row the position
    of its text among them (-1: missing, as ``astype(str)`` leaves it), the texts made once per
    distinct value: a categorical's categories; text without missing values as it is; else one
    row of each distinct value and the missing rows (all of them in an object column, whose
    ``None``, ``nan`` and ``NA`` may read differently; else the first), the other rows taking
    their value's. Where equal values may write different texts (``1`` and ``1.0`` in an object
    column, ``0.0`` and ``-0.0``), and in a short column (pandas' fixed costs outweigh the
    rows'), every row is written."""
    if isinstance(s.dtype, pd.CategoricalDtype) and not s.isna().any():
        return np.asarray([str(x) for x in s.cat.categories], dtype=object), s.cat.codes.to_numpy()
    if _is_text(s) and not s.isna().any():  # each value is its own text
        codes, uniq = pd.factorize(s)
        return np.asarray(uniq, dtype=object), codes
    if len(s) < _FEW_ROWS or not _equal_values_write_alike(s):
        codes, uniq = pd.factorize(s.astype(str), use_na_sentinel=True)
        return np.asarray(uniq, dtype=object), codes
    codes, _ = pd.factorize(s, use_na_sentinel=True)  # in the order values first show
    missing = np.flatnonzero(codes < 0)
    valid = codes >= 0
    # each value's first row: where a code exceeds every code before it
    first = np.flatnonzero(codes > np.maximum.accumulate(np.r_[-1, codes[:-1]])) if len(codes) else codes
    written = missing if s.dtype == object else missing[:1]
    texts = s.iloc[np.concatenate([first, written])].astype(str).to_numpy(dtype=object)
    at = np.empty(len(s), dtype=np.intp)  # per row its text's position in ``texts``
    at[valid] = codes[valid]
    at[missing] = np.arange(len(first), len(texts)) if s.dtype == object else len(first)
    lost = pd.isna(texts)  # a missing value astype(str) leaves missing
    place = np.cumsum(~lost) - 1
    return texts[~lost], np.where(lost[at], -1, place[at]) if len(at) else at


def _is_text(s: pd.Series) -> bool:
    """Whether every value of ``s`` is text already (missing values aside)."""
    if isinstance(s.dtype, pd.StringDtype):
        return True
    return s.dtype == object and pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty")


def _equal_values_write_alike(s: pd.Series) -> bool:
    """Whether values ``pd.factorize`` finds equal are written alike by ``astype(str)``: not so
    for an object column holding anything but text, or floats holding both zeros."""
    if s.dtype == object:
        return pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty")
    if pd.api.types.is_float_dtype(s.dtype):
        v = s.to_numpy(dtype=float, na_value=np.nan)
        sign = np.signbit(v[v == 0])
        return bool(sign.all() or not sign.any())
    return True


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
    p = prepare(dispatches, warmup)
    frames = [M.dur_frame(p, _cap(p, max_per_unit))]
    if categories and len(p.rows):
        totals = M.Rows(M.CATEGORY_TOTAL_NS, M.category_frame(p))
        frames.append(_per_step(totals, p, unit_steps(dispatches, p)[0]).frame)
    for metric, frame in (unit_metrics or {}).items():
        frames.append(unit_metric_samples(frame, metric))
    return _finish(frames)


# --------------------------------------------------------------------------------------------
# the gate's samples: one function for pytest, ``baseline refresh`` and ``gemmperf compare``


def gate_samples(dispatches: pd.DataFrame, *, kernels: Sequence[str] | None = None, warmup: int = 0,
                 compact: bool = True, path: str | os.PathLike | None = None) -> pd.DataFrame:
    """Everything the gate compares for a dispatches table (one or more points): the rows of
    every metric of the registry (``gate/metrics.py``), in registry order.

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
    d = gate_table(dispatches)
    part = reduce_table(d, kernels=kernels, warmup=warmup, compact=compact, path=path, strict=True)
    notes: list[str] = []
    run_frames = [f for rb in M.run_builders() for f in rb.build(d, warmup, notes)]
    return merge_reduced([part], run_frames, notes)


def gate_table(dispatches: pd.DataFrame) -> pd.DataFrame:
    """``dispatches`` as the builders read them: index 0..n-1, ``end_ns`` derived when absent."""
    d = dispatches.reset_index(drop=True)
    if "end_ns" not in d.columns and {"start_ns", "dur_ns"} <= set(d.columns):
        d = d.assign(end_ns=d["start_ns"].to_numpy(np.int64) + d["dur_ns"].to_numpy(np.int64))
    return d


@dataclass
class Reduced:
    """One table's process rows, packed (picklable: ``gate.file_reduce`` workers return it)."""

    kernels_seen: np.ndarray
    matched: bool                # some kernel matches the regexes (or there are none)
    gated_any: bool              # some dispatch of a selected kernel is left after warm-up
    rows: list[pd.DataFrame] = field(default_factory=list)  # every builder's non-empty frames
    seg: pd.DataFrame | None = None   # _SEG_COLUMNS: one per run of equal (point, unit) of a frame,
    #                                   positions in the frames' concatenation
    facts: dict = field(default_factory=dict)  # fact -> point -> amount
    units: np.ndarray | None = None   # point\x1funit of every unit, sorted
    steps: dict | None = None         # attrs["steps"] lists, in unit order
    gathered: list = field(default_factory=list)  # per run builder: its dispatches here, or None
    #: per run builder: it gathered none here but reads some once another table gives any (``rest``)
    pending: list = field(default_factory=list)


def _key(point_of: np.ndarray, unit_of: np.ndarray) -> np.ndarray:
    return np.asarray(point_of, dtype=object) + "\x1f" + np.asarray(unit_of, dtype=object)


def reduce_table(d: pd.DataFrame, *, kernels: Sequence[str] | None, warmup: int, compact: bool,
                 path: str | os.PathLike | None, strict: bool = False, gather: bool = False) -> Reduced:
    """Every process builder's rows on ``d`` (a :func:`gate_table`). ``strict``: raise the
    kernel selection errors (:func:`check_selection`) before building; ``gather``: keep each
    run builder's dispatches of ``d`` for a later merge."""
    p = prepare(d, warmup)
    wanted = np.ones(len(p.kernels), dtype=bool)
    if kernels:
        hit = select_kernels(pd.DataFrame({"kernel": pd.Categorical(p.kernels)}), kernels, path)
        wanted = np.isin(p.kernels, hit["kernel"].astype(object).to_numpy())
    gated = wanted[p.kernel]
    out = Reduced(kernels_seen=p.kernels, matched=bool(wanted.any()), gated_any=bool(gated.any()))
    if strict:
        check_selection([out], kernels, warmup, path)
    steps, source = unit_steps(d, p)
    t = M.BuildInput(dispatches=d, prepared=p, steps=steps, gated=gated, compact=compact)
    rows: list[M.Rows] = []
    for build in M.process_builders():
        built = build(t)
        rows += [_per_step(r, p, steps) for r in built.rows]
        _add_facts(out.facts, built.facts)
    out.rows, out.seg = _pack(rows)
    out.units = np.unique(_key(p.point_of, p.unit_of))
    out.steps = {"point": [str(x) for x in p.point_of], "unit": [str(x) for x in p.unit_of],
                 "steps": [float(x) for x in steps], "source": [str(x) for x in source]}
    if gather:
        builders = M.run_builders()
        out.gathered = [rb.gather(d) for rb in builders]
        out.pending = [g is None and rb.rest(d) is not None for g, rb in zip(out.gathered, builders)]
    return out


def _add_facts(into: dict[str, dict[str, float]], facts: dict[str, dict[str, float]]) -> None:
    for fact, amounts in facts.items():
        have = into.setdefault(fact, {})
        for point, amount in amounts.items():
            have[point] = have.get(point, 0) + amount


def check_selection(parts: Sequence[Reduced], kernels: Sequence[str] | None, warmup: int,
                    path: str | os.PathLike | None) -> None:
    """The kernel selection errors, over all tables: no kernel matches the regexes, or no
    dispatch of a selected kernel is left after the warm-up."""
    if kernels and not any(p.matched for p in parts):
        seen = np.unique(np.concatenate([p.kernels_seen for p in parts]))
        raise GemmperfInputError(path, f"no dispatch matches the kernel regexes "
                                       f"({', '.join(map(str, kernels))}); kernels seen: "
                                       f"{', '.join(map(str, seen[:10]))}")
    if not any(p.gated_any for p in parts):
        raise GemmperfInputError(path, f"no dispatch of the gated kernels left after a warm-up of {warmup} "
                                       "per kernel and process; profile more steps or lower the warm-up")


def _pack(rows: list[M.Rows]) -> tuple[list[pd.DataFrame], pd.DataFrame]:
    """The non-empty frames, and one segment per run of equal (point, unit) in each frame
    (positions in the frames' concatenation). Every builder's frame is ordered by (point, unit)
    (the codes are the ranks of the sorted ``point\\x1funit`` labels), so runs are whole units
    and only segments - one per unit and metric, not one per row - need sorting in
    :func:`merge_reduced`."""
    segs = []
    off = 0
    for r in rows:
        n = len(r.frame)
        if n == 0:
            continue
        g = r.groups
        if g is None:
            pt = r.frame["point"].to_numpy(object)
            un = r.frame["unit"].to_numpy(object)
            g = (pt[1:] != pt[:-1]) | (un[1:] != un[:-1])
        else:
            g = g[1:] != g[:-1]
        start = np.flatnonzero(np.r_[True, g])
        stop = np.r_[start[1:], n]
        pt = r.frame["point"].iloc[start].to_numpy(object)
        un = r.frame["unit"].iloc[start].to_numpy(object)
        segs.append(pd.DataFrame({"metric": r.metric, "key": _key(pt, un), "point": pt,
                                  "keep_if": r.keep_if or "", "start": start + off, "stop": stop + off}))
        off += n
    if not segs:
        return [], pd.DataFrame({c: np.zeros(0, np.int64) if c in ("start", "stop") else np.zeros(0, object)
                                 for c in _SEG_COLUMNS})
    return [r.frame for r in rows if len(r.frame)], pd.concat(segs, ignore_index=True)


def merge_reduced(parts: Sequence[Reduced], run_frames: list[pd.DataFrame], notes: list[str],
                  categorical: bool = False) -> pd.DataFrame:
    """The samples table of ``parts`` (tables whose units are distinct): segments whose point
    fact holds over all parts, stable-sorted by (registry order, point, unit), then the run
    builders' ``run_frames``; ``attrs`` notes (``notes`` first) and steps. ``categorical``: the
    text columns as categoricals (:func:`_finish`)."""
    totals: dict[str, dict[str, float]] = {}
    for part in parts:
        _add_facts(totals, part.facts)
    offsets = np.cumsum([0] + [sum(map(len, p.rows)) for p in parts])
    seg = pd.concat([p.seg.assign(start=p.seg["start"] + off, stop=p.seg["stop"] + off)
                     for p, off in zip(parts, offsets)], ignore_index=True)
    cond = seg["keep_if"].to_numpy(object)
    pt = seg["point"].to_numpy(object)
    keep = cond == ""
    for fact in set(cond[~keep]):
        held = [k for k, v in totals.get(fact, {}).items() if v > 0]
        sel = cond == fact
        keep[sel] = np.isin(pt[sel], held)
    everything = bool(keep.all())
    seg = seg[keep]
    order = M.row_order()
    unknown = set(seg["metric"]) - set(order)
    if unknown:
        raise ValueError(f"samples rows of unregistered metric(s) {', '.join(sorted(unknown))}")
    _, kcode = np.unique(seg["key"].to_numpy(object), return_inverse=True)
    rank = seg["metric"].map(order).to_numpy(np.int64)
    by = np.lexsort((kcode.reshape(-1), rank))
    frames = [f for p in parts for f in p.rows]
    if categorical:  # one dtype a column: the concatenation keeps codes, never a text a row
        frames = unify_categories(frames, TEXT_COLUMNS)
    if frames and not (everything and (by == np.arange(len(by))).all()):
        seg = seg.iloc[by]
        lengths = (seg["stop"] - seg["start"]).to_numpy(np.int64)
        # one gather: the row positions of every kept segment, in segment order
        take = np.repeat(seg["start"].to_numpy(np.int64) - np.r_[0, np.cumsum(lengths)[:-1]], lengths) \
            + np.arange(int(lengths.sum()))
        frames = [pd.concat(frames, ignore_index=True).iloc[take].reset_index(drop=True)]
    # else: every row kept, already in order (one table whose builders write in registry order)
    out = _finish(frames + run_frames or [pd.DataFrame(columns=list(SAMPLE_COLUMNS))], categorical)
    steps = {k: [x for p in parts for x in p.steps[k]] for k in ("point", "unit", "steps", "source")}
    by_key = np.argsort(_key(np.asarray(steps["point"], dtype=object), np.asarray(steps["unit"], dtype=object)),
                        kind="stable")
    steps = {k: [v[i] for i in by_key] for k, v in steps.items()}
    out.attrs["notes"] = notes + steps_notes(np.asarray(steps["source"], dtype=object))
    # plain lists, not a DataFrame: pandas compares attrs when concatenating tables
    out.attrs["steps"] = steps
    return out


def unit_metric_samples(frame: pd.DataFrame, metric: str, value_col: str | None = None,
                        kernel: str = M.ALL_KERNELS) -> pd.DataFrame:
    """Rows of a unit-level metric (overlap_fraction, interference_slowdown, exposed_comm_ns...).

    ``frame`` is an analysis result with one row per unit (and per kernel, when it has a
    ``kernel`` column). The value column is ``value_col``, else ``value``, else ``metric``.
    """
    col = value_col or ("value" if "value" in frame.columns else metric)
    if col not in frame.columns:
        raise GemmperfInputError(None, f"{metric}: analysis table has no {col!r} column")
    kern = (frame["kernel"].astype(object).astype(str).to_numpy() if "kernel" in frame.columns
            else np.full(len(frame), kernel, dtype=object))
    return pd.DataFrame({"point": point_labels(frame), "kernel": kern, "metric": metric,
                         "unit": unit_ids(frame),
                         "value": pd.to_numeric(frame[col], errors="coerce").to_numpy(float)}
                        ).dropna(subset=["value"])


def compact_samples(samples: pd.DataFrame, per_unit: int = 21) -> pd.DataFrame:
    """Shrink ``dur_ns`` rows to at most ``per_unit`` quantiles per (point, kernel, unit).

    A baseline store keeps the order statistics at probabilities ``(i + 0.5) / K``: real
    observed values, the same spread and tails, so the gate can be re-run on the stored
    baseline; for odd K the same median of the log values exactly (with an even count the
    middle quantile is the geometric midpoint of the two middle values,
    :func:`~pytest_gemmperf.gate.prepared.compacted_values`). Unit-level rows pass unchanged.
    """
    if per_unit < 1:
        raise ValueError("per_unit must be >= 1")
    is_dur = (samples["metric"] == M.DUR_NS).to_numpy()
    dur = samples[is_dur].sort_values(["point", "kernel", "unit", "value"], kind="stable")
    keys = ["point", "kernel", "unit"]
    n = dur.groupby(keys, sort=False)["value"].transform("size").to_numpy()
    pos = dur.groupby(keys, sort=False).cumcount().to_numpy()
    keep = kept_quantile_positions(n, pos, per_unit)
    dur = dur.assign(value=compacted_values(dur["value"].to_numpy(float), n, pos, per_unit))
    # how many dispatches each compacted group stood for: the gate's noise floor for a
    # per-process median depends on it, and it is never gated itself
    counts = (dur.groupby(keys, sort=False, observed=True).size().rename("value").reset_index()
              .assign(metric=DISPATCH_COUNT))
    prior = samples[(samples["metric"] == DISPATCH_COUNT).to_numpy()]
    if len(prior):  # already compacted once: keep the original counts
        counts = counts.iloc[:0]
    out = pd.concat([samples[~is_dur], dur[keep], counts[list(SAMPLE_COLUMNS)]], ignore_index=True)
    return out[list(SAMPLE_COLUMNS)]
