"""The registry's name patterns tested without a regex equal the regex of them (``fnmatch``)."""

from __future__ import annotations

import fnmatch
import re

import pytest

from pytest_gemmperf.traces import kinds

NAMES = ["a_results.json", "a_results.json.gz", "x.json", "X.JSON", "run.pt.trace.json", "k.db",
         "12_kernel_trace.csv", "12_kernel_trace.csv.bak", "dispatches.parquet", "a/dispatches.parquet",
         "xdispatches.parquet", "", "*", ".json", "a\nb.json", "agent_info.csv", "results.db.x",
         "kernel_trace.csv", "counters.parquet", "[x].json", "a?b.db"]

PATTERN_SETS = [
    tuple(p for k in kinds.KINDS for p in k.layout_marks),
    tuple(p for k in kinds.KINDS for p in k.output_names),
    (),
    ("*",),
    ("dispatches.parquet", "*.db"),
    ("*.js?n", "*.db"),  # a pattern with another wildcard: the regex itself
    ("[x].json", "*kernel_trace.csv"),
]


def _by_regex(patterns: tuple[str, ...], name: str) -> bool:
    rx = re.compile("|".join(fnmatch.translate(p) for p in patterns) or r"(?!)")
    return rx.match(name) is not None


@pytest.mark.parametrize("patterns", PATTERN_SETS, ids=range(len(PATTERN_SETS)))
def test_name_matcher_equals_the_regex_of_the_globs(patterns):
    match = kinds._matcher(patterns)
    for name in NAMES:
        got = match(name)
        assert got is _by_regex(patterns, name), (patterns, name)


def test_registry_patterns_take_the_plain_test():
    # every registered pattern is a whole name or '*' and a literal suffix (no regex compiled)
    for patterns in PATTERN_SETS[:2]:
        kinds._pattern.cache_clear()
        kinds._matcher.cache_clear()
        kinds._matcher(patterns)("x.json")
        assert kinds._pattern.cache_info().currsize == 0
