"""A gated point's outcome: the one reading of its verdict rows that every output shares.

Every gated point ends as exactly one of four outcomes:

* ``failed``: a row is a ``regression``;
* ``undecided``: no regression, and a row of a *gated* metric (``metrics.is_gated``; context
  rows never decide a point) is ``inconclusive``: the gate could not tell whether the code got
  slower (a disturbed environment, a CI across the threshold, too few processes, a slowdown the
  re-run did not reproduce). Its reason names the rows and what would decide them;
* ``passed``: every gated row was decided and none is a regression (``unchanged``,
  ``improvement``; ``new`` / ``missing`` kernels are reported as such and do not hold it);
* ``error``: the point could not be run or read, so there are no rows to judge.

pytest, ``gemmperf compare``, the reports, the benchmark JSON and the JUnit properties all call
:func:`point_outcome` / :func:`point_outcomes`, so they cannot disagree. What an ``undecided``
point does to a test or to the command's exit status is the ``undecided`` setting
(:data:`POLICIES`): ``fail``, ``skip`` (the default) or ``pass``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.gate.headline import change_text
from pytest_gemmperf.gate.verdict import DISTURBED_BASELINE, INCONCLUSIVE, REGRESSION
from pytest_gemmperf.textsafe import printable

PASSED, FAILED, UNDECIDED, ERROR = "passed", "failed", "undecided", "error"
OUTCOMES = (PASSED, FAILED, UNDECIDED, ERROR)
#: what an undecided point does (the ``undecided`` setting): fail the test, skip it, accept it
POLICIES = ("fail", "skip", "pass")



@dataclass(frozen=True)
class PointOutcome:
    """One point's outcome, why, and (undecided) what would decide it."""

    outcome: str
    #: one line: the rows that made the outcome and their reasons
    reason: str = ""
    #: undecided: what would decide it (a quiet machine, N processes per side, another run)
    decide: str = ""
    #: rows that made the outcome (regressions of a failed point, undecided rows of an undecided one)
    rows: int = 0

    @property
    def text(self) -> str:
        """``undecided: <reason>; to decide: <what>``, the line every output shows."""
        s = f"{self.outcome}: {self.reason}" if self.reason else self.outcome
        return f"{s}; to decide: {self.decide}" if self.decide else s

    def as_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason": self.reason, "decide": self.decide, "rows": self.rows}


#: note text of an ``inconclusive`` row that was a regression before something took it back:
#: a disturbed environment (``confirm.apply_disturbance``), a re-run that did not reproduce it
#: or a confirmation that did not confirm it (``confirm.judge``)
_TAKEN_BACK = ("(was regression", "not reproduced by the re-run", "confirmation: regression -> ")


def undecided_rows(verdicts: pd.DataFrame) -> np.ndarray:
    """Rows that leave their point undecided: ``inconclusive`` rows of gated metrics that
    could hide a regression: a regression taken back (a disturbed environment, not reproduced,
    not confirmed), a CI beyond the threshold on a disturbed point or against a disturbed
    baseline, too few processes to judge,
    or an estimate beyond the threshold on the worse side that the confirmation screen calls
    suspicious (``confirm.suspicious``: q <= 0.5).

    An ``inconclusive`` row whose estimate lies inside the threshold is not one: with hundreds
    of kernels some noisy kernel's CI crosses the threshold in almost every clean run
    (``benchmarks/gate_decide.py``), and a point undecided in every run would teach people to
    ignore the word. Its reason is still in every table."""
    if verdicts.empty:
        return np.zeros(0, bool)
    v = verdicts.reset_index(drop=True)
    inconclusive = v["verdict"].astype(str).to_numpy() == INCONCLUSIVE
    gated = inconclusive & M.is_gated(v["metric"].astype(str))
    if not gated.any():
        return gated
    notes = v["note"].astype(object).where(v["note"].notna(), "").astype(str)
    taken_back = notes.map(lambda n: any(t in n for t in _TAKEN_BACK)).to_numpy(bool)
    # a disturbed point's CI that reaches beyond the threshold (confirm.apply_disturbance)
    # or one compared with a baseline recorded on a disturbed machine, which may hide a slower
    # candidate (confirm.apply_baseline_disturbance)
    disturbed = (notes.str.contains("noisy environment", regex=False)
                 | notes.str.contains(DISTURBED_BASELINE, regex=False)).to_numpy(bool)
    too_few = notes.str.contains("too few processes", regex=False).to_numpy(bool)
    # the confirmation screen loads with the first undecided question: the reports of an
    # analysis (no verdicts) read only this module's other names
    from pytest_gemmperf.gate.confirm import suspicious  # lazy: see above

    leaning = suspicious(v.assign(verdict=INCONCLUSIVE))
    return gated & (taken_back | disturbed | too_few | leaning)


def point_outcome(verdicts: pd.DataFrame) -> PointOutcome:
    """The outcome of one point from its verdict rows (module text). No rows: ``error``."""
    if verdicts is None or verdicts.empty:
        return PointOutcome(ERROR, "no verdict rows: nothing was compared")
    verdict = verdicts["verdict"].astype(str).to_numpy()
    reg = verdict == REGRESSION
    if reg.any():
        return PointOutcome(FAILED, f"{int(reg.sum())} regression(s), e.g. {_row_text(verdicts[reg])}",
                            rows=int(reg.sum()))
    und = undecided_rows(verdicts)
    if und.any():
        rows = verdicts[und]
        return PointOutcome(UNDECIDED, f"{len(rows)} gated row(s) inconclusive, e.g. {_row_text(rows)}",
                            decide=what_decides(rows["note"]), rows=len(rows))
    return PointOutcome(PASSED)


def point_outcomes(verdicts: pd.DataFrame, keys: Iterable[str] = ("test", "point")
                   ) -> list[tuple[tuple[str, ...], PointOutcome]]:
    """:func:`point_outcome` of each point of a verdicts table (grouped by ``keys`` present in
    it; ``label`` joins them when the table has one), in the table's order."""
    cols = [k for k in ("label", *keys) if k in verdicts.columns]
    if verdicts.empty:
        return []
    if not cols:
        return [((), point_outcome(verdicts))]
    key = verdicts[cols].astype(str)
    out = []
    for k, rows in verdicts.groupby([key[c] for c in cols], sort=False):
        out.append((tuple(k) if isinstance(k, tuple) else (k,), point_outcome(rows)))
    return out


def outcome_counts(outcomes: Iterable[str | PointOutcome]) -> dict[str, int]:
    """``{outcome: count}`` in :data:`OUTCOMES` order, outcomes that occur only."""
    names = [o.outcome if isinstance(o, PointOutcome) else str(o) for o in outcomes]
    return {o: names.count(o) for o in OUTCOMES if o in names}


def counts_text(counts: dict[str, int]) -> str:
    """``1 failed, 2 undecided, 3 passed`` (worst first; ``no gated point`` when empty)."""
    order = (FAILED, ERROR, UNDECIDED, PASSED)
    parts = [f"{counts[o]} {o}" for o in order if counts.get(o)]
    return ", ".join(parts) or "no gated point"


def overall(counts: dict[str, int]) -> str:
    """The whole run's outcome: failed > error > undecided > passed (``passed`` when empty)."""
    for o in (FAILED, ERROR, UNDECIDED):
        if counts.get(o):
            return o
    return PASSED


@functools.cache
def _needs() -> re.Pattern[str]:
    """A note's "needs >= N processes per side", compiled when an undecided point first asks."""
    return re.compile(r"needs >= (\d+) (?:processes )?per side")


def what_decides(notes: Iterable[Any]) -> str:
    """What would decide undecided rows, from the reasons their notes give."""
    text = [str(n) for n in notes if isinstance(n, str)]
    hints: list[str] = []
    if any(DISTURBED_BASELINE in n for n in text):
        hints.append("the baseline re-recorded on a quiet machine (--gemmperf-update-baselines)")
    if any("noisy environment" in n for n in text):
        hints.append("a re-run on a quiet machine")
    needs = [int(m) for n in text for m in _needs().findall(n)]
    if needs:
        n = max(needs)
        # a process is one rank of one run: --gemmperf-repeats counts runs
        hints.append(f"{n} processes per side (more --gemmperf-repeats on both sides)")
    if any("not reproduced by the re-run" in n for n in text):
        hints.append("another run (the re-run did not reproduce the first look)")
    if not hints:
        hints.append("more processes per side")
    return " or ".join(hints)


def processes_needed(verdicts: pd.DataFrame) -> tuple[int, int] | None:
    """(processes per side the undecided rows' CIs need, the baseline's processes), when what
    leaves the point undecided is only CIs across the threshold ("needs >= N processes per
    side"); None when anything else does (a disturbed environment, a transient, a CI beyond
    the threshold): more processes of the same kind would not decide those."""
    und = verdicts[undecided_rows(verdicts)] if not verdicts.empty else verdicts
    if und.empty:
        return None
    notes = [n if isinstance(n, str) else "" for n in und["note"]]
    needs = [[int(m) for m in _needs().findall(n)] for n in notes]
    if not all(needs) or any(w in n for n in notes for w in ("noisy environment", "not reproduced", DISTURBED_BASELINE)):
        return None
    n_base = int(pd.to_numeric(und["n_base"], errors="coerce").min())
    return max(max(n) for n in needs), n_base


def candidate_processes_for(need: int, n_base: int) -> int | None:
    """Candidate processes that give a comparison with ``n_base`` baseline processes the
    precision of ``need`` per side (1/n_base + 1/n_cand = 2/need); None when no number can
    (the baseline alone is too small: it must be recorded with more processes)."""
    room = 2.0 / need - 1.0 / max(1, n_base)
    if room <= 0:
        return None
    return int(np.ceil(1.0 / room - 1e-9))


def _row_text(rows: pd.DataFrame) -> str:
    """The worst row (largest change either way) as ``kernel metric +12.3% [..]: note``, one
    line whatever the kernel's name holds (a newline in it would start a line of the failure
    message, the outcome line or the summary with the name: ``textsafe.printable``)."""
    r = pd.to_numeric(rows["ratio"], errors="coerce").to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        size = np.abs(np.log(np.where(r > 0, r, np.nan)))
    i = int(np.nanargmax(size)) if np.isfinite(size).any() else 0
    row = rows.iloc[i]
    note = row.get("note")
    note = note if isinstance(note, str) else ""
    head = f"{printable(row['kernel'])} {row['metric']} {change_text(row['ratio'], row['ci_low'], row['ci_high'])}"
    return f"{head}: {printable(note)}" if note else head


@dataclass(frozen=True)
class DecidePlan:
    """Whether an undecided point is worth more processes (:func:`decide_plan`)."""

    #: processes per side the undecided rows' CIs need, and the baseline's processes
    need: int
    n_base: int
    #: candidate processes to reach (None: none can, or more than the runs allowed)
    target: int | None
    #: why no re-run is made (empty when ``target`` is set)
    stopped: str = ""


def decide_plan(verdicts: pd.DataFrame, units: int, runs_done: int, max_runs: int) -> DecidePlan | None:
    """The plan for an undecided point whose CIs only cross the threshold ("needs >= N
    processes per side", ``outcome.processes_needed``): the candidate processes that give the
    comparison the precision of N per side with the baseline's own count
    (``outcome.candidate_processes_for``), if ``max_runs`` runs (``--gemmperf-max-repeats``)
    can reach it at ``units / runs_done`` processes a run. None: nothing more processes of the
    same kind would decide (a disturbance, a transient, a CI wholly beyond the threshold)."""
    needed = processes_needed(verdicts)
    if needed is None:
        return None
    need, n_base = needed
    target = candidate_processes_for(need, n_base)
    if target is None:
        return DecidePlan(need, n_base, None, f"the baseline has {n_base} processes: no candidate count "
                                              f"reaches {need} per side; re-record the baseline with "
                                              f"{need} processes (--gemmperf-repeats)")
    per_run = max(1.0, units / max(1, runs_done))
    if runs_done + int(np.ceil(max(0, target - units) / per_run)) > max_runs:
        return DecidePlan(need, n_base, None, f"{target} candidate processes needed, more than "
                                              f"--gemmperf-max-repeats {max_runs} runs allow")
    return DecidePlan(need, n_base, target)
