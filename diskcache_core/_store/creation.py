"""The cache database's schema: its tables, indexes and triggers, and their creation and migration.

The Cache table has python-diskcache's columns; the triggers differ: they keep ``size`` (bytes in
value files) in the Settings table, firing only when it changes, and ``count`` (the items), under
the names python-diskcache gives its own triggers. Per connection, TEMP triggers report the value
files a statement releases and the keys it changes (the version protocol: _store/versions.py).
Nothing is written when the schema is current and no setting changes (invariant 5).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from .._policies import policy_of
from .._settings import METADATA
from .schema import _ROW_NAMES, DELETE_SETTING, SCHEMA_VERSION, store_setting

__all__ = [
    "INSERT_COUNTER", "RELEASE_FUNCTION", "RELEASE_TRIGGERS", "TAG_INDEX_CREATE", "TAG_INDEX_DROP",
    "VERSION_FUNCTION", "VERSION_INSERT_FUNCTION", "VERSION_TRIGGERS", "create_or_migrate",
]

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

# The byte total of the value files, kept in Settings. The triggers have python-diskcache's names,
# so that when it opens the same database (a rolling upgrade, a rollback) its own CREATE TRIGGER
# IF NOT EXISTS finds them and adds none: the two sets would count every byte twice. Ours fire
# only when the size changes; its update trigger fires on every update.
_SIZE_TRIGGERS = {
    "Settings_size_insert": (
        "CREATE TRIGGER IF NOT EXISTS Settings_size_insert AFTER INSERT ON Cache WHEN NEW.size != 0"
        " BEGIN UPDATE Settings SET value = value + NEW.size WHERE key = 'size'; END"
    ),
    "Settings_size_update": (
        "CREATE TRIGGER IF NOT EXISTS Settings_size_update AFTER UPDATE OF size ON Cache"
        " WHEN NEW.size != OLD.size BEGIN"
        " UPDATE Settings SET value = value + NEW.size - OLD.size WHERE key = 'size'; END"
    ),
    "Settings_size_delete": (
        "CREATE TRIGGER IF NOT EXISTS Settings_size_delete AFTER DELETE ON Cache WHEN OLD.size != 0"
        " BEGIN UPDATE Settings SET value = value - OLD.size WHERE key = 'size'; END"
    ),
}
# Schema 1 named them otherwise.
_OLD_OBJECTS = (
    "DROP TRIGGER IF EXISTS Cache_size_insert",
    "DROP TRIGGER IF EXISTS Cache_size_update",
    "DROP TRIGGER IF EXISTS Cache_size_delete",
)
# The item count, kept in the Settings row "count" by one trigger per insert and per delete (an
# overwrite, the UPDATE path of an upsert, fires neither). Exact by construction: the trigger runs
# inside the statement, so the count commits, rolls back and survives a crash with the rows.
# The triggers have python-diskcache's names and do what its own do, so when it opens one of our
# databases it finds them and its count row, adds nothing, and its len() (which reads the row) is
# right from the start; where it made them first, they are kept. The count is made right again
# whenever the schema is migrated (a database of schema 2 or older had no count triggers; where
# python-diskcache added its own later, it began counting from 0).
# Cost: a new key or a delete also writes the Settings page (one more WAL frame per commit when
# the statement wrote no value file); measured in docs/design.rst.
_COUNT_TRIGGERS = {
    "Settings_count_insert": (
        "CREATE TRIGGER IF NOT EXISTS Settings_count_insert AFTER INSERT ON Cache"
        " BEGIN UPDATE Settings SET value = value + 1 WHERE key = 'count'; END"
    ),
    "Settings_count_delete": (
        "CREATE TRIGGER IF NOT EXISTS Settings_count_delete AFTER DELETE ON Cache"
        " BEGIN UPDATE Settings SET value = value - 1 WHERE key = 'count'; END"
    ),
}
_RECOUNT = (
    "UPDATE Settings SET value = (SELECT COALESCE(SUM(size), 0) FROM Cache) WHERE key = 'size'",
    "UPDATE Settings SET value = (SELECT COUNT(*) FROM Cache) WHERE key = 'count'",
)
SELECT_OBJECTS = "SELECT name, sql FROM sqlite_master"
INSERT_COUNTER = "INSERT OR IGNORE INTO Settings VALUES (?, ?)"

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
# every delete calls VERSION_FUNCTION with the key (an insert: VERSION_INSERT_FUNCTION, which
# also notes the insert, see Evictor.wrote), inside the statement, under the write lock; it bumps
# the key's bucket in the memory tier's version file (see versions.py). Not fired: the access-log
# flush (store/access time, access count), which changes nothing a get returns. Never change a
# row's key (DELETE and INSERT instead), never use INSERT OR REPLACE (the rows it deletes fire no
# DELETE trigger while recursive_triggers is off).
VERSION_FUNCTION, VERSION_INSERT_FUNCTION = "diskcache_core_item_changed", "diskcache_core_item_inserted"
VERSION_TRIGGERS = (
    "CREATE TEMP TRIGGER IF NOT EXISTS Cache_version_insert AFTER INSERT ON main.Cache"
    f" BEGIN SELECT {VERSION_INSERT_FUNCTION}(NEW.key); END",
    # Every column a read's answer depends on (the size too: a value file must have that size).
    # Only a statement written by hand (``_sql``) changes a key: both keys' buckets then move.
    "CREATE TEMP TRIGGER IF NOT EXISTS Cache_version_update AFTER UPDATE OF"
    " key, raw, expire_time, mode, filename, value, size ON main.Cache BEGIN"
    f" SELECT {VERSION_FUNCTION}(NEW.key);"
    f" SELECT {VERSION_FUNCTION}(OLD.key) WHERE OLD.key IS NOT NEW.key; END",
    "CREATE TEMP TRIGGER IF NOT EXISTS Cache_version_delete AFTER DELETE ON main.Cache"
    f" BEGIN SELECT {VERSION_FUNCTION}(OLD.key); END",
)

TAG_INDEX_CREATE = "CREATE INDEX IF NOT EXISTS Cache_tag_rowid ON Cache(tag, rowid) WHERE tag IS NOT NULL"
TAG_INDEX_DROP = "DROP INDEX IF EXISTS Cache_tag_rowid"

# --- creation and migration -------------------------------------------------------------------


def _schema_ready(con: sqlite3.Connection, policy: str, tag_index: int) -> bool:
    """True when the database already has every table, index and trigger these settings need."""
    objects = dict(con.execute(SELECT_OBJECTS).fetchall())
    names = set(objects)
    needed = {"Settings", "Cache", "Cache_key_raw", "Cache_expire_time_partial"}
    for name, statement in _SIZE_TRIGGERS.items():
        if objects.get(name) != statement.replace(" IF NOT EXISTS", ""):
            return False  # missing, or python-diskcache's (it counts on every update)
    index_name = policy_of(policy).index_name
    if index_name is not None:
        needed.add(index_name)
    if tag_index:
        needed.add("Cache_tag_rowid")
    elif "Cache_tag_rowid" in names:
        return False
    # Any trigger of these names counts right: ours since the migration that made them (which
    # recounted), or python-diskcache's own, identical in effect, in a database it created.
    needed.update(_COUNT_TRIGGERS)
    return needed <= names


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
    counters = all(name in stored for name in METADATA)  # (a hand edit drops one)
    if stored and not changed and stored.get("schema_version") == SCHEMA_VERSION and counters:
        if _schema_ready(con, policy, wanted["tag_index"]):
            return
    con.execute("BEGIN IMMEDIATE")
    try:
        for statement in _TABLES:
            con.execute(statement)
        if stored.get("schema_version") != SCHEMA_VERSION:
            for statement in _OLD_OBJECTS:
                con.execute(statement)
        con.execute(_EXPIRE_INDEX)
        objects = dict(con.execute(SELECT_OBJECTS).fetchall())
        for name, statement in _SIZE_TRIGGERS.items():
            found = objects.get(name)
            if found is not None and found != statement.replace(" IF NOT EXISTS", ""):
                con.execute(f"DROP TRIGGER {name}")  # python-diskcache's: replaced by ours
            con.execute(statement)
        policy_index = policy_of(policy).create_index
        if policy_index is not None:
            con.execute(policy_index)
        con.execute(TAG_INDEX_CREATE if wanted["tag_index"] else TAG_INDEX_DROP)
        for statement in _COUNT_TRIGGERS.values():  # kept where they exist (see above)
            con.execute(statement)
        for name, value in METADATA.items():
            con.execute(INSERT_COUNTER, (name, value))
        for statement in _RECOUNT:  # kept by other triggers (or none, or another library) until now
            con.execute(statement)
        if stored.get("schema_version") != SCHEMA_VERSION:
            # Schema 1 stored them under their setting names (without a schema_version,
            # python-diskcache made the rows: its Disk's arguments, which stay).
            for row in _ROW_NAMES if "schema_version" in stored else ():
                con.execute(DELETE_SETTING, (row,))
            changed = {name: value for name, value in wanted.items() if name in _ROW_NAMES} | changed
        for name, value in {**changed, "schema_version": SCHEMA_VERSION}.items():
            for statement, params in store_setting(name, value):
                con.execute(statement, params)
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise

