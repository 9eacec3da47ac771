"""What every slim reader shares, whatever its format: packed integer columns and the heap.

The slim readers (``torch_slim``, ``rocprof_slim``, ``csv_slim``, ``rocpd_slim``) keep a few
compact columns per run of rows and give the C heap's free pages back between runs. These
helpers live in a module of their own, importing numpy and the standard library only, so that
reading a CSV or rocpd input loads no JSON decoder (msgspec) and no Kineto reader.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

import numpy as np

#: sentinel for an optional integer field in the int64 matrices of the rocprofv3 JSON reader
#: (``rocprof_json_schema``): handles and ids are never negative
MISSING = -1


def narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative int64 ``values`` in the narrowest of int16, uint32 and int64 that holds
    them (joined with ``np.concatenate``, runs of several types widen to one that holds all)."""
    if len(values) and values.min() >= 0:
        top = values.max()
        for t in (np.int16, np.uint32):
            if top <= np.iinfo(t).max:
                return values.astype(t)
    return values


def join_releasing(arrays: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(arrays)`` (the same dtype and values), each part removed from
    ``arrays`` once copied."""
    out = np.empty(sum(len(a) for a in arrays), dtype=np.result_type(*arrays))
    at = 0
    for i in range(len(arrays)):
        part, arrays[i] = arrays[i], None
        out[at:at + len(part)] = part
        at += len(part)
    return out


def _malloc_trim() -> Callable[[], object]:
    """glibc's ``malloc_trim(0)`` (a no-op where the C library has none)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # no such symbol, or no process handle (Windows)
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


#: Give the C heap's free pages back to the system. A streamed read frees each run's decoded
#: events before the next block, but glibc keeps freed heap pages resident, and once a 4 MiB
#: block has been freed it serves blocks of that size from the heap too (its mmap threshold
#: rises): the small arrays a reader keeps per run then sit between the holes, and the
#: resident set grows with the file (a 1.2 GB trace: 228 MiB peak RSS instead of 214).
#: Called after each run; a trim costs far less than decoding the run.
release_free_memory = _malloc_trim()


def _resident_bytes() -> Callable[[], int | None]:
    """The process's resident set in bytes, read from ``/proc/self/statm`` (None where there is
    no such file: the caller then trims after every run)."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        with open("/proc/self/statm", "rb") as fh:
            fh.read()
    except (OSError, ValueError, AttributeError):
        return lambda: None

    def read() -> int | None:
        try:
            with open("/proc/self/statm", "rb") as fh:
                return int(fh.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            return None
    return read


#: the resident set in bytes (None where it cannot be read)
resident_bytes = _resident_bytes()
