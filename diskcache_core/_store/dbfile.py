"""The database file, checked before SQLite opens it: a regular file, never a link (even one
swapped in while the cache is open) or a FIFO; and whether it is in WAL mode (its header).
"""

from __future__ import annotations

import os
import stat

from .._errors import DatabaseError

__all__ = ["in_wal_mode", "open_if_exists", "refuse_special_file"]


def open_if_exists(path: str) -> int:
    """A descriptor of the regular file `path`, or -1 when there is none: never a link or a
    FIFO (opened without waiting for a writer, and refused)."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return -1
    except OSError as exc:
        raise DatabaseError(f"cannot open {path!r}: {exc}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DatabaseError(f"{path!r} is not a regular file: refused")
    return fd


def in_wal_mode(path: str) -> bool:
    """Whether the database file `path` is in WAL mode (its header's format versions are 2).

    Only such a file needs a WAL index to be read with locks; a read-only reader must read it
    as immutable when no writer has made the index. A file in a rollback-journal mode is read
    with SQLite's own locks (read as immutable, a writer's change in place would tear rows).
    """
    fd = open_if_exists(path)
    if fd == -1:
        return False
    try:
        header = os.pread(fd, 2, 18)
    finally:
        os.close(fd)
    return header == b"\x02\x02"


def refuse_special_file(path: str) -> None:
    """A database file that is there must be a regular file: a planted link would make SQLite
    write outside the directory (invariant 3), and a FIFO would hang a read-only open."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        kind = "a link" if stat.S_ISLNK(mode) else "not a regular file"
        raise DatabaseError(f"the cache database {path!r} is {kind}: refused, not followed")
