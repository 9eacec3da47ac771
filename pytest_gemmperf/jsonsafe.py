"""JSON-safe copies of tables and summaries: numpy and pandas scalars become Python values,
NaN / NA become null (``json.dumps(..., allow_nan=False)`` then accepts them).

A foundation module, so that writing a summary (``gemmperf analyze``'s ``summary.json``) does
not import the report layer and the statistics libraries it loads.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from pytest_gemmperf.numbers import tidy_float


def clean(v: Any) -> Any:
    """JSON-safe copy: numpy/pandas scalars to Python, NaN/NA to null, floats without binary
    noise (:func:`~pytest_gemmperf.numbers.tidy_float`)."""
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if not math.isfinite(float(v)) else tidy_float(float(v))
    if isinstance(v, str):
        return v
    if isinstance(v, pd.DataFrame):
        return clean(v.to_dict("records"))
    return str(v)
