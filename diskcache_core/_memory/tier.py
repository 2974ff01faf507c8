"""The memory tier: recently read and written items of one Cache, kept in this process.

A get answered from SQLite costs a few microseconds; a dict lookup a fraction of one. Each Cache
object keeps a small LRU map of its items (`MemoryTier`), bounded in bytes and in items. What
makes it safe to answer from that map is a version check shared by every process that uses the
cache directory: the file ``cache.db-versions``, mapped into memory, holds for each of `BUCKETS`
key-hash buckets two 64-bit words, ``pre`` and ``post``.

The protocol (see docs/memory.rst for the long form):

Writers. Every statement that inserts, changes (value or expiry) or deletes a row fires a
  per-connection TEMP trigger (`_store.schema.VERSION_TRIGGERS`) that calls `change_recorder`'s
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

Memory ordering: each word is one aligned 8-byte load or store (a memoryview cast to ``'Q'``:
a fixed-size memcpy in CPython); SQLite's WAL locking makes full memory barriers around every
commit and read transaction, ordering them against the SELECT and the commit.
"""

from __future__ import annotations

import math
import os
import random
import sys
import threading
import time
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from .._disk.disk import UNSTORABLE, as_read_back
from .._errors import note_interrupt
from .._metrics import MemoryStats
from .._store.versionfile import BUCKETS, HEADER_WORDS

__all__ = ["ABSENT", "Entry", "Fill", "MemoryStats", "MemoryTier", "change_recorder", "pre_index",
           "publish"]  # fmt: skip

_HEADER_WORDS = HEADER_WORDS
_MASK = BUCKETS - 1

# Rough bytes per entry beyond key and value (entry, map node, slot), counted towards the limit.
ENTRY_OVERHEAD = 200
# Sampling: a tier that answers fewer than one lookup in RARE_HITS (over a window of at least
# REVIEW_MISSES misses, ended when the window of keys seen lately ends) is looked up by one get
# in SAMPLE_GAP + 1; by every get again once one sampled lookup in COMMON_HITS hits (over
# SAMPLED_REVIEW sampled misses). A hit saves 4 us or more; a lookup that misses costs 0.2-0.3 us
# (a small database) to 0.4-0.8 us (one far larger than the CPU's caches; measured): sampling
# gains below one hit in 20 to 5 lookups, and both thresholds stay under that.
RARE_HITS = 32
COMMON_HITS = 16
REVIEW_MISSES = 1024
SAMPLE_GAP = 7
SAMPLED_REVIEW = 128
# Values of these exact (immutable) types are kept as they are; others serialized (decoded per hit).
IMMUTABLE_TYPES = frozenset({bytes, str, int, float, bool, complex, type(None)})

_crc32 = zlib.crc32
# Nonces: 64 random bits, seeded from os.urandom (reseeded in a forked child: never the same).
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


def change_recorder(state: Any, source: Any) -> Callable[[Any], None]:
    """The SQL function the version triggers call with a changed row's key.

    Runs inside the writing statement, under the write lock: stores a fresh nonce in the bucket's
    ``pre`` and remembers it in ``state.versions`` (for `publish`). A bucket already bumped by
    this thread's open transaction is not bumped again: its ``post`` cannot equal ``pre`` before
    the transaction ends, so no reader can have filled from it meanwhile.
    """
    getrandbits = _random.getrandbits
    crc32 = _crc32

    def item_changed(db_key: Any) -> None:
        try:
            words = source.writable(state)  # the pool's now (mapped anew if its file was lost)
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
        except BaseException as exc:  # a signal handler's, say: see _errors.note_interrupt
            note_interrupt(exc)
            raise

    return item_changed


def publish(words: memoryview, versions: dict[int, int]) -> None:
    """After the transaction that made `versions` has ended: ``post = pre`` where ``pre`` is
    still ours (otherwise a later writer has started, and it will publish)."""
    for index, nonce in versions.items():
        if words[index] == nonce:
            words[index + 1] = nonce


# --- the in-process map --------------------------------------------------------------------------


ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT", "__slots__": ()})()


class Entry:
    """One kept item: its value (or that it is absent) and the tag that validates it.

    `stored` is the value itself when `fetch_mode` is None, the serialized column value to decode
    on each hit when it is a Disk mode, and nothing when `fetch_mode` is ABSENT: the key was
    missing (or expired) in the database. `tag` is the bucket's ``pre`` word the entry is valid
    for (`word` is that word's index). A class with slots, not a named tuple: unpacking a tuple
    subclass takes Python's slow path, and the hot get reads only a few fields.
    """

    __slots__ = ("stored", "fetch_mode", "word", "tag", "expire_time", "db_key", "raw", "nbytes")

    def __init__(
        self, stored: Any, fetch_mode: Any, word: int, tag: int, expire_time: float | None,
        db_key: Any, raw: Any, nbytes: int,
    ) -> None:
        self.stored = stored
        self.fetch_mode = fetch_mode
        self.word = word
        self.tag = tag
        self.expire_time = expire_time
        self.db_key = db_key
        self.raw = raw
        self.nbytes = nbytes


class Fill(NamedTuple):
    """A read's permission to keep what its SELECT finds (`begin_fill`); `version` None: the old
    entry must go, and nothing may be kept."""

    map_key: Hashable
    word: int  # index of the bucket's ``pre`` word
    version: int | None


class MemoryTier:
    """One cache's entries in this process: an LRU map bounded in bytes and items, and the rules
    that keep it exact (the module docstring): `lookup` answers only from valid entries (Cache.get inlines it),
    `begin_fill`/`finish_fill` keep what a read found, `after_write`/`after_delete` keep what a
    write committed.

    Lookups take no lock (single dict operations are atomic); inserts and removals take `lock`
    so that the byte count stays exact. Hit and miss counts are plain increments: exact with one
    thread, approximate when threads race on them.
    """

    def __init__(
        self, words: memoryview, size_limit: int, item_limit: int, plain_keys: bool,
        faithful: bool, put: Callable[[Any], tuple[Any, Any]],
    ) -> None:
        self.words = words
        self.local: Any = None  # the store's thread-local, whose states hold their connections
        self.entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self.size = 0
        self.hits = 0
        self.misses = 0
        # For `Cache.metrics`: hits that answered "absent", entries kept, and entries found
        # invalidated by a write (counted on the miss path only, as hits and misses are).
        self.absent_hits = self.fills = self.invalidated = 0
        self.lock = threading.Lock()
        self.size_limit = size_limit
        self.item_limit = item_limit
        self._set_bounds()
        # With the standard Disk.put, str and bytes keys are their own database key (raw): the
        # map is keyed by them directly, and a hit needs no put().
        self.plain_keys = plain_keys
        # With the standard Disk.store and fetch, a written value of an immutable type is what a
        # get returns: it is kept as it is (else its serialized form is kept and decoded).
        self.faithful = faithful
        # Admission: the hashes of keys read (or written) lately and not kept. A read keeps a
        # key (with no entry) only if it was seen lately: a key read once is not worth a fill.
        # A write keeps its value also while the map has room to spare. Once the map is full,
        # "lately" is within as many gets as it holds items (`forget_after`; the set is emptied
        # when the count of gets, hits plus misses, reaches `forget_at`): a cyclic scan over more
        # items than fit neither flushes the map nor pays for filling it. A set of hashes (not
        # a bitmap): two operations per miss, where Python's bit arithmetic cost a miss ~10%.
        self.recent: set[int] = set()
        self.forget_after = item_limit
        self.forget_at = item_limit
        # Sampling (`review`): while the tier answers fewer than one lookup in RARE_HITS, a get
        # that misses it makes the next `gap` gets skip it (`skip` counts them down in
        # Cache.get): a workload whose hot set does not fit would pay a lookup that cannot hit
        # on nearly every get. A sampled get still looks up, keeps and notes keys, and a hit
        # does not start a gap: a hot set that appears is found, and ends the sampling.
        self.skip = 0
        self.gap = 0
        self._reviewed = (0, 0)  # hits and misses at the last review
        self._samples_left = SAMPLED_REVIEW
        self._put = put
        _tiers.add(self)

    def _set_bounds(self) -> None:
        # One item may take at most this share of the byte budget, so that one large value does
        # not flush everything else.
        self.max_entry = self.size_limit // 8
        # Below these the map has room to spare: written values are kept.
        self.spare_size = self.size_limit - self.size_limit // 8
        self.spare_items = self.item_limit - self.item_limit // 8

    # --- reads --------------------------------------------------------------------------------

    def lookup(self, key: Any, touch: bool = True) -> Entry | None:
        """The entry that answers a get of `key` now, or None: no entry, or one a write has
        invalidated since (its tag is no longer its bucket's ``pre``), or expired. `touch`: count
        it as recently used (``in`` does not)."""
        kind = type(key)
        if (kind is str or kind is bytes) and self.plain_keys:
            map_key = key
        else:
            map_key = self.key_for(key)
        entry = self.entries.get(map_key)
        if entry is None:
            return None
        if self.words[entry.word] != entry.tag:
            self.invalidated += 1
            return None
        expires = entry.expire_time
        if expires is not None and expires <= time.time():
            return None
        self.hits += 1
        if touch:
            try:
                self.entries.move_to_end(map_key)
            except KeyError:  # evicted by another thread just now
                pass
        return entry

    def begin_fill(self, db_key: Any, raw: Any) -> Fill | None:
        """Before the SELECT of a get the tier could not answer: may its result be kept?

        A key with an entry (invalid or expired) is refilled; any other is kept only when it was
        looked up lately. Either way only if its bucket is clean now (``pre == post``, both read
        before the SELECT). None: nothing to keep and nothing to discard.
        """
        self.misses += 1
        map_key = self.map_key(db_key, raw)
        state = getattr(self.local, "state", None)  # this thread's connection (None: opens next)
        if map_key is None or (state is not None and state.words is not self.words):
            return None  # (a connection to a database removed while open: not the tier's)
        entry = self.entries.get(map_key)
        if entry is not None:
            self.invalidated += self.words[entry.word] != entry.tag  # (else it expired)
            index: int | None = entry.word
        elif self.seen_lately(map_key):
            index = pre_index(db_key)  # None: a key of a type the tier does not keep
        else:
            return None
        if index is None:
            return None
        words = self.words
        version = words[index]
        if words[index + 1] != version:  # a write is in progress, or its writer died
            return Fill(map_key, index, None) if entry is not None else None
        return Fill(map_key, index, version)

    def finish_fill(
        self, fill: Fill, value: Any, db_value: Any, mode: int, has_file: bool,
        expire_time: float | None, db_key: Any, raw: Any,
    ) -> None:
        """After the SELECT found the item: keep it under the fill's version. An immutable value
        is kept as it is; another one inline in the database as its serialized form (decoded
        afresh on each hit); one from a value file is not kept, nor one whose expiry is not a
        number (a row written by hand: SQL compares it as SQLite does, Python could not)."""
        if fill.version is not None and (
            expire_time is None or type(expire_time) is float or type(expire_time) is int
        ):
            if type(value) in IMMUTABLE_TYPES:
                self.store(fill.map_key, value, None, fill.word, fill.version, expire_time, db_key, raw)
                return
            if not has_file:
                self.store(fill.map_key, db_value, mode, fill.word, fill.version, expire_time, db_key, raw)
                return
        self.discard(fill.map_key)

    def finish_fill_absent(self, fill: Fill, db_key: Any, raw: Any, known: bool) -> None:
        """No live item: keep that, if `known` to have no row (an expired one may live again)."""
        if fill.version is None or not known:
            self.discard(fill.map_key)
        else:
            self.store(fill.map_key, None, ABSENT, fill.word, fill.version, None, db_key, raw)

    # --- writes (write-through) ---------------------------------------------------------------

    def after_write(
        self, db_key: Any, raw: Any, published: dict[int, int] | None, value: Any,
        db_value: Any, mode: int, has_file: bool, expire_time: float | None,
    ) -> None:
        """After a set or add stored an item and committed: keep its value when that is provably
        the committed one — the nonce its statement stored in ``pre`` (in `published`) is still
        there, so no later write has started. Inside a transaction (`published` None) or with a
        value file, the old entry just goes."""
        kind = type(db_key)
        if raw and (kind is str or kind is bytes) and self.plain_keys:
            map_key: Hashable = db_key
        else:
            map_key = self.map_key(db_key, raw)
        if not published or has_file or map_key is None:
            self.discard(map_key)
            return
        entry = self.entries.get(map_key)
        if entry is None and not self.admits_write(map_key):
            return  # no room, and not seen lately: not kept
        index = entry.word if entry is not None else pre_index(db_key)
        if index is None:
            return  # a key of a type the tier does not keep
        version = published.get(index)
        if version is None or self.words[index] != version:
            self.discard(map_key)  # a later writer has started: its value may be newer
            return
        if self.faithful and type(value) in IMMUTABLE_TYPES:
            self.store(map_key, value, None, index, version, expire_time, db_key, raw)
        elif (db_value := as_read_back(db_value)) is not UNSTORABLE:  # as a fetch would see it
            self.store(map_key, db_value, mode, index, version, expire_time, db_key, raw)
        else:
            self.discard(map_key)

    def after_delete(self, db_key: Any, raw: Any, published: dict[int, int] | None) -> None:
        """After a delete committed: keep "absent" if the key had an entry and no later writer
        has started (the rule of `after_write`); else forget the entry."""
        map_key = self.map_key(db_key, raw)
        entry = self.entries.get(map_key)
        if entry is None:
            return
        version = published.get(entry.word) if published else None
        if version is not None and self.words[entry.word] == version:
            self.store(map_key, None, ABSENT, entry.word, version, None, db_key, raw)
        else:
            self.discard(map_key)

    def forget_key(self, db_key: Any, raw: Any) -> None:
        """Forget the entry of a database key, if any (its item changed in a way not kept)."""
        self.discard(self.map_key(db_key, raw))

    # --- admission and keys ---------------------------------------------------------------------

    def seen_lately(self, map_key: Hashable) -> bool:
        """Whether `map_key` was looked up here lately (see `__init__`); notes it."""
        seen = hash(map_key)
        recent = self.recent
        if seen in recent:
            return True
        # Writes note keys too, and gets are the clock: the set's size bounds it between gets.
        if self.hits + self.misses >= self.forget_at or len(recent) >= self.forget_after:
            self.forget_recent()
        recent.add(seen)
        return False

    def forget_recent(self) -> None:
        """The window of keys seen lately has passed: start it afresh, and review how often the
        tier answers (over at least REVIEW_MISSES misses)."""
        self.forget()
        if not self.gap and self.misses - self._reviewed[1] >= REVIEW_MISSES:
            self.review()

    def sampled_miss(self) -> MemoryTier | None:
        """While sampling: a get that looked the tier up missed it. The next `gap` gets skip the
        tier (each counted as a miss); every SAMPLED_REVIEW such misses, `review`. Returns what
        the next get looks up: None (it skips the tier), or the tier when sampling stopped."""
        self._samples_left -= 1
        if self._samples_left <= 0:
            self._samples_left = SAMPLED_REVIEW
            self.review()
            if not self.gap:
                return self
        self.skip = self.gap
        return None

    def review(self) -> None:
        """Start or stop sampling by how often lookups hit since the last review."""
        last_hits, last_misses = self._reviewed
        hits, misses = self.hits - last_hits, self.misses - last_misses
        self._reviewed = (self.hits, self.misses)
        if hits < 0 or misses < 0:  # a stats reset in another thread raced: no window
            return
        gap = self.gap
        lookups = hits + misses // (gap + 1)  # skipped gets are counted as misses
        if not gap:
            if hits * RARE_HITS < lookups:
                self.gap = SAMPLE_GAP
                self._samples_left = SAMPLED_REVIEW
        elif hits * COMMON_HITS >= lookups:  # every get looks the tier up again
            self.gap = self.skip = 0

    def forget(self) -> None:
        """Forget which keys were seen lately."""
        self.recent.clear()
        self.forget_at = self.hits + self.misses + self.forget_after

    def _update_forget_after(self) -> None:
        # When the map is full: forget after as many gets as it holds items (so a cyclic scan
        # over more items than fit is not kept at all: each key comes back after more gets than
        # that); while it has room, after as many as it may hold.
        if self.size >= self.spare_size or len(self.entries) >= self.spare_items:
            forget_after = len(self.entries)
        else:
            forget_after = self.item_limit
        self.forget_after = forget_after
        self.forget_at = min(self.forget_at, self.hits + self.misses + forget_after)

    def admits_write(self, map_key: Hashable) -> bool:
        """Whether a write of a key with no entry keeps its value: when the map has room to
        spare, or when the key was seen lately."""
        if self.size < self.spare_size and len(self.entries) < self.spare_items:
            return True
        return self.seen_lately(map_key)

    def key_for(self, key: Any) -> Hashable:
        """The map key of a cache key (`lookup` handles plain str/bytes keys inline)."""
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
            key: Hashable = db_key
            return key
        map_key = (db_key, raw)
        try:
            hash(map_key)
        except TypeError:  # a custom Disk's odd key: SQLite will say what is wrong with it
            return None
        return map_key

    # --- the map --------------------------------------------------------------------------------

    def store(
        self, map_key: Hashable, stored: Any, fetch_mode: Any, index: int, tag: int,
        expire_time: float | None, db_key: Any, raw: Any,
    ) -> None:
        """Keep an entry (replacing any for the key) and evict the least recently used beyond
        the bounds. `map_key` must not be None."""
        nbytes = ENTRY_OVERHEAD + sys.getsizeof(stored) + sys.getsizeof(db_key)  # (a big int's too)
        if nbytes > self.max_entry:
            self.discard(map_key)
            return
        entry = Entry(stored, fetch_mode, index, tag, expire_time, db_key, raw, nbytes)
        self.fills += 1
        entries = self.entries
        with self.lock:
            old = entries.get(map_key)
            entries[map_key] = entry
            if old is None:
                self.size += nbytes
            else:
                entries.move_to_end(map_key)
                self.size += nbytes - old.nbytes
            if self.size > self.size_limit or len(entries) > self.item_limit:
                self._evict()
            elif old is None:
                self._update_forget_after()

    def _evict(self) -> None:
        # Under the lock: drop the least recently used until within both bounds.
        entries = self.entries
        while entries and (self.size > self.size_limit or len(entries) > self.item_limit):
            _, evicted = entries.popitem(last=False)
            self.size -= evicted.nbytes
        self._update_forget_after()

    def discard(self, map_key: Hashable) -> None:
        """Forget the entry of a key, if any."""
        if map_key in self.entries:
            with self.lock:
                old = self.entries.pop(map_key, None)
                if old is not None:
                    self.size -= old.nbytes

    def clear(self) -> None:
        """Forget every entry."""
        with self.lock:
            self.entries.clear()
            self.size = 0
            self._update_forget_after()
        self.forget()

    def rebind(self, words: memoryview) -> None:
        """Validate against new version words (the directory was made anew): forget all."""
        self.words = words
        self.clear()

    def set_limits(self, size_limit: int, item_limit: int) -> None:
        """New bounds; entries beyond them are evicted at once."""
        with self.lock:
            self.size_limit = size_limit
            self.item_limit = item_limit
            self._set_bounds()
            self._evict()

    def stats(self, reset: bool = False) -> MemoryStats:
        result = MemoryStats(
            self.hits, self.misses, len(self.entries), self.size, self.size_limit, self.item_limit
        )
        if reset:
            self.hits = self.misses = 0
            self._reviewed = (0, 0)
            self.forget_at = min(self.forget_at, self.forget_after)
        return result

    def reset_after_fork(self) -> None:
        # Another thread of the parent may have held the lock at the fork. The entries stay
        # (the mapping is shared: they are validated exactly as in the parent).
        self.lock = threading.Lock()


_tiers: weakref.WeakSet[MemoryTier] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    _random.seed(os.urandom(32))
    for tier in list(_tiers):
        tier.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
