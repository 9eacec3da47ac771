"""Repository-root conftest: makes ``pytest perf_tests`` work from a plain checkout and holds the
fixtures the perf suite shares.

Installed with pip, the plugin is loaded through its ``pytest11`` entry point; from a checkout
that was never installed it is loaded here instead (loading it twice would be an error).
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent
WORKLOADS = REPO / "perf_tests" / "workloads"


def _entry_point_loaded() -> bool:
    return any(ep.value == "pytest_gemmperf.plugin"
               for ep in importlib.metadata.entry_points(group="pytest11"))


if not _entry_point_loaded():
    pytest_plugins = ["pytest_gemmperf.plugin"]


@pytest.fixture(scope="session")
def workloads_dir() -> Path:
    """``perf_tests/workloads`` (the bundled example workloads)."""
    return WORKLOADS


@pytest.fixture(scope="session")
def gemm_comm_workload(workloads_dir: Path) -> Path:
    """The example GEMM + all-reduce workload (needs PyTorch; skips without it)."""
    pytest.importorskip("torch", reason="the example workload needs PyTorch (pip install -e '.[torch]')")
    return workloads_dir / "gemm_comm.py"


@pytest.fixture(scope="session")
def aorta_dir() -> Path:
    """A ROCm/aorta checkout with ``train.py`` (``$AORTA_DIR``, else ``./aorta`` or ``../aorta``);
    skips the test with the reason when there is none."""
    env = os.environ.get("AORTA_DIR")
    for c in (env, REPO / "aorta", REPO.parent / "aorta"):
        if c and (Path(c) / "train.py").is_file():
            return Path(c).resolve()
    pytest.skip("aorta workload not installed: set AORTA_DIR to a ROCm/aorta checkout "
                "(https://github.com/ROCm/aorta) containing train.py"
                + (f" ($AORTA_DIR={env} has no train.py)" if env else ""))
