"""Verdict constants and the verdicts table layout (its text rendering: :mod:`.headline`).

The table layout is the contract of ``docs/ARCHITECTURE.md`` ("Verdicts table"); the report
modules, the plugin and ``gemmperf compare`` all read frames built by :func:`verdicts_to_frame`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from pytest_gemmperf.gate import metrics as M

REGRESSION = "regression"
IMPROVEMENT = "improvement"
UNCHANGED = "unchanged"
INCONCLUSIVE = "inconclusive"
NEW = "new"
MISSING = "missing"
VERDICTS = (REGRESSION, IMPROVEMENT, UNCHANGED, INCONCLUSIVE, NEW, MISSING)
#: the note of a row the baseline's own contention leaves undecided (``confirm`` writes it,
#: ``outcome`` reads it)
DISTURBED_BASELINE = "disturbed baseline"

#: ARCHITECTURE.md column order.
VERDICT_COLUMNS = ("test", "point", "kernel", "metric", "n_base", "n_cand", "base_median_ns",
                   "cand_median_ns", "ratio", "ci_low", "ci_high", "p_value", "q_value", "verdict",
                   "threshold", "note")
#: Extra columns appended after the contract columns (diagnostics of the statistics).
EXTRA_COLUMNS = ("rank_p_value", "prior_df", "shared_shift")
#: ``verdicts.csv`` column order, one for every writer (the pytest session's
#: ``store.verdicts_file.merge_verdicts`` and ``gemmperf compare``): the contract columns (``test``
#: first), ``label`` (compare with several candidates), the statistics' diagnostics; any other
#: column follows in name order (:func:`verdicts_csv_order`), so the two files line up.
VERDICTS_CSV_COLUMNS = VERDICT_COLUMNS + ("label",) + EXTRA_COLUMNS


@dataclass
class Verdict:
    """One row of the verdicts table (ratios are candidate / baseline)."""

    test: str
    point: str
    kernel: str
    metric: str
    n_base: int
    n_cand: int
    base_median_ns: float = math.nan
    cand_median_ns: float = math.nan
    ratio: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_value: float = math.nan
    q_value: float = math.nan
    verdict: str = INCONCLUSIVE
    threshold: float = math.nan
    note: str = ""
    extra: dict = field(default_factory=dict)


def verdicts_to_frame(verdicts: list[Verdict] | pd.DataFrame) -> pd.DataFrame:
    """Build the verdicts table with the contract columns first, in order, extras after."""
    if isinstance(verdicts, pd.DataFrame):
        df = verdicts.copy()
    else:
        rows = []
        for v in verdicts:
            d = asdict(v)
            d.update(d.pop("extra"))
            rows.append(d)
        df = pd.DataFrame(rows)
    for c in VERDICT_COLUMNS:
        if c not in df.columns:
            df[c] = pd.Series(dtype=object if c in ("test", "point", "kernel", "metric", "verdict", "note") else float)
    df["n_base"] = df["n_base"].fillna(0).astype("int64")
    df["n_cand"] = df["n_cand"].fillna(0).astype("int64")
    for c in ("test", "point", "kernel", "metric", "verdict", "note"):
        df[c] = df[c].astype(object).where(df[c].notna(), "").astype(str)
    extra = [c for c in df.columns if c not in VERDICT_COLUMNS]
    return df[list(VERDICT_COLUMNS) + extra].reset_index(drop=True)


def verdicts_csv_order(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its columns in the ``verdicts.csv`` order (:data:`VERDICTS_CSV_COLUMNS` that
    are present, then the others sorted by name). Columns are reordered, never added: a frame
    lacking a contract column is written as it is, not padded."""
    known = [c for c in VERDICTS_CSV_COLUMNS if c in df.columns]
    rest = sorted((c for c in df.columns if c not in VERDICTS_CSV_COLUMNS), key=str)
    return df[known + rest]


def shorten_kernel(name: str, width: int = 48) -> str:
    """Display form of a (possibly long C++ template) kernel name: head ... tail."""
    name = " ".join(str(name).split())
    if len(name) <= width:
        return name
    head = max(8, width * 2 // 3 - 1)
    tail = width - head - 3
    return name[:head] + "..." + name[-tail:] if tail > 0 else name[: width - 3] + "..."


def per_process_medians(samples: pd.DataFrame) -> pd.Series:
    """The median ``gemmperf compare`` and the verdict tables print (``base_median_ns`` /
    ``cand_median_ns``): per (point, kernel, metric) the median over units of each unit's
    median value. ``baseline show`` / ``diff`` use it where they mean the same number. Index
    (point, kernel, metric), as strings."""
    keys = ["point", "kernel", "metric"]
    d = samples[keys + ["unit", "value"]]
    dur = M.per_dispatch(d["metric"].astype(str))
    d = d[~dur | (d["value"].to_numpy(float) > 0)]  # the gate drops zero durations
    dur = M.per_dispatch(d["metric"].astype(str))
    # durations (per-dispatch rows): median of the logs per unit, as the gate takes it (an even
    # count averages the two middle values geometrically)
    logv = np.where(dur, np.log(np.where(dur, d["value"].to_numpy(float), 1.0)), d["value"].to_numpy(float))
    per_unit = d.assign(value=logv).groupby(keys + ["unit"], observed=True, sort=False)["value"].median()
    is_dur = M.per_dispatch(per_unit.index.get_level_values("metric").astype(str))
    vals = per_unit.to_numpy(float).copy()
    vals[is_dur] = np.exp(vals[is_dur])
    per_unit = pd.Series(vals, index=per_unit.index)
    out = per_unit.groupby(level=keys, observed=True, sort=True).median()
    out.index = pd.MultiIndex.from_arrays([out.index.get_level_values(k).astype(str) for k in keys], names=keys)
    return out.rename("median_per_process")
