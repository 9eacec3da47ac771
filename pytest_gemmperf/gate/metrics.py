"""The gate's metrics in one registry: what each one means, how people read it, how it is built.

Every metric of the samples and verdicts tables (``dur_ns``, ``category_total_ns``,
``overlap_fraction``, ...) has one :class:`Metric` entry in :data:`REGISTRY`: its unit (and so
how a value is shown in the terminal, HTML and XLSX), its direction (is higher better?), what
one samples row stands for (a dispatch, a process, a whole multi-rank run), whether it is a sum
per step of the process, whether the gate compares it, and its builder: the function
``gate.samples.gate_samples`` calls to compute its rows. The gate, the verdict tables, the
reports and the history read these facts here instead of matching metric names, so adding a
metric is one entry plus its builder (ARCHITECTURE.md "Adding a gate metric").

Builders. A process builder (:data:`ProcessBuilder`) gets one table of dispatches already
reduced to codes (:class:`BuildInput`: the whole input in ``gate_samples``, one trace source in
``gate.file_reduce``) and returns rows per process unit (:class:`Built`). Since a process lives
in one source, such rows are final wherever they are computed, except where a row depends on
the whole point (GEMM overlap needs collectives somewhere in the point, timeline metrics
communication somewhere in it): the builder then tags the rows with a point *fact*
(``keep_if``) and reports the fact's amount per point of its table; the rows are kept on points
whose amount, summed over all tables, is positive. Per-step metrics are returned as per-unit
sums and divided by the unit's steps (``gate.prepared.unit_steps``) by the caller. A run builder
(:class:`RunBuilder`) computes metrics that span processes (collectives matched across ranks)
from the dispatches it gathers out of every table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np
import pandas as pd

from pytest_gemmperf.analysis import collectives as coll
from pytest_gemmperf.analysis.overlap import category_mask, gemm_overlap
from pytest_gemmperf.analysis.timeline import gpu_timeline
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.categories import category_of

if TYPE_CHECKING:
    from pytest_gemmperf.gate.prepared import Prepared

# The builders import gate/prepared.py's functions where they run: the reports of an analysis,
# which read this registry's units and names, build no samples.

# ---------------------------------------------------------------------------------------------
# units: how people read a value


@dataclass(frozen=True)
class Unit:
    """The unit of a metric's values and how they are shown."""

    #: shown beside a value (HTML history, the xlsx ``value_unit`` column); "" for a bare number
    name: str
    #: nanoseconds: tables show µs, text picks ns / µs / ms / s by magnitude
    time: bool = False
    #: report.xlsx number format kind of a cell (``report.excel``: us, ratio, float, int)
    xlsx: str = "float"

    def text(self, x: float) -> str:
        """A value for the terminal (the verdict table): 3 significant digits in the largest
        time unit it reaches, or 4 significant digits."""
        if not math.isfinite(x):
            return "-"
        if self.time:
            for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
                if abs(x) >= scale:
                    return f"{x / scale:.3g} {unit}"
            return f"{x:.0f} ns"
        return f"{x:.4g}"


NS = Unit("ns", time=True, xlsx="us")
FRACTION = Unit("fraction")
RATIO = Unit("ratio", xlsx="ratio")
GBPS = Unit("GB/s")
CV = Unit("CV")
COUNT = Unit("count", xlsx="int")
#: a metric this registry does not know (an old baseline's, a user's table)
PLAIN = Unit("")

# ---------------------------------------------------------------------------------------------
# builders: how rows are computed

#: what one samples row of a metric stands for
DISPATCH = "dispatch"  # one kernel dispatch (many rows per process unit)
PROCESS = "process"    # one process unit (``host/pid/rank/run``)
RUN = "run"            # one run of all ranks (unit ``-/-/-/<run>``)

#: point facts (:attr:`Rows.keep_if`): amounts per point, summed over all tables
COLLECTIVE_DISPATCHES = "collective dispatches"
COMMUNICATION_NS = "communication time"


@dataclass
class BuildInput:
    """One table of dispatches as every process builder reads it."""

    dispatches: pd.DataFrame  # index 0..n-1; ``end_ns`` present where start and duration are
    prepared: Prepared        # its codes, after warm-up
    steps: np.ndarray         # per (point, unit) group of ``prepared``: steps run
    gated: np.ndarray         # per kept row of ``prepared``: its kernel is selected by the regexes
    compact: bool             # the samples table is compacted (``samples.compact_samples``)


@dataclass
class Rows:
    """Samples rows of one metric from one builder, in (point, unit) order."""

    metric: str
    frame: pd.DataFrame  # ``SAMPLE_COLUMNS``
    #: a point fact: the rows are kept only on points where its total amount is positive
    keep_if: str | None = None
    #: optional, per row: an integer equal exactly where (point, unit) is (``Prepared.pu``);
    #: spares comparing the labels of a long frame
    groups: np.ndarray | None = None

    @classmethod
    def of(cls, metric: str, point, kernel, unit, value, keep_if: str | None = None) -> Rows:
        """Rows from column values (arrays, or a scalar for every row)."""
        return cls(metric, pd.DataFrame({"point": point, "kernel": kernel, "metric": metric, "unit": unit,
                                         "value": value}), keep_if)


@dataclass
class Built:
    """What a process builder returns for one table."""

    rows: list[Rows]
    #: fact -> point -> amount in this table
    facts: dict[str, dict[str, float]] = field(default_factory=dict)


ProcessBuilder = Callable[[BuildInput], Built]


@dataclass(frozen=True)
class RunBuilder:
    """Metrics over several processes (the ranks of a run)."""

    #: the dispatches of one table it needs (None: none); gathered from every trace source
    gather: Callable[[pd.DataFrame], pd.DataFrame | None]
    #: (dispatches, warm-up, notes to append to) -> samples frames
    build: Callable[[pd.DataFrame, int, list[str]], list[pd.DataFrame]]
    #: the dispatches ``build`` still reads of a table whose ``gather`` gave none, once another
    #: table's gave some (None: none): what ``build`` reads of a table depends on the others
    rest: Callable[[pd.DataFrame], pd.DataFrame | None] = lambda _d: None  # most read each table alone


@dataclass(frozen=True)
class Metric:
    """One gate metric."""

    name: str
    unit: Unit
    description: str
    #: computes its rows; None: derived by the comparison itself (``cv_robust``)
    builder: ProcessBuilder | RunBuilder | None
    #: a regression is a fall
    higher_is_better: bool = False
    #: what one samples row stands for: DISPATCH, PROCESS or RUN
    scope: str = PROCESS
    #: a sum over the process divided by the steps it ran (``gate.prepared.unit_steps``)
    per_step: bool = False
    #: compared by the gate (False: context rows, e.g. dispatch counts)
    gated: bool = True


#: kernel label of the GEMM overlap metrics' rows
GEMM_KERNEL = "category:gemm"
#: kernel label of point-level rows
ALL_KERNELS = "*"


def dur_frame(p: Prepared, mask: np.ndarray, values: np.ndarray | None = None) -> pd.DataFrame:
    """``dur_ns`` rows of the kept dispatches in ``mask`` (``values``: theirs, when not the
    dispatches' own, as compaction stores them). The text columns are categoricals over the
    codes: a row per dispatch must not copy its kernel name (``samples`` makes them text, or
    keeps them so for a caller that asks)."""
    pu = p.pu[mask]
    return pd.DataFrame({"point": _labels(pu, p.point_of), "kernel": _labels(p.kernel[mask], p.kernels),
                         "metric": _labels(np.zeros(len(pu), np.int8), np.asarray([DUR_NS], dtype=object)),
                         "unit": _labels(pu, p.unit_of),
                         "value": np.asarray(p.value[mask] if values is None else values, dtype=float)})


def _labels(codes: np.ndarray, names: np.ndarray) -> pd.Categorical:
    """``names[codes]`` as a categorical of the names (codes index ``names``, which may repeat
    a name: each is kept once)."""
    uniq, inverse = np.unique(np.asarray(names, dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(inverse.reshape(-1)[codes], categories=pd.Index(uniq, dtype=object))


def _dur(t: BuildInput) -> Built:
    from pytest_gemmperf.gate.prepared import compact_order  # lazy: see the imports

    p = t.prepared
    mask, values = compact_order(p, t.gated) if t.compact else (t.gated, None)
    return Built([Rows(DUR_NS, dur_frame(p, mask, values), groups=p.pu[mask])])


def _count(t: BuildInput) -> Built:
    """``dispatch_count`` rows, as ``samples.compact_samples`` writes them."""
    if not t.compact:
        return Built([])
    p = t.prepared
    key = p.pu[t.gated] * len(p.kernels) + p.kernel[t.gated]
    uniq, n = np.unique(key, return_counts=True)
    pu, kern = uniq // len(p.kernels), uniq % len(p.kernels)
    return Built([Rows.of(DISPATCH_COUNT, p.point_of[pu], p.kernels[kern], p.unit_of[pu], n.astype(float))])


def _control(t: BuildInput) -> Built:
    """``control_ns`` rows: per (point, unit) the median dispatch duration of every kernel the
    regexes do not select, after warm-up (its log median: the geometric midpoint of the two
    middle dispatches of an even count). One row per kernel and process, never gated: the
    within-process controls from which the gate estimates each process's shared factor
    (``gate/durations.py``). None when every kernel is gated."""
    p = t.prepared
    other = ~t.gated & (p.value > 0)
    if not other.any():
        return Built([])
    n_k = len(p.kernels)
    key = p.pu[other].astype(np.int64) * n_k + p.kernel[other]
    logv = np.log(p.value[other])
    order = np.lexsort((logv, key))
    uniq, start, count = np.unique(key[order], return_index=True, return_counts=True)
    v = logv[order]
    med = (v[start + (count - 1) // 2] + v[start + count // 2]) / 2
    pu, kern = uniq // n_k, uniq % n_k
    return Built([Rows.of(CONTROL_NS, p.point_of[pu], p.kernels[kern], p.unit_of[pu], np.exp(med))])


def category_frame(p: Prepared) -> pd.DataFrame:
    """``category_total_ns`` per (point, unit, category): GPU time of the unit (not yet per step).

    Each kernel contributes its kept (post-warm-up) time scaled by ``dispatches / kept
    dispatches`` -- its warm-up dispatches count at the kernel's steady-state mean, since the
    steps they belong to are in the unit's step count."""
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
    return Rows.of(CATEGORY_TOTAL_NS, p.point_of[pu], "category:" + p.categories[cat].astype(object),
                   p.unit_of[pu], tot.astype(float)).frame


def category_totals_of(kernels: Iterable[object]) -> set[str]:
    """The ``category_total_ns`` rows (``category:<cat>``) of the categories these kernel names
    belong to, by the default category rules the samples are built with."""
    return {f"category:{category_of(str(k))}" for k in kernels}


def _category(t: BuildInput) -> Built:
    if not len(t.prepared.rows):
        return Built([])
    return Built([Rows(CATEGORY_TOTAL_NS, category_frame(t.prepared))])


def _overlap(t: BuildInput) -> Built:
    """``overlap_fraction`` and ``interference_slowdown`` per unit of points with GEMMs and
    collectives. Same-GPU groups include the trace file, so a unit whose table holds no
    collective of its point has nothing covered: its ``overlap_fraction`` rows (0) are kept
    only if another table brings collectives to the point."""
    from pytest_gemmperf.gate.prepared import points_with  # lazy: see the imports

    d, p = t.dispatches, t.prepared
    if "category" not in d.columns or "end_ns" not in d.columns:
        return Built([])
    gm = category_mask(d, None, "gemm")
    cm = category_mask(d, None, "collective")
    per_point = pd.Series(np.bincount(p.pu_row[cm], minlength=len(p.point_of)).astype(float)).groupby(
        p.point_of).sum()
    facts = {COLLECTIVE_DISPATCHES: {str(k): v for k, v in per_point[per_point > 0].items()}}
    with_gemm = points_with(p, p.pu_row, gm)
    with_coll = points_with(p, p.pu_row, cm)
    rows = _covered_rows(d, p, with_gemm & with_coll)
    only = with_gemm & ~with_coll
    if only.any():
        rows += _uncovered_rows(d, p, gm, only)
    return Built(rows, facts)


def _covered_rows(d: pd.DataFrame, p: Prepared, both: np.ndarray) -> list[Rows]:
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
    out = [Rows.of(OVERLAP_FRACTION, p.point_of[has], GEMM_KERNEL, p.unit_of[has], frac)]
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
            out.append(Rows.of(INTERFERENCE_SLOWDOWN, p.point_of[pu_i], GEMM_KERNEL, p.unit_of[pu_i],
                               np.exp((num / den).to_numpy(float))))
    return out


def _uncovered_rows(d: pd.DataFrame, p: Prepared, gm: np.ndarray, only: np.ndarray) -> list[Rows]:
    """``overlap_fraction`` rows (0 covered) of the units in ``only`` (their point has GEMMs but
    no collectives in this table), with the arithmetic of :func:`_covered_rows`."""
    kept = np.zeros(len(d), dtype=bool)
    kept[p.rows] = True
    rows = np.flatnonzero(gm & kept & only[p.pu_row])
    if len(rows) == 0:
        return []
    pu = p.pu_row[rows]
    n_pu = len(p.point_of)
    dur = (d["end_ns"].to_numpy(np.int64)[rows] - d["start_ns"].to_numpy(np.int64)[rows]).astype(float)
    tot = np.bincount(pu, weights=dur, minlength=n_pu)
    has = np.bincount(pu, minlength=n_pu) > 0
    frac = np.bincount(pu, weights=np.zeros(len(rows)), minlength=n_pu)[has] / tot[has]
    return [Rows.of(OVERLAP_FRACTION, p.point_of[has], GEMM_KERNEL, p.unit_of[has], frac,
                    keep_if=COLLECTIVE_DISPATCHES)]


def _timeline(t: BuildInput) -> Built:
    """``exposed_comm_ns`` and ``computation_ns`` per unit (TraceLens definitions, whole trace:
    a timeline has no per-kernel warm-up), kept on points with communication time."""
    from pytest_gemmperf.gate.prepared import point_labels, unit_ids  # lazy: see the imports

    d = t.dispatches
    if "end_ns" not in d.columns:
        return Built([])
    tl = gpu_timeline(d)
    tl = tl.assign(_point=point_labels(tl), _unit=unit_ids(tl))
    per_unit = tl.groupby(["_point", "_unit"], sort=True)[
        ["exposed_comm_time_ns", "computation_time_ns", "total_comm_time_ns"]].sum()
    comm = per_unit.groupby(level="_point")["total_comm_time_ns"].sum()
    pt = per_unit.index.get_level_values("_point").to_numpy(object)
    un = per_unit.index.get_level_values("_unit").to_numpy(object)
    rows = [Rows.of(m, pt, ALL_KERNELS, un, per_unit[col].to_numpy(float), keep_if=COMMUNICATION_NS)
            for m, col in ((EXPOSED_COMM_NS, "exposed_comm_time_ns"), (COMPUTATION_NS, "computation_time_ns"))]
    return Built(rows, {COMMUNICATION_NS: {str(k): int(v) for k, v in comm.items()}})


def _collective_input(d: pd.DataFrame) -> pd.DataFrame | None:
    """A table's collective kernels where it carries collective metadata."""
    if "coll_name" not in d.columns or not d["coll_name"].notna().any():
        return None
    return d[coll.collective_mask(d)]


def _collective_rest(d: pd.DataFrame) -> pd.DataFrame | None:
    """A table's collective kernels (category ``collective``) without metadata: matched with
    the ranks that carry it (by stream order) once any table does, as in one table."""
    m = coll.collective_mask(d)
    return d[m] if m.any() else None


def _collective_frames(d: pd.DataFrame, warmup: int, notes: list[str]) -> list[pd.DataFrame]:
    """``coll_latency_ns`` / ``coll_busbw_gbps`` per (point, ``<collective>:<size bucket>``,
    run); collectives that cannot be matched across ranks are skipped with a note."""
    if "coll_name" not in d.columns or not d["coll_name"].notna().any():
        return []
    try:
        match = coll.match_collectives(d, warmup=warmup, strict=False)
        out = coll.collective_samples(match)
    except GemmperfInputError as exc:
        notes.append(f"collective metrics skipped: {exc}")
        return []
    notes += match.notes
    return [out]


COLLECTIVES = RunBuilder(gather=_collective_input, build=_collective_frames, rest=_collective_rest)

# ---------------------------------------------------------------------------------------------
# the registry

DUR_NS = "dur_ns"
DISPATCH_COUNT = "dispatch_count"
CONTROL_NS = "control_ns"
CATEGORY_TOTAL_NS = "category_total_ns"
OVERLAP_FRACTION = "overlap_fraction"
INTERFERENCE_SLOWDOWN = "interference_slowdown"
EXPOSED_COMM_NS = "exposed_comm_ns"
COMPUTATION_NS = "computation_ns"
#: named by the analysis that computes them (``analysis.collectives.collective_samples``)
COLL_LATENCY_NS = coll.METRIC_LATENCY
COLL_BUSBW_GBPS = coll.METRIC_BUSBW
CV_ROBUST = "cv_robust"

#: every metric, in the order of the samples table's rows (builders run in this order, each once)
REGISTRY: dict[str, Metric] = {m.name: m for m in (
    Metric(DUR_NS, NS, "duration of each dispatch of the kernels the point's regexes select, "
           "after warm-up; kernel: the kernel name", _dur, scope=DISPATCH),
    Metric(DISPATCH_COUNT, COUNT, "dispatches per kernel and unit before compaction to quantiles "
           "(the noise floor of a per-process median depends on it); context, never gated", _count,
           gated=False),
    Metric(CONTROL_NS, NS, "median dispatch duration per process of every kernel the point's regexes do "
           "not select: the within-process controls of the shared per-process factor; context, never "
           "gated", _control, gated=False),
    Metric(CATEGORY_TOTAL_NS, NS, "GPU time per step of every kernel category over ALL dispatches, "
           "so a kernel swapped for a slower one shows up; kernel: category:<category>", _category,
           per_step=True),
    Metric(OVERLAP_FRACTION, FRACTION, "GEMM time covered by same-GPU collectives / GEMM time, on "
           "points with GEMMs and collectives; kernel: category:gemm", _overlap, higher_is_better=True),
    Metric(INTERFERENCE_SLOWDOWN, RATIO, "per kernel median overlapped / median isolated GEMM duration, "
           "geometric mean weighted by dispatches; kernel: category:gemm", _overlap),
    Metric(EXPOSED_COMM_NS, NS, "communication time not hidden by computation, per step (TraceLens); "
           "kernel: *", _timeline, per_step=True),
    Metric(COMPUTATION_NS, NS, "computation time, per step (TraceLens); kernel: *", _timeline, per_step=True),
    Metric(COLL_LATENCY_NS, NS, "median latency of matched collectives (first start to last end over "
           "the ranks); kernel: <collective>:<size bucket>", COLLECTIVES, scope=RUN),
    Metric(COLL_BUSBW_GBPS, GBPS, "median bus bandwidth of matched collectives; kernel: "
           "<collective>:<size bucket>", COLLECTIVES, higher_is_better=True, scope=RUN),
    Metric(CV_ROBUST, CV, "per-kernel dispersion of dispatch durations within processes, derived "
           "from dur_ns by the comparison (gate/durations.py)", None),
)}


def lookup(name: str) -> Metric:
    """The entry of ``name``; ``<metric>:<qualifier>`` (older verdict tables wrote
    ``category_total_ns:<category>``) reads as ``<metric>``. An unknown name gets a plain,
    lower-is-better entry, in nanoseconds when it ends with ``_ns``."""
    m = REGISTRY.get(name)
    if m is None:
        m = REGISTRY.get(name.split(":", 1)[0])
    if m is None:
        m = Metric(name, NS if name.endswith("_ns") else PLAIN, "not a registered metric", None)
    return m


def _each(names: Iterable[str], fact: Callable[[Metric], object], dtype) -> np.ndarray:
    """``fact`` of each name's entry, looked up once per distinct name (a categorical column
    is factorized from its codes)."""
    shape = (len(names),) if isinstance(names, (pd.Series, pd.Index)) else np.shape(names)
    if not isinstance(names, (pd.Series, pd.Index)):
        names = np.asarray(names, dtype=object).ravel()
    codes, uniq = pd.factorize(names, use_na_sentinel=False)
    table = np.asarray([fact(lookup(str(u))) for u in uniq], dtype=dtype)
    return (table[codes] if len(uniq) else np.zeros(len(codes), dtype=dtype)).reshape(shape)


def is_time(names: Iterable[str]) -> np.ndarray:
    """Per metric name: are its values nanoseconds?"""
    return _each(names, lambda m: m.unit.time, bool)


def higher_is_better(names: Iterable[str]) -> np.ndarray:
    """Per metric name: is a fall the regression?"""
    return _each(names, lambda m: m.higher_is_better, bool)


def is_gated(names: Iterable[str]) -> np.ndarray:
    """Per metric name: does the gate compare it (False: context rows)?"""
    return _each(names, lambda m: m.gated, bool)


def per_dispatch(names: Iterable[str]) -> np.ndarray:
    """Per metric name: does a row stand for one dispatch (many rows per unit)?"""
    return _each(names, lambda m: m.scope == DISPATCH, bool)


def format_value(x: float, name: str) -> str:
    """``x`` of metric ``name`` for the terminal (see :meth:`Unit.text`)."""
    return lookup(name).unit.text(float(x))


def process_builders() -> list[ProcessBuilder]:
    """The registry's per-process builders, each once, in registry order."""
    out: list = []
    for m in REGISTRY.values():
        if m.builder is not None and not isinstance(m.builder, RunBuilder) and m.builder not in out:
            out.append(m.builder)
    return out


def run_builders() -> list[RunBuilder]:
    """The registry's run builders, each once, in registry order."""
    out: list = []
    for m in REGISTRY.values():
        if isinstance(m.builder, RunBuilder) and m.builder not in out:
            out.append(m.builder)
    return out


def row_order() -> dict[str, int]:
    """Position of each metric's rows in the samples table."""
    return {name: i for i, name in enumerate(REGISTRY)}
