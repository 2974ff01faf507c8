"""The cache directory and the directories below it: made owner-only, and never a link.

A cache follows no link below its directory (design.rst, invariant 3): a shard's or a named
sub-collection's directory that is a link, planted by someone who can write the directory, would
put a database, its value files, and ``check(fix=True)``'s removals somewhere else. The directory
the caller names may itself be a link: that is the caller's choice.
"""

from __future__ import annotations

import os
import os.path as op
import stat
import tempfile

from .._errors import ReadOnlyError, UnsafeValueFileError

__all__ = ["make_private_dirs", "open_cache_directory", "open_subdirectory"]


def open_cache_directory(directory: str | os.PathLike[str] | None, create: bool = True) -> str:
    """The cache directory `directory` names (a new temporary one for None), created owner-only
    if missing (ReadOnlyError without `create`: a cache opened read-only), as an absolute
    path (a later ``os.chdir`` must not move the cache); TypeError for a non-path,
    NotADirectoryError for a file."""
    if directory is None:
        return tempfile.mkdtemp(prefix="diskcache_core-")
    try:
        path = op.expandvars(op.expanduser(os.fsdecode(directory)))  # bytes too, as os takes
    except TypeError:
        raise TypeError(f"directory must be a path, not {type(directory).__name__}") from None
    if not path:
        raise ValueError("cache directory must not be an empty path (None: a new temporary one)")
    if not op.isdir(path):
        if op.exists(path) and not op.isdir(path):  # (another opener may have just made it)
            raise NotADirectoryError(f"cache directory {path!r} is not a directory")
        if not create:
            raise ReadOnlyError(f"no cache directory {path!r} (opened read-only)")
        make_private_dirs(path)
    return op.abspath(path)


def make_private_dirs(path: str) -> None:
    """Create `path` and any missing parents owner-only (0700), whatever the umask.

    os.makedirs applies its mode to the last level only (and through the umask), so each
    level is made here.
    """
    missing = []
    while path and not op.isdir(path):
        if op.lexists(path):
            if op.isdir(path):
                break  # another opener made it between the two looks
            raise NotADirectoryError(f"{path!r} is not a directory: cannot make a directory in it")
        missing.append(path)
        parent = op.dirname(path)
        if parent == path:
            break
        path = parent
    for level in reversed(missing):
        try:
            os.mkdir(level, 0o700)
        except FileExistsError:
            if not op.isdir(level):
                raise
            continue  # another process made it first
        os.chmod(level, 0o700)


def open_subdirectory(directory: str, *parts: str, create: bool = True) -> str:
    """``directory/parts...``, each level made owner-only if missing, none of them a link.

    Raises `UnsafeValueFileError` for a level that is a link or not a directory, and
    ReadOnlyError for a missing one without `create` (a cache opened read-only).
    """
    path = directory
    for part in parts:
        path = op.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            if not create:
                raise ReadOnlyError(f"no cache directory {path!r} (opened read-only)") from None
            make_private_dirs(path)
            mode = os.lstat(path).st_mode
        if not stat.S_ISDIR(mode):
            kind = "a link" if stat.S_ISLNK(mode) else "not a directory"
            raise UnsafeValueFileError(
                f"{path!r} is {kind}: a cache follows no link below its directory"
            )
    return path

