"""The stamps that say which of a host's copies of remote items may still be served.

A cache with a remote keeps copies of Redis's items in this host's directory (rows of its
SQLite database) and in each process (its memory tier). The file ``cache.db-remote``, mapped by
every process of the directory, holds one 64-bit stamp per bucket of Redis names, and a lease:

- A copy is filled under the stamp of its bucket read *before* Redis was asked for the item, and
  is served only while that stamp is unchanged. Whatever may have changed the item in Redis
  changes the stamp to a fresh random value (`bump`): a write of this host after Redis
  acknowledged it, the listener on hearing of any write, and the listener at every (re)start or
  on a flush (`renew_all`). A stamp never returns to an old value (63 random bits), so a copy
  made from an older answer of Redis is never served after such a change.
- The lease (a time, as a double) is until when the listener vouches that it hears every change:
  it renews it a few times per LEASE while its connections are healthy, and lets it lapse — or
  clears it — otherwise. No copy is served while the lease has lapsed; reads then go to Redis.
  A lease is never set more than LEASE ahead, so one further ahead than that (the wall clock
  was set back since it was renewed) is not valid either: a listener that died just before the
  clock went back cannot vouch for the time the clock repeats.

The header's words 4-6 are the listener's report for `Cache.metrics` (`heard_state`), written by
the one listener only and read by any process from the mapping (no system call): the count of
names it heard change (word 4, kept across listener restarts), its invalidation lag's
percentiles over its last probes (word 5, three 21-bit microsecond counts packed into one store
so that a reader never sees them torn), and the probes it timed (word 6).

A host's own write is heard too (its "echo"), and bumps the stamp like any other change. The
writer keeps no copy of what it wrote (_remote/tier.py `store_item`): Redis's broadcast
tracking sends one message per key for each turn of its event loop, so an echo may also stand
for another client's later write of the key (two writes of a key in one turn are one message),
and another client's later write may be heard before the writer's own bump; a copy installed on
the echo, or kept under the writer's bump, could then be older than Redis's item for good. The
refresher renews the host's row after the echo, as after any change.

Stores are single aligned 8-byte stores (a memoryview cast of the mapping), as in _memory/tier.py.

The file may be shrunk or replaced by hand while mapped (see _store/mapwatch.py). Its stores
(`bump`, `set_lease`, `renew_all`: the listener's every few milliseconds) check its size first,
and the _mapwatch thread checks it every WATCH_INTERVAL: a lost file's views are switched at
once to private words with no lease (nothing is served from copies), then to the directory's
file, every stamp renewed (`check_mapping`); its users are told (`on_remap`).
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import random
import stat
import struct
import time
import zlib
from typing import Callable, NamedTuple

from .._errors import DatabaseError, storage_error
from .._log import lost_file
from .._store.mapwatch import watch
from .form import stamp_hash

__all__ = [
    "LEASE", "LEASE_AHEAD", "LOCK_FILE", "LAG_MAX", "Heard", "Member", "PROBE_MARK", "RemoteWords",
    "REMOTE_FILE", "StampSet", "pack_lag",
]

REMOTE_FILE = "cache.db-remote"
# The listener election's lock (_remote/listener.py): whoever holds its flock runs the listener.
LOCK_FILE = "cache.db-remote.lock"
BUCKETS = 1 << 16
_MASK = BUCKETS - 1
_MAGIC = 0x31524D5243434B44  # "DKCCRMR1"
_HEADER_WORDS = 8  # magic, lease (double), listener pid, prefix, heard, lag, probes, reserved
_HEARD, _LAG, _PROBES = 4, 5, 6
# After a prefix, the mark of the listener's lag probes (_remote/lagprobe.py): no cache key's.
PROBE_MARK = b"~probe/"
_LAG_BITS = 21
_LAG_UNIT = 1e-6  # seconds per unit of a packed lag
LAG_MAX = ((1 << _LAG_BITS) - 1) * _LAG_UNIT  # (about 2.1 s) a longer lag is reported as this
_SIZE = 8 * (_HEADER_WORDS + BUCKETS)
LEASE = 0.040  # seconds a renewal of the lease is good for: the bound after a listener dies
LEASE_AHEAD = 2 * LEASE  # the furthest ahead a valid lease is (LEASE, and room for rounding)

_random = random.Random(os.urandom(32))


class Heard(NamedTuple):
    """The listener's report (see the module docstring): for `RemoteMetrics`."""

    #: names under this cache's prefix the directory's listener heard change and invalidated
    names: int
    #: probes whose invalidation it timed (0: no lag measured yet)
    probes: int
    #: the lag's 50th, 90th and 99th percentiles over its recent probes, in seconds
    p50: float
    p90: float
    p99: float


def pack_lag(p50: float, p90: float, p99: float) -> int:
    """Three lags (seconds) as one word: microseconds, at least 1, at most `LAG_MAX`, each."""
    packed = 0
    for seconds in (p99, p90, p50):
        units = min(max(1, math.ceil(seconds / _LAG_UNIT)), (1 << _LAG_BITS) - 1)
        packed = (packed << _LAG_BITS) | units
    return packed


def _unpack_lag(packed: int) -> tuple[float, float, float]:
    mask = (1 << _LAG_BITS) - 1
    return (
        (packed & mask) * _LAG_UNIT,
        ((packed >> _LAG_BITS) & mask) * _LAG_UNIT,
        ((packed >> 2 * _LAG_BITS) & mask) * _LAG_UNIT,
    )


class RemoteWords:
    """This process's mapping of a directory's stamp file."""

    def __init__(self, directory: str, prefix: bytes) -> None:
        self.path = os.path.join(directory, REMOTE_FILE)
        # The prefix whose changes the listener hears: every cache of the directory must share
        # it, or the copies of one would never hear of the other's changes.
        self._owner = (zlib.crc32(prefix) << 1) | 1
        self._closed = False
        # Told (no argument) when `words` and `lease` are views of another mapping.
        self.on_remap: list[Callable[[], None]] = []
        self._map_file()
        if self.words[3] == 0:
            self.words[3] = self._owner
        elif self.words[3] != self._owner:
            self.close()
            raise ValueError(
                f"{directory!r} is the near cache of another remote_prefix than {prefix!r}:"
                " every cache of a directory must use the same remote_prefix"
            )
        watch(self)

    def _map_file(self) -> None:
        """Map the directory's stamp file (made, or extended, if short) into `words`/`lease`."""
        path = self.path
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o600)
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise DatabaseError(f"{path!r} is not a regular file")
                if 0 < info.st_size < _SIZE:
                    # Shrunk while in use: written whole first, with no lease and fresh stamps
                    # (a listener still mapping it must not see the zeros an extension gives,
                    # under which a copy tagged before its first renewal would count again).
                    os.pwrite(fd, _fresh_image(self._owner), 0)
                if info.st_size < _SIZE or info.st_blocks * 512 < _SIZE:
                    # Every block allocated before mapping (see _versionfile._allocate); zeros
                    # mean no lease, so nothing is served before a listener has started.
                    _allocate(fd, info.st_size)
                mapping = mmap.mmap(fd, _SIZE, access=mmap.ACCESS_WRITE)
            finally:
                os.close(fd)
        except OSError as exc:
            raise storage_error(exc, f"the remote stamp file {path!r}") from exc
        self._map: bytearray | mmap.mmap = mapping
        self._identity = (info.st_dev, info.st_ino)
        self.words = memoryview(mapping).cast("Q")
        self.lease = memoryview(mapping)[8:16].cast("d")
        if self.words[0] != _MAGIC:
            self.words[0] = _MAGIC

    # --- a lost file (see _store/mapwatch.py) ---------------------------------------------------

    def _intact(self) -> bool:
        """Whether the mapped file still has its size and is still the directory's."""
        mapping = self._map
        try:
            if not isinstance(mapping, mmap.mmap) or mapping.size() < _SIZE:
                return False
            info = os.stat(self.path)
        except (OSError, ValueError):
            return False
        return (info.st_dev, info.st_ino) == self._identity

    def check_mapping(self) -> None:
        """(_mapwatch's thread, and before each store) If the file was shrunk or replaced: use
        private words with no lease at once, then map the directory's file with every stamp
        renewed (no copy made so far is served: changes heard meanwhile went to the lost
        file), and tell `on_remap`. Where that fails, the private words stay (nothing served
        from copies: reads go to Redis) and the next check tries again."""
        if self._closed or self._intact():
            return
        if isinstance(self._map, mmap.mmap):
            self._use(bytearray(_SIZE))  # no lease: no copy of this host is served
            lost_file(self.path, "no copy of this host is served (reads ask Redis)")
        self._map_file()
        self.words[3] = self._owner
        self.renew_all()
        self.set_lease(0.0)  # (the listener sets it again once it has renewed the stamps)
        for remapped in list(self.on_remap):
            remapped()

    def _use(self, mapping: bytearray | mmap.mmap) -> None:
        self._map = mapping
        self.words = memoryview(mapping).cast("Q")
        self.lease = memoryview(mapping)[8:16].cast("d")
        for remapped in list(self.on_remap):
            remapped()

    def _guard(self) -> None:
        """Before a store: the file still has its size (one fstat), else `check_mapping`."""
        mapping = self._map
        try:
            short = isinstance(mapping, mmap.mmap) and mapping.size() < _SIZE
        except (OSError, ValueError):
            return  # closed: its views are released, any store raises
        if short:
            try:
                self.check_mapping()
            except Exception:  # noqa: BLE001 - private words meanwhile: the store goes there
                pass  # (and nothing is served from copies); the next check tries again

    @staticmethod
    def index(code: int) -> int:
        """The word index of a bucket, from `_remote.stamp_hash` of a Redis name."""
        return _HEADER_WORDS + (code & _MASK)

    def bump(self, index: int) -> None:
        """A fresh stamp for one bucket: copies made under the old one are no longer served.
        (A writer's, once Redis acknowledged its write.)"""
        self._guard()
        self.words[index] = _random.getrandbits(63) | 1

    def renew_all(self) -> None:
        """A fresh stamp for every bucket: no copy made so far is served again."""
        self._guard()
        fresh = memoryview(os.urandom(8 * BUCKETS)).cast("Q")
        words = self.words
        for offset in range(BUCKETS):
            words[_HEADER_WORDS + offset] = (fresh[offset] >> 1) | 1

    def lease_valid(self) -> bool:
        return bool(0.0 < self.lease[0] - time.time() <= LEASE_AHEAD)

    def checked_words(self) -> memoryview:
        """`words`, for a background thread: the file's size checked first (one fstat), so a
        truncated file is switched to private words instead of being read (SIGBUS)."""
        self._guard()
        return self.words

    def lease_valid_checked(self) -> bool:
        """`lease_valid` for a background thread that looks often and unprompted: the file's
        size is checked first (one fstat), so a truncated file is switched to private words
        instead of being read (a load past its end is SIGBUS). A get's hit stays unchecked."""
        self._guard()
        return self.lease_valid()

    def lease_state(self) -> tuple[bool, float, int]:
        """For metrics: whether the lease is valid now, the seconds it is still good for (0.0
        once lapsed), and the listener's pid (0: none has written it; all three when closed)."""
        try:
            remaining, pid = self.lease[0] - time.time(), int(self.words[2])
        except ValueError:  # closed: its views are released
            return False, 0.0, 0
        valid = 0.0 < remaining <= LEASE_AHEAD
        return valid, remaining if valid else 0.0, pid

    def set_lease(self, until: float) -> None:
        self._guard()
        self.lease[0] = until

    def heard_state(self) -> Heard:
        """The listener's report, read from the mapping (all zeros when closed)."""
        try:
            words = self.words
            names, packed, probes = int(words[_HEARD]), int(words[_LAG]), int(words[_PROBES])
        except ValueError:  # closed: its views are released
            return Heard(0, 0, 0.0, 0.0, 0.0)
        if not probes:
            return Heard(names, 0, 0.0, 0.0, 0.0)
        return Heard(names, probes, *_unpack_lag(packed))

    def heard(self, index: int) -> None:
        """(The listener) A name of bucket `index` changed: a random stamp; count the name."""
        self._guard()
        words = self.words
        words[index] = _random.getrandbits(63) | 1
        words[_HEARD] = (words[_HEARD] + 1) & 0xFFFFFFFFFFFFFFFF

    def set_lag(self, packed: int, probes: int) -> None:
        """(The listener) its lag percentiles (`pack_lag`), then the count of probes timed."""
        self._guard()
        self.words[_LAG] = packed
        self.words[_PROBES] = probes

    def set_listener(self, pid: int) -> None:
        self._guard()
        self.words[2] = pid

    def listener_pid(self) -> int:
        return int(self.words[2])

    def close(self) -> None:
        self._closed = True
        try:
            self.words.release()
            self.lease.release()
            if isinstance(self._map, mmap.mmap):
                self._map.close()
        except (BufferError, ValueError):
            pass  # a view is still in use somewhere: the mapping goes with the process


# One near cache served by a listener: its directory and its remote prefix.
Member = tuple[str, str]


class StampSet:
    """The stamp files of every near cache one listener serves, as one: a FanoutCache's shards
    each keep their own file (their own prefix, stamps and lease), and one listener, elected
    in the FanoutCache's directory, keeps them all (a plain Cache is a set of one). The lease
    is set in every file at once; a change heard is bumped in its own cache's file."""

    def __init__(self, members: list[Member]) -> None:
        self._members: list[tuple[bytes, RemoteWords]] = []
        try:
            for directory, prefix in members:
                encoded = prefix.encode("utf-8")
                self._members.append((encoded, RemoteWords(directory, encoded)))
        except BaseException:
            self.close()
            raise
        # Longest first: a name is its member's whose prefix it starts with (the shards'
        # prefixes, ``<prefix><n>/``, are none of them a prefix of another).
        self._members.sort(key=lambda member: -len(member[0]))

    @property
    def prefixes(self) -> list[bytes]:
        """The remote prefixes to hear the changes of (Redis's ``BCAST PREFIX``)."""
        return [prefix for prefix, _ in self._members]

    def heard(self, name: bytes) -> bool:
        """A change of the Redis name `name` (prefix included) was heard: change its bucket's
        stamp in its cache's file (`RemoteWords.heard`), and count it. True when the host's
        copies of it are worth renewing: False when `name` is no member's, or a lag probe's
        (_remote/lagprobe.py)."""
        for prefix, words in self._members:
            if name.startswith(prefix):
                if name.startswith(PROBE_MARK, len(prefix)):
                    return False
                words.heard(words.index(stamp_hash(name[len(prefix):])))
                return True
        return False

    def set_lag(self, packed: int, probes: int) -> None:
        """The listener's lag (`pack_lag`) and probe count, in every member's file."""
        for _, words in self._members:
            words.set_lag(packed, probes)

    def renew_all(self) -> None:
        for _, words in self._members:
            words.renew_all()

    def set_lease(self, until: float) -> None:
        for _, words in self._members:
            words.set_lease(until)

    def lease_valid(self) -> bool:
        """Whether the lease holds in every file (it is set in all of them together)."""
        return all(words.lease_valid() for _, words in self._members)

    def probes(self) -> int:
        """The probes timed so far (by this directory's listeners, since the file was made)."""
        return self._members[0][1].heard_state().probes if self._members else 0

    def lease_valid_checked(self) -> bool:
        """`lease_valid`, each file's size checked first (`RemoteWords.lease_valid_checked`)."""
        return all(words.lease_valid_checked() for _, words in self._members)

    def set_listener(self, pid: int) -> None:
        for _, words in self._members:
            words.set_listener(pid)

    def listener_pid(self) -> int:
        return self._members[0][1].listener_pid() if self._members else 0

    def close(self) -> None:
        for _, words in self._members:
            words.close()


def _fresh_image(owner: int) -> bytes:
    """A whole stamp file: its header (no lease, no listener) and a fresh stamp per bucket."""
    header = struct.pack("<QdQQ", _MAGIC, 0.0, 0, owner) + bytes(8 * (_HEADER_WORDS - 4))
    fresh = memoryview(bytearray(os.urandom(8 * BUCKETS))).cast("Q")
    for offset in range(BUCKETS):
        fresh[offset] = (fresh[offset] >> 1) | 1
    return header + fresh.tobytes()


def _allocate(fd: int, size: int) -> None:
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is not None:
        try:
            fallocate(fd, 0, _SIZE)
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise  # a full disk: say so rather than fault later
    if size < _SIZE:
        os.ftruncate(fd, _SIZE)


def reseed_after_fork() -> None:
    """A forked child draws other stamps than its parent."""
    _random.seed(os.urandom(32))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reseed_after_fork)
