"""What discovery skipped and why, as typed records beside the printed notes.

Every input the walk does not read is a ``note:`` line for the user (``traces/sources.py``,
``traces/dirscan.py``). Programs that must act on a skip (``gemmperf compare`` refuses a
comparison that lost part of its input) read :class:`SkippedInput` records instead of the
wording of those lines: a path that happens to contain the words of a note is then never taken
for a lost input, and rewording a note changes no decision.

:attr:`SkippedInput.lost` says whether the skipped entry may have held processes that are now
missing without a trace: a directory that cannot be listed, a link that cannot be followed, a
FIFO/socket/device named like a profiler output, a file that cannot be opened. The other skips
lose nothing silently: a directory reached again through a symlink was read once already, a
rocprofv3 output written in two formats is read in one, a process with only an
``agent_info.csv`` recorded no GPU work, and a results point whose status says it did not
complete is missing from the comparison as a whole point, which the verdicts name.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.textsafe import printable


class SkipReason(Enum):
    """Why discovery did not read an entry."""

    UNLISTABLE = "unlistable directory"
    DANGLING_LINK = "dangling link"          # a missing target, a loop, an entry that cannot be stat'ed
    SPECIAL_FILE = "fifo"                    # a FIFO, socket or device named like an output
    UNREADABLE = "unreadable file"           # cannot be opened, and no name marks it as a trace
    REVISITED = "directory reached again"    # a symlink back into the tree
    INTERRUPTED_POINT = "interrupted point"  # a results point that did not complete
    OTHER_FORMAT = "written in another format"  # one rocprofv3 output written twice, read once
    NO_GPU_WORK = "no GPU work"              # a process that wrote only agent_info.csv


#: skips after which processes may be missing from what was read, unnoticed
LOST_REASONS = frozenset({SkipReason.UNLISTABLE, SkipReason.DANGLING_LINK, SkipReason.SPECIAL_FILE,
                          SkipReason.UNREADABLE})


@dataclass(frozen=True)
class SkippedInput:
    """One entry discovery did not read: its path, why, and the note line printed for it."""

    path: str
    reason: SkipReason
    note: str

    @property
    def lost(self) -> bool:
        return self.reason in LOST_REASONS


def skip(notes: list[str], skipped: list[SkippedInput] | None, path: str | os.PathLike,
         reason: SkipReason, note: str) -> None:
    """Record a skip: ``note`` for the user, the typed record for programs (when collected)."""
    notes.append(note)
    if skipped is not None:
        skipped.append(SkippedInput(os.fspath(path), reason, note))


def check_lost_inputs(p: Path | str, skipped: list[SkippedInput], allow_partial: bool,
                      use: str = "compare", result: str = "the comparison") -> None:
    """One line when part of the input could not be read (discovery's ``SkippedInput`` records
    that are ``lost``: a directory it cannot list, a link it cannot follow, an unreadable file,
    a FIFO named like a trace): the processes in it would be missing from ``result`` (the
    comparison, which could then pass on what is left; an analysis, whose totals would be
    short), unless ``allow_partial``."""
    lost = [s.note for s in skipped if s.lost]
    if not lost:
        return
    if not allow_partial:
        more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
        raise GemmperfInputError(p, f"part of the input could not be read, its processes would be missing "
                                    f"from {result}: {lost[0]}{more} (--allow-partial: {use} "
                                    "without them)")
    for n in lost:
        print(printable(f"note: {p}: --allow-partial: {use}d without {n}"), file=sys.stderr)
