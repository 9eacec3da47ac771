"""gate layer."""

#: the samples table's columns (ARCHITECTURE.md "Samples table"): what the metric builders
#: write and the gate, the store, the history and the reports read; here so that a reader of
#: samples (the reports' before/after panels) loads none of the builders' inputs
SAMPLE_COLUMNS = ("point", "kernel", "metric", "unit", "value")
