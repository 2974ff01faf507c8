"""The thread that looks after the files this process maps (the memory tier's version file, a
remote cache's stamp file): are they still whole, and still the cache directory's?

A file mapped shared can be shrunk while mapped (``truncate``, ``cp`` onto it): a load from a
page past its new end kills the process with SIGBUS, which Python cannot catch. It can also be
replaced (``os.replace`` of a copy, ``rsync``): the mapping then holds words no other process
bumps any more. Neither can be prevented, and checking the file before every load through the
mapping would cost a system call per memory-tier hit (as much again as the hit). So one thread
per process checks each mapped file every `WATCH_INTERVAL` (one ``fstat`` and one ``stat``), and
a file found lost has its users switched to words in private memory at once, then to the
directory's file (`Watched.check_mapping` does both). Writes check too, before they store into
a mapping (`_store.Store`), and so does every new connection.

What is left: a load through a mapping in the moments between a truncation and the next check
(at most `WATCH_INTERVAL`) still faults; after that check, none does. See "Lost coherence
channels" in docs/memory.rst.

The thread sleeps between rounds (longer with so many mapped files that a round takes more
than a few milliseconds: it takes a tenth of a CPU at most) and exits when nothing is watched;
`watch` starts it again. In a forked child it is started again where the parent watched anything.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Protocol

__all__ = ["WATCH_INTERVAL", "Watched", "watch"]

WATCH_INTERVAL = 0.05  # seconds between two checks of each mapped file, at least
# The thread sleeps this many times as long as its last round took, at least: with very many
# mapped files (a round costs a few microseconds per file) it takes a tenth of a CPU at most.
_SLEEP_FACTOR = 9


class Watched(Protocol):
    """A holder of a mapping: checks its file, and on a loss, switches its users away."""

    def check_mapping(self) -> None: ...


_watched: "weakref.WeakSet[Watched]" = weakref.WeakSet()
_lock = threading.Lock()  # guards `_watched` and `_thread` (made anew in a forked child)
_thread: threading.Thread | None = None


def watch(holder: Watched) -> None:
    """Check `holder`'s mapping every WATCH_INTERVAL while `holder` lives."""
    with _lock:
        _watched.add(holder)
        _start()


def _start() -> None:
    # With `_lock` held.
    global _thread
    if _thread is None:
        _thread = threading.Thread(target=_run, name="diskcache_core-mapwatch", daemon=True)
        _thread.start()


def _run() -> None:
    global _thread
    wake = threading.Event()  # never set: a sleep that a fork in the middle cannot leave held
    took = 0.0
    while True:
        wake.wait(max(WATCH_INTERVAL, _SLEEP_FACTOR * took))
        with _lock:
            holders = list(_watched)
            if not holders:
                _thread = None
                return
        start = time.monotonic()
        _check(holders)
        took = time.monotonic() - start
        del holders  # (a holder dropped meanwhile is freed now, not a round later)


def _check(holders: list[Watched]) -> None:
    for holder in holders:
        try:
            holder.check_mapping()
        except Exception:  # noqa: BLE001 - the holder keeps its private words; next round
            pass


def _after_fork_in_child() -> None:
    global _lock, _thread
    _lock = threading.Lock()  # the parent's thread may have held it at the fork
    _thread = None  # the parent's thread does not run here
    if _watched:
        with _lock:
            _start()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
