"""python-diskcache and diskcache_core on one cache directory (a rolling upgrade, a rollback):
each opens what the other wrote, reads every item back, and neither's counters go wrong."""

import os

import pytest

import diskcache_core as dc

diskcache = pytest.importorskip("diskcache")

ITEMS = {
    "text": "value",
    b"bytes": b"\x00\x01",
    3: 3.5,
    4.5: 12345678901234567890,
    ("tuple", 1): {"a": [1, 2]},
    "big": b"x" * 100_000,  # a value file
}


def _write(cache, prefix):
    for key, value in ITEMS.items():
        cache.set((prefix, key) if isinstance(key, tuple) else f"{prefix}{key!r}", value)


def _expected(prefix):
    return {
        ((prefix, key) if isinstance(key, tuple) else f"{prefix}{key!r}"): value
        for key, value in ITEMS.items()
    }


def _value_bytes(directory):
    total = 0
    for root, _, files in os.walk(directory):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".val"))
    return total


@pytest.mark.parametrize("library", ["diskcache", "diskcache_community"])
@pytest.mark.parametrize("first", ["peer", "ours"])
def test_both_libraries_share_a_directory_back_and_forth(tmp_path, first, library):
    # python-diskcache 5.6.3, and diskcache-community 5.8 (its fork, same format).
    peer_library = pytest.importorskip(library)
    directory = str(tmp_path / "cache")
    order = ["peer", "ours", "peer", "ours"] if first == "peer" else ["ours", "peer", "ours", "peer"]
    expected = {}
    for step, who in enumerate(order):
        if who == "peer":
            cache = peer_library.Cache(directory)
        else:
            cache = dc.Cache(directory, memory_size_limit=0)
        with cache:
            for key, value in expected.items():
                assert cache.get(key) == value, (who, step, key)
            _write(cache, f"{who}{step}-")
            expected.update(_expected(f"{who}{step}-"))
            cache.delete(f"{who}{step}-'text'")
            del expected[f"{who}{step}-'text'"]
            assert cache.volume() > 0
    with dc.Cache(directory) as ours:
        assert len(ours) == len(expected)
        assert ours.check() == []  # the stored byte total is exact: nothing counted twice
        assert ours.reset("size") == _value_bytes(directory)
        assert {key: ours[key] for key in expected} == expected
    with peer_library.Cache(directory) as peer:
        assert peer.check() == []
        assert peer.reset("size") == _value_bytes(directory)
        assert {key: peer[key] for key in expected} == expected
        assert len(peer) == len(expected)  # its count is kept (or made) right


def test_compression_settings_do_not_break_the_peer(tmp_path):
    directory = str(tmp_path / "cache")
    with dc.Cache(directory, disk_compress="zlib", disk_compress_threshold=10) as ours:
        ours.set("plain", 1)
    with diskcache.Cache(directory) as peer:  # refused unknown Disk options before
        assert peer.get("plain") == 1
        peer.set("from-peer", "text")
    with dc.Cache(directory) as ours:
        assert ours.disk_compress == "zlib" and ours.disk_compress_threshold == 10
        assert ours.reset("disk_compress") == "zlib"
        assert ours.get("from-peer") == "text"


def test_schema_1_rows_are_renamed(tmp_path):
    import sqlite3

    directory = str(tmp_path / "cache")
    with dc.Cache(directory, disk_compress="zlib") as ours:
        ours.set("k", "v")
    con = sqlite3.connect(os.path.join(directory, "cache.db"))
    with con:  # as schema 1 left it
        con.execute("DELETE FROM Settings WHERE key LIKE 'core_disk_%'")
        con.execute("INSERT INTO Settings VALUES ('disk_compress', 'zlib')")
        con.execute("UPDATE Settings SET value = 1 WHERE key = 'schema_version'")
    con.close()
    with dc.Cache(directory) as ours:
        assert ours.disk_compress == "zlib" and ours.get("k") == "v"
    with diskcache.Cache(directory) as peer:
        assert peer.get("k") == "v"


def test_a_jsondisk_compress_level_python_diskcache_stored_stays_shared(tmp_path):
    # JSONDisk's compress_level decides how keys are encoded: both libraries must keep reading
    # the one python-diskcache stored, after we open (migrate) the directory and after we
    # change it.
    directory = str(tmp_path / "cache")
    peer = diskcache.Cache(directory, disk=diskcache.JSONDisk, disk_compress_level=9)
    peer.set("k", "old")
    peer.close()
    ours = dc.Cache(directory, disk=dc.JSONDisk, memory_size_limit=0)
    assert ours.get("k") == "old"
    ours.close()
    peer = diskcache.Cache(directory, disk=diskcache.JSONDisk)  # the level from the directory
    assert peer.disk.compress_level == 9 and peer.get("k") == "old"
    peer.set("k", "new")
    assert len(peer) == 1
    peer.close()
    ours = dc.Cache(directory, disk=dc.JSONDisk, memory_size_limit=0)
    assert ours.get("k") == "new"
    ours.reset("disk_compress_level", 6)
    ours.close()
    peer = diskcache.Cache(directory, disk=diskcache.JSONDisk)
    assert peer.disk.compress_level == 6
    peer.close()
    ours = dc.Cache(directory, disk=dc.JSONDisk, memory_size_limit=0)
    assert ours.disk.compress_level == 6
    ours.close()


def test_a_jsondisk_compress_level_we_stored_is_read_by_python_diskcache(tmp_path):
    # A directory we create with a JSONDisk level: python-diskcache passes its plain
    # disk_compress_level row to its JSONDisk, so that row must be there too (else it encodes
    # keys at level 1, misses every key, and stores duplicates we then read wrongly).
    directory = str(tmp_path / "cache")
    ours = dc.Cache(directory, disk=dc.JSONDisk, disk_compress_level=3)
    ours.set("k", "first")
    ours.close()
    peer = diskcache.Cache(directory, disk=diskcache.JSONDisk)
    assert peer.disk.compress_level == 3 and peer.get("k") == "first"
    peer.set("k", "second")
    peer.close()
    ours = dc.Cache(directory, disk=dc.JSONDisk, memory_size_limit=0)
    assert (ours.get("k"), len(ours), list(ours)) == ("second", 1, ["k"])
    ours.reset("disk_compress_level", 6)
    ours.close()
    peer = diskcache.Cache(directory, disk=diskcache.JSONDisk)
    assert peer.disk.compress_level == 6  # (keys stored at level 3 are other keys now, as there)
    peer.close()


def test_our_disks_compression_level_is_not_passed_to_python_diskcaches_disk(tmp_path):
    directory = str(tmp_path / "cache")
    ours = dc.Cache(directory, disk_compress="zlib", disk_compress_level=3)
    ours.close()
    peer = diskcache.Cache(directory)  # its Disk takes no compress_level: it must open
    peer.set("k", 1)
    peer.close()


# --- many tags per item (issue 37, docs/tags.rst) -------------------------------------------------


def _our_tags(directory):
    """key -> the item's tags, as our cache reads them; and the dangling tag entries."""
    with dc.Cache(directory, memory_size_limit=0) as ours:
        found = {key: ours.get(key, tags=True)[1] for key in ours}
        assert ours.check() == []  # no tag entry names a missing item; counters exact
    return found


def test_python_diskcache_reads_and_writes_a_directory_with_many_tags(tmp_path):
    directory = str(tmp_path / "cache")
    with dc.Cache(directory, tag_index=True) as ours:
        for number in range(12):
            value = b"x" * 50_000 if number % 4 == 0 else number  # some in value files
            ours.set(f"k{number}", value, tags=[f"first{number % 3}", "extra", f"n{number}"])
    with diskcache.Cache(directory) as peer:
        assert peer.get("k1", tag=True) == (1, "first1")  # the first tag where it reads it
        assert peer.get("k4") == b"x" * 50_000
        peer.set("k1", "peer", tag="peer-tag")  # its set replaces the item's tags
        peer.set("k2", "peer")  # ... with none
        peer.touch("k3", 100)  # (keeps them)
        assert peer.incr("k5") == 6
        assert peer.delete("k6")
        assert peer.pop("k7") == 7
        assert peer.evict("first0") == 3  # k0 k3 k9 (k6 is gone): its own column tag
        peer.set("peer-new", 1, tag="extra")
        assert peer.check() == []
        assert len(peer) == 12 - 2 - 3 + 1
    found = _our_tags(directory)
    assert found["k1"] == frozenset({"peer-tag"})
    assert found["k2"] == frozenset()
    assert found["k5"] == frozenset({"first2", "extra", "n5"})
    assert found["peer-new"] == frozenset({"extra"})
    assert set(found) == {"k1", "k2", "k4", "k5", "k8", "k10", "k11", "peer-new"}
    with dc.Cache(directory) as ours:
        assert sorted(ours.iterkeys(tag="extra")) == ["k10", "k11", "k4", "k5", "k8", "peer-new"]
        assert ours.evict_tags(["extra"]) == 6
    with diskcache.Cache(directory) as peer:
        peer.cull()
        assert peer.clear() == 2
        assert peer.check() == []
    assert _our_tags(directory) == {}


def test_python_diskcache_set_keeping_the_first_tag_drops_our_extra_ones(tmp_path):
    directory = str(tmp_path / "cache")
    with dc.Cache(directory, memory_size_limit=0) as ours, diskcache.Cache(directory) as peer:
        ours.set("k", 1, tags=["a", "b", "c"])
        peer.set("k", 2, tag="a")  # its set, same first tag: the item's tags are {"a"} now
        assert ours.get("k", tags=True) == (2, frozenset({"a"}))
        ours.set("k", 3, tags=["a", "b", "c"])  # ours keeps the first tag: the extras come back
        assert ours.get("k", tags=True) == (3, frozenset({"a", "b", "c"}))
        peer.add("k", 4, tag="a")  # a live item: its add changes nothing
        assert ours.get("k", tags=True) == (3, frozenset({"a", "b", "c"}))
        assert ours.check() == [] and peer.check() == []
    assert _our_tags(directory) == {"k": frozenset({"a", "b", "c"})}


@pytest.mark.parametrize("first", ["peer", "ours"])
def test_a_rolling_upgrade_with_many_tags_works_both_ways(tmp_path, first):
    directory = str(tmp_path / "cache")
    order = ["peer", "ours", "peer", "ours"] if first == "peer" else ["ours", "peer", "ours", "peer"]
    expected = {}  # key -> tags, as our cache must read them at the end
    for step, who in enumerate(order):
        if who == "peer":
            with diskcache.Cache(directory) as peer:
                for key in expected:
                    assert peer.get(key) == key
                for number in range(5):
                    key = f"{who}{step}-{number}"
                    peer.set(key, key, tag=f"t{number % 2}")
                    expected[key] = frozenset({f"t{number % 2}"})
                overwritten = next((key for key, tags in expected.items() if len(tags) > 1), None)
                if overwritten is not None:  # a peer set over an item of ours with many tags
                    peer.set(overwritten, overwritten, tag="t0")
                    expected[overwritten] = frozenset({"t0"})
                assert peer.check() == []
        else:
            with dc.Cache(directory, memory_size_limit=0) as ours:
                for key, tags in expected.items():
                    assert ours.get(key, tags=True) == (key, tags)
                for number in range(5):
                    key = f"{who}{step}-{number}"
                    ours.set(key, key, tags=[f"t{number % 2}", "many", f"{who}{step}"])
                    expected[key] = frozenset({f"t{number % 2}", "many", f"{who}{step}"})
                assert ours.check() == []
    assert _our_tags(directory) == expected
    with dc.Cache(directory) as ours:
        many = {key for key, tags in expected.items() if "many" in tags}
        assert set(ours.iterkeys(tag="many")) == many
        assert ours.evict_tags(["many", "t1"]) == len(
            {key for key, tags in expected.items() if tags & {"many", "t1"}}
        )
    with diskcache.Cache(directory) as peer:
        assert peer.check() == []
        assert sorted(peer) == sorted(k for k, t in expected.items() if not t & {"many", "t1"})
