"""pytest-gemmperf: GPU kernel performance as a release gate."""

__version__ = "0.1.0"

from pytest_gemmperf.sweep import Axis, SweepPoint, sweep  # noqa: E402  (public test API)

__all__ = ["Axis", "SweepPoint", "sweep", "__version__"]
