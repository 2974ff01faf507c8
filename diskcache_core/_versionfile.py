"""The memory tier's version file: the words every process of a cache directory shares.

``cache.db-versions`` holds a header and, for each of `BUCKETS` key-hash buckets, two 64-bit
words (``pre`` and ``post``; what they mean is the protocol in _memory.py); header words 2 and 3
belong to the lock handoff (_handoff.py). It is mapped shared
and read-write, one mapping per file per process. Its blocks are allocated before it is mapped:
a store into a mapped page with no block behind it kills the process (SIGBUS) on a full disk.
"""

from __future__ import annotations

import errno
import mmap
import os
import os.path as op
import stat
import struct
import threading
import weakref

from ._errors import DatabaseError, storage_error
from ._ownership import PRIVATE, Ownership

__all__ = ["BUCKETS", "FILE_SIZE", "HEADER_WORDS", "VERSION_FILE", "open_versions", "versions_identity"]

VERSION_FILE = "cache.db-versions"  # named like SQLite's own files: copied and kept with them
BUCKETS = 8192  # key-hash buckets; a write makes every entry of its bucket refill once
_MAGIC = b"DCMEMV1\0"
HEADER_WORDS = 8  # 64 bytes: magic, bucket count, the lock handoff's two words (_handoff.py),
# then reserved (zero). Only the first two identify the layout: the others change while in use.
_IDENTITY = struct.pack("<8sQ", _MAGIC, BUCKETS)
FILE_SIZE = 8 * (HEADER_WORDS + 2 * BUCKETS)


def open_versions(
    directory: str, ownership: Ownership = PRIVATE
) -> tuple[memoryview, tuple[int, int]]:
    """The version words shared by every process using `directory` (a writable one: where this
    process may only read, the memory tier stays off and nothing is opened), and their file's
    (device, inode): `versions_identity` tells later whether the directory still holds it.

    The file is created if missing and its header checked; the creation
    and any repair only ever extend the file and write the same header bytes, so processes that
    race here all end up mapping the same file, with no word reset.

    Every block of the file is allocated before it is mapped (`_allocate`): a store into a
    mapped page with no block behind it kills the process with SIGBUS when the disk is full.
    One mapping per file is shared by every Cache of this process (one file descriptor, the
    mapping's own).
    """
    path = op.join(directory, VERSION_FILE)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, ownership.file_mode)
    except OSError as exc:  # (a full disk or no inode left: DiskFullError, an OSError)
        raise storage_error(exc, f"the memory tier's version file {path!r}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DatabaseError(f"{path!r} is not a regular file")
        identity = (info.st_dev, info.st_ino)
        with _mappings_lock:
            if info.st_size == 0:
                ownership.apply(fd)  # new: the database file's modes and owner
            os.lseek(fd, 0, os.SEEK_SET)
            header = os.read(fd, len(_IDENTITY))
            if header[:8] == _MAGIC and header != _IDENTITY:
                raise DatabaseError(
                    f"{path!r} was made by a different version of diskcache_core (another bucket"
                    " layout); remove it once no process uses the cache"
                )
            if info.st_size < FILE_SIZE or info.st_blocks * 512 < FILE_SIZE:
                _allocate(fd, info.st_size)  # a fully allocated file is left untouched
            if header != _IDENTITY:
                # New (empty) or damaged: write its header. Never truncates below the size other
                # processes map, never resets a word that is in use.
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, _IDENTITY)
                os.fsync(fd)  # a power loss must not leave the name with no content
            words = _shared_words(identity)
            if words is not None:
                return words, identity
            # The mapping keeps a descriptor of its own (Python's mmap duplicates `fd`), and the
            # file's inode while it lives: ours is closed below.
            mapping = mmap.mmap(fd, FILE_SIZE, access=mmap.ACCESS_WRITE)  # shared, read-write
            words = memoryview(mapping).cast("Q")  # the view keeps the mapping alive
            reference = weakref.ref(words)
            _mappings[identity] = reference
            weakref.finalize(words, _forget_mapping, identity, reference)
            return words, identity
    except OSError as exc:
        raise storage_error(exc, f"the memory tier's version file {path!r}") from exc
    finally:
        os.close(fd)


def versions_identity(directory: str) -> tuple[int, int] | None:
    """(device, inode) of the version file in `directory` now; None when there is none."""
    try:
        info = os.stat(op.join(directory, VERSION_FILE))
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


# Version words per file (device, inode), shared by the Caches of this process so that each file
# costs one mapping (and one descriptor, the mapping's own) however many Caches open it.
_mappings: dict[tuple[int, int], weakref.ref[memoryview]] = {}
_mappings_lock = threading.RLock()  # re-entrant: a finalizer may run inside it, during gc


def _shared_words(identity: tuple[int, int]) -> memoryview | None:
    """This process's mapping of the file `identity` (just opened by its path), if it has one.

    A live mapping holds its file's inode, so no other file can have taken its number: a file
    opened with the same identity is the one mapped.
    """
    reference = _mappings.get(identity)
    return None if reference is None else reference()


def _forget_mapping(identity: tuple[int, int], reference: weakref.ref[memoryview]) -> None:
    with _mappings_lock:
        if _mappings.get(identity) is reference:
            del _mappings[identity]


def _allocate(fd: int, size: int) -> None:
    """Give the version file its size with every block allocated (the contents stay).

    Where the platform has no ``posix_fallocate``, the file is extended sparse (as a plain
    ``ftruncate``): there a full disk can still fault a first store into a page.
    """
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is not None:
        try:
            fallocate(fd, 0, FILE_SIZE)
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
    if size < FILE_SIZE:
        os.ftruncate(fd, FILE_SIZE)
