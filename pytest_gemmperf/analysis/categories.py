"""Kernel categories from ordered regexes; the first rule that matches wins.

Users override or extend the rules (``--gemmperf-categories FILE`` / ini ``gemmperf_categories``
with a YAML mapping ``category: [regex, ...]``, tried before the defaults).
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import pandas as pd

CATEGORIES = ("gemm", "collective", "attention", "normalization", "reduction", "elementwise",
              "memory", "other")

#: (category, regex) in priority order. Collectives first: an RCCL kernel name can contain
#: "reduce", which would otherwise make it a reduction.
DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    ("collective", r"nccl|rccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|alltoall"),
    ("gemm", r"^Cijk_|gemm|matmul|hipblaslt|tensile|nvjet|xmma|cutlass|wmma|mfma|sgemm|hgemm|"
             r"igemm|ampere_.*_(s|h)\d+|sm\d+_xmma|ck_.*gemm|splitk|addmm|bmm|"
             # CPU runs of the PyTorch profiler gate the aten ops themselves
             r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm)$"),
    ("attention", r"attn|attention|flash|fmha|sdpa|softmax"),
    # "norm" but not "normal" (random-normal sampling kernels are not normalization)
    ("normalization", r"norm(?!al)"),
    ("reduction", r"reduce|reduction|cub::|_sum_|argmax|argmin|scan"),
    ("memory", r"^__amd_rocclr_|memcpy|memset|^MEMORY_COPY|gpu_memcpy|gpu_memset"),
    ("elementwise", r"elementwise|vectorized|unrolled_elementwise|pointwise|triton_poi|"
                    r"activation|gelu|relu|silu|add_kernel|mul_kernel|fill_kernel"),
    # generic copy/transpose names last: torch wraps copies in elementwise kernels, which
    # are elementwise work, not memory-engine traffic
    ("memory", r"copy_kernel|copyBuffer|fillBuffer|transpose"),
)


def compile_rules(rules: Sequence[tuple[str, str]] | None = None,
                  extra: Iterable[tuple[str, str]] = ()) -> list[tuple[str, re.Pattern]]:
    ordered = list(extra) + list(rules if rules is not None else DEFAULT_RULES)
    return [(cat, re.compile(rx, re.IGNORECASE)) for cat, rx in ordered]


def category_of(name: str, compiled: list[tuple[str, re.Pattern]] | None = None) -> str:
    for cat, rx in compiled if compiled is not None else _DEFAULT_COMPILED:
        if rx.search(name):
            return cat
    return "other"


_DEFAULT_COMPILED = compile_rules()


def categorize(names: pd.Series, rules: Sequence[tuple[str, str]] | None = None,
               extra: Iterable[tuple[str, str]] = ()) -> pd.Series:
    """Category per row; regexes run once per distinct name."""
    from pytest_gemmperf.traces.schema import map_categories

    compiled = _DEFAULT_COMPILED if rules is None and not extra else compile_rules(rules, extra)
    return map_categories(names, lambda n: category_of(n, compiled))


def load_rules(path) -> list[tuple[str, str]]:
    """Read user rules from YAML: ``{category: [regex, ...]}`` in priority order."""
    import yaml

    from pytest_gemmperf.errors import GemmperfInputError

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as exc:
        raise GemmperfInputError(path, f"cannot read category rules: {exc}") from None
    if not isinstance(data, dict):
        raise GemmperfInputError(path, "category rules must be a mapping category -> [regex, ...]")
    out: list[tuple[str, str]] = []
    for cat, rxs in data.items():
        for rx in [rxs] if isinstance(rxs, str) else list(rxs or []):
            try:
                re.compile(rx)
            except re.error as exc:
                raise GemmperfInputError(path, f"bad regex for {cat!r}: {rx!r} ({exc})") from None
            out.append((str(cat), rx))
    return out
