"""The database's statements: the SQL text the library runs on a cache database.

The schema itself (tables, indexes, triggers) and its creation and migration are
_store/creation.py's; the command line's own statements are _cli/caches.py's; the eviction
policies' own SQL is `_policies`'s (here: deleting their victims). Every statement is a constant string with ``?`` parameters, so sqlite3's statement cache (keyed
by text) always hits. The Cache table has python-diskcache's columns; the triggers differ: they
keep ``size`` (bytes in value files) in the Settings table, firing only when it changes, and
``count`` (the items), under the names python-diskcache gives its own triggers.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from .._policies import POLICIES, policy_of


__all__ = [
    "DBNAME",
    "SCHEMA_VERSION",
    "expiry_of",
]

DBNAME = "cache.db"
LAYOUT_FILE = "fanout.json"  # a FanoutCache's shard layout, in its top directory
LAYOUT_TEMP_PREFIX = ".fanout-"  # the layout file being written (then linked as LAYOUT_FILE)
# 2: size triggers named as python-diskcache's; our disk options renamed. 3: the item count is
# kept in Settings by triggers (python-diskcache's names), and len() reads it.
SCHEMA_VERSION = 3

# Settings stored under another row name: python-diskcache passes every ``disk_*`` row of the
# Settings table to its Disk, whose constructor refuses options it does not know.
_ROW_NAMES = {
    "disk_compress": "core_disk_compress",
    "disk_compress_level": "core_disk_compress_level",
    "disk_compress_threshold": "core_disk_compress_threshold",
}
_SETTING_NAMES = {row: setting for setting, row in _ROW_NAMES.items()}


def row_name(setting: str) -> str:
    """The Settings-table row that stores `setting`."""
    return _ROW_NAMES.get(setting, setting)


def store_setting(name: str, value: Any) -> list[tuple[str, tuple[Any, Any]]]:
    """Statements storing setting `name`: its row, and any row python-diskcache made under the
    name (its JSONDisk's ``disk_compress_level``), so both libraries keep reading one value."""
    row = row_name(name)
    peer = [] if row == name else [(UPDATE_PEER_ROW, (value, name))]
    return [(STORE_SETTING, (row, value)), *peer]


def setting_name(row: str) -> str:
    """The setting a Settings-table row stores (see `row_name`)."""
    return _SETTING_NAMES.get(row, row)


def delete_by_policy(name: str) -> str | None:
    """The statement removing ``?`` victims of policy `name` in its order (None: it has none)."""
    statement = DELETE_BY_POLICY.get(name)
    if statement is None and name not in POLICIES:
        cull = policy_of(name).cull
        statement = None if cull is None else "DELETE FROM Cache WHERE rowid IN (" + cull + ")"
    return statement


DELETE_BY_POLICY = {
    name: "DELETE FROM Cache WHERE rowid IN (" + policy.cull + ")"
    for name, policy in POLICIES.items()
    if policy.cull is not None
}

# The access log's batched refreshes (see _access), per column a policy orders by. A time only
# moves forward, so a late batch never undoes a newer one.
REFRESH_COLUMN = {
    "store_time": "UPDATE Cache SET store_time = ?1 WHERE key = ?2 AND raw = ?3 AND store_time < ?1",
    "access_time": (
        "UPDATE Cache SET access_time = ?1 WHERE key = ?2 AND raw = ?3 AND access_time < ?1"
    ),
    "access_count": (
        "UPDATE Cache SET access_count = access_count + ?1"
        " WHERE key = ?2 AND raw = ?3 AND store_time <= ?4"
    ),
}


# --- statements on the hot path ---------------------------------------------------------------

NOT_EXPIRED = "(expire_time IS NULL OR expire_time > ?)"


def expiry_of(stored: Any) -> Any:
    """A row's expiry as Python may compare it with a time: the number, or None. SQLite sorts a
    text or blob expiry (only ever written by hand) after every number, so in SQL it never
    expires; None says the same here, where comparing it would raise TypeError."""
    return stored if stored is None or type(stored) is float or type(stored) is int else None

# A get selects only what it returns (each column costs): the value; with the memory tier on,
# its expiry too (kept with it in memory); for get(expire_time=..., tag=...), the tag as well.
# The columns come in this order in all three.
# A row with a value file has a NULL value column: these statements give its size there
# instead (no column more, no measurable cost), and the standard Disk reads the file only if it
# is that long (see Disk.fetch). A NULL inline value (a custom Disk's) stays NULL.
_VALUE_OR_SIZE = "CASE WHEN filename IS NULL THEN value ELSE IFNULL(value, size) END"
SELECT_VALUE = (
    f"SELECT mode, filename, {_VALUE_OR_SIZE} FROM Cache WHERE key = ? AND raw = ? AND "
    + NOT_EXPIRED
)
SELECT_VALUE_EXPIRY = (  # an expired row too (said by the last column, the negated NOT_EXPIRED):
    # the memory tier keeps a key's absence only where no row is; an expired row lives again
    # when the clock is stepped back
    f"SELECT mode, filename, {_VALUE_OR_SIZE}, expire_time, expire_time <= ?3 FROM Cache"
    " WHERE key = ?1 AND raw = ?2"
)
SELECT_ITEM = (
    f"SELECT mode, filename, {_VALUE_OR_SIZE}, expire_time, tag FROM Cache"
    " WHERE key = ? AND raw = ? AND " + NOT_EXPIRED
)
SELECT_ITEM_STORED = (  # get(store_time=True)
    f"SELECT mode, filename, {_VALUE_OR_SIZE}, expire_time, tag, store_time FROM Cache"
    " WHERE key = ? AND raw = ? AND " + NOT_EXPIRED
)
SELECT_EXISTS = "SELECT 1 FROM Cache WHERE key = ? AND raw = ? AND " + NOT_EXPIRED
# A row for the key, expired or not (a near cache's copy the listener may refresh).
# The refresher renews inline copies only: a value file's item is not even read from Redis.

_INSERT_INTO = (
    "INSERT INTO Cache(key, raw, store_time, expire_time, access_time, access_count,"
    " tag, size, mode, filename, value)"
)
_INSERT = _INSERT_INTO + " VALUES (?1, ?2, ?3, ?4, ?3, 0, ?5, ?6, ?7, ?8, ?9)"
# An overwrite stores its time as store_time (python-diskcache's set replaces the row) and leaves
# access_time/access_count alone: moving the policy's index entry would double the statement's
# cost; that refresh (and store_time's under least-recently-stored, where it is the index: see
# _eviction.evictor.STORE_TIME_BATCHED) is recorded by the AccessLog and written in batches
# (_eviction/access.py).
_ON_CONFLICT_REPLACE = (
    " ON CONFLICT(key, raw) DO UPDATE SET store_time = excluded.store_time,"
    " expire_time = excluded.expire_time, tag = excluded.tag, size = excluded.size,"
    " mode = excluded.mode, filename = excluded.filename, value = excluded.value"
)
_ONLY_IF_EXPIRED = " WHERE expire_time IS NOT NULL AND expire_time <= ?3"
# One statement per set: the row's previous value file is reported by a trigger (see
# RELEASE_TRIGGERS) and removed once the statement has committed.
UPSERT = _INSERT + _ON_CONFLICT_REPLACE
# add: replaces only an expired row; rowcount is 0 when a live item was there.
ADD = UPSERT + _ONLY_IF_EXPIRED
INSERT = _INSERT
# set and add of the commonest item: no expiry, no tag, the value inline. The NULLs are in the
# text: each None parameter costs the sqlite3 module an adapter lookup (~0.4 us here, as a bool
# or bytes one does; ints, floats and str bind directly), three per set. Parameters: key, raw,
# now, size, mode, value.
_INSERT_PLAIN = _INSERT_INTO + " VALUES (?1, ?2, ?3, NULL, ?3, 0, NULL, ?4, ?5, NULL, ?6)"
PLAIN_VARIANT = {
    UPSERT: _INSERT_PLAIN + _ON_CONFLICT_REPLACE,
    ADD: _INSERT_PLAIN + _ON_CONFLICT_REPLACE + _ONLY_IF_EXPIRED,
}

# Only a live item is deleted (expired ones are left to expire/cull, as in python-diskcache);
# rowcount says which. No RETURNING: it costs ~2 us (SQLite buffers the rows).
DELETE_ITEM = "DELETE FROM Cache WHERE key = ? AND raw = ? AND " + NOT_EXPIRED
# pop and pull read the item, fetch its value (which a Disk may refuse), then delete the row only
# if it is still the one read: nothing is removed when the value cannot be returned.
# The row's size last: a value file must be that long to be read (see SELECT_VALUE); the value
# column itself is what DELETE_UNCHANGED compares.
SELECT_FOR_POP = (
    "SELECT rowid, expire_time, tag, mode, filename, value, size FROM Cache"
    " WHERE key = ? AND raw = ?"
)
_UNCHANGED = (
    " AND expire_time IS ? AND tag IS ? AND mode = ? AND filename IS ? AND value IS ?"
)
DELETE_UNCHANGED = "DELETE FROM Cache WHERE rowid = ? AND key = ? AND raw = ?" + _UNCHANGED
TOUCH = "UPDATE Cache SET expire_time = ? WHERE key = ? AND raw = ? AND " + NOT_EXPIRED
DELETE_UNREADABLE = (  # an entry on_error='miss' drops, if it is still the one read
    "DELETE FROM Cache WHERE key = ?1 AND raw = ?2 AND mode = ?3 AND filename IS ?4"
    " AND (?4 IS NOT NULL OR value IS ?5)"
)

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
_ROW = "SELECT rowid, key, raw, expire_time, tag, mode, filename, value, size "
QUEUE_PEEK = {side: _ROW + _QUEUE_RANGE + order + " LIMIT 1"
              for side, order in (("front", "ASC"), ("back", "DESC"))}
PEEK_LAST = _ROW + "FROM Cache ORDER BY rowid DESC LIMIT 1"
PEEK_FIRST = _ROW + "FROM Cache ORDER BY rowid ASC LIMIT 1"
# A Deque's d[i]: the row at an offset from the front (or back), in key order, in one statement.
ROW_AT = {end: _ROW + f"FROM Cache ORDER BY key {order}, raw {order} LIMIT 1 OFFSET ?"
          for end, order in (("front", "ASC"), ("back", "DESC"))}

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
# iterkeys(tag=...): the keys of one tag (or of none) in insertion order, a page at a time,
# through the Cache_tag_rowid index where it exists (tag_index); by rowid otherwise.
TAGGED_KEYS = (
    "SELECT rowid, key, raw FROM Cache WHERE tag = ?1 AND rowid > ?2 ORDER BY rowid ASC LIMIT ?3",
    "SELECT rowid, key, raw FROM Cache WHERE tag = ?1 AND rowid < ?2 ORDER BY rowid DESC LIMIT ?3",
)
UNTAGGED_KEYS = (
    "SELECT rowid, key, raw FROM Cache WHERE tag IS NULL AND rowid > ?2 ORDER BY rowid ASC LIMIT ?3",
    "SELECT rowid, key, raw FROM Cache WHERE tag IS NULL AND rowid < ?2 ORDER BY rowid DESC LIMIT ?3",
)
ROWS_ASC = "SELECT rowid, key, raw FROM Cache WHERE ? < rowid AND rowid < ? ORDER BY rowid ASC LIMIT ?"
ROWS_DESC = "SELECT rowid, key, raw FROM Cache WHERE ? < rowid AND rowid < ? ORDER BY rowid DESC LIMIT ?"
SELECT_FILES = "SELECT rowid, size, filename FROM Cache WHERE filename IS NOT NULL"

COUNT = "SELECT COUNT(*) FROM Cache"
# len() where the count triggers are known to exist (see _COUNT_TRIGGERS).
STORED_COUNT = "SELECT value FROM Settings WHERE key = 'count'"
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

# --- settings, counters, bookkeeping and maintenance -----------------------------------------

SELECT_SETTINGS = "SELECT key, value FROM Settings"
SELECT_SETTING = "SELECT value FROM Settings WHERE key = ?"
STORE_SETTING = "INSERT OR REPLACE INTO Settings VALUES (?, ?)"
DELETE_SETTING = "DELETE FROM Settings WHERE key = ?"
UPDATE_PEER_ROW = "UPDATE Settings SET value = ? WHERE key = ?"
RESET_HITS_MISSES = "UPDATE Settings SET value = 0 WHERE key IN ('hits', 'misses')"
ADD_TO_COUNTER = "UPDATE Settings SET value = value + ? WHERE key = ?"
SELECT_COUNTERS = "SELECT key, value FROM Settings WHERE key IN ('size', 'count', 'hits', 'misses')"
COUNT_TRIGGER_EXISTS = "SELECT 1 FROM sqlite_master WHERE name = 'Settings_count_insert'"
SELECT_ACTUAL_SIZE = "SELECT COALESCE(SUM(size), 0) FROM Cache"
MAX_ROWID = "SELECT MAX(rowid) FROM Cache"
PROBE_SCHEMA = "SELECT 1 FROM sqlite_master"
INTEGRITY_CHECK = "PRAGMA integrity_check"
AUTO_VACUUM = "PRAGMA auto_vacuum"
INCREMENTAL_VACUUM = 2  # AUTO_VACUUM's answer where free pages stay until returned
FREELIST_COUNT = "PRAGMA freelist_count"
# Returns one free page per step; Python's sqlite3 steps a statement once per execute (an
# ``incremental_vacuum(N)`` returns one page there, not N): run once per page.
RETURN_FREE_PAGE = "PRAGMA incremental_vacuum(1)"
PAGE_COUNT = "PRAGMA page_count"
VACUUM = "VACUUM"

def database_uri(path: str, query: str) -> str:
    """An SQLite URI of the database file `path` with `query` (``mode=ro``, ...): the path
    percent-quoted, so that a directory named with ``?``, ``#`` or ``%`` opens that file."""
    return "file:" + urllib.parse.quote(path) + "?" + query


def read_pragma(name: str) -> str:
    """The statement reading pragma `name` (a validated identifier, see _settings)."""
    return f"PRAGMA {name}"


def set_pragma(name: str, value: Any) -> str:
    """The statement setting pragma `name` to `value` (both validated: PRAGMA takes no
    parameters, so they are spliced into the text)."""
    return f"PRAGMA {name} = {value}"
