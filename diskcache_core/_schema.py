"""The database: SQL text, settings and their validation, schema creation and migration.

Every statement is a constant string with ``?`` parameters, so sqlite3's statement cache (keyed
by text) always hits. The Cache table has python-diskcache's columns; the triggers differ: they
keep ``size`` (bytes in value files) in the Settings table, firing only when it changes.
"""

from __future__ import annotations

import pickle
import re
import sqlite3
from typing import Any, Callable

from ._disk import _CODEC_FACTORIES, _codec

__all__ = [
    "DBNAME",
    "DEFAULT_SETTINGS",
    "EVICTION_POLICY",
    "METADATA",
    "SCHEMA_VERSION",
    "create_or_migrate",
    "validate_settings",
]

DBNAME = "cache.db"
SCHEMA_VERSION = 1

DEFAULT_SETTINGS: dict[str, Any] = {
    "statistics": 0,  # False
    "tag_index": 0,  # False
    "eviction_policy": "least-recently-stored",
    "size_limit": 2**30,  # 1 GiB
    "cull_limit": 10,
    "sqlite_auto_vacuum": 1,  # FULL
    "sqlite_cache_size": 2**13,  # 8,192 pages
    "sqlite_journal_mode": "wal",
    "sqlite_mmap_size": 2**26,  # 64 MiB
    "sqlite_synchronous": 1,  # NORMAL
    "disk_min_file_size": 2**15,  # 32 KiB
    "disk_pickle_protocol": pickle.HIGHEST_PROTOCOL,
    "disk_compress": None,  # None, 'zlib', 'zstd' or 'lz4'
    "disk_compress_level": None,  # None: the compressor's default
    "disk_compress_threshold": 1024,  # bytes; smaller values are never compressed
}

# Counters kept in the Settings table by a trigger (size) or by batched flushes (hits, misses).
# They are not settings: passing them to Cache() is an error. There is no stored count: a
# trigger keeping one cost every insert and delete a second B-tree write (~3 us, a fifth of a
# delete), while SELECT COUNT(*) walks the key index at about 4 ms per million items.
METADATA: dict[str, int] = {"size": 0, "hits": 0, "misses": 0}

# Rows python-diskcache kept in its Settings table that are neither settings nor our counters;
# ignored when one of its caches is opened.
PEER_ONLY_ROWS = frozenset({"count"})

# The memory tier's bounds (see _memory.py): per Cache object and process, from code only.
# 0 for either turns the tier off.
MEMORY_DEFAULTS: dict[str, int] = {
    "memory_size_limit": 2**22,  # 4 MiB
    "memory_item_limit": 10_000,
}

# Settings never stored: the Disk's allow-list (a database someone else can write must not be
# able to widen SafeDisk's allow-list), and the memory tier's bounds (per process).
CODE_ONLY_SETTINGS = frozenset({"disk_allowed_types", *MEMORY_DEFAULTS})

# Per eviction policy: the index it needs, what a read records, and how to pick victims.
EVICTION_POLICY: dict[str, dict[str, str | None]] = {
    "none": {"init": None, "get": None, "cull": None},
    "least-recently-stored": {
        "init": "CREATE INDEX IF NOT EXISTS Cache_store_time ON Cache (store_time)",
        "get": None,
        "cull": "SELECT rowid FROM Cache ORDER BY store_time LIMIT ?",
    },
    "least-recently-used": {
        "init": "CREATE INDEX IF NOT EXISTS Cache_access_time ON Cache (access_time)",
        "get": "access_time",
        "cull": "SELECT rowid FROM Cache ORDER BY access_time LIMIT ?",
    },
    "least-frequently-used": {
        "init": "CREATE INDEX IF NOT EXISTS Cache_access_count ON Cache (access_count)",
        "get": "access_count",
        "cull": "SELECT rowid FROM Cache ORDER BY access_count LIMIT ?",
    },
}

# --- statements on the hot path ---------------------------------------------------------------

NOT_EXPIRED = "(expire_time IS NULL OR expire_time > ?)"

SELECT_ITEM = (
    "SELECT expire_time, tag, mode, filename, value FROM Cache"
    " WHERE key = ? AND raw = ? AND " + NOT_EXPIRED
)
SELECT_VALUE = (
    "SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = ? AND " + NOT_EXPIRED
)
SELECT_EXISTS = "SELECT 1 FROM Cache WHERE key = ? AND raw = ? AND " + NOT_EXPIRED
# get when the memory tier is on: the expire time goes with the value into memory.
SELECT_VALUE_EXPIRY = (
    "SELECT mode, filename, value, expire_time FROM Cache WHERE key = ? AND raw = ? AND "
    + NOT_EXPIRED
)

_INSERT = (
    "INSERT INTO Cache(key, raw, store_time, expire_time, access_time, access_count,"
    " tag, size, mode, filename, value) VALUES (?1, ?2, ?3, ?4, ?3, 0, ?5, ?6, ?7, ?8, ?9)"
)
# An overwrite leaves store_time/access_time/access_count alone: moving their index entries
# would double the cost of the statement. The refresh is recorded by the AccessLog instead and
# written in batches (see _access.py).
_REPLACE_COLUMNS = (
    " expire_time = excluded.expire_time, tag = excluded.tag, size = excluded.size,"
    " mode = excluded.mode, filename = excluded.filename, value = excluded.value"
)
# One statement per set: the row's previous value file is reported by a trigger (see
# RELEASE_TRIGGERS) and removed once the statement has committed.
UPSERT = _INSERT + " ON CONFLICT(key, raw) DO UPDATE SET" + _REPLACE_COLUMNS
# add: replaces only an expired row; rowcount is 0 when a live item was there.
ADD = _INSERT + " ON CONFLICT(key, raw) DO UPDATE SET" + _REPLACE_COLUMNS + (
    " WHERE expire_time IS NOT NULL AND expire_time <= ?3"
)
INSERT = _INSERT

# Only a live item is deleted (expired ones are left to expire/cull, as in python-diskcache);
# rowcount says which. No RETURNING: it costs ~2 us (SQLite buffers the rows).
DELETE_ITEM = "DELETE FROM Cache WHERE key = ? AND raw = ? AND " + NOT_EXPIRED
# pop and pull read the item, fetch its value (which a Disk may refuse), then delete the row only
# if it is still the one read: nothing is removed when the value cannot be returned.
SELECT_FOR_POP = "SELECT rowid, expire_time, tag, mode, filename, value FROM Cache WHERE key = ? AND raw = ?"
_UNCHANGED = (
    " AND expire_time IS ? AND tag IS ? AND mode = ? AND filename IS ? AND value IS ?"
)
DELETE_UNCHANGED = "DELETE FROM Cache WHERE rowid = ? AND key = ? AND raw = ?" + _UNCHANGED
TOUCH = "UPDATE Cache SET expire_time = ? WHERE key = ? AND raw = ? AND " + NOT_EXPIRED

# incr in one statement when the stored value is a native number and the sum stays a 64-bit
# integer (SQLite turns an overflowing sum into a REAL; then the Python path takes over). The
# new value comes back through NEW_VALUE_FUNCTION, a per-connection function that records what
# passes through it: RETURNING would cost ~2 us more.
NEW_VALUE_FUNCTION = "diskcache_core_new_value"
_INCR_GUARD = (
    " mode = 1 AND (expire_time IS NULL OR expire_time > ?2)"
    " AND typeof(value) IN ('integer', 'real')"
    " AND typeof(value + ?1) = CASE WHEN typeof(value) = 'real' OR typeof(?1) = 'real'"
    " THEN 'real' ELSE 'integer' END"
)
INCR_NATIVE = (
    f"UPDATE Cache SET value = {NEW_VALUE_FUNCTION}(value + ?1)"
    " WHERE key = ?3 AND raw = ?4 AND" + _INCR_GUARD
)
SELECT_FOR_UPDATE = (
    "SELECT rowid, expire_time, mode, filename, value FROM Cache WHERE key = ? AND raw = ?"
)
UPDATE_VALUE = (
    "UPDATE Cache SET store_time = ?, size = ?, mode = ?, filename = ?, value = ? WHERE rowid = ?"
)

# incr of a missing key inserts default + delta in the same statement (NEW_VALUE_FUNCTION is
# then not called); an expired or non-native existing row makes the DO UPDATE a no-op
# (rowcount 0) and the Python path takes over.
INCR_UPSERT = (
    "INSERT INTO Cache(key, raw, store_time, expire_time, access_time, access_count,"
    " tag, size, mode, filename, value) VALUES (?3, ?4, ?2, NULL, ?2, 0, NULL, 0, 1, NULL, ?5)"
    f" ON CONFLICT(key, raw) DO UPDATE SET value = {NEW_VALUE_FUNCTION}(value + ?1)"
    " WHERE" + _INCR_GUARD
)
DELETE_ROWID = "DELETE FROM Cache WHERE rowid = ?"
DELETE_EXPIRED_ROWID = (
    "DELETE FROM Cache WHERE rowid = ? AND expire_time IS NOT NULL AND expire_time < ?"
)

# Queues: keys in (low, high) exclusive, raw, in key order.
_QUEUE_RANGE = "FROM Cache WHERE ? < key AND key < ? AND raw = 1 ORDER BY key "
QUEUE_END = {
    "back": "SELECT key " + _QUEUE_RANGE + "DESC LIMIT 1",
    "front": "SELECT key " + _QUEUE_RANGE + "ASC LIMIT 1",
}
QUEUE_DELETE_UNCHANGED_END = {  # the end's item, if it is still the one read (see pop)
    side: "DELETE FROM Cache WHERE rowid = (SELECT rowid " + _QUEUE_RANGE + order + " LIMIT 1)"
    " AND rowid = ? AND key = ?" + _UNCHANGED
    for side, order in (("front", "ASC"), ("back", "DESC"))
}
QUEUE_PEEK = {
    side: "SELECT rowid, key, raw, expire_time, tag, mode, filename, value " + _QUEUE_RANGE + order
    + " LIMIT 1"
    for side, order in (("front", "ASC"), ("back", "DESC"))
}
_PEEK_ITEM = "SELECT rowid, key, raw, expire_time, tag, mode, filename, value FROM Cache ORDER BY rowid "
PEEK_LAST = _PEEK_ITEM + "DESC LIMIT 1"
PEEK_FIRST = _PEEK_ITEM + "ASC LIMIT 1"

# Iteration, a page at a time so no read transaction stays open between pages.
KEYS_ASC = (
    "SELECT key, raw FROM Cache ORDER BY key ASC, raw ASC LIMIT 100",
    "SELECT key, raw FROM Cache WHERE key = ? AND raw > ? OR key > ?"
    " ORDER BY key ASC, raw ASC LIMIT ?",
)
KEYS_DESC = (
    "SELECT key, raw FROM Cache ORDER BY key DESC, raw DESC LIMIT 100",
    "SELECT key, raw FROM Cache WHERE key = ? AND raw < ? OR key < ?"
    " ORDER BY key DESC, raw DESC LIMIT ?",
)
ROWS_ASC = "SELECT rowid, key, raw FROM Cache WHERE ? < rowid AND rowid < ? ORDER BY rowid ASC LIMIT ?"
ROWS_DESC = "SELECT rowid, key, raw FROM Cache WHERE ? < rowid AND rowid < ? ORDER BY rowid DESC LIMIT ?"
SELECT_FILES = "SELECT rowid, size, filename FROM Cache WHERE filename IS NOT NULL"

COUNT = "SELECT COUNT(*) FROM Cache"
VOLUME = (
    "SELECT (SELECT page_count FROM pragma_page_count())"
    " - (SELECT freelist_count FROM pragma_freelist_count()),"
    " (SELECT page_size FROM pragma_page_size()),"
    " (SELECT value FROM Settings WHERE key = 'size')"
)
DELETE_EXPIRED = (
    "DELETE FROM Cache WHERE rowid IN (SELECT rowid FROM Cache"
    " WHERE expire_time IS NOT NULL AND expire_time < ? ORDER BY expire_time LIMIT ?)"
)
DELETE_TAGGED = "DELETE FROM Cache WHERE rowid IN (SELECT rowid FROM Cache WHERE tag = ? LIMIT ?)"
DELETE_ANY = "DELETE FROM Cache WHERE rowid IN (SELECT rowid FROM Cache LIMIT ?)"

DELETE_BY_POLICY = {
    policy: "DELETE FROM Cache WHERE rowid IN (" + spec["cull"] + ")"
    for policy, spec in EVICTION_POLICY.items()
    if spec["cull"] is not None
}

# --- schema ---------------------------------------------------------------------------------

_TABLES = (
    "CREATE TABLE IF NOT EXISTS Settings (key TEXT NOT NULL UNIQUE, value)",
    "CREATE TABLE IF NOT EXISTS Cache ("
    " rowid INTEGER PRIMARY KEY, key BLOB, raw INTEGER, store_time REAL, expire_time REAL,"
    " access_time REAL, access_count INTEGER DEFAULT 0, tag BLOB, size INTEGER DEFAULT 0,"
    " mode INTEGER DEFAULT 0, filename TEXT, value BLOB)",
    "CREATE UNIQUE INDEX IF NOT EXISTS Cache_key_raw ON Cache(key, raw)",
)

# Partial index: rows that never expire (the common case) cost the index nothing.
_EXPIRE_INDEX = (
    "CREATE INDEX IF NOT EXISTS Cache_expire_time_partial ON Cache (expire_time)"
    " WHERE expire_time IS NOT NULL"
)

_COUNTER_TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS Cache_size_insert AFTER INSERT ON Cache WHEN NEW.size != 0"
    " BEGIN UPDATE Settings SET value = value + NEW.size WHERE key = 'size'; END",
    "CREATE TRIGGER IF NOT EXISTS Cache_size_update AFTER UPDATE OF size ON Cache"
    " WHEN NEW.size != OLD.size BEGIN"
    " UPDATE Settings SET value = value + NEW.size - OLD.size WHERE key = 'size'; END",
    "CREATE TRIGGER IF NOT EXISTS Cache_size_delete AFTER DELETE ON Cache WHEN OLD.size != 0"
    " BEGIN UPDATE Settings SET value = value - OLD.size WHERE key = 'size'; END",
)

# python-diskcache's triggers, dropped when one of its caches is opened: its size trigger fires
# on every update, and together with ours would count twice.
_PEER_OBJECTS = (
    "DROP TRIGGER IF EXISTS Settings_count_insert",
    "DROP TRIGGER IF EXISTS Settings_count_delete",
    "DROP TRIGGER IF EXISTS Settings_size_insert",
    "DROP TRIGGER IF EXISTS Settings_size_update",
    "DROP TRIGGER IF EXISTS Settings_size_delete",
    "DROP INDEX IF EXISTS Cache_expire_time",
)

# Per connection (TEMP): report each value file a statement stops naming, so the Cache removes
# it after the transaction commits (invariant 2) — and never when it rolls back.
RELEASE_FUNCTION = "diskcache_core_file_released"
RELEASE_TRIGGERS = (
    "CREATE TEMP TRIGGER IF NOT EXISTS Cache_file_released_update AFTER UPDATE OF filename"
    " ON main.Cache WHEN OLD.filename IS NOT NULL AND OLD.filename IS NOT NEW.filename BEGIN"
    f" SELECT {RELEASE_FUNCTION}(OLD.filename); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS Cache_file_released_delete AFTER DELETE ON main.Cache"
    f" WHEN OLD.filename IS NOT NULL BEGIN SELECT {RELEASE_FUNCTION}(OLD.filename); END",
)

# Per connection (TEMP): every insert, every change to what a get returns (value, expiry) and
# every delete calls VERSION_FUNCTION with the key, inside the statement and so under the write
# lock; it bumps the key's bucket in the memory tier's version file (see _memory.py). Not fired:
# the access-log flush (store_time, access_time, access_count), which changes nothing a get
# returns. Two rules for code that writes the Cache table: never change a row's key (DELETE and
# INSERT instead), and never use INSERT OR REPLACE (the rows it deletes fire no DELETE trigger
# while recursive_triggers is off).
VERSION_FUNCTION = "diskcache_core_item_changed"
VERSION_TRIGGERS = (
    "CREATE TEMP TRIGGER IF NOT EXISTS Cache_version_insert AFTER INSERT ON main.Cache"
    f" BEGIN SELECT {VERSION_FUNCTION}(NEW.key); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS Cache_version_update AFTER UPDATE OF"
    " expire_time, mode, filename, value ON main.Cache BEGIN"
    f" SELECT {VERSION_FUNCTION}(NEW.key); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS Cache_version_delete AFTER DELETE ON main.Cache"
    f" BEGIN SELECT {VERSION_FUNCTION}(OLD.key); END",
)

TAG_INDEX_CREATE = "CREATE INDEX IF NOT EXISTS Cache_tag_rowid ON Cache(tag, rowid) WHERE tag IS NOT NULL"
TAG_INDEX_DROP = "DROP INDEX IF EXISTS Cache_tag_rowid"

# --- settings -------------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _int(name: str, value: Any, minimum: int | None = 0, maximum: int | None = None) -> int:
    if type(value) is not int:
        raise TypeError(f"setting {name!r} must be an int, not {type(value).__name__}: {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"setting {name!r} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"setting {name!r} must be <= {maximum}, got {value}")
    return value


def _flag(name: str, value: Any) -> int:
    if value in (0, 1) and type(value) in (bool, int):
        return int(value)
    raise TypeError(f"setting {name!r} must be True or False, not {value!r}")


def _policy(name: str, value: Any) -> str:
    if value not in EVICTION_POLICY:
        choices = ", ".join(repr(policy) for policy in EVICTION_POLICY)
        raise ValueError(f"unknown eviction_policy {value!r}; choose one of: {choices}")
    return value


def _compressor(name: str, value: Any) -> str | None:
    if value is not None:
        if value not in _CODEC_FACTORIES:
            choices = ", ".join(sorted(_CODEC_FACTORIES))
            raise ValueError(f"unknown compressor {value!r} for {name!r}; choose one of: {choices}")
        _codec(value)  # import it now: a compressor that is not installed fails before any write
    return value


def _optional_int(name: str, value: Any) -> int | None:
    return None if value is None else _int(name, value, minimum=None)


def _pragma(name: str, value: Any) -> Any:
    # Pragma values are spliced into SQL text (PRAGMA takes no parameters): allow only numbers
    # and bare words.
    if not _IDENTIFIER.match(name[len("sqlite_"):]):
        raise ValueError(f"invalid SQLite pragma name in setting {name!r}")
    if type(value) in (int, float) or (type(value) is str and _IDENTIFIER.match(value)):
        return value
    raise ValueError(f"setting {name!r} must be a number or a bare word, not {value!r}")


_VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "statistics": _flag,
    "tag_index": _flag,
    "eviction_policy": _policy,
    "size_limit": _int,
    "cull_limit": _int,
    "disk_min_file_size": _int,
    "disk_pickle_protocol": lambda name, value: _int(name, value, 0, pickle.HIGHEST_PROTOCOL),
    "disk_compress": _compressor,
    "disk_compress_level": _optional_int,
    "disk_compress_threshold": _int,
    "memory_size_limit": _int,
    "memory_item_limit": _int,
}


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
            checked[name] = value  # options of a custom Disk: its constructor checks them
        else:
            known = ", ".join(sorted({*DEFAULT_SETTINGS, *MEMORY_DEFAULTS}))
            raise ValueError(f"unknown setting {name!r}; settings are: {known}, and disk_* options")
    return checked


# --- creation and migration -------------------------------------------------------------------


def _schema_ready(con: sqlite3.Connection, policy: str, tag_index: int) -> bool:
    """True when the database already has every table, index and trigger these settings need."""
    names = {row[0] for row in con.execute("SELECT name FROM sqlite_master")}
    needed = {"Settings", "Cache", "Cache_key_raw", "Cache_expire_time_partial"}
    needed.update(("Cache_size_insert", "Cache_size_update", "Cache_size_delete"))
    policy_index = EVICTION_POLICY[policy]["init"]
    if policy_index is not None:
        needed.add(policy_index.split()[5])
    if tag_index:
        needed.add("Cache_tag_rowid")
    elif "Cache_tag_rowid" in names:
        return False
    return needed <= names and not {"Settings_size_update", "Cache_expire_time"} & names


def create_or_migrate(
    con: sqlite3.Connection,
    stored: dict[str, Any],
    wanted: dict[str, Any],
) -> None:
    """Bring the database to `wanted` settings and the current schema, in one transaction.

    `stored` are the settings read from the database ({} for a new one). Nothing is written when
    the schema is current and no setting changes (invariant 5: a plain reopen writes nothing,
    so read-only media work).
    """
    changed = {name: value for name, value in wanted.items() if stored.get(name, object()) != value}
    policy = wanted["eviction_policy"]
    if stored and not changed and stored.get("schema_version") == SCHEMA_VERSION:
        if _schema_ready(con, policy, wanted["tag_index"]):
            return
    con.execute("BEGIN IMMEDIATE")
    try:
        for statement in _TABLES:
            con.execute(statement)
        if stored.get("schema_version") != SCHEMA_VERSION:
            for statement in _PEER_OBJECTS:
                con.execute(statement)
        con.execute(_EXPIRE_INDEX)
        for statement in _COUNTER_TRIGGERS:
            con.execute(statement)
        policy_index = EVICTION_POLICY[policy]["init"]
        if policy_index is not None:
            con.execute(policy_index)
        con.execute(TAG_INDEX_CREATE if wanted["tag_index"] else TAG_INDEX_DROP)
        for name, value in METADATA.items():
            con.execute("INSERT OR IGNORE INTO Settings VALUES (?, ?)", (name, value))
        if stored.get("schema_version") != SCHEMA_VERSION:
            # Recount: a python-diskcache database kept this with different triggers.
            con.execute(
                "UPDATE Settings SET value = (SELECT COALESCE(SUM(size), 0) FROM Cache)"
                " WHERE key = 'size'"
            )
        for name, value in {**changed, "schema_version": SCHEMA_VERSION}.items():
            con.execute("INSERT OR REPLACE INTO Settings VALUES (?, ?)", (name, value))
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


# --- statements of the command-line tool -------------------------------------------------------
# The tool reads tables directly where the Cache API would read (or unpickle) values it does
# not need. Its listing pages through rows in rowid order (a shard's insertion order) and
# returns store_time, by which the rows of several FanoutCache shards are merged.

CLI_TABLE_NAMES = "SELECT name FROM sqlite_master WHERE type = 'table'"
CLI_LIST_KEYS = (
    "SELECT rowid, store_time, key, raw, expire_time, tag FROM Cache WHERE rowid > ?"
    " AND (? OR expire_time IS NULL OR expire_time > ?) ORDER BY rowid LIMIT ?"
)
CLI_LIST_TAGGED_KEYS = (
    "SELECT rowid, store_time, key, raw, expire_time, tag FROM Cache WHERE tag = ? AND rowid > ?"
    " AND (? OR expire_time IS NULL OR expire_time > ?) ORDER BY rowid LIMIT ?"
)
CLI_COUNT_EXPIRED = (
    "SELECT COUNT(*) FROM Cache WHERE expire_time IS NOT NULL AND expire_time < ?"
)
CLI_ALL_SETTINGS = "SELECT key, value FROM Settings"
