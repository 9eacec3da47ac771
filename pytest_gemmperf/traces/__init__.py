"""Readers: every profiler output format -> canonical tables (see schema.py)."""
