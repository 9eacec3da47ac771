"""Lower bounds on the noise of a kernel's change that the data alone can understate.

* :func:`_sampling_floor`: the within-process sampling variance of a per-process median
  (order statistics at the true dispatch count) floors the between-process variance, unless
  the kernel's own variance or its central quantiles contradict it.
* :func:`_central_quantile_var`: the between-process spread of the central quantiles, the
  evidence for that contradiction.
* :func:`_resolution_var`: the timer's tick, which no number of processes averages away.

Split out of ``gate/durations.py``; the method and its measurements are in that module's doc.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from pytest_gemmperf.gate import stats
from pytest_gemmperf.gate.arrays import _codes, _nanmean_rows

#: a kernel whose between-process variance is this improbably small under its sampling floor
#: (lower tail of chi^2) has a floor that does not hold (fixed shape mix, unknown counts)
FLOOR_COMPAT_P = 1e-4
#: ... judged only on this many df (own + history) or more
FLOOR_COMPAT_MIN_DF = 20
#: ... or whose central quantiles vary this improbably little under it (any df)
FLOOR_QUANTILE_P = 1e-3

#: quantile levels whose between-process spread tells a fixed shape mix from a varying one
_CENTRAL_LEVELS = (0.3, 0.4, 0.6, 0.7)


def _central_quantile_var(logb, gidb, ub, logc, gidc, uc, n_k, offsets) -> np.ndarray:
    """Per kernel: mean over :data:`_CENTRAL_LEVELS` of the pooled within-side variance of the
    per-process log quantile (after the shared factor), from the stored values (a compacted
    table's order statistics read as a quantile function, as ``stats.group_median_se``).

    A kernel whose median sits between the modes of a *fixed* mix of shapes has stable central
    quantiles in every process (the mix is the same), far below the median's i.i.d. sampling
    noise; a kernel whose mix varies between processes (step-clustered dispatches) moves them.
    Four levels give the floor check several times the df of the median alone."""
    out = []
    for log, gid, nu, off in ((logb, gidb, ub, offsets[:ub]), (logc, gidc, uc, offsets[ub:])):
        if nu == 0 or not len(log):
            out.append(np.full((len(_CENTRAL_LEVELS), n_k, nu), np.nan))
            continue
        srt, starts, counts = stats.group_sort(log, gid, n_k * nu)
        m = counts.astype(float)
        ok = counts > 1
        levels = []
        for p in _CENTRAL_LEVELS:
            q = np.full(n_k * nu, np.nan)
            pos = np.clip(p * m[ok] - 0.5, 0.0, m[ok] - 1)
            lo = np.floor(pos).astype(int)
            hi = np.minimum(lo + 1, counts[ok] - 1)
            frac = pos - lo
            q[ok] = (1 - frac) * srt[starts[ok] + lo] + frac * srt[starts[ok] + hi]
            levels.append(q.reshape(n_k, nu) - off[None, :])
        out.append(np.stack(levels))
    qb, qc = out
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: kernels absent on a side
        ss = np.nansum((qb - np.nanmean(qb, axis=2, keepdims=True)) ** 2, axis=2) if ub else 0.0
        ss = ss + (np.nansum((qc - np.nanmean(qc, axis=2, keepdims=True)) ** 2, axis=2) if uc else 0.0)
        n = np.isfinite(qb).sum(axis=2) + np.isfinite(qc).sum(axis=2) - 2
        v = np.where(n > 0, ss / np.maximum(n, 1), np.nan)
        return np.nanmean(v, axis=0) if v.size else np.full(n_k, np.nan)


def _sampling_floor(se_true: np.ndarray, cnt: np.ndarray, s2: np.ndarray, df: np.ndarray,
                    s2_q: np.ndarray | None = None) -> np.ndarray:
    """Lower bound on each kernel's between-process variance: the sampling variance of a
    per-process median (order-statistic SE at the true dispatch count, mean over units).

    Between-process spread cannot be smaller than it in expectation, and with 4 processes a
    kernel seen a handful of times per process otherwise shows four near-equal medians by
    chance (the A/A false alarms of once-per-step kernels with 40 % jitter in the real trace).
    It applies at every dispatch count (a cut-off at 21 dispatches gave 1 % A/A alarms with 23
    iterations per process), except where the kernel's own variance contradicts it: the i.i.d.
    formula overstates the noise of a median between the modes of a fixed mix of GEMM shapes,
    and of a compacted table without its dispatch counts. Contradicts = ``df s^2 / floor`` in
    the lower ``FLOOR_COMPAT_P`` tail of ``chi^2_df`` (a floor that would rarely bind falsely
    dropped; NaN: no floor)."""
    pred = _nanmean_rows(np.where((cnt > 1) & np.isfinite(se_true), se_true ** 2, np.nan))
    with np.errstate(invalid="ignore", divide="ignore"):
        p_low = sps.chi2.cdf(np.where(df > 0, df, 1) * s2 / pred, np.where(df > 0, df, 1))
    # only with enough df (variance history, many processes): per-process medians of clumpy
    # kernels are far from normal, so with 4-6 df a tiny s^2 is no evidence against the floor
    # (dropping it at chi^2 p < 1e-4 still let 3-vs-3 A/A tests alarm on the real trace)
    contra = np.isfinite(p_low) & (df >= FLOOR_COMPAT_MIN_DF) & (p_low < FLOOR_COMPAT_P)
    if s2_q is not None:
        # the central quantiles' spread on twice the df (four correlated levels): a fixed shape
        # mix keeps them far below the floor, a varying one does not
        dq = 2 * np.where(df > 0, df, 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            p_q = sps.chi2.cdf(dq * s2_q / pred, dq)
        contra |= np.isfinite(p_q) & (df > 0) & (p_q < FLOOR_QUANTILE_P)
    ok = np.isfinite(pred) & (pred > 0) & ~contra
    return np.where(ok, pred, np.nan)


def _resolution_var(b: pd.DataFrame, c: pd.DataFrame, kernels: pd.Index) -> np.ndarray:
    """Per kernel, the variance (log scale) that the timer's resolution adds to a change.

    Durations are multiples of a tick (Kineto's µs with 3 decimals, a GPU timer's period). The
    tick is bounded above by the smallest positive gap between two durations of the kernel in
    one process, and by the largest power of ten dividing all its durations (the resolution
    the trace reports; the only clue when every process repeats one value). A per-process
    median is rounded to the tick, and the rounding does not average out over processes that
    all sit on the same ticks (3 identical medians per side gave a zero-width CI on an H200
    memset): each side's level is uncertain by up to a tick, so the change gets
    ``(tick / median)^2 / 3`` (each side uniform on +-1 tick), whatever the number of
    processes. Negligible for kernels timed to the ns over µs; decisive for a one-tick change."""
    tick, med = process_ticks(b, c, kernels)
    tick = tick.min(axis=1, initial=np.inf)
    return np.where(np.isfinite(tick) & (med > 0), (tick / med) ** 2 / 3, 0.0)


def process_ticks(b: pd.DataFrame, c: pd.DataFrame, kernels: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    """(the tick each process of the two sides bounds, per kernel x process: its smallest
    positive gap between two durations and the largest power of ten dividing them all, inf
    where neither exists; the median duration per kernel over both sides). The tick the gate
    uses is the smallest over the comparison's processes (:func:`_resolution_var`), so it
    depends on how many processes it compares (``gate/power.py`` plans it per count)."""
    n_k = len(kernels)
    k = np.concatenate([_codes(b["kernel"], kernels), _codes(c["kernel"], kernels)])
    # a process of each side numbered apart (its numbers only group a process's rows): from the
    # unit columns' codes, never a text a row (a side holds one row per dispatch)
    ub = pd.factorize(b["unit"], use_na_sentinel=False)[0]
    uc = pd.factorize(c["unit"], use_na_sentinel=False)[0]
    n_ub = int(ub.max()) + 1 if len(ub) else 0
    u = np.concatenate([ub, uc + n_ub])
    n_u = n_ub + (int(uc.max()) + 1 if len(uc) else 0)
    v = np.concatenate([b["value"].to_numpy(float), c["value"].to_numpy(float)])
    ok = (k >= 0) & np.isfinite(v) & (v > 0)
    k, u, v = k[ok], u[ok], v[ok]
    order = np.lexsort((v, u, k))
    k, u, v = k[order], u[order], v[order]
    gap = np.diff(v)
    within = (k[1:] == k[:-1]) & (u[1:] == u[:-1]) & (gap > 0)
    tick = np.full(n_k * n_u, np.inf)
    np.minimum.at(tick, (k * n_u + u)[1:][within], gap[within])
    # decimal resolution: 10^j divides every duration of the kernel (integers in ns)
    integral = np.isclose(v, np.round(v), rtol=0, atol=1e-6)
    iv = np.round(v).astype(np.int64)
    dec = np.ones(len(v))
    for j in range(1, 10):
        dec = np.where(integral & (iv % 10 ** j == 0), 10.0 ** j, dec)
    np.minimum.at(tick, k * n_u + u, np.where(integral, dec, np.inf))
    med = np.full(n_k, np.nan)
    if len(k):
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        ends = np.r_[starts[1:], len(k)]
        med[k[starts]] = np.array([np.median(v[a:e]) for a, e in zip(starts, ends)])
    return tick.reshape(n_k, n_u), med
