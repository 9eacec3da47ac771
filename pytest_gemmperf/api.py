"""The notebook API: ``gemmperf analyze`` and ``gemmperf compare`` as Python calls returning
DataFrames.

>>> import pytest_gemmperf as gp
>>> a = gp.load("traces/")                   # what `gemmperf analyze traces/` reads
>>> a.kernels.head()                         # the rows and numbers of its kernels.csv
>>> c = gp.compare("baselines", ".gemmperf/results", threshold="5%")
>>> c.passed, c.verdicts                     # `gemmperf compare` would not exit 1; verdicts.csv
>>> c.report("out/")                         # what the command writes

Each call is the command's own work (``commands/analyze_impl.py``, ``commands/compare_impl.py``)
on arguments built by the command's parser, with the project's settings resolved from the
working directory as the command resolves them: the same rows, numbers and errors (one
:class:`~pytest_gemmperf.errors.GemmperfInputError` naming the file). pytest is never imported.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from html import escape
from pathlib import Path
from typing import Any, Union

import pandas as pd

from pytest_gemmperf.cli import _project_settings, build_parser
from pytest_gemmperf.commands import analyze_impl, compare_impl
from pytest_gemmperf.config import SettingError
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.gate.headline import headline, sort_rows
from pytest_gemmperf.gate.verdict import verdicts_csv_order
from pytest_gemmperf.jsonsafe import clean
from pytest_gemmperf.numbers import tidy_frame

PathArg = Union[str, "os.PathLike[str]"]

#: rows a notebook shows of a table before "... N more"
SHOWN_ROWS = 20


def _argv_paths(paths: PathArg | Sequence[PathArg]) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    out = [os.fspath(p) for p in paths]
    if not out:
        raise SettingError("no input path given")
    return out


def _parse(argv: list[str]) -> argparse.Namespace:
    """The command's arguments as its parser reads ``argv``, the project's settings resolved
    from the working directory (as ``gemmperf`` resolves them); a usage mistake raises
    :class:`SettingError` with argparse's message instead of exiting."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser().parse_args(argv)
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        raise SettingError(lines[-1] if lines else f"bad arguments: {argv}") from None
    args.argv = list(argv)
    args.setting_origins = _project_settings(args)
    return args


def _option(flag: str, value: Any) -> list[str]:
    return [] if value is None else [flag, str(value)]


def _empty_as_none(df: pd.DataFrame | None) -> pd.DataFrame | None:
    return df if df is not None and len(df) else None


def _table_html(df: pd.DataFrame, title: str) -> str:
    """``df``'s first rows as an HTML table (cells escaped), titled, with how many more."""
    more = len(df) - SHOWN_ROWS
    html = df.head(SHOWN_ROWS).to_html(index=False, escape=True, na_rep="-")
    tail = f"<p>... {more} more rows</p>" if more > 0 else ""
    return f"<p><b>{escape(title)}</b></p>{html}{tail}"


@dataclass
class Analysis:
    """What ``gemmperf analyze`` computes for its inputs, as DataFrames."""

    #: kernels.csv: one row per (point, rank, kernel) (``source`` first when profilers mix), its
    #: numbers as the file holds them (nanoseconds as integers)
    kernels: pd.DataFrame
    #: summary.json's content as the file holds it (inputs, sources, notes, dispatch counts, per point/rank totals)
    summary: dict
    #: every dispatch read (the canonical table, categories as analyze assigns them)
    dispatches: pd.DataFrame
    #: hardware counters per dispatch; None where the inputs hold none
    counters: pd.DataFrame | None
    #: the agents (GPUs, CPUs) the inputs describe
    agents: pd.DataFrame
    _args: argparse.Namespace = field(repr=False)
    _result: analyze_impl.Analyzed = field(repr=False)

    @cached_property
    def _report_data(self) -> Any:
        # lazy: the report layer (matplotlib-free, but scipy) only when a derived table is asked for
        from pytest_gemmperf.report import build_report_data

        return build_report_data(self.dispatches, counters=self.counters, agents=self.agents,
                                 meta={"inputs": list(self._args.paths)}, warmup=self._args.warmup)

    @property
    def overlap(self) -> pd.DataFrame | None:
        """GEMM ∩ collective overlap per point (the report's table); None without collectives."""
        return _empty_as_none(self._report_data.overlap)

    @property
    def collectives(self) -> pd.DataFrame | None:
        """Per (point, collective, size bucket) over matched collectives; None where the inputs
        hold no collective metadata."""
        return _empty_as_none(self._report_data.collectives)

    @property
    def timeline(self) -> pd.DataFrame | None:
        """Busy / idle / computation / exposed communication per point and rank."""
        return _empty_as_none(self._report_data.timeline)

    @property
    def notes(self) -> list[str]:
        """What the readers noted about the inputs (also printed by the command)."""
        return list(self.summary.get("notes", []))

    def report(self, out: PathArg | None = None) -> Path:
        """Write what ``gemmperf analyze`` writes (kernels.csv, summary.json, report.html,
        report.xlsx, summary.md, variance CSVs) into ``out`` (default: a new
        ``.gemmperf/analyze/<time>-<random>``); returns the directory."""
        with analyze_impl.input_errors():
            return analyze_impl.write_outputs(self._args, self._result, Path(out) if out is not None else None,
                                              report=True)

    def _repr_html_(self) -> str:
        n = self.summary.get("n_dispatches", 0)
        return _table_html(self.kernels, f"gemmperf analyze: {n} dispatches, {len(self.kernels)} kernel rows")


def load(paths: PathArg | Sequence[PathArg], *, warmup: int | None = None, categories: PathArg | None = None,
         jobs: int | str | None = None, allow_partial: bool = False) -> Analysis:
    """Read what ``gemmperf analyze PATH...`` reads (trace files, rocprofv3 output directories,
    aorta sweeps, results directories) and compute its tables. Arguments as the command's
    flags (``--warmup``, ``--categories``, ``--jobs``, ``--allow-partial``); the project's
    settings fill what is not given."""
    argv = ["analyze", *_argv_paths(paths), *_option("--warmup", warmup), *_option("--jobs", jobs)]
    argv += _option("--categories", os.fspath(categories) if categories is not None else None)
    argv += ["--allow-partial"] if allow_partial else []
    args = _parse(argv)
    with analyze_impl.input_errors():
        result = analyze_impl.analyze(args, full=True)
    trace = result.trace
    assert trace is not None and result.dispatches is not None  # full=True reads every dispatch
    return Analysis(kernels=tidy_frame(result.kernels), summary=clean(result.summary), dispatches=result.dispatches,
                    counters=_empty_as_none(trace.counters), agents=trace.agents, _args=args, _result=result)


@dataclass
class Comparison:
    """What ``gemmperf compare`` decides, as DataFrames."""

    #: verdicts.csv: one row per (test, point, kernel, metric), its columns in the file's order
    verdicts: pd.DataFrame
    #: the command would not exit 1: no verdict is a regression
    passed: bool
    #: the exit status the command would end with (0, 1 regression, 2 damaged baseline records)
    exit_status: int
    #: the threshold used where a test recorded no rule of its own, and the line saying so
    threshold: float
    threshold_line: str
    _args: argparse.Namespace = field(repr=False)
    _gated: compare_impl.Gated = field(repr=False)

    def report(self, out: PathArg | None = None) -> Path:
        """Write what ``gemmperf compare`` writes (verdicts.csv, and for trace inputs report.html,
        report.xlsx, summary.md) into ``out`` (default: a new ``.gemmperf/compare/<time>-<random>``);
        returns the directory."""
        with compare_impl.input_errors():
            where, unwritten = compare_impl.write_outputs(self._args, self._gated,
                                                          Path(out) if out is not None else None, report=True)
        if unwritten:
            raise GemmperfInputError(where, f"report not written: {unwritten}")
        return where

    def headline(self) -> pd.DataFrame:
        """The headline table every output shows, worst first: verdict, point, kernel, metric,
        change [95% CI], q, reason."""
        rows = []
        for r in sort_rows(self._gated.verdicts).to_dict("records"):
            h = headline(r)
            q = pd.to_numeric(r.get("q_value"), errors="coerce")
            rows.append({"verdict": h.verdict, "test": r.get("test", ""), "point": r.get("point", ""),
                         "kernel": r.get("kernel", ""), "metric": r.get("metric", ""),
                         "change [95% CI]": h.change, "q": "-" if pd.isna(q) else f"{q:.2g}",
                         "reason": h.reason})
        return pd.DataFrame(rows, columns=["verdict", "test", "point", "kernel", "metric", "change [95% CI]",
                                           "q", "reason"])

    def _repr_html_(self) -> str:
        counts = self.verdicts["verdict"].value_counts()
        title = ("passed" if self.passed else "failed") + ": " + ", ".join(f"{k} {int(n)}" for k, n in counts.items())
        return _table_html(self.headline(), f"gemmperf compare {title}; {self.threshold_line}")


def compare(baseline: PathArg, candidate: PathArg | Sequence[PathArg], *, threshold: float | str | None = None,
            labels: Sequence[str] | None = None, fdr: float | None = None, warmup: int | None = None,
            abs_floor_ns: float | None = None, kernel_thresholds: Sequence[tuple[str, float | str]] = (),
            hw: str | None = None, jobs: int | str | None = None, allow_partial: bool = False) -> Comparison:
    """``gemmperf compare BASELINE CANDIDATE...``: ``baseline`` a baselines store, results
    directory, traces or a samples file; ``candidate`` one input or several. ``threshold``
    (``0.05`` or ``"5%"``) given applies to every test, as ``--threshold`` does; else each test's
    recorded rule, the project's ``gemmperf_threshold``, else 5 %. Other arguments as the
    command's flags."""
    argv = ["compare", os.fspath(baseline), *_argv_paths(candidate), *_option("--threshold", threshold)]
    argv += ["--labels", *labels] if labels else []
    argv += _option("--fdr", fdr) + _option("--warmup", warmup) + _option("--abs-floor-ns", abs_floor_ns)
    for regex, t in kernel_thresholds:
        argv += ["--kernel-threshold", regex, str(t)]
    argv += _option("--hw", hw) + _option("--jobs", jobs) + (["--allow-partial"] if allow_partial else [])
    args = _parse(argv)
    with compare_impl.input_errors():
        g = compare_impl.gate(args)
    status = compare_impl.exit_status(g.verdicts, len(g.damaged), compare_impl.undecided_policy(args))
    return Comparison(verdicts=tidy_frame(verdicts_csv_order(g.verdicts)), passed=status != 1, exit_status=status,
                      threshold=g.threshold, threshold_line=compare_impl.threshold_line(g.used, g.threshold,
                                                                                      g.origin.text),
                      _args=args, _gated=g)


__all__ = ["Analysis", "Comparison", "compare", "load"]
