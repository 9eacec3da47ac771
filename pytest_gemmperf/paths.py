"""Every path gemmperf writes or deletes under one of its roots is built here.

A root is a directory the user chose (results, baselines, history, a merge's ``--out``); it may
itself be a symbolic link, because the user named it. What lies *below* it is built from names
that come from elsewhere -- sweep labels, test ids, hardware keys, directory listings of a
reused results directory -- and a name like ``..``, ``a/b`` or a planted link would otherwise
carry a write (or ``rmtree``) out of the root: into another run, another project, ``$HOME``.

:func:`contained` joins one checked name per level and refuses, with a one-line
:class:`~pytest_gemmperf.errors.GemmperfInputError` naming the path, any name that is empty,
``.``/``..``, holds a separator or NUL, is too long for a file system, or any existing level
that is a symbolic link. :func:`remove_tree` is the only directory removal of results: it
removes a real directory below its root and never what a link points to.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pytest_gemmperf.errors import GemmperfInputError

#: bytes a single name may hold on the common file systems (ext4, xfs, btrfs, tmpfs, NFS)
MAX_NAME_BYTES = 255

_SEPARATORS = tuple({"/", "\\", os.sep, os.altsep or "/"})


def component_problem(name: object) -> str | None:
    """Why ``name`` cannot be one path level below a root, or None when it can."""
    if not isinstance(name, str):
        return f"{name!r} is not a name"
    if name in ("", ".", ".."):
        return f"{name!r} is not a usable name"
    if "\x00" in name:
        return f"{name!r} holds a NUL character"
    if any(sep in name for sep in _SEPARATORS):
        return f"{name!r} holds a path separator"
    try:
        size = len(name.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return f"{name!r} cannot be encoded as a file name"
    if size > MAX_NAME_BYTES:
        return f"name of {size} bytes is longer than {MAX_NAME_BYTES}"
    return None


def contained(root: str | os.PathLike, *components: str) -> Path:
    """``root/c1/c2/...`` after checking that it stays inside ``root``.

    Each component must be one plain name (:func:`component_problem`), and every level that
    already exists below ``root`` must be a real directory or file, not a symbolic link: a link
    planted in a reused directory would send the write (or the removal) to wherever it points.
    Raises :class:`GemmperfInputError` naming the offending path."""
    base = Path(root)
    path = base
    for name in components:
        problem = component_problem(name)
        if problem is not None:
            raise GemmperfInputError(path, f"refusing a path level below this directory: {problem}")
        path = path / name
        if path.is_symlink():
            raise GemmperfInputError(path, "is a symbolic link; refusing to write or delete through it "
                                           "(remove the link or choose another directory)")
    if components and not _inside(path, base):
        raise GemmperfInputError(path, f"resolves outside {base}; refusing to write there")
    return path


def contained_relative(root: str | os.PathLike, relative: str | os.PathLike) -> Path:
    """:func:`contained` for a ``/``-separated relative path read from a file or a listing."""
    rel = os.fspath(relative)
    if os.path.isabs(rel):
        raise GemmperfInputError(rel, f"an absolute path where a path inside {root} was expected")
    return contained(root, *rel.replace("\\", "/").split("/"))


def contained_glob(root: str | os.PathLike, pattern: str) -> list[Path]:
    """``root.glob(pattern)``, sorted, each checked by :func:`contained`: a file or directory
    level below ``root`` that is a link (planted in a results directory to make a reader copy
    another file into its report) is refused with one line, never read through."""
    base = Path(root)
    return [contained_relative(base, p.relative_to(base).as_posix()) for p in sorted(base.glob(pattern))]


def remove_tree(root: str | os.PathLike, *components: str) -> None:
    """Remove the real directory ``root/components`` and everything in it.

    Refuses (one line) a path that is not contained in ``root``, a link (never followed, never
    removed in place of a directory) and anything that is not a directory. ``shutil.rmtree``
    works on file descriptors where the platform allows, so a link planted *inside* the tree
    while it is removed is unlinked, not followed."""
    if not components:
        raise GemmperfInputError(root, "refusing to remove a whole root directory")
    path = contained(root, *components)
    if not path.exists():
        return
    if not path.is_dir():
        raise GemmperfInputError(path, "is not a directory; refusing to remove it")
    try:
        shutil.rmtree(path)
    except OSError as exc:
        raise GemmperfInputError(getattr(exc, "filename", None) or path,
                                 f"cannot remove: {exc.strerror or exc}") from None


def _inside(path: Path, root: Path) -> bool:
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


__all__ = ["MAX_NAME_BYTES", "component_problem", "contained", "contained_glob", "contained_relative",
           "remove_tree"]
