"""How a sweep point speaks while it runs: properties of its test report, lines on stderr,
progress events and one-line failures.

A test report's ``user_properties`` are the one channel from an xdist worker to the controller
(the controller prints the summary and writes the session's files from them), so every name
the point records is listed here, once; ``summary.py`` and ``progress.py`` read them back. The
runner, its gate step and its re-runs are handed a :class:`PointReporter` instead of reaching
into the pytest item.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from pytest_gemmperf.textsafe import printable_lines

#: user_properties names (JUnit XML properties; also how xdist workers report to the controller)
PROP_PREFIX = "gemmperf"
PROP_STATUS = "gemmperf_status"          # "compared: regression=1, unchanged=7" or "baseline-<what>"
PROP_VERDICTS = "gemmperf_verdicts"      # JSON list of the point's non-unchanged verdict rows
PROP_BASELINE = "gemmperf_baseline"      # path of the baseline record a point recorded or updated
PROP_LEARNED = "gemmperf_learned"        # run label whose variance joined the baseline's history
PROP_CONFIRM = "gemmperf_confirm"        # JSON summary of a point's confirmation re-runs
PROP_OUTCOME = "gemmperf_outcome"        # JSON: test, point, outcome (gate/outcome.py), reason, decide, policy
PROP_ENVIRONMENT = "gemmperf_environment"  # contention text while the point ran
PROP_GATED = "gemmperf_gated"            # JSON: test, point, warm-up, kernels (benchmark_json.py)
PROP_WARNING = "gemmperf_warning"        # a warning for the terminal summary (history not recorded)
PROP_FAULT = "gemmperf_fault"            # a write the machine refused: the item errors with this line
PROP_INPUT = "gemmperf_input_error"      # damaged input of gemmperf's own (a baseline record): the item errors
PROP_PROGRESS = "gemmperf_progress"      # ``test[point]`` of an item whose point started


def _no_property(name: str, value: str) -> None:
    return None


def _no_progress(event: str, **fields: Any) -> None:
    return None


@dataclass(frozen=True)
class PointReporter:
    """Where a point's messages go: ``record(name, value)`` appends to its test report's
    properties, ``progress(event, **fields)`` feeds the progress lines (``progress.py``);
    both are no-ops for a runner made outside pytest's fixtures."""

    record: Callable[[str, str], None] = field(default=_no_property)
    progress: Callable[..., None] = field(default=_no_progress)

    @classmethod
    def of(cls, record: Callable[[str, str], None] | None = None,
           progress: Callable[..., None] | None = None) -> PointReporter:
        """A reporter with these sinks; one left None does nothing."""
        return cls(record=record or _no_property, progress=progress or _no_progress)


def emit(message: str) -> None:
    """Visible in the test's captured output and, with -s, on the terminal."""
    print(printable_lines(message), file=sys.stderr)


def fail_now(message: str) -> BaseException:
    """The one-line failure of a test (no traceback), to ``raise``."""
    return pytest.fail.Exception(printable_lines(message), pytrace=False)
