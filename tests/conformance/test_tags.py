"""Many tags per item (issue 37, docs/tags.rst): the contract over Cache and FanoutCache with the
memory tier on and off, the tag table kept exact by its triggers (no orphan entries whatever
removes an item), check's report and repair, bad tags refused before anything is stored, the
first write making the table and a reopen writing nothing, and a property test that the tag
index equals the tags of the stored items after random operations."""

from __future__ import annotations

import asyncio
import glob
import math
import os
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diskcache_core as dc

BIG = b"v" * 50_000  # a value file


@pytest.fixture(params=[0, 1 << 20], ids=["memory-off", "memory-on"])
def tagged(request, make_cache):
    """A cache of each implementation, memory tier off and on, with the tag index."""
    return make_cache(tag_index=True, memory_size_limit=request.param)


def databases(cache):
    """Paths of the cache's databases (each shard's)."""
    return sorted(glob.glob(os.path.join(cache.directory, "**", "cache.db"), recursive=True))


def tag_entries(cache):
    """Every (tag, key) pair of the tag table, and the entries naming no item, over the shards."""
    pairs, dangling = set(), 0
    for path in databases(cache):
        con = sqlite3.connect(path)
        try:
            if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'CacheTag'").fetchall():
                continue
            pairs |= set(con.execute(
                "SELECT t.tag, c.key FROM CacheTag AS t JOIN Cache AS c ON c.rowid = t.item"
            ).fetchall())
            ((missing,),) = con.execute(
                "SELECT COUNT(*) FROM CacheTag WHERE item NOT IN (SELECT rowid FROM Cache)"
            ).fetchall()
            dangling += missing
        finally:
            con.close()
    return pairs, dangling


def assert_exact(cache, model, ordered=True):
    """The cache's tags are the model's (key -> frozenset of tags): per item, per tag, and no
    tag entry names a missing item."""
    for key, tags in model.items():
        assert cache.get(key, tags=True)[1] == tags, key
    every = set().union(*model.values()) if model else set()
    for tag in every | {"never-used"}:
        expected = [key for key, tags in model.items() if tag in tags]
        found = list(cache.iterkeys(tag=tag))
        if ordered:
            assert found == expected, tag
            assert list(cache.iterkeys(reverse=True, tag=tag)) == expected[::-1], tag
        else:
            assert sorted(found) == sorted(expected), tag
    _, dangling = tag_entries(cache)
    assert dangling == 0
    assert len(cache) == len(model)


# --- the contract -------------------------------------------------------------------------------


def test_get_returns_the_tags_last_beside_the_other_flags(tagged):
    assert tagged.set("k", "v", expire=60, tag="first", tags=["b", "c", "first"]) is True
    value, expire_time, tag, tags = tagged.get("k", expire_time=True, tag=True, tags=True)
    assert (value, tag, tags) == ("v", "first", frozenset({"first", "b", "c"}))
    assert expire_time is not None
    assert tagged.get("k", tags=True) == ("v", frozenset({"first", "b", "c"}))
    value, stored, tags = tagged.get("k", store_time=True, tags=True)
    assert isinstance(stored, float) and tags == frozenset({"first", "b", "c"})
    assert tagged.get("missing", "d", tag=True, tags=True) == ("d", None, frozenset())
    assert tagged.get("k") == "v"  # the plain get is unchanged


def test_the_first_tag_is_where_python_diskcache_reads_it(tagged):
    tagged.set("no-tag-arg", 1, tags=["x", "y"])
    tagged.set("tag-arg", 2, tag="t", tags=["x"])
    assert tagged.get("no-tag-arg", tag=True) == (1, "x")  # the first of tags
    assert tagged.get("tag-arg", tag=True) == (2, "t")
    tagged.set("one", 3, tags=["solo"])
    assert tagged.get("one", tag=True, tags=True) == (3, "solo", frozenset({"solo"}))


def test_a_set_replaces_the_items_tags_and_add_leaves_a_live_item_alone(tagged):
    model = {}
    tagged.set("k", 1, tags=["a", "b"])
    model["k"] = frozenset({"a", "b"})
    assert_exact(tagged, model)
    tagged.set("k", 2, tags=["c"])
    model["k"] = frozenset({"c"})
    assert_exact(tagged, model)
    tagged.set("k", 3, tag="d")  # python-diskcache's call: one tag, the extra ones go
    model["k"] = frozenset({"d"})
    assert_exact(tagged, model)
    tagged.set("k", 4, tags=["e", "f"])
    tagged.set("k", 5)
    model["k"] = frozenset()
    assert_exact(tagged, model)
    tagged.set("k", 6, tags=["g", "h"])
    assert tagged.add("k", 7, tags=["i", "j"]) is False
    model["k"] = frozenset({"g", "h"})
    assert_exact(tagged, model)
    assert tagged.add("new", 8, tags=["i", "j"]) is True
    model["new"] = frozenset({"i", "j"})
    assert_exact(tagged, model)


def _log_tag_writes(cache):
    """A list of ("insert"/"delete", tag) the tag table's rows written through this thread's
    connection of `cache` from now on (temporary triggers: they see the retag trigger's deletes
    too), read by calling the returned function."""
    con = cache._store.state().con
    con.execute("CREATE TEMP TABLE IF NOT EXISTS tag_log (what TEXT, tag)")
    con.execute(
        "CREATE TEMP TRIGGER IF NOT EXISTS tag_log_insert AFTER INSERT ON main.CacheTag"
        " BEGIN INSERT INTO tag_log VALUES ('insert', NEW.tag); END"
    )
    con.execute(
        "CREATE TEMP TRIGGER IF NOT EXISTS tag_log_delete AFTER DELETE ON main.CacheTag"
        " BEGIN INSERT INTO tag_log VALUES ('delete', OLD.tag); END"
    )

    def taken():
        rows = sorted(con.execute("SELECT what, tag FROM tag_log").fetchall())
        con.execute("DELETE FROM tag_log")
        return rows

    return taken


def test_an_overwrite_rewrites_only_the_tag_entries_that_change(make_store):
    cache = make_store(tag_index=True)
    cache.set("k", 1, tags=["a", "b", "c"])
    taken = _log_tag_writes(cache)
    cache.set("k", 2, tags=["a", "b", "c"])  # the same tags: no tag entry written
    assert taken() == []
    cache.set("k", 3, tags=["a", "c", "b"], expire=100)
    assert taken() == []
    cache.set("k", 4, tags=["a", "b", "d"])  # one extra tag changes: one entry goes, one comes
    assert taken() == [("delete", "c"), ("insert", "d")]
    assert cache.get("k", tags=True) == (4, frozenset({"a", "b", "d"}))
    cache.set("k", 5, tags=["a"])
    assert taken() == [("delete", "b"), ("delete", "d")]
    cache.set("k", 6, tags=["x", "b", "d"])  # another first tag: every entry is replaced
    assert taken() == [("insert", "b"), ("insert", "d")]
    cache.set("k", 7, tags=["b", "d", "e"])
    assert taken() == [("delete", "b"), ("delete", "d"), ("insert", "d"), ("insert", "e")]
    assert cache.get("k", tags=True) == (7, frozenset({"b", "d", "e"}))
    assert cache.add("k", 8, tags=["b", "d", "f"]) is False  # a live item: nothing changes
    assert taken() == []
    assert cache.get("k", tags=True) == (7, frozenset({"b", "d", "e"}))
    assert tag_entries(cache) == ({("d", "k"), ("e", "k")}, 0)


def test_a_refresh_with_the_same_tags_is_one_statement(make_store):
    """The usual refresh of a tagged item (same first and extra tags, an inline value) is one
    autocommit statement, as a set with one tag is: no transaction, no read of the tag table."""
    cache = make_store(tag_index=True)
    cache.set("k", 1, tag="first", tags=["a", "b"])
    con = cache._store.state().con
    traced: list[str] = []
    con.set_trace_callback(traced.append)
    try:
        assert cache.set("k", 2, tag="first", tags=["b", "a"]) is True
    finally:
        con.set_trace_callback(None)
    ran = list(dict.fromkeys(traced))  # (each trigger program run is traced as its statement)
    assert len(ran) == 1 and ran[0].startswith("INSERT INTO Cache"), traced
    assert cache.get("k", tag=True, tags=True) == (2, "first", frozenset({"first", "a", "b"}))
    cache.set("k", 3, tag="first", tags=["a", 1])  # a tag changes: the slower paths, still exact
    cache.set("k", 4, tag="first", tags=["a", 1.0])
    assert cache.get("k", tags=True) == (4, frozenset({"first", "a", 1.0}))
    assert tag_entries(cache) == ({("a", "k"), (1.0, "k")}, 0)


def test_an_overwrite_keeps_each_tags_type_as_given(make_store):
    cache = make_store(tag_index=True)
    cache.set("k", 1, tags=[1, 2, "x"])
    cache.set("k", 2, tags=[1.0, 2.0, "x"])  # equal to SQLite, not the same stored value
    value, first, tags = cache.get("k", tag=True, tags=True)
    assert (value, first, type(first)) == (2, 1.0, float)
    assert sorted((type(tag).__name__, tag) for tag in tags) == [
        ("float", 1.0), ("float", 2.0), ("str", "x")
    ]
    con = sqlite3.connect(databases(cache)[0])
    try:
        assert con.execute("SELECT tag, typeof(tag) FROM CacheTag ORDER BY tag").fetchall() == [
            (2.0, "real"), ("x", "text")
        ]
    finally:
        con.close()


def test_add_over_an_expired_item_stores_the_new_tags(tagged):
    tagged.set("k", 1, expire=0.0001, tags=["old1", "old2"])
    # (expired as soon as the clock moves: an add then replaces it)
    while tagged.get("k") is not None:
        pass
    assert tagged.add("k", 2, tags=["new1", "new2"]) is True
    assert tagged.get("k", tags=True) == (2, frozenset({"new1", "new2"}))
    assert list(tagged.iterkeys(tag="old2")) == []


def test_touch_and_incr_keep_the_tags(tagged):
    tagged.set("n", 1, tags=["a", "b"])
    assert tagged.touch("n", 100) is True
    assert tagged.incr("n") == 2
    assert tagged.get("n", tags=True) == (2, frozenset({"a", "b"}))


def test_evict_removes_items_carrying_the_tag_among_any(tagged):
    tagged.set("first", 1, tags=["x", "y"])
    tagged.set("extra", 2, tags=["y", "x"])
    tagged.set("column", 3, tag="x")
    tagged.set("other", 4, tags=["y", "z"])
    assert tagged.evict("x") == 3
    assert_exact(tagged, {"other": frozenset({"y", "z"})})


def test_evict_tags_removes_every_item_carrying_any_and_counts_each_once(tagged):
    model = {}
    for number in range(30):
        tags = frozenset({f"mod3:{number % 3}", f"mod5:{number % 5}", "all"})
        tagged.set(number, BIG if number % 10 == 0 else number, tags=sorted(tags))
        model[number] = tags
    assert tagged.evict_tags(["mod3:0", "mod5:0"]) == 14  # 10 + 6 - 2 counted once
    model = {k: v for k, v in model.items() if not v & {"mod3:0", "mod5:0"}}
    assert_exact(tagged, model, ordered=isinstance(tagged, dc.Cache))
    assert tagged.evict_tags([]) == 0
    assert tagged.evict_tags(iter(["nothing"])) == 0
    assert tagged.evict_tags({"all"}) == len(model) == 16
    assert_exact(tagged, {})
    assert glob.glob(os.path.join(tagged.directory, "**", "*.val"), recursive=True) == []


def test_evict_tags_is_one_statement_of_its_own(make_store):
    """No explicit transaction around it: SQLite then keeps no statement journal (a temporary
    file, past 64 KiB of changed pages: a third of the time of a large eviction)."""
    cache = make_store(tag_index=True)
    for number in range(20):
        cache.set(number, number, tag=f"first{number % 2}", tags=[f"extra{number % 5}"])
    con = cache._store.state().con
    traced = []
    con.set_trace_callback(traced.append)
    try:
        assert cache.evict_tags(["first0", "extra1", "extra2"]) == 10 + 4 + 4 - 2 - 2
    finally:
        con.set_trace_callback(None)
    statements = set(traced)  # (each trigger program run is traced as its statement again)
    assert len(statements) == 1 and statements.pop().startswith("DELETE FROM Cache"), traced
    assert sorted(cache) == [3, 5, 9, 13, 15, 19]


def test_evict_tags_of_more_tags_than_a_statement_takes_is_one_transaction(make_store):
    from diskcache_core._store.tags import TAGS_PER_STATEMENT

    cache = make_store(tag_index=True)
    tags = [f"t{number}" for number in range(2 * TAGS_PER_STATEMENT + 10)]
    for number in range(0, len(tags), 7):  # items whose tags fall in each chunk of statements
        cache.set(number, number, tag=tags[number], tags=[tags[-1 - number], "kept"])
    cache.set("first only", 0, tag=tags[TAGS_PER_STATEMENT + 1])
    cache.set("untouched", 0, tags=["kept", "other"])
    expected = len(range(0, len(tags), 7)) + 1
    con = cache._store.state().con
    traced = []
    con.set_trace_callback(traced.append)
    try:
        assert cache.evict_tags(tags) == expected
    finally:
        con.set_trace_callback(None)
    assert traced[0].startswith("BEGIN") and traced[-1] == "COMMIT", traced
    assert sum(text.startswith("BEGIN") for text in traced) == 1
    assert list(cache) == ["untouched"]
    assert tag_entries(cache) == ({("other", "untouched")}, 0)


def test_a_value_the_memory_tier_holds_is_not_served_after_evict_tags(tagged):
    tagged.set("k", "value", tags=["a", "b"])
    for _ in range(3):  # (the tier fills on a key seen lately)
        assert tagged.get("k") == "value"
    assert tagged.evict_tags(["b"]) == 1
    assert tagged.get("k") is None
    assert "k" not in tagged


@pytest.mark.parametrize("tag_index", [True, False])
def test_iterkeys_by_tag_pages_in_insertion_order(cache_dir, tag_index):
    # (a FanoutCache's order is per shard: its sets are compared by the other tests)
    cache = dc.Cache(cache_dir, tag_index=tag_index)
    model = {}
    for number in range(350):  # several pages of 100, both sides of the union
        tags = ["even" if number % 2 == 0 else "odd", "all"]
        if number % 7 == 0:
            tags = ["sevens", *tags]
        cache.set(f"key{number}", number, tags=tags)
        model[f"key{number}"] = frozenset(tags)
    assert_exact(cache, model)
    assert list(cache.iterkeys(tag=None)) == []  # every item has a tag
    cache.close()


def test_items_written_with_one_tag_by_tag_are_found_with_extra_ones(tagged):
    tagged.set("plain", 1, tag="t")
    tagged.set("extra", 2, tags=["u", "t"])
    tagged.set("none", 3)
    ordered = isinstance(tagged, dc.Cache)
    found = list(tagged.iterkeys(tag="t"))
    assert (found if ordered else sorted(found)) == (["plain", "extra"] if ordered else ["extra", "plain"])
    assert list(tagged.iterkeys(tag=None)) == ["none"]


@pytest.mark.parametrize("removal", ["delete", "pop", "del", "expire", "clear", "cull", "evict_items"])
def test_removals_leave_no_tag_entry(make_cache, removal):
    cache = make_cache(tag_index=True, size_limit=1 << 30)
    for number in range(20):
        cache.set(number, BIG if number % 4 == 0 else number, expire=0.0001 if number < 10 else None,
                  tags=["a", "b", f"n{number}"])
    for _ in range(100_000):  # (bounded) until the first ten have expired
        if cache.get(0) is None:
            break
    if removal in ("delete", "pop", "del"):
        for number in range(10, 20):
            if removal == "delete":
                assert cache.delete(number) is True
            elif removal == "pop":
                assert cache.pop(number) is not None
            else:
                del cache[number]
        assert cache.expire() == 10  # the expired rows stay until then
    elif removal == "expire":
        assert cache.expire() == 10
    elif removal == "clear":
        assert cache.clear() == 20
    elif removal == "cull":
        cache.reset("size_limit", 0)
        cache.cull()
    else:
        assert cache.evict_items(20) == 20
    pairs, dangling = tag_entries(cache)
    remaining = {key for key in cache}
    assert dangling == 0
    assert {key for _, key in pairs} <= remaining
    if removal != "expire":
        assert remaining == set()


def _schema_names(directory):
    con = sqlite3.connect(os.path.join(directory, "cache.db"))
    try:
        return {name for (name,) in con.execute("SELECT name FROM sqlite_master")}
    finally:
        con.close()


def test_the_first_write_of_a_second_tag_makes_the_table(cache_dir):
    made = {"CacheTag", "CacheTag_item", "CacheTag_item_delete", "CacheTag_item_retag"}
    with dc.Cache(cache_dir) as cache:
        cache.set("a", 1, tag="t")
        cache.set("b", 2, tags=["t"])
        cache.set("c", 3, tag="t", tags=["t", "t"])
        cache.set("d", 4, tags=[])
        assert cache.get("d", tags=True) == (4, frozenset())
        assert cache.evict_tags(["none"]) == 0
        assert list(cache.iterkeys(tag="t")) == ["a", "b", "c"]
        assert not made & _schema_names(cache_dir)
        cache.set("e", 5, tags=["t", "u"])
        assert made <= _schema_names(cache_dir)
        assert list(cache.iterkeys(tag="u")) == ["e"]


def test_tags_equal_by_sqlites_rule_are_one(tagged):
    tagged.set("k", 0, tags=[1, 1.0, True, "1", b"1"])
    assert tagged.get("k", tags=True)[1] == frozenset({1, "1", b"1"})
    assert list(tagged.iterkeys(tag=1.0)) == ["k"]
    assert tagged.evict_tags([True]) == 1


def test_reopening_a_cache_with_tags_writes_nothing(tmp_path):
    directory = str(tmp_path / "cache")
    with dc.Cache(directory) as cache:
        cache.set("k", 1, tags=["a", "b"])
    before = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                before[name] = (handle.read(), os.stat(path).st_mtime_ns)
    with dc.Cache(directory) as cache:
        assert cache.get("k", tags=True) == (1, frozenset({"a", "b"}))
        assert list(cache.iterkeys(tag="b")) == ["k"]
        assert cache.check() == []
    with open(os.path.join(directory, "cache.db"), "rb") as handle:
        assert handle.read() == before["cache.db"][0]
    assert os.stat(os.path.join(directory, "cache.db")).st_mtime_ns == before["cache.db"][1]


# --- bad tags -----------------------------------------------------------------------------------

BAD_TAGS = [
    pytest.param([object()], TypeError, id="type"),
    pytest.param([None], TypeError, id="none-among"),
    pytest.param("abc", TypeError, id="one-str"),
    pytest.param(b"abc", TypeError, id="one-bytes"),
    pytest.param(5, TypeError, id="not-iterable"),
    pytest.param([math.nan], ValueError, id="nan"),
    pytest.param([2**63], ValueError, id="int-beyond-64-bits"),
    pytest.param(["\ud800"], ValueError, id="not-utf8"),
    pytest.param([f"t{n}" for n in range(65)], ValueError, id="too-many"),
]


@pytest.mark.parametrize(("tags", "error"), BAD_TAGS)
@pytest.mark.parametrize("method", ["set", "add"])
def test_bad_tags_raise_naming_the_argument_before_anything_is_stored(make_cache, tags, error, method):
    cache = make_cache()
    with pytest.raises(error, match="tags"):
        getattr(cache, method)("k", BIG, tags=tags)
    assert "k" not in cache
    assert len(cache) == 0
    assert glob.glob(os.path.join(cache.directory, "**", "*.val"), recursive=True) == []


def test_the_limit_counts_distinct_tags_with_tag(make_cache):
    cache = make_cache()
    cache.set("k", 1, tag="t", tags=[f"t{n}" for n in range(63)])  # 64 with tag
    assert len(cache.get("k", tags=True)[1]) == 64
    cache.set("k2", 1, tags=["same"] * 500)
    with pytest.raises(ValueError, match="at most 64"):
        cache.set("k3", 1, tag="t", tags=[f"t{n}" for n in range(64)])


@pytest.mark.parametrize(("tags", "error"), BAD_TAGS[:-1])
def test_evict_tags_refuses_bad_tags(make_cache, tags, error):
    cache = make_cache()
    cache.set("k", 1, tags=["a", "b"])
    with pytest.raises(error, match="tags"):
        cache.evict_tags(tags)
    assert "k" in cache


# --- check ---------------------------------------------------------------------------------------


def test_check_reports_and_fix_removes_dangling_entries_and_remakes_triggers(tmp_path):
    directory = str(tmp_path / "cache")
    with dc.Cache(directory) as cache:
        cache.set("k", 1, tags=["a", "b"])
        cache.set("gone", 2, tags=["a", "c"])
        assert cache.check() == []
    con = sqlite3.connect(os.path.join(directory, "cache.db"))
    con.execute("DROP TRIGGER CacheTag_item_delete")  # a writer around the triggers
    con.execute("DELETE FROM Cache WHERE key = 'gone'")
    con.commit()
    con.close()
    with dc.Cache(directory) as cache:
        messages = [str(w.message) for w in cache.check()]
        assert any("names no item" in m and "'c'" in m for m in messages), messages
        assert any("CacheTag_item_delete" in m for m in messages), messages
        assert len(cache.check(fix=True)) == len(messages)
        assert cache.check() == []
        assert tag_entries(cache) == ({("b", "k")}, 0)  # ("a" is the first tag: the column)
        cache.delete("k")  # the remade trigger works
        assert tag_entries(cache) == (set(), 0)


# --- recipes and awaitables ----------------------------------------------------------------------


def test_memoize_and_memoize_stampede_store_results_with_the_tags(make_cache):
    cache = make_cache()
    calls = []

    @cache.memoize(tags=["reports", "users"])
    def report(user):
        calls.append(user)
        return user.upper()

    @dc.memoize_stampede(cache, expire=60, tag="stampede", tags=["users"])
    def profile(user):
        calls.append(("profile", user))
        return {"user": user}

    assert report("ada") == "ADA" and report("ada") == "ADA"
    assert profile("ada") == {"user": "ada"} and profile("ada") == {"user": "ada"}
    assert len(calls) == 2
    assert cache.evict_tags(["users"]) == 2
    assert report("ada") == "ADA" and profile("ada") == {"user": "ada"}
    assert len(calls) == 4
    with pytest.raises(TypeError, match="tags"):
        cache.memoize(tags=[None])


def test_awaitable_twins_take_and_return_tags(make_cache):
    cache = make_cache()

    async def main():
        assert await cache.aset("k", 1, tags=["a", "b"]) is True
        assert await cache.aadd("k2", 2, tags=["b", "c"]) is True
        assert await cache.aget("k", tags=True) == (1, frozenset({"a", "b"}))
        return await cache.aevict_tags(["b"])

    assert asyncio.run(main()) == 2
    assert len(cache) == 0


def test_fanout_iterkeys_without_tag_lists_every_shards_keys(make_cache):
    cache = make_cache()
    for number in range(20):
        cache.set(number, number)
    assert sorted(cache.iterkeys()) == list(range(20))


# --- the property -------------------------------------------------------------------------------

_TAGS = st.sampled_from(["a", "b", "c", 1, 2.5, b"x"])
_KEYS = st.integers(0, 7)
_OPERATION = st.one_of(
    st.tuples(st.just("set"), _KEYS, st.one_of(st.none(), _TAGS), st.lists(_TAGS, max_size=4)),
    st.tuples(st.just("add"), _KEYS, st.one_of(st.none(), _TAGS), st.lists(_TAGS, max_size=4)),
    st.tuples(st.just("set_plain"), _KEYS),
    st.tuples(st.just("delete"), _KEYS),
    st.tuples(st.just("pop"), _KEYS),
    st.tuples(st.just("evict"), _TAGS),
    st.tuples(st.just("evict_tags"), st.lists(_TAGS, max_size=3)),
    st.tuples(st.just("touch"), _KEYS),
    st.tuples(st.just("clear")),
)


@pytest.mark.parametrize("kind", ["Cache", "FanoutCache"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=st.lists(_OPERATION, max_size=25))
def test_the_tag_index_equals_the_tags_of_the_stored_items(tmp_path_factory, kind, operations):
    directory = str(tmp_path_factory.mktemp("property"))
    cache = getattr(dc, kind)(directory, tag_index=True, memory_size_limit=1 << 20)
    model: dict = {}
    try:
        for operation in operations:
            name = operation[0]
            if name in ("set", "add"):
                _, key, tag, tags = operation
                if name == "add" and key in model:
                    assert cache.add(key, key, tag=tag, tags=tags) is False
                    continue
                assert getattr(cache, name)(key, key, tag=tag, tags=tags) is True
                model.pop(key, None)  # (a set keeps the position; re-added below if absent)
                model[key] = frozenset(([] if tag is None else [tag]) + tags)
            elif name == "set_plain":
                cache.set(operation[1], 0)
                model[operation[1]] = frozenset()
            elif name in ("delete", "pop"):
                getattr(cache, name)(operation[1])
                model.pop(operation[1], None)
            elif name == "evict":
                removed = [k for k, v in model.items() if operation[1] in v]
                assert cache.evict(operation[1]) == len(removed)
                for key in removed:
                    del model[key]
            elif name == "evict_tags":
                removed = [k for k, v in model.items() if v & set(operation[1])]
                assert cache.evict_tags(operation[1]) == len(removed)
                for key in removed:
                    del model[key]
            elif name == "touch":
                assert cache.touch(operation[1], 1000) is (operation[1] in model)
            else:
                cache.clear()
                model.clear()
        assert_exact(cache, model, ordered=False)
    finally:
        cache.close()


def test_a_directory_removed_while_open_is_followed_with_its_tag_table_gone(tmp_path):
    from diskcache_core._store.connections import RECHECK_INTERVAL
    import shutil
    import time

    directory = str(tmp_path / "c")
    cache = dc.Cache(directory)
    cache.set("old", BIG, tags=["a", "b"])
    assert list(cache.iterkeys(tag="b")) == ["old"]  # (the table is known to exist now)
    shutil.rmtree(directory)
    time.sleep(RECHECK_INTERVAL * 1.5)
    assert cache.set("plain", 1)  # the directory and an empty database made anew
    assert cache.get("old", tags=True) == (None, frozenset())
    assert list(cache.iterkeys(tag="b")) == []
    assert cache.evict("b") == 0 and cache.evict_tags(["b"]) == 0
    assert cache.set("new", BIG, tags=["b", "c"])  # the table made again, in that write
    assert cache.get("new", tags=True) == (BIG, frozenset({"b", "c"}))
    assert cache.check() == []
    cache.close()


def test_a_tagged_write_that_times_out_leaves_no_value_file(tmp_path):
    directory = str(tmp_path / "c")
    with dc.Cache(directory, timeout=0.05) as cache:
        cache.set("made", 0, tags=["x", "y"])
        holder = sqlite3.connect(os.path.join(directory, "cache.db"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        try:
            with pytest.raises(dc.Timeout):
                cache.set("k", BIG, tags=["a", "b"])
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert "k" not in cache
        assert glob.glob(os.path.join(directory, "**", "*.val"), recursive=True) == []
        assert cache.check() == []
