"""Before and after: the per-process values behind each verdict row that is not ``unchanged``.

The gate's independent unit is one process. For a kernel's duration it takes one value per
process, the median of that process's dispatch durations after warm-up. Unit-level metrics
(category totals, overlap, exposed communication, collectives) already have one value per
process. A forest plot shows only the ratio and its interval. A reader of a regression also
wants the evidence: how many processes each side had, where each one sat, and whether one
outlier moved the median. This module takes those per-process values of both sides from the
samples tables the gate compared (:class:`ComparedSamples`) and gives report.html one
:class:`Panel` per notable row, worst first.

Nothing here tests anything: the values are the gate's inputs, taken per process the way the
gate takes them (the median of the log durations, zero durations dropped), before it removes
the per-process factor shared by all kernels (``gate/durations.py``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.paths import contained_relative
from pytest_gemmperf.gate.headline import notable
# where the gate defines them (gate.samples re-exports them): the reports of a run nothing was
# compared for never load the samples' builders
from pytest_gemmperf.gate.metrics import DISPATCH_COUNT
from pytest_gemmperf.gate import SAMPLE_COLUMNS
from pytest_gemmperf.safe_io import write_parquet
from pytest_gemmperf.traces.fileio import read_json_object

#: panels drawn at most; the other notable rows are listed by name (report.html stays small)
MAX_PANELS = 60
#: notable rows listed beyond the panels at most (verdicts.csv has them all)
MAX_LISTED = 500
#: the baseline samples a pytest point was compared with, beside its dispatches.parquet
BASELINE_SAMPLES_FILE = "baseline_samples.parquet"

DUR = "dur_ns"
CV = "cv_robust"
#: the MAD's normal-consistency factor: cv_robust per process is 1.4826 MAD of the log
#: durations, as gate/durations.py computes it
MAD_TO_SD = 1.4826
#: per-process value columns of one side of a panel
SIDE_COLUMNS = ("unit", "value", "dispatches")
#: verdict-row fields a panel carries
ROW_FIELDS = ("label", "test", "point", "kernel", "metric", "verdict", "ratio", "ci_low", "ci_high",
              "q_value", "base_median_ns", "cand_median_ns", "n_base", "n_cand", "swapped_to", "note")


@dataclass(frozen=True)
class ComparedSamples:
    """The two samples tables one ``compare`` call received: the baseline and a candidate of
    one test. ``label`` names the candidate sweep when several were compared."""

    test: str
    baseline: pd.DataFrame | None
    candidate: pd.DataFrame | None
    label: str = ""
    #: why a side is missing (e.g. an unreadable file), shown with the panels
    note: str = ""


@dataclass(frozen=True)
class Panel:
    """One notable verdict row with each side's per-process values (:data:`SIDE_COLUMNS`,
    ``dispatches`` NaN for unit-level metrics). An empty side had no process with this
    kernel or metric. ``None`` means the report was not given that side's samples."""

    row: dict[str, Any]
    base: pd.DataFrame | None
    cand: pd.DataFrame | None


@dataclass(frozen=True)
class BeforeAfter:
    """The panels of report.html, worst first, and the notable rows left undrawn."""

    panels: tuple[Panel, ...] = ()
    #: notable rows beyond :data:`MAX_PANELS`, in the same order (at most :data:`MAX_LISTED`)
    rest: tuple[dict[str, Any], ...] = ()
    #: notable rows in all (drawn, listed and beyond)
    n_notable: int = 0
    #: whether any compared samples reached the report
    have_samples: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)


# ---------------------------------------------------------------------------------------------
# which rows


def _text(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA:
        return ""
    return str(x)


def notable_rows(verdicts: pd.DataFrame | None) -> list[dict[str, Any]]:
    """Every row that is not ``unchanged``, in the order the headline tables list them
    (:func:`~pytest_gemmperf.gate.headline.notable`), so a panel follows its table row."""
    if verdicts is None or len(verdicts) == 0:
        return []
    rows = []
    for rec in notable(verdicts).to_dict("records"):
        row = {k: rec.get(k) for k in ROW_FIELDS}
        for k in ("label", "test", "point", "kernel", "metric", "verdict", "swapped_to", "note"):
            row[k] = _text(row[k])
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# per-process values


def _subset(samples: pd.DataFrame, points: set[str], kernels: set[str]) -> pd.DataFrame:
    """The rows of the wanted points and kernels, names as text (the compared samples of a
    trace hold every dispatch: select on the kernel before any per-row string work)."""
    missing = [c for c in SAMPLE_COLUMNS if c not in samples.columns]
    if missing:
        raise GemmperfInputError(None, f"samples table lacks column(s) {', '.join(missing)}")
    s = samples.loc[samples["kernel"].isin(kernels).to_numpy(bool), list(SAMPLE_COLUMNS)]
    out = pd.DataFrame({c: s[c].astype(str).to_numpy(object) for c in ("point", "kernel", "metric", "unit")})
    out["value"] = pd.to_numeric(s["value"], errors="coerce").to_numpy(float)
    return out[out["point"].isin(points).to_numpy(bool)].reset_index(drop=True)


def _duration_values(d: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """Per (point, kernel, unit): the median duration (``dur_ns``, via the median of the logs,
    as the gate takes it) and the robust CV (``cv_robust``, where the gate tests it)."""
    d = d[d["value"].to_numpy(float) > 0]  # the gate drops zero durations
    if len(d) == 0:
        return pd.DataFrame(columns=["point", "kernel", "metric", *SIDE_COLUMNS])
    keys = ["point", "kernel", "unit"]
    gid = d.groupby(keys, sort=True).ngroup().to_numpy()
    n = int(gid.max()) + 1
    # lazy: the statistics module loads scipy; a report without a comparison never gets here
    from pytest_gemmperf.gate.stats import group_median_mad
    from pytest_gemmperf.gate.gate_config import GateConfig  # lazy: as above (and its settings' parser)

    med, mad, cnt = group_median_mad(np.log(d["value"].to_numpy(float)), gid, n)
    _, first = np.unique(gid, return_index=True)
    k = d.iloc[first][keys].reset_index(drop=True)
    k.index = gid[first]
    k = k.sort_index().reset_index(drop=True)
    stored = cnt.astype(float)
    disp = stored
    if len(counts):  # a compacted table: how many dispatches each process had before
        rec = counts.groupby(keys, sort=False, as_index=False)["value"].max()
        disp = np.fmax(stored, k.merge(rec, on=keys, how="left")["value"].to_numpy(float))
    dur = k.assign(metric=DUR, value=np.exp(med), dispatches=disp)
    # the gate's dispersion rule: enough stored values and a spread above zero
    ok = (stored >= GateConfig().dispersion_min_dispatches) & (mad > 0)
    cv = k[ok].assign(metric=CV, value=MAD_TO_SD * mad[ok], dispatches=disp[ok])
    return pd.concat([dur, cv], ignore_index=True) if len(cv) else dur


def process_values(samples: pd.DataFrame, wanted: Iterable[tuple[str, str]]) -> pd.DataFrame:
    """Per (point, kernel, metric, unit) of the ``wanted`` (point, kernel) pairs: the value the
    gate takes for that process (:data:`SIDE_COLUMNS` after the keys)."""
    wanted = set(wanted)
    cols = ["point", "kernel", "metric", *SIDE_COLUMNS]
    if not wanted or samples is None or len(samples) == 0:
        return pd.DataFrame(columns=cols)
    s = _subset(samples, {p for p, _ in wanted}, {k for _, k in wanted})
    metric = s["metric"].to_numpy(object)
    is_dur, is_count = metric == DUR, metric == DISPATCH_COUNT
    parts = [_duration_values(s[is_dur], s[is_count])]
    other = s[~is_dur & ~is_count]
    if len(other):
        # unit-level metrics: one value per process (the median where a table holds several)
        med = other.groupby(["point", "kernel", "metric", "unit"], sort=True)["value"].median()
        parts.append(med.reset_index().assign(dispatches=np.nan))
    out = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else \
        pd.DataFrame(columns=cols)
    return out[cols]


# ---------------------------------------------------------------------------------------------
# panels


def _compared_key(labels: set[str]) -> Callable[[str, str], tuple[str, str]]:
    """Rows and compared samples meet on (label, test), or on the test alone when one
    candidate was compared (its label is the report's, not the verdicts')."""
    if len(labels) > 1:
        return lambda label, test: (label, test)
    return lambda label, test: ("", test)


def _side(values: pd.DataFrame | None, point: str, kernel: str, metric: str) -> pd.DataFrame | None:
    if values is None:
        return None
    hit = values[(values["point"] == point) & (values["kernel"] == kernel) & (values["metric"] == metric)]
    return hit[list(SIDE_COLUMNS)].sort_values("unit", kind="stable").reset_index(drop=True)


def before_after(verdicts: pd.DataFrame | None, compared: Sequence[ComparedSamples] = (), *,
                 max_panels: int = MAX_PANELS, max_listed: int = MAX_LISTED) -> BeforeAfter:
    """Panels of the ``max_panels`` worst notable rows of ``verdicts``, each side's values
    from the matching ``compared`` samples; the next ``max_listed`` rows by name only."""
    rows = notable_rows(verdicts)
    compared = [c for c in compared if c is not None]
    drawn = rows[:max_panels]
    key = _compared_key({c.label for c in compared})
    by_key: dict[tuple[str, str], ComparedSamples] = {}
    for c in compared:
        by_key.setdefault(key(c.label, str(c.test or "")), c)
    wanted: dict[tuple[str, str], tuple[set, set]] = {}
    for r in drawn:
        k = key(r["label"], r["test"])
        base_w, cand_w = wanted.setdefault(k, (set(), set()))
        base_w.add((r["point"], r["kernel"]))
        cand_w.add((r["point"], r["swapped_to"] or r["kernel"]))  # a swap: the new kernel's name
    values: dict[tuple[str, str], tuple[pd.DataFrame | None, pd.DataFrame | None]] = {}
    for k, (base_w, cand_w) in wanted.items():
        c = by_key.get(k)
        if c is None:
            values[k] = (None, None)
            continue
        values[k] = (process_values(c.baseline, base_w) if c.baseline is not None else None,
                     process_values(c.candidate, cand_w) if c.candidate is not None else None)
    panels = []
    for r in drawn:
        bv, cv = values.get(key(r["label"], r["test"]), (None, None))
        panels.append(Panel(row=r, base=_side(bv, r["point"], r["kernel"], r["metric"]),
                            cand=_side(cv, r["point"], r["swapped_to"] or r["kernel"], r["metric"])))
    notes = [c.note for c in compared if c.note]
    if rows and not compared:
        notes.append("the samples the gate compared did not reach this report: no per-process values")
    return BeforeAfter(panels=tuple(panels), rest=tuple(rows[max_panels:max_panels + max_listed]),
                       n_notable=len(rows), have_samples=bool(compared), notes=tuple(notes))


# ---------------------------------------------------------------------------------------------
# a pytest session's results directory


def write_point_baseline(point_dir: str | os.PathLike, samples: pd.DataFrame) -> Path:
    """The baseline samples a point was compared with, beside its dispatches (no link
    followed): the session's report draws them beside the candidate's processes."""
    path = Path(point_dir) / BASELINE_SAMPLES_FILE
    return write_parquet(samples[list(SAMPLE_COLUMNS)].reset_index(drop=True), path, index=False)


def _read_baseline(path: Path) -> pd.DataFrame:
    if path.is_symlink() or not path.is_file():
        raise GemmperfInputError(path, "not a regular file")
    try:
        df = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise GemmperfInputError(path, f"unreadable baseline samples: {exc}") from None
    missing = [c for c in SAMPLE_COLUMNS if c not in df.columns]
    if missing:
        raise GemmperfInputError(path, f"baseline samples lack column(s) {', '.join(missing)}")
    return df


def read_results_compared(root: str | os.PathLike, verdicts: pd.DataFrame | None) -> list[ComparedSamples]:
    """What each test of a pytest session compared, for the tests with a notable row: the
    baseline samples each point stored (:data:`BASELINE_SAMPLES_FILE`) and the candidate's
    samples gated again from its dispatches exactly as the plugin gated them (confirmation
    re-runs included). A side that cannot be read is left out and its ``note`` says why."""
    tests = {r["test"] for r in notable_rows(verdicts) if r["test"]}
    if not tests:
        return []
    root = Path(root)
    bases: dict[str, list[pd.DataFrame]] = {}
    notes: dict[str, list[str]] = {}
    for path in sorted(root.glob(f"*/*/{BASELINE_SAMPLES_FILE}")):
        test = ""
        try:
            contained_relative(root, path.relative_to(root).as_posix())  # through no planted link
            test = str(read_json_object(path.with_name("point.json")).get("test_id") or "")
            if test in tests:
                bases.setdefault(test, []).append(_read_baseline(path))
        except GemmperfInputError as exc:
            notes.setdefault(test if test in tests else "", []).append(str(exc))
    # a report of a session without notable rows, or of traces alone (gemmperf analyze), reads
    # lazy: no samples, and the store's readers load the gate's statistics (scipy)
    from pytest_gemmperf.store.results import results_samples

    out = []
    for test in sorted(tests):
        cand = None
        try:
            cand = results_samples(root, test_filter=test, jobs=1).get(test)
        except GemmperfInputError as exc:
            notes.setdefault(test, []).append(f"candidate samples: {exc}")
        base = pd.concat(bases[test], ignore_index=True) if test in bases else None
        note = "; ".join(notes.get(test, []) + notes.pop("", []))
        out.append(ComparedSamples(test=test, baseline=base, candidate=cand, note=note))
    return out


__all__ = ["BASELINE_SAMPLES_FILE", "BeforeAfter", "ComparedSamples", "MAX_LISTED", "MAX_PANELS", "Panel",
           "before_after", "notable_rows", "process_values", "read_results_compared",
           "write_point_baseline"]
