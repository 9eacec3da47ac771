"""The pytest glue: everything that ties gemmperf to a pytest session, one module per idea.

``hooks.py`` holds the hooks and fixtures (``pytest_gemmperf/plugin.py`` exposes them as the
``pytest11`` entry point); the other modules are what they wire: the options, the per-session
object, the per-point runner and its gate step, confirmation re-runs, ``--gemmperf-shard``,
progress lines, the benchmark-JSON export, the run history and the terminal summary. Nothing
below this package imports it.
"""
