"""The memory tier's admission and sampling policy: which keys it keeps, and whether gets look
it up at all.

Admission. A read keeps a key (with no entry) only if it was seen lately: a key read once is not
worth a fill. A write keeps its value also while the map has room to spare. Once the map is full,
"lately" is within as many gets as it holds items (`forget_after`; the set is emptied when the
count of gets, hits plus misses, reaches `forget_at`): a cyclic scan over more items than fit
neither flushes the map nor pays for filling it. A set of hashes (not a bitmap): two operations
per miss, where Python's bit arithmetic cost a miss ~10%.

Sampling. While the tier answers fewer than one lookup in RARE_HITS, a get that misses it makes
the next `gap` gets skip it (`skip` counts them down; the tier's hit path does that): a workload
whose hot set does not fit would pay a lookup that cannot hit on nearly every get. A sampled get
still looks up, keeps and notes keys, and a hit does not start a gap: a hot set that appears is
found, and ends the sampling.

The counts of hits and misses live here too: the policy decides by them, and the tier's hit path
(which must not hold the tier itself: a reference cycle would keep a dropped cache's version file
mapped until the garbage collector ran) counts them here. A hit counts once: one with a value in
`hits`, one that answered "absent" in `absent_hits`. The clock of "lately" is the gets that
looked a value up or missed (``hits + misses``); sampling reviews count both kinds of hit.
"""

from __future__ import annotations

from collections.abc import Hashable

__all__ = [
    "COMMON_HITS", "RARE_HITS", "REVIEW_MISSES", "SAMPLED_REVIEW", "SAMPLE_GAP", "Admission",
]

# A tier that answers fewer than one lookup in RARE_HITS (over a window of at least REVIEW_MISSES
# misses, ended when the window of keys seen lately ends) is looked up by one get in
# SAMPLE_GAP + 1; by every get again once one sampled lookup in COMMON_HITS hits (over
# SAMPLED_REVIEW sampled misses). A hit saves 4 us or more; a lookup that misses costs 0.2-0.3 us
# (a small database) to 0.4-0.8 us (one far larger than the CPU's caches; measured): sampling
# gains below one hit in 20 to 5 lookups, and both thresholds stay under that.
RARE_HITS = 32
COMMON_HITS = 16
REVIEW_MISSES = 1024
SAMPLE_GAP = 7
SAMPLED_REVIEW = 128


class Admission:
    """The lookup counts, the keys seen lately (`recent`) and the sampling state of one memory
    tier. Counts are plain increments: exact with one thread, approximate when threads race."""

    def __init__(self, item_limit: int) -> None:
        self.hits = 0  # hits that answered a value
        self.misses = 0
        self.absent_hits = 0  # hits that answered "absent" (never reset: `Cache.metrics`)
        self.absent_at_reset = 0  # absent_hits at the last `reset_counts`
        self.earlier_hits = 0  # hits counted before the last `reset_counts` (`Cache.metrics`)
        self.invalidated = 0  # entries found invalidated by a write (likewise)
        self.recent: set[int] = set()
        self.forget_after = item_limit
        self.forget_at = item_limit
        self.skip = 0  # gets left to skip the tier in the current gap (in `misses` already)
        self.gap = 0  # gets skipped after a sampled miss (0: not sampling)
        self._reviewed = (0, 0)  # hits and misses at the last review
        self._samples_left = SAMPLED_REVIEW

    def seen_lately(self, map_key: Hashable) -> bool:
        """Whether `map_key` was looked up lately; notes it."""
        seen = hash(map_key)
        recent = self.recent
        if seen in recent:
            return True
        # Writes note keys too, and gets are the clock: the set's size bounds it between gets.
        if self.hits + self.misses >= self.forget_at or len(recent) >= self.forget_after:
            self.forget_recent()
        recent.add(seen)
        return False

    def forget_recent(self) -> None:
        """The window of keys seen lately has passed: start it afresh, and review how often the
        tier answers (over at least REVIEW_MISSES misses)."""
        self.forget()
        if not self.gap and self.misses - self._reviewed[1] >= REVIEW_MISSES:
            self.review()

    def sampled_miss(self) -> bool:
        """While sampling: a get that looked the tier up missed it. True: the next `gap` gets
        skip the tier (`skip` is set); False: sampling stopped (every SAMPLED_REVIEW such
        misses, `review`)."""
        self._samples_left -= 1
        if self._samples_left <= 0:
            self._samples_left = SAMPLED_REVIEW
            self.review()
            if not self.gap:
                return False
        self.skip = self.gap
        return True

    def review(self) -> None:
        """Start or stop sampling by how often lookups hit since the last review."""
        last_hits, last_misses = self._reviewed
        hits, misses = self.hits + self.absent_hits - self.absent_at_reset, self.misses
        new_hits, new_misses = hits - last_hits, misses - last_misses
        self._reviewed = (hits, misses)
        if new_hits < 0 or new_misses < 0:  # a stats reset in another thread raced: no window
            return
        gap = self.gap
        lookups = new_hits + new_misses // (gap + 1)  # skipped gets are counted as misses
        if not gap:
            if new_hits * RARE_HITS < lookups:
                self.gap = SAMPLE_GAP
                self._samples_left = SAMPLED_REVIEW
        elif new_hits * COMMON_HITS >= lookups:  # every get looks the tier up again
            self.gap = self.skip = 0

    def forget(self) -> None:
        """Forget which keys were seen lately."""
        self.recent.clear()
        self.forget_at = self.hits + self.misses + self.forget_after

    def map_changed(self, full: bool, items: int, item_limit: int) -> None:
        """The map's fill changed: when it is `full`, forget after as many gets as it holds
        items (so a cyclic scan over more items than fit is not kept at all: each key comes back
        after more gets than that); while it has room, after as many as it may hold."""
        forget_after = items if full else item_limit
        self.forget_after = forget_after
        self.forget_at = min(self.forget_at, self.hits + self.misses + forget_after)

    def reset_counts(self) -> None:
        """Zero the hit and miss counts; review from there."""
        self.earlier_hits += self.hits
        self.hits = 0
        self.misses = self.skip  # the gap's gets still to come, counted when it began
        self.absent_at_reset = self.absent_hits
        self._reviewed = (0, 0)
        self.forget_at = min(self.forget_at, self.forget_after)
