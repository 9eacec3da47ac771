"""The cyclic garbage collector paused for a block of work that makes many long-lived objects.

Python's collector runs after every few hundred net allocations and, every tenth and hundredth
time, walks every tracked object the process holds. Importing a command's work (pandas, numpy,
pyarrow and the readers: tens of thousands of functions, classes and dicts) and decoding a
trace (millions of events, no cycles) both allocate in long bursts that leave no garbage
cycles behind, so those walks are pure cost there (docs/performance.md has the measurements).
The same holds at the end of a process: interpreter shutdown runs full collections over everything
still alive, only to free it module by module right after.
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



def spare_at_exit() -> None:
    """Everything alive now kept out of the collector's passes for the rest of the process.

    For a program about to end (``gemmperf`` run as a command): shutdown's full collections would
    walk every object pandas, pyarrow and numpy made at import (hundreds of thousands) only to have
    module teardown free them anyway; frozen, they are freed by reference count as before, and
    ``atexit`` handlers, ``finally`` blocks and files still run and close as they would. Never
    for an embedding program (a pytest session calling ``cli.main``): what it makes later would
    stay out of the collector's reach."""
    gc.freeze()
