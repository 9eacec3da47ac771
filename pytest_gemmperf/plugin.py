"""The ``pytest11`` entry point (``pytest_gemmperf.plugin``, pyproject.toml; the repository's
``conftest.py`` loads it the same way from an uninstalled checkout).

Kept as its own thin module because installed environments, ``-p pytest_gemmperf.plugin`` in
CI scripts and ``pytest_plugins`` lists name this path: pytest registers whatever module that
name points at, collecting the hooks and fixtures from its attributes. The glue itself lives in
``pytest_gemmperf/pytest_glue/`` (``hooks.py`` and the modules it wires); this module only
exposes those hooks and fixtures under the old name. Exposed by name, not ``*``, so pytest sees
exactly the plugin's hooks and nothing it would take for a misspelt one.
"""

from __future__ import annotations

from pytest_gemmperf.pytest_glue.hooks import (gemmperf, gemmperf_point, gemmperf_results,
                                               gemmperf_session, pytest_addoption,
                                               pytest_collection_modifyitems, pytest_configure,
                                               pytest_load_initial_conftests,
                                               pytest_generate_tests, pytest_report_header,
                                               pytest_report_teststatus, pytest_runtest_makereport)

__all__ = ["gemmperf", "gemmperf_point", "gemmperf_results", "gemmperf_session", "pytest_addoption",
           "pytest_collection_modifyitems", "pytest_configure", "pytest_generate_tests", "pytest_load_initial_conftests",
           "pytest_report_header", "pytest_report_teststatus", "pytest_runtest_makereport"]
