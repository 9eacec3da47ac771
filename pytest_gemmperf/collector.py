"""The cyclic garbage collector paused for a block of work that makes many long-lived objects.

Python's collector runs after every few hundred net allocations and, every tenth and hundredth
time, walks every tracked object the process holds. Importing a command's work (pandas, numpy,
pyarrow and the readers: tens of thousands of functions, classes and dicts) and decoding a
trace (millions of events, no cycles) both allocate in long bursts that leave no garbage
cycles behind, so those walks are pure cost there (docs/performance.md has the measurements).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block; on again afterwards only if it was on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

