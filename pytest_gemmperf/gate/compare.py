"""Candidate vs baseline: samples tables in, verdicts table out (the gate's public API).

The per-kernel duration statistics (process summaries, per-process factors, moderated t,
variance history, dispersion) are in :mod:`pytest_gemmperf.gate.durations`, whose docstring
holds the method; kernel swaps are paired in :mod:`pytest_gemmperf.gate.pairing`. This module
adds the unit-level metrics, the multiple-testing correction and the decision rule:

5. **Unit-level metrics** (category totals, overlap fraction, interference, exposed
   communication, collective metrics): one value per unit, pooled t-test on the log scale (raw
   scale when a value is <= 0).
6. **Multiplicity and decision.** Benjamini-Hochberg at ``fdr`` (default 0.01) over the
   p-values of the test (all points, kernels and metrics), the dispersion rows in a family of
   their own (``dispersion_family``). By default (``multiplicity="hierarchical"``,
   :func:`_hierarchical_q`) the budget is split: the ``*`` rows (family-wide shift) get
   ``shared_alpha * fdr`` and, once rejected, open the kernels' total changes at the full
   level (serial gatekeeping); the kernels' changes relative to the shared movement and the
   unit metrics get the rest. ``multiplicity="simes"``: one family, each kernel's p the Simes
   combination of its two tests. With no change anywhere, BH at q alarms in about a
   fraction q of the tests, so q is the per-test false-alarm budget of the statistics alone
   (threshold 0): 0.01 meets the <= 1 % target there and costs the default 5 % rule nothing.
   Two-part rule: ``regression`` iff ``q <= fdr`` (the CI then lies above 1) and the one-sided
   ``threshold_level`` (0.7) bound of the ratio exceeds ``1 + threshold``, corrected by
   Benjamini-Hochberg at ``1 - threshold_level`` over the significant rows (and the median grew
   by more than ``abs_floor_ns``); ``improvement`` symmetrically below ``1 - threshold``; ``unchanged`` when the CI lies
   inside ``[1 - threshold, 1 + threshold]`` (with ``threshold == 0``: not significant and the
   CI holds 1, noted so; a kernel sized by its change relative to the other kernels: that
   change's CI, noted so, and never while the total CI every table prints lies wholly beyond
   the band; the absolute floor, noted so); otherwise ``inconclusive`` with the reason: a CI wholly beyond the
   threshold that is not significant after the correction, or one that crosses the band's edge
   with the number of processes per side that would resolve a change of the threshold's size.
   ``new`` / ``missing`` when a kernel is seen on one side only.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.gate import stats
from pytest_gemmperf.gate.durations import (  # noqa: F401 - re-exported: tests and benchmarks use them
    COUNT, CV, DUR, HISTORY_OUTLIER_P, SAMPLE_COLUMNS, SHARED, VARIANCE_PARTS, _as_category, _codes,
    _duration_rows, _matrix, _moderated, _nanmean_rows, _nanmedian_rows, _pooled_var, _prior_covariate,
    _shared_offsets, _with_history, check_samples, variance_contribution)
from pytest_gemmperf.gate.gate_config import RELATIVE_MIN_HISTORY_DF, GateConfig  # noqa: F401 - re-exported
from pytest_gemmperf.gate.pairing import Swap, pair_swaps
from pytest_gemmperf.gate.verdict import (IMPROVEMENT, INCONCLUSIVE, MISSING, NEW, REGRESSION, UNCHANGED,
                                          verdicts_to_frame)


# ---------------------------------------------------------------------------------------------
# unit-level metrics


def _unit_metric_rows(point: str, b: pd.DataFrame, c: pd.DataFrame, cfg: GateConfig) -> list[dict]:
    rows = []
    def per_unit(d: pd.DataFrame) -> dict:
        med = d.groupby(["kernel", "metric", "unit"], sort=True, observed=True)["value"].median()
        return {(str(k), str(m)): g.to_numpy(float) for (k, m), g in med.groupby(level=[0, 1], observed=True)}

    bg, cg = per_unit(b), per_unit(c)
    tq = lambda df: float(stats.t_quantile(cfg.level, np.array([df], float))[0])  # noqa: E731
    for key in sorted(set(bg) | set(cg)):
        kern, metric = key
        x = bg.get(key, np.zeros(0))
        y = cg.get(key, np.zeros(0))
        row = dict(point=point, kernel=kern, metric=metric, n_base=len(x), n_cand=len(y),
                   base_median_ns=float(np.median(x)) if len(x) else np.nan,
                   cand_median_ns=float(np.median(y)) if len(y) else np.nan)
        if len(x) == 0 or len(y) == 0:
            row["verdict"] = NEW if len(x) == 0 else MISSING
            rows.append(row)
            continue
        log_scale = bool((x > 0).all() and (y > 0).all())
        xs, ys = (np.log(x), np.log(y)) if log_scale else (x, y)
        d = float(ys.mean() - xs.mean())
        df = len(x) + len(y) - 2
        if df > 0:
            s2 = (((xs - xs.mean()) ** 2).sum() + ((ys - ys.mean()) ** 2).sum()) / df
            se = math.sqrt(s2 * (1 / len(x) + 1 / len(y)))
        else:
            s2, se = np.nan, np.nan
        testable = len(x) >= cfg.min_units and len(y) >= cfg.min_units and np.isfinite(se)
        if testable and se > 0:
            p = float(2 * sps.t.sf(abs(d) / se, df))
        elif testable:
            p = 0.0 if d != 0 else 1.0
        else:
            p = np.nan
        half = tq(df) * se if df > 0 else np.nan
        if log_scale:
            ratio, lo, hi = math.exp(d), math.exp(d - half), math.exp(d + half)
        else:
            mb = float(xs.mean())
            if mb:
                ratio, lo, hi = (mb + d) / mb, (mb + d - half) / mb, (mb + d + half) / mb
                if mb < 0:
                    lo, hi = hi, lo
            elif d == 0 and not half:
                # identical on both sides (e.g. GEMMs that never overlap, comm always hidden)
                ratio, lo, hi = 1.0, 1.0, 1.0
            else:
                # from zero: no relative size exists, only a direction and its certainty, so a
                # significant rise from 0 is infinitely worse (or better) and decides by p alone
                ratio = math.inf if d > 0 else -math.inf
                lo = math.inf if d - half > 0 else 0.0
                hi = math.inf if d + half > 0 else 0.0
        row.update(ratio=ratio, ci_low=lo, ci_high=hi, p_value=p, df_t=float(df) if df > 0 else np.nan,
                   unit_sd_log=math.sqrt(s2) if log_scale and np.isfinite(s2) else np.nan)
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# public API


def gated_categories(base_dur: pd.DataFrame, cand_dur: pd.DataFrame) -> set[str] | None:
    """The ``category:<cat>`` totals a point gates: the categories of the kernels it compares
    (``dur_ns`` rows of either side, so a gated kernel renamed in the candidate still counts).
    A test that selects ``aten::mm`` gates the GEMM time, not the time of every other operator
    around it: those totals stay in the samples as within-process controls. None when neither
    side has a duration row (nothing tells what the test selected: every category counts)."""
    # the distinct names' text, not a text a row (a side holds one row per dispatch)
    names = {str(k) for k in pd.unique(base_dur["kernel"])} | {str(k) for k in pd.unique(cand_dur["kernel"])}
    if not names:
        return None
    return M.category_totals_of(names)


def compare_stats(base: pd.DataFrame, cand: pd.DataFrame, config: GateConfig | None = None,
                  test: str = "", history: pd.DataFrame | None = None) -> pd.DataFrame:
    """All statistics and q-values, verdicts only for new/missing (see :func:`assign_verdicts`).

    ``history``: :func:`variance_contribution` rows of earlier runs (point, kernel, metric, df,
    ss; several runs are summed), pooled with each kernel's own between-process variance."""
    cfg = config or GateConfig()
    hist = _history_by_point(history) if cfg.use_history else {}
    roles = {**_roles(base), **_roles(cand)}
    base = check_samples(base, "baseline samples")
    cand = check_samples(cand, "candidate samples")
    rows: list[dict] = []
    points = sorted({str(x) for x in pd.unique(base["point"])} | {str(x) for x in pd.unique(cand["point"])})
    bp = {str(k): g for k, g in base.groupby("point", sort=False, observed=True)}
    cp = {str(k): g for k, g in cand.groupby("point", sort=False, observed=True)}
    empty = base.iloc[:0]
    for point in points:
        b = bp.get(point, empty)
        c = cp.get(point, empty)
        bd, cd = b[b["metric"] == DUR], c[c["metric"] == DUR]
        # log durations need positive values; zero durations are profiler artefacts
        bd, cd = bd[bd["value"] > 0], cd[cd["value"] > 0]
        if len(bd) or len(cd):
            bn, cn = b[b["metric"] == COUNT], c[c["metric"] == COUNT]
            swaps = _find_swaps(bd, cd, bn, cn, roles) if cfg.pair_swaps and len(bd) and len(cd) else []
            if swaps:  # the candidate's kernel takes the baseline name: one row per role
                cd, cn = _renamed(cd, swaps), _renamed(cn, swaps)
            ctl = tuple(s[(s["metric"] == M.CONTROL_NS) | (s["metric"] == M.CATEGORY_TOTAL_NS)] for s in (b, c))
            drows = _duration_rows(point, bd, cd, cfg, (bn, cn), hist.get(point), ctl)
            rows += _mark_swaps(drows, swaps)
        # every other gated metric (the registry's; dispatch counts are context) is per unit
        bu, cu = (s[(s["metric"] != DUR).to_numpy() & M.is_gated(s["metric"])] for s in (b, c))
        cats = gated_categories(bd, cd)
        if cats is not None:
            bu, cu = (s[(s["metric"] != M.CATEGORY_TOTAL_NS).to_numpy() | s["kernel"].astype(str).isin(cats).to_numpy()]
                      for s in (bu, cu))
        if len(bu) or len(cu):
            rows += _unit_metric_rows(point, bu, cu, cfg)
    df = pd.DataFrame(rows)
    if df.empty:
        raise GemmperfInputError(None, "nothing to compare: both samples tables are empty")
    df.insert(0, "test", test)
    # a side with no samples gives only new/missing rows, which carry no statistics
    for col in ("ratio", "ci_low", "ci_high", "p_value"):
        if col not in df.columns:
            df[col] = np.nan
    pv = df["p_value"].to_numpy(float)
    if cfg.multiplicity not in ("hierarchical", "simes"):
        raise ValueError(f"GateConfig.multiplicity must be 'hierarchical' or 'simes', not {cfg.multiplicity!r}")
    hier = cfg.multiplicity == "hierarchical" and "p_total" in df.columns
    is_cv = (df["metric"] == CV).to_numpy()
    main = ~is_cv if cfg.dispersion_family else np.ones(len(df), bool)
    q = np.full(len(df), np.nan)
    if cfg.dispersion_family:
        q[is_cv] = stats.bh_qvalues(pv[is_cv])
    if hier:
        q[main], by_rel = _hierarchical_q(df[main], cfg)
        if by_rel is not None:
            df.loc[main, "by_rel"] = by_rel
    else:
        q[main] = stats.bh_qvalues(pv[main])
    df["q_value"] = q
    for col in ("verdict", "note"):
        if col not in df.columns:
            df[col] = ""
        df[col] = df[col].astype(object).where(df[col].notna(), "")
    return df


def _hierarchical_q(df: pd.DataFrame, cfg: GateConfig) -> tuple[np.ndarray, np.ndarray | None]:
    """q-values of a hierarchical (gatekeeping) procedure, scaled so that ``q <= fdr`` is
    rejection; and per row whether a kernel's evidence is its relative change.

    The budget ``fdr`` is split into two families, each tested by Benjamini-Hochberg:

    * **T** (``shared_alpha * fdr``): first the ``*`` rows (the movement shared by all
      kernels of a point) together with the kernels of points that have no ``*`` row (there
      the total is the only test). Where a point's ``*`` is rejected, its kernels' *total*
      changes and its unit metrics join the family and BH is run again (second pass). A
      family-wide shift is then judged by one test of its own instead of competing with ~100
      rows, and every kernel of the shifted family by its total change without the Simes
      penalty.
    * **R** (the rest): the kernels' changes *relative* to the shared movement (counted only
      in the direction of the total change) and the unit metrics: one kernel moving among
      steady ones, at the precision of a within-process comparison.

    A row is rejected when either family rejects it. With no change anywhere, T rejects
    anything only if its first pass does (the second pass runs only after a rejection), with
    probability <= ``shared_alpha * fdr``, and R with probability <= the rest: the per-test
    false-alarm rate stays <= ``fdr`` (each BH is valid under the positive dependence of
    these tests). The ``*`` row itself is a rejection: the gate reports a family-wide shift.
    ``shared_alpha`` is 0.25: where the point has within-process controls, the kernels'
    totals measured against them join the first pass (they no longer carry the sides' mean
    per-process factor, so a GEMM-only family shift is found by them, not by the ``*`` row's
    t on 2n - 2 df), and the larger rest lifts one kernel's relative test (the top GEMM 5 %
    slower at threshold 0: ~92 % instead of ~82 % at 0.5). Without controls a family-wide
    shift's first look rests on the ``*`` row at this level (docs/statistics.md, "First
    look"); the ``*`` row's variance history lifts its df.
    """
    a_t = min(max(cfg.shared_alpha, 1e-6), 1 - 1e-6)
    pv = df["p_value"].to_numpy(float)
    p_tot = df["p_total"].to_numpy(float) if "p_total" in df.columns else np.full(len(df), np.nan)
    p_rel = df["p_relative"].to_numpy(float) if "p_relative" in df.columns else np.full(len(df), np.nan)
    metric = df["metric"].astype(str).to_numpy()
    kern = df["kernel"].astype(str).to_numpy()
    point = df["point"].astype(str).to_numpy()
    star = (metric == DUR) & (kern == SHARED) & np.isfinite(pv)
    is_k = (metric == DUR) & (kern != SHARED) & np.isfinite(p_tot)
    other = ~star & ~is_k & np.isfinite(pv)
    starred = np.isin(point, point[star])
    # a kernel measured against within-process controls carries only what the controls could
    # not predict of the sides' mean factor: its total is tested at once, beside the '*' rows
    controlled = is_k & (df["controls"].fillna(0).to_numpy(float) > 0) if "controls" in df.columns \
        else np.zeros(len(df), bool)
    p_t = np.full(len(df), np.nan)
    p_t[star] = pv[star]
    open_k = is_k & (~starred | controlled)
    p_t[open_k] = p_tot[open_k]
    q_t = stats.bh_qvalues(p_t) / a_t
    shifted = np.isin(point, point[star & (q_t <= cfg.fdr)]) if star.any() else np.zeros(len(df), bool)
    if shifted.any():
        # serial gatekeeping: the rows a rejected '*' opens form a BH family of their own at
        # the full level fdr (the gate's rejection stands; under the global null this pass
        # runs only after a rejection, so it adds no false alarm to the test)
        add = shifted & (is_k | other)
        p_2 = np.full(len(df), np.nan)
        p_2[add] = np.where(is_k[add], p_tot[add], pv[add])
        q_t = np.fmin(q_t, stats.bh_qvalues(p_2))
    p_r = np.full(len(df), np.nan)
    p_r[is_k] = np.where(np.isfinite(p_rel[is_k]), p_rel[is_k], 1.0)
    p_r[other] = pv[other]
    q_r = stats.bh_qvalues(p_r) / (1 - a_t)
    with np.errstate(invalid="ignore"):
        q = np.fmin(q_t, q_r)
    q = np.where(np.isfinite(q), np.minimum(q, 1.0), np.nan)
    by_rel = None
    if is_k.any():
        by_rel = np.where(is_k, np.nan_to_num(q_r, nan=np.inf) < np.nan_to_num(q_t, nan=np.inf), False).astype(object)
        by_rel = np.where(is_k, by_rel, None)
    return q, by_rel


def _roles(samples: pd.DataFrame) -> dict[str, str]:
    """Kernel -> op/shape label from an optional ``role`` column (PyTorch traces link kernels
    to ops); empty when the table has none."""
    if "role" not in samples.columns:
        return {}
    r = samples[["kernel", "role"]].dropna().astype(str)
    r = r[r["role"] != ""].drop_duplicates("kernel")
    return dict(zip(r["kernel"], r["role"]))


def _per_process_count(d: pd.DataFrame, counts: pd.DataFrame) -> pd.Series:
    """Median over processes of each kernel's dispatches per process (the recorded count of a
    compacted table where it has one)."""
    n = d.groupby(["kernel", "unit"], observed=True).size()
    n = n[n > 0].groupby(level=0, observed=True).median()
    if len(counts):
        rec = counts.groupby("kernel", observed=True)["value"].median()
        n = pd.concat([n, rec], axis=1).max(axis=1)
    n.index = n.index.astype(str)
    return n


def _find_swaps(bd: pd.DataFrame, cd: pd.DataFrame, bn: pd.DataFrame, cn: pd.DataFrame,
                roles: dict[str, str]) -> list[Swap]:
    kb = {str(x) for x in pd.unique(bd["kernel"])}
    kc = {str(x) for x in pd.unique(cd["kernel"])}
    gone, came = kb - kc, kc - kb
    if not gone or not came:
        return []
    nb, nc = _per_process_count(bd, bn), _per_process_count(cd, cn)
    return pair_swaps({k: float(nb.get(k, np.nan)) for k in gone}, {k: float(nc.get(k, np.nan)) for k in came},
                      roles)


def _renamed(d: pd.DataFrame, swaps: list[Swap]) -> pd.DataFrame:
    if not len(d):
        return d
    names = d["kernel"].astype(str).replace({s.new: s.missing for s in swaps})
    return d.assign(kernel=names.astype("category"))


def _mark_swaps(rows: list[dict], swaps: list[Swap]) -> list[dict]:
    by_name = {s.missing: s for s in swaps}
    for r in rows:
        s = by_name.get(r.get("kernel"))
        if s is not None and r.get("metric") in (DUR, CV):
            r["note"] = _join(r.get("note") or "", s.note)
            r["swapped_to"] = s.new
    return rows


def _history_by_point(history: pd.DataFrame | None) -> dict[str, pd.DataFrame]:
    if history is None or not len(history):
        return {}
    missing = [c for c in ("point", "kernel", "metric", "df", "ss") if c not in history.columns]
    if missing:
        raise GemmperfInputError(None, f"variance history lacks column(s) {', '.join(missing)}")
    h = history[history["metric"].astype(str) == DUR]
    return {str(p): g for p, g in h.groupby(h["point"].astype(str), sort=False)}


def assign_verdicts(df: pd.DataFrame, config: GateConfig | None = None) -> pd.DataFrame:
    """Apply thresholds and the two-part rule to a :func:`compare_stats` frame."""
    cfg = config or GateConfig()
    df = df.copy()
    test = df["test"].astype(str).to_numpy()
    kern = df["kernel"].astype(str).to_numpy()
    metric = df["metric"].astype(str).to_numpy()
    thr = np.array([cfg.threshold_for(k, t) for k, t in zip(kern, test)], float)
    thr = np.where(metric == CV, cfg.dispersion_threshold, thr)
    df["threshold"] = thr

    better = M.higher_is_better(metric)
    is_cv = metric == CV
    r = df["ratio"].to_numpy(float)
    lo = df["ci_low"].to_numpy(float)
    hi = df["ci_high"].to_numpy(float)
    # orient so that > 1 is always "worse" (a fall to 0 of a higher-is-better metric -> inf)
    with np.errstate(divide="ignore"):
        rw = np.where(better, 1 / r, r)
        low_w = np.where(better, 1 / hi, lo)
        high_w = np.where(better, 1 / lo, hi)
    q = df["q_value"].to_numpy(float)
    sig = q <= cfg.fdr
    nb = df["n_base"].to_numpy(float)
    nc = df["n_cand"].to_numpy(float)
    growth = df["cand_median_ns"].to_numpy(float) - df["base_median_ns"].to_numpy(float)
    is_ns = M.is_time(metric)
    floor_ok = ~is_ns | better | ~(np.abs(np.nan_to_num(growth, nan=np.inf)) <= cfg.abs_floor_ns)
    verdict = df["verdict"].astype(object).to_numpy().copy()
    note = df["note"].astype(object).to_numpy().copy()
    fixed = np.isin(verdict, [NEW, MISSING])
    few = (nb < cfg.min_units) | (nc < cfg.min_units) | ~np.isfinite(q)
    # significant (q <= fdr: the change is real) and beyond the threshold with one-sided
    # confidence ``threshold_level`` (default 0.7), corrected over the significant rows
    # (_beyond): a 95 % bound asks for the threshold plus ~2.4 standard errors with 6 df and
    # misses real family-wide shifts, the estimate alone flags changes inside the band half
    # the time (docs/statistics.md, "The operating curve")
    # a kernel whose evidence is its change relative to the other kernels of its processes
    # (one kernel moved, the rest did not) is sized by that change's interval: the total's
    # carries the sides' mean per-process factors, noise that says nothing about this kernel
    byr = np.zeros(len(df), bool)
    if "by_rel" in df.columns:
        byr = df["by_rel"].astype(object).eq(True).to_numpy() & ~better
        if not cfg.size_by_relative:
            # by default only where the kernel's variance rests on its own history: the
            # relative interval is then the kernel's measured noise, not the cross-kernel
            # prior's guess (which is what failed with 3 processes per side)
            hist_df = df["history_df"].to_numpy(float) if "history_df" in df.columns else np.zeros(len(df))
            byr &= np.nan_to_num(hist_df) >= RELATIVE_MIN_HISTORY_DF
    # the interval every table prints beside the verdict (the total change), oriented
    shown_lo, shown_hi = low_w, high_w
    if byr.any():
        rw = np.where(byr, df["rel_ratio"].to_numpy(float), rw)
        low_w = np.where(byr, df["rel_ci_low"].to_numpy(float), low_w)
        high_w = np.where(byr, df["rel_ci_high"].to_numpy(float), high_w)
    dft = df["df_t"].to_numpy(float) if "df_t" in df.columns else np.full(len(df), np.nan)
    if byr.any():
        dft = np.where(byr, df["df_rel"].to_numpy(float), dft)
    reg, imp = _beyond(sig & (low_w > 1), sig & (high_w < 1), dft, cfg, rw, low_w, high_w, thr,
                       is_cv if cfg.dispersion_family else np.zeros(len(df), bool))
    blocked = (reg | imp) & ~floor_ok
    # ``unchanged`` says the change is smaller than the threshold: the CI lies inside the band
    # (a wide CI straddling its edge, or one wholly beyond it, is ``inconclusive`` and says why);
    # at threshold 0 there is no band, and ``unchanged`` is "not significant" with a CI that
    # holds no change (a CI wholly beyond 1 that BH did not reject is ``inconclusive``)
    inside = (low_w >= 1 - thr) & (high_w <= 1 + thr)
    beyond = (low_w > 1 + thr) | (high_w < 1 - thr)
    quiet = ~sig & (thr == 0) & ~beyond & np.isfinite(low_w) & np.isfinite(high_w)
    # a kernel sized by its relative change is unchanged only while the change every table
    # prints (its total) is not wholly beyond the band: all kernels moving together is then
    # the '*' row's verdict, and this row says why it is not one of its own
    shown_beyond = (shown_lo > 1 + thr) | (shown_hi < 1 - thr)
    rel_beyond = byr & inside & ~blocked & shown_beyond
    unch = (inside & ~rel_beyond) | quiet | blocked
    out = np.where(reg & ~blocked, REGRESSION, np.where(imp & ~blocked, IMPROVEMENT,
                   np.where(unch, UNCHANGED, INCONCLUSIVE)))
    out = np.where(few & ~fixed, INCONCLUSIVE, out)
    verdict = np.where(fixed, verdict, out)

    m = max(int(np.isfinite(df["p_value"].to_numpy(float)).sum()), 1)
    z_need = sps.norm.ppf(1 - cfg.fdr / m / 2) + sps.norm.ppf(0.8)
    sd = df["unit_sd_log"].to_numpy(float) if "unit_sd_log" in df.columns else np.full(len(df), np.nan)
    delta = np.where(thr > 0, np.log1p(thr), np.maximum(np.abs(np.log(np.where(r > 0, r, 1.0))), 0.01))
    with np.errstate(invalid="ignore", divide="ignore"):
        need = np.ceil(2 * (z_need * sd / delta) ** 2)
    for i in np.flatnonzero(verdict == INCONCLUSIVE):
        have = int(min(nb[i], nc[i]))
        if rel_beyond[i] and not few[i]:
            msg = (f"{_rel_text(rw[i], low_w[i], high_w[i])} relative to the other kernels, inside the "
                   f"{100 * thr[i]:g}% threshold, while its total lies beyond it: all kernels moved "
                   f"together (see kernel '*')")
        elif few[i] and have < cfg.min_units:
            n_req = cfg.min_units if not np.isfinite(need[i]) else max(cfg.min_units, int(need[i]))
            msg = f"too few processes ({int(nb[i])} base, {int(nc[i])} cand): needs >= {n_req} per side"
        elif beyond[i] and np.isfinite(q[i]):
            msg = (f"CI beyond the {100 * thr[i]:g}% threshold but not significant after the "
                   f"multiple-testing correction (q {q[i]:.2g} > FDR {cfg.fdr:g})")
        else:
            n_req = int(max(need[i], have + 1)) if np.isfinite(need[i]) else have + 1
            msg = (f"CI crosses the {100 * thr[i]:g}% threshold: needs >= {min(n_req, 9999)} processes "
                   f"per side")
        note[i] = _join(note[i], msg)
    for i in np.flatnonzero(byr & np.isin(verdict, [REGRESSION, IMPROVEMENT])):
        note[i] = _join(note[i], f"{_rel_text(rw[i], low_w[i], high_w[i])} relative to the other kernels")
    for i in np.flatnonzero(blocked):
        note[i] = _join(note[i], f"change below the absolute floor of {cfg.abs_floor_ns:g} ns")
    for i in np.flatnonzero((verdict == UNCHANGED) & sig & ~blocked & ~byr):
        note[i] = _join(note[i], f"significant {100 * (r[i] - 1):+.1f}% within the {100 * thr[i]:g}% threshold")
    shown_inside = (shown_lo >= 1 - thr) & (shown_hi <= 1 + thr)
    for i in np.flatnonzero((verdict == UNCHANGED) & byr & inside & ~blocked):
        # sized by the relative interval: say so where the printed (total) CI is not in the band
        if not shown_inside[i] or sig[i]:
            note[i] = _join(note[i], f"judged by its change relative to the other kernels, "
                                     f"{_rel_text(rw[i], low_w[i], high_w[i])}, inside the "
                                     f"{100 * thr[i]:g}% threshold")
    for i in np.flatnonzero((verdict == UNCHANGED) & quiet & ~inside & ~blocked):
        note[i] = _join(note[i], f"threshold 0: no significant change (q {q[i]:.2g} > FDR {cfg.fdr:g})")
    shift = df["shared_shift"].to_numpy(float) if "shared_shift" in df.columns else np.full(len(df), np.nan)
    follow = (metric == DUR) & (kern != SHARED) & np.isfinite(shift) & (np.abs(np.log(np.where(shift > 0, shift, 1))) > 0.01)
    for i in np.flatnonzero(follow & (verdict != REGRESSION)):
        note[i] = _join(note[i], f"all kernels moved {100 * (shift[i] - 1):+.1f}% (see kernel '*')")
    for i in np.flatnonzero(fixed):
        if not note[i]:
            note[i] = "only in the candidate" if verdict[i] == NEW else "only in the baseline"
    if cfg.unpaired not in ("warn", "fail"):
        raise ValueError(f"GateConfig.unpaired must be 'warn' or 'fail', not {cfg.unpaired!r}")
    if cfg.unpaired == "fail":
        for i in np.flatnonzero(fixed & (metric == DUR)):
            note[i] = _join(note[i], f"{verdict[i]} kernel with no counterpart (unpaired='fail')")
            verdict[i] = REGRESSION
    df["verdict"] = verdict
    df["note"] = note
    return df


def _beyond(up: np.ndarray, down: np.ndarray, dft: np.ndarray, cfg: GateConfig, r: np.ndarray, lo: np.ndarray,
            hi: np.ndarray, thr: np.ndarray, family: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which significant rows lie beyond the threshold: ``up`` (significant, worse) rows above
    ``1 + thr``, ``down`` rows below ``1 - thr`` (oriented ratios and intervals).

    Each candidate's one-sided p of "the change is within the threshold" (its interval's t,
    :func:`_threshold_pvalues`) is corrected by Benjamini-Hochberg at ``1 - threshold_level``
    over the candidates of its family (``family``: the dispersion rows apart): one candidate
    is beyond iff its ``threshold_level`` one-sided bound clears the threshold, as a single
    row always was; 14 GEMM rows that all moved by 80 % of the threshold no longer give 14
    chances of one false crossing (docs/statistics.md, "The operating curve")."""
    p_up, p_down = _threshold_pvalues(dft, cfg, r, lo, hi, thr)
    alpha = 1.0 - cfg.threshold_level
    out = []
    for cand, p in ((up, p_up), (down, p_down)):
        q = np.full(len(r), np.nan)
        for fam in (family, ~family):
            sel = cand & fam
            q[sel] = stats.bh_qvalues(p[sel])
        out.append(cand & (np.nan_to_num(q, nan=1.0) <= alpha))
    return out[0], out[1]


def _threshold_pvalues(dft: np.ndarray, cfg: GateConfig, r: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                       thr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One-sided p-values of "not above ``1 + thr``" and "not below ``1 - thr``" from each row's
    two-sided ``level`` interval (log scale where it is positive, else linear; its df in
    ``dft``); a row without a df: 0 where its interval lies beyond, else 1."""
    ok = np.isfinite(dft) & (dft > 0) & np.isfinite(lo) & np.isfinite(hi) & np.isfinite(r)
    df = np.where(ok, dft, 1.0)
    t_ci = stats.t_quantile(cfg.level, df)
    pos = ok & (lo > 0) & (r > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        se_log = (np.log(np.where(pos, hi, 1.0)) - np.log(np.where(pos, lo, 1.0))) / (2 * t_ci)
        se_lin = (hi - lo) / (2 * t_ci)
        z_up = np.where(pos, (np.log(np.where(pos, r, 1.0)) - np.log1p(thr)) / se_log, (r - 1 - thr) / se_lin)
        z_dn = np.where(pos, (np.log(np.where(pos & (thr < 1), 1 - thr, 1.0)) - np.log(np.where(pos, r, 1.0)))
                        / se_log, (1 - thr - r) / se_lin)
        p_up = sps.t.sf(z_up, df)
        p_dn = sps.t.sf(z_dn, df)
        # a zero-width interval: certain where it lies
        p_up = np.where(se_lin > 0, p_up, np.where(r > 1 + thr, 0.0, 1.0))
        p_dn = np.where(se_lin > 0, p_dn, np.where(r < 1 - thr, 0.0, 1.0))
    p_up = np.where(ok, p_up, np.where(lo > 1 + thr, 0.0, 1.0))
    p_dn = np.where(ok, p_dn, np.where(hi < 1 - thr, 0.0, 1.0))
    p_dn = np.where(thr >= 1, 1.0, p_dn)  # no ratio lies below 0
    return np.nan_to_num(p_up, nan=1.0), np.nan_to_num(p_dn, nan=1.0)


def _rel_text(r: float, lo: float, hi: float) -> str:
    return f"{100 * (r - 1):+.1f}% [{100 * (lo - 1):+.1f}, {100 * (hi - 1):+.1f}]"


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def compare(base_samples: pd.DataFrame, cand_samples: pd.DataFrame, config: GateConfig | None = None,
            test: str = "", history: pd.DataFrame | None = None) -> pd.DataFrame:
    """Verdicts table (ARCHITECTURE.md columns, then diagnostics) for one test."""
    cfg = config or GateConfig()
    df = assign_verdicts(compare_stats(base_samples, cand_samples, cfg, test, history), cfg)
    return verdicts_to_frame(df.drop(columns=list(VARIANCE_PARTS), errors="ignore"))


def has_regression(verdicts: pd.DataFrame) -> bool:
    return bool((verdicts["verdict"] == REGRESSION).any())
