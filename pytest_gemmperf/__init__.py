"""pytest-gemmperf: GPU kernel performance as a release gate."""

__version__ = "0.1.0"
