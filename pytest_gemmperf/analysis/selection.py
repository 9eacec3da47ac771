"""Which dispatches a test gates: the point's kernel regexes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError


def select_kernels(dispatches: pd.DataFrame, kernels: Iterable[str] | None,
                   path: Path | str | None = None) -> pd.DataFrame:
    """Rows whose kernel name matches any regex of ``kernels`` (``re.search``); all rows when
    there are none. The pytest gate and ``baseline refresh`` both select through here, so a
    baseline refreshed from a results directory holds exactly the kernels pytest gates."""
    kernels = [str(k) for k in kernels or []]
    if not kernels or dispatches.empty:
        return dispatches
    pattern = "|".join(f"(?:{k})" for k in kernels)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise GemmperfInputError(path, f"invalid kernel regex in 'kernels': {exc}") from None
    names = dispatches["kernel"].astype("category")
    hit = names.cat.categories.to_series().str.contains(pattern, regex=True)
    return dispatches.loc[names.isin(hit[hit].index).to_numpy()].reset_index(drop=True)
