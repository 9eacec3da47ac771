"""Per-distinct-value mapping of a string column, shared by the schema and the category rules.

A module of its own below both: the readers' schema assigns categories with the rules, and
the rules map names through this, so neither has to import the other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def map_categories(values: pd.Series, fn) -> pd.Series:
    """Apply ``fn`` to each distinct value of a string column and broadcast the result.

    Kernel-name columns have millions of rows but few distinct names, so per-name Python work
    (regexes, demangling) is done once per name and rows are remapped by integer code.
    ``fn`` returning None gives a missing value.
    """
    cat = values.array if isinstance(values.dtype, pd.CategoricalDtype) else values.astype("category").array
    mapped = [fn(str(c)) for c in cat.categories]
    uniq = sorted({str(v) for v in mapped if v is not None})
    index = {v: i for i, v in enumerate(uniq)}
    table = np.asarray([index[str(v)] if v is not None else -1 for v in mapped] + [-1], dtype=np.int32)
    codes = np.asarray(cat.codes)  # -1 (missing) picks the trailing -1
    return pd.Series(pd.Categorical.from_codes(table[codes], categories=pd.Index(uniq, dtype=object)),
                     index=values.index)
