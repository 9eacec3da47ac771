"""Reading profiler files from disk: one place for gzip detection and read errors."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from pytest_gemmperf.errors import GemmperfInputError


def read_maybe_gzip(path: str) -> bytes:
    """File contents, gunzipped when the file starts with the gzip magic (not by extension:
    profilers and users both rename files)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read file: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise GemmperfInputError(path, f"corrupt or truncated gzip data: {exc}") from None
    return raw
