"""The gate's power: how many processes per side it needs to call a change of a given size a
regression.

``gemmperf plan`` and ``pytest --gemmperf-repeats auto`` ask this of a baseline record. The
noise of each gated row comes from the gate itself: the baseline compared with itself through
:func:`~pytest_gemmperf.gate.compare.compare_stats`, so every row carries the variance the gate
would use (per-process summaries, shared per-process factor, moderated and floored variance,
variance history) and its degrees of freedom, whatever model the gate has. This module turns
those into the probability that the gate's decision rule calls a change of ``d`` a regression
with ``n`` processes per side:

* the change must reach the per-row level of Benjamini-Hochberg when it is the only change
  among the ``m`` rows it is corrected with (the conservative single-change approximation:
  BH then rejects it iff ``p <= q/m``; more real changes only make it easier), on the test
  that carries a single kernel's change (its change relative to the movement shared by all
  kernels, in the ``(1 - shared_alpha) q`` family of the hierarchical rule);
  the test divides the change by the variance the gate will estimate at ``n``, rebuilt from
  its parts on the record's kernel row: the prior's location (whose df the gate bounds by the
  comparison's own, ``prior_df_cap``) and the kernel's own variance, a chi-square on
  ``2n - 2`` (+ history) df, moderated (the robust prior's df lowered for that draw as the
  gate lowers an upper outlier's), then floored by the median's sampling variance, plus the
  timer's term, which no count averages away: the smallest of the ``2n`` compared processes'
  ticks, drawn from the record's processes (the record's self-comparison counts its processes
  twice; :func:`_variance_parts` says how that is undone);
* and the two-part rule: the interval that sizes it (the total change's, with the sides' mean
  per-process factors, on its Welch df, unless the variance history sizes it by the relative
  change) must exclude 1 at ``level`` and lie above ``1 + threshold`` at ``threshold_level``;
  a change that grows the median by no more than ``abs_floor_ns`` has no power;
* a category total is planned as every kernel of its category slower by ``d``: where those
  kernels are most of the point's gated ones the ``*`` row moves with them, and its rejection
  opens the total at the full FDR (:func:`_opened_power`).

Both conditions are evaluated exactly for normal estimates with chi-square variance estimates
(the variance estimates and the shared movement integrated on quantile grids; the change itself
in closed form). Model, choices and the simulation that checks it: docs/statistics.md
("Planning: how many processes").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from pytest_gemmperf.config import default
from pytest_gemmperf.gate.compare import (CV, DUR, RELATIVE_MIN_HISTORY_DF, SHARED, GateConfig,
                                          compare_stats)
from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.gate import stats
from pytest_gemmperf.gate.noise_floors import process_ticks
from pytest_gemmperf.gate.samples import DISPATCH_COUNT

#: per-process totals the plan sizes like kernels (one value per process, plain t-test)
TOTAL_PREFIX = "category_total_ns"
#: power asked for unless told otherwise
DEFAULT_POWER = 0.8
#: largest count searched unless told otherwise (processes per side): the max_repeats setting's
DEFAULT_MAX_PROCESSES = default("max_repeats")
#: true changes of the operating curve, in multiples of the threshold
CURVE_MULTIPLES = (0.0, 0.5, 0.8, 1.0, 1.4, 2.0)
#: quantile-grid sizes of the integration: the kernel's variance estimate, the shared
#: factor's variance estimate, the shared movement (power within 1 point of 4x finer grids)
_GRID = (32, 16, 16)


@dataclass(frozen=True)
class RowNoise:
    """One gated row of a baseline as the gate sees its noise (log scale)."""

    point: str
    kernel: str
    metric: str
    #: baseline processes the row was seen in
    processes: int
    #: per-process sd of the row's own change: the moderated, floored variance the gate uses
    #: (timer-resolution term included), for a kernel relative to the shared movement
    sd: float
    #: per-process sd of the factor shared by all kernels of a process (0: none removed)
    shared_sd: float = 0.0
    #: degrees of freedom the cross-kernel prior adds to the variance (inf: taken as known)
    prior_df: float = 0.0
    #: degrees of freedom of the baseline's variance history pooled into it
    history_df: float = 0.0
    #: half-width of the gate's ``level`` interval of the change at ``processes`` per side
    ci_half: float = math.nan
    #: median dispatches per process (NaN for a per-process total)
    dispatches: float = math.nan
    #: the baseline's median duration (ns): a regression must grow it by more than
    #: ``abs_floor_ns`` (NaN: not a duration)
    median_ns: float = math.nan
    #: per-process sd of the prior's location for this kernel (NaN: ``sd``)
    prior_sd: float = math.nan
    #: the kernel's own per-process sd: the record's variance shrunk towards the prior as the
    #: gate would shrink it on the record's real df (NaN: ``sd``)
    own_sd: float = math.nan
    #: per-process sd the gate never goes below: the median's sampling floor (NaN: none)
    floor_sd: float = math.nan
    #: the prior's df before the robust prior's outlier rule (NaN: ``prior_df`` at every
    #: count): the gate lowers a kernel's share of it by how improbable the kernel's own
    #: variance is under the prior, which at another count is another chi-square draw
    prior_fit_df: float = math.nan
    #: variance (log scale) the timer's resolution adds to the change at any count: the record's
    resolution_var: float = 0.0
    #: the same term from the tick each of the record's processes shows alone, ascending (inf:
    #: none); the gate takes the smallest over the processes it compares, so the term at a count
    #: is the smallest of that many draws (empty: ``resolution_var`` at every count)
    resolution_vars: tuple[float, ...] = ()
    #: parameters the shared part's variance is estimated after: 2 (the sides' means), 3 with
    #: within-process controls (and the regression's slope); its df is processes - this
    shared_params: int = 2
    #: a category total whose kernels are most of the point's gated kernels: a change of them
    #: moves the ``*`` row, whose rejection opens the total at the full FDR (the hierarchical
    #: rule's second pass). Per-process sd of the ``*`` row's factor (0: no ``*`` row moves
    #: with this row; the single-change model alone)
    opens_sd: float = 0.0
    #: df of the ``*`` row's variance history
    opens_history_df: float = 0.0
    #: per-process sd of each of the category's kernel totals, which change with it
    kernel_total_sds: tuple[float, ...] = ()
    #: which of them are tested in the first pass beside the ``*`` row (within-process controls)
    kernel_first_pass: tuple[bool, ...] = ()
    #: rows of the first pass: the ``*`` row and every kernel total measured against controls
    first_pass_rows: int = 1
    #: the category's kernel rows (the order of ``kernel_total_sds``): the df of each kernel
    #: total's test at a count (empty: the processes' own, ``2n - 2``)
    kernel_rows: tuple["RowNoise", ...] = ()


@dataclass(frozen=True)
class Decision:
    """What a regression takes: the per-row level and the two-part rule of a GateConfig."""

    threshold: float
    #: two-sided level the row's test must reach (single-change Benjamini-Hochberg)
    alpha: float
    #: the gate's false discovery rate the level derives from
    fdr: float = 0.01
    level: float = 0.95
    threshold_level: float = 0.8
    #: size every kernel by its relative change (``GateConfig.size_by_relative``); otherwise
    #: only those with this much variance history
    size_by_relative: bool = False
    relative_min_history_df: float = RELATIVE_MIN_HISTORY_DF
    #: the prior's df is at most this many times the comparison's own df
    #: (``GateConfig.prior_df_cap``; None: no bound)
    prior_df_cap: float | None = None
    #: a regression of a duration must grow its median by more than this (ns)
    abs_floor_ns: float = 0.0
    #: the prior is the robust one (``GateConfig.prior``): a kernel whose variance is an upper
    #: outlier of it keeps less of its df (``stats.robust_prior_df``)
    robust_prior: bool = False
    #: the ``*`` rows' share of the FDR (``shared_alpha`` of the hierarchical rule; 0: no
    #: ``*`` row opens anything, the Simes rule)
    shared_share: float = 0.0
    #: rows corrected together: the family of the relative tests and of the second pass
    rows: int = 1


@dataclass(frozen=True)
class RowPlan:
    noise: RowNoise
    #: smallest processes per side reaching the power; None: not within the largest count
    needed: int | None
    #: power at the recorded count per side
    power_now: float
    #: the operating curve: the chance the row ends ``regression`` at the recorded count per
    #: side when it alone changes by each of :data:`CURVE_MULTIPLES` x ``PointPlan.curve_unit``
    curve: tuple[float, ...] = ()


@dataclass(frozen=True)
class PointPlan:
    """The plan of one sweep point: its rows and the decision they were planned for."""

    point: str
    #: processes per side the baseline recorded (the largest count over the point's rows)
    processes: int
    #: rows corrected together (Benjamini-Hochberg family of a single kernel's change)
    rows_in_family: int
    decision: Decision
    effect: float
    target: float
    max_processes: int
    rows: tuple[RowPlan, ...]
    #: the change the operating curve's multiples are of: the threshold (the change to detect
    #: at threshold 0)
    curve_unit: float = math.nan

    @property
    def kernels(self) -> tuple[RowPlan, ...]:
        """The kernel rows (``dur_ns``), without per-process totals."""
        return tuple(r for r in self.rows if r.noise.metric == DUR)

    def count_for(self, rows: Sequence[RowPlan] | None = None) -> tuple[int | None, int]:
        """(processes per side that detect the change in every row of ``rows`` (default: the
        kernels) that any count up to the largest can detect, or None when none can; how
        many rows that is)."""
        rows = self.kernels if rows is None else rows
        reachable = [r.needed for r in rows if r.needed is not None]
        return (max(reachable) if reachable else None), len(reachable)


# ---------------------------------------------------------------------------------------------
# the baseline's noise, from the gate


def row_noise(base: pd.DataFrame, config: GateConfig | None = None, history: pd.DataFrame | None = None,
              test: str = "") -> tuple[list[RowNoise], int]:
    """Each gated row's noise as the gate estimates it from ``base`` (a samples table, its
    variance ``history``), and the number of rows a single kernel's change is corrected with.

    The baseline is compared with itself (its processes on both sides): every kernel then has
    change 0, and the statistics carry the variance the gate would use at the recorded count.
    Its own processes count twice in that comparison's degrees of freedom; the prior's df
    is read after taking them out (``df_rel - (2 n - 2)``), and the prior fitted on the doubled
    df is, if anything, smaller than a real comparison's (conservative)."""
    cfg = dataclasses.replace(config or GateConfig(), multiplicity="hierarchical")
    st = compare_stats(base, base, cfg, test, history)
    metric = st["metric"].astype(str)
    kernel = st["kernel"].astype(str)
    finite = np.isfinite(st["p_value"].to_numpy(float))
    family = finite & (kernel != SHARED).to_numpy() & ((metric != CV).to_numpy() | (not cfg.dispersion_family))
    counts = _dispatches(base)
    ticks = _timer_terms(base)
    rows: list[RowNoise] = []
    for point, g in st.groupby(st["point"].astype(str), sort=True):
        star = g[(g["kernel"].astype(str) == SHARED) & (g["metric"].astype(str) == DUR)]
        shared_sd = float(star["unit_sd_log"].iloc[0]) if len(star) else 0.0
        shared_sd = shared_sd if np.isfinite(shared_sd) else 0.0
        # the '*' row's df beyond its processes' own (its variance history)
        star_hist = float(star["df_t"].iloc[0] - (star["n_base"].iloc[0] + star["n_cand"].iloc[0] - 2)) \
            if len(star) else 0.0
        first = len(rows)
        for r in g.itertuples(index=False):
            m, k = str(r.metric), str(r.kernel)
            if not np.isfinite(getattr(r, "p_value", np.nan)) or k == SHARED:
                continue
            n = int(r.n_base)
            half = math.log(r.ci_high) if np.isfinite(r.ci_high) and r.ci_high > 0 else math.nan
            if m == DUR:
                noise = _kernel_noise(point, k, r, n, _shared_sd(r, n, shared_sd), half,
                                      counts.get((point, k), math.nan), cfg)
                if (getattr(r, "controls", 0) or 0) > 0:
                    noise = dataclasses.replace(noise, shared_params=3)
                if noise.resolution_var > 0 and (point, k) in ticks:
                    noise = dataclasses.replace(noise, resolution_vars=ticks[point, k])
                rows.append(noise)
            elif m.startswith(TOTAL_PREFIX) and np.isfinite(r.unit_sd_log):
                rows.append(RowNoise(point, k, m, n, float(r.unit_sd_log), ci_half=half,
                                     median_ns=float(r.base_median_ns)))
        if shared_sd > 0:
            rows[first:] = _opened_by_shared(rows[first:], shared_sd, max(star_hist, 0.0) if np.isfinite(star_hist)
                                             else 0.0)
    return rows, int(family.sum())


def _opened_by_shared(rows: list[RowNoise], star_sd: float, star_history_df: float) -> list[RowNoise]:
    """The point's ``rows`` with each category total that a change of its category's kernels
    opens through the ``*`` row: the median over the gated kernels that the ``*`` row takes
    moves with the category when its kernels are most of them. Such a total then carries the
    ``*`` row's noise and its category's kernel totals (tested in the same passes)."""
    kernels = [r for r in rows if r.metric == DUR]
    cats = [M.category_of(r.kernel) for r in kernels]
    first_rows = 1 + sum(r.shared_params == 3 for r in kernels)
    out = []
    for r in rows:
        cat = r.kernel.split(":", 1)[-1] if r.metric.startswith(TOTAL_PREFIX) else None
        mine = [k for k, c in zip(kernels, cats) if c == cat]
        if cat is None or 2 * len(mine) <= len(kernels):
            out.append(r)
            continue
        out.append(dataclasses.replace(
            r, opens_sd=star_sd, opens_history_df=star_history_df,
            kernel_total_sds=tuple(math.hypot(k.sd, k.shared_sd) for k in mine),
            kernel_first_pass=tuple(k.shared_params == 3 for k in mine), first_pass_rows=first_rows,
            kernel_rows=tuple(mine)))
    return out


def _shared_sd(r, n: int, star_sd: float) -> float:
    """Per-process sd of the shared part of a kernel's total: with within-process controls the
    regression's residual one (the self-comparison fits it on each process twice, ``2n - 3``
    df where the residuals have ``2n - 4``: undone here), else the ``*`` row's."""
    if not (getattr(r, "controls", 0) or 0) > 0:
        return star_sd
    sd = float(getattr(r, "shared_sd_log", np.nan))
    if not np.isfinite(sd) or n < 3:
        return star_sd
    return sd * math.sqrt((2.0 * n - 3.0) / (2.0 * n - 4.0))


def _kernel_noise(point: str, kernel: str, r, n: int, shared_sd: float, half: float, dispatches: float,
                  cfg: GateConfig) -> RowNoise:
    """A kernel row of the self-comparison: the relative test's standard error gives the
    kernel's per-process sd as the gate reads it, its df the prior's share (the history's is in
    the row), and the parts of its variance (:func:`_variance_parts`) the variance the gate
    will use at another count."""
    df_rel = float(getattr(r, "df_rel", np.nan))
    hist = float(getattr(r, "history_df", 0.0) or 0.0)
    rel_hi = float(getattr(r, "rel_ci_high", np.nan))
    t_q = float(_t_two_sided(cfg.level, np.array([df_rel]))[0]) if np.isfinite(df_rel) else math.nan
    if np.isfinite(rel_hi) and rel_hi > 0 and np.isfinite(t_q) and t_q > 0:
        se_rel = math.log(rel_hi / float(r.rel_ratio)) / t_q
        sd = se_rel / math.sqrt(2.0 / n)
    else:  # no relative test (too few kernels for a shared factor): the total is the row's change
        return RowNoise(point, kernel, DUR, n, float(r.unit_sd_log), 0.0, math.inf, hist, half, dispatches,
                        float(r.base_median_ns))
    own = 2.0 * n - 2.0
    prior = max(df_rel - own - hist, 0.0) if np.isfinite(df_rel) else math.inf
    noise = RowNoise(point, kernel, DUR, n, sd, shared_sd, prior, hist, half, dispatches, float(r.base_median_ns))
    return _variance_parts(noise, r, cfg)


def _variance_parts(noise: RowNoise, r, cfg: GateConfig) -> RowNoise:
    """``noise`` with the parts of the gate's variance, as they will be at any count.

    The self-comparison counts each of the record's ``n`` processes twice: its variances sit
    on ``2n - 2`` df (+ history) where they have ``n - 1``. The prior fitted to them is the
    one of the wrong df: the spread of the kernels' variances that the real df's chi-square
    explains is read as the prior's own (its df too small), and their median is matched to
    the wrong distribution (its location too small). Both are undone here by the same
    quantile matching the fit uses (:func:`_undoubled`); the kernel's own variance is then
    shrunk towards that prior on the real df, with the gate's bound on the prior's df."""
    own_var = float(getattr(r, "own_var", np.nan))
    prior_var = float(getattr(r, "prior_var", np.nan))
    fit_df = float(getattr(r, "prior_df", np.nan))
    if not (np.isfinite(own_var) and np.isfinite(prior_var) and prior_var > 0 and np.isfinite(noise.prior_df)
            and fit_df > 0):
        return noise
    n, hist = noise.processes, noise.history_df
    df_rec, df_real = 2.0 * n - 2.0 + hist, n - 1.0 + hist
    cap = cfg.prior_df_cap if cfg.moderate else None
    if cap is not None and fit_df >= 0.999 * cap * df_rec:
        # the record's prior df was at the gate's bound: the fit's own lies above it
        d0, factor = math.inf, _undoubled(fit_df, df_rec, df_real)[1]
    else:
        d0, factor = _undoubled(fit_df, df_rec, df_real)
    # a kernel the robust prior treats as an outlier keeps its share of the prior's df
    share = min(noise.prior_df / fit_df, 1.0) if np.isfinite(fit_df) else 1.0
    d0_k = d0 if share >= 1.0 else (d0 * share if np.isfinite(d0) else 50.0 * share)
    s0_2 = prior_var * factor
    d0_post = min(d0_k, cap * df_real) if cap is not None else d0_k
    own = s0_2 if math.isinf(d0_post) else (d0_post * s0_2 + df_real * own_var) / (d0_post + df_real)
    floor = float(getattr(r, "floor_var", np.nan))
    res = float(getattr(r, "resolution_var", 0.0))
    return dataclasses.replace(noise, prior_df=d0_k, prior_fit_df=d0, prior_sd=math.sqrt(s0_2), own_sd=math.sqrt(own),
                               floor_sd=math.sqrt(floor) if np.isfinite(floor) and floor > 0 else math.nan,
                               resolution_var=res if np.isfinite(res) and res > 0 else 0.0)


def _undoubled(d0: float, df_rec: float, df_real: float) -> tuple[float, float]:
    """(prior df, factor on the prior's location) of the prior that the fit of
    ``stats.fit_f_dist_robust`` gives to variances on ``df_real`` df when it took them to have
    ``df_rec``: the df whose ``log F(df_real, d0)`` has the interquartile range the fit matched
    to ``log F(df_rec, d0_rec)``, the location moved by the two distributions' medians."""
    if not d0 > 0 or df_rec == df_real:
        return d0, 1.0
    lo, mid, hi = stats._log_f_quantiles(np.array([0.25, 0.5, 0.75]), df_rec, d0)
    d_real = stats._d0_from_iqr(float(hi - lo), df_real)
    (mid_real,) = stats._log_f_quantiles(np.array([0.5]), df_real, d_real)
    return d_real, math.exp(float(mid - mid_real))


def _timer_terms(samples: pd.DataFrame) -> dict[tuple[str, str], tuple[float, ...]]:
    """Per (point, kernel) of the ``dur_ns`` rows, the timer term each process's tick gives
    alone (``(tick / median)^2 / 3``, inf: the process bounds no tick), ascending: the smallest
    is the record's, and a comparison of other processes finds the smallest of its own. A
    process that shows a gap below the timer's period by chance (two durations a ns apart
    among its kept quantiles) is rare; a record of many processes holds one more often than a
    comparison of few, and the plan weighs it by how often that many processes would."""
    metric = samples["metric"].astype(str)
    d = samples[(metric == DUR).to_numpy()]
    out: dict[tuple[str, str], tuple[float, ...]] = {}
    for point, g in d.groupby(d["point"].astype(str), sort=True, observed=True):
        g = g.assign(value=pd.to_numeric(g["value"], errors="coerce"))
        kernels = pd.Index(sorted({str(x) for x in pd.unique(g["kernel"])}))
        tick, med = process_ticks(g, g.iloc[:0], kernels)
        with np.errstate(invalid="ignore", divide="ignore"):
            term = np.where(np.isfinite(tick) & (med[:, None] > 0), (tick / med[:, None]) ** 2 / 3, np.inf)
        seen = np.zeros(tick.shape, bool)
        units = pd.factorize(g["unit"], use_na_sentinel=False)[0]
        kc, names = pd.factorize(g["kernel"], use_na_sentinel=False)
        seen[kernels.get_indexer([str(x) for x in names])[kc], units] = True
        for i, k in enumerate(kernels):
            out[str(point), k] = tuple(float(x) for x in np.sort(term[i][seen[i]]))
    return out


def _dispatches(samples: pd.DataFrame) -> dict[tuple[str, str], float]:
    """Median dispatches per process of each (point, kernel): the recorded count of a
    compacted table, else the rows."""
    metric = samples["metric"].astype(str)
    cnt = samples[metric == DISPATCH_COUNT]
    if len(cnt):
        per = cnt.groupby([cnt["point"].astype(str), cnt["kernel"].astype(str)], observed=True)["value"].median()
    else:
        d = samples[metric == DUR]
        per = (d.groupby([d["point"].astype(str), d["kernel"].astype(str), d["unit"].astype(str)], observed=True)
               .size().groupby(level=[0, 1]).median())
    return {(str(p), str(k)): float(v) for (p, k), v in per.items()}


def decision(config: GateConfig | None, rows_in_family: int) -> Decision:
    """The per-row level and rule of ``config`` for a single change among ``rows_in_family``
    rows: BH rejects it iff ``p <= q'/m`` with ``q'`` its family's share of the FDR (the
    relative tests' ``(1 - shared_alpha) q`` under the hierarchical rule; under Simes the
    kernel's p doubles, so ``q/2``)."""
    cfg = config or GateConfig()
    m = max(int(rows_in_family), 1)
    if cfg.multiplicity == "hierarchical":
        share = 1.0 - min(max(cfg.shared_alpha, 1e-6), 1 - 1e-6)
    else:
        share = 0.5
    return Decision(threshold=float(cfg.threshold), alpha=share * cfg.fdr / m, fdr=float(cfg.fdr), level=cfg.level,
                    threshold_level=cfg.threshold_level, size_by_relative=cfg.size_by_relative,
                    prior_df_cap=cfg.prior_df_cap if cfg.moderate else None, abs_floor_ns=float(cfg.abs_floor_ns),
                    robust_prior=bool(cfg.moderate and cfg.prior == "robust"),
                    shared_share=1.0 - share if cfg.multiplicity == "hierarchical" else 0.0, rows=m)


# ---------------------------------------------------------------------------------------------
# power


def power(noise: Sequence[RowNoise], effect: float, n_base: int, n_cand: int, rule: Decision) -> np.ndarray:
    """Probability, per row, that a slowdown of ``effect`` (0.03 = 3 %) ends ``regression``
    with ``n_base`` and ``n_cand`` processes; NaN where a row's noise is unknown."""
    return _power(_arrays(noise, rule), math.log1p(effect), n_base, n_cand, rule)


def operating_curve(noise: Sequence[RowNoise], unit: float, n: int, rule: Decision,
                    multiples: Sequence[float] = CURVE_MULTIPLES) -> np.ndarray:
    """(rows x multiples): the chance each row ends ``regression`` with ``n`` processes per
    side when it alone changes by ``multiple x unit`` (a multiple of 0: the row's false-alarm
    chance at the level it is tested at)."""
    arr = _arrays(noise, rule)
    cols = [_power(arr, math.log1p(k * unit), n, n, rule) for k in multiples]
    return np.column_stack(cols) if cols and len(noise) else np.zeros((len(noise), len(multiples)))


def processes_needed(noise: Sequence[RowNoise], effect: float, rule: Decision, target: float = DEFAULT_POWER,
                     max_processes: int = DEFAULT_MAX_PROCESSES) -> list[int | None]:
    """Per row, the smallest processes per side (2 .. ``max_processes``) whose power for a
    slowdown of ``effect`` reaches ``target``; None when none does."""
    arr = _arrays(noise, rule)
    need: list[int | None] = [None] * len(noise)
    open_ = np.ones(len(noise), bool)
    d = math.log1p(effect)
    for n in range(2, max(int(max_processes), 2) + 1):
        if not open_.any():
            break
        p = _power(arr, d, n, n, rule)
        for i in np.flatnonzero(open_ & (p >= target)):
            need[i] = n
            open_[i] = False
    return need


def normal_approximation(sd: float, effect: float, rule: Decision, target: float = DEFAULT_POWER) -> float:
    """Processes per side the normal limit needs (variance known, no shared factor): the
    larger of ``2 ((z_{1-alpha/2} + z_power) sd / d)^2`` (significance) and
    ``2 ((z_{threshold_level} + z_power) sd / (d - log(1 + threshold)))^2`` (the bound beyond
    the threshold); inf when the change is not beyond the threshold."""
    d, lim = math.log1p(effect), math.log1p(rule.threshold)
    zp = sps.norm.ppf(target)
    z_sig = max(sps.norm.isf(rule.alpha / 2), sps.norm.ppf(0.5 + rule.level / 2))
    n_sig = 2 * ((z_sig + zp) * sd / d) ** 2
    if d <= lim:
        return math.inf
    n_thr = 2 * ((sps.norm.ppf(rule.threshold_level) + zp) * sd / (d - lim)) ** 2
    return max(n_sig, n_thr)


def _arrays(noise: Sequence[RowNoise], rule: Decision) -> dict[str, np.ndarray]:
    sd = np.array([r.sd for r in noise], float)
    sd = np.where(np.isfinite(sd) & (sd > 0), sd, np.nan)
    hist = np.array([r.history_df for r in noise], float)
    part = lambda name: np.array([getattr(r, name) for r in noise], float)  # noqa: E731
    return {"sd": sd, "prior_sd": np.where(np.isfinite(part("prior_sd")), part("prior_sd"), sd),
            "own_sd": np.where(np.isfinite(part("own_sd")), part("own_sd"), sd),
            "floor": np.nan_to_num(part("floor_sd")) ** 2, "timer": _timer_levels(noise),
            "shared": np.nan_to_num(np.array([r.shared_sd for r in noise], float)),
            "prior_df": np.array([r.prior_df for r in noise], float), "prior_fit": part("prior_fit_df"), "hist": hist,
            "median_ns": part("median_ns"), "shared_params": part("shared_params"),
            "by_rel": rule.size_by_relative | (hist >= rule.relative_min_history_df),
            # category totals a change of their kernels opens through the '*' row
            "opened": [(i, r) for i, r in enumerate(noise) if r.opens_sd > 0 and np.isfinite(sd[i])]}


#: per-process timer terms within this factor of each other are one level of the mixture, and
#: so are terms that differ by less than this share of the kernel's change variance at 16
#: processes per side (the largest count planned): they move no power
_TIMER_LEVEL_RATIO = 1.5
_TIMER_NEGLIGIBLE = 1e-3


def _timer_levels(noise: Sequence[RowNoise]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The timer term's levels per row (rows x levels, ascending; padded with weight-0 levels):
    (variance, first and past-last rank of the record's processes in the level, processes).
    Processes whose terms lie within :data:`_TIMER_LEVEL_RATIO` of the level's smallest (or
    negligibly above it) are one level at that smallest (the least of several draws from it);
    processes that bound no tick are the last level, 0 (the gate's term when none of its
    processes bounds one)."""
    per_row = []
    for r in noise:
        terms = np.sort(np.asarray(r.resolution_vars, float)) if r.resolution_vars else \
            np.array([r.resolution_var if np.isfinite(r.resolution_var) else 0.0])
        own = r.own_sd if np.isfinite(r.own_sd) else r.sd
        tol = _TIMER_NEGLIGIBLE * (own ** 2 / 8 if np.isfinite(own) else 0.0)
        levels, start = [], 0
        for i in range(1, len(terms) + 1):
            if i == len(terms) or not (terms[i] <= _TIMER_LEVEL_RATIO * terms[start]
                                       or terms[i] - terms[start] <= tol):
                levels.append((terms[start] if np.isfinite(terms[start]) else 0.0, start, i))
                start = i
        per_row.append((levels, len(terms)))
    width = max((len(lv) for lv, _ in per_row), default=1)
    var, lo, hi = (np.zeros((len(noise), width)) for _ in range(3))
    m = np.ones(len(noise))
    for i, (levels, count) in enumerate(per_row):
        m[i] = count
        for j, (v, a, b) in enumerate(levels):
            var[i, j], lo[i, j], hi[i, j] = v, a, b
        lo[i, len(levels):] = hi[i, len(levels):] = count
    return var, lo, hi, m


def _timer_weights(timer: tuple[np.ndarray, ...], processes: int) -> np.ndarray:
    """(rows x levels) the chance the smallest of ``processes`` draws from the record's
    processes falls in each level: ``P(rank >= lo) - P(rank >= hi)``, ``P(rank >= j) = ((m - j)
    / m)^processes``."""
    _, lo, hi, m = timer
    return ((m[:, None] - lo) / m[:, None]) ** processes - ((m[:, None] - hi) / m[:, None]) ** processes


def _power(a: dict[str, np.ndarray], d: float, n_base: int, n_cand: int, rule: Decision) -> np.ndarray:
    """The probability of the two conditions (module docstring) for each row; arrays (row,
    kernel-variance node, shared-variance node, shared-movement node)."""
    if len(a["sd"]) == 0:
        return np.zeros(0)
    scale = math.sqrt(1.0 / n_base + 1.0 / n_cand)
    sr = _true_sd(a) * scale                  # sd of the kernel's (relative) change
    ss = a["shared"] * scale                  # sd of the sides' mean shared factor
    has_shared = (ss > 0) & ~a["by_rel"]      # sized by the total: the shared part counts
    k1, k2, k3 = _GRID if has_shared.any() else (_GRID[0], 1, 1)
    col = (slice(None), None, None, None)
    counted, f1 = _moderated(a, n_base, n_cand, rule, k1)
    c1 = _t_isf(rule.alpha / 2, f1)[:, :, None, None]
    counted, f1 = counted[:, :, None, None], f1[:, :, None, None]
    # the shared part's variance: on the processes' df less its parameters (2 without controls)
    sh_df = np.fmax(float(n_base + n_cand) - a["shared_params"], 1.0)[col]
    q2 = _chi_scale(sh_df, _midpoints(k2)[None, None, :, None]) if k2 > 1 else np.ones((1, 1, 1, 1))
    z = sps.norm.ppf(_midpoints(k3))[None, None, None, :] if k3 > 1 else np.zeros((1, 1, 1, 1))
    var_shift = np.where(has_shared[col], (ss[col] * q2) ** 2, 0.0)
    shift = np.where(has_shared[col], ss[col] * z, 0.0)
    # the timer's term is the smallest over the compared processes' ticks: a mixture over the
    # levels the record's processes show, weighted by how often that many processes reach each
    timer_var = a["timer"][0]
    weights = _timer_weights(a["timer"], n_base + n_cand)
    p = np.zeros(len(sr))
    for j in range(timer_var.shape[1]):
        if not (weights[:, j] > 0).any():
            continue
        var_rel = counted + timer_var[:, j][col]
        se_size = np.sqrt(var_rel + var_shift)
        # the total's df as the gate takes it: Welch-Satterthwaite, at least the smaller part's
        welch = stats.welch_df(var_rel, f1, var_shift, sh_df)
        df_size = np.where(has_shared[col], np.fmax(np.fmin(f1, sh_df), welch), f1)
        t_lv = _t_two_sided(rule.level, df_size)
        t_th = _t_isf(1.0 - rule.threshold_level, df_size)
        need_sig = c1 * np.sqrt(var_rel)
        need_size = np.fmax(t_lv * se_size, math.log1p(rule.threshold) + t_th * se_size) - shift
        with np.errstate(invalid="ignore", divide="ignore"):
            pj = sps.norm.sf((np.fmax(need_sig, need_size) - d) / sr[col]).mean(axis=(1, 2, 3))
        p += np.where(weights[:, j] > 0, weights[:, j] * np.nan_to_num(pj), 0.0)
    p = np.where(np.isfinite(sr), p, np.nan)
    if rule.shared_share > 0:
        for i, r in a["opened"]:
            p[i] = _opened_power(r, d, n_base, n_cand, rule)
    # the gate's absolute floor: a change that grows the median by no more than it is never a
    # regression, whatever the count (the row cannot be gated at this change)
    return np.where(below_floor(a["median_ns"], d, rule), 0.0, p)


def _true_sd(a: dict[str, np.ndarray]) -> np.ndarray:
    """A row's true per-process sd: its own, never below the median's sampling floor."""
    return np.sqrt(np.fmax(a["own_sd"] ** 2, a["floor"]))


def _moderated(a: dict[str, np.ndarray], n_base: int, n_cand: int, rule: Decision,
               nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, node) the variance of a row's change the gate computes at this count, and its df:
    the own variance estimate a chi-square draw on the processes' df (history pooled), moderated
    towards the prior's location, ``(d0 s0^2 + f s^2) / (d0 + f)``, the prior's location fixed
    (fitted on every kernel of the comparison) and its df ``d0`` as the gate gives it at that
    draw (:func:`_prior_df_at`); then the gate's floor. The timer's term (which no count
    averages) is added by the caller."""
    f = float(n_base + n_cand - 2) + a["hist"]
    chi = _chi_scale(f[:, None], _midpoints(nodes)[None, :]) ** 2
    d0 = _prior_df_at(a, f, chi, rule)
    f1 = f[:, None] + d0                      # the test's df
    w = np.where(np.isinf(d0), 1.0, d0 / np.where(np.isfinite(f1) & (f1 > 0), f1, 1.0))
    moderated = w * a["prior_sd"][:, None] ** 2 + (1 - w) * a["own_sd"][:, None] ** 2 * chi
    return np.fmax(moderated, a["floor"][:, None]) * (1.0 / n_base + 1.0 / n_cand), f1


def _prior_df_at(a: dict[str, np.ndarray], f: np.ndarray, chi: np.ndarray, rule: Decision) -> np.ndarray:
    """(row, node) the prior's df the gate gives a kernel whose own variance estimate on ``f``
    df is ``own_sd^2 chi`` (``chi``: chi-square nodes over their df): the prior's df, bounded
    by ``prior_df_cap`` times the own df, then, for the robust prior, lowered as
    ``stats.robust_prior_df`` lowers an upper outlier's. A kernel far above its prior keeps
    its own variance in the draws that show it and the prior's df in those that do not; the
    record's own judgement (``prior_df``) stands where the prior's df before the rule is
    unknown."""
    d0 = np.repeat(a["prior_df"][:, None], chi.shape[1], axis=1)
    fit = a["prior_fit"]
    if rule.prior_df_cap is not None:         # the gate bounds the prior's df by the own df
        d0 = np.fmin(d0, (rule.prior_df_cap * f)[:, None])
        fit = np.minimum(fit, rule.prior_df_cap * f)  # NaN stays NaN: no prior's df known
    if not rule.robust_prior:
        return d0
    for i in np.flatnonzero(fit > 0):
        s2 = a["own_sd"][i] ** 2 * chi[i]
        d0[i] = stats.robust_prior_df(s2, np.full(len(s2), f[i]), float(fit[i]),
                                      np.full(len(s2), a["prior_sd"][i] ** 2))
    return d0


def _opened_power(r: RowNoise, d: float, n_base: int, n_cand: int, rule: Decision) -> float:
    """The chance a category total ends ``regression`` when every kernel of its category
    slows by ``d`` and those kernels are most of the point's gated ones (``r.opens_sd > 0``).

    The gate rejects the total in either family of the hierarchical rule (``compare_stats``):
    in the relative tests' family at ``(1 - shared_alpha) q / m``, as a single change; or in
    the second pass, at the full ``q``, once the ``*`` row is rejected in the first pass at
    ``shared_alpha q``. Both Benjamini-Hochberg passes also reject the category's kernel
    totals that change with it, which raises their step-up level: the first pass's by the
    kernels measured against within-process controls, ``(1 + k_1) / m_1`` of its level, the
    second's by all of them, ``(1 + k_2) / m``, each ``k`` the expected number rejected (each
    kernel's total tested as the gate tests it, :func:`_kernel_totals_rejected`, solved for a
    fixed point).

    The total and the ``*`` row measure the same per-process factor of the same kernels: the
    one with the smaller per-process sd is taken as that shared movement, the other as it plus
    independent noise of its own (their estimates then correlate ``s_min / s_max``: 0.85 for
    the GEMMs of the real trace, whose estimates correlate 0.83-0.93 over simulated tests), and
    both variance estimates as the same chi-square draw of the processes' own df, the ``*``
    row's pooled with its history's df as well. For each variance draw and own-noise draw the
    conditions are thresholds on the shared draw: the total is rejected when it clears the
    relative family's bar, or the second pass's while the ``*`` row clears its own; then it
    must be sized beyond the threshold as any row (``level`` and ``threshold_level`` on the
    total's own interval)."""
    scale = math.sqrt(1.0 / n_base + 1.0 / n_cand)
    f = float(n_base + n_cand - 2)
    s_t, s_s = r.sd * scale, r.opens_sd * scale
    q, a_t = rule.fdr, rule.shared_share
    first = np.asarray(r.kernel_first_pass, bool)

    def rejected(level: float) -> float:  # expected controlled kernel totals at this level
        return _kernel_totals_rejected(r, d, level, n_base, n_cand, rule)

    m_2 = max(rule.rows, 1)
    # kernel totals without controls carry the same per-process factor as the category's
    # total: they clear the second pass with it (one movement, as below)
    moving = 1.0 + float((~first).sum())
    lvl_1, lvl_2 = a_t * q / r.first_pass_rows, q * min(moving, m_2) / m_2
    for _ in range(4):  # the step-up levels, with the kernels each rejects
        lvl_1 = a_t * q * min(1.0 + rejected(lvl_1), r.first_pass_rows) / r.first_pass_rows
        lvl_2 = q * min(moving + rejected(lvl_2), m_2) / m_2
    k1, k2, k3 = _GRID[0], _GRID[1] if r.opens_history_df > 0 else 1, _GRID[2]
    w_t = _chi_scale(np.array(f), _midpoints(k1))[:, None, None]      # the processes' own draw
    h = r.opens_history_df
    w_h = _chi_scale(np.array(h), _midpoints(k2))[None, :, None] if k2 > 1 else np.ones((1, 1, 1))
    w_s = np.sqrt((f * w_t ** 2 + h * w_h ** 2) / (f + h))             # the '*' row's, history pooled
    # the movement both share has the smaller sd; the other adds noise of its own
    s_f = min(s_t, s_s)
    e = sps.norm.ppf(_midpoints(k3))[None, None, :]
    e_t, e_s = math.sqrt(max(s_t ** 2 - s_f ** 2, 0.0)) * e, math.sqrt(max(s_s ** 2 - s_f ** 2, 0.0)) * e
    lim = math.log1p(rule.threshold)
    t_lv, t_th = _t_two_sided(rule.level, np.array(f)), _t_isf(1.0 - rule.threshold_level, np.array(f))
    # each condition as the smallest standard normal draw of the shared movement that meets it
    z_rel = (_t_isf(rule.alpha / 2, np.array(f)) * s_t * w_t - d - e_t) / s_f
    z_second = (_t_isf(lvl_2 / 2, np.array(f)) * s_t * w_t - d - e_t) / s_f
    z_star = (_t_isf(lvl_1 / 2, np.array(f + h)) * s_s * w_s - d - e_s) / s_f
    z_size = (np.fmax(t_lv * s_t * w_t, lim + t_th * s_t * w_t) - d - e_t) / s_f
    z = np.fmax(z_size, np.fmin(z_rel, np.fmax(z_star, z_second)))
    return float(np.mean(sps.norm.sf(z)))


def _kernel_totals_rejected(r: RowNoise, d: float, level: float, n_base: int, n_cand: int,
                            rule: Decision) -> float:
    """The expected number of the category's kernel totals measured against within-process
    controls that a two-sided test at ``level`` rejects when every kernel slows by ``d``, each
    tested as the gate tests it: its change net of the controls' prediction over the square root
    of its moderated variance as :func:`_power` draws it (:func:`_moderated`, the timer's term a
    mixture over the levels the record's processes show) plus the controls' residual part, on the
    Welch df of the two, at least the smaller part's: each one rejected raises the ``*`` row's
    first-pass level, so plain t's on ``2n - 2`` df would count too few. Rows built without the
    kernels' parts (``kernel_rows`` empty): each total a noncentral t on the processes' df."""
    first = np.asarray(r.kernel_first_pass, bool)
    if not first.any():
        return 0.0
    f = float(n_base + n_cand - 2)
    scale2 = 1.0 / n_base + 1.0 / n_cand
    if len(r.kernel_rows) != len(r.kernel_total_sds):
        sds = np.asarray(r.kernel_total_sds, float)[first] * math.sqrt(scale2)
        with np.errstate(invalid="ignore", divide="ignore"):
            return float(np.nansum(sps.nct.sf(sps.t.isf(level / 2, f), f, d / sds)))
    a = _arrays([k for k, on in zip(r.kernel_rows, first) if on], rule)
    counted, df_rel = _moderated(a, n_base, n_cand, rule, _GRID[0])
    v_part = (a["shared"] ** 2 * scale2)[:, None]
    df_part = np.fmax(float(n_base + n_cand) - a["shared_params"], 1.0)[:, None]
    true_sd = np.sqrt(_true_sd(a)[:, None] ** 2 * scale2 + v_part)
    timer_var = a["timer"][0]
    weights = _timer_weights(a["timer"], n_base + n_cand)
    rejected = np.zeros(len(counted))
    for j in range(timer_var.shape[1]):
        v_rel = counted + timer_var[:, j][:, None]
        df_t = np.where(v_part > 0, np.fmax(np.fmin(df_rel, df_part), stats.welch_df(v_rel, df_rel, v_part, df_part)),
                        df_rel)
        with np.errstate(invalid="ignore", divide="ignore"):
            pj = sps.norm.sf((_t_isf(level / 2, df_t) * np.sqrt(v_rel + v_part) - d) / true_sd).mean(axis=1)
        rejected += np.where(weights[:, j] > 0, weights[:, j] * np.nan_to_num(pj), 0.0)
    return float(rejected.sum())


def below_floor(median_ns: np.ndarray | float, d: float, rule: Decision) -> np.ndarray:
    """Whether a slowdown of ``d`` (log) grows a median of ``median_ns`` by no more than the
    gate's ``abs_floor_ns``."""
    with np.errstate(invalid="ignore"):
        return (rule.abs_floor_ns > 0) & (np.asarray(median_ns, float) * math.expm1(d) <= rule.abs_floor_ns)


def _midpoints(k: int) -> np.ndarray:
    return (np.arange(k) + 0.5) / k


def _chi_scale(df: np.ndarray, u: np.ndarray) -> np.ndarray:
    """sqrt(chi^2_df / df) at probabilities ``u`` (1 for infinite df)."""
    df = np.asarray(df, float)
    fin = np.isfinite(df) & (df > 0)
    safe = np.where(fin, df, 1.0)
    return np.where(fin, np.sqrt(sps.chi2.ppf(u, safe) / safe), 1.0)


def _t_isf(p: float, df: np.ndarray) -> np.ndarray:
    """Upper ``p`` quantile of t (normal for infinite df)."""
    df = np.asarray(df, float)
    fin = np.isfinite(df)
    return np.where(fin, sps.t.isf(p, np.where(fin & (df > 0), df, 1.0)), sps.norm.isf(p))


def _t_two_sided(level: float, df: np.ndarray) -> np.ndarray:
    return _t_isf(0.5 - level / 2, df)


# ---------------------------------------------------------------------------------------------
# a test's plan


def plan(base: pd.DataFrame, effect: float, config: GateConfig | None = None,
         history: pd.DataFrame | None = None, test: str = "", target: float = DEFAULT_POWER,
         max_processes: int = DEFAULT_MAX_PROCESSES) -> list[PointPlan]:
    """Per point of the baseline samples ``base``: for each gated kernel and per-process total,
    the processes per side that detect a slowdown of ``effect`` with power ``target`` under
    ``config``'s rule. Each point is planned with its own rows as the correction's family, as
    pytest gates each point on its own."""
    cfg = config or GateConfig()
    if not effect > 0:
        raise ValueError(f"the change to detect must be > 0, got {effect!r}")
    if not 0 < target < 1:
        raise ValueError(f"power must be between 0 and 1, got {target!r}")
    out = []
    points = base["point"].astype(str)
    for point in sorted(set(points)):
        part = base[points == point]
        hist = None
        if history is not None and len(history):
            hist = history[history["point"].astype(str) == point]
        noise, m = row_noise(part, cfg, hist, test)
        rule = decision(cfg, m)
        need = processes_needed(noise, effect, rule, target, max_processes)
        procs = max((r.processes for r in noise), default=0)
        now = power(noise, effect, max(procs, 2), max(procs, 2), rule) if noise else np.zeros(0)
        unit = cfg.threshold if cfg.threshold > 0 else float(effect)
        curve = operating_curve(noise, unit, max(procs, 2), rule)
        rows = tuple(RowPlan(r, n, float(p), tuple(float(x) for x in c)) for r, n, p, c in zip(noise, need, now, curve))
        out.append(PointPlan(point, procs, m, rule, float(effect), float(target), int(max_processes), rows, unit))
    return out
