"""Build the gate's samples table (``point, kernel, metric, unit, value``) from dispatches.

The unit is one profiled process, ``host/pid/rank/run`` (ARCHITECTURE.md "The process unit";
missing parts are written ``-``). Per dispatch the table holds ``dur_ns``; per unit it holds
``category_total_ns`` for every kernel category (kernel ``category:<cat>``), so that a kernel
replaced by a slower one shows up in the totals even though it appears as "missing + new".
Further unit-level metrics (overlap fraction, interference slowdown, exposed communication,
collective metrics) come from analysis tables passed in as already-computed DataFrames: this
module never imports the analysis layer.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError

SAMPLE_COLUMNS = ("point", "kernel", "metric", "unit", "value")
UNIT_PARTS = ("host", "pid", "rank", "run")


def _text(s: pd.Series) -> np.ndarray:
    return s.astype(object).where(s.notna(), "-").astype(str).to_numpy()


def unit_ids(df: pd.DataFrame) -> np.ndarray:
    """``host/pid/rank/run`` per row (``-`` for a missing part or column)."""
    if "unit" in df.columns:
        return _text(df["unit"])
    parts = [(_text(df[c]) if c in df.columns else np.full(len(df), "-", dtype=object)) for c in UNIT_PARTS]
    out = parts[0].astype(object)
    for p in parts[1:]:
        out = out + "/" + p
    return out


def _points(df: pd.DataFrame) -> np.ndarray:
    return _text(df["point"]) if "point" in df.columns else np.full(len(df), "-", dtype=object)


def samples_from_dispatches(dispatches: pd.DataFrame, warmup: int = 0, max_per_unit: int | None = None,
                            *, unit_metrics: Mapping[str, pd.DataFrame] | None = None,
                            categories: bool = True) -> pd.DataFrame:
    """Samples table of a canonical dispatches table.

    * ``warmup``: drop the first N dispatches of every (point, unit, kernel) in start order.
    * ``zero_dur`` dispatches are left out of ``dur_ns`` (timestamp artefacts; log undefined).
    * ``max_per_unit``: keep at most K evenly spaced dispatches per (point, unit, kernel) in
      start order, so long runs do not dominate memory; the median is barely affected.
    * category totals are summed over the kept dispatches after warm-up, before the cap.
    * ``unit_metrics``: ``{metric: frame}``, each frame one row per unit with the unit columns
      (``host, pid, rank, run`` or ``unit``), optional ``point`` and ``kernel`` (default
      ``*``) and a ``value`` column (or a column named like the metric); see
      :func:`unit_metric_samples`.
    """
    for col in ("kernel", "dur_ns", "start_ns"):
        if col not in dispatches.columns:
            raise GemmperfInputError(None, f"dispatches table lacks column {col!r}")
    d = pd.DataFrame({
        "point": _points(dispatches),
        "unit": unit_ids(dispatches),
        "kernel": dispatches["kernel"].astype(object).astype(str).to_numpy(),
        "category": (_text(dispatches["category"]) if "category" in dispatches.columns
                     else np.full(len(dispatches), "other", dtype=object)),
        "start_ns": dispatches["start_ns"].to_numpy(np.int64),
        "value": dispatches["dur_ns"].to_numpy(np.int64).astype(float),
    })
    if "zero_dur" in dispatches.columns:
        d = d[~dispatches["zero_dur"].to_numpy(bool)]
    d = d[d["value"] > 0]
    d = d.sort_values(["point", "unit", "kernel", "start_ns"], kind="stable")
    pos = d.groupby(["point", "unit", "kernel"], sort=False).cumcount().to_numpy()
    if warmup:
        d = d[pos >= warmup]
        pos = pos[pos >= warmup] - warmup
    frames = []
    kept = d
    if max_per_unit:
        n = d.groupby(["point", "unit", "kernel"], sort=False)["value"].transform("size").to_numpy()
        k = int(max_per_unit)
        # keep positions round(j (n-1)/(k-1)), j = 0..k-1: evenly spaced over the run
        with np.errstate(divide="ignore", invalid="ignore"):
            j = np.rint(pos * (k - 1) / np.maximum(n - 1, 1))
            back = np.rint(j * (n - 1) / max(k - 1, 1))
        keep = (n <= k) | (back == pos) if k > 1 else (pos == (n - 1) // 2)
        kept = d[keep]
    frames.append(pd.DataFrame({"point": kept["point"].to_numpy(), "kernel": kept["kernel"].to_numpy(),
                                "metric": "dur_ns", "unit": kept["unit"].to_numpy(),
                                "value": kept["value"].to_numpy()}))
    if categories and len(d):
        tot = d.groupby(["point", "unit", "category"], sort=True)["value"].sum().reset_index()
        frames.append(pd.DataFrame({"point": tot["point"], "kernel": "category:" + tot["category"].astype(str),
                                    "metric": "category_total_ns", "unit": tot["unit"],
                                    "value": tot["value"].astype(float)}))
    for metric, frame in (unit_metrics or {}).items():
        frames.append(unit_metric_samples(frame, metric))
    out = pd.concat(frames, ignore_index=True)
    for c in ("point", "kernel", "metric", "unit"):
        out[c] = out[c].astype(str)
    return out[list(SAMPLE_COLUMNS)]


def unit_metric_samples(frame: pd.DataFrame, metric: str, value_col: str | None = None,
                        kernel: str = "*") -> pd.DataFrame:
    """Rows of a unit-level metric (overlap_fraction, interference_slowdown, exposed_comm_ns...).

    ``frame`` is an analysis result with one row per unit (and per kernel, when it has a
    ``kernel`` column). The value column is ``value_col``, else ``value``, else ``metric``.
    """
    col = value_col or ("value" if "value" in frame.columns else metric)
    if col not in frame.columns:
        raise GemmperfInputError(None, f"{metric}: analysis table has no {col!r} column")
    kern = (frame["kernel"].astype(object).astype(str).to_numpy() if "kernel" in frame.columns
            else np.full(len(frame), kernel, dtype=object))
    return pd.DataFrame({"point": _points(frame), "kernel": kern, "metric": metric,
                         "unit": unit_ids(frame),
                         "value": pd.to_numeric(frame[col], errors="coerce").to_numpy(float)}
                        ).dropna(subset=["value"])


def compact_samples(samples: pd.DataFrame, per_unit: int = 21) -> pd.DataFrame:
    """Shrink ``dur_ns`` rows to at most ``per_unit`` quantiles per (point, kernel, unit).

    A baseline store keeps the order statistics at probabilities ``(i + 0.5) / K``: real
    observed values, the same median (exactly, for odd K and odd counts), the same spread and
    tails, so the gate can be re-run on the stored baseline. Unit-level rows pass unchanged.
    """
    if per_unit < 1:
        raise ValueError("per_unit must be >= 1")
    is_dur = (samples["metric"] == "dur_ns").to_numpy()
    dur = samples[is_dur].sort_values(["point", "kernel", "unit", "value"], kind="stable")
    keys = ["point", "kernel", "unit"]
    n = dur.groupby(keys, sort=False)["value"].transform("size").to_numpy()
    pos = dur.groupby(keys, sort=False).cumcount().to_numpy()
    k = per_unit
    # keep positions floor((j + 1/2) n / K), j = 0..K-1 (distinct when n > K); in integers:
    # the only candidate j for position pos is ceil((2 pos K - n) / 2n)
    j = -((n - 2 * pos * k) // (2 * n))
    keep = (n <= k) | ((j >= 0) & (j < k) & (((2 * j + 1) * n) // (2 * k) == pos))
    out = pd.concat([samples[~is_dur], dur[keep]], ignore_index=True)
    return out[list(SAMPLE_COLUMNS)]
