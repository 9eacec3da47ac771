"""Subcommands of the ``gemmperf`` CLI (one module each)."""
