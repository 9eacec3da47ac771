"""Read one discovered :class:`Source` into a Trace and attach its provenance to the rows.

:func:`read_source` dispatches on the source kind to the format readers (rocprofv3 CSV group,
JSON, rocpd, PyTorch trace, our parquet tables). Readers are looked up through
``importlib.import_module`` at call time, so tests can substitute a reader module in
``sys.modules``. A rocprofv3 process that recorded no GPU work (the launcher) is None with a
note, not an error; a torch trace with no GPU kernels is read as CPU operators, with a note,
unless it holds device activity in other categories (profiler ranges, device annotations,
runtime calls): that is an error, never a CPU analysis.

:func:`read_attached` adds the path provenance (point, run, pass, rank, host, pid) to the
dispatch, counter and agent tables: a value the file itself records wins over the path's (a
differing rank is a note); our own tables already carry theirs. It is picklable, so a worker
process can run it (``traces/parallel.py``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces.provenance import Source, csv_role
from pytest_gemmperf.traces.schema import (AGENT_SCHEMA, COUNTER_SCHEMA, Trace, empty,
                                           finalize_agents, finalize_counters,
                                           finalize_dispatches, set_columns)
from pytest_gemmperf.traces import torch_trace


def read_source(src: Source, notes: list[str] | None = None) -> Trace | None:
    """Read one source; None (with a note) for a rocprofv3 process that recorded no GPU work."""
    notes = notes if notes is not None else []
    f = src.files[0]
    try:
        if src.kind == "torch":
            try:
                return torch_trace.read_torch_trace(f)
            except GemmperfInputError as exc:
                if "no GPU kernel" not in exc.message:
                    raise
                # a CPU-only run (the CPU example of perf_tests): operators stand in for kernels
                notes.append(f"{f}: no GPU events; reading CPU operators as dispatches")
                return torch_trace.read_torch_cpu_trace(f)
        if src.kind == "rocprof-json":
            return _reader("rocprof_json").read_rocprof_json(f)
        if src.kind == "rocpd":
            return _reader("rocpd").read_rocpd_db(f)
        if src.kind == "rocprof-csv":
            return _read_csv_group(src)
        if src.kind == "tables":
            return _read_tables(src)
    except GemmperfInputError as exc:
        if src.kind != "torch" and src.kind != "tables" and _is_no_dispatch_error(exc):
            notes.append(f"{f}: {exc.message}; skipped (a process without GPU work, e.g. the launcher)")
            return None
        raise
    except OSError as exc:
        raise GemmperfInputError(f, f"cannot read file: {exc.strerror or exc}") from None
    raise GemmperfInputError(f, f"unknown source kind {src.kind!r}")


def _reader(name: str):
    # import_module consults sys.modules first, so tests can substitute a reader module
    return importlib.import_module(f"pytest_gemmperf.traces.{name}")


def _is_no_dispatch_error(exc: GemmperfInputError) -> bool:
    msg = exc.message.lower()
    return "no kernel dispatch" in msg or "no dispatches" in msg


def _read_csv_group(src: Source) -> Trace:
    rocprof_csv = _reader("rocprof_csv")
    roles = {role[0]: f for f in src.files if (role := csv_role(f.name)) is not None}
    agents = None
    if "agent_info" in roles:
        agents = _agents_of(rocprof_csv.read_agent_info_csv(roles["agent_info"]), roles["agent_info"])
    meta: dict[str, Any] = {}
    if "kernel_trace" in roles:
        kt = rocprof_csv.read_kernel_trace_csv(roles["kernel_trace"], agents=agents)
        dispatches = (kt.dispatches if isinstance(kt, Trace)
                      else finalize_dispatches(kt, str(roles["kernel_trace"])))
        if isinstance(kt, Trace):
            meta.update(kt.meta)
    else:
        dispatches = finalize_dispatches(pd.DataFrame({"start_ns": [], "end_ns": [], "kernel": []}),
                                         None, allow_empty=True)
    counters = empty(COUNTER_SCHEMA)
    counter_notes: list[str] = []
    if "counter_collection" in roles:
        cc = rocprof_csv.read_counter_collection_csv(roles["counter_collection"], agents=agents)
        counter_notes = list(cc.attrs.get("notes", [])) if isinstance(cc, pd.DataFrame) else []
        counters = (cc.counters if isinstance(cc, Trace)
                    else finalize_counters(cc, str(roles["counter_collection"])))
        if isinstance(cc, Trace):
            meta.setdefault("counter_meta", cc.meta)
    agents_df = agents if agents is not None else empty(AGENT_SCHEMA)
    # reader notes (e.g. columns a newer rocprofv3 added that were ignored), once each
    notes = [n for part in (agents_df.attrs.get("notes", []), meta.get("notes", []),
                            counter_notes) for n in part]
    if notes:
        meta["notes"] = list(dict.fromkeys(notes))
    return Trace(dispatches=dispatches, counters=counters, agents=agents_df,
                 files=[str(f) for f in src.files], meta=meta)


def _agents_of(result: Any, path: Path) -> pd.DataFrame:
    if isinstance(result, Trace):
        return result.agents
    if isinstance(result, pd.DataFrame):
        return result
    raise GemmperfInputError(path, "agent_info reader returned an unexpected object")


def _read_tables(src: Source) -> Trace:
    by_name = {f.name: f for f in src.files}

    def read(name: str) -> pd.DataFrame | None:
        f = by_name.get(name)
        if f is None:
            return None
        try:
            return pd.read_parquet(f)
        except (OSError, ValueError) as exc:  # pyarrow errors derive from these
            raise GemmperfInputError(f, f"cannot read parquet table: {exc}") from None

    d = read("dispatches.parquet")
    path = str(by_name.get("dispatches.parquet", src.files[0]))
    dispatches = finalize_dispatches(d, path)
    c = read("counters.parquet")
    a = read("agents.parquet")
    counters = (finalize_counters(c, str(by_name["counters.parquet"])) if c is not None
                else empty(COUNTER_SCHEMA))
    agents = finalize_agents(a, str(by_name["agents.parquet"])) if a is not None else empty(AGENT_SCHEMA)
    return Trace(dispatches=dispatches, counters=counters, agents=agents,
                 files=[str(f) for f in src.files], meta={"format": "tables"})


# --------------------------------------------------------------------------- provenance columns

def read_attached(src: Source, point: str | None) -> tuple[Trace | None, list[str], list[str]]:
    """One source read with its provenance attached: (trace or None, the reader's notes, the
    notes of attaching path information). Picklable, so a worker process can run it
    (``traces/parallel.py``)."""
    notes: list[str] = []
    t = read_source(src, notes)
    if t is None:
        return None, notes, []
    attach: list[str] = []
    t.dispatches = _attach(t.dispatches, src, point, attach)
    t.counters = _attach(t.counters, src, point, attach)
    t.agents = _attach_agents(t.agents, src)
    t.meta = {**t.meta, "source": src.describe()}
    return t, notes, attach


def _attach(df: pd.DataFrame, src: Source, point: str | None, notes: list[str]) -> pd.DataFrame:
    if len(df) == 0:
        return df
    values: dict[str, Any] = {}
    if point is not None:
        values["point"] = point
    if src.kind != "tables":  # our tables already carry their provenance
        if point is None and src.point is not None:
            values["point"] = src.point
        if src.run is not None:
            values["run"] = src.run
        if src.pass_ is not None:
            values["pass"] = src.pass_
        for col, val in (("rank", src.rank), ("host", src.host), ("pid", src.pid)):
            if val is None or col not in df.columns:
                continue
            have = df[col].dropna()
            if have.empty:
                values[col] = val
            elif col == "rank" and (have != val).any():
                notes.append(f"{src.files[0]}: rank {val} from the path differs from the rank "
                             f"recorded in the file ({sorted(set(have.astype(int)))}); kept the file's")
    elif point is None and src.point is not None and df["point"].isna().all():
        values["point"] = src.point
    return set_columns(df, **values) if values else df


def _attach_agents(df: pd.DataFrame, src: Source) -> pd.DataFrame:
    values = {col: val for col, val in (("host", src.host), ("pid", src.pid))
              if val is not None and len(df) and df[col].isna().all()}
    return set_columns(df, **values) if values else df
