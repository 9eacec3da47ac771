"""One OpenBLAS thread for a ``gemmperf`` command, unless the user chose a count.

NumPy's OpenBLAS starts a pool of threads (one per core, up to its build's limit) the moment
numpy is imported, and every thread costs start-up time and a buffer. A command's work makes no
BLAS call large enough to use a second thread (the gate's least-squares fits have a handful of
columns), so on a two-core runner that pool is a tenth of a small analysis's CPU time, and more
on a many-core CI host (docs/performance.md). OpenBLAS reads its thread count once, when it
loads, so the variable has to be set before numpy is imported, and is taken back afterwards:
a program that calls ``cli.main`` in-process (a pytest session) launches workloads later, and
they must get the user's environment, not this one.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

#: OpenBLAS's own variable, and the two it falls back on; any of them set is the user's choice
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """``OPENBLAS_NUM_THREADS=1`` for the block where numpy is not loaded yet and no thread count
    was set; the environment as it was afterwards."""
    chosen = any(os.environ.get(name) for name in THREAD_VARIABLES)
    if chosen or "numpy" in sys.modules:
        yield
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)
