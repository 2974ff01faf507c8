"""Many tags per item: the SQL of the tag table, its triggers, and its creation.

An item's first tag stays in the Cache table's ``tag`` column, where python-diskcache reads and
writes it; the item's other tags are rows ``(tag, item)`` of the ``CacheTag`` table, whose
primary key is the index ``evict_tags`` and ``iterkeys(tag=...)`` search (O(k log n) for the k
items of a tag). Two triggers keep the table exact whoever writes the database, python-diskcache
included (persistent triggers fire on its connections too):

- ``CacheTag_item_delete``: a deleted row's tag entries go in the same statement (delete, pop,
  expiry, culling, ``clear``, ``evict``, python-diskcache's own deletes);
- ``CacheTag_item_retag``: an update that writes the ``tag`` column — python-diskcache's set or
  add replacing the item, ours where the first tag changes — drops the item's extra tags; our
  write then inserts the new ones in the same transaction. Our overwrite that keeps the first
  tag does not write the column (`keeping_first_tag`) and changes only the extra tags that
  differ. touch, incr and the access bookkeeping never write ``tag``.

Nothing is created when a cache is opened (invariant 5): the table and triggers are made by the
first write that stores an extra tag, inside that write's transaction (when its statement finds
no table: no probe per write). python-diskcache ignores a table it does not know, so the
directory stays usable by it (tests/peers/test_peer_sharing.py).
"""

from __future__ import annotations

from .schema import NOT_EXPIRED

__all__ = [
    "CREATE_TAG_SCHEMA", "DELETE_EXTRA_BATCH", "DELETE_ORPHAN_TAGS", "ORPHAN_TAGS",
    "SELECT_EXTRA_TAGS", "SELECT_ITEM_TAGS", "SELECT_TAG_TRIGGERS", "TAG_TABLE", "TAG_TABLE_EXISTS",
    "TAG_TRIGGERS", "TAGGED_KEYS_ANY", "TAGS_PER_STATEMENT", "delete_other_tags", "delete_tagged",
    "insert_extra_tags", "keeping_first_tag", "keeping_same_tags",
    "refreshing_same_tags",
]

TAG_TABLE = "CacheTag"

# The table's primary key is the (tag, item) index, WITHOUT ROWID: no second b-tree for it.
# The item index serves the triggers (an item's entries) and get(tags=True).
CREATE_TAG_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS CacheTag (tag BLOB NOT NULL, item INTEGER NOT NULL,"
    " PRIMARY KEY (tag, item)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS CacheTag_item ON CacheTag(item)",
    "CREATE TRIGGER IF NOT EXISTS CacheTag_item_delete AFTER DELETE ON Cache"
    " BEGIN DELETE FROM CacheTag WHERE item = OLD.rowid; END",
    "CREATE TRIGGER IF NOT EXISTS CacheTag_item_retag AFTER UPDATE OF tag ON Cache"
    " BEGIN DELETE FROM CacheTag WHERE item = OLD.rowid; END",
)
TAG_TABLE_EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'CacheTag'"
TAG_TRIGGERS = ("CacheTag_item_delete", "CacheTag_item_retag")
SELECT_TAG_TRIGGERS = (
    "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'Cache'"
    " AND name LIKE 'CacheTag%'"
)

# The extra tags of the item just written (found by its key: the upsert may have updated a row),
# in one statement: parameters key, raw, then the n tags. One text per count n (made once each,
# so sqlite3's statement cache keeps hitting). OR IGNORE: a tag equal (SQLite's rule) to another
# of the item's is stored once.
_INSERT_EXTRA_TAGS: dict[int, str] = {}


def insert_extra_tags(count: int) -> str:
    """The statement storing `count` extra tags of one item."""
    statement = _INSERT_EXTRA_TAGS.get(count)
    if statement is None:
        values = ", ".join(f"(?{number + 3})" for number in range(count))
        statement = _INSERT_EXTRA_TAGS[count] = (
            "INSERT OR IGNORE INTO CacheTag (tag, item) SELECT extra.column1, rowid FROM Cache,"
            f" (VALUES {values}) AS extra WHERE key = ?1 AND raw = ?2"
        )
    return statement


# An overwrite that keeps the item's first tag leaves its tag entries alone where they stay
# (the retag trigger drops them all, and the new ones are two b-tree inserts each: three tags'
# overwrite cost twice a one-tag one). Its statement is the write's own, without ``tag`` in the
# SET list (so the retag trigger, ``AFTER UPDATE OF tag``, does not fire) and updating only a row
# whose first tag is the same value of the same type (1 and 1.0 are equal to SQLite); rowcount 0
# then says "another first tag, or add found a live item": the write's own statement runs next.
# python-diskcache's writes name ``tag`` always, so the trigger still drops the extra tags of an
# item it replaces.
_SAME_FIRST_TAG = " tag IS excluded.tag AND typeof(tag) = typeof(excluded.tag)"
_KEEPING_FIRST_TAG: dict[str, str] = {}


def keeping_first_tag(statement: str) -> str:
    """`statement` (set's or add's upsert) as an overwrite that keeps the row's first tag: it
    stores or updates nothing where the row has another one."""
    keeping = _KEEPING_FIRST_TAG.get(statement)
    if keeping is None:
        if " tag = excluded.tag," not in statement:
            raise ValueError(f"not an upsert naming the tag column: {statement!r}")
        keeping = statement.replace(" tag = excluded.tag,", "")
        guarded = " WHERE " in keeping.partition(" DO UPDATE SET ")[2]  # add's: a live row stays
        keeping += (" AND" if guarded else " WHERE") + _SAME_FIRST_TAG
        _KEEPING_FIRST_TAG[statement] = keeping
    return keeping


# The same overwrite where the item's extra tags are also unchanged, in one statement: it updates
# the row only where the tag table holds exactly the `count` extra tags given (parameters
# ?first.., after the write's own; the same value of another type counts as a change). The
# usual refresh of an item with the same tags then reads and writes nothing more; rowcount 0
# says "a tag changed, or another first tag, or add found a live item".
_KEEPING_SAME_TAGS: dict[tuple[str, int, int], str] = {}


def keeping_same_tags(statement: str, first: int, count: int) -> str:
    """`keeping_first_tag(statement)`, updating a row only where its extra tags are the `count`
    given as parameters ?first onwards (a new row is inserted as there)."""
    key = (statement, first, count)
    keeping = _KEEPING_SAME_TAGS.get(key)
    if keeping is None:
        values = ", ".join(
            f"(?{number}, typeof(?{number}))" for number in range(first, first + count)
        )
        keeping = _KEEPING_SAME_TAGS[key] = (
            keeping_first_tag(statement)
            + f" AND (SELECT count(*) FROM CacheTag WHERE item = Cache.rowid) = {count}"
            " AND NOT EXISTS (SELECT 1 FROM CacheTag WHERE item = Cache.rowid AND"
            f" (tag, typeof(tag)) NOT IN (VALUES {values}))"
        )
    return keeping


# `keeping_same_tags` as a statement that never inserts (its row from a SELECT that finds none
# unless the item exists): run on its own, outside a transaction, it is the whole of the usual
# refresh, one autocommit statement as a set with one tag is; rowcount 0 says "a new item, or a
# tag changed, ...", and the write's transaction follows.
_REFRESHING_SAME_TAGS: dict[tuple[str, int, int], str] = {}


def refreshing_same_tags(statement: str, first: int, count: int) -> str:
    """`keeping_same_tags`, inserting nothing where the item does not exist."""
    key = (statement, first, count)
    refreshing = _REFRESHING_SAME_TAGS.get(key)
    if refreshing is None:
        keeping = keeping_same_tags(statement, first, count)
        head, values, tail = keeping.partition(" VALUES (")
        row, closing, upsert = tail.partition(") ON CONFLICT")
        if not (values and closing and head.startswith("INSERT INTO Cache(")):
            raise ValueError(f"not an upsert of one row of values: {statement!r}")
        refreshing = _REFRESHING_SAME_TAGS[key] = (
            f"{head} SELECT {row} WHERE EXISTS (SELECT 1 FROM Cache WHERE key = ?1 AND raw = ?2)"
            f" ON CONFLICT{upsert}"
        )
    return refreshing


# After such an overwrite: the item's extra tags, read (the common overwrite keeps them all:
# then nothing more is written); where they differ, those that are not among the new ones go
# (parameters key, raw, then the n new extra tags; the same value of another type goes too),
# then insert_extra_tags adds the missing (OR IGNORE: those kept).
SELECT_EXTRA_TAGS = (
    "SELECT tag FROM CacheTag WHERE item = (SELECT rowid FROM Cache WHERE key = ? AND raw = ?)"
)
_DELETE_OTHER_TAGS: dict[int, str] = {}


def delete_other_tags(count: int) -> str:
    """The statement dropping one item's extra tags other than the `count` given."""
    statement = _DELETE_OTHER_TAGS.get(count)
    if statement is None:
        values = ", ".join(f"(?{number + 3}, typeof(?{number + 3}))" for number in range(count))
        statement = _DELETE_OTHER_TAGS[count] = (
            "DELETE FROM CacheTag WHERE item = (SELECT rowid FROM Cache WHERE key = ?1 AND"
            f" raw = ?2) AND (tag, typeof(tag)) NOT IN (VALUES {values})"
        )
    return statement

# get(tags=True): the item and its extra tags in one statement, so one snapshot (a set between
# two statements could pair a value with another write's tags). The first row is the item's
# (kind 0), then one row per extra tag (kind 1).
_ITEM_COLUMNS = (
    "CASE WHEN filename IS NULL THEN value ELSE IFNULL(value, size) END, expire_time, tag,"
    " store_time"
)
SELECT_ITEM_TAGS = (
    f"SELECT 0, mode, filename, {_ITEM_COLUMNS} FROM Cache WHERE key = ?1 AND raw = ?2 AND"
    + NOT_EXPIRED.replace("?", "?3"),
    f"SELECT 0, mode, filename, {_ITEM_COLUMNS} FROM Cache WHERE key = ?1 AND raw = ?2 AND"
    + NOT_EXPIRED.replace("?", "?3")
    + " UNION ALL SELECT 1, NULL, NULL, NULL, NULL, t.tag, NULL FROM Cache AS c"
    " JOIN CacheTag AS t ON t.item = c.rowid WHERE c.key = ?1 AND c.raw = ?2 AND"
    " (c.expire_time IS NULL OR c.expire_time > ?3)",
)

# evict_tags: the items carrying any of n tags, first or extra, in ONE statement run on its own
# (autocommit: it is its own transaction). Inside an explicit transaction SQLite keeps a
# statement journal for a statement that may fail halfway (this one, by its triggers), holding
# the original of every page it changes, and past 64 KiB writes it to a temporary file: with the
# items of a tag spread through a large cache (six b-tree pages changed per item), that file was
# a third of evict_tags' time. The Cache_tag_rowid index serves the first tags where tag_index is
# on, the tag table's primary key the extra ones (EXPLAIN QUERY PLAN: both searches, then the
# deletes by rowid; the triggers delete the tag entries through CacheTag_item). Parameters: the
# tags, ?1..?n, each used on both sides. Without the tag table: the first tags only.
TAGS_PER_STATEMENT = 500  # (SQLite builds before 3.32 allow 999 parameters)
_DELETE_TAGGED: dict[tuple[int, bool], str] = {}


def delete_tagged(count: int, extra: bool) -> str:
    """The statement removing the items carrying any of `count` tags (`extra`: the tag table
    exists, so among their extra tags too)."""
    statement = _DELETE_TAGGED.get((count, extra))
    if statement is None:
        params = ", ".join(f"?{number + 1}" for number in range(count))
        statement = _DELETE_TAGGED[count, extra] = (
            "DELETE FROM Cache WHERE rowid IN (SELECT rowid FROM Cache WHERE tag IN"
            f" ({params}) UNION ALL SELECT item FROM CacheTag WHERE tag IN ({params}))"
            if extra else f"DELETE FROM Cache WHERE tag IN ({params})"
        )
    return statement


# evict(tag) of the items carrying it as an extra tag: a batch per statement, as python-diskcache
# evicts (the first tag's items: _store.schema.DELETE_TAGGED).
DELETE_EXTRA_BATCH = (
    "DELETE FROM Cache WHERE rowid IN (SELECT item FROM CacheTag WHERE tag = ? LIMIT ?)"
)

# iterkeys(tag=...): a page of the keys carrying the tag, first or extra, in rowid order. Each
# side reads at most a page through its index, so a page costs O(page log n).
_PAGE_OF = (
    "SELECT c.rowid, c.key, c.raw FROM Cache AS c JOIN ("
    "SELECT item FROM (SELECT rowid AS item FROM Cache WHERE tag = ?1 AND rowid {cmp} ?2"
    " ORDER BY rowid {order} LIMIT ?3)"
    " UNION SELECT item FROM (SELECT item FROM CacheTag WHERE tag = ?1 AND item {cmp} ?2"
    " ORDER BY item {order} LIMIT ?3)"
    " ORDER BY item {order} LIMIT ?3) AS page ON c.rowid = page.item ORDER BY c.rowid {order}"
)
TAGGED_KEYS_ANY = (
    _PAGE_OF.format(cmp=">", order="ASC"),
    _PAGE_OF.format(cmp="<", order="DESC"),
)

# check(): tag entries whose item is gone (written while the triggers were missing, say);
# and their repair.
ORPHAN_TAGS = "SELECT tag, item FROM CacheTag WHERE item NOT IN (SELECT rowid FROM Cache)"
DELETE_ORPHAN_TAGS = "DELETE FROM CacheTag WHERE item NOT IN (SELECT rowid FROM Cache)"
