"""The listener process's log channel: its records go, one line each, down the pipe of its
standard output to the process that started it (`ParentLog`), which logs them through the
application's logging configuration (`ChildLog`). A child process cannot reach the
application's handlers itself. The process that started it also reports its lease
(`LeaseWatch`): the listener process cannot say that it cannot reach the remote.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from typing import TYPE_CHECKING

from .._log import LISTENER as _LOG
from .._log import Outage

if TYPE_CHECKING:
    from .stamps import StampSet

__all__ = ["ChildLog", "LeaseWatch", "ParentLog", "forward_logs_to_parent"]

# A lease lapsed this long is reported (`LeaseWatch`): a listener kept off the CPU for a few
# renewals (a loaded host) lets it lapse briefly, which is no outage.
LEASE_GRACE = 1.0
START_GRACE = 10.0  # and this long for the first grant (a new process imports, connects)


class ParentLog(logging.Handler):
    """Hands this process's log records to the electing process, which logs them through its
    own logging (`ChildLog`): one line each on standard output, a pipe it reads."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record).replace("\n", " ")
            os.write(1, f"{record.levelno} {record.name} {text}\n".encode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 - a log line never stops the listener
            pass


def forward_logs_to_parent() -> None:
    handler = ParentLog()
    handler.setFormatter(logging.Formatter("%(message)s"))
    package = logging.getLogger("diskcache_core")
    package.addHandler(handler)
    package.setLevel(logging.INFO)  # the electing process's configuration filters them
    package.propagate = False
    try:
        if stat.S_ISFIFO(os.fstat(1).st_mode):
            os.set_blocking(1, False)  # a full pipe drops lines rather than stop the listener
    except OSError:
        pass


class ChildLog:
    """The listener process's log lines (``<level> <logger> <message>``, see
    `ParentLog`), logged in this process, where the application configured logging."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._pending = b""

    def forward(self) -> None:
        """Log the lines the listener process wrote since the last call (never waits)."""
        while True:
            try:
                data = os.read(self._fd, 65536)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            *lines, self._pending = (self._pending + data).split(b"\n")
            for line in lines:
                level, _, rest = line.decode("utf-8", "replace").partition(" ")
                name, _, message = rest.partition(" ")
                if level.isdigit() and name.startswith("diskcache_core"):
                    logging.getLogger(name).log(int(level), "%s", message)


class LeaseWatch:
    """The elected process's view of its listener's lease, for the log: the listener process
    logs nothing where the application would see it (its standard error is the application's,
    its logging unconfigured), so the process that started it reports for it. A lease not
    granted within `START_GRACE` of the start is a WARNING (and its grant then an INFO); one
    that lapses for `LEASE_GRACE` after a grant (the listener's connections to Redis failed)
    is a WARNING, its return an INFO with how long it was gone (`Outage`)."""

    def __init__(self, directory: str, words: StampSet) -> None:
        self._directory = directory
        self._words = words
        self._outage = Outage(
            _LOG, f"the listener of {directory!r}", "has no lease", "has its lease again"
        )
        self._started = time.monotonic()
        self._granted = False
        self._slow = False  # no grant within START_GRACE: said so
        self._lapsed_since = 0.0

    def check(self) -> None:
        """Look at the lease once (every few tens of milliseconds, from the supervisor)."""
        now = time.monotonic()
        if self._words.lease_valid_checked():
            if not self._granted:
                self._granted = True
                if self._slow:
                    _LOG.info(
                        "the listener of %r has its lease, %.1f s after it started",
                        self._directory, now - self._started,
                    )
            self._lapsed_since = 0.0
            if self._outage.down_since:
                self._outage.recovered()
        elif not self._granted:
            if not self._slow and now - self._started >= START_GRACE:
                self._slow = True
                _LOG.warning(
                    "the listener of %r has no lease %.0f s after it started (it cannot reach"
                    " the remote, or cannot start): no copy of this host is served, every read"
                    " asks Redis", self._directory, now - self._started,
                )
        elif not self._lapsed_since:
            self._lapsed_since = now
        elif now - self._lapsed_since >= LEASE_GRACE:
            self._outage.failed(
                "the listener process cannot reach the remote (or died): no copy of this host"
                " is served, every read asks Redis", self._lapsed_since,
            )
