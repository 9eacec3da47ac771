"""One-line errors: bad input (:class:`GemmperfInputError`) and a write the machine refused
(:class:`OutputError`: disk full, read-only, no permission), so every entry point can print one
line and exit 2 instead of a traceback."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
from typing import Iterator


class GemmperfInputError(Exception):
    """Unreadable or invalid input. ``str()`` is the one-line message shown to users."""

    def __init__(self, path: str | os.PathLike | None, message: str, *, line: int | None = None,
                 record: str | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        self.message = message
        self.line = line
        self.record = record
        super().__init__(self._format())

    def _format(self) -> str:
        where = self.path or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        if self.record is not None:
            where += f" ({self.record})"
        return f"{where}: {self.message}".replace("\n", " ")


#: errno values of a write the machine refused rather than a bug of ours: full disk or quota,
#: read-only or unwritable file system, failing device, file too large
FAULT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                          errno.EIO, errno.EFBIG})


class OutputError(OSError):
    """Something gemmperf had to write could not be written (disk full, read-only store, ...).

    ``str()`` is the one-line message shown to users: the path, the system's reason and what
    became of the data (``kept``, e.g. "the previous record is kept"). An ``OSError`` still, so
    callers that already tolerate a failed write (best-effort outputs) keep doing so."""

    def __init__(self, path: str | os.PathLike | None, reason: str, *, what: str = "",
                 kept: str = "", errno_: int | None = None) -> None:
        super().__init__(errno_, reason, None if path is None else os.fspath(path))
        self.path = self.filename
        self.reason = reason
        self.what = what
        self.kept = kept

    def __str__(self) -> str:
        what = f"{self.what} " if self.what else ""
        where = self.path if self.path is not None else "<output>"
        kept = f" ({self.kept})" if self.kept else ""
        return f"could not write {what}{where}: {self.reason}{kept}".replace("\n", " ")


def oserror_reason(exc: BaseException) -> str:
    """The system's reason for ``exc`` in words ("No space left on device"), on one line."""
    if isinstance(exc, OutputError):
        return exc.reason
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return (str(exc) or type(exc).__name__).replace("\n", " ")


def output_error(exc: OSError, path: str | os.PathLike | None = None, *, what: str = "",
                 kept: str = "") -> OutputError:
    """``exc`` as an :class:`OutputError`; the path the system named wins over ``path`` (the
    file being written when the failing call, ``write(2)`` on a descriptor, names none). An
    ``OutputError`` keeps its own path and gains ``what``/``kept`` only where it has none."""
    if isinstance(exc, OutputError):
        if (what and not exc.what) or (kept and not exc.kept):
            return OutputError(exc.path, exc.reason, what=exc.what or what, kept=exc.kept or kept,
                               errno_=exc.errno)
        return exc
    # rename(2) names its source first; the destination is the file the user asked for
    named = exc.filename2 if exc.filename2 is not None else exc.filename
    if isinstance(named, bytes):
        named = os.fsdecode(named)
    if not isinstance(named, (str, os.PathLike)):
        named = None
    where = _untemp(named) if named is not None else (None if path is None else os.fspath(path))
    return OutputError(where, oserror_reason(exc), what=what, kept=kept, errno_=exc.errno)


@functools.cache
def _temp_name() -> re.Pattern[str]:
    """The private temporary names our atomic writers use (``.NAME.<random>.tmp``); compiled
    when an error first needs it (module constants cost every command's start-up)."""
    return re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9_]+\.tmp")


def _untemp(path: str | os.PathLike) -> str:
    """The file a temporary name stands for: users know ``meta.json``, not ``.meta.json.x1.tmp``."""
    head, tail = os.path.split(os.fspath(path))
    m = _temp_name().fullmatch(tail)
    return os.path.join(head, m["name"]) if m else os.fspath(path)


def failure_line(exc: BaseException) -> str:
    """What a user is told when an optional output (a report) could not be made: the one line
    of a write the machine refused or of bad input, with no class name of ours; any other
    exception (a bug) keeps its type, which is what a bug report needs."""
    if isinstance(exc, OSError):
        return str(output_error(exc))
    if isinstance(exc, GemmperfInputError):
        return str(exc)
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}".rstrip(": ")


@contextlib.contextmanager
def writing(path: str | os.PathLike | None, *, what: str = "", kept: str = "") -> Iterator[None]:
    """Turn an ``OSError`` raised while writing ``path`` into a one-line :class:`OutputError`."""
    try:
        yield
    except OSError as exc:
        raise output_error(exc, path, what=what, kept=kept) from exc
