"""The remote tier: Redis as a cache's source of truth, the host's directory a near cache of it.

A Cache opened with ``remote="redis://..."`` makes one `RemoteTier`, and its facade methods hand
every item operation to it (see `Cache`); without ``remote`` this module is never imported. Writes go to
Redis first and count as done when Redis acknowledged them; then this host's stamp of the item's
bucket is bumped, so no process of the host serves an older copy (_remote/stamps.py). Reads go
memory tier → this host's SQLite database → Redis, and a copy is served only while its stamp is
unchanged and the listener's lease is valid (_remote/listener.py keeps both true for other hosts'
writes). What Redis answered is kept as a copy under the stamp read before asking it.

Copies in the SQLite database are ordinary rows whose ``tag`` column holds their stamp (the real
tag lives in Redis); the memory tier's entries are validated by the stamp words instead of the
version words. Operations that cannot be done across hosts raise `RemoteUnsupportedError`.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, NoReturn, TypeVar

from .._store import schema as sql
from .._arguments import check_bindable, check_key, check_tag, expire_at, put_key, shape
from .._disk.disk import DELETE, ENOVAL, KEEP, Disk
from .._errors import DiskCacheError, RemoteOutcomeUnknownError, RemoteUnsupportedError
from .listener import ListenerThread, listener_for, release_listener
from .._memory.tier import ABSENT, MISS, MemoryTier, ReadNotes
from .._metrics import EvictionCounts, RemoteCounts, RemoteMetrics
from .client import RemoteStore
from .fills import Fill, Fills, renew_copies, write_copies
from .form import decode_item, encode_item, encode_key, serialized, stamp_hash
from .stamps import LEASE_AHEAD, Member, RemoteWords
from .tagops import RemoteTagOperations
from .._settings import REMOTE_DEFAULTS
from .._store.store import Store
from .._store.versionfile import weak_method

__all__ = ["RemoteTier"]

_T = TypeVar("_T")


class RemoteTier(RemoteTagOperations):
    """One cache's remote: its Redis store, its stamps, its listener, its own memory tier."""

    def __init__(
        self, directory: str, store: Store, disk: Disk, native_numbers: bool,
        code_only: dict[str, Any], group: tuple[str, tuple[Member, ...]] | None = None,
        reads: ReadNotes | None = None,
    ) -> None:
        """`group`: the directory whose listener serves this cache, and every cache it serves
        (``(directory, prefix)`` each, this one among them): a FanoutCache's directory and its
        shards. None: this cache alone, its listener elected in its own directory. `reads`
        hears of each get (the Evictor: hits and misses for `stats`)."""
        options = {**REMOTE_DEFAULTS, **code_only}
        self._directory = directory
        self._store = store
        self._disk = disk
        self._native_numbers = native_numbers
        self._max_staleness = float(options["max_staleness"])
        self._remote = RemoteStore(
            options["remote"], options["remote_prefix"].encode("utf-8"),
            float(options["remote_timeout"]),
        )
        self._words = RemoteWords(directory, self._remote.prefix)
        self._memory: MemoryTier | None = None
        self._reads = reads
        # Copies of Redis's answers, written to the database by a background writer.
        self._fills = Fills(self._write_fills)
        # For `Cache.metrics`: gets below the memory tier by who answered; removals from Redis.
        self.answered, self.removed = RemoteCounts(), EvictionCounts()
        self._remapped()  # (the stamp words' views)
        self._words.on_remap.append(weak_method(self._remapped))  # (weak: no cycle)
        self._refresh = bool(options["remote_refresh"])
        if group is None:
            group = (directory, ((directory, options["remote_prefix"]),))
        self._group_directory, members = group
        self._members = [(str(path), str(prefix)) for path, prefix in members]
        self._closed = False
        self._listener: ListenerThread | None = None
        self._elect()

    def _elect(self) -> None:
        """Be one more user of this process's listener candidate of the group's directory."""
        self._listener = listener_for(
            self._group_directory, self._remote, self._members, self._max_staleness,
            self._refresh,
        )

    def _remapped(self) -> None:
        """The stamp file was lost and is mapped anew (or private words stand in for it): use
        its views; the memory tier forgets every copy (their stamps are of the lost file)."""
        self._stamps = self._words.words
        self._lease = self._words.lease
        if self._memory is not None:
            self._memory.rebind(self._stamps)

    def configure_memory(self, size_limit: int, item_limit: int) -> MemoryTier | None:
        """This cache's memory tier, validated by the stamp words (see the module docstring)."""
        if not size_limit or not item_limit:
            self._memory = None
        elif self._memory is None:
            plain_keys = type(self._disk).put is Disk.put
            # Copies are answered only while the listener's lease holds (`_leased`); a miss is
            # this tier's to fill (`_get_below_memory`), by the stamps.
            self._memory = MemoryTier(
                self._stamps, size_limit, item_limit, plain_keys, self._native_numbers,
                self._disk.put, self._disk.fetch, reads=self._reads,
                guard=weak_method(self._leased), admits_reads=False,
            )
        else:
            self._memory.set_limits(size_limit, item_limit)
        return self._memory

    @property
    def url(self) -> str:
        """The remote's URL."""
        return self._remote.url

    # --- reads ----------------------------------------------------------------------------------

    def get(self, key: Any, default: Any, read: bool, expire_time: bool, tag: bool) -> Any:
        """Return the value for `key`, or `default`; a copy on this host only while it is known
        to be current (else Redis is asked). ``tag=True`` always asks Redis."""
        memory = self._memory
        if memory is not None and not (read or expire_time or tag):
            found = memory.hit(key, default)  # the memory tier's hit path, as a local get's
            if found is not MISS:
                return found
        return self._get_below_memory(key, default, read, expire_time, tag)

    def _leased(self) -> bool:
        """Whether copies may be answered now: the listener's lease holds (and is not set
        further ahead than a lease can be: the clock stepped back)."""
        return 0.0 < self._lease[0] - time.time() <= LEASE_AHEAD

    def _get_below_memory(
        self, key: Any, default: Any, read: bool, expire_time: bool, tag: bool
    ) -> Any:
        disk = self._disk
        db_key, flag = disk.put(key)
        raw = 1 if flag else 0  # the int SQLite stores (see put_key)
        if type(db_key) is float and db_key != db_key:
            check_key(db_key)  # NaN: a key no write accepts
        name = encode_key(db_key, raw)
        index = self._words.index(stamp_hash(name))
        memory = self._memory
        if memory is not None:
            memory.count_miss()
        now = time.time()
        reads = self._reads
        if reads is not None and not reads.tracks_reads:
            reads = None
        if not tag and 0.0 < self._lease[0] - now <= LEASE_AHEAD:
            waiting = self._fills.current(db_key, raw, index, self._stamps, now)
            if waiting is None:
                found = self._local_copy(db_key, raw, index, read, now)
            else:  # a copy not yet written
                found = disk.fetch(waiting.mode, None, waiting.db_value, read), waiting.expires
                if self._memory_keeps(waiting.db_value, read):
                    self._remember(db_key, raw, waiting.mode, waiting.db_value, found[0],
                                   waiting.expires, index, waiting.stamp)
            if found is not None:
                self.answered.local += 1
                if reads is not None:
                    reads.note_read(db_key, raw, True, now)
                value, expires = found
                return shape(value, expires, None, expire_time, False)
        self._check_listener()
        stamp = self._stamps[index]  # before Redis is asked: a change after it bumps it
        data = self._remote.get(self._remote.name(name))
        item = None if data is None else decode_item(data)
        if item is not None and item.expire_time is not None and item.expire_time <= time.time():
            item = None  # Redis's clock has not caught up with ours yet
        if item is None:
            self.answered.missed += 1
            if reads is not None:
                reads.note_read(db_key, raw, False, now)
            if memory is not None and not (read or expire_time or tag):
                map_key = memory.map_key(db_key, raw)
                if map_key is not None:
                    memory.store(map_key, None, ABSENT, index, stamp, None, db_key, raw)
            return shape(default, None, None, expire_time, tag)
        self.answered.found += 1
        if reads is not None:
            reads.note_read(db_key, raw, True, now)
        value = disk.fetch(item.mode, None, item.db_value, read)
        if self._stamps[index] == stamp:
            self._keep(db_key, raw, key, item.mode, item.db_value, value, read,
                       item.expire_time, index, stamp)
        return shape(value, item.expire_time, item.tag, expire_time, tag)

    def _local_copy(
        self, db_key: Any, raw: Any, index: int, read: bool, now: float
    ) -> tuple[Any, float | None] | None:
        """This host's row for the key if its stamp is current: (value, expire_time)."""
        stamp = self._stamps[index]
        try:
            rows = self._store.read(sql.SELECT_ITEM, (db_key, raw, now))
        except DiskCacheError:
            return None  # the local copy is only a shortcut
        if not rows:
            return None
        mode, filename, db_value, expires, row_stamp = rows[0]
        if row_stamp != stamp:
            return None
        if filename is not None and not self._native_numbers:  # (standard store and fetch)
            db_value = None  # the row's size (see SELECT_ITEM): a Disk of its own gets NULL
        try:
            value = self._disk.fetch(mode, filename, db_value, read)
        except FileNotFoundError:
            return None  # replaced meanwhile, or cut short
        memory = self._memory
        if memory is not None and not read and filename is None:
            self._remember(db_key, raw, mode, db_value, value, expires, index, stamp)
        return value, expires

    def _memory_keeps(self, db_value: Any, read: bool) -> bool:
        """Whether a copy of stored form `db_value` goes to the memory tier: there is one, the
        value is not read as a file, and it is stored inline (below ``disk_min_file_size``)."""
        inline = len(db_value) if type(db_value) in (bytes, str) else 0
        return self._memory is not None and not read and not inline >= self._disk.min_file_size > 0

    def _remember(
        self, db_key: Any, raw: Any, mode: int, db_value: Any, value: Any,
        expires: float | None, index: int, stamp: int,
    ) -> None:
        memory = self._memory
        assert memory is not None
        map_key = memory.map_key(db_key, raw)
        if map_key is None:
            return
        memory.keep_value(map_key, value, db_value, mode, index, stamp, expires, db_key, raw)

    def _keep(
        self, db_key: Any, raw: Any, key: Any, mode: int, db_value: Any, value: Any, read: bool,
        expires: float | None, index: int, stamp: int,
    ) -> None:
        """Keep what Redis answered as this host's copy, under the stamp read before asking:
        in the memory tier at once (an inline value), in the database by the background
        writer (`_write_fills`), off the caller's path."""
        if self._memory_keeps(db_value, read):
            self._remember(db_key, raw, mode, db_value, value, expires, index, stamp)
        self._fills.add(db_key, raw, Fill(key, mode, db_value, expires, index, stamp))

    def _write_fills(self, batch: dict[tuple[Any, Any], Fill]) -> None:
        """Write waiting copies (the writer thread's; see `write_copies`)."""
        write_copies(self._store, self._disk, self._words.checked_words(), batch)

    def flush_fills(self) -> None:
        """Write the copies waiting now (see `Fills`), in the calling thread."""
        self._fills.flush()

    def refresh(self, names: list[bytes]) -> int:
        """Renew this host's copies of items that just changed in Redis; how many were renewed.

        Called by the listener's refresher (_remote/listener.py) after it bumped the stamps of `names`
        (Redis names without the prefix): for each item this host holds a row of, the new value
        is read from Redis (one MGET) and kept under the stamp read before asking, exactly
        as a reader's fill keeps it, so a change after the read makes the copy unservable
        again. Without it, every write costs each host that holds the item a read from Redis
        on its next get; with it, the next get is answered here. Only inline values are
        renewed: an item this host holds as a value file is not read from Redis at all, and
        waits for a reader, as does a new value at or above ``disk_min_file_size``. A busy
        lock is waited for briefly.
        """
        return renew_copies(
            self._store, self._disk, self._remote, self._words, self._stamps, names
        )

    # --- writes ---------------------------------------------------------------------------------

    def store_item(
        self, statement: str, key: Any, value: Any, expire: Any, read: bool, tag: Any,
        extras: tuple[Any, ...] = (),
    ) -> bool:
        """set and add: Redis first (one script: the item, the expiry as its TTL, and its tags
        `tag` and `extras`, checked, replacing its old ones), then the stamp."""
        self._check_listener()  # (the copies its gets will make need one)
        db_key, raw = put_key(self._disk, key)
        expires = None if expire is None else expire_at(time.time(), expire)
        if tag is not None:
            tag = check_tag(tag)
        try:
            mode, db_value = serialized(
                self._disk, self._native_numbers, self._directory, key, value, read
            )
        except UnicodeEncodeError:
            check_bindable("value", value)
            raise
        data = encode_item(mode, db_value, expires, tag)
        name = encode_key(db_key, raw)
        only_new = statement is sql.ADD
        tags = extras if tag is None else (tag, *extras)
        stored = self._written(
            name, lambda: self._remote.set(name, data, expires, only_new, tags)
        )
        if stored:
            # No copy of what was written is kept here: one made under the stamp set now could
            # be older than Redis's item already (another client's later write heard before
            # this bump, or sent in one message with this write's own echo), and one made
            # before the write would go with its echo. The refresher renews the host's row
            # from Redis after the echo, as after any change (_remote/listenerprocess.py).
            self._bump(name)
        return stored

    def _bump(self, name: bytes) -> None:
        """A fresh stamp for `name`'s bucket once a write of it returned."""
        self._words.bump(self._words.index(stamp_hash(name)))

    def _written(self, name: bytes, write: Callable[[], _T]) -> _T:
        """``write()``; when its outcome is unknown (RemoteOutcomeUnknownError, raised on), the
        item's stamp is bumped first: Redis may apply it yet, and no copy of this host may
        outlive it (the listener bumps it again when Redis reports the change)."""
        try:
            return write()
        except RemoteOutcomeUnknownError:
            self._bump(name)
            raise

    def _name(self, key: Any) -> bytes:
        """`key`'s Redis name without the prefix."""
        db_key, raw = put_key(self._disk, key)
        return encode_key(db_key, raw)

    def touch(self, key: Any, expires: float | None) -> bool:
        """Set a new expire time for `key` (in Redis, its TTL too); True when it was present."""
        name = self._name(key)
        touched = self._written(name, lambda: self._remote.touch(name, expires))
        self._bump(name)
        return touched

    def delete(self, key: Any) -> bool:
        """Remove `key` (and its tag memberships) from Redis; True when it was there."""
        name = self._name(key)
        removed = self._written(name, lambda: self._remote.delete(name))
        self._bump(name)  # (no "absent" kept: see `store_item`)
        self.removed.explicit += removed
        return removed

    def pop(self, key: Any, default: Any, expire_time: bool, tag: bool) -> Any:
        """Remove `key` and return its value (Redis's GETDEL: atomic across hosts)."""
        name = self._name(key)
        data = self._written(name, lambda: self._remote.pop(name))
        self._bump(name)  # (no "absent" kept: see `store_item`)
        self.removed.explicit += data is not None
        item = None if data is None else decode_item(data)
        if item is None or (item.expire_time is not None and item.expire_time <= time.time()):
            return shape(default, None, None, expire_time, tag)
        value = self._disk.fetch(item.mode, None, item.db_value, False)
        return shape(value, item.expire_time, item.tag, expire_time, tag)

    def update(self, key: Any, function: Callable[[Any], Any], default: Any) -> Any:
        """Replace the value at `key` by ``function(value)``, atomically across hosts; return it.
        A missing key starts from `default` (KeyError when None). Expiry and tag stay."""
        if default is None:
            default = ENOVAL

        def replace(current: Any) -> tuple[Any, Any]:
            if current is ENOVAL:
                raise KeyError(key)
            value = function(current)
            return value, value

        return self.change(key, replace, default, KEEP, KEEP)

    def change(
        self, key: Any, function: Callable[[Any], tuple[Any, Any]], default: Any,
        expire: Any, tag: Any,
    ) -> Any:
        """Atomically across hosts: ``new, result = function(value or default)``; store `new`
        (with `expire` seconds and `tag`, or the item's own for KEEP), delete the item for
        DELETE, leave it for KEEP; return `result`. Compare-and-set in Redis, retried while
        other writers get in between."""
        name = self._name(key)
        full = self._remote.name(name)
        remote = self._remote
        if tag is not KEEP and tag is not None:
            tag = check_tag(tag)
        # A new tag replaces the item's tags (as a set does); KEEP keeps them all.
        tags = None if tag is KEEP else () if tag is None else (tag,)
        while True:
            old = remote.get(full)
            item = None if old is None else decode_item(old)
            stored_expiry = None if item is None else item.expire_time
            if stored_expiry is not None and stored_expiry <= time.time():
                item = None  # expired: as missing, but compared against what is there
            current = default if item is None else self._disk.fetch(
                item.mode, None, item.db_value, False
            )
            value, result = function(current)
            if value is KEEP:
                return result
            if value is DELETE:
                new = None
                expires = None
            else:
                if expire is KEEP:
                    expires = None if item is None else item.expire_time
                else:
                    expires = None if expire is None else expire_at(time.time(), expire)
                keep_tag = None if item is None else item.tag
                mode, db_value = serialized(
                    self._disk, self._native_numbers, self._directory, key, value, False
                )
                new = encode_item(mode, db_value, expires, keep_tag if tag is KEEP else tag)
            if self._written(
                name, lambda: remote.compare_and_set(name, old, new, expires, tags)
            ):
                self._bump(name)
                return result

    # --- whole cache ----------------------------------------------------------------------------

    def clear(self) -> int:
        """Remove every item under the prefix from Redis; the count removed. Items written while
        it runs may stay. (The facade then clears this host's copies.)"""
        try:
            removed = self._remote.each_batch(self._remote.delete_names)
        finally:  # (after a failure too: a batch whose outcome is unknown may yet be applied)
            self._words.renew_all()
        self.removed.explicit += removed
        return removed

    def metrics(self) -> RemoteMetrics:
        """The remote as this process sees it now: commands, errors, reconnects, the lease."""
        valid, remaining, pid = self._words.lease_state()
        sent = self._remote.sent
        return RemoteMetrics(
            sent.commands, sent.errors, self._remote.reconnects, valid, remaining, pid
        )

    # --- what a remote cannot do ----------------------------------------------------------------

    @staticmethod
    def unsupported(what: str) -> NoReturn:
        """Raise RemoteUnsupportedError for `what`, an operation that would be host-local."""
        raise RemoteUnsupportedError(
            f"{what} is not supported on a cache with a remote: it would act on this host's"
            " copy only (see the 'Many hosts' documentation)"
        )

    # --- the listener ---------------------------------------------------------------------------

    def _check_listener(self) -> None:
        """A forked child, a cache whose listener thread stopped, and one used again after
        `close` get their own candidate."""
        listener = self._listener
        if listener is None:
            if self._closed:
                self._closed = False
                self._elect()
        elif not listener.current:  # (a flag: no system call on a get's path)
            self._elect()

    def close(self) -> None:
        """Close this tier's connections; the listener stops with the last cache of the
        directory in this process (another process takes over)."""
        self._fills.flush()
        listener, self._listener = self._listener, None
        self._closed = listener is not None  # used again: a candidate anew (`_check_listener`)
        if listener is not None and listener.pid == os.getpid():
            release_listener(listener)
        self._remote.close()
