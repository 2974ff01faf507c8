"""The listener's invalidation lag: how long after a write reaches Redis its invalidation is
applied on this host, measured by probes.

At each of its pings (every `_PING_EVERY`, on a single server) the listener writes a probe
name of its own under its prefix (``<prefix>~probe/<token>/<n>``, set with a short expiry) in
place of the PING, on its tracking connection, and times, on its own monotonic clock, the moment
it applies that name's invalidation. A probe measures the whole path a write of any host takes
to this host's stamps (the write reaching Redis, Redis's message, the listener's wake and batch
pause), plus the half round trip of the probe's own SET: an upper bound by that much. Why not
timestamps carried in each item's header: those compare the writer's wall clock with the
listener's (skewed between hosts by more than the lag itself), and would cost every write the
header change; a probe costs one command per ping and needs no clock but the listener's.

No probe is sent while one is outstanding (its lag would be misattributed): one unheard for
`_GIVE_UP` counts with the lag it has waited (at least that), so a listener that stops hearing
shows as a lag, not as silence. Every listener ignores every probe name (its own is only
timed): the ``~`` mark is no cache key's (see `encode_key`), so neither the caches' scans nor
the refresher see them. The percentiles are over the last `_WINDOW` probes (about 16 s).
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from typing import Any

import redis.exceptions

from .stamps import LAG_MAX, PROBE_MARK, StampSet, pack_lag

__all__ = ["LagProbe"]

_WINDOW = 64  # probes the percentiles are over
_GIVE_UP = 2.0  # seconds after which an unheard probe counts, with that lag
_EXPIRE_MS = 5000  # a probe name's expiry in Redis: it outlives its timing, then goes


class LagProbe:
    """One listener's probes (module docstring): sent on its pings, timed when heard."""

    def __init__(self, words: StampSet) -> None:
        self._words = words
        # Under the longest prefix: no other member's prefix is a prefix of the probe's name.
        self._base = words.prefixes[0] + PROBE_MARK + os.urandom(6).hex().encode() + b"/"
        self._sequence = 0
        self._outstanding: bytes | None = None
        self._sent = 0.0
        self._lags: deque[float] = deque(maxlen=_WINDOW)
        self._probes = words.probes()  # (counted on from the previous listener's)
        self._enabled = True

    def ping(self, tracker: Any) -> None:
        """The listener's ping on `tracker` (a connection): a probe's SET when none is
        outstanding, else a PING. Redis refusing the SET (an ACL that forbids it) leaves
        the lag unmeasured and the listener listening."""
        now = time.monotonic()
        if self._outstanding is not None and now - self._sent >= _GIVE_UP:
            self._record(min(now - self._sent, LAG_MAX))
            self._outstanding = None
        if self._outstanding is not None or not self._enabled:
            tracker.send_command("PING")
            tracker.read_response()
            return
        self._sequence += 1
        name = self._base + b"%d" % self._sequence
        self._outstanding, self._sent = name, time.monotonic()
        tracker.send_command("SET", name, b"", "PX", _EXPIRE_MS)
        try:
            tracker.read_response()
        except redis.exceptions.ResponseError:  # an error reply: no probes on this server
            self._enabled = False
            self._outstanding = None

    def heard(self, name: bytes) -> bool:
        """Whether `name` is this listener's outstanding probe (its lag is recorded)."""
        if name != self._outstanding:
            return False
        self._outstanding = None
        self._record(time.monotonic() - self._sent)
        return True

    def _record(self, lag: float) -> None:
        """One more lag: the window's percentiles published in every member's stamp file."""
        self._lags.append(lag)
        self._probes += 1
        ordered = sorted(self._lags)
        self._words.set_lag(
            pack_lag(*(ordered[_rank(len(ordered), share)] for share in (0.50, 0.90, 0.99))),
            self._probes,
        )


def _rank(count: int, share: float) -> int:
    """The nearest-rank percentile's index in `count` ordered values."""
    return max(0, math.ceil(share * count) - 1)
