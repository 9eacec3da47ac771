"""Kernel categories from ordered regexes; the first rule that matches wins.

Users override or extend the rules (``--gemmperf-categories FILE`` / ini ``gemmperf_categories``
with a YAML mapping ``category: [regex, ...]``, tried before the defaults).

Cost contract: categorising one name is linear in its length for the default rules (a 1 MB
kernel name takes milliseconds; ``tests/test_schema.py`` holds this). Method: each rule's
top-level alternatives are split apart; alternatives that are plain text become substring
tests on the lower-cased name (``str.__contains__``, no regex engine), the others are compiled
once. The default rules contain no pattern that can backtrack: every unbounded repeat either
sits in an atomic group or is followed by a literal the engine scans for at most once per line
(see ``ampere_`` below). User rules are Python regexes and keep whatever cost their author
wrote (only their plain-text alternatives get the substring fast path).
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.categorical import map_categories

CATEGORIES = ("gemm", "collective", "attention", "normalization", "reduction", "elementwise",
              "memory", "other")

#: (category, regex) in priority order, matched case-insensitively with ``re.search``.
#: Collectives first: an RCCL kernel name can contain "reduce", which would otherwise make it a
#: reduction.
DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    ("collective", r"nccl|rccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|alltoall"),
    # "ck_.*gemm" and "sm\d+_xmma" used to be listed too: every name they match contains
    # "gemm" / "xmma", and the ".*" made them quadratic on names with many "ck_".
    ("gemm", r"^Cijk_|gemm|matmul|hipblaslt|tensile|nvjet|xmma|cutlass|wmma|mfma|sgemm|hgemm|"
             r"igemm|splitk|addmm|bmm|"
             # "ampere_.*_(s|h)\d+" without the backtracking: per line, the first "ampere_" is
             # found once (atomic group), then one backward scan for "_s<digit>"/"_h<digit>".
             # The first "ampere_" of a line leaves the longest tail, so this is equivalent.
             r"(?m:^)(?>.*?ampere_).*_[sh]\d|"
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

_META = set(".^$*+?{}[]\\|()")


def split_alternatives(rx: str) -> list[str]:
    """Top-level ``|`` alternatives of a regex (not inside groups, classes or escapes)."""
    out, start, depth, i, in_class = [], 0, 0, 0, False
    while i < len(rx):
        ch = rx[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if rx[i + 1: i + 2] == "^":
                i += 1
            if rx[i + 1: i + 2] == "]":  # "[]...]" / "[^]...]": a literal ']' first
                i += 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            out.append(rx[start:i])
            start = i + 1
        i += 1
    out.append(rx[start:])
    return out


class Rule:
    """One category rule, compiled: substring tests plus (at most) one regex for the rest.

    ``matches(name, lower)`` takes the name and its ``str.lower()`` (computed once per name).
    Semantics equal ``re.search(rx, name, re.IGNORECASE)``.
    """

    __slots__ = ("category", "pattern", "literals", "folded", "regex")

    def __init__(self, category: str, pattern: str, *, checked: bool = False) -> None:
        self.category = category
        self.pattern = pattern
        if not checked:
            re.compile(pattern)  # a bad pattern fails here, with re's own message
        literals, folded, rest = [], [], []
        for alt in split_alternatives(pattern):
            if alt and not (_META & set(alt)):
                literals.append(alt.lower())
            elif alt == alt.lower():
                # no upper-case letters, so no \D/\S/\W/\B/\A/\Z or [A-Z] whose meaning
                # lower-casing the name would change: match the lowered name case-sensitively
                # (IGNORECASE disables the engine's literal-prefix scan)
                folded.append(alt)
            else:
                rest.append(alt)
        self.literals = tuple(literals)
        self.folded = re.compile("|".join(folded)) if folded else None
        self.regex = re.compile("|".join(rest), re.IGNORECASE) if rest else None

    def matches(self, name: str, lower: str) -> bool:
        for lit in self.literals:
            if lit in lower:
                return True
        if self.folded is not None and self.folded.search(lower):
            return True
        return self.regex is not None and self.regex.search(name) is not None


def compile_rules(rules: Sequence[tuple[str, str]] | None = None,
                  extra: Iterable[tuple[str, str]] = ()) -> list[Rule]:
    # the built-in rules are not compiled whole only to check them (every process pays that
    # at import, ~1 ms): they are written here, and their tests compile each one
    own = rules is None
    return [Rule(cat, rx) for cat, rx in extra] + [
        Rule(cat, rx, checked=own) for cat, rx in (DEFAULT_RULES if own else rules)]


def category_of(name: str, compiled: list[Rule] | None = None) -> str:
    """First matching rule's category, else ``"other"``."""
    lower = name.lower()
    for rule in compiled if compiled is not None else _DEFAULT_COMPILED:
        if rule.matches(name, lower):
            return rule.category
    return "other"


_DEFAULT_COMPILED = compile_rules()


def categorize(names: pd.Series, rules: Sequence[tuple[str, str]] | None = None,
               extra: Iterable[tuple[str, str]] = ()) -> pd.Series:
    """Category per row; regexes run once per distinct name."""
    compiled = _DEFAULT_COMPILED if rules is None and not extra else compile_rules(rules, extra)
    return map_categories(names, lambda n: category_of(n, compiled))


def load_rules(path) -> list[tuple[str, str]]:
    """Read user rules from YAML: ``{category: [regex, ...]}`` in priority order."""
    # lazy: only a --categories file needs a YAML parser (30 ms of every analysis's start-up)
    import yaml

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
