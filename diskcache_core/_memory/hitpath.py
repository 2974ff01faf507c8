"""The memory tier's hit path: the function that answers a plain get from the map, and what it
reads and answers (the map's `Entry`, its keys, the MISS and FILL signals).

The hottest path of all, where one method call or attribute load costs a tenth of the hit
(measured with benchmarks.micro): `hit_functions` binds everything the path reads once, as
locals of two closures, and the tier (`MemoryTier.build_hit_path`, _memory/tier.py) builds them
anew when what they bind changes. Neither closure holds the tier (only a weak reference, to switch
between the two): a dropped cache's tier is freed at once, its version file closed.

`answer` looks the map up: a valid, unexpired entry answers (a value, or `default` for a key known
absent); otherwise MISS or FILL (the store is read; with FILL the tier is asked to keep what it
finds), and a miss of a key not seen lately is noted in the admission policy (_memory/admission.py)
and may start a sampling gap. `skipping` answers MISS without a look: the gets of a gap (counted as
misses when it began), the last of which ends it. Each answer counts once: a value in ``hits``,
"absent" in ``absent_hits``.
"""

from __future__ import annotations

import math
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from .admission import Admission

__all__ = ["ABSENT", "FILL", "MISS", "Entry", "HitPath", "ReadNotes", "hit_functions", "map_key_of"]


ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT", "__slots__": ()})()


class Entry:
    """One kept item: its value (or that it is absent) and the tag that validates it.

    `stored` is the value itself when `fetch_mode` is None, the serialized column value to decode
    on each hit when it is a Disk mode, and not read when `fetch_mode` is ABSENT: the key was
    missing (or expired) in the database, or deleted (`MemoryTier.after_delete` leaves the old
    value there). `tag` is the bucket's ``pre`` word the entry is valid for (`word` is that
    word's index). A class with slots, not a named tuple: unpacking a tuple
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


# What a tier's hit path (`MemoryTier.hit`) returns when it cannot answer: the store is read,
# and (FILL) the tier asked to keep what it finds (`begin_fill`), or (MISS) not.
MISS: Any = type("Miss", (), {"__repr__": lambda self: "MISS", "__slots__": ()})()
FILL: Any = type("Fill", (), {"__repr__": lambda self: "FILL", "__slots__": ()})()

HitPath = Callable[[Any, Any], Any]


class ReadNotes(Protocol):
    """Who hears of the gets the tier answers (the Evictor: its policy orders by reads)."""

    tracks_reads: bool

    def note_read(self, db_key: Any, raw: Any, hit: bool, now: float) -> None: ...


def map_key_of(db_key: Any, raw: Any, plain_keys: bool) -> Hashable:
    """Map key for a database key: equal exactly when the database keys are the same row.

    Raw keys of the standard Disk are used as they are (Python's equality of str, bytes, int and
    float agrees with SQLite's for them); anything else is a tuple, which no raw key equals. NaN
    keys (never found by SQLite) map to None, which is never stored.
    """
    if raw and plain_keys:
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


class GapSwitch(Protocol):
    """The tier, as the hit path switches it between looking the map up and a sampling gap."""

    def start_gap(self) -> None: ...

    def end_gap(self) -> None: ...


def hit_functions(
    admission: Admission, entries: OrderedDict[Hashable, Entry], words: memoryview,
    plain_keys: bool, put: Callable[[Any], tuple[Any, Any]],
    fetch: Callable[[int, Any, Any, bool], Any], reads: ReadNotes | None,
    guard: Callable[[], bool] | None, admits: bool, owner: weakref.ref[GapSwitch],
) -> tuple[HitPath, HitPath]:
    """``(answer, skipping)`` over a tier's map: `words` validate its entries; `put` and `fetch`
    are the Disk's; `reads` hears of each hit (None: nobody tracks reads now); `guard`: entries
    are answered only while it returns True; `admits`: a miss is noted and may fill (else MISS);
    `owner` is switched into and out of a sampling gap."""
    recent = admission.recent
    lookup = entries.get
    move_to_end = entries.move_to_end
    stale = FILL if admits else MISS  # an invalid or expired entry: refilled if it may be

    def answer(key: Any, default: Any) -> Any:
        kind = type(key)
        if (kind is str or kind is bytes) and plain_keys:
            map_key: Hashable = key
        else:
            map_key = map_key_of(*put(key), plain_keys)
        entry = lookup(map_key)
        if entry is None:
            if not admits:
                return MISS
            # `begin_fill`'s commonest answer, inline (it runs on every miss of a key the
            # tier does not hold): a key not seen lately is noted, not filled.
            seen = hash(map_key)
            if seen in recent:
                return FILL
            admission.misses += 1
            if admission.hits + admission.misses >= admission.forget_at:
                admission.forget_recent()
            recent.add(seen)
            if admission.gap and admission.sampled_miss():
                admission.misses += admission.skip  # the gets it skips, counted now
                tier = owner()
                if tier is not None:
                    tier.start_gap()  # the next `gap` gets skip the map
            return MISS
        if words[entry.word] != entry.tag:
            if not admits:  # (else `begin_fill` counts it, as it counts the miss)
                admission.invalidated += 1
            return stale
        expires = entry.expire_time
        if expires is not None and expires <= time.time():
            return stale
        if guard is not None and not guard():
            return stale
        try:
            move_to_end(map_key)
        except KeyError:  # evicted by another thread just now
            pass
        mode = entry.fetch_mode
        if reads is not None:
            reads.note_read(entry.db_key, entry.raw, mode is not ABSENT, time.time())
        if mode is None:
            admission.hits += 1
            return entry.stored
        if mode is ABSENT:
            admission.absent_hits += 1  # (one count per hit: `hits` adds these)
            return default
        admission.hits += 1
        return fetch(mode, None, entry.stored, False)

    def skipping(key: Any, default: Any) -> Any:
        left = admission.skip - 1  # (a skipped get is a miss: counted as the gap began)
        admission.skip = left
        if left <= 0:
            tier = owner()
            if tier is not None:
                tier.end_gap()
        return MISS

    return answer, skipping
