"""Settings: their defaults, their validation, and `Settings`, the values one Cache runs with.

Settings are stored in the database's Settings table (so a later open finds them) except the
code-only ones: the memory tier's bounds (per process) and SafeDisk's allow-list (a database
someone else can write must not widen it). Validation happens before any I/O, so a bad setting
never leaves a directory or a file behind.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import pickle
import re
import sqlite3
import sys
import warnings
from typing import Any, Callable, Generic, TypeVar, overload

from ._arguments import INT64_MAX, INT64_MIN, check_text, float_seconds, whole_number
from ._disk.codecs import CODEC_FACTORIES, check_compress_level, codec_named
from ._errors import StoredSettingWarning
from ._policies import EVICTION_POLICY, POLICIES

__all__ = [
    "CODE_ONLY_SETTINGS",
    "DEFAULT_SETTINGS",
    "MEMORY_DEFAULTS",
    "METADATA",
    "REMOTE_DEFAULTS",
    "PEER_ONLY_ROWS",
    "PERSISTENT_PRAGMAS",
    "Settings",
    "SettingAttribute",
    "ShardSetting",
    "check_compress_change",
    "check_compress_level",
    "known_setting",
    "setting_names",
    "usable_stored_settings",
    "validate_setting",
    "validate_settings",
    "whole_number",
]

T = TypeVar("T")


@dataclasses.dataclass
class Settings:
    """The stored settings of one cache, as its Cache object uses them.

    `extra` holds what no field names: further ``sqlite_*`` pragmas and the ``disk_*`` options
    of a custom Disk.
    """

    statistics: int = 0  # 1: count hits and misses
    tag_index: int = 0  # 1: an index makes evict(tag) fast
    eviction_policy: str = "least-recently-stored"
    size_limit: int = 2**30  # bytes (1 GiB)
    cull_limit: int = 10  # items a write's size check may evict
    exact_size_limit: int = 0  # 1: check the size limit after every write (python-diskcache's way)
    sqlite_auto_vacuum: int = 2  # INCREMENTAL: free pages reused, trimmed off the writers' path
    sqlite_cache_size: int = 2**13  # pages
    sqlite_journal_mode: str = "wal"
    sqlite_mmap_size: int = 2**26  # 64 MiB
    sqlite_secure_delete: int = 0  # deleted values are not overwritten (1: they are, slower)
    sqlite_synchronous: int = 1  # NORMAL
    disk_min_file_size: int = 2**15  # values from 32 KiB go to value files
    disk_pickle_protocol: int = pickle.HIGHEST_PROTOCOL
    disk_compress: str | None = None  # None, 'zlib', 'zstd' or 'lz4'
    disk_compress_level: int | None = None  # None: the compressor's default
    disk_compress_threshold: int = 1024  # bytes; smaller values are never compressed
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def values(self) -> dict[str, Any]:
        """Every setting by name, as stored in the Settings table."""
        result = {name: getattr(self, name) for name in _FIELDS}
        result.update(self.extra)
        return result

    def get(self, name: str) -> Any:
        """One setting's value; KeyError when there is none of that name."""
        if name in _FIELDS:
            return getattr(self, name)
        return self.extra[name]

    def changed(self, name: str, value: Any) -> None:
        """Take a new (validated) value of one setting."""
        if name in _FIELDS:
            setattr(self, name, value)
        else:
            self.extra[name] = value

    def update(self, values: dict[str, Any]) -> None:
        """Take new (validated) values of several settings."""
        for name, value in values.items():
            self.changed(name, value)

    def connection_pragmas(self) -> dict[str, Any]:
        """Pragmas every new connection runs (the persistent ones are set when opening). Only
        WAL is a journal mode of the database file: any other applies to the connection that
        sets it, so every connection sets it."""
        pragmas = {
            name[len("sqlite_"):]: value
            for name, value in self.values().items()
            if name.startswith("sqlite_") and name not in PERSISTENT_PRAGMAS
        }
        if str(self.sqlite_journal_mode).lower() != "wal":
            pragmas["journal_mode"] = self.sqlite_journal_mode
        return pragmas

    def disk_options(self, code_only: dict[str, Any]) -> dict[str, Any]:
        """Keyword arguments of the Disk: the ``disk_*`` settings without their prefix.

        This library's own options (compression) are passed only when they differ from their
        defaults, so that a Disk subclass written for python-diskcache, whose constructor has
        its own defaults for such names (``compress_level``), gets them. ValueError when the
        compression level is not one of the compressor's (one may be given, the other stored).
        """
        values = {**self.values(), **code_only}
        check_compress_level(values["disk_compress"], values["disk_compress_level"])
        return {
            name[len("disk_"):]: value
            for name, value in values.items()
            if name.startswith("disk_")
            and not (name in _OWN_DISK_OPTIONS and value == _OWN_DISK_OPTIONS[name])
        }


_FIELDS = tuple(field.name for field in dataclasses.fields(Settings) if field.name != "extra")
# Disk options python-diskcache's Disk does not have, and their defaults.
_OWN_DISK_OPTIONS = {
    "disk_compress": None,
    "disk_compress_level": None,
    "disk_compress_threshold": 1024,
}

#: Every stored setting and its default (python-diskcache's public name for them).
DEFAULT_SETTINGS: dict[str, Any] = {name: getattr(Settings(), name) for name in _FIELDS}

# Set once when a database is created or opened, not per connection: journal_mode is
# persistent, and auto_vacuum can only change before the first table exists.
PERSISTENT_PRAGMAS = frozenset({"sqlite_auto_vacuum", "sqlite_journal_mode"})

# Counters kept in the Settings table by triggers (size, and the item count under
# python-diskcache's row name "count": _store/creation.py) or by batched flushes (hits, misses),
# with their initial values: python-diskcache's ``diskcache.core.METADATA`` (the one dict of
# them, re-exported by `diskcache_core.core`). They are not settings: passing them to Cache()
# is an error.
METADATA: dict[str, int] = {"count": 0, "size": 0, "hits": 0, "misses": 0}

# Rows python-diskcache kept in its Settings table that are neither settings nor our counters;
# ignored when one of its caches is opened.
PEER_ONLY_ROWS = frozenset({"count"})

# The memory tier's bounds (see _memory/tier.py): per Cache object and process, from code only.
# 0 for either turns the tier off.
MEMORY_DEFAULTS: dict[str, int] = {
    "memory_size_limit": 2**22,  # 4 MiB
    "memory_item_limit": 10_000,
}

# A remote source of truth (see _remote/tier.py): its URL (None: none), the prefix of the cache's
# names in it, the seconds local copies may be served while it cannot be reached, the seconds a
# command waits for it, and whether the host's listener renews the copies of changed items.
REMOTE_DEFAULTS: dict[str, Any] = {
    "remote": None,
    "remote_prefix": "diskcache_core:",
    "max_staleness": 1.0,
    "remote_timeout": 5.0,
    "remote_refresh": True,
}

# Settings never stored: the Disk's allow-list (a database someone else can write must not be
# able to widen SafeDisk's allow-list), the memory tier's bounds (per process), and the remote.
# ``read_only``: open without writing anything (see Cache).
CODE_ONLY_SETTINGS = frozenset(
    {"disk_allowed_types", "read_only", *MEMORY_DEFAULTS, *REMOTE_DEFAULTS}
)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _flag(name: str, value: Any) -> int:
    if value in (0, 1) and (type(value) in (bool, int) or isinstance(value, numbers.Integral)):
        return int(value)
    raise TypeError(f"setting {name!r} must be True or False, not {value!r}")


def _protocol(name: str, value: Any) -> int:
    # As pickle takes it: -1 means pickle.HIGHEST_PROTOCOL (a far smaller one overflows pickle).
    return whole_number(name, value, -1, pickle.HIGHEST_PROTOCOL)


def _policy(name: str, value: Any) -> str:
    if value not in POLICIES and value not in EVICTION_POLICY:
        choices = ", ".join(repr(policy) for policy in EVICTION_POLICY)
        raise ValueError(f"unknown eviction_policy {value!r}; choose one of: {choices}")
    return str(value)


def _compressor(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if value not in CODEC_FACTORIES:
        choices = ", ".join(sorted(CODEC_FACTORIES))
        raise ValueError(f"unknown compressor {value!r} for {name!r}; choose one of: {choices}")
    codec_named(value)  # import it now: a compressor that is not installed fails before any write
    return str(value)


def _optional_int(name: str, value: Any) -> int | None:
    return None if value is None else whole_number(name, value, minimum=None)


def check_compress_change(settings: Settings, name: str, value: Any) -> None:
    """`check_compress_level` of the pair once setting `name` of `settings` takes `value`."""
    if name in ("disk_compress", "disk_compress_level"):
        values = {**settings.values(), name: value}
        check_compress_level(values["disk_compress"], values["disk_compress_level"])


def _remote_url(name: str, value: Any) -> str | None:
    if value is None:
        return None
    from ._urls import check_remote_url  # no redis import: that waits for the first connection

    return check_remote_url(value)


def _prefix(name: str, value: Any) -> str:
    if type(value) is not str:
        raise TypeError(f"setting {name!r} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"setting {name!r} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"setting {name!r} must be encodable as UTF-8: {value!r}") from None
    return value


_MAX_SECONDS = 1e6  # max_staleness, remote_timeout: some eleven days


def _seconds(name: str, value: Any) -> float:
    if type(value) not in (int, float) and (
        isinstance(value, bool) or not isinstance(value, numbers.Real)
    ):
        raise TypeError(f"setting {name!r} must be a number of seconds, not {value!r}")
    seconds = float_seconds(f"setting {name!r}", value)  # ValueError, not OverflowError
    if not 0 < seconds <= _MAX_SECONDS:
        raise ValueError(
            f"setting {name!r} must be a positive number of seconds up to {_MAX_SECONDS:g}"
            f" (a socket's timeout must fit the platform's time), got {value!r}"
        )
    return seconds


# The values of the pragmas DEFAULT_SETTINGS names that SQLite keeps as given: the ints (it
# takes others silently as something else: synchronous=10 as FULL, cache_size=2**31 as 0, a
# 32-bit int) and the words (any case). SQLite caps mmap_size at its build's maximum.
_PRAGMA_VALUES: dict[str, tuple[range, tuple[str, ...]]] = {
    "sqlite_auto_vacuum": (range(0, 3), ("none", "full", "incremental")),
    "sqlite_cache_size": (range(-(2**31), 2**31), ()),  # pages; negative: KiB
    "sqlite_journal_mode": (range(0), ("delete", "truncate", "persist", "memory", "wal", "off")),
    "sqlite_mmap_size": (range(0, INT64_MAX + 1), ()),
    "sqlite_secure_delete": (range(0, 2), ("off", "on", "fast")),
    "sqlite_synchronous": (range(0, 4), ("off", "normal", "full", "extra")),
}
# Pragmas of the whole process: not tried on a scratch connection (see _kept_by_sqlite).
_PROCESS_PRAGMAS = frozenset({"soft_heap_limit", "hard_heap_limit"})


def _pragma(name: str, value: Any) -> Any:
    # Pragma values are spliced into SQL text (PRAGMA takes no parameters): allow only whole
    # numbers (SQLite reads 1.5 as 1, 1e300 as 1) and bare words.
    pragma, given = name[len("sqlite_"):], value
    if not _IDENTIFIER.match(pragma):
        raise ValueError(f"invalid SQLite pragma name in setting {name!r}")
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)  # (numpy's ints)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not float(value).is_integer():
            raise ValueError(f"setting {name!r} must be a whole number, not {value!r}")
        value = int(float(value))
    if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"setting {name!r} must fit in 64 bits, not {given!r}")
    if type(value) is not int and not (type(value) is str and _IDENTIFIER.match(value)):
        raise ValueError(f"setting {name!r} must be a whole number or a bare word, not {given!r}")
    known = _PRAGMA_VALUES.get(name)
    if known is None:
        if type(value) is int and pragma not in _PROCESS_PRAGMAS:
            _kept_by_sqlite(name, pragma, value)
        return value
    ints, words = known
    if (value in ints) if type(value) is int else (str(value).lower() in words):
        return value
    choices = [f"an int from {ints.start} to {ints.stop - 1}"] if ints else []
    choices += ["one of " + ", ".join(words)] if words else []
    raise ValueError(f"setting {name!r} must be {' or '.join(choices)}, not {given!r}")


def _kept_by_sqlite(name: str, pragma: str, value: int) -> None:
    """ValueError when SQLite keeps another value than `value` for a pragma no setting names
    (wal_autocheckpoint=2**40 reads back 0). Tried on a scratch in-memory database: before any
    file exists. A pragma that reads back no single int, or fails there, is not judged."""
    con = sqlite3.connect(":memory:")
    try:
        con.execute(f"PRAGMA {pragma} = {value}").fetchall()
        rows = con.execute(f"PRAGMA {pragma}").fetchall()
    except sqlite3.Error:
        return
    finally:
        con.close()
    if len(rows) == 1 and len(rows[0]) == 1 and type(rows[0][0]) is int and rows[0][0] != value:
        kept = rows[0][0]
        raise ValueError(f"setting {name!r} = {value} is not kept by SQLite (it reads back {kept})")


_VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "statistics": _flag,
    "tag_index": _flag,
    "eviction_policy": _policy,
    "size_limit": whole_number,
    "cull_limit": whole_number,
    "exact_size_limit": _flag,
    "disk_min_file_size": whole_number,
    "disk_pickle_protocol": _protocol,
    "disk_compress": _compressor,
    "disk_compress_level": _optional_int,
    "disk_compress_threshold": whole_number,
    "memory_size_limit": whole_number,
    "memory_item_limit": whole_number,
    "read_only": _flag,
    "remote": _remote_url,
    "remote_prefix": _prefix,
    "max_staleness": _seconds,
    "remote_timeout": _seconds,
    "remote_refresh": _flag,
}


_INTEGERS = (whole_number, _protocol, _optional_int)


def _storable(name: str, value: Any) -> Any:
    """A value the Settings table can hold (a custom Disk's option is stored, for later opens)."""
    if value is not None and type(value) not in (int, float, str, bytes, bool):
        raise TypeError(
            f"{name} is stored in the cache's database: it must be an int, float, str, bytes,"
            f" bool or None, not {type(value).__name__}"
        )
    if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{name} is stored in the cache's database: {value} is beyond 64 bits")
    if type(value) is str:
        check_text(name, value)
    return value


def setting_names() -> list[str]:
    """The settings' names, sorted (besides them: ``sqlite_*`` pragmas, ``disk_*`` options)."""
    return sorted({*DEFAULT_SETTINGS, *MEMORY_DEFAULTS, *REMOTE_DEFAULTS, "read_only"})


def known_setting(name: str) -> bool:
    """True when `name` is a setting `validate_settings` takes (its value aside)."""
    return name in _VALIDATORS or name.startswith(("sqlite_", "disk_"))


def validate_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Check every setting's name and value; return them normalised. Raises before any I/O."""
    checked = {}
    for name, value in settings.items():
        if name in METADATA:
            raise ValueError(f"{name!r} is a counter the cache keeps, not a setting")
        validator = _VALIDATORS.get(name)
        if validator is not None:
            checked[name] = validator(name, value)
        elif name.startswith("sqlite_"):
            checked[name] = _pragma(name, value)
        elif name.startswith("disk_"):
            # A custom Disk's option (its constructor checks it), stored unless from code only.
            checked[name] = value if name in CODE_ONLY_SETTINGS else _storable(name, value)
        else:
            known = ", ".join(setting_names())
            raise ValueError(f"unknown setting {name!r}; settings are: {known}, and disk_* options")
    if "disk_compress_level" in checked:  # (the compressor, when not given: any one's levels)
        check_compress_level(checked.get("disk_compress"), checked["disk_compress_level"])
    return checked


def usable_stored_settings(stored: dict[str, Any]) -> dict[str, Any]:
    """The settings a cache runs with, from the rows its Settings table holds.

    Another library (python-diskcache stores whatever it is given) may have stored rows that
    `validate_settings` would refuse from a caller. A directory must open all the same: a float
    or a number given for a flag becomes what it means (``1.5e9`` bytes, ``statistics=2``); a
    name no setting has is not ours and is skipped; a value that means nothing here (a negative
    ``cull_limit``) gives way to the default, with a warning. Nothing is rewritten.
    """
    usable = {}
    for name, value in stored.items():
        if name in CODE_ONLY_SETTINGS:
            continue  # never from the database: a planted allow-list must not widen SafeDisk's
        if name not in _VALIDATORS and not name.startswith(("sqlite_", "disk_")):
            continue  # a row of someone else's: python-diskcache stores any keyword
        validator = _VALIDATORS.get(name)
        if validator is _flag and type(value) in (int, float):
            value = int(value != 0)
        elif validator in _INTEGERS and type(value) is float and math.isfinite(value):
            value = int(value)  # python-diskcache's FanoutCache stores size_limit / shards
        try:
            usable[name] = validate_setting(name, value)
        except (TypeError, ValueError) as exc:
            _warn_unusable(name, value, exc)
    try:  # (written before the level was checked against the compressor)
        check_compress_level(usable.get("disk_compress"), usable.get("disk_compress_level"))
    except ValueError as exc:
        _warn_unusable("disk_compress_level", usable.pop("disk_compress_level"), exc)
    return usable


def _warn_unusable(name: str, value: Any, exc: Exception) -> None:
    warnings.warn(
        f"the stored setting {name!r} = {value!r} is not usable here ({exc});"
        f" the default, {DEFAULT_SETTINGS.get(name)!r}, is used",
        StoredSettingWarning,
        stacklevel=_outside_the_package(),
    )


def _outside_the_package() -> int:
    """The stacklevel of the nearest caller outside diskcache_core (a warning's place)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(__package__):
        frame, level = frame.f_back, level + 1
    return level


def validate_setting(name: str, value: Any) -> Any:
    """One setting's normalised value (see `validate_settings`)."""
    return validate_settings({name: value})[name]


class SettingAttribute(Generic[T]):
    """A Cache attribute showing one setting. Assigning it changes the setting for that object
    at once, without storing it (as in python-diskcache); ``Cache.reset`` also stores it.

    The owner provides ``_settings`` (a `Settings`) and ``_apply_setting(name, value)``.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.__doc__ = f"The ``{name}`` setting (see :doc:`cache`)."

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> "SettingAttribute[T]": ...

    @overload
    def __get__(self, instance: object, owner: type[Any]) -> T: ...

    def __get__(self, instance: object | None, owner: type[Any]) -> "T | SettingAttribute[T]":
        if instance is None:
            return self
        value: T = getattr(instance, "_settings").get(self.name)
        return value

    def __set__(self, instance: object, value: T) -> None:
        getattr(instance, "_apply_setting")(self.name, value)


class ShardSetting(Generic[T]):
    """A FanoutCache attribute showing one setting of its first shard: the shards share their
    settings, as python-diskcache's do. Read only (assigning it makes a plain attribute of that
    object, as in python-diskcache); ``FanoutCache.reset`` changes a setting on every shard."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.__doc__ = f"The ``{name}`` setting, as every shard has it (see :doc:`cache`)."

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> "ShardSetting[T]": ...

    @overload
    def __get__(self, instance: object, owner: type[Any]) -> T: ...

    def __get__(self, instance: object | None, owner: type[Any]) -> "T | ShardSetting[T]":
        if instance is None:
            return self
        value: T = getattr(getattr(instance, "shards")[0], self.name)
        return value


def extra_attributes(settings: Settings) -> dict[str, Any]:
    """The ``sqlite_*`` and ``disk_*`` settings no field names (a pragma, a custom Disk's option),
    as attributes of a cache object: python-diskcache makes each setting one. Set in the
    instance's dict, not found by a ``__getattr__``: a class with one loses CPython's fast
    attribute access on every ``self.`` of the hot path."""
    return {
        name: value for name, value in settings.extra.items()
        if name.startswith(("sqlite_", "disk_")) and name.isidentifier()
    }


def check_disk_option(
    disk: Any, directory: str, options: dict[str, Any], key: str, value: Any
) -> None:
    """Refuse (ValueError) a ``disk_*`` option the cache's Disk does not take, before it is
    stored: every later open passes the stored options to the Disk's constructor."""
    options = {**options, key[len("disk_"):]: value}
    check_compress_level(options.get("compress"), options.get("compress_level"))
    try:
        type(disk)(directory, **options)
    except TypeError as exc:
        raise ValueError(f"{type(disk).__name__} refuses {key!r}: {exc}") from exc
