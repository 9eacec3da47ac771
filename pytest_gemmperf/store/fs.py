"""File-system primitives of the baseline store: every change it makes on disk, one step each.

Crash safety is argued step by step (``docs/ARCHITECTURE.md``, baseline record), so every
create, write, fsync, rename, unlink and rmdir the store does goes through this module and
announces itself first through :func:`step`. Tests set :data:`hook` to a callable that kills the
writer at step *k* (raises an exception that store code never catches, or ``os._exit``s), and so
visit every instant a ``kill -9`` could hit. A real SIGKILL runs no cleanup handler, so the
store's own cleanup (removing a temp file after a failed write) happens in ``except Exception``
only: an injected kill, a ``BaseException``, leaves the same debris a real one would.

Files are created 0644 (baselines are committed and shared), fsynced before they are renamed
into place, and the directory is fsynced after a rename, so a completed step survives power loss
too, not only a killed process.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable
from pytest_gemmperf.errors import GemmperfInputError

#: ``hook(kind, path)`` runs before every step when set (fault injection in tests).
hook: Callable[[str, Path], None] | None = None


def step(kind: str, path: str | os.PathLike) -> None:
    """Announce one on-disk step (``create``, ``write``, ``fsync``, ``rename``, ``unlink``,
    ``mkdir``, ``rmdir``) to :data:`hook`."""
    if hook is not None:
        hook(kind, Path(path))


def write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (must not exist), write ``data``, fsync. A kill part-way leaves a partial
    file: only used for files nothing points to yet, or behind :func:`atomic_write`."""
    step("create", path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.fchmod(fd, 0o644)  # regardless of umask: baselines are shared and committed
        half = len(data) // 2
        _write_all(fd, data[:half])
        step("write", path)  # a kill here leaves a half-written file
        _write_all(fd, data[half:])
        step("fsync", path)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def temp_name(path: Path) -> Path:
    """An unpredictable temp name beside ``path`` (``.NAME.<hex>.tmp``), which cleanup removes."""
    return path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically: temp file, fsync, rename, fsync the directory.
    Readers see the old bytes or the new ones, never a mix."""
    tmp = temp_name(path)
    try:
        write_new(tmp, data)
        step("rename", path)
        os.replace(tmp, path)
    except Exception:  # an ordinary failure (disk full): leave no temp behind
        unlink(tmp, missing_ok=True, announce=False)
        raise
    fsync_dir(path.parent)


def replace(src: Path, dst: Path) -> None:
    """``os.replace`` (atomic), then fsync the destination's directory."""
    step("rename", dst)
    os.replace(src, dst)
    fsync_dir(dst.parent)


def unlink(path: Path, missing_ok: bool = True, announce: bool = True) -> None:
    if announce:
        step("unlink", path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise


def mkdir(path: Path) -> None:
    """Create ``path`` and missing parents (each one a step); nothing when it exists."""
    if path.is_dir():
        return
    mkdir(path.parent)
    step("mkdir", path)
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    fsync_dir(path.parent)


def rmdir(path: Path, missing_ok: bool = True) -> bool:
    """Remove an empty directory; False when it is not empty."""
    step("rmdir", path)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError:  # not empty
        return False
    return True


def rmtree(path: Path) -> None:
    """Remove a directory tree bottom-up, one step per entry (no symlink is followed: a link
    planted where a directory was expected is removed itself, never what it points to)."""
    if path.is_symlink():
        unlink(path)
        return
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return
    for e in entries:
        if e.is_dir(follow_symlinks=False):
            rmtree(Path(e.path))
        else:
            unlink(Path(e.path))
    rmdir(path)


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable (POSIX; a no-op elsewhere)."""
    if os.name != "posix":
        return
    step("fsync", path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_bytes(path: Path) -> bytes:
    """The file's bytes; ``FileNotFoundError`` passes through (absence means something to
    the store), other errors become one-line input errors."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise
    except NotADirectoryError:
        raise FileNotFoundError(path) from None
    except OSError as exc:
        raise GemmperfInputError(path, f"cannot read: {exc.strerror or exc}") from None
