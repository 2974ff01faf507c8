"""The memory tier's version file: the words every process of a cache directory shares.

``cache.db-versions`` holds a header and, for each of `BUCKETS` key-hash buckets, two 64-bit
words (``pre`` and ``post``; what they mean is the protocol: its writer side in versions.py, its
reader side in _memory/tier.py); header words 2 and 3 belong to the lock handoff (handoff.py).
It is mapped shared and read-write, one mapping per file per process. Its blocks are allocated before it is mapped:
a store into a mapped page with no block behind it kills the process (SIGBUS) on a full disk.

The file can also be shrunk or replaced by hand while mapped (``truncate``, ``cp`` or an
``os.replace`` onto a live directory): a load from a page beyond the shrunk file's end kills the
process (SIGBUS), and a replaced file no longer carries the other processes' writes. Each pool
checks its file (`versions_intact`, from the _mapwatch thread and before writes); a lost file's
users switch to `LOST_WORDS` at once, then to the directory's file, its words renewed
(`renew_versions`).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import os.path as op
import sqlite3
import stat
import struct
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from .._errors import DatabaseError, storage_error, translate_sqlite_error
from .._disk.ownership import PRIVATE, Ownership, ownership_of
from .schema import database_uri

__all__ = [
    "BUCKETS",
    "FILE_SIZE",
    "HEADER_WORDS",
    "LOST_WORDS",
    "VERSION_FILE",
    "WordsCell",
    "open_versions",
    "remap_versions",
    "renew_versions",
    "versions_identity",
    "versions_intact",
    "versions_lost_error",
    "weak_method",
    "write_locked",
]

VERSION_FILE = "cache.db-versions"  # named like SQLite's own files: copied and kept with them
BUCKETS = 8192  # key-hash buckets; a write makes every entry of its bucket refill once
_MAGIC = b"DCMEMV1\0"
HEADER_WORDS = 8  # 64 bytes: magic, bucket count, the lock handoff's two words (_store/handoff.py),
# then reserved (zero). Only the first two identify the layout: the others change while in use.
_IDENTITY = struct.pack("<8sQ", _MAGIC, BUCKETS)
FILE_SIZE = 8 * (HEADER_WORDS + 2 * BUCKETS)


def _lost_words() -> memoryview:
    """Version words in this process's own memory, for a mapping whose file was lost: every
    bucket's ``pre`` (2: even, never a nonce, nor the 0 of a new file) differs from its ``post``
    (0), so no entry is answered and none is filled; nothing stored here can fault."""
    words = memoryview(bytearray(FILE_SIZE)).cast("Q")
    for index in range(HEADER_WORDS, HEADER_WORDS + 2 * BUCKETS, 2):
        words[index] = 2
    return words


# What the users of a lost version file read and write until it is mapped anew. Writers never
# store into it (`change_recorder` refuses a write while it is in use): no bucket turns clean.
LOST_WORDS = _lost_words()


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


def versions_intact(words: memoryview, identity: tuple[int, int], directory: str) -> bool:
    """Whether the file `words` maps (`identity`) still has its full size (one ``fstat`` of
    the mapping's descriptor), and is still `directory`'s version file (one ``stat``).

    False: it was shrunk (a load from the pages past its end would kill the process), or
    replaced (other processes bump another file). Either way its words no longer tell what
    changed: they must not be used, nor the entries validated by them.
    """
    mapping = words.obj
    try:
        if not isinstance(mapping, mmap.mmap) or mapping.size() < FILE_SIZE:
            return False
    except (OSError, ValueError):  # (ValueError: closed)
        return False
    return versions_identity(directory) == identity


def versions_lost_error(during: str) -> DatabaseError:
    """The error of a write whose changes could not be told to the other processes: the version
    file was truncated or replaced `during` it (and its earlier changes bumped the lost file)."""
    return DatabaseError(
        f"the memory tier's version file was truncated or replaced during {during}: its"
        " changes could not be told to the other processes of the cache (nothing was stored)"
    )


@contextlib.contextmanager
def write_locked(database: str, wait: float) -> Iterator[None]:
    """Hold the write lock of `database` (a cache database, never created here) on a
    connection of its own, `wait` seconds at most for it; DatabaseError when it cannot be had
    (the version file in its directory was lost, and cannot be mapped anew now)."""
    try:
        con = sqlite3.connect(
            database_uri(database, "mode=rw"), timeout=wait, isolation_level=None, uri=True
        )
    except sqlite3.Error as exc:
        raise translate_sqlite_error(exc, database) from exc
    try:
        try:
            con.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise DatabaseError(
                f"the memory tier's version file of {database!r} was truncated or replaced"
                f" while in use and could not be mapped anew: {translate_sqlite_error(exc, database)}"
            ) from exc
        yield
    finally:
        con.close()  # (rolls back: nothing was written)


def remap_versions(database: str) -> tuple[memoryview, tuple[int, int]]:
    """`open_versions` of the directory of `database` after its version file was lost, every
    word renewed (`renew_versions`). Only under the database's write lock (`write_locked`, or
    a writing statement's): no entry made by any process before is answered again, and no
    write another process made meanwhile through the lost file can be missed."""
    words, identity = open_versions(op.dirname(database), ownership_of(database))
    renew_versions(words)
    return words, identity


def renew_versions(words: memoryview) -> None:
    """A fresh, clean version in every bucket (``pre = post``, never used before): no entry
    made so far is answered again, and buckets may be filled at once.

    Only under the database's write lock: no writer is then between the ``pre`` store of its
    statement and its commit, whose change a fill tagged with the fresh version could miss.
    """
    fresh = memoryview(os.urandom(8 * BUCKETS)).cast("Q")
    for offset in range(BUCKETS):
        version = fresh[offset] | 1
        index = HEADER_WORDS + 2 * offset
        words[index] = version
        words[index + 1] = version


class WordsCell:
    """The version words a pool's connections bump (read by their triggers at each write), held
    apart from the pool: the connections' SQL functions refer to it, and a reference to the
    pool would make a cycle through its connections (a dropped cache would not be freed)."""

    __slots__ = ("words", "remap")

    def __init__(self) -> None:
        self.words: memoryview | None = None
        # Maps the directory's file anew, under the write lock this thread holds (None: that
        # failed): the pool's `_remap_in_statement`, held weakly (`weak_method`).
        self.remap: Callable[[], memoryview | None] = lambda: None

    def writable(self, txn: Any) -> memoryview:
        """(A version trigger, inside its statement) The words to bump. Where their file was
        found lost (`LOST_WORDS`), the directory's is mapped anew now — this thread holds the
        write lock — and the buckets the open transaction bumped in the lost file are bumped
        again in it, so that no reader keeps what the transaction has not committed yet."""
        words = self.words
        if words is not LOST_WORDS:
            assert words is not None  # (a connection that may write has words)
            return words
        words = self.remap()
        if words is None:
            raise versions_lost_error("this transaction")
        versions = txn.versions
        for index in versions:
            nonce = int.from_bytes(os.urandom(8), "little") | 1
            words[index] = nonce
            versions[index] = nonce
        return words


def weak_method(method: Callable[[], Any]) -> Callable[[], Any]:
    """`method`, held weakly (None once its object is gone)."""
    reference = weakref.WeakMethod(method)

    def call() -> Any:
        live = reference()
        return None if live is None else live()

    return call


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
