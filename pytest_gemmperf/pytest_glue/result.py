"""A profiled sweep point's result and the signals that end its run early.

Shared by the runner (``point.py``), its gate step (``gate_step.py``) and its re-runs
(``reruns.py``): a module below all three, so none of them imports another upward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pytest_gemmperf.analysis.selection import select_kernels
from pytest_gemmperf.run.backend import BackendChoice
from pytest_gemmperf.sweep import SweepPoint


@dataclass
class PointResult:
    """What ``gemmperf.profile`` returns: the canonical tables of all repeats and ranks."""

    test_id: str
    point: SweepPoint
    dir: Path
    backend: BackendChoice
    dispatches: pd.DataFrame
    counters: pd.DataFrame
    agents: pd.DataFrame
    env: dict[str, str]
    command: list[str]
    runs: list[dict[str, Any]] = field(default_factory=list)
    hw_key: str = ""
    #: contention evidence recorded while the point ran (run/environment.py)
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def gated_dispatches(self) -> pd.DataFrame:
        """Dispatches of the kernels the point's regexes select (all when it has none)."""
        return select_kernels(self.dispatches, self.point.kernels)

    @property
    def paths(self) -> dict[str, Path]:
        return {"point_dir": self.dir, "point_json": self.dir / "point.json",
                "dispatches": self.dir / "dispatches.parquet",
                "counters": self.dir / "counters.parquet", "agents": self.dir / "agents.parquet"}


class _PointFailed(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _PointSkipped(Exception):
    """The point has no data to replay."""
