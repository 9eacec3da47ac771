"""pytest-gemmperf: GPU kernel performance as a release gate."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from pytest_gemmperf.version import __version__  # noqa: F401  (re-exported)

if TYPE_CHECKING:  # the test API and the notebook API, typed for checkers; loaded on first use below
    from pytest_gemmperf.api import Analysis, Comparison, compare, load
    from pytest_gemmperf.sweep import Axis, SweepPoint, sweep

#: the test API: names served by pytest_gemmperf.sweep, imported on first access (a test module's
#: ``from pytest_gemmperf import sweep``, the plugin's hooks); a gemmperf command never needs it
_TEST_API = ("Axis", "SweepPoint", "sweep")
#: names served by pytest_gemmperf.api, imported on first access
_API = ("Analysis", "Comparison", "compare", "load")


class _Package(types.ModuleType):
    """This package's module object. The import system binds every submodule it loads as an
    attribute of its package; the submodule ``sweep`` is bound as the decorator it defines
    instead, so ``pytest_gemmperf.sweep`` is the test API's ``sweep`` whichever was imported
    first (``importlib.import_module("pytest_gemmperf.sweep")`` still gives the module)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "sweep" and isinstance(value, types.ModuleType):
            value = value.sweep
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in _TEST_API:
        # every gemmperf command imports this package; the sweep module (dataclasses, patterns)
        # serves pytest sessions and test modules only
        import pytest_gemmperf.sweep  # lazy: see above

        return getattr(sys.modules["pytest_gemmperf.sweep"], name)
    if name in _API:
        # every pytest process imports this package (the plugin); the notebook API loads
        # pandas, scipy and the commands' work, which a pytest start-up must not pay for
        from pytest_gemmperf import api  # lazy: see above

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Analysis", "Axis", "Comparison", "SweepPoint", "compare", "load", "sweep", "__version__"]
