"""The memory tier: recently read and written items of one Cache, kept in this process.

A get answered from SQLite costs a few microseconds; a dict lookup a fraction of one. Each Cache
object keeps a small LRU map of its items (`MemoryTier`), bounded in bytes and in items. What
makes it safe to answer from that map is a version check shared by every process that uses the
cache directory: the file ``cache.db-versions``, mapped into memory, holds for each of `BUCKETS`
key-hash buckets two 64-bit words, ``pre`` and ``post``.

The protocol (see docs/memory.rst for the long form):

Writers. Every statement that inserts, changes (value or expiry) or deletes a row fires a
  per-connection TEMP trigger (`_schema.VERSION_TRIGGERS`) that calls `change_recorder`'s
  function with the row's key. That runs inside the statement, so under SQLite's write lock:
  writers' stores to ``pre`` are serialized. It stores a fresh random nonce ``n`` in the key's
  bucket's ``pre`` and remembers ``(bucket, n)`` in the thread's `ThreadState`. After the
  transaction has committed (or rolled back), `publish` stores ``post = n`` if ``pre`` is still
  ``n`` (otherwise a later writer has already started, and its own ``post`` will follow).

Readers. Before the SELECT that fills an entry, a reader reads the bucket's ``pre`` and ``post``;
  only when they are equal (``x``) may it keep what the SELECT found — the value, or that the
  key is absent — tagged ``x``. An entry is answered while its bucket's ``pre`` still equals its
  tag and it has not expired.

Why this is exact. (1) A nonce is stored into ``pre`` at most once, ever (64 random bits), so a
  bucket never returns to an old tag. (2) ``post = x`` is stored only by the writer that stored
  ``pre = x``, after its transaction ended. So a reader that saw ``pre == post == x`` runs its
  SELECT after that write committed, and the value it reads includes it. (3) Any write that
  commits later stores its own nonce into ``pre`` before it commits (under the lock, so after
  the earlier writer), and ``pre`` never returns to ``x``: from that commit on, the entry is no
  longer answered. A read that starts after a write returned can therefore never see an older
  value from memory than SQLite would give it. (4) A writer killed between its commit and its
  ``post`` store leaves ``pre != post``: entries of that bucket are invalid (their tag is not
  ``pre``) and the bucket cannot be filled until the next write to it completes. Nothing stale
  is served, ever.

Writes in this process also update its own map (write-through): a set whose trigger stored
``pre = n`` keeps its value tagged ``n`` if ``pre`` is still ``n`` after the commit — then no
later write has started, and every later one will change ``pre`` before it commits. A delete
keeps "absent" the same way.

Memory ordering: each word is one aligned 8-byte load or store (a memoryview cast to ``'Q'``,
which CPython implements with a fixed-size memcpy); SQLite's WAL locking issues full memory
barriers around every commit and every read transaction, which order them against the SELECT
and the commit.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import os.path as op
import random
import stat
import struct
import threading
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from ._errors import DatabaseError, storage_error
from ._ownership import PRIVATE, Ownership

__all__ = [
    "ABSENT",
    "BUCKETS",
    "IMMUTABLE_TYPES",
    "VERSION_FILE",
    "MemoryStats",
    "MemoryTier",
    "change_recorder",
    "open_versions",
    "pre_index",
    "publish",
]

VERSION_FILE = "cache.db-versions"  # named like SQLite's own files: copied and kept with them
BUCKETS = 8192  # key-hash buckets; a write makes every entry of its bucket refill once
_MAGIC = b"DCMEMV1\0"
_HEADER_WORDS = 8  # 64 bytes: magic, bucket count, then reserved
_HEADER = struct.pack("<8sQ", _MAGIC, BUCKETS).ljust(8 * _HEADER_WORDS, b"\0")
FILE_SIZE = 8 * (_HEADER_WORDS + 2 * BUCKETS)
_MASK = BUCKETS - 1

# A rough per-entry cost in bytes beyond the key and value (the entry tuple, the map's node and
# slot): counted towards memory_size_limit so that many small items cannot exceed it by much.
ENTRY_OVERHEAD = 200
# Values of these exact types are kept as they are and returned as the same object: they are
# immutable. Any other value is kept serialized and decoded afresh on each hit.
IMMUTABLE_TYPES = frozenset({bytes, str, int, float, bool, complex, type(None)})
# Admission bitmap (see MemoryTier.seen_lately): one byte per slot, indexed by the map key hash.
_RECENT_SLOTS = 1 << 16
RECENT_MASK = _RECENT_SLOTS - 1

_crc32 = zlib.crc32
# Nonces: 64 random bits from a per-process generator (seeded from os.urandom, reseeded in a
# forked child so that parent and child never draw the same sequence).
_random = random.Random(os.urandom(32))


def pre_index(db_key: Any) -> int | None:
    """Index of the ``pre`` word of `db_key`'s bucket (``post`` follows it), or None when keys
    of this type are not kept in memory.

    The same in every process and Python version, and equal for keys the database treats as
    equal: integers and floats hash by their float value (SQLite compares them numerically), so
    ``1`` and ``1.0`` share a bucket. Text and blobs hash by CRC-32 of their bytes.
    """
    kind = type(db_key)
    if kind is str:
        try:
            code = _crc32(db_key.encode())
        except UnicodeEncodeError:  # lone surrogates: SQLite cannot store them anyway
            code = _crc32(db_key.encode("utf-8", "surrogatepass"))
    elif kind is bytes or kind is bytearray or kind is memoryview:
        code = _crc32(db_key)
    elif isinstance(db_key, (int, float)):
        try:
            number = float(db_key)
        except OverflowError:
            return None
        if math.isnan(number):
            return None  # NaN: SQLite stores it as NULL, which matches no key
        code = hash(number)  # numeric hashes are not randomized (unlike str and bytes)
    else:
        return None
    return _HEADER_WORDS + 2 * (code & _MASK)


def _stored_key_index(db_key: Any) -> int:
    # A key as SQLite hands it to the trigger: int, float, str, bytes, or None (a NaN key).
    index = pre_index(db_key)
    return _HEADER_WORDS if index is None else index


def change_recorder(state: Any, words: memoryview) -> Callable[[Any], None]:
    """The SQL function the version triggers call with a changed row's key.

    Runs inside the writing statement, under the write lock: stores a fresh nonce in the bucket's
    ``pre`` and remembers it in ``state.versions`` (for `publish`). A bucket already bumped by
    this thread's open transaction is not bumped again: its ``post`` cannot equal ``pre`` before
    the transaction ends, so no reader can have filled from it meanwhile.
    """
    getrandbits = _random.getrandbits
    crc32 = _crc32

    def item_changed(db_key: Any) -> None:
        if type(db_key) is str:  # the common case, inline: this runs inside every write
            try:
                index = _HEADER_WORDS + 2 * (crc32(db_key.encode()) & _MASK)
            except UnicodeEncodeError:
                index = _stored_key_index(db_key)
        else:
            index = _stored_key_index(db_key)
        versions = state.versions
        nonce = versions.get(index)
        if nonce is None or words[index] != nonce:
            nonce = getrandbits(64) | 1  # never 0, the value of a new file
            words[index] = nonce
            versions[index] = nonce

    return item_changed


def publish(words: memoryview, versions: dict[int, int]) -> None:
    """After the transaction that made `versions` has ended: ``post = pre`` where ``pre`` is
    still ours (otherwise a later writer has started, and it will publish)."""
    for index, nonce in versions.items():
        if words[index] == nonce:
            words[index + 1] = nonce


# --- the version file ---------------------------------------------------------------------------


def open_versions(directory: str, ownership: Ownership = PRIVATE) -> memoryview:
    """The version words shared by every process using `directory` (a writable one: where this
    process may only read, the memory tier stays off and nothing is opened).

    The file is created if missing and its header checked; the creation
    and any repair only ever extend the file and write the same header bytes, so processes that
    race here all end up mapping the same file, with no word reset.

    Every block of the file is allocated before it is mapped (`_allocate`): a store into a
    mapped page with no block behind it kills the process with SIGBUS when the disk is full.
    One mapping per file is shared by every Cache of this process (one file descriptor).
    """
    path = op.join(directory, VERSION_FILE)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, ownership.file_mode)
    except OSError as exc:
        raise DatabaseError(f"cannot open the memory tier's version file {path!r}: {exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DatabaseError(f"{path!r} is not a regular file")
        identity = (info.st_dev, info.st_ino)
        with _mappings_lock:
            if info.st_size == 0:
                ownership.apply(fd)  # new: the database file's modes and owner
            os.lseek(fd, 0, os.SEEK_SET)
            header = os.read(fd, len(_HEADER))
            if header[:8] == _MAGIC and header != _HEADER:
                raise DatabaseError(
                    f"{path!r} was made by a different version of diskcache_core (another bucket"
                    " layout); remove it once no process uses the cache"
                )
            if info.st_size < FILE_SIZE or info.st_blocks * 512 < FILE_SIZE:
                _allocate(fd, info.st_size)  # a fully allocated file is left untouched
            if header != _HEADER:
                # New (empty) or damaged: write its header. Never truncates below the size other
                # processes map, never resets a word that is in use.
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, _HEADER)
                os.fsync(fd)  # a power loss must not leave the name with no content
            words = _shared_words(identity)
            if words is not None:
                return words
            mapping = mmap.mmap(fd, FILE_SIZE, access=mmap.ACCESS_WRITE)  # shared, read-write
            words = memoryview(mapping).cast("Q")  # the view keeps the mapping alive
            _mappings[identity] = (weakref.ref(words), fd)
            weakref.finalize(words, _forget_mapping, identity, fd)
            fd = -1  # kept open while the mapping lives: it tells whether the file was removed
            return words
    except OSError as exc:
        raise storage_error(exc, f"the memory tier's version file {path!r}") from exc
    finally:
        if fd != -1:
            os.close(fd)


# Version words per file (device, inode) -> (the words, a descriptor of the file), shared by the
# Caches of this process so that each file costs one mapping however many Caches open it.
_mappings: dict[tuple[int, int], tuple[weakref.ref[memoryview], int]] = {}
_mappings_lock = threading.RLock()  # re-entrant: a finalizer may run inside it, during gc


def _shared_words(identity: tuple[int, int]) -> memoryview | None:
    """This process's mapping of the file `identity`, unless that file has been removed since
    (its inode number may then name a new file)."""
    entry = _mappings.get(identity)
    if entry is None:
        return None
    words = entry[0]()
    if words is None or os.fstat(entry[1]).st_nlink == 0:
        return None
    return words


def _forget_mapping(identity: tuple[int, int], fd: int) -> None:
    with _mappings_lock:
        entry = _mappings.get(identity)
        if entry is not None and entry[1] == fd:
            del _mappings[identity]
    os.close(fd)


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


# --- the in-process map --------------------------------------------------------------------------


class MemoryStats(NamedTuple):
    """What `Cache.memory_stats` returns: this process's memory tier of one cache."""

    hits: int  #: gets and ``in`` tests answered from memory
    misses: int  #: gets that went to SQLite while the tier was on
    items: int  #: entries held now
    size: int  #: bytes counted for them (keys, values and a fixed overhead per entry)
    size_limit: int  #: memory_size_limit
    item_limit: int  #: memory_item_limit


# An entry: (stored, fetch_mode, index, tag, expire_time, db_key, raw, nbytes). `stored` is the
# value itself when `fetch_mode` is None, the serialized column value to decode on a hit when it
# is a mode, and nothing when it is ABSENT: the key was missing (or expired) in the database.
Entry = tuple
ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT", "__slots__": ()})()


class MemoryTier:
    """One cache's entries in this process: an LRU map bounded in bytes and items.

    Lookups take no lock (single dict operations are atomic); inserts and removals take `lock`
    so that the byte count stays exact. Hit and miss counts are plain increments: exact with one
    thread, approximate when threads race on them.
    """

    def __init__(
        self, words: memoryview, size_limit: int, item_limit: int, plain_keys: bool, put: Any
    ) -> None:
        self.words = words
        self.entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self.size = 0
        self.hits = 0
        self.misses = 0
        self.lock = threading.Lock()
        self.size_limit = size_limit
        self.item_limit = item_limit
        # One item may take at most this share of the byte budget, so that one large value does
        # not flush everything else.
        self.max_entry = size_limit // 8
        # Below these the map has room to spare: written values are kept.
        self.spare_size = size_limit - size_limit // 8
        self.spare_items = item_limit - item_limit // 8
        # With the standard Disk.put, str and bytes keys are their own database key (raw): the
        # map is keyed by them directly, and a hit needs no put().
        self.plain_keys = plain_keys
        # Admission: a bitmap of the hashes of keys read (or written) lately and not kept. A read
        # keeps a key (with no entry) only if it was seen lately: a key read once is not worth a
        # fill. A write keeps its value also while the map has room to spare. Once the map is
        # full, "lately" is within as many keys as it holds: a scan over more items than fit
        # neither flushes the map nor pays for filling it.
        self.recent = bytearray(_RECENT_SLOTS)
        self.noted = 0
        self.forget_after = item_limit
        self._put = put
        _tiers.add(self)

    def seen_lately(self, map_key: Hashable) -> bool:
        """Whether `map_key` was looked up here lately (see `__init__`); notes it."""
        self.noted += 1
        if self.noted > self.forget_after:
            self.forget()
        slot = hash(map_key) & RECENT_MASK
        recent = self.recent
        if recent[slot]:
            return True
        recent[slot] = 1
        return False

    def forget(self) -> None:
        """Reset the admission bitmap."""
        self.recent = bytearray(_RECENT_SLOTS)
        self.noted = 0

    def _update_forget_after(self) -> None:
        # When the map is full: forget after as many lookups as it holds items (so a cyclic scan
        # over more items than fit is not kept at all); while it has room, after as many as it
        # may hold.
        if self.size >= self.spare_size or len(self.entries) >= self.spare_items:
            self.forget_after = len(self.entries) + 128
        else:
            self.forget_after = self.item_limit

    def admits_write(self, map_key: Hashable) -> bool:
        """Whether a write of a key with no entry keeps its value: when the map has room to
        spare, or when the key was seen lately."""
        if self.size < self.spare_size and len(self.entries) < self.spare_items:
            return True
        return self.seen_lately(map_key)

    def key_for(self, key: Any) -> Hashable:
        """The map key of a cache key (the hot path handles plain str/bytes keys inline)."""
        db_key, raw = self._put(key)
        return self.map_key(db_key, raw)

    def map_key(self, db_key: Any, raw: Any) -> Hashable:
        """Map key for a database key: equal exactly when the database keys are the same row.

        Raw keys of the standard Disk are used as they are (Python's equality of str, bytes,
        int and float agrees with SQLite's for them); anything else is a tuple, which no raw
        key equals. NaN keys (never found by SQLite) map to None, which is never stored.
        """
        if raw and self.plain_keys:
            if type(db_key) is float and math.isnan(db_key):
                return None
            return db_key
        map_key = (db_key, raw)
        try:
            hash(map_key)
        except TypeError:  # a custom Disk's odd key: SQLite will say what is wrong with it
            return None
        return map_key

    def store(
        self,
        map_key: Hashable,
        stored: Any,
        fetch_mode: int | None,
        index: int,
        tag: int,
        expire_time: float | None,
        db_key: Any,
        raw: Any,
    ) -> None:
        """Keep an entry (replacing any for the key) and evict the least recently used beyond
        the bounds. `map_key` must not be None."""
        kind = type(stored)
        nbytes = ENTRY_OVERHEAD + (len(stored) if kind is bytes or kind is str else 16)
        kind = type(db_key)
        nbytes += len(db_key) if kind is bytes or kind is str else 16
        if nbytes > self.max_entry:
            self.discard(map_key)
            return
        entry = (stored, fetch_mode, index, tag, expire_time, db_key, raw, nbytes)
        entries = self.entries
        with self.lock:
            old = entries.get(map_key)
            entries[map_key] = entry
            if old is None:
                self.size += nbytes
            else:
                entries.move_to_end(map_key)
                self.size += nbytes - old[7]
            if self.size > self.size_limit or len(entries) > self.item_limit:
                self._evict()
            elif old is None:
                self._update_forget_after()

    def _evict(self) -> None:
        # Under the lock: drop the least recently used until within both bounds.
        entries = self.entries
        while entries and (self.size > self.size_limit or len(entries) > self.item_limit):
            _, evicted = entries.popitem(last=False)
            self.size -= evicted[7]
        self._update_forget_after()

    def discard(self, map_key: Hashable) -> None:
        """Forget the entry of a key, if any."""
        if map_key in self.entries:
            with self.lock:
                old = self.entries.pop(map_key, None)
                if old is not None:
                    self.size -= old[7]

    def clear(self) -> None:
        """Forget every entry."""
        with self.lock:
            self.entries.clear()
            self.size = 0
            self._update_forget_after()
        self.recent = bytearray(_RECENT_SLOTS)
        self.noted = 0

    def set_limits(self, size_limit: int, item_limit: int) -> None:
        """New bounds; entries beyond them are evicted at once."""
        with self.lock:
            self.size_limit = size_limit
            self.item_limit = item_limit
            self.max_entry = size_limit // 8
            self.spare_size = size_limit - size_limit // 8
            self.spare_items = item_limit - item_limit // 8
            self._evict()

    def stats(self, reset: bool = False) -> MemoryStats:
        result = MemoryStats(
            self.hits, self.misses, len(self.entries), self.size, self.size_limit, self.item_limit
        )
        if reset:
            self.hits = self.misses = 0
        return result

    def reset_after_fork(self) -> None:
        # Another thread of the parent may have held the lock at the fork. The entries stay:
        # the mapping is shared, so they are validated exactly as in the parent.
        self.lock = threading.Lock()


_tiers: weakref.WeakSet[MemoryTier] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    _random.seed(os.urandom(32))
    for tier in list(_tiers):
        tier.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
