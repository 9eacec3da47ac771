"""One exception type for bad input, so every entry point can print one line and exit 2."""

from __future__ import annotations

import os


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
