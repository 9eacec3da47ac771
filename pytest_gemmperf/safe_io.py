"""The one place where gemmperf writes user-visible output files.

Two promises, both about files that may sit in directories other people can write to (a shared
CI workspace, a report directory uploaded as an artefact):

* **No write follows a link we did not make.** Every file is written to a fresh temporary file
  in the target's own directory (an unpredictable name opened with
  ``O_CREAT | O_EXCL | O_NOFOLLOW``, as ``tempfile.mkstemp`` opens one, so neither a planted
  name nor a planted link is ever opened), flushed, ``fsync``-ed and then ``os.replace``-d
  over the target. ``rename(2)`` replaces a symbolic link standing at the target *itself*
  instead of writing through it, so a planted ``report.html -> ~/.bashrc`` leaves
  ``~/.bashrc`` untouched; readers never see a half-written file either. Append-only logs are
  opened with ``O_NOFOLLOW`` and refused, with one clear line, when a link stands at their name.
* **No CSV cell is a formula.** Spreadsheets evaluate a cell that begins with ``=``, ``+``,
  ``-``, ``@``, TAB or CR (CSV/formula injection). Following OWASP's rule, every *string* cell
  (and header) that begins with one of them gets a leading ``'``, which spreadsheets show as
  text. Numbers stay numbers: numeric columns are never touched, and a string that is just a
  decimal number (``-3.5``, ``+1e5``) is not a formula and is kept as written. Readers of our
  own CSVs undo the prefix with :func:`unneutralise_frame`. The Excel writer needs no prefix: it
  writes text with ``write_string`` into a workbook with ``strings_to_formulas`` off, so text
  cells are never formulas (``report/excel.py``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import re
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterator

from pytest_gemmperf.numbers import tidy_frame

if TYPE_CHECKING:
    import pandas as pd

#: first characters that make a spreadsheet evaluate a cell (OWASP CSV injection)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_FORMULA_RE = r"[=+\-@\t\r]"
#: a plain decimal number is not a formula even when it starts with '-' or '+'
_NUMBER_RE = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_DANGEROUS = re.compile(rf"(?!{_NUMBER_RE}\Z){_FORMULA_RE}")


class UnsafeOutputError(OSError):
    """A path we were asked to write is a symbolic link (append-only files only)."""


@functools.cache
def _prefixed() -> re.Pattern[str]:
    """A cell :func:`neutralise_cell` prefixed, compiled when a table is first read back."""
    return re.compile(rf"'(?!{_NUMBER_RE}\Z){_FORMULA_RE}")


#: how the temporary file is opened: a new name only (``O_EXCL``), never through a link
_TEMP_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
    | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
#: names tried before giving up (each a fresh random one; a clash means someone planted it)
_TEMP_TRIES = 100


def _create_temp(target: Path) -> tuple[int, str]:
    """A new temporary file beside ``target``: its descriptor and name (``mkstemp``'s open, with
    mode 0666 instead of 0600). The kernel then gives it what a plain ``open`` gives, 0666 minus
    the umask in force at this moment (or what a directory's default ACL says), with no umask of
    ours to read (Linux shows it only in /proc: a file read per output) and none to go stale
    when the program changes its umask between two writes."""
    directory = os.path.abspath(target.parent)  # as mkstemp names it (in an error message too)
    for _ in range(_TEMP_TRIES):
        tmp = os.path.join(directory, f".{target.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, _TEMP_FLAGS, 0o666), tmp
        except FileExistsError:  # a planted name or link: the next one
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", str(target))


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", *, encoding: str = "utf-8",
                newline: str | None = None) -> Iterator[IO[Any]]:
    """Write ``path`` through a private temporary file, then rename it into place.

    ``mode`` is ``"w"`` (text) or ``"wb"``. The temporary file is created in the same directory
    (same file system, so the rename is atomic) with the permissions a normal ``open`` would give
    (0666 minus the umask at that moment, :func:`_create_temp`), is ``fsync``-ed, and replaces
    ``path`` with ``os.replace``; a symbolic link at ``path`` is replaced, never followed. On any error the
    temporary file is removed and ``path`` is unchanged.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', not {mode!r}")
    target = Path(path)
    fd, tmp = _create_temp(target)
    try:
        if mode == "wb":
            fh: IO[Any] = os.fdopen(fd, "wb")
        else:
            fh = os.fdopen(fd, "w", encoding=encoding, newline=newline)
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        _failed(tmp, target, exc)
        raise
    _fsync_dir(target.parent)


def _write_whole(path: str | os.PathLike, data: bytes) -> Path:
    """``data`` written to ``path`` as :func:`atomic_open` writes a file (a new temporary file,
    ``fsync``-ed, renamed into place, the directory ``fsync``-ed), by plain system calls: a text
    written at once needs no file object (its set-up, buffer and their system calls)."""
    target = Path(path)
    fd, tmp = _create_temp(target)
    try:
        try:
            view = memoryview(data)
            while view:  # write(2) may take less than it was given
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as exc:
        _failed(tmp, target, exc)
        raise
    _fsync_dir(target.parent)
    return target


def _failed(tmp: str, target: Path, exc: BaseException) -> None:
    """After a failed write: the temporary file removed (``target`` is as it was), and an
    ``OSError`` that names no file (write(2), fsync(2)) naming ``target``."""
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    if isinstance(exc, OSError) and exc.filename is None:
        exc.filename = str(target)  # write(2) and fsync(2) name no file: say which one failed


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (best effort: not every file system allows a directory fsync)."""
    try:
        dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def write_text(path: str | os.PathLike, text: str, *, encoding: str = "utf-8") -> Path:
    """Atomically write ``text`` to ``path`` (see :func:`atomic_open`): its characters as they
    are (no newline translation), encoded."""
    return _write_whole(path, text.encode(encoding))


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Atomically write ``data`` to ``path`` (see :func:`atomic_open`)."""
    return _write_whole(path, data)


def write_parquet(df: pd.DataFrame, path: str | os.PathLike, **kwargs: Any) -> Path:
    """``df.to_parquet`` into a private temporary file, then rename (see :func:`atomic_open`)."""
    with atomic_open(path, "wb") as fh:
        df.to_parquet(fh, **kwargs)
    return Path(path)


def write_csv(df: pd.DataFrame, path: str | os.PathLike, **kwargs: Any) -> Path:
    """``df.to_csv`` with formula cells neutralised (:func:`csv_text`), written atomically;
    ``index=False`` unless given. Returns ``path``."""
    return write_text(path, csv_text(df, **kwargs))


def csv_text(df: pd.DataFrame, **kwargs: Any) -> str:
    """The CSV text of ``df`` with formula cells neutralised; ``index=False`` unless given.

    pandas quotes a cell holding ``\\n`` but not one holding a bare CR, and most readers end
    the row at that CR, so the rest of the cell would start a new row (and could be a formula).
    A table with a CR in any text cell is therefore written with CRLF row ends (RFC 4180),
    which makes the writer quote such cells; other tables keep ``\\n``. Numbers as
    :func:`~pytest_gemmperf.numbers.tidy_frame` writes them (no float noise, ns as integers)."""
    kwargs.setdefault("index", False)
    return _safe_csv(neutralise_frame(tidy_frame(df)), kwargs)


def csv_texts(df: pd.DataFrame, column_sets: list[list[int]], **kwargs: Any) -> list[str]:
    """:func:`csv_text` of ``df.iloc[:, positions]`` for each of ``column_sets``, its numbers
    tidied and its cells neutralised once (both go column by column: a column's text is the same
    in every table holding it); each table's own CRs decide its row ends."""
    kwargs.setdefault("index", False)
    safe = neutralise_frame(tidy_frame(df))
    return [_safe_csv(safe.iloc[:, list(positions)], kwargs) for positions in column_sets]


def _safe_csv(safe: pd.DataFrame, kwargs: dict[str, Any]) -> str:
    """``safe.to_csv(**kwargs)`` (cells already neutralised), with CRLF row ends where a text
    cell holds a CR and no row end was given (:func:`csv_text`)."""
    if "lineterminator" not in kwargs and _has_cr(safe):
        kwargs = {**kwargs, "lineterminator": "\r\n"}
    return safe.to_csv(**kwargs)


def _has_cr(df: pd.DataFrame) -> bool:
    # lazy: keeps every pytest session fast (the plugin loads this module; only tables need pandas)
    import pandas as pd

    if any(isinstance(c, str) and "\r" in c for c in df.columns):
        return True
    for c in _text_columns(df):
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            # its text is its categories': a few scanned as they are, many as a column of them
            categories = s.dtype.categories
            values = categories.tolist() if len(categories) <= _SHORT_TEXT else None
            if values is None:
                s = pd.Series(categories, dtype=object)
        else:
            values = _short_object_values(s)
        if values is not None:
            if any(isinstance(v, str) and "\r" in v for v in values):
                return True
            continue
        try:
            if s.str.contains("\r", regex=False).fillna(False).astype(bool).any():
                return True
        except AttributeError:  # no string in this object column
            continue
    return False


def open_append(path: str | os.PathLike) -> IO[bytes]:
    """Open a log for appending (binary, created 0666 minus umask), refusing a symbolic link.

    A log is written while the workload runs, so it cannot go through a temporary file;
    ``O_NOFOLLOW`` makes the kernel refuse a link at the name instead of writing through it.
    Raises :class:`UnsafeOutputError` with the path in its message."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise UnsafeOutputError(errno.ELOOP, f"{path}: refusing to write through a symbolic "
                                    "link at this name (remove it)") from None
        raise
    return io.open(fd, "ab", closefd=True)


# ---------------------------------------------------------------------------------------------
# CSV formula neutralisation


def neutralise_cell(value: Any) -> Any:
    """``'=1+1`` for ``=1+1``; non-strings and plain decimal numbers are returned unchanged."""
    if isinstance(value, str) and _DANGEROUS.match(value):
        return "'" + value
    return value


def unneutralise_cell(value: Any) -> Any:
    """Inverse of :func:`neutralise_cell` (for reading our own CSVs back)."""
    if isinstance(value, str) and _prefixed().match(value):
        return value[1:]
    return value


#: object columns up to this length are scanned value by value in Python: what pandas' ``.str``
#: accessor does for them (Python's ``re``, non-strings never a hit), without its set-up, which
#: costs about a millisecond a column whatever its length
_SHORT_TEXT = 1000


def _short_object_values(s: pd.Series) -> list | None:
    """The values of a short object column, to scan in Python; None where pandas' ``.str``
    accessor scans it (a long column, or text of a string dtype, which its own engine reads)."""
    if s.dtype != object or len(s) > _SHORT_TEXT:
        return None
    return s.tolist()


def _text_columns(df: pd.DataFrame) -> list:
    # lazy: keeps every pytest session fast (the plugin loads this module; only tables need pandas)
    import pandas as pd

    return [c for c, dt in df.dtypes.items()
            if dt == object or isinstance(dt, (pd.CategoricalDtype, pd.StringDtype))]


def _map_strings(df: pd.DataFrame, pattern: re.Pattern, fix, fix_name) -> pd.DataFrame:
    """Apply ``fix`` to the string cells matching ``pattern`` (vectorised per column: the
    ``.str`` accessor yields NaN for the non-string cells of a mixed object column)."""
    # lazy: keeps every pytest session fast (the plugin loads this module; only tables need pandas)
    import pandas as pd

    out = None
    for c in _text_columns(df):
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            if _no_category_matches(s.dtype.categories, pattern):
                continue  # no cell can match: the column as it is, without its text made
            s = s.astype(object)
        values = _short_object_values(s)
        if values is not None:
            hit = pd.Series([isinstance(v, str) and pattern.match(v) is not None for v in values],
                            index=s.index, dtype=bool)
        else:
            try:
                hit = s.str.match(pattern.pattern)
            except AttributeError:  # an object column without any string (e.g. all None)
                continue
            hit = hit.fillna(False).astype(bool)
        if not hit.any():
            continue
        if out is None:
            out = df.copy(deep=False)
        col = s.astype(object).copy()
        col[hit.to_numpy()] = fix(col[hit.to_numpy()])
        out[c] = col
    res = df if out is None else out
    names = [fix_name(c) for c in res.columns]
    if names != list(res.columns):
        res = res.copy(deep=False) if res is df else res
        res.columns = names
    return res


def _no_category_matches(categories: pd.Index, pattern: re.Pattern) -> bool:
    """Whether no text category matches ``pattern``, so that no cell of the column can (the
    cells are scanned as objects, with Python's ``re``, short or long). False where one does,
    or where the categories are many: its cells decide."""
    if len(categories) > _SHORT_TEXT:
        return False
    return not any(isinstance(v, str) and pattern.match(v) is not None for v in categories.tolist())


def neutralise_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` whose string cells and column names cannot be spreadsheet formulas
    (``'`` prefixed, OWASP); ``df`` itself is returned when nothing needs changing."""
    return _map_strings(df, _DANGEROUS, lambda s: "'" + s.astype(str), neutralise_cell)


def unneutralise_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Undo :func:`neutralise_frame` on a table read back from one of our CSVs."""
    return _map_strings(df, _prefixed(), lambda s: s.astype(str).str.slice(1), unneutralise_cell)


__all__ = ["FORMULA_START", "UnsafeOutputError", "atomic_open", "csv_text", "csv_texts", "neutralise_cell",
           "neutralise_frame", "open_append", "unneutralise_cell", "unneutralise_frame",
           "write_bytes", "write_csv", "write_parquet", "write_text"]
