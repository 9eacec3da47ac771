"""The values a run contributes to the history: one per (test, point, kernel, metric, unit).

Method: the gate's samples table (``point, kernel, metric, unit, value``; ``gate/samples.py``)
holds many ``dur_ns`` rows per unit (one per dispatch, or 21 order statistics once compacted)
and one row per unit for unit-level metrics. The gate's independent observation is the unit's
*median* duration, so that is what the history keeps for ``dur_ns``; unit-level metrics
(category totals per step, overlap, interference, exposed communication, collective metrics)
pass through. Rows of metrics the gate does not compare (``dispatch_count``, context written by
compaction; the metric registry's ``gated``) are dropped.
For compacted samples the median of the 21 kept quantiles equals the median of the original
dispatches exactly when the unit had an odd count and to within one quantile step otherwise.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate import metrics as M
from pytest_gemmperf.gate.prepared import SAMPLE_COLUMNS

VALUE_COLUMNS = ("test", "point", "kernel", "metric", "unit", "value")


def history_values(samples: pd.DataFrame, *, test: str) -> pd.DataFrame:
    """One row per (test, point, kernel, metric, unit) with columns :data:`VALUE_COLUMNS`.

    Contract: ``dur_ns`` -> the median of the unit's dispatch samples; every other metric the
    unit's value (the median, should a unit carry several rows); rows of ungated metrics
    (``dispatch_count``) and non-finite values dropped. Strings as ``str``, ``value`` float64,
    rows sorted by key.
    Raises :class:`GemmperfInputError` when a sample column is missing.
    """
    missing = [c for c in SAMPLE_COLUMNS if c not in samples.columns]
    if missing:
        raise GemmperfInputError(None, f"not a samples table (lacks {', '.join(missing)})")
    df = pd.DataFrame({c: samples[c].astype(str).to_numpy(object) for c in ("point", "kernel", "metric", "unit")})
    df["value"] = pd.to_numeric(samples["value"], errors="coerce").to_numpy(float)
    keep = M.is_gated(df["metric"].to_numpy(object)) & np.isfinite(df["value"].to_numpy(float))
    df = df[keep]
    # one groupby for every metric: a unit-level metric has one row per unit, so its median
    # is the value itself
    out = (df.groupby(["point", "kernel", "metric", "unit"], sort=True, observed=True)["value"]
           .median().reset_index())
    out.insert(0, "test", str(test))
    out["value"] = out["value"].astype(np.float64)
    return out[list(VALUE_COLUMNS)]
