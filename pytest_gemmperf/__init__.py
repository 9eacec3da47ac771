"""pytest-gemmperf: GPU kernel performance as a release gate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_gemmperf.version import __version__  # noqa: F401  (re-exported)
from pytest_gemmperf.sweep import Axis, SweepPoint, sweep  # public test API

if TYPE_CHECKING:  # the notebook API, typed for checkers; loaded on first use below
    from pytest_gemmperf.api import Analysis, Comparison, compare, load

#: names served by pytest_gemmperf.api, imported on first access
_API = ("Analysis", "Comparison", "compare", "load")


def __getattr__(name: str) -> Any:
    if name in _API:
        # every pytest process imports this package (the plugin); the notebook API loads
        # pandas, scipy and the commands' work, which a pytest start-up must not pay for
        from pytest_gemmperf import api  # lazy: see above

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Analysis", "Axis", "Comparison", "SweepPoint", "compare", "load", "sweep", "__version__"]
