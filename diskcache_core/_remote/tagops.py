"""The remote tier's tag operations (a base class of `RemoteTier`, as `TagOperations` is of
Cache): ``evict(tag)``, ``evict_tags(tags)`` and ``get(..., tags=True)`` on the items in Redis,
each through the scripts of `_remote.tagged` (via `RemoteStore`)."""

from __future__ import annotations

import time
from typing import Any, Callable

from .._arguments import check_tag
from .._disk.disk import Disk
from .._errors import RemoteOutcomeUnknownError
from .._metrics import EvictionCounts, RemoteCounts
from .client import RemoteStore
from .form import decode_item
from .stamps import RemoteWords

__all__ = ["RemoteTagOperations"]


class RemoteTagOperations:
    """Tag eviction and tagged reads of a `RemoteTier`, over the parts it holds."""

    _remote: RemoteStore
    _words: RemoteWords
    _disk: Disk
    answered: RemoteCounts
    removed: EvictionCounts

    # RemoteTier's own methods: bump a name's stamp, a key's name, a listener made sure of.
    _bump: Callable[[bytes], None]
    _name: Callable[[Any], bytes]
    _check_listener: Callable[[], None]

    def evict(self, tag: Any) -> int:
        """Remove the items carrying `tag` among their tags from Redis: through the tag's set
        (`evict_tags`), then a scan of the prefix for items whose first tag it is that no set
        names (written by a version before tag sets); the count removed."""
        tag = check_tag(tag)
        if tag is None:  # SQLite's ``tag = NULL`` matches no row: untagged items stay, as locally
            return 0
        removed = self.evict_tags((tag,))
        try:
            scanned = self._remote.each_batch(lambda names: self._remote.evict_tag(names, tag))
        finally:
            self._words.renew_all()
        self.removed.tag += scanned
        return removed + scanned

    def evict_tags(self, tags: tuple[Any, ...]) -> int:
        """Remove every item carrying any of `tags` (checked) from Redis, with its tag
        memberships: one script (on a cluster, one per slot holding such items), no scan. Other
        hosts drop their copies as for any write (the listener); this host's go at once."""
        if not tags:
            return 0
        try:
            names = self._remote.evict_tags(tags)
        except RemoteOutcomeUnknownError:
            self._words.renew_all()  # (which items went is unknown: no copy is served)
            raise
        for name in names:
            self._bump(name)
        self.removed.tag += len(names)
        return len(names)

    def get_tagged(
        self, key: Any, default: Any, read: bool, expire_time: bool, tag: bool
    ) -> tuple[Any, ...]:
        """get(..., tags=True): the item and its tags from Redis in one script (no copy: the
        copies keep no tags), the tags last, after what `get` returns for the other flags."""
        self._check_listener()
        data, tags = self._remote.get_tagged(self._name(key))
        item = None if data is None else decode_item(data)
        if item is not None and item.expire_time is not None and item.expire_time <= time.time():
            item = None
        if item is None:
            self.answered.missed += 1
            return (default, *[None] * (expire_time + tag), frozenset())
        self.answered.found += 1
        value = self._disk.fetch(item.mode, None, item.db_value, read)
        if item.tag is not None:  # (an item of a version before tag hashes has none)
            tags = tags | {item.tag}
        extra = ([item.expire_time] if expire_time else []) + ([item.tag] if tag else [])
        return (value, *extra, tags)
