"""Collective sizes and bandwidths: the formulas behind the matched-collectives table.

Split from :mod:`pytest_gemmperf.analysis.collectives`. Every function is vectorised over rows
(one Python call per distinct name or size bucket, never per collective) and returns NaN where
an input is missing or a family has no definition.

* ``msg_bytes``: output elements for all-gather, else input elements, times the dtype size
  (TraceLens "Full msg size").
* ``algbw_gbps`` = msg_bytes / 2**30 / latency_s. TraceLens (hence aorta) divides by 1024**3
  and labels it "GB/s"; the real llama-70B report is reproduced only with 2**30 (tests), so the
  same unit is used here to keep numbers comparable with aorta's sheets.
* ``busbw_factor``: all-reduce 2(n-1)/n; reduce-scatter, all-gather, all-to-all (n-1)/n;
  broadcast and reduce 1 (nccl-tests convention); n = group size.
* ``size_bucket``: power-of-two message-size label (``4MiB`` holds [4 MiB, 8 MiB)).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

#: TraceLens's "GB" and "MB" (binary), see the module docstring.
GB_BYTES = 2 ** 30
MB_BYTES = 2 ** 20

#: bytes per element for the dtype names ``record_param_comms`` writes (c10 ScalarType names)
DTYPE_BYTES: dict[str, int] = {
    "Bool": 1, "Byte": 1, "Char": 1, "UInt8": 1, "Int8": 1,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
    "Short": 2, "Int16": 2, "UInt16": 2, "Half": 2, "BFloat16": 2,
    "Int": 4, "Int32": 4, "UInt32": 4, "Float": 4, "Float32": 4, "ComplexHalf": 4,
    "Long": 8, "Int64": 8, "UInt64": 8, "Double": 8, "Float64": 8, "ComplexFloat": 8,
    "ComplexDouble": 16,
}

KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "p2p",
         "barrier", "other")


def collective_kind(names: pd.Series | Sequence[str]) -> np.ndarray:
    """Operation family of PyTorch collective names (``_allgather_base`` -> ``allgather``)."""
    s = pd.Series(names, dtype="object")
    codes, uniq = pd.factorize(s, use_na_sentinel=True)
    kinds = np.asarray([_kind_of(str(u)) for u in uniq] + ["other"], dtype=object)
    return kinds[codes]


def _kind_of(name: str) -> str:
    n = name.lower().replace("_", "").replace(" ", "")
    for needle, kind in (("reducescatter", "reducescatter"), ("allreduce", "allreduce"),
                         ("allgather", "allgather"), ("alltoall", "alltoall"),
                         ("broadcast", "broadcast"), ("barrier", "barrier"),
                         ("send", "p2p"), ("recv", "p2p"), ("reduce", "reduce")):
        if needle in n:
            return kind
    return "other"


def busbw_factor(kinds: Sequence[str] | np.ndarray, group_size) -> np.ndarray:
    """Bus-bandwidth factor per row (NaN where the family has none, or n is unknown)."""
    k = np.asarray(kinds, dtype=object)
    n = pd.to_numeric(pd.Series(np.asarray(group_size, dtype=object)), errors="coerce").to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ring = (n - 1) / n
    out = np.full(len(k), np.nan)
    out = np.where(k == "allreduce", 2 * ring, out)
    out = np.where(np.isin(k, ["allgather", "reducescatter", "alltoall"]), ring, out)
    out = np.where(np.isin(k, ["broadcast", "reduce"]), 1.0, out)
    return np.where(n > 0, out, np.nan)


def msg_bytes(kinds, in_nelems, out_nelems, dtypes) -> np.ndarray:
    """TraceLens "Full msg size" in bytes: output elements for all-gather, else input."""
    k = np.asarray(kinds, dtype=object)
    inn = _float(in_nelems)
    out = _float(out_nelems)
    size = pd.Series(np.asarray(dtypes, dtype=object)).map(DTYPE_BYTES).to_numpy(float)
    return np.where(k == "allgather", out, inn) * size


def algbw_gbps(nbytes, latency_ns) -> np.ndarray:
    """Algorithm bandwidth in TraceLens "GB/s" (2**30 bytes per second)."""
    b = _float(nbytes)
    t = _float(latency_ns)
    with np.errstate(divide="ignore", invalid="ignore"):
        bw = (b / GB_BYTES) / (t / 1e9)
    return np.where(t > 0, bw, np.nan)


def size_bucket(nbytes) -> np.ndarray:
    """Power-of-two message-size bucket label: ``4MiB`` holds sizes in [4 MiB, 8 MiB)."""
    b = _float(nbytes)
    ok = np.isfinite(b) & (b > 0)
    exp = np.where(ok, np.floor(np.log2(np.where(ok, b, 1))), -1).astype(np.int64)
    uniq, inv = np.unique(exp, return_inverse=True)
    labels = np.asarray([_bucket_label(int(e)) for e in uniq], dtype=object)
    out = labels[inv.reshape(-1)]
    return np.where(np.isfinite(b) & (b == 0), "0B", out)


def _bucket_label(exp: int) -> str:
    if exp < 0:
        return "unknown"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if exp >= shift:
            return f"{2 ** (exp - shift)}{unit}"
    return f"{2 ** exp}B"


def _float(values) -> np.ndarray:
    if isinstance(values, pd.Series):
        return pd.to_numeric(values, errors="coerce").astype("Float64").to_numpy(float, na_value=np.nan)
    arr = np.asarray(values)
    if arr.dtype.kind in "fiu":
        return arr.astype(float)
    return _float(pd.Series(arr, dtype="object"))
