"""The memory tier: recently read and written items of one Cache, kept in this process.

A get answered from SQLite costs a few microseconds; a dict lookup a fraction of one. Each Cache
object keeps a small LRU map of its items (`MemoryTier`), bounded in bytes and in items. What
makes it safe to answer from that map is a version check shared by every process that uses the
cache directory: the file ``cache.db-versions``, mapped into memory, holds for each of `BUCKETS`
key-hash buckets two 64-bit words, ``pre`` and ``post``.

The protocol (see docs/memory.rst for the long form):

Writers (_store/versions.py, with the store that runs it). Every statement that changes a row
  stores a fresh random nonce ``n`` in its key's bucket's ``pre`` under SQLite's write lock, and
  after the transaction has ended stores ``post = n`` if ``pre`` is still ``n``.

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
keeps "absent" the same way, marked on the entry it finds, in place and without the lock. Safe
against a get reading that entry meanwhile (the hit path reads the tag, then the expiry, the
mode, the value): the tag is stored last, so a get that sees it sees the rest; one that validated
the old tag before the delete began (``pre`` has moved on since: the old tag never validates
again) reads the old value or "absent", both right for a get that overlapped the delete. The
value stays (a get between mode and value must not read None), and with it the entry's byte
count (the tier counts what it holds); so does the expiry (a get that read it after the delete
began, then the old mode, judges the old value by its own expiry).

Memory ordering: each word is one aligned 8-byte load or store (a memoryview cast to ``'Q'``:
a fixed-size memcpy in CPython); SQLite's WAL locking makes full memory barriers around every
commit and read transaction, ordering them against the SELECT and the commit.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from .._disk.disk import UNSTORABLE, as_read_back
from .._metrics import MemoryStats
from .._store.versions import pre_index
from .admission import Admission
from .hitpath import ABSENT, FILL, MISS, Entry, HitPath, ReadNotes, hit_functions, map_key_of

__all__ = [
    "ABSENT", "FILL", "MISS", "Entry", "Fill", "HitPath", "MemoryStats", "MemoryTier", "ReadNotes",
]

# Rough bytes per entry beyond key and value (entry, map node, slot), counted towards the limit.
ENTRY_OVERHEAD = 200
# Values of these exact (immutable) types are kept as they are; others serialized (decoded per hit).
IMMUTABLE_TYPES = frozenset({bytes, str, int, float, bool, complex, type(None)})


# --- the in-process map (its entries, keys and the hit path: _memory/hitpath.py) --------------


class Fill(NamedTuple):
    """A read's permission to keep what its SELECT finds (`begin_fill`); `version` None: the old
    entry must go, and nothing may be kept."""

    map_key: Hashable
    word: int  # index of the bucket's ``pre`` word
    version: int | None


_new_entry = object.__new__


def _never(key: Any, default: Any) -> Any:
    return MISS  # (the hit path before it is built)


class MemoryTier:
    """One cache's entries in this process: an LRU map bounded in bytes and items, and the rules
    that keep it exact (the module docstring): `hit` answers a get from valid entries,
    `begin_fill`/`finish_fill` keep what a read found, `after_write`/`after_delete` keep what a
    write committed. Which keys are kept, and whether gets look the map up at all, is its
    `admission` policy's (_memory/admission.py).

    Lookups take no lock (single dict operations are atomic); inserts and removals take `lock`
    so that the byte count stays exact.
    """

    def __init__(
        self, words: memoryview, size_limit: int, item_limit: int, plain_keys: bool,
        faithful: bool, put: Callable[[Any], tuple[Any, Any]],
        fetch: Callable[[int, Any, Any, bool], Any], *, local: Any = None,
        reads: ReadNotes | None = None, guard: Callable[[], bool] | None = None,
        admits_reads: bool = True,
    ) -> None:
        """`words` validate the entries; `put` and `fetch` are the Disk's (a key's database
        key; a kept serialized value decoded). `local`: the store's thread-local, whose states
        say which version words their connection bumps (None: fill from any). `reads` hears of
        each get answered. `guard`: entries are answered only while it returns True (a remote's
        lease). `admits_reads`: a read that misses is noted and may fill (`begin_fill`);
        without it the caller fills by its own rules, and counts its misses (`count_miss`)."""
        self.words = words
        self.local = local
        self.entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self.size = 0
        # For `Cache.metrics`: entries kept (hits that answered "absent", and entries found
        # invalidated by a write, are counted by `admission`: the hit path counts them too).
        self.fills = 0
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
        self.admission = Admission(item_limit)
        self._put = put
        self._fetch = fetch
        self._reads = reads
        self._guard = guard
        self._admits_reads = admits_reads
        self.hit: HitPath = _never
        # `hit` while gets look the map up; None while a sampling gap lasts. Cache.get reads
        # this one and counts a skipped get itself (`skipped`, inline): no call per skipped get.
        self.answering: HitPath | None = None
        self._answer: HitPath = _never
        self._skipping: HitPath = _never
        self.build_hit_path()
        _tiers.add(self)

    def _set_bounds(self) -> None:
        # One item may take at most this share of the byte budget, so that one large value does
        # not flush everything else.
        self.max_entry = self.size_limit // 8
        # Below these the map has room to spare: written values are kept.
        self.spare_size = self.size_limit - self.size_limit // 8
        self.spare_items = self.item_limit - self.item_limit // 8

    @property
    def hits(self) -> int:
        """Gets (and ``in`` tests) answered from memory, with a value or "absent"."""
        admission = self.admission
        return admission.hits + admission.absent_hits - admission.absent_at_reset

    @property
    def misses(self) -> int:
        """Gets that read the store while the tier was on (a sampling gap's are counted as
        it begins: those still to come are not yet misses)."""
        admission = self.admission
        return admission.misses - admission.skip

    @property
    def value_hits(self) -> int:
        """Gets answered from memory with a value since the tier was made (for `Cache.metrics`,
        whose counts `stats(reset=True)` leaves alone, as it leaves `absent_hits`)."""
        admission = self.admission
        return admission.hits + admission.earlier_hits

    @property
    def absent_hits(self) -> int:
        """Hits that answered "absent" (for `Cache.metrics`)."""
        return self.admission.absent_hits

    @property
    def invalidated(self) -> int:
        """Entries found invalidated by a write, of any process (for `Cache.metrics`): counted
        on the miss path only, as misses are (with `admits_reads`, by `begin_fill`)."""
        return self.admission.invalidated

    def count_miss(self) -> None:
        """A get the hit path was not asked for read the store (a tier without `admits_reads`)."""
        self.admission.misses += 1

    # --- the hit path -------------------------------------------------------------------------

    def build_hit_path(self) -> None:
        """(Re)build `hit`, the function that answers a plain get: ``hit(key, default)`` returns
        the value (`default` for a key known absent), or MISS or FILL (see there).

        The hottest path of all, where one method call or attribute load costs a tenth of the
        hit (measured with benchmarks.micro): everything it reads is bound once, here, and it
        is built anew when what it binds changes (`rebind`; whether `reads` tracks reads: the
        eviction policy or statistics setting changed). While a sampling gap lasts (the
        admission policy's "Sampling"), `hit` is the skipping function instead, which counts
        the skipped gets down (they are counted as misses when the gap begins), and
        `answering` is None. Neither holds a reference to the tier (only a weak one, to switch
        between the two): a dropped cache's tier is freed at once, its version file closed.

        Each answer counts once: a value in ``hits``, "absent" in ``absent_hits`` (the tier's
        `hits` is their sum), so that a known-absent hit costs no second increment.
        """
        reads = self._reads  # bound only while it tracks reads (a hit tests one name)
        self._answer, self._skipping = hit_functions(
            self.admission, self.entries, self.words, self.plain_keys, self._put, self._fetch,
            reads if reads is not None and reads.tracks_reads else None, self._guard,
            self._admits_reads, weakref.ref(self),
        )
        admission = self.admission
        if admission.skip > 0:
            self.start_gap()
        else:
            self.end_gap()

    def start_gap(self) -> None:
        """A sampled get missed the map: the next gets of the gap skip it."""
        self.hit, self.answering = self._skipping, None

    def end_gap(self) -> None:
        """The last get of a sampling gap skipped the map: the next get looks it up."""
        self.hit = self.answering = self._answer

    def fills_unanswered(self) -> bool:
        """A get `hit` cannot answer (it asks for more than the value; not a stream) is about to
        read the store: whether it may ask `begin_fill`. Not while a sampling gap lasts (the get
        is counted as a skipped one)."""
        hit = self.hit
        if hit is self._answer:
            return True
        hit(None, None)
        return False

    def lookup(self, key: Any, touch: bool = True) -> Entry | None:
        """The entry that answers `key` now, or None: no entry, or one a write has invalidated
        since (its tag is no longer its bucket's ``pre``), or expired. `touch`: count it as
        recently used (``in`` does not). For ``in``; a get asks `hit`."""
        map_key = self.key_for(key)
        entry = self.entries.get(map_key)
        if entry is None:
            return None
        if self.words[entry.word] != entry.tag:
            self.admission.invalidated += 1
            return None
        expires = entry.expire_time
        if expires is not None and expires <= time.time():
            return None
        if self._guard is not None and not self._guard():
            return None
        self.admission.hits += 1
        if touch:
            try:
                self.entries.move_to_end(map_key)
            except KeyError:  # evicted by another thread just now
                pass
        return entry

    def contains(self, key: Any) -> bool | None:
        """Whether `key` is present, as far as a valid entry says (None: none says)."""
        entry = self.lookup(key, touch=False)
        return None if entry is None else entry.fetch_mode is not ABSENT

    def begin_fill(self, db_key: Any, raw: Any, seen: bool = False) -> Fill | None:
        """Before the SELECT of a get the tier could not answer: may its result be kept?

        A key with an entry (invalid or expired) is refilled; any other is kept only when it was
        looked up lately (`seen`: the hit path has just found it so, answering FILL: not asked
        again). Either way only if its bucket is clean now (``pre == post``, both read before
        the SELECT). None: nothing to keep and nothing to discard.
        """
        self.admission.misses += 1
        kind = type(db_key)
        if raw and (kind is str or kind is bytes) and self.plain_keys:
            map_key: Hashable = db_key  # (`map_key`'s commonest answer, inline: every fill)
        else:
            map_key = self.map_key(db_key, raw)
        state = getattr(self.local, "state", None)  # this thread's connection (None: opens next)
        if map_key is None or (state is not None and state.opening.words is not self.words):
            return None  # (a connection to a database removed while open: not the tier's)
        entry = self.entries.get(map_key)
        if entry is not None:
            self.admission.invalidated += self.words[entry.word] != entry.tag  # (else expired)
            index: int | None = entry.word
        elif seen or self.admission.seen_lately(map_key):
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
        version = fill.version
        if version is not None and (
            expire_time is None or type(expire_time) is float or type(expire_time) is int
        ):
            if type(value) in IMMUTABLE_TYPES:
                self.store(fill.map_key, value, None, fill.word, version, expire_time, db_key, raw)
                return
            if not has_file:
                self.store(fill.map_key, db_value, mode, fill.word, version, expire_time, db_key, raw)
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
        if entry is None and not (  # a new key is kept with room to spare, or seen lately
            (self.size < self.spare_size and len(self.entries) < self.spare_items)
            or self.admission.seen_lately(map_key)
        ):
            return  # no room, and not seen lately: not kept
        version: int | None
        if len(published) == 1 and (kind is str or kind is bytes):
            # The statement bumped one bucket: the key's, by the hash pre_index takes.
            ((index, version),) = published.items()
        else:
            found = entry.word if entry is not None else pre_index(db_key)
            if found is None:
                return  # a key of a type the tier does not keep
            index, version = found, published.get(found)
        if version is None or self.words[index] != version:
            self.discard(map_key)  # a later writer has started: its value may be newer
            return
        if self.faithful and type(value) in IMMUTABLE_TYPES:  # `keep_value`'s commonest case
            self.store(map_key, value, None, index, version, expire_time, db_key, raw)
        else:
            self.keep_value(map_key, value, db_value, mode, index, version, expire_time, db_key, raw)

    def keep_value(
        self, map_key: Hashable, value: Any, db_value: Any, mode: int, index: int, tag: int,
        expire_time: float | None, db_key: Any, raw: Any,
    ) -> None:
        """Keep a value tagged `tag` (`index`: its bucket's word): as it is when it is of an
        immutable type and the Disk faithful, else its serialized form as a fetch would see it."""
        if self.faithful and type(value) in IMMUTABLE_TYPES:
            self.store(map_key, value, None, index, tag, expire_time, db_key, raw)
        elif (db_value := as_read_back(db_value)) is not UNSTORABLE:
            self.store(map_key, db_value, mode, index, tag, expire_time, db_key, raw)
        else:
            self.discard(map_key)

    def after_delete(self, db_key: Any, raw: Any, published: dict[int, int] | None) -> None:
        """After a delete committed: keep "absent" if the key had an entry and no later writer
        has started (the rule of `after_write`), marked on that entry in place, lock-free (see
        the module docstring: a new entry was four fifths of the tier's part of a delete); else
        forget the entry."""
        kind = type(db_key)
        if raw and (kind is str or kind is bytes) and self.plain_keys:
            map_key: Hashable = db_key  # (`map_key`'s commonest answer, inline: every delete)
        else:
            map_key = self.map_key(db_key, raw)
        entry = self.entries.get(map_key)
        if entry is None:
            return
        word = entry.word
        version = published.get(word) if published else None
        if version is not None and self.words[word] == version:
            # (The expiry stays: a get that validated the old tag and reads the expiry, then
            # the old mode, must judge the old value by its own expiry. On "absent" it only
            # sends a get to the database once it has passed.)
            entry.fetch_mode = ABSENT
            entry.tag = version  # last (the module docstring)
            self.fills += 1
        else:
            self.discard(map_key)

    def forget_key(self, db_key: Any, raw: Any) -> None:
        """Forget the entry of a database key, if any (its item changed in a way not kept)."""
        self.discard(self.map_key(db_key, raw))

    # --- admission and keys ---------------------------------------------------------------------

    def _map_changed(self) -> None:
        # Under the lock: the admission policy's window follows how full the map is.
        entries = len(self.entries)
        full = self.size >= self.spare_size or entries >= self.spare_items
        self.admission.map_changed(full, entries, self.item_limit)

    def key_for(self, key: Any) -> Hashable:
        """The map key of a cache key."""
        kind = type(key)
        if (kind is str or kind is bytes) and self.plain_keys:
            plain: Hashable = key
            return plain
        db_key, raw = self._put(key)
        return map_key_of(db_key, raw, self.plain_keys)

    def map_key(self, db_key: Any, raw: Any) -> Hashable:
        """Map key for a database key (`map_key_of`)."""
        return map_key_of(db_key, raw, self.plain_keys)

    # --- the map --------------------------------------------------------------------------------

    def store(
        self, map_key: Hashable, stored: Any, fetch_mode: Any, index: int, tag: int,
        expire_time: float | None, db_key: Any, raw: Any,
    ) -> None:
        """Keep an entry (replacing any for the key) and evict the least recently used beyond
        the bounds. `map_key` must not be None."""
        # sys.getsizeof's sizes (a big int's and wide text's too) less the garbage collector's
        # header, which no kept type (numbers, text, bytes, None) has: getsizeof parses its
        # arguments by keyword rules, about 1,100 instructions more a call (a kept set: 2 of 13).
        nbytes = ENTRY_OVERHEAD + stored.__sizeof__() + db_key.__sizeof__()
        if nbytes > self.max_entry:
            self.discard(map_key)
            return
        # Entry(...), inline: its __init__ is a Python frame of eight arguments, a third of
        # the cost of making one (every fill, every set a tier keeps).
        entry = _new_entry(Entry)
        entry.stored = stored
        entry.fetch_mode = fetch_mode
        entry.word = index
        entry.tag = tag
        entry.expire_time = expire_time
        entry.db_key = db_key
        entry.raw = raw
        entry.nbytes = nbytes
        self.fills += 1
        entries = self.entries
        lock = self.lock
        lock.acquire()  # (not `with`: twice the cost of a C lock's acquire and release, 3.11)
        try:
            old = entries.setdefault(map_key, entry)
            if old is entry:  # a new entry: the map grew
                size = self.size = self.size + nbytes
                # Past a bound it is also past the spare room: one test while there is room.
                if (
                    size >= self.spare_size or len(entries) >= self.spare_items
                    or self.admission.forget_after != self.item_limit
                ):  # (with room to spare, as before: then the map's fill changes nothing)
                    if size > self.size_limit or len(entries) > self.item_limit:
                        self._evict()
                    else:
                        self._map_changed()
            else:
                entries[map_key] = entry
                entries.move_to_end(map_key)
                self.size += nbytes - old.nbytes
                if self.size > self.size_limit or len(entries) > self.item_limit:
                    self._evict()
        finally:
            lock.release()

    def _evict(self) -> None:
        # Under the lock: drop the least recently used until within both bounds.
        entries = self.entries
        while entries and (self.size > self.size_limit or len(entries) > self.item_limit):
            _, evicted = entries.popitem(last=False)
            self.size -= evicted.nbytes
        self._map_changed()

    def discard(self, map_key: Hashable) -> None:
        """Forget the entry of a key, if any."""
        if map_key in self.entries:
            lock = self.lock
            lock.acquire()
            try:
                old = self.entries.pop(map_key, None)
                if old is not None:
                    self.size -= old.nbytes
            finally:
                lock.release()

    def clear(self) -> None:
        """Forget every entry."""
        with self.lock:
            self.entries.clear()
            self.size = 0
            self._map_changed()
        self.admission.forget()

    def rebind(self, words: memoryview) -> None:
        """Validate against new version words (the directory was made anew): forget all."""
        self.words = words
        self.clear()
        self.build_hit_path()

    def set_limits(self, size_limit: int, item_limit: int) -> None:
        """New bounds; entries beyond them are evicted at once."""
        with self.lock:
            self.size_limit = size_limit
            self.item_limit = item_limit
            self._set_bounds()
            self._evict()

    def stats(self, reset: bool = False) -> MemoryStats:
        """The tier's `MemoryStats`; with `reset`, zero the hit and miss counts afterwards."""
        result = MemoryStats(
            self.hits, self.misses, len(self.entries), self.size, self.size_limit, self.item_limit
        )
        if reset:
            self.admission.reset_counts()
        return result

    def reset_after_fork(self) -> None:
        # Another thread of the parent may have held the lock at the fork. The entries stay
        # (the mapping is shared: they are validated exactly as in the parent).
        self.lock = threading.Lock()


_tiers: weakref.WeakSet[MemoryTier] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for tier in list(_tiers):
        tier.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
