"""Confirm before blocking: re-run a suspicious point and judge it again, without free looks.

The first look (``compare(baseline, candidate)``) only *screens*. A point is suspicious when a
row is a ``regression``, or an ``inconclusive`` / ``unchanged`` row whose estimate lies beyond
the threshold on the worse side and whose q-value is below ``screen_q``. (Without the q screen
an ``inconclusive`` beyond a 5 % threshold is found in almost every clean run of the real 908
kernels -- heavy-tailed RCCL kernels -- and every test would pay a re-run that cannot decide it;
measured in ``benchmarks/gate_confirm.py``.) A suspicious point is re-run (``--gemmperf-confirm N``:
up to N rounds of the point's repeats); the new processes join the candidate and the point is
judged on the **combined** sample; rounds go on while the point stays suspicious and nothing is
confirmed, up to N. Sequential design, and what bounds the false-alarm rate:

* a row ends as ``regression`` only if a combined comparison says ``regression`` (no row is
  ever blocked on the first look alone, which only screens). The event "blocked" is a subset
  of "one of the N combined comparisons rejects", whatever the screen did, so the N rounds
  share the gate's FDR budget q (:meth:`ConfirmConfig.fdr_share`: each round before the last
  at q/10, the last at the rest; N = 1: q, N = 3: 0.1q, 0.1q, 0.8q). By the union bound the per-test false-
  alarm rate is then at most that of one comparison at q, for every N: no free extra looks
  (measured per N in ``docs/statistics.md``).
* and the re-runs alone (every round so far) must reproduce it (:func:`reproduced`): their own
  estimate on the worse side at one-sided p < ``reproduce_p`` (0.2), and a first look not
  significantly worse than the re-runs (z-test of the two log-ratio estimates at one-sided
  p < ``heterogeneity_p`` / 2 = 0.005) unless the re-runs alone lie beyond the threshold at the
  CI level. A transient slowdown of the first processes is not reproduced by the re-runs and
  ends ``inconclusive`` ("not reproduced by the re-run"); re-runs as slow or slower reproduce.

Contention (``run.environment``) is applied last by :func:`apply_disturbance`: a
``regression``/``improvement`` on a disturbed point becomes ``inconclusive`` ("noisy
environment: ...") unless it lies far beyond what the contention can explain. A baseline
recorded on a disturbed machine is applied after it by :func:`apply_baseline_disturbance`: a slow
baseline hides a slower candidate, so a gated row whose CI could reach beyond the threshold once
the baseline's contention is allowed for is ``inconclusive`` ("disturbed baseline: ...").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import pandas as pd

from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.gate.verdict import DISTURBED_BASELINE, IMPROVEMENT, INCONCLUSIVE, REGRESSION, UNCHANGED

KEY = ["point", "kernel", "metric"]


@dataclass(frozen=True)
class ConfirmConfig:
    """Knobs of the confirmation rule (defaults measured in ``benchmarks/gate_confirm.py``)."""

    #: rounds of re-runs (each the point's ``repeats`` processes); 0 disables confirmation.
    #: Rounds go on only while the point stays suspicious without a confirmed regression
    #: (:func:`settled`); the rounds share one FDR budget (:meth:`fdr_share`). Measured
    #: detection and cost per N: ``docs/statistics.md`` ("Confirmation before blocking")
    rounds: int = 3
    #: screen: an unchanged/inconclusive row beyond the threshold with q below this is suspicious
    screen_q: float = 0.5
    #: the re-run alone must lean the same way at this one-sided level
    reproduce_p: float = 0.2
    #: first look vs re-run estimates: heterogeneous (transient) at this two-sided level
    heterogeneity_p: float = 0.01
    #: the CI level of the verdict tables (to recover standard errors from CIs)
    level: float = 0.95
    #: share of the FDR budget at which each round before the last may stop early with a
    #: confirmed regression (the last round gets the rest; :meth:`fdr_share`)
    early_share: float = 0.1

    def fdr_share(self, round_no: int) -> float:
        """Fraction of the gate's FDR budget at which round ``round_no`` (1-based) of ``rounds``
        judges the combined sample: ``early_share`` (at most 1/2 over all of them) for each
        round before the last, which gets the rest, so the shares sum to 1 for every N (N = 1:
        the whole budget; N = 3: 0.1, 0.1, 0.8). Spending little early and most on the last,
        largest sample is the O'Brien-Fleming shape: a clear regression still stops after one
        round, a small one is judged on every re-run at nearly the full level."""
        if not 1 <= round_no <= max(1, self.rounds):
            raise ValueError(f"round {round_no} outside 1..{self.rounds}")
        early = min(self.early_share, 0.5 / (self.rounds - 1)) if self.rounds > 1 else 0.0
        return early if round_no < self.rounds else 1.0 - early * (self.rounds - 1)

    def gate_config(self, cfg, round_no: int):
        """``cfg`` (a ``GateConfig``) with its FDR cut to this round's share (:meth:`fdr_share`)."""
        return replace(cfg, fdr=cfg.fdr * self.fdr_share(round_no))


def _worse(v: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ratio, ci_low, ci_high) oriented so that > 1 is worse."""
    better = M.higher_is_better(v["metric"].astype(str))
    r, lo, hi = (v[c].to_numpy(float) for c in ("ratio", "ci_low", "ci_high"))
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.where(better, 1 / r, r), np.where(better, 1 / hi, lo), np.where(better, 1 / lo, hi))


def _thresholds(v: pd.DataFrame) -> np.ndarray:
    """Each row's threshold; 0 where none is recorded (no column, or an empty cell)."""
    if "threshold" not in v.columns:
        return np.zeros(len(v))
    return pd.to_numeric(v["threshold"], errors="coerce").fillna(0.0).to_numpy(float)


def suspicious(verdicts: pd.DataFrame, config: ConfirmConfig | None = None) -> np.ndarray:
    """Rows that make the point worth a re-run (see module doc)."""
    cfg = config or ConfirmConfig()
    if verdicts.empty:
        return np.zeros(0, bool)
    verdict = verdicts["verdict"].astype(str).to_numpy()
    r, _, _ = _worse(verdicts)
    thr = _thresholds(verdicts)
    q = pd.to_numeric(verdicts["q_value"], errors="coerce").to_numpy(float)
    with np.errstate(invalid="ignore"):
        beyond = np.isfinite(r) & (r > 1 + thr)
        screened = beyond & (q <= cfg.screen_q)
    # an inconclusive row beyond the threshold must pass the same screen: the noisiest kernels
    # (RCCL, heavy tails) sit beyond a 5 % threshold with q ~ 1 in most clean runs, and one
    # more round would not decide them -- without the screen every test would pay a re-run
    return (verdict == REGRESSION) | (np.isin(verdict, [INCONCLUSIVE, UNCHANGED]) & screened)


def settled(verdicts: pd.DataFrame, config: ConfirmConfig | None = None) -> bool:
    """After a round: no further round is owed (a regression is confirmed, or nothing is
    suspicious any more; stopping for the latter can only lower the false-alarm rate)."""
    return bool((verdicts["verdict"] == REGRESSION).any() or not suspicious(verdicts, config).any())


def _norm_ppf(p: float) -> float:
    """The standard normal quantile at ``p``."""
    # lazy: suspicious() and settled(), which the reports' outcome reading uses, need no scipy
    from scipy import stats as sps

    return sps.norm.ppf(p)


def _log_est(v: pd.DataFrame, level: float) -> tuple[np.ndarray, np.ndarray]:
    """(log worse-ratio, its standard error from the CI) per row (NaN where undefined)."""
    r, lo, hi = _worse(v)
    z = _norm_ppf(0.5 + level / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(r)
        se = (np.log(hi) - np.log(lo)) / (2 * z)
    ok = np.isfinite(d) & np.isfinite(se) & (se > 0)
    return np.where(ok, d, np.nan), np.where(ok, se, np.nan)


def reproduced(first: pd.DataFrame, alone: pd.DataFrame, config: ConfirmConfig | None = None
               ) -> pd.DataFrame:
    """Per row of ``first`` (by point, kernel, metric): did the re-run alone reproduce it?

    Columns ``d_first, d_rerun`` (log worse-ratios), ``z_rerun``, ``z_het`` and
    ``reproduced`` (bool): the re-run leans worse at one-sided p < ``reproduce_p`` and the first
    look is not worse than it at one-sided p < ``heterogeneity_p`` / 2 (or the re-run alone lies
    beyond the threshold at the CI level)."""
    cfg = config or ConfirmConfig()
    a = alone.set_index(KEY)
    f = first.set_index(KEY)
    a = a[~a.index.duplicated()].reindex(f.index)
    d1, s1 = _log_est(first, cfg.level)
    d2, s2 = _log_est(a.reset_index(), cfg.level)
    with np.errstate(divide="ignore", invalid="ignore"):
        z2 = d2 / s2
        zh = (d1 - d2) / np.sqrt(s1 ** 2 + s2 ** 2)
    lean = z2 > _norm_ppf(1 - cfg.reproduce_p)
    # only a first look significantly *worse* than the re-runs is a transient: re-runs as bad
    # or worse reproduce it, and so do re-runs that alone lie beyond the threshold at the CI level
    het = zh > _norm_ppf(1 - cfg.heterogeneity_p / 2)
    thr = _thresholds(f)
    with np.errstate(invalid="ignore"):
        alone_beyond = (d2 - np.log1p(thr)) / s2 > _norm_ppf(0.5 + cfg.level / 2)
    # a row the re-run cannot estimate (missing there, no CI) is not reproduced
    ok = lean & (~np.where(np.isfinite(zh), het, False) | alone_beyond)
    return pd.DataFrame({"d_first": d1, "d_rerun": d2, "z_rerun": z2, "z_het": zh,
                         "reproduced": np.where(np.isfinite(z2), ok, False)}, index=f.index)


def judge(first: pd.DataFrame, combined: pd.DataFrame, alone: pd.DataFrame,
          config: ConfirmConfig | None = None) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Final verdicts after a confirmation round, and what changed.

    ``first``: the verdicts the confirmation was triggered by; ``combined``: baseline vs
    candidate + re-run processes; ``alone``: baseline vs the re-run processes only. The result
    is ``combined`` with every ``regression`` that the re-run did not reproduce turned
    ``inconclusive``, and a note on every row whose verdict differs from ``first``.
    """
    cfg = config or ConfirmConfig()
    out = combined.copy()
    # the first look's estimates on the combined table's rows (NaN where it had none)
    f = first.set_index(KEY)
    f = f[~f.index.duplicated()].reindex(out.set_index(KEY).index).reset_index()
    f["metric"] = f["metric"].astype(str)
    rep = reproduced(f, alone, cfg)
    before = first.set_index(KEY)["verdict"]
    before = before[~before.index.duplicated()].reindex(rep.index).astype(object).fillna("-").to_numpy()
    verdict = out["verdict"].astype(str).to_numpy().copy()
    note = out["note"].astype(object).where(out["note"].notna(), "").astype(str).to_numpy().copy()
    n_first = pd.to_numeric(first["n_cand"], errors="coerce").max()
    n_now = pd.to_numeric(out["n_cand"], errors="coerce").max()
    not_rep = (verdict == REGRESSION) & ~rep["reproduced"].to_numpy(bool)
    for i in np.flatnonzero(not_rep):
        d1, d2 = rep["d_first"].iloc[i], rep["d_rerun"].iloc[i]
        note[i] = _join(note[i], f"not reproduced by the re-run (first look {_pct(d1)}, re-run alone "
                                 f"{_pct(d2)}): transient?")
    verdict = np.where(not_rep, INCONCLUSIVE, verdict)
    changes: list[dict[str, Any]] = []
    for i in range(len(out)):
        if verdict[i] != before[i]:
            note[i] = _join(note[i], f"confirmation: {before[i]} -> {verdict[i]} with "
                                     f"{_int(n_now)} candidate processes (first look {_int(n_first)})")
            changes.append({"point": str(out["point"].iloc[i]), "kernel": str(out["kernel"].iloc[i]),
                            "metric": str(out["metric"].iloc[i]), "before": str(before[i]),
                            "after": str(verdict[i])})
        elif verdict[i] == REGRESSION:
            note[i] = _join(note[i], f"confirmed by a re-run ({_int(n_now)} candidate processes)")
    out["verdict"] = verdict
    out["note"] = note
    return out, changes


def judge_round(first: pd.DataFrame, compare_with: Callable[[pd.DataFrame, Any], pd.DataFrame],
                combined: pd.DataFrame, reruns: pd.DataFrame, cfg: Any, config: ConfirmConfig,
                round_no: int) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Verdicts after confirmation round ``round_no`` (:func:`judge` of the combined sample).

    ``compare_with(candidate_samples, gate_config)`` compares with the baseline; ``combined`` is
    the first look's candidate plus every re-run so far, ``reruns`` the re-runs alone. Whether
    the point fails is decided at the round's share of the FDR budget
    (:meth:`ConfirmConfig.fdr_share`). Once that confirms a regression the test fails, and the
    rows are labelled on the same combined sample at the whole budget (the labels of a test that
    already fails cannot add a failing test, and Benjamini-Hochberg at q keeps the rows' FDR at
    q): without that, a GEMM-family 7 % slowdown confirmed at round 1 (a tenth of the budget)
    labelled 79 % of the GEMM rows ``regression`` instead of ~84 %."""
    alone = compare_with(reruns, cfg)
    judged, changes = judge(first, compare_with(combined, config.gate_config(cfg, round_no)), alone, config)
    if (judged["verdict"] == REGRESSION).any() and config.fdr_share(round_no) < 1:
        judged, changes = judge(first, compare_with(combined, cfg), alone, config)
    return judged, changes


#: kinds of re-run rounds: ``confirm`` (a suspicious point, before blocking) and ``decide``
#: (an undecided point given the processes the power model says it needs)
CONFIRM, DECIDE = "confirm", "decide"


class PointJudge:
    """One point judged from its first look through every re-run round, the same way wherever
    it is done: the pytest gate step feeds it rounds as they are profiled, ``gemmperf compare``
    feeds it the rounds a gated run recorded (``point.json`` ``gate``), so both reach the same
    verdicts, changes, CIs, q-values and notes.

    ``compare_with(candidate_samples, gate_config) -> verdicts`` compares with the baseline;
    ``disturbance``: the first look's (``run.environment.Disturbance``), applied last, and
    ``baseline_disturbance``: the baseline recording run's, applied after it."""

    def __init__(self, compare_with: Callable[[pd.DataFrame, Any], pd.DataFrame], samples: pd.DataFrame,
                 cfg: Any, config: ConfirmConfig, disturbance=None, baseline_disturbance=None) -> None:
        self.compare_with = compare_with
        self.cfg = cfg
        self.config = config
        self.first = compare_with(samples, cfg)
        #: the worst disturbance of any round whose processes are in the combined sample
        self.disturbance = disturbance
        self.baseline_disturbance = baseline_disturbance
        self.verdicts = self._environment(self.first)
        self.combined = samples
        self.reruns = samples.iloc[:0]
        #: confirmation rounds done, decide rounds done, what the last judgement changed
        self.rounds = 0
        self.decide_rounds = 0
        self.changes: list[dict[str, Any]] = []

    def confirm_owed(self) -> bool:
        """Is another confirmation round owed (:func:`suspicious` first look, not yet
        :func:`settled`, rounds left)?"""
        if self.config.rounds == 0 or self.rounds >= self.config.rounds:
            return False
        if self.rounds == 0:
            return bool(suspicious(self.first, self.config).any())
        return not settled(self.verdicts, self.config)

    def trigger(self) -> pd.DataFrame:
        """The first look's rows that made the point suspicious."""
        return self.first[suspicious(self.first, self.config)]

    def add_round(self, extra: pd.DataFrame, disturbance=None, kind: str = CONFIRM) -> pd.DataFrame:
        """Judge the point again with ``extra`` processes added (a round of ``kind``);
        ``disturbance``: that round's. Returns the verdicts.

        A confirmation round is :func:`judge_round` at its share of the FDR budget. A decide
        round (after the confirmation rounds, for an undecided point) is judged by
        :func:`judge` at the whole budget: a regression must still be reproduced by the
        re-runs alone, so a point left undecided cannot fail on the first look's processes.
        The contention applied is the worst of every round so far (:func:`worst_disturbance`)."""
        self.combined = pd.concat([self.combined, extra], ignore_index=True)
        # "the re-run alone" is every round so far: later rounds reproduce on more processes
        self.reruns = pd.concat([self.reruns, extra], ignore_index=True)
        if kind == CONFIRM:
            self.rounds += 1
            judged, self.changes = judge_round(self.first, self.compare_with, self.combined, self.reruns,
                                               self.cfg, self.config, self.rounds)
        else:
            self.decide_rounds += 1
            judged, self.changes = judge(self.first, self.compare_with(self.combined, self.cfg),
                                         self.compare_with(self.reruns, self.cfg), self.config)
        # the combined sample holds every round's processes: a quiet last round does not make
        # a disturbed first look's processes clean
        self.disturbance = worst_disturbance(self.disturbance, disturbance)
        self.verdicts = self._environment(judged)
        return self.verdicts

    def _environment(self, judged: pd.DataFrame) -> pd.DataFrame:
        """``judged`` with the candidate's contention, then the baseline's, applied."""
        return apply_baseline_disturbance(apply_disturbance(judged, self.disturbance), self.baseline_disturbance)


def worst_disturbance(a, b):
    """The disturbance of a sample made of ``a``'s and ``b``'s processes (each a
    ``run.environment.Disturbance`` or None): disturbed when either is, the larger factor, every
    reason once (first seen first)."""
    seen = [d for d in (a, b) if d is not None and d.disturbed]
    if len(seen) < 2:
        return seen[0] if seen else (a if a is not None else b)
    worse = max(seen, key=lambda d: float(d.factor))
    reasons = tuple(dict.fromkeys(r for d in seen for r in d.reasons))
    return replace(worse, reasons=reasons)


def _rows_to_note(verdicts: pd.DataFrame):
    """A copy of ``verdicts`` and what a disturbance rule reads of it: the worse-oriented CI
    (low, high), the thresholds, the verdicts and the notes (a writable array, "" for none)."""
    v = verdicts.copy()
    _, low_w, high_w = _worse(v)
    note = v["note"].astype(object).where(v["note"].notna(), "").astype(str).to_numpy().copy()
    return v, low_w, high_w, _thresholds(v), v["verdict"].astype(str).to_numpy(), note


def apply_disturbance(verdicts: pd.DataFrame, disturbance) -> pd.DataFrame:
    """Verdicts of a disturbed point (``run.environment.Disturbance``): ``regression`` /
    ``improvement`` become ``inconclusive`` with the reason, unless the whole CI lies beyond
    ``(1 + threshold) * factor`` (worse) or below ``(1 - threshold) / factor`` (better): far
    beyond what the contention explains. An ``inconclusive`` row of a gated metric whose CI
    reaches beyond the threshold on the worse side gets the reason too (it leaves the point
    undecided: ``gate.outcome``). Returns a copy; undisturbed tables come back as is."""
    if disturbance is None or not disturbance.disturbed or verdicts.empty:
        return verdicts
    v, low_w, high_w, thr, verdict, note = _rows_to_note(verdicts)
    f = float(disturbance.factor)
    with np.errstate(invalid="ignore"):
        far_worse = low_w > (1 + thr) * f
        far_better = high_w < (1 - thr) / f
    reg, imp = verdict == REGRESSION, verdict == IMPROVEMENT
    down = (reg & ~far_worse) | (imp & ~far_better)
    keep = (reg & far_worse) | (imp & far_better)
    for i in np.flatnonzero(down):
        note[i] = _join(note[i], f"{disturbance.text} (was {verdict[i]}, within the x{f:.2f} the "
                                 "contention can explain; rerun on a quiet machine)")
    # a transient seen on a busy machine may be the contention, and a CI that reaches beyond the
    # threshold there may hide a regression the contention masks (a +50 % change measured +7 %
    # [-38, +83] on a busy host): a quiet re-run decides both
    transient = (verdict == INCONCLUSIVE) & (np.char.find(note.astype(str), "not reproduced") >= 0)
    with np.errstate(invalid="ignore"):
        masked = ((verdict == INCONCLUSIVE) & ~transient & M.is_gated(v["metric"].astype(str))
                  & (high_w > 1 + thr))
    for i in np.flatnonzero(transient):
        note[i] = _join(note[i], f"{disturbance.text} (rerun on a quiet machine)")
    for i in np.flatnonzero(masked):
        note[i] = _join(note[i], f"{disturbance.text} (the CI reaches beyond the threshold on a disturbed "
                                 "machine; rerun on a quiet machine)")
    for i in np.flatnonzero(keep):
        note[i] = _join(note[i], f"far beyond the noise of a disturbed environment (x{f:.2f}: "
                                 f"{'; '.join(disturbance.reasons)})")
    v["verdict"] = np.where(down, INCONCLUSIVE, verdict)
    v["note"] = note
    return v


def apply_baseline_disturbance(verdicts: pd.DataFrame, disturbance) -> pd.DataFrame:
    """Verdicts against a baseline recorded on a disturbed machine (the recording run's
    ``run.environment.Disturbance``, kept with the record). Its processes may have run up to
    ``factor`` times slower: that hides a slower candidate and fakes a faster one, and never
    makes a candidate look slower, so ``regression`` rows stay. An ``improvement`` becomes
    ``inconclusive`` unless its whole CI lies below ``(1 - threshold) / factor``; a gated row
    that is not a regression and whose CI's worse end times ``factor`` reaches beyond the
    threshold is ``inconclusive`` with the reason (it leaves the point undecided: re-record the
    baseline on a quiet machine). Returns a copy; an undisturbed baseline's table as is."""
    if disturbance is None or not disturbance.disturbed or verdicts.empty:
        return verdicts
    v, _, high_w, thr, verdict, note = _rows_to_note(verdicts)
    f = float(disturbance.factor)
    why = "; ".join(disturbance.reasons) or "disturbed"
    with np.errstate(invalid="ignore"):
        masked = (np.isin(verdict, (UNCHANGED, INCONCLUSIVE, IMPROVEMENT)) & M.is_gated(v["metric"].astype(str))
                  & (high_w * f > 1 + thr))
        faked = (verdict == IMPROVEMENT) & ~(high_w < (1 - thr) / f)
    for i in np.flatnonzero(faked & ~masked):
        note[i] = _join(note[i], f"was improvement, within the x{f:.2f} the baseline's contention can "
                                 f"explain ({why})")
    for i in np.flatnonzero(masked):
        was = f"was {verdict[i]}, " if verdict[i] != INCONCLUSIVE else ""
        note[i] = _join(note[i], f"{DISTURBED_BASELINE}: recorded while {why} ({was}its processes may have run "
                                 f"up to x{f:.2f} slower, so the CI reaches beyond the threshold; re-record "
                                 "the baseline on a quiet machine)")
    v["verdict"] = np.where(masked | faked, INCONCLUSIVE, verdict)
    v["note"] = note
    return v


def _pct(d: float) -> str:
    return "n/a" if not np.isfinite(d) else f"{100 * (np.exp(d) - 1):+.1f}%"


def _int(x: Any) -> str:
    try:
        return str(int(x))
    except (TypeError, ValueError):
        return "?"


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b
