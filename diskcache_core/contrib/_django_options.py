"""A Django CACHES entry: its keys read and checked, the FanoutCache they configure (shared by
every backend object of the process), and the entry limit (Django's MAX_ENTRIES and
CULL_FREQUENCY).

One set of rules, two readers: `read_entry` lists every `Problem` of an entry without touching
the disk. The backend raises ImproperlyConfigured for the first error when it is first used;
the system checks (``_django_checks``) report each problem with its id and hint.

One FanoutCache per configuration per process: Django builds a backend object per thread (and
per async context), so construction must be cheap. The FanoutCache (which opens databases)
lives in a table keyed by (LOCATION, SHARDS, DATABASE_TIMEOUT, OPTIONS).
"""

from __future__ import annotations

import difflib
import importlib
import os
import threading
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .. import ENOVAL, DiskCacheError, Disk, FanoutCache
from .._arguments import check_timeout
from .._disk.disk import check_disk_class
from .._fanout.layout import check_shard_count
from .._settings import known_setting, setting_names, validate_setting, validate_settings

__all__ = [
    "SHARED",
    "CacheEntry",
    "EntryLimit",
    "Problem",
    "checked_entry",
    "given_shards",
    "location",
    "read_entry",
    "shared_fanout",
]

# FanoutCache's arguments that a CACHES entry gives next to OPTIONS, by the names they might be
# given under inside it: passed on from there, Python would only say "got multiple values".
_ENTRY_KEYS = {
    "directory": "LOCATION",
    "location": "LOCATION",
    "LOCATION": "LOCATION",
    "shards": "SHARDS",
    "SHARDS": "SHARDS",
    "timeout": "DATABASE_TIMEOUT",
    "database_timeout": "DATABASE_TIMEOUT",
    "DATABASE_TIMEOUT": "DATABASE_TIMEOUT",
}

_REMOTE_URL_HINT = (
    "Give a redis:// URL such as 'redis://localhost:6379/0' (rediss:// for TLS, "
    "unix:///run/redis.sock for a socket; ?cluster=true for Redis Cluster)."
)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a CACHES entry. `kind` says which rule it breaks (the system checks
    give each kind its id), `message` what is wrong, `hint` how to fix it; a `warning` leaves a
    cache that works, only not as the entry seems to ask."""

    kind: str
    message: str
    hint: str
    warning: bool = False


class EntryLimit:
    """Django's MAX_ENTRIES and CULL_FREQUENCY (see `read_entry`).

    Without MAX_ENTRIES the cache is bounded by ``size_limit`` alone (Django's built-in backends
    default to 300 entries; a disk cache is meant to be larger).
    """

    def __init__(self, max_entries: int | None = None, cull_frequency: int = 3) -> None:
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


@dataclass(frozen=True)
class CacheEntry:
    """A CACHES entry that `read_entry` found no error in, its values checked: what the
    FanoutCache is opened with (`settings` are OPTIONS less ``disk`` and the entry limit), and
    `key`, its configuration's key in `SHARED`."""

    location: str
    shards: int
    timeout: float
    disk: type[Disk] | None  # None: the process's default (`diskcache_core.default_disk`)
    settings: dict[str, Any]
    limit: EntryLimit
    remote: bool
    key: tuple[Any, ...]


def read_entry(directory: Any, params: dict[str, Any]) -> tuple[CacheEntry | None, list[Problem]]:
    """The entry Django gives the backend (LOCATION, the rest of the CACHES entry), checked
    without I/O: the entry (None when a problem is an error) and every problem found."""
    problems: list[Problem] = []
    path = _location(directory, problems)
    given = params.get("OPTIONS") or {}
    if not isinstance(given, dict):
        problems.append(Problem(
            "bad_value", f"OPTIONS must be a dict, not {type(given).__name__}",
            "Give the cache settings as a dict: 'OPTIONS': {'size_limit': 2**30}.",
        ))
        given = {}
    options = dict(given)
    limit = _entry_limit(options, problems)
    disk = _option_values(options, problems)
    if params.get("DISK") is not None:  # diskcache-community's key: it wins over OPTIONS['disk']
        disk = _disk_class(params["DISK"], problems, "DISK")
    remote = options.get("remote") is not None
    shards = _entry_value("SHARDS", given_shards(params), check_shard_count, problems)
    timeout = _entry_value("DATABASE_TIMEOUT", params.get("DATABASE_TIMEOUT", 0.010),
                           check_timeout, problems)
    if remote:
        _remote_rules(given, limit, problems)
    if path is None or disk is ENOVAL or any(not problem.warning for problem in problems):
        return None, problems
    options.pop("disk", None)
    key = (path, shards, timeout, _option_key(disk, options))
    return CacheEntry(path, shards, timeout, disk, options, limit, remote, key), problems


_CHECKED: dict[str, CacheEntry] = {}
_CHECKED_MAX = 256  # entries remembered (a process has a few; a test suite may have thousands)


def checked_entry(directory: Any, params: dict[str, Any]) -> CacheEntry:
    """`read_entry`'s entry; ImproperlyConfigured naming the first error when it has one.

    Remembered by the entry's text: Django builds a backend object per thread and per async
    context (per request under ASGI), each reading the same entry; reading it costs several
    times what looking it up does. (So LOCATION is resolved, ``~`` and variables expanded,
    when the entry is first used.)
    """
    text = repr((directory, params))
    found = _CHECKED.get(text)
    if found is not None:
        return found
    entry, problems = read_entry(directory, params)
    if entry is None:
        raise ImproperlyConfigured(next(p.message for p in problems if not p.warning))
    if len(_CHECKED) >= _CHECKED_MAX:
        _CHECKED.clear()
    _CHECKED[text] = entry
    return entry


def given_shards(params: dict[str, Any]) -> Any:
    """The entry's SHARDS, unchecked: by default 8, or 1 with a remote (there the directory only
    keeps copies, and each shard runs listener processes)."""
    options = params.get("OPTIONS")
    remote = isinstance(options, dict) and options.get("remote") is not None
    return params.get("SHARDS", 1 if remote else 8)


SHARED: dict[tuple[Any, ...], FanoutCache] = {}
_shared_lock = threading.Lock()


def shared_fanout(entry: CacheEntry) -> FanoutCache:
    """The process's FanoutCache for this configuration, opened on first use."""
    key = entry.key
    found = SHARED.get(key)
    if found is not None:
        return found
    with _shared_lock:
        found = SHARED.get(key)
        if found is None:
            try:
                found = FanoutCache(entry.location, shards=entry.shards, timeout=entry.timeout,
                                    disk=entry.disk, **entry.settings)
            except DiskCacheError:  # a full disk, a damaged database: not the configuration
                raise
            except (TypeError, ValueError, ImportError, NotADirectoryError) as exc:
                raise ImproperlyConfigured(f"cache at {entry.location!r}: {exc}") from exc
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


def _location(directory: Any, problems: list[Problem]) -> str | None:
    try:
        return location(directory)
    except ImproperlyConfigured as exc:
        problems.append(Problem(
            "location", str(exc),
            "Set LOCATION to the cache directory, e.g. '/var/tmp/django_cache': a path every"
            " process sharing the cache can write (it is created when missing).",
        ))
        return None


def _entry_limit(options: dict[str, Any], problems: list[Problem]) -> EntryLimit:
    """MAX_ENTRIES and CULL_FREQUENCY, taken out of `options` (the rest are settings)."""
    max_entries = _whole(options.pop("MAX_ENTRIES", None))
    cull_frequency = _whole(options.pop("CULL_FREQUENCY", 3))
    if max_entries is not None and (type(max_entries) is not int or max_entries < 1):
        problems.append(Problem(
            "bad_value", f"OPTIONS['MAX_ENTRIES'] must be an int >= 1, not {max_entries!r}",
            "Give the most items the cache may hold, or leave MAX_ENTRIES out (then size_limit"
            " alone bounds the cache).",
        ))
        max_entries = None
    if type(cull_frequency) is not int or cull_frequency < 0:
        problems.append(Problem(
            "bad_value", f"OPTIONS['CULL_FREQUENCY'] must be an int >= 0, not {cull_frequency!r}",
            "A full cache removes 1/CULL_FREQUENCY of its items (0: all of them); Django's"
            " default is 3.",
        ))
        cull_frequency = 3
    return EntryLimit(max_entries, cull_frequency)


def _option_values(options: dict[str, Any], problems: list[Problem]) -> Any:
    """Check every setting of `options` (MAX_ENTRIES and CULL_FREQUENCY taken out) as
    FanoutCache will; the Disk class ``disk`` names (None when it names none: the process's
    default, `default_disk`; ENOVAL when it names no Disk class)."""
    disk: Any = None
    found = len(problems)
    for name, value in options.items():
        entry_key = _ENTRY_KEYS.get(name)
        if entry_key is not None:
            problems.append(Problem(
                "unknown_option",
                f"OPTIONS[{name!r}] is not a cache setting: give it as the CACHES entry's"
                f" {entry_key}, next to OPTIONS ({entry_key!r}: {value!r})",
                f"Move it out of OPTIONS into the entry: {entry_key!r}: {value!r}.",
            ))
        elif name == "disk":
            disk = _disk_class(value, problems)
        elif not known_setting(name):
            problems.append(_unknown_setting(name))
        else:
            try:
                validate_setting(name, value)
            except (TypeError, ValueError) as exc:
                if name == "remote":
                    problems.append(Problem("remote_url", f"OPTIONS['remote']: {exc}",
                                            _REMOTE_URL_HINT))
                else:
                    problems.append(Problem(
                        "bad_value", f"OPTIONS[{name!r}]: {exc}",
                        "Settings take the values Cache and FanoutCache take (see the cache"
                        " settings in the documentation).",
                    ))
    if len(problems) == found:  # each value is valid: now the rules on pairs of them
        try:
            validate_settings({name: value for name, value in options.items() if name != "disk"})
        except (TypeError, ValueError) as exc:
            problems.append(Problem("bad_value", f"OPTIONS: {exc}",
                                    "Give settings that fit together."))
    return disk


def _unknown_setting(name: str) -> Problem:
    names = setting_names()
    close = difflib.get_close_matches(name, [*names, "disk", "MAX_ENTRIES", "CULL_FREQUENCY"], 1)
    return Problem(
        "unknown_option", f"unknown setting {name!r} in OPTIONS",
        f"Did you mean {close[0]!r}?" if close else
        f"OPTIONS takes Django's MAX_ENTRIES and CULL_FREQUENCY, 'disk' and the cache"
        f" settings: {', '.join(names)}, and disk_* and sqlite_* options.",
    )


def _disk_class(value: Any, problems: list[Problem], where: str = "OPTIONS['disk']") -> Any:
    """The Disk class `value` names (a class or a dotted path), else ENOVAL."""
    try:
        disk = import_string(value) if isinstance(value, str) else value
        check_disk_class(disk)
    except (ImportError, TypeError) as exc:
        problems.append(Problem(
            "bad_value", f"{where}: {exc}",
            "Name a subclass of diskcache_core.Disk, as the class or its dotted path"
            " ('diskcache_core.JSONDisk').",
        ))
        return ENOVAL
    return disk


_ENTRY_HINTS = {
    "SHARDS": "Give the number of shards as an int (8 is the default; 1 with a remote).",
    "DATABASE_TIMEOUT": "Give the seconds a write waits for its shard's lock (default 0.010).",
}


def _entry_value(key: str, value: Any, check: Callable[[Any], Any], problems: list[Problem]) -> Any:
    """`value` of the entry's `key` through `check` (ValueError or TypeError: a problem)."""
    try:
        return check(value)
    except (TypeError, ValueError) as exc:
        problems.append(Problem("bad_value", f"{key}: {exc}", _ENTRY_HINTS[key]))
        return None


def _remote_rules(given: dict[str, Any], limit: EntryLimit, problems: list[Problem]) -> None:
    """What a remote rules out: Django's entry limit, and a missing Redis client."""
    if limit.max_entries is not None:
        problems.append(Problem(
            "limit_with_remote",
            "OPTIONS['MAX_ENTRIES'] cannot be kept with OPTIONS['remote']: Redis holds the"
            " items of every host (bound it with Redis's maxmemory policy instead)",
            "Remove MAX_ENTRIES and CULL_FREQUENCY; bound the items with Redis's maxmemory and"
            " an eviction policy (OPTIONS['size_limit'] bounds the local copies).",
        ))
    elif "CULL_FREQUENCY" in given:
        problems.append(Problem(
            "cull_with_remote",
            "OPTIONS['CULL_FREQUENCY'] has no effect with OPTIONS['remote']: it applies with"
            " MAX_ENTRIES only, which a remote does not take",
            "Remove CULL_FREQUENCY; Redis's maxmemory policy bounds the items.",
            warning=True,
        ))
    if any(p.kind == "remote_url" for p in problems):
        return
    try:
        importlib.import_module("redis")
    except ImportError as exc:
        problems.append(Problem(
            "remote_client", f"OPTIONS['remote'] needs the Redis client library: {exc}",
            "Install it where Django runs: pip install 'redis[hiredis]>=5.0'.",
        ))


def _option_key(disk: type[Disk] | None, settings: dict[str, Any]) -> str:
    # Settings may hold unhashable values (a list of allowed types): compare their text.
    return repr((disk, sorted(settings.items(), key=lambda item: item[0])))


def _whole(value: Any) -> Any:
    """An int written as text (``"300"``, as Django's own backends take it) as that int."""
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit() and value.isascii():
        return int(value)
    return value
