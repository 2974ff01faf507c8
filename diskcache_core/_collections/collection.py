"""What Deque and Index share: opening their cache, and writing many items in bounded batches.

Both keep their items in one `Cache` (its directory is theirs alone) and hold no state of their
own beyond `Deque.maxlen`, so any number of objects, threads and processes may use one
directory at once. Every cache call passes ``retry=True``: these collections wait for the lock
rather than raise `Timeout`. Items never expire and, with eviction policy ``'none'``, are never
evicted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from .._cache.cache import Cache
from .._disk.disk import Disk
from .._errors import DiskCacheError

__all__ = ["BATCH", "MISSING", "open_collection_cache", "store_in_batches"]

MISSING: Any = object()  # "no item": a get that found nothing (ENOVAL stays the caller's)
BATCH = 100  # items written per transaction by extend and update: bounded lock hold time


def open_collection_cache(
    directory: str | bytes | os.PathLike[str] | None, disk: type[Disk] | None = None
) -> Cache:
    """The cache in `directory` (a new temporary one when None) with Disk type `disk` (None:
    the process's default), opened with eviction policy 'none' so that a collection never
    loses items to culling."""
    if isinstance(directory, bytes):
        directory = os.fsdecode(directory)
    return Cache(directory, disk=disk, eviction_policy="none")


def store_in_batches(
    cache: Cache, items: Iterable[Any], store: Callable[[Any], object], after: Callable[[], None]
) -> None:
    """Store `items` one by one, `BATCH` to a transaction, calling `after` in each.

    Like ``deque.extend`` and ``dict.update``, a failure part-way (the iterable raising, an
    item that cannot be serialized, Ctrl-C) keeps the items before it, then raises: items taken
    from the iterable (popped from another deque, say) are never dropped.
    """
    iterator = iter(items)
    while True:
        batch: list[Any] = []
        failure: BaseException | None = None
        try:
            for item in iterator:
                batch.append(item)
                if len(batch) == BATCH:
                    break
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the items before it
            failure = exc
        if batch:
            with cache.transact(retry=True):
                for item in batch:
                    try:
                        store(item)
                    except DiskCacheError:
                        raise  # the database failed: roll the batch back
                    except BaseException as exc:  # noqa: BLE001 - keep what came before
                        failure = exc
                        break
                after()
        if failure is not None:
            raise failure
        if len(batch) < BATCH:
            return
