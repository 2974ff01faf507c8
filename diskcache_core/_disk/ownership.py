"""Who may use the files a cache creates: exactly who may use its database file.

A new cache's database is created owner-only (0600), and SQLite gives its ``-wal`` and ``-shm``
the database file's mode. Every other file the library creates later in that directory (the
memory tier's version file, value files and their fan-out directories) follows the same rule:
an operator who deliberately opened a cache to a group (0660) or to readers (0644) keeps it that
way, and a private cache stays private whatever the umask. When the process runs as root in a
cache that belongs to another user, what it creates is handed to that user (as SQLite does for
its own files), so that a root-run command never locks the owner out.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

__all__ = ["PRIVATE", "Ownership", "create_database_file", "ownership_of"]


class Ownership(NamedTuple):
    """Modes and owner for files and directories created in one cache directory."""

    file_mode: int  #: permission bits of new files (the database file's, without execute bits)
    dir_mode: int  #: permission bits of new directories: the file mode plus search where readable
    uid: int  #: owner to give new files, or -1 to leave the creating user
    gid: int  #: group to give new files, or -1 to leave the creating group

    @property
    def is_private(self) -> bool:
        """True for the default: owner-only modes and the creating user as owner."""
        return self == PRIVATE

    def apply(self, fd: int) -> None:
        """Give the file or directory open as `fd` these modes and owner (the umask does not apply)."""
        if self.is_private:
            return
        info = os.fstat(fd)
        wanted = self.dir_mode if stat.S_ISDIR(info.st_mode) else self.file_mode
        if stat.S_IMODE(info.st_mode) != wanted:
            os.fchmod(fd, wanted)
        self.chown(fd)

    def chown(self, fd: int) -> None:
        """Give the file or directory open as `fd` this owner, if one is set."""
        if self.uid != -1 or self.gid != -1:
            os.fchown(fd, self.uid, self.gid)

    def apply_path(self, path: str) -> None:
        """`apply` for a path (no symlink is followed)."""
        if self.is_private:
            return
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags)
        try:
            self.apply(fd)
        finally:
            os.close(fd)


PRIVATE = Ownership(0o600, 0o700, -1, -1)


def ownership_of(database_path: str) -> Ownership:
    """The ownership rule of the cache whose database file is `database_path`."""
    try:
        info = os.stat(database_path)
    except OSError:
        return PRIVATE
    file_mode = stat.S_IMODE(info.st_mode) & 0o666 | 0o600  # the owner can always use its files
    dir_mode = file_mode | (file_mode & 0o444) >> 2
    uid = gid = -1
    if hasattr(os, "geteuid") and os.geteuid() == 0 and (info.st_uid, info.st_gid) != (0, 0):
        uid, gid = info.st_uid, info.st_gid
    return Ownership(file_mode, dir_mode, uid, gid)


def create_database_file(database_path: str, directory_owner: os.stat_result) -> None:
    """Create a new cache's (empty) database file owner-only, before SQLite opens it.

    SQLite would create it with 0644 less the umask, readable by every user, and gives that
    mode to the ``-wal`` and ``-shm`` files too. An existing file is left as it is. As root in a
    directory of another user, the file is that user's.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(database_path, flags, 0o600)
    except FileExistsError:
        return
    try:
        if hasattr(os, "geteuid") and os.geteuid() == 0 and directory_owner.st_uid != 0:
            os.fchown(fd, directory_owner.st_uid, directory_owner.st_gid)
    finally:
        os.close(fd)
