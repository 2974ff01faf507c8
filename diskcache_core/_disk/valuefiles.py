"""Value files, confined to the cache directory: their names, and every file system call on them.

A row may name only a value file: a relative path of plain names ending in ``.val``
(`split_value_name`). Each directory level below the cache directory is opened relative to the
one above it with ``O_NOFOLLOW`` (`ValueDir`), and files are made, renamed, read and removed
relative to the last, so no symbolic link below the cache directory is ever followed — not even
one swapped in between two calls. Where the ``*at`` calls are missing (Windows), each level is
lstat-checked and then used by path.
"""

from __future__ import annotations

import errno
import os
import os.path as op
import stat
from typing import Iterable

from .._errors import UnsafeValueFileError
from .ownership import PRIVATE, Ownership

OPEN_RETRIES = 10  # a level a concurrent remover keeps pruning: made again this many times

VALUE_SUFFIX = ".val"
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
ROOT_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_CLOEXEC
DIR_FLAGS = ROOT_FLAGS | _O_NOFOLLOW
# O_NONBLOCK: a FIFO planted as a value file is refused at once instead of blocking the open.
READ_FLAGS = os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY | getattr(os, "O_NONBLOCK", 0)
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY
# openat-style confinement: each directory level below the cache directory is opened relative to
# the one above it with O_NOFOLLOW, so a symbolic link is refused even if swapped in between two
# calls. Without the *at functions (Windows) each level is lstat-checked and then used by path.
USE_DIR_FD = (
    bool(_O_NOFOLLOW)
    and hasattr(os, "O_DIRECTORY")
    and {os.open, os.mkdir, os.rename, os.unlink, os.rmdir, os.stat} <= os.supports_dir_fd
)
LINK_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})  # what O_NOFOLLOW reports
FULL_DISK_ERRNOS = {errno.ENOSPC: "no space left on the device"}
if hasattr(errno, "EDQUOT"):
    FULL_DISK_ERRNOS[errno.EDQUOT] = "disk quota exceeded"
LINK_REPARSE_TAGS = frozenset({0xA000000C, 0xA0000003})  # Windows: symbolic link, junction
POSIX_NAMES = os.sep == "/" and os.altsep is None and op.splitdrive("//x/y/z")[0] == ""


def split_value_name(filename: object) -> list[str]:
    """The components of value-file name `filename`, or UnsafeValueFileError.

    A row may only name a value file: a relative path of plain names (no empty part, ``.``,
    ``..``, drive or root) whose last part ends in ``.val``, as ``Disk.filename`` (and
    python-diskcache's) makes them, custom deeper layouts included. The database, its journals,
    the version and layout files never end in ``.val``, so no row can name them.
    """
    if isinstance(filename, str) and filename.endswith(VALUE_SUFFIX) and "\0" not in filename:
        if POSIX_NAMES:
            parts = filename.split("/")
        else:  # Windows: either separator; a drive ("C:", "//server/share") is absolute
            parts = filename.replace(os.sep, "/").split("/")
            if op.splitdrive(filename)[0]:
                parts = []
        if (
            parts
            and len(parts[-1]) > len(VALUE_SUFFIX)
            and "" not in parts
            and "." not in parts
            and ".." not in parts
        ):
            return parts
    raise UnsafeValueFileError(
        f"refusing value file {filename!r}: not a relative path ending in {VALUE_SUFFIX!r}"
        " inside the cache directory"
    )


def is_link(status: os.stat_result) -> bool:
    """True for a symbolic link, or a Windows junction (which lstat does not call a link)."""
    return stat.S_ISLNK(status.st_mode) or getattr(status, "st_reparse_tag", 0) in LINK_REPARSE_TAGS


def write_chunks(fd: int, chunks: Iterable[bytes]) -> int:
    """Write every chunk to `fd`, looping over short writes; return the bytes written."""
    size = 0
    for chunk in chunks:
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise TypeError(f"read=True needs a binary file object; read() gave {type(chunk).__name__}")
        view = memoryview(chunk)
        if view.itemsize != 1 or view.ndim != 1:
            view = view.cast("B")
        size += len(view)
        while view:
            view = view[os.write(fd, view) :]
    return size


class ValueDir:
    """The directories from the cache directory down to one value file's parent.

    With dir_fd support each level is opened relative to the one above it with O_NOFOLLOW, and
    files are made, renamed, read and removed relative to the last: no symbolic link below the
    cache directory is ever followed, even one swapped in meanwhile. Without it (Windows) each
    level is lstat-checked, then used by path. The cache directory itself may be reached through
    links. Levels that fail to open stay out of the list, the ones before stay in, so a failed
    write can prune what it made. Close it (a context manager) to release the descriptors.
    """

    __slots__ = ("root", "parts", "label", "fds", "paths", "ownership")

    def __init__(self, root: str, parts: list[str], label: str, ownership: Ownership = PRIVATE) -> None:
        self.root = root
        self.ownership = ownership  # the modes and owner of the levels it makes
        self.parts = parts  # the relative components; the last names the file
        self.label = label  # the value file's name, for messages
        self.fds: list[int] = []  # with dir_fd: the cache directory, then each level opened
        self.paths: list[str] = []  # without: the same levels, as checked paths

    def __enter__(self) -> "ValueDir":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every descriptor and forget the levels."""
        fds, self.fds = self.fds, []
        self.paths = []
        for fd in fds:
            os.close(fd)

    def open(self, create: bool) -> None:
        """Open each directory level; with `create`, make missing ones (0700, or as `ownership`
        says).

        FileNotFoundError for a missing level, UnsafeValueFileError for a symbolic link.
        """
        if USE_DIR_FD:
            self.fds.append(os.open(self.root, ROOT_FLAGS))
            for name in self.parts[:-1]:
                self.fds.append(self._open_level(name, create))
        else:
            self.paths.append(self.root)
            for name in self.parts[:-1]:
                self.paths.append(self._check_level(name, create))

    def _open_level(self, name: str, create: bool) -> int:
        parent = self.fds[-1]
        made = False
        for _ in range(OPEN_RETRIES):
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=parent)
            except FileNotFoundError:
                if not create:
                    raise
            except OSError as exc:
                self._refuse_link(exc, name)
                raise
            else:
                if made:
                    try:
                        os.fchmod(fd, self.ownership.dir_mode)  # whatever the umask took away
                        self.ownership.chown(fd)
                    except BaseException:
                        os.close(fd)
                        raise
                return fd
            try:
                os.mkdir(name, 0o700, dir_fd=parent)
                made = True
            except FileExistsError:
                pass  # another writer made it just now
        # Made each time, and each time pruned by a remover before we could open it.
        raise FileNotFoundError(errno.ENOENT, "value-file directory keeps disappearing", name)

    def _check_level(self, name: str, create: bool) -> str:
        path = op.join(self.paths[-1], name)
        for _ in range(OPEN_RETRIES):
            try:
                status = os.lstat(path)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(path, 0o700)
                    os.chmod(path, self.ownership.dir_mode)
                except FileExistsError:
                    pass
                continue
            if is_link(status):
                raise self._link_error(name)
            if not stat.S_ISDIR(status.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
            return path
        raise FileNotFoundError(errno.ENOENT, "value-file directory keeps disappearing", path)

    def _link_error(self, name: str) -> UnsafeValueFileError:
        where = op.join(*self.parts[: max(len(self.fds), len(self.paths)) - 1], name)
        return UnsafeValueFileError(
            f"refusing value file {self.label!r}: {where!r} in the cache directory is a symbolic"
            " link; links below the cache directory are never followed (check(fix=True) removes them)"
        )

    def _refuse_link(self, exc: OSError, name: str) -> None:
        """Raise UnsafeValueFileError if `exc` came from `name` being a symbolic link."""
        if exc.errno in LINK_ERRNOS:
            try:
                linked = is_link(self.lstat(name))
            except OSError:
                return
            if linked:
                raise self._link_error(name) from exc

    def lstat(self, name: str) -> os.stat_result:
        """Status of `name` in the last level, not following a link."""
        if USE_DIR_FD:
            return os.stat(name, dir_fd=self.fds[-1], follow_symlinks=False)
        return os.lstat(op.join(self.paths[-1], name))

    def open_file(self, name: str, flags: int) -> int:
        """Open `name` in the last level (never through a link) with `flags`, mode 0600."""
        try:
            if USE_DIR_FD:
                return os.open(name, flags, 0o600, dir_fd=self.fds[-1])
            path = op.join(self.paths[-1], name)
            if not _O_NOFOLLOW and not flags & os.O_CREAT and is_link(os.lstat(path)):
                raise self._link_error(name)  # no O_NOFOLLOW here: checked first
            return os.open(path, flags, 0o600)
        except OSError as exc:
            self._refuse_link(exc, name)
            if exc.errno == errno.ENXIO:  # a socket (or a FIFO with no reader, for a write)
                raise UnsafeValueFileError(f"refusing {name!r}: not a regular file") from exc
            raise

    def unlink(self, name: str) -> None:
        """Remove `name` from the last level (a link itself, never its target)."""
        if USE_DIR_FD:
            os.unlink(name, dir_fd=self.fds[-1])
        else:
            os.unlink(op.join(self.paths[-1], name))

    def rename(self, source: str, target: str) -> None:
        """Rename `source` to `target`, both in the last level."""
        if USE_DIR_FD:
            os.rename(source, target, src_dir_fd=self.fds[-1], dst_dir_fd=self.fds[-1])
        else:
            os.replace(op.join(self.paths[-1], source), op.join(self.paths[-1], target))

    def prune(self) -> None:
        """Remove the opened levels that are now empty, deepest first; never the cache directory."""
        if USE_DIR_FD:
            for depth in range(len(self.fds) - 1, 0, -1):
                try:
                    os.rmdir(self.parts[depth - 1], dir_fd=self.fds[depth - 1])
                except OSError:
                    return  # not empty (or gone): the levels above are not empty either
        else:
            for depth in range(len(self.paths) - 1, 0, -1):
                try:
                    os.rmdir(self.paths[depth])
                except OSError:
                    return


# --- compression ---------------------------------------------------------------------------
