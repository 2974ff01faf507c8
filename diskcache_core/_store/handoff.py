"""Lock handoff: a writer that finds SQLite's write lock taken sleeps in the kernel and is woken
as soon as the lock is released.

SQLite's busy handler sleeps in fixed steps (1, 2, 5, 10, 15, 20, 25 ... ms) between attempts,
so a writer that finds the lock taken waits milliseconds for a lock freed microseconds later:
under eight writers that made a set's p99 ~30× Memcached's. Here, on Linux, the per-thread
connections of a WAL database get no busy handler. A writer whose statement fails as busy takes
a *ticket* — it reads the release counter, then raises the waiting flag (two words of the
version file's header, shared by every process of the directory) — tries once more, and if the
lock is still taken sleeps on the counter with futex(2). A writer of this library that releases
the lock (commit or rollback) and sees the flag clears it, bumps the counter and wakes one
sleeper. The woken writer raises the flag again before it tries, so the next release wakes the
next sleeper: the wake-up passes down the queue, one writer at a time (waking them all would
have each release followed by a herd of failed attempts).

Why no wake-up is lost: the waiter reads the counter *before* it raises the flag, and the
releaser clears the flag *before* it bumps the counter. So either the releaser sees the flag, or
the waiter read the counter before the bump and its sleep (which compares the counter first)
returns at once. Races between releasers can still leave a sleeper unwoken; that, a holder
killed with SIGKILL (SQLite's lock dies with it) and a python-diskcache process holding the lock
(it wakes nobody) all cost one sleep of at most `POLL_LIMIT`, after which the waiter tries
again. Nothing here is a lock: SQLite's lock stays the only one, so no waiter is blocked by a
dead process and none burns CPU spinning.

Where futex is unavailable (not Linux, an unknown machine, no ctypes) `lock_handoff` returns
None and SQLite's busy handler waits, as before.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sqlite3
import sys
import time
from typing import Callable

from .._errors import is_busy
from .._metrics import WriteCounts

__all__ = [
    "COUNTER_WORD", "POLL_LIMIT", "WAITING_WORD", "LockHandoff", "lock_handoff", "wait_for_lock",
]

COUNTER_WORD = 2  # version-file header word: bumped by a releaser that saw the flag
WAITING_WORD = 3  # version-file header word: nonzero while some writer may be sleeping
POLL_LIMIT = 0.002  # seconds a waiter sleeps at most before it tries again unwoken

_FUTEX_WAIT, _FUTEX_WAKE = 0, 1  # shared (not PRIVATE): the words are in a shared mapping
# futex's system call number on the 64-bit Linux machines where it is known.
_SYS_FUTEX = {
    "x86_64": 202,
    "aarch64": 98,
    "arm64": 98,
    "riscv64": 98,
    "ppc64le": 221,
    "ppc64": 221,
    "s390x": 238,
}


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class LockHandoff:
    """The release counter and waiting flag of one cache directory; see the module docstring."""

    __slots__ = ("words", "_address", "_futex", "_keep", "_number")

    def __init__(self, words: memoryview, futex: int) -> None:
        self.words = words
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syscall
        call.restype = ctypes.c_long
        call.argtypes = [
            ctypes.c_long,  # the system call's number
            ctypes.c_void_p,  # uaddr
            ctypes.c_int,  # futex_op
            ctypes.c_uint,  # val
            ctypes.c_void_p,  # timeout
            ctypes.c_void_p,  # uaddr2
            ctypes.c_uint,  # val3
        ]
        self._futex = call
        # futex compares 32 bits: the counter's low half (it never exceeds 2**32 - 1).
        low_half = 0 if sys.byteorder == "little" else 4
        self._keep = ctypes.c_uint32.from_buffer(words, 8 * COUNTER_WORD + low_half)
        self._address = ctypes.addressof(self._keep)
        self._number = futex

    def ticket(self) -> int:
        """Before trying again: the counter's value to sleep on; raises the waiting flag."""
        words = self.words
        seen = int(words[COUNTER_WORD])
        words[WAITING_WORD] = 1
        return seen

    def wait(self, seen: int, timeout: float) -> None:
        """Sleep until the counter moves from `seen` or `timeout` seconds pass (a signal or a
        spurious wake-up may end it sooner: the caller tries again either way)."""
        timeout = max(timeout, 0.0)
        span = _Timespec(int(timeout), int((timeout % 1.0) * 1e9))
        self._futex(self._number, self._address, _FUTEX_WAIT, seen, ctypes.byref(span),
                    None, 0)

    def released(self) -> None:
        """This process's connection released the write lock: wake one sleeper, if any may be."""
        words = self.words
        if words[WAITING_WORD]:
            words[WAITING_WORD] = 0
            words[COUNTER_WORD] = (int(words[COUNTER_WORD]) + 1) & 0xFFFFFFFF
            self._futex(self._number, self._address, _FUTEX_WAKE, 1, None, None, 0)


_SYS_FUTEX_NUMBER = _SYS_FUTEX.get(platform.machine(), -1) if sys.platform == "linux" else -1


def lock_handoff(words: memoryview | None) -> LockHandoff | None:
    """The handoff for the version words `words` (None: the platform has no futex, or this
    process may only read, or ``DISKCACHE_CORE_NO_HANDOFF`` is set — SQLite's busy handler
    waits instead)."""
    if words is None or _SYS_FUTEX_NUMBER < 0 or os.environ.get("DISKCACHE_CORE_NO_HANDOFF"):
        return None
    if ctypes.sizeof(ctypes.c_long) != 8:
        return None  # a 32-bit time_t timespec: not worth the risk
    try:
        return LockHandoff(words, _SYS_FUTEX_NUMBER)
    except (OSError, AttributeError, TypeError, ValueError):
        return None


def wait_for_lock(
    handoff: LockHandoff | None, attempt: Callable[[], sqlite3.Cursor], exc: sqlite3.Error,
    retry: bool, limit: float, counts: WriteCounts,
) -> sqlite3.Cursor:
    """After `attempt` (a statement that takes the write lock) failed as busy with `exc`: its
    result once it gets the lock, trying again until it has waited `limit` seconds (the
    cache's timeout) — for ever with `retry`. Raises the last busy error when it gives up.
    Each wait, and each give-up, is counted in `counts` (the Store's, for `Cache.metrics`).

    With the lock handoff the waits end when the lock is released; without it (`handoff`
    None) SQLite's busy handler has already waited the whole timeout in `attempt`.
    """
    counts.lock_waits += 1
    if handoff is None:
        while retry and is_busy(exc):
            try:
                return attempt()
            except sqlite3.Error as again:
                exc = again
        counts.give_ups += is_busy(exc)
        raise exc
    waited = 0.0
    while True:
        seen = handoff.ticket()
        try:
            return attempt()
        except sqlite3.Error as again:
            exc = again
        if not is_busy(exc):
            raise exc
        pause = min(limit - waited, POLL_LIMIT)
        if pause <= 0.0:
            if not retry:
                counts.give_ups += 1
                raise exc
            pause = POLL_LIMIT
        start = time.monotonic()
        handoff.wait(seen, pause)
        # Count at most the pause asked for: time this process then waited for a CPU is not
        # time spent waiting for the lock (SQLite's busy handler counts likewise).
        waited += min(time.monotonic() - start, pause)
