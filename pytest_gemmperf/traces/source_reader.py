"""Read one discovered :class:`Source` into a Trace and attach its provenance to the rows.

:func:`read_source` calls the ``read`` of the source's kind (``traces/kinds.py``). A source of
a kind whose empty file means "a process that recorded no GPU work" (the rocprofv3 launcher)
is None with a note when its reader raises
:class:`~pytest_gemmperf.traces.schema.NoDispatches`, not an error: the error's type decides,
never its wording. (A torch trace with no GPU kernels is read as CPU operators by its kind,
with a note, unless it holds device activity in other categories: that is an error, never a
CPU analysis.)

:func:`read_attached` adds the path provenance (point, run, pass, rank, host, pid) to the
dispatch, counter and agent tables: a value the file itself records wins over the path's (a
differing rank is a note); kinds whose rows carry their own (our tables) get none. It is
picklable, so a worker process can run it (``traces/parallel.py``).
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces import kinds
from pytest_gemmperf.traces.coded import CodedDispatches
from pytest_gemmperf.traces.provenance import Source
from pytest_gemmperf.traces.schema import NoDispatches, Trace, set_columns


def read_source(src: Source, notes: list[str] | None = None,
                columns: Sequence[str] | None = None, coded: bool = False) -> Trace | None:
    """Read one source; None (with a note) for a rocprofv3 process that recorded no GPU work.
    ``columns``: the dispatch columns the caller reads (None: all); the dispatches table holds
    those of them the source's table has, read by the kind's ``read_columns`` where it has one.
    ``coded`` (with ``columns``): the dispatches may come as
    :class:`~pytest_gemmperf.traces.coded.CodedDispatches` where the reader keeps them so."""
    notes = notes if notes is not None else []
    f = src.files[0]
    kind = kinds.find(src.kind)
    if kind is None:
        raise GemmperfInputError(f, f"unknown source kind {src.kind!r}")
    try:
        if columns is None:
            return kind.read(src, notes)
        t = (kind.read_columns(src, notes, columns, coded) if kind.read_columns is not None
             else kind.read(src, notes))
        d = t.dispatches
        t.dispatches = (d.select(columns) if isinstance(d, CodedDispatches)
                        else d[[c for c in columns if c in d.columns]])
        return t
    except NoDispatches as exc:
        if not kind.empty_is_launcher:
            raise
        notes.append(f"{f}: {exc.message}; skipped (a process without GPU work, e.g. the launcher)")
        return None
    except OSError as exc:
        raise GemmperfInputError(f, f"cannot read file: {exc.strerror or exc}") from None


# --------------------------------------------------------------------------- provenance columns

def read_attached(src: Source, point: str | None, columns: Sequence[str] | None = None,
                  coded: bool = False) -> tuple[Trace | None, list[str], list[str]]:
    """One source read with its provenance attached: (trace or None, the reader's notes, the
    notes of attaching path information); ``columns`` and ``coded`` as :func:`read_source`'s
    (a note about the rank needs ``rank`` among the columns). Picklable, so a worker process
    can run it (``traces/parallel.py``)."""
    notes: list[str] = []
    t = read_source(src, notes, columns, coded)
    if t is None:
        return None, notes, []
    attach: list[str] = []
    t.dispatches = _attach(t.dispatches, src, point, attach)
    t.counters = _attach(t.counters, src, point, attach)
    t.agents = _attach_agents(t.agents, src)
    t.meta = {**t.meta, "source": src.describe()}
    return t, notes, attach


def _attach(df: pd.DataFrame | CodedDispatches, src: Source, point: str | None,
            notes: list[str]) -> pd.DataFrame | CodedDispatches:
    if isinstance(df, CodedDispatches):  # the columns are the key rows': a constant is theirs
        return df.with_keys(_attach(df.keys, src, point, notes)) if len(df) else df
    if len(df) == 0:
        return df
    values: dict[str, Any] = {}
    if point is not None:
        values["point"] = point
    kind = kinds.find(src.kind)
    if kind is None or not kind.own_provenance:
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
