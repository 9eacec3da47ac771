"""Run history: every gated run's values over time (``docs/history.md``).

``values.py`` reduces a gate samples table to one value per (test, point, kernel, metric, unit);
``store.py`` keeps them in an append-only Parquet dataset (local directory or fsspec URL);
``changepoints.py`` finds level shifts in the series; ``pytest_glue/history.py`` wires the plugin.
"""
