"""The gate's knobs (``GateConfig``): what ``compare`` and the per-kernel duration statistics read.

A module of its own below both: ``compare.py`` imports the duration statistics, which size
their intervals with the same configuration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence


#: variance history (df) from which a kernel's change relative to the other kernels sizes it
RELATIVE_MIN_HISTORY_DF = 6


@dataclass
class GateConfig:
    """Knobs of the gate. Thresholds are relative (0.05 = 5 %)."""

    threshold: float = 0.05
    #: Benjamini-Hochberg level. When no kernel changed, BH at q rejects anything with
    #: probability ~q, so q is the per-test false-alarm rate of the statistics alone
    #: (threshold 0); 0.01 keeps that at <= 1 % (benchmarks/gate_accuracy.py).
    fdr: float = 0.01
    #: ``[(regex, threshold)]`` matched with ``re.search`` against the kernel (first match wins)
    per_kernel: Sequence[tuple[str, float]] = field(default_factory=list)
    #: ``[(regex, threshold)]`` matched against the test id; kernel overrides win over these
    per_test: Sequence[tuple[str, float]] = field(default_factory=list)
    min_units: int = 2
    dispersion_threshold: float = 1.0
    dispersion_min_dispatches: int = 50
    gate_dispersion: bool = True
    #: a regression of a ``*_ns`` metric must also grow the median by more than this
    abs_floor_ns: float = 0.0
    level: float = 0.95
    #: one-sided confidence that a significant change exceeds the threshold before it is a
    #: regression / improvement, corrected by Benjamini-Hochberg at 1 - threshold_level over the
    #: significant rows (assign_verdicts): 0.7 flags ~89 % of the GEMM rows of a GEMM-only test
    #: whose GEMMs all moved by 1.4x the threshold and fails ~3 % of tests at 0.8x (0.8: 84 %;
    #: docs/statistics.md, "The operating curve")
    threshold_level: float = 0.7
    #: size a kernel whose evidence is its change relative to the other kernels by that
    #: change's interval instead of the total's (which carries the sides' mean per-process
    #: factors) also without variance history: more power, but too many A/A alarms with 3
    #: processes per side (docs/statistics.md). By default only kernels with
    #: >= RELATIVE_MIN_HISTORY_DF df of variance history are sized so.
    size_by_relative: bool = False
    #: how the duration rows share the false-alarm budget ``fdr`` (compare_stats):
    #: "hierarchical" (two BH families at ``shared_alpha * fdr`` and the rest: the ``*`` rows
    #: gate the kernels' total changes, the kernels' relative changes and the unit metrics are
    #: tested on their own) or "simes" (one BH family over every row, each kernel's p the
    #: Simes combination of its total and relative tests)
    multiplicity: str = "hierarchical"
    #: the fraction of ``fdr`` that the family-wide shift (``*`` rows, the kernels' totals
    #: measured against within-process controls, then the totals a rejected ``*`` opens) gets
    #: under ``multiplicity="hierarchical"``. A larger share lifts a family-wide shift's first
    #: look without controls and costs one kernel's relative test about as much: with controls a
    #: GEMM-only family needs no large share, and 0.25 lifts the top GEMM's 5 % at threshold 0
    #: from ~82 % to ~92 % (docs/statistics.md, "First look")
    shared_alpha: float = 0.25
    ci_method: str = "moderated"  # or "bootstrap"
    n_boot: int = 2000
    seed: int = 0
    warmup: int = 0  # consumed by samples_from_dispatches (CLI / plugin)
    shared_factor: bool = True
    min_kernels_for_shared: int = 8
    moderate: bool = True
    #: empirical-Bayes prior of the per-kernel variances: "robust" (bisquare trend,
    #: quantile-matched prior df, outlier kernels keep their own variance;
    #: stats.fit_f_dist_robust) or "moments" (limma's moment fit, stats.fit_f_dist)
    prior: str = "robust"
    #: covariates of the robust prior's trend (docs/statistics.md): "stratified" (the default:
    #: log of the median's sampling variance plus the kernels' common excess over it, the
    #: kernel's category, log dispatches per process and log duration), "count" (log
    #: dispatches per process), "noise" (log sampling variance of the per-process median),
    #: "additive" (log of that sampling variance plus the common excess) or "capped" (per
    #: kernel the smaller of the count and additive trends' locations)
    prior_trend: str = "stratified"
    #: the robust prior's df is at most this many times the kernels' own median df (processes
    #: and variance history), so a kernel whose noise the covariates do not predict keeps at
    #: least that share of its own variance; None: no bound
    prior_df_cap: float | None = 1.0
    #: dispersion rows (cv_robust) form their own BH family: their two-part rule (CV ratio CI
    #: beyond 1 + dispersion_threshold) adds next to no false alarms, and folding ~80 of them
    #: into the durations' family would halve the per-kernel level of the duration tests
    dispersion_family: bool = True
    #: pool each kernel's variance with the earlier runs a baseline remembers
    #: (``compare(history=...)``, ``variance_contribution``)
    use_history: bool = True
    #: gate a ``missing`` and a ``new`` kernel that play the same role as one row
    #: (``gate/pairing.py``: same op/shapes, same kernel family, same slot)
    pair_swaps: bool = True
    #: what an unpaired ``new`` / ``missing`` kernel does: "warn" (reported, the test passes;
    #: the default: a kernel with no counterpart cannot be sized as a change of anything, code
    #: changes add and remove kernels legitimately, and the category totals still carry the
    #: time they cost) or "fail" (a ``regression``: nothing may appear or vanish unexplained)
    unpaired: str = "warn"

    def threshold_for(self, kernel: str, test: str = "") -> float:
        for pattern, thr in self.per_kernel:
            if re.search(pattern, kernel):
                return float(thr)
        for pattern, thr in self.per_test:
            if re.search(pattern, test):
                return float(thr)
        return float(self.threshold)
