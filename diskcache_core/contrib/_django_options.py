"""A Django CACHES entry's options: the FanoutCache they configure, shared by every backend
object of the process, and the entry limit (Django's MAX_ENTRIES and CULL_FREQUENCY).

One FanoutCache per configuration per process: Django builds a backend object per thread (and
per async context), so construction must be cheap. The FanoutCache (which opens databases) lives
in a table keyed by (LOCATION, SHARDS, DATABASE_TIMEOUT, OPTIONS).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .. import DiskCacheError, FanoutCache

__all__ = ["SHARED", "EntryLimit", "location", "shared_fanout"]

# FanoutCache's arguments that a CACHES entry gives next to OPTIONS, by the names they might be
# given under inside it: passed on from there, Python would only say "got multiple values".
_ENTRY_KEYS = {
    "directory": "LOCATION", "location": "LOCATION", "LOCATION": "LOCATION",
    "shards": "SHARDS", "SHARDS": "SHARDS",
    "timeout": "DATABASE_TIMEOUT", "database_timeout": "DATABASE_TIMEOUT",
    "DATABASE_TIMEOUT": "DATABASE_TIMEOUT",
}  # fmt: skip


class EntryLimit:
    """Django's MAX_ENTRIES and CULL_FREQUENCY, taken out of `options` (the rest are settings).

    Without MAX_ENTRIES the cache is bounded by ``size_limit`` alone (Django's built-in backends
    default to 300 entries; a disk cache is meant to be larger).
    """

    def __init__(self, options: dict[str, Any]) -> None:
        max_entries = _whole(options.pop("MAX_ENTRIES", None))
        cull_frequency = _whole(options.pop("CULL_FREQUENCY", 3))
        if max_entries is not None and (type(max_entries) is not int or max_entries < 1):
            raise ImproperlyConfigured(
                f"OPTIONS['MAX_ENTRIES'] must be an int >= 1, not {max_entries!r}"
            )
        if type(cull_frequency) is not int or cull_frequency < 0:
            raise ImproperlyConfigured(
                f"OPTIONS['CULL_FREQUENCY'] must be an int >= 0, not {cull_frequency!r}"
            )
        self.max_entries: int | None = max_entries
        self.cull_frequency: int = cull_frequency

    def make_room(self, fanout: FanoutCache) -> None:
        """Before storing one entry, when `fanout` holds MAX_ENTRIES: remove 1/CULL_FREQUENCY
        of them in the eviction policy's order (all for CULL_FREQUENCY 0), as Django's own
        backends do."""
        if self.max_entries is None:
            return
        count = len(fanout)
        if count < self.max_entries:
            return
        if self.cull_frequency == 0:
            fanout.clear(retry=True)
        else:
            fanout.evict_items(count // self.cull_frequency, retry=True)


SHARED: dict[tuple[Any, ...], FanoutCache] = {}
_shared_lock = threading.Lock()


def _check_entry_keys(options: dict[str, Any]) -> None:
    """ImproperlyConfigured for an option that is the CACHES entry's own key (``shards`` is
    SHARDS, ``timeout`` DATABASE_TIMEOUT, ``directory`` LOCATION), naming where it belongs."""
    for name, value in options.items():
        entry_key = _ENTRY_KEYS.get(name)
        if entry_key is not None:
            raise ImproperlyConfigured(
                f"OPTIONS[{name!r}] is not a cache setting: give it as the CACHES entry's"
                f" {entry_key}, next to OPTIONS ({entry_key!r}: {value!r})"
            )


def _option_key(options: dict[str, Any]) -> str:
    # Settings may hold unhashable values (a list of allowed types): compare their text.
    return repr(sorted(options.items(), key=lambda item: item[0]))


def shared_fanout(
    location: str, params: dict[str, Any], options: dict[str, Any], remote: bool
) -> FanoutCache:
    """The process's FanoutCache for this CACHES entry (`params`, its `options`), opened on
    first use. Its DISK (diskcache-community's name) wins over ``OPTIONS['disk']``; either may
    be a Disk type or its dotted path; without both, `default_disk()`'s. With a `remote` the
    directory only keeps copies and each shard runs listener processes: one shard by default."""
    shards = params.get("SHARDS", 1 if remote else 8)
    timeout = params.get("DATABASE_TIMEOUT", 0.010)
    disk = params.get("DISK")
    key = (location, shards, timeout, _option_key(options), repr(disk))
    found = SHARED.get(key)
    if found is not None:
        return found
    with _shared_lock:
        found = SHARED.get(key)
        if found is None:
            _check_entry_keys(options)
            settings = dict(options)
            in_options = settings.pop("disk", None)
            disk = in_options if disk is None else disk
            try:
                if isinstance(disk, str):
                    disk = import_string(disk)
                found = FanoutCache(location, shards=shards, timeout=timeout, disk=disk, **settings)
            except DiskCacheError:  # a full disk, a damaged database: not the configuration
                raise
            except (TypeError, ValueError, ImportError, NotADirectoryError) as exc:
                raise ImproperlyConfigured(f"cache at {location!r}: {exc}") from exc
            SHARED[key] = found
        return found


def location(directory: Any) -> str:
    """LOCATION as an absolute path; ImproperlyConfigured when missing or not a path."""
    if not directory:
        raise ImproperlyConfigured(
            "DjangoCache needs LOCATION: the cache directory (shared by every process using it)"
        )
    try:
        path: str = os.fspath(directory)
    except TypeError:
        raise ImproperlyConfigured(f"LOCATION must be a path, not {directory!r}") from None
    return os.path.abspath(os.path.expandvars(os.path.expanduser(path)))


def _whole(value: Any) -> Any:
    """An int written as text (``"300"``, as Django's own backends take it) as that int."""
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit() and value.isascii():
        return int(value)
    return value
