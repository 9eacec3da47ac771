"""Kernel swap pairing: a ``missing`` and a ``new`` kernel that play the same role.

The commonest GEMM regression on ROCm is a library update that selects another solution for
the same problem: the baseline's kernel disappears and a differently named one takes its
place. Gated name by name that reads ``missing`` + ``new`` and passes. This module pairs such
kernels so that the gate compares them as one row (verdict ``regression`` / ``improvement`` /
``unchanged`` with the note ``swapped: A -> B``).

Evidence of "the same role", strongest first (:func:`pair_swaps`):

1. **Same op and input shapes** where the samples carry a role label per kernel (a PyTorch
   trace links each kernel to its op; ``roles`` maps kernel -> label, e.g.
   ``"aten::mm [[4096, 4096], [4096, 11008]]"``). One missing and one new kernel with the
   same label are paired; several with the same label pair by dispatch count.
2. **Same kernel family**: Tensile / hipBLASLt solution names that differ only in numbers
   (tile parameters such as ``MT64x32x256`` vs ``MT64x48x256``, ``LDSB0`` vs ``LDSB1``) but keep
   every letter (the transposes ``Ailk_Bljk``, data types ``BBS``, epilogue flags), or C++
   template instantiations of the same function (``f<float, 4>`` vs ``f<float, 8>``). The
   dispatch counts per process must agree within ``COUNT_TOLERANCE`` (a solution swap keeps
   the call count of its op).
3. **Same slot**: after 1-2, if exactly one missing and one new kernel remain in a point and
   both run the same number of times per process (within ``SLOT_TOLERANCE``), they take the
   same place in every step's dispatch sequence. A samples table keeps no dispatch order, so
   the per-process count stands for the slot; with more than one kernel left on either side
   the count alone is ambiguous and nothing is paired.

Unpaired kernels stay ``new`` / ``missing``; ``GateConfig.unpaired`` decides whether they fail
the test (:mod:`pytest_gemmperf.gate.compare`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

#: per-process dispatch counts of a family pair may differ by this fraction
COUNT_TOLERANCE = 0.25
#: ... and of the single leftover pair ("same slot") by this fraction
SLOT_TOLERANCE = 0.10

_TENSILE = re.compile(r"^(Cijk_|Custom_Cijk_)|_MT\d+x\d+")
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Swap:
    """``missing`` (baseline kernel) replaced by ``new`` (candidate kernel); ``how`` says by
    which evidence: "role", "family" or "slot"."""

    missing: str
    new: str
    how: str

    @property
    def note(self) -> str:
        return f"swapped: {self.missing} -> {self.new} (same {self.how})"


def kernel_family(name: str) -> str | None:
    """Family key of a kernel name, or None when the name carries no family structure.

    Tensile / hipBLASLt names: every run of digits replaced by ``#`` (tile sizes, matrix
    instruction shapes, LDS/GRVW options differ between solutions of one problem; the letters
    name the problem). C++ templates: the function's qualified name before its template
    arguments (``void ns::f<float, 4>(...)`` -> ``ns::f``)."""
    name = " ".join(str(name).split())
    if _TENSILE.search(name):
        return "tensile:" + _DIGITS.sub("#", name)
    if "<" in name:
        head = name.split("<", 1)[0].strip()
        head = head.rsplit(" ", 1)[-1]  # drop a return type ("void ns::f")
        return "template:" + head if head else None
    return None


def pair_swaps(missing: Mapping[str, float], new: Mapping[str, float],
               roles: Mapping[str, str] | None = None) -> list[Swap]:
    """Pairs of (missing, new) kernels of one point that play the same role.

    ``missing`` / ``new`` map each unmatched kernel to its per-process dispatch count (median
    over processes; NaN when unknown). ``roles`` optionally maps kernels to an op/shape label.
    Each kernel is paired at most once; ties are broken by the closer dispatch count, then by
    the more similar name. Deterministic (sorted inputs)."""
    left_m = dict(sorted(missing.items()))
    left_n = dict(sorted(new.items()))
    out: list[Swap] = []

    def take(m: str, n: str, how: str) -> None:
        out.append(Swap(m, n, how))
        left_m.pop(m)
        left_n.pop(n)

    if roles:
        _pair_by_key(left_m, left_n, lambda k: roles.get(k), np.inf, "role", take)
    _pair_by_key(left_m, left_n, kernel_family, COUNT_TOLERANCE, "family", take)
    if len(left_m) == 1 and len(left_n) == 1:
        (m, cm), = left_m.items()
        (n, cn), = left_n.items()
        if _close(cm, cn, SLOT_TOLERANCE):
            take(m, n, "slot")
    return out


def _pair_by_key(left_m: dict, left_n: dict, key, tol: float, how: str, take) -> None:
    groups: dict[str, tuple[list[str], list[str]]] = {}
    for k in left_m:
        g = key(k)
        if g is not None:
            groups.setdefault(g, ([], []))[0].append(k)
    for k in left_n:
        g = key(k)
        if g is not None and g in groups:
            groups[g][1].append(k)
    for g in sorted(groups):
        ms, ns = groups[g]
        # greedy on (count distance, name dissimilarity): a few kernels per family at most
        cand = sorted(((_count_gap(left_m[m], left_n[n]), -_similarity(m, n), m, n) for m in ms for n in ns))
        used_m, used_n = set(), set()
        for gap, _, m, n in cand:
            if m in used_m or n in used_n or not (gap <= tol or np.isinf(tol)):
                continue
            used_m.add(m)
            used_n.add(n)
            take(m, n, how)


def _count_gap(a: float, b: float) -> float:
    if not (np.isfinite(a) and np.isfinite(b)) or max(a, b) <= 0:
        return 0.0  # unknown counts: no evidence against the pair
    return abs(a - b) / max(a, b)


def _close(a: float, b: float, tol: float) -> bool:
    """Both counts known and within ``tol`` (the slot rule has no other evidence)."""
    return bool(np.isfinite(a) and np.isfinite(b)) and _count_gap(a, b) <= tol


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
