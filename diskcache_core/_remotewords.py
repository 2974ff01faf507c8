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

Stores are single aligned 8-byte stores (a memoryview cast of the mapping), as in _memory.py.
"""

from __future__ import annotations

import errno
import mmap
import os
import random
import stat
import time
import zlib

from ._errors import DatabaseError, storage_error

__all__ = ["LEASE", "LEASE_AHEAD", "LOCK_FILE", "RemoteWords", "REMOTE_FILE"]

REMOTE_FILE = "cache.db-remote"
# The listener election's lock (_listener.py): whoever holds its flock runs the listener.
LOCK_FILE = "cache.db-remote.lock"
BUCKETS = 1 << 16
_MASK = BUCKETS - 1
_MAGIC = 0x31524D5243434B44  # "DKCCRMR1"
_HEADER_WORDS = 8  # magic, lease (double), listener pid, prefix, reserved
_SIZE = 8 * (_HEADER_WORDS + BUCKETS)
LEASE = 0.040  # seconds a renewal of the lease is good for: the bound after a listener dies
LEASE_AHEAD = 2 * LEASE  # the furthest ahead a valid lease is (LEASE, and room for rounding)

_random = random.Random(os.urandom(32))


class RemoteWords:
    """This process's mapping of a directory's stamp file."""

    def __init__(self, directory: str, prefix: bytes) -> None:
        path = os.path.join(directory, REMOTE_FILE)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o600)
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise DatabaseError(f"{path!r} is not a regular file")
                if info.st_size < _SIZE or info.st_blocks * 512 < _SIZE:
                    # Every block allocated before mapping (see _versionfile._allocate); zeros
                    # mean no lease, so nothing is served before a listener has started.
                    _allocate(fd, info.st_size)
                self._map = mmap.mmap(fd, _SIZE, access=mmap.ACCESS_WRITE)
            finally:
                os.close(fd)
        except OSError as exc:
            raise storage_error(exc, f"the remote stamp file {path!r}") from exc
        self.words = memoryview(self._map).cast("Q")
        self.lease = memoryview(self._map)[8:16].cast("d")
        self.path = path
        if self.words[0] != _MAGIC:
            self.words[0] = _MAGIC
        # The prefix whose changes the listener hears: every cache of the directory must share
        # it, or the copies of one would never hear of the other's changes.
        owner = (zlib.crc32(prefix) << 1) | 1
        if self.words[3] == 0:
            self.words[3] = owner
        elif self.words[3] != owner:
            self.close()
            raise ValueError(
                f"{directory!r} is the near cache of another remote_prefix than {prefix!r}:"
                " every cache of a directory must use the same remote_prefix"
            )

    @staticmethod
    def index(code: int) -> int:
        """The word index of a bucket, from `_remote.stamp_hash` of a Redis name."""
        return _HEADER_WORDS + (code & _MASK)

    def bump(self, index: int) -> None:
        """A fresh stamp for one bucket: copies made under the old one are no longer served."""
        self.words[index] = _random.getrandbits(63) | 1

    def renew_all(self) -> None:
        """A fresh stamp for every bucket: no copy made so far is served again."""
        fresh = memoryview(os.urandom(8 * BUCKETS)).cast("Q")
        words = self.words
        for offset in range(BUCKETS):
            words[_HEADER_WORDS + offset] = (fresh[offset] >> 1) | 1

    def lease_valid(self) -> bool:
        return bool(0.0 < self.lease[0] - time.time() <= LEASE_AHEAD)

    def set_lease(self, until: float) -> None:
        self.lease[0] = until

    def set_listener(self, pid: int) -> None:
        self.words[2] = pid

    def listener_pid(self) -> int:
        return int(self.words[2])

    def close(self) -> None:
        try:
            self.words.release()
            self.lease.release()
            self._map.close()
        except (BufferError, ValueError):
            pass  # a view is still in use somewhere: the mapping goes with the process


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
