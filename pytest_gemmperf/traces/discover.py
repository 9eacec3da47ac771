"""Find profiler outputs under a path and load them into one Trace: the public entry of the
traces layer (``load``, ``load_counters``, ``discover``).

Understood inputs:

* a single file: rocprofv3 ``*_kernel_trace.csv`` / ``*_counter_collection.csv`` /
  ``*_agent_info.csv``, ``*_results.json[.gz]``, ``*_results.db``, a PyTorch (Kineto) trace
  ``*.json[.gz]``, or one of our ``dispatches.parquet`` tables. JSON is classified by content
  (top-level keys), never only by name;
* a rocprofv3 output directory: ``<host>/<pid>_*`` (6.3+), ``<pid>_*`` (6.2), ``pass_N/`` and
  ``pmc_N/`` sub-directories, our runner's ``rank<R>_<pid>_*`` prefixes;
* an aorta sweep: ``<T>thread/nccl_<C>channels/{rocprof_traces,torch_profiler/rank<R>}`` ->
  point ``ch<C>-th<T>``;
* our results directory (docs/ARCHITECTURE.md "Results layout"): a point directory holding
  ``dispatches.parquet`` is read from its tables and its ``run<k>/raw`` files are not re-read.

The work is split by job:

* ``traces/kinds.py``: the source-kind registry, what each input format is and how it is read;
* ``traces/sources.py``: the walk, path -> :class:`Source` list + notes (hostile and unrelated
  trees: every skipped entry is a note, ``gemmperf analyze`` prints them as ``note:`` lines, and
  a typed record, ``meta["skipped"]``);
* ``traces/provenance.py``: :class:`Source` and the point/rank/pass/run/host/pid that explicit
  path information and ``point.json`` give it (rank is never inferred from file order);
* ``traces/source_reader.py``: one Source -> Trace with its provenance columns
  (:func:`read_attached`, which worker processes run);
* this module: several paths -> sources (each set of files read once) -> one Trace, in input
  order whatever ``jobs`` is.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.provenance import Source
from pytest_gemmperf.traces.schema import (AGENT_SCHEMA, COUNTER_SCHEMA, DISPATCH_SCHEMA,
                                           Trace, concat_tables)
from pytest_gemmperf.traces.skipped import SkippedInput
from pytest_gemmperf.traces.source_reader import read_attached, read_source
from pytest_gemmperf.traces.sources import discover_inputs, discover_with_notes, sniff_json
from pytest_gemmperf.traces.parallel import map_ordered, pool_jobs

__all__ = ["Found", "SkippedInput", "Source", "concat_with_extras", "discover", "discover_all",
           "discover_with_notes", "load", "load_counters", "merge_notes", "no_dispatches", "read_attached",
           "read_source", "sniff_json"]


def discover(path: str | os.PathLike) -> list[Source]:
    """Sources under ``path`` (a file or a directory), with provenance attached."""
    return discover_with_notes(path)[0]


def _as_path_list(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    return [Path(p) for p in paths]


def concat_with_extras(frames: list[pd.DataFrame], schema: dict[str, str]) -> pd.DataFrame:
    """concat_tables with the canonical columns first and reader-specific extras (e.g. torch
    ``op_name``) after them, even when only some frames have them."""
    frames = [f for f in frames if f is not None and len(f.columns)]
    out = concat_tables(frames, schema)
    return out[[c for c in schema if c in out.columns] + [c for c in out.columns if c not in schema]]


@dataclass
class Found:
    """Discovery of several paths: what :func:`discover_all` returns."""

    roots: list[Path]
    sources: list[Source]          # every source found
    unique: list[Source]           # the sources to read: each set of files once
    notes: list[str]
    skipped: list[SkippedInput]    # what was not read, and why (``traces/skipped.py``)


def discover_all(paths) -> Found:
    """Every source under ``paths``, the ones to read, and what was skipped."""
    roots = _as_path_list(paths)
    if not roots:
        raise GemmperfInputError(None, "no input paths given")
    sources: list[Source] = []
    notes: list[str] = []
    skipped: list[SkippedInput] = []
    for r in roots:
        found = discover_inputs(r)
        sources += found.sources
        notes += found.notes
        skipped += found.skipped
    unique: list[Source] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for src in sources:
        key = (src.kind, tuple(sorted(str(f) for f in src.files)))
        if key in seen:  # e.g. dispatches/counters/agents.parquet of one point named separately
            continue
        seen.add(key)
        unique.append(src)
    return Found(roots, sources, unique, notes, skipped)


def merge_notes(notes: list[str], trace_notes: list[str] | None, read_notes: list[str],
                attach_notes: list[str]) -> None:
    """Add one source's notes to ``notes`` in the order the serial reader wrote them;
    ``trace_notes`` is the read Trace's ``meta["notes"]`` (None: the reader returned nothing)."""
    notes += read_notes
    if trace_notes is not None:
        notes.extend(n for n in trace_notes if n not in notes)
        notes += attach_notes


def no_dispatches(found: Found) -> GemmperfInputError:
    """The one-line error for inputs that hold no kernel dispatch, naming what was skipped."""
    label = ", ".join(str(r) for r in found.roots)
    notes = found.notes
    return GemmperfInputError(found.roots[0], f"no kernel dispatches found under {label}"
                              + (f" ({'; '.join(notes)})" if notes else ""))


def _load_all(paths, point: str | None, jobs: int | None = 1) -> tuple[Found, list[Trace]]:
    found = discover_all(paths)
    n_jobs = pool_jobs(jobs, [f for s in found.unique for f in s.files])
    traces: list[Trace] = []
    for t, read_notes, attach_notes in map_ordered(functools.partial(read_attached, point=point),
                                                   found.unique, n_jobs):
        merge_notes(found.notes, None if t is None else t.meta.get("notes", []), read_notes, attach_notes)
        if t is not None:
            traces.append(t)
    return found, traces


def load(paths: str | os.PathLike | Iterable[str | os.PathLike], *, point: str | None = None,
         jobs: int | None = 1) -> Trace:
    """Discover and read everything under ``paths`` into one Trace.

    ``point`` overrides the point of every row (replay of a directory onto a declared point).
    ``jobs``: worker processes reading sources at once (None or 0: every usable core; 1: in
    this process); the Trace is the same whatever ``jobs`` is (``traces/parallel.py``).
    ``meta``: ``sources`` (what was read, with provenance), ``notes`` (what was skipped and why),
    ``skipped`` (the same skips of discovery as :class:`SkippedInput` records), ``files``
    (per-file reader meta, e.g. torch ``cpu_ops``/``steps``).
    """
    found, traces = _load_all(paths, point, jobs)
    if not any(len(t.dispatches) for t in traces):
        raise no_dispatches(found)
    return combine_traces(traces, found)


def load_counters(paths: str | os.PathLike | Iterable[str | os.PathLike], *,
                  point: str | None = None) -> pd.DataFrame:
    """Counter records of every source under ``paths`` (all ``pass_N``/``pmc_N`` directories
    together; the ``pass`` column tells them apart)."""
    found, traces = _load_all(paths, point)
    counters = concat_with_extras([t.counters for t in traces if len(t.counters)], COUNTER_SCHEMA)
    if len(counters) == 0:
        raise GemmperfInputError(found.roots[0], f"no counter records found under "
                                                 f"{', '.join(str(r) for r in found.roots)}")
    return counters


def combine_traces(traces: list[Trace], found: Found) -> Trace:
    """The Trace :func:`load` gives of ``found`` from its sources' reads (``read_attached``, in
    input order, the readers' notes already merged into ``found.notes``)."""
    dispatches = concat_with_extras([t.dispatches for t in traces if len(t.dispatches)],
                                    DISPATCH_SCHEMA)
    counters = concat_with_extras([t.counters for t in traces if len(t.counters)], COUNTER_SCHEMA)
    agents = concat_with_extras([t.agents for t in traces if len(t.agents)], AGENT_SCHEMA)
    files: list[str] = []
    per_file: dict[str, dict] = {}
    for t in traces:
        files += [str(f) for f in t.files]
        per_file[str(t.files[0]) if t.files else str(len(per_file))] = t.meta
    meta = {"sources": [s.describe() for s in found.sources], "notes": found.notes,
            "skipped": found.skipped, "files": per_file}
    return Trace(dispatches=dispatches, counters=counters, agents=agents, files=files, meta=meta)
