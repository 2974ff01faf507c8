"""The library's loggers, and the rate limits that keep a repeated event to a few lines.

diskcache_core logs through the standard `logging` module: the logger ``diskcache_core`` and
one child per part (`REMOTE`, `LISTENER`, `DISK`, `CHECK`, `MEMORY`). The parent has a `NullHandler`, as
libraries do: nothing is printed unless the application configures logging. Nothing is logged
per operation: an outage is one WARNING when it begins and one INFO when it ends (with how long
it lasted), and an event that repeats is reported at most once per `INTERVAL`, the rest counted
into the next line.
"""

from __future__ import annotations

import logging
import os
import threading
import time

__all__ = [
    "CHECK", "DISK", "INTERVAL", "LISTENER", "MEMORY", "REMOTE", "Outage", "RateLimit", "lost_file",
    "outage_for",
]

ROOT = logging.getLogger("diskcache_core")
ROOT.addHandler(logging.NullHandler())  # once: this module is imported once per process
REMOTE = logging.getLogger("diskcache_core.remote")  # the application's side of Redis
LISTENER = logging.getLogger("diskcache_core.listener")  # election, lease, listener process
DISK = logging.getLogger("diskcache_core.disk")  # value files
CHECK = logging.getLogger("diskcache_core.check")  # Cache.check's findings
MEMORY = logging.getLogger("diskcache_core.memory")  # the coherence files (version, stamp file)
INTERVAL = 60.0  # seconds: at most one line per event kind (or per outage's start) in this time


class RateLimit:
    """At most one line per `interval` seconds for one kind of event; the others counted."""

    def __init__(self, interval: float = INTERVAL) -> None:
        self._interval = interval
        self._next = 0.0  # monotonic time from which the next line may be written
        self._skipped = 0

    def allow(self) -> int | None:
        """None: say nothing now; else the count of events left unsaid since the last line.
        (No lock, so none can be held across a fork: two threads at once may both write a
        line, or a count be one off.)"""
        now = time.monotonic()
        if now < self._next:
            self._skipped += 1
            return None
        self._next = now + self._interval
        skipped, self._skipped = self._skipped, 0
        return skipped

    def warn(self, log: logging.Logger, message: str, *args: object) -> None:
        """``log.warning(message, *args)`` unless rate-limited; the events left unsaid since
        the last line are counted at the end of this one."""
        skipped = self.allow()
        if skipped is None:
            return
        if skipped:
            message, args = message + " (%d more not reported before it)", (*args, skipped)
        log.warning(message, *args)


class Outage:
    """Whether something (a Redis server, a listener's lease) is reachable, as this process sees
    it: a WARNING at the first failure after a success, an INFO at the first success after that,
    with how long it was gone. Outages that begin within `interval` of the last reported one
    are counted, and reported (once) only if they last until the interval has passed: a
    flapping server gives one line per interval, not two per flap.

    `down_since` (monotonic seconds, 0.0 while up) is read on every success by its callers, so
    that a success costs one attribute test.
    """

    def __init__(
        self, log: logging.Logger, what: str, down: str = "unreachable",
        up: str = "reachable again", interval: float = INTERVAL,
    ) -> None:
        self.down_since = 0.0
        self._log = log
        self._what = what
        self._down = down
        self._up = up
        self._interval = interval
        self._next = 0.0
        self._reported = False  # this outage's WARNING was written
        self._unreported = 0  # outages begun since the last WARNING, this one included
        self._lock = threading.Lock()
        self.recoveries = 0  # outages that ended (a remote's reconnects, for its metrics)

    def failed(self, reason: str, began: float | None = None) -> None:
        """A failure: the outage begins (if it had not; at monotonic time `began`, if known
        to have begun earlier), and is reported unless rate-limited."""
        now = time.monotonic()
        with self._lock:
            if not self.down_since:
                self.down_since = now if began is None else began
                self._reported = False
                self._unreported += 1
            if self._reported or now < self._next:
                return
            self._reported = True
            self._next = now + self._interval
            outages, self._unreported = self._unreported, 0
            lasted = now - self.down_since
        more = f" ({outages - 1} shorter outages not reported before it)" if outages > 1 else ""
        since = f" for {lasted:.1f} s" if lasted >= 0.05 else ""
        self._log.warning("%s %s%s: %s%s", self._what, self._down, since, reason, more)

    def recovered(self) -> None:
        """A success: the outage (if any) ends; reported if its beginning was."""
        now = time.monotonic()
        with self._lock:
            began = self.down_since
            if not began:
                return
            self.down_since = 0.0
            self.recoveries += 1
            reported = self._reported
        if reported:
            self._log.info("%s %s after %.1f s", self._what, self._up, now - began)


_lost_files = RateLimit()


def lost_file(path: str, serving: str) -> None:
    """A mapped coherence file (`path`) found shrunk or replaced while open: one WARNING (rate
    limited) saying what is not served meanwhile (`serving`)."""
    _lost_files.warn(
        MEMORY, "%s was shrunk or replaced while open: %s until it is mapped anew", path, serving
    )


_outages: dict[tuple[str, str], Outage] = {}
_outages_lock = threading.Lock()


def outage_for(log: logging.Logger, what: str) -> Outage:
    """The process's one `Outage` of `what` (say, a remote's URL): the caches and shards that
    share a server share its reports."""
    key = (log.name, what)
    with _outages_lock:
        outage = _outages.get(key)
        if outage is None:
            outage = _outages[key] = Outage(log, what)
        return outage


def _after_fork_in_child() -> None:
    # A lock held by a thread of the parent at the fork would never be released here.
    global _outages_lock
    _outages_lock = threading.Lock()
    for outage in _outages.values():
        outage._lock = threading.Lock()  # noqa: SLF001 - this module's own class


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
