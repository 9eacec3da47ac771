"""Small array helpers shared by the gate's duration statistics and its noise floors."""

from __future__ import annotations

import numpy as np
import pandas as pd


def _as_category(s: pd.Series) -> pd.Series:
    """Categorical with string categories ('' for missing), without a per-row Python loop.

    Built from codes only: relabelling or filling a categorical whose values are not (yet) in
    its categories is deprecated in pandas (Pandas4Warning) and will raise in pandas 4.
    """
    c = (s if isinstance(s.dtype, pd.CategoricalDtype) else s.astype("category")).array
    codes = np.asarray(c.codes, np.int64)
    names = np.array([str(x) for x in c.categories], dtype=object)
    # distinct values may share a name (1 and "1"): merge them
    cats, inv = np.unique(names, return_inverse=True) if len(names) else (names, np.zeros(0, np.int64))
    cats = list(cats)
    if (codes < 0).any():
        if "" not in cats:
            cats.append("")
        fill = cats.index("")
    else:
        fill = 0
    new = np.where(codes >= 0, inv[np.maximum(codes, 0)] if len(inv) else 0, fill)
    return pd.Series(pd.Categorical.from_codes(new, categories=pd.Index(cats, dtype=object)), index=s.index)


def _codes(s: pd.Series, categories: pd.Index) -> np.ndarray:
    """Positions of ``s`` (a categorical from check_samples) in ``categories`` (-1 if absent)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        lookup = categories.get_indexer(s.cat.categories.astype(object))
        return lookup[s.cat.codes.to_numpy()].astype(np.int64)
    return categories.get_indexer(s.astype(object)).astype(np.int64)


def _nanmedian_rows(a: np.ndarray) -> np.ndarray:
    if a.shape[1] == 0:
        return np.full(a.shape[0], np.nan)
    with np.errstate(all="ignore"):
        ok = np.isfinite(a).any(axis=1)
        out = np.full(a.shape[0], np.nan)
        if ok.any():
            out[ok] = np.nanmedian(a[ok], axis=1)
    return out


def _nanmean_rows(a: np.ndarray) -> np.ndarray:
    n = np.isfinite(a).sum(axis=1)
    tot = np.where(np.isfinite(a), a, 0.0).sum(axis=1)
    return np.where(n > 0, tot / np.maximum(n, 1), np.nan)
