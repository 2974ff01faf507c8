"""Named sub-collections inside a cache directory: ``cache/<name>``, ``deque/<name>`` and
``index/<name>`` (python-diskcache's layout), each a Cache of its own made on first use.

FanoutCache (and through it the Django backend) hands them out; one object per name and kind,
so every caller of ``fanout.deque('jobs')`` shares one Deque, and ``close()`` reaches them all.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from .._cache.cache import Cache
from .._disk.directories import open_subdirectory
from .._disk.disk import Disk
from .._errors import RemoteUnsupportedError
from .._collections.persistent import Deque, Index

__all__ = ["SubCollections"]

T = TypeVar("T")


def _check_name(name: Any) -> list[str]:
    """Split a sub-collection name into path parts that stay inside the cache directory."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    parts = name.split("/")
    if not name or any(part in ("", ".", "..") or "\\" in part or "\0" in part for part in parts):
        raise ValueError(f"name must be relative path parts without '.', '..' or '', got {name!r}")
    return parts


class SubCollections:
    """The named caches, deques and indexes under `directory`, made with Disk type `disk`."""

    def __init__(
        self, directory: str, disk: type[Disk], remote: bool = False, read_only: bool = False
    ) -> None:
        self._directory = directory
        self._read_only = read_only  # the owner's: each collection opens read-only, none is made
        self._disk = disk
        self._remote = remote  # the owner has a remote: a collection of this host's is refused
        self._made: dict[tuple[str, str], tuple[Cache, Any]] = {}  # (kind, name): (store, made)
        self._lock = threading.Lock()
        _every.add(self)

    def _get(
        self, kind: str, name: str, store: Callable[[str], Cache], wrap: Callable[[Cache], T]
    ) -> T:
        """The `kind` named `name`: ``wrap(store(path))``, made on first use."""
        parts = _check_name(name)
        with self._lock:
            found = self._made.get((kind, name))
            if found is None:
                path = open_subdirectory(  # no link
                    self._directory, kind, *parts, create=not self._read_only
                )
                made = store(path)
                found = self._made[(kind, name)] = (made, wrap(made))
            collection: T = found[1]
            return collection

    def cache(self, name: str, timeout: float, disk: type[Disk] | None, **settings: Any) -> Cache:
        """The Cache `name` (`disk` None: the directory's Disk type); `timeout` and `settings`
        apply when it is first made."""
        if settings.get("remote") is None:
            self._refuse_with_remote("a named cache() without a remote= of its own")
        disk_type = self._disk if disk is None else disk
        if self._read_only:
            settings.setdefault("read_only", True)
        return self._get(
            "cache", name, lambda path: Cache(path, timeout=timeout, disk=disk_type, **settings),
            lambda store: store,
        )

    def deque(self, name: str, maxlen: int | None, disk: type[Disk] | None = None) -> Deque[Any]:
        """The Deque `name`; `maxlen` and `disk` (None: the directory's) apply when it is first
        made."""
        self._refuse_with_remote("deque()")
        def wrap(store: Cache) -> Deque[Any]:
            return Deque.fromcache(store, maxlen=maxlen)

        return self._get("deque", name, self._unevicted(disk), wrap)

    def index(self, name: str, disk: type[Disk] | None = None) -> Index[Any, Any]:
        """The Index `name`; `disk` (None: the directory's) applies when it is first made."""
        self._refuse_with_remote("index()")
        return self._get("index", name, self._unevicted(disk), Index.fromcache)

    def _refuse_with_remote(self, what: str) -> None:
        """With a remote, a named collection would hold this host's items only: refused."""
        if self._remote:
            raise RemoteUnsupportedError(
                f"{what} is not supported on a FanoutCache with a remote: it would hold this"
                " host's items only (see the 'Many hosts' documentation)"
            )

    def _unevicted(self, disk: type[Disk] | None) -> Callable[[str], Cache]:
        """What opens a deque's or index's Cache: with `disk` (None: the directory's Disk
        type), and nothing evicted (a collection, not a cache; read-only where the cache is,
        its stored policy read, not set)."""
        disk_type = self._disk if disk is None else disk
        if self._read_only:
            return lambda path: Cache(path, disk=disk_type, read_only=True)
        return lambda path: Cache(path, disk=disk_type, eviction_policy="none")

    def close(self) -> None:
        """Close every sub-collection's Cache (each reopens on next use)."""
        with self._lock:
            stores = [store for store, _ in self._made.values()]
        for store in stores:
            store.close()


# A fork while another thread opens a sub-collection copies the lock held: each child's is new.
_every: weakref.WeakSet[SubCollections] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for named in list(_every):
        named._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
