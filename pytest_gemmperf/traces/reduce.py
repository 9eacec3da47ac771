"""One source read for a reduction in a worker process: the part every per-source reducer shares.

``gemmperf analyze --no-report`` (``analysis/source_totals.py``) and the gate's inputs
(``gate/file_reduce.py``) read each source in a pool worker (``traces/parallel.py``) and send
back only reductions of its dispatches. Both first read the source with its provenance
(:func:`~pytest_gemmperf.traces.source_reader.read_attached`) and keep what the parent merges
as the serial reader would (notes in reading order, dispatch count, agents):
:func:`read_for_reduction` does that once and hands the reducer the dispatches table, which
is the worker's peak memory, with no other reference to it left.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import pandas as pd

from pytest_gemmperf.traces.coded import CodedDispatches
from pytest_gemmperf.traces.discover import merge_notes, read_attached
from pytest_gemmperf.traces.provenance import Source
from pytest_gemmperf.traces.schema import Trace


@dataclass
class SourceRead:
    """What the parent keeps of one source besides its reductions (picklable, small)."""

    read_notes: list[str]
    attach_notes: list[str]
    read: bool = False                     # the reader returned a Trace (not None)
    meta_notes: list[str] = field(default_factory=list)
    n_dispatches: int = 0
    agents: pd.DataFrame | None = None     # the source's agents (None: it lists none)
    n_counters: int = 0                    # counter records beside the dispatches
    #: the whole read (``read_for_reduction(keep=True)``), for a reducer that may find the
    #: reductions cannot stand for the source and hand the tables on instead (None: let go)
    trace: Trace | None = None

    def merge_notes(self, notes: list[str]) -> None:
        """Add this source's notes to ``notes`` in the order the serial reader writes them."""
        merge_notes(notes, self.meta_notes if self.read else None, self.read_notes, self.attach_notes)


def read_for_reduction(src: Source, point: str | None, agent_columns: Sequence[str] | None = None,
                       columns: Sequence[str] | None = None, coded: bool = False, keep: bool = False
                       ) -> tuple[SourceRead, pd.DataFrame | CodedDispatches | None]:
    """Read ``src`` with its provenance: its :class:`SourceRead` (agents cut to
    ``agent_columns`` where given) and its dispatches (those of ``columns`` it has, None: all),
    index reset, or with ``coded`` as :class:`~pytest_gemmperf.traces.coded.CodedDispatches`
    where the reader keeps them so; None when it holds none. ``keep``: the head keeps the
    Trace read (:attr:`SourceRead.trace`, as ``read_attached`` gives it)."""
    t, read_notes, attach_notes = read_attached(src, point, columns, coded)
    head = SourceRead(read_notes=read_notes, attach_notes=attach_notes)
    if t is None:
        return head, None
    head.read = True
    head.trace = t if keep else None
    head.meta_notes = list(t.meta.get("notes", []))
    head.n_dispatches = len(t.dispatches)
    head.n_counters = len(t.counters) if t.counters is not None else 0
    if t.agents is not None and len(t.agents):
        head.agents = (t.agents if agent_columns is None
                       else t.agents[[c for c in agent_columns if c in t.agents.columns]])
    d = t.dispatches
    if len(d) == 0:
        return head, None
    return head, d if isinstance(d, CodedDispatches) else d.reset_index(drop=True)
