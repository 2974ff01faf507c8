"""`RemoteItems`: a Cache's item API when Redis holds the items (``Cache(..., remote=URL)``).

A sibling implementation behind the same contract as the local one, chosen once, when the cache
is made: `Cache.__new__` returns a `RemoteCache` (``RemoteItems`` before ``Cache`` in its method
order) when ``remote=`` is given, so the local item methods carry no ``if remote`` test and cost
nothing for it. Each method here hands the operation to the `RemoteTier` (_remote/tier.py);
operations that would act on this host's copy only raise `RemoteUnsupportedError`.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NoReturn

from .._arguments import check_tags, expire_at
from .._disk.disk import DELETE, ENOVAL, KEEP
from .._errors import RemoteUnsupportedError
from .base import CacheBase
from .counters import check_delta
from .tags import check_evict_tags
from .getforms import typed_get

if TYPE_CHECKING:
    from .._remote.tier import RemoteTier

__all__ = ["RemoteGroup", "RemoteItems", "facade_class"]

# The listener a near cache shares with other caches: ``(directory, members)``: the directory
# where it is elected, and each cache it serves as ``(directory, remote prefix)``. FanoutCache
# gives its shards one (one listener for all of them); a plain Cache is a group of itself.
RemoteGroup = tuple[str, tuple[tuple[str, str], ...]]


def facade_class(kind: type) -> type:
    """The class a remote-backed cache was asked for (``Cache``, or the caller's subclass of
    it): the first in `kind`'s method order that is not remote-backed. Shown in its repr, named
    in its pickles."""
    for klass in kind.__mro__:
        if not issubclass(klass, RemoteItems):
            return klass
    return kind


class RemoteItems(CacheBase):
    """The item methods of a cache with a remote: each one the remote tier's."""

    _remote: RemoteTier

    def __init__(
        self,
        directory: Any = None,
        timeout: float = 60,
        disk: Any = None,
        *,
        remote_group: RemoteGroup | None = None,
        **settings: Any,
    ) -> None:
        """Open the near cache in `directory` of the remote given by ``remote=`` (see
        `CacheBase`). `remote_group`: the listener it shares with other caches (see
        `RemoteGroup`; FanoutCache passes one to its shards); None: its own, in `directory`."""
        self._group = remote_group
        super().__init__(directory, timeout, disk, **settings)

    def _open_tiers(self, code_only: dict[str, Any]) -> None:
        from .._remote.tier import RemoteTier  # imports redis: only when a remote is used

        self._remote = RemoteTier(
            self._directory, self._store, self._disk, self._native_numbers, code_only,
            self._group, self._evictor,
        )
        self._configure_memory()

    def _configure_memory(self) -> None:
        """This cache's memory tier, validated by the remote's stamps, not the version words."""
        size_limit, item_limit = self._memory_limits()
        self._memory = self._remote.configure_memory(size_limit, item_limit)

    def _rebind_memory(self, words: memoryview) -> None:
        """(The version words were mapped anew: the memory tier here follows the stamps.)"""

    @property
    def remote(self) -> str | None:
        """The URL of the remote (Redis) this cache fronts (see :doc:`remote`)."""
        return self._remote.url

    # --- reads ----------------------------------------------------------------------------------

    @typed_get
    def get(
        self,
        key: Any,
        default: Any = None,
        read: bool = False,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
        store_time: bool = False,
        *,
        tags: bool = False,
    ) -> Any:
        """Return the value for `key`, or `default` (see `Cache.get`): a copy of this host while
        it is known current, else Redis's. No ``store_time`` (Redis keeps none)."""
        if store_time:
            raise RemoteUnsupportedError("get(store_time=True) on a cache with a remote")
        if tags:  # (from Redis, with the item: see `RemoteTier.get_tagged`)
            return self._remote.get_tagged(key, default, read, expire_time, tag)
        return self._remote.get(key, default, read, expire_time, tag)

    def __contains__(self, key: Any) -> bool:
        """True when `key` is present and not expired."""
        return self._remote.get(key, ENOVAL, False, False, False) is not ENOVAL

    # --- writes ---------------------------------------------------------------------------------

    def _store_item(
        self, statement: str, key: Any, value: Any, expire: Any, read: bool, tag: Any, retry: bool,
        tags: Any = None,
    ) -> bool:
        """set and add: Redis first, the item and its tags in one script, then this host's
        stamp (see `RemoteTier.store_item`)."""
        extras: tuple[Any, ...] = ()
        if tags is not None:  # (checked first: nothing is stored with a bad tag)
            tag, extras = check_tags(tag, tags)
        return self._remote.store_item(statement, key, value, expire, read, tag, extras)

    def touch(self, key: Any, expire: float | None = None, retry: bool = False) -> bool:
        """Set a new expiry for `key`; True when the item was present."""
        expires = None if expire is None else expire_at(time.time(), expire)
        return self._remote.touch(key, expires)

    def incr(
        self, key: Any, delta: float = 1, default: float | None = 0, retry: bool = False
    ) -> Any:
        """Add `delta` to the number at `key`, as a compare-and-set in Redis (atomic across
        hosts); return the new value (see `Cache.incr`)."""
        if type(delta) is not int or (default is not None and type(default) is not int):
            check_delta("incr", delta, default)
        return self._remote.update(key, lambda current: current + delta, default)

    def update(
        self,
        key: Any,
        function: Callable[[Any], Any],
        default: Any = None,
        expire: Any = KEEP,
        tag: Any = KEEP,
        retry: bool = False,
    ) -> Any:
        """Replace the value at `key` by ``function(value)`` atomically, as a compare-and-set in
        Redis (atomic across hosts; `function` is called again when another writer got in
        between); see `Cache.update`."""

        def step(current: Any) -> tuple[Any, Any]:
            new = function(current)
            if new is KEEP:
                return KEEP, current
            if new is DELETE:
                return DELETE, default
            return new, new

        return self._remote.change(key, step, default, expire, tag)

    def pop(
        self,
        key: Any,
        default: Any = None,
        expire_time: bool = False,
        tag: bool = False,
        retry: bool = False,
    ) -> Any:
        """Remove `key` and return its value (Redis's GETDEL: atomic across hosts)."""
        return self._remote.pop(key, default, expire_time, tag)

    def delete(self, key: Any, retry: bool = False) -> bool:
        """Remove `key` from Redis; True when it was there."""
        return self._remote.delete(key)

    @contextlib.contextmanager
    def transact(self, retry: bool = False) -> Iterator[None]:
        """Not with a remote (a transaction cannot span hosts): RemoteUnsupportedError."""
        self._unsupported("transact()")
        yield  # (never reached)

    # --- whole cache ----------------------------------------------------------------------------

    def evict(self, tag: Any, retry: bool = False) -> int:
        """Remove every item carrying `tag` among its tags from Redis; return how many."""
        return self._remote.evict(tag)

    def evict_tags(self, tags: Iterable[Any], retry: bool = False) -> int:
        """Remove every item carrying any of `tags` from Redis, for every host, atomically (on
        a Redis Cluster: per slot); return how many."""
        return self._remote.evict_tags(check_evict_tags(tags))

    def clear(self, retry: bool = False) -> int:
        """Remove every item under the prefix from Redis; return how many (this host's copies
        go too)."""
        try:
            removed = self._remote.clear()
            self._evictor.clear(retry)
            return removed
        finally:
            if self._memory is not None:
                self._memory.clear()

    def close(self) -> None:
        """Close the remote tier (the listener stops with the last cache of its directory in
        this process), then the local parts (see `CacheBase.close`)."""
        self._remote.close()
        self._close_parts()

    # --- what a remote cannot do ----------------------------------------------------------------

    def _unsupported(self, what: str) -> NoReturn:
        self._remote.unsupported(what)

    def __len__(self) -> int:
        """Not with a remote: RemoteUnsupportedError."""
        self._unsupported("len()")

    def push(self, *args: Any, **kwargs: Any) -> Any:
        """Not with a remote: RemoteUnsupportedError."""
        self._unsupported("push()")

    def pull(self, *args: Any, **kwargs: Any) -> Any:
        """Not with a remote: RemoteUnsupportedError."""
        self._unsupported("pull()")

    def peek(self, *args: Any, **kwargs: Any) -> Any:
        """Not with a remote: RemoteUnsupportedError."""
        self._unsupported("peek()")

    def peekitem(self, *args: Any, **kwargs: Any) -> Any:
        """Not with a remote: RemoteUnsupportedError."""
        self._unsupported("peekitem()")

    def iterkeys(self, reverse: bool = False, *, tag: Any = ENOVAL) -> Iterator[Any]:
        """Not with a remote, with or without `tag` (a tag's set in Redis has no insertion
        order, and iteration over the remote's items is not offered): RemoteUnsupportedError."""
        self._unsupported("iterkeys()")

    def __iter__(self) -> Iterator[Any]:
        """Not with a remote: RemoteUnsupportedError."""
        self._unsupported("iteration")

    def __reversed__(self) -> Iterator[Any]:
        """Not with a remote: RemoteUnsupportedError."""
        self._unsupported("iteration")

    # --- copies and names -----------------------------------------------------------------------

    def __getstate__(self) -> tuple[Any, ...]:
        return (*super().__getstate__(), self._group)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        directory, timeout, disk, code_only = state[:4]
        group = state[4] if len(state) > 4 else None  # (a pickle of an earlier version: none)
        reopen = self.__init__  # type: ignore[misc]
        reopen(directory, timeout, disk, remote_group=group, **code_only)

    def __repr__(self) -> str:
        return super().__repr__().replace(type(self).__name__, facade_class(type(self)).__name__, 1)
