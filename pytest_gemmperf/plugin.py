"""pytest hooks only: options, ini, markers, fixtures, terminal summary.

The work is done in the layers below (sweep, run, traces, analysis, gate, report).
"""
