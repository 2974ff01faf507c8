"""Invariant 5: an existing cache opens and reads on read-only media, and writes fail clearly."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

import diskcache_core as dc


def _mount_read_only(source: Path, target: Path) -> bool:
    """Bind-mount `source` read-only at `target`; False where this machine does not allow it."""
    if os.geteuid() != 0:
        return False
    target.mkdir()
    try:
        subprocess.run(["mount", "--bind", str(source), str(target)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    try:
        subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(target)], check=True, capture_output=True
        )
    except subprocess.CalledProcessError:
        subprocess.run(["umount", str(target)], check=False)
        return False
    return True


@pytest.fixture
def read_only_cache_dir(tmp_path: Path) -> Iterator[Path]:
    source = tmp_path / "cache"
    with dc.Cache(source, size_limit=2**24) as cache:
        cache.set("small", 1)
        cache.set("big", b"x" * 100_000)
        cache.set("text", "hello", tag="greeting")
    target = tmp_path / "mounted"
    if not _mount_read_only(source, target):
        pytest.skip("read-only bind mounts need root and mount permission")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)


def test_reads_work_on_read_only_media(read_only_cache_dir: Path) -> None:
    cache = dc.Cache(read_only_cache_dir)
    assert cache.get("small") == 1
    assert cache.get("big") == b"x" * 100_000
    assert cache.get("text", tag=True) == ("hello", "greeting")
    assert "small" in cache and "missing" not in cache
    assert len(cache) == 3
    assert sorted(cache) == ["big", "small", "text"]
    assert cache.size_limit == 2**24
    cache.close()


def test_writes_on_read_only_media_raise(read_only_cache_dir: Path) -> None:
    cache = dc.Cache(read_only_cache_dir)
    with pytest.raises(dc.ReadOnlyError, match="is read-only"):
        cache.set("new", 1)
    assert "new" not in cache
    cache.close()


def test_changing_settings_on_read_only_media_raises(read_only_cache_dir: Path) -> None:
    with pytest.raises(dc.DatabaseError, match="read-only.*size_limit"):
        dc.Cache(read_only_cache_dir, size_limit=5)


def _snapshot(directory):
    import hashlib

    found = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, directory)] = hashlib.sha256(handle.read()).hexdigest()
    return found


@pytest.mark.parametrize("maker", ["ours", "python-diskcache"])
def test_read_only_option_changes_no_byte(tmp_path, maker):
    directory = str(tmp_path / "cache")
    if maker == "ours":
        with dc.Cache(directory) as writer:
            writer.set("key", "value")
            writer.set("big", b"x" * 100_000)
    else:
        diskcache = pytest.importorskip("diskcache")
        with diskcache.Cache(directory) as writer:
            writer.set("key", "value")
            writer.set("big", b"x" * 100_000)
    before = _snapshot(directory)
    with dc.Cache(directory, read_only=True) as reader:
        assert reader.get("key") == "value" and reader["big"] == b"x" * 100_000
        assert len(reader) == 2 and sorted(reader) == ["big", "key"]
        assert reader.check() == []
        with pytest.raises(dc.DatabaseError):
            reader.set("key", "other")
    assert _snapshot(directory) == before  # same files, same bytes


def test_read_only_option_sees_a_live_writer(tmp_path):
    directory = str(tmp_path / "cache")
    with dc.Cache(directory) as writer:
        writer.set("key", 1)
        reader = dc.Cache(directory, read_only=True)
        assert reader.get("key") == 1
        writer.set("key", 2)
        assert reader.get("key") == 2
        reader.close()


def test_read_only_option_needs_an_existing_cache(tmp_path):
    with pytest.raises(dc.DatabaseError):
        dc.Cache(str(tmp_path / "none"), read_only=True)


@pytest.mark.parametrize("name", ["what?", "hash#tag", "per%20cent", "both?x=1#y"])
def test_read_only_opens_a_directory_whose_name_means_something_in_a_uri(tmp_path, name):
    # Read-only connections use SQLite URIs: an unquoted "?" or "#" would cut the path short (and
    # open another file, or none), "%20" would name another directory.
    directory = str(tmp_path / name / "cache")
    with dc.Cache(directory) as writer:
        writer.set("key", name)
        with dc.Cache(directory, read_only=True) as live:  # a writer has it open: WAL index
            assert live.get("key") == name
    with dc.Cache(directory, read_only=True) as closed:  # no writer: read as immutable
        assert closed.get("key") == name
        assert list(closed) == ["key"]


def _generation_value(generation: int, key: int) -> bytes:
    return (f"{generation}:{key}:".encode() * 5000)[:30000]  # inline, over several pages


def _rewrite_generations(directory: str, generations: int) -> None:
    cache = dc.Cache(directory, memory_size_limit=0)
    for generation in range(1, generations + 1):
        for key in range(20):
            cache.set(key, _generation_value(generation, key))
    cache.close()


@pytest.mark.parametrize("journal_mode", ["delete", "truncate", "wal"])
def test_a_read_only_reader_never_sees_a_torn_value(tmp_path, journal_mode):
    # A reader that may not write reads values another process keeps rewriting in place: in a
    # rollback-journal mode there is never a WAL index to follow, and a read of the file as
    # immutable (no locks) mixed pages of two commits.
    import multiprocessing
    import warnings

    directory = str(tmp_path / "cache")
    with dc.Cache(directory, sqlite_journal_mode=journal_mode, memory_size_limit=0) as cache:
        for key in range(20):
            cache.set(key, _generation_value(0, key))
    writer = multiprocessing.get_context("fork").Process(
        target=_rewrite_generations, args=(directory, 400)
    )
    writer.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dc.ReadOnlyCacheWarning)
        reader = dc.Cache(directory, read_only=True)
    bad, reads = [], 0
    try:
        while (writer.is_alive() or reads == 0) and reads < 200_000:
            for key in range(0, 20, 3):
                value = reader.get(key)
                reads += 1
                generation = int(value.split(b":")[0])
                if value != _generation_value(generation, key):
                    bad.append((key, generation))
    finally:
        writer.join(120)
        reader.close()
    assert writer.exitcode == 0
    assert bad == []


def _die_inside_a_write(path: str) -> None:
    # A writer killed mid-transaction in a rollback-journal mode leaves a hot journal.
    # A page cache too small for the transaction spills: the journal is synced (hot once its
    # writer dies) and pages of the database file are overwritten before any commit.
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA cache_size=10")
    con.execute("BEGIN IMMEDIATE")
    for number in range(300):
        con.execute(
            "INSERT INTO Cache(key, raw, store_time, access_time, access_count, size, mode, value)"
            " VALUES (?, 1, 0, 0, 0, 0, 1, ?)", (f"spill-{number}", b"x" * 4000),
        )
    con.execute("UPDATE Cache SET value = ? WHERE key = 'key'", (b"torn" * 1000,))
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_read_only_reader_waits_for_a_hot_journal_to_be_rolled_back(tmp_path):
    # SQLite tells a reader that may not write SQLITE_READONLY_ROLLBACK when it takes a journal
    # for hot; a live writer's journal can look so for a moment (seen under load in CI), so the
    # read waits for it as for a lock: here until a process that can write rolls it back.
    import multiprocessing
    import threading
    import warnings

    directory = str(tmp_path / "cache")
    with dc.Cache(directory, sqlite_journal_mode="delete", memory_size_limit=0) as cache:
        cache.set("key", b"committed")
    path = os.path.join(directory, "cache.db")
    child = multiprocessing.get_context("fork").Process(target=_die_inside_a_write, args=(path,))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    assert os.path.exists(path + "-journal")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dc.ReadOnlyCacheWarning)
        brief = dc.Cache(directory, read_only=True, timeout=0.05)
        patient = dc.Cache(directory, read_only=True, timeout=120)
    with pytest.raises(dc.DatabaseError):
        brief.get("key")  # nobody rolls it back within its timeout: the error, as before
    got = []
    reader = threading.Thread(target=lambda: got.append(patient.get("key")))
    reader.start()
    reader.join(0.3)  # (lets the read start first: no bound is asserted)
    with dc.Cache(directory, memory_size_limit=0) as writer:  # may write: rolls it back
        assert writer.get("key") == b"committed"
    reader.join(120)
    assert got == [b"committed"]
    brief.close()
    patient.close()


@pytest.mark.parametrize('planted', ['link', 'directory'])
def test_an_index_with_an_unusable_wal_is_a_clear_error_not_a_recursion(tmp_path, planted):
    # With -shm there and -wal not openable, reading with the index failed, reading without it
    # saw the index and went back to it: RecursionError, after ~1000 tries.
    directory = tmp_path / 'c'
    with dc.Cache(str(directory)) as cache:
        cache.set('k', 1)
    wal = directory / 'cache.db-wal'
    if planted == 'link':
        wal.symlink_to(tmp_path / 'elsewhere')
    else:
        wal.mkdir()
    (directory / 'cache.db-shm').touch()
    reader = dc.Cache(str(directory), read_only=True)
    with pytest.raises(dc.DatabaseError, match='WAL index is there'):
        reader.get('k')
    reader.close()


def test_writes_to_a_read_only_cache_say_it_is_read_only(tmp_path: Path) -> None:
    directory = str(tmp_path / "c")
    with dc.Cache(directory) as writer:
        writer.set("n", 1)
    cache = dc.Cache(directory, read_only=True)
    calls = {
        "incr": lambda: cache.incr("n"),
        "decr": lambda: cache.decr("n"),
        "pop": lambda: cache.pop("n"),
        "push": lambda: cache.push(1),
        "transact": lambda: cache.transact().__enter__(),
    }
    for name, call in calls.items():
        with pytest.raises(dc.DatabaseError, match="read-?only"):
            call()
    assert cache.get("n") == 1
    cache.close()


def test_read_only_opens_make_and_write_nothing(tmp_path: Path) -> None:
    # read_only=True changes nothing in the directory: not a -wal or -shm of shard 0 (read for
    # the layout), not a layout file written again, not a directory for a mistyped path.
    import diskcache

    def files(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*")}

    peer_dir = tmp_path / "peer"
    peer = diskcache.FanoutCache(str(peer_dir), shards=2)
    peer.set("a", 1)
    peer.close()
    ours_dir = tmp_path / "ours"
    with dc.FanoutCache(str(ours_dir), shards=2) as ours:
        ours.set("a", 1)
    (ours_dir / "fanout.json").unlink()
    for directory in (peer_dir, ours_dir):
        before = files(directory)
        with dc.FanoutCache(str(directory), shards=2, read_only=True) as cache:
            assert cache.get("a") == 1
        assert files(directory) == before
    for opener in (dc.Cache, dc.FanoutCache):
        with pytest.raises(dc.DatabaseError, match="read-only"):
            opener(str(tmp_path / "typo"), read_only=True)
    assert not (tmp_path / "typo").exists()


def _fill(cache: Any) -> None:
    cache.set("n", 1)
    cache.set("k", "v", tag="t", expire=1000)
    if isinstance(cache, dc.Cache):
        cache.push(1, prefix="q")
        dc.Deque.fromcache(cache).append(1)
    else:
        cache.deque("d").append(1)
        cache.index("i")["a"] = 1
        cache.cache("c").set("a", 1)


def _run(call: Any) -> Any:
    import asyncio

    result = call()
    if asyncio.iscoroutine(result):
        return asyncio.run(result)
    return result


# Every write of the public API, on a Cache and a FanoutCache: (name, kinds, call).
_WRITES: list[tuple[str, tuple[str, ...], Any]] = [
    ("set", ("cache", "fanout"), lambda c: c.set("a", 1)),
    ("setitem", ("cache", "fanout"), lambda c: c.__setitem__("a", 1)),
    ("add", ("cache", "fanout"), lambda c: c.add("a", 1)),
    ("delete", ("cache", "fanout"), lambda c: c.delete("n")),
    ("delitem", ("cache", "fanout"), lambda c: c.__delitem__("n")),
    ("pop", ("cache", "fanout"), lambda c: c.pop("n")),
    ("clear", ("cache", "fanout"), lambda c: c.clear()),
    ("expire", ("cache", "fanout"), lambda c: c.expire(now=1e12)),
    ("evict", ("cache", "fanout"), lambda c: c.evict("t")),
    ("cull", ("cache", "fanout"), lambda c: c.cull()),
    ("touch", ("cache", "fanout"), lambda c: c.touch("n", expire=5)),
    ("incr", ("cache", "fanout"), lambda c: c.incr("n")),
    ("decr", ("cache", "fanout"), lambda c: c.decr("n")),
    ("transact", ("cache", "fanout"), lambda c: c.transact().__enter__()),
    ("reset", ("cache", "fanout"), lambda c: c.reset("cull_limit", 5)),
    ("memoize", ("cache", "fanout"), lambda c: c.memoize()(lambda x: x)(3)),
    ("aset", ("cache", "fanout"), lambda c: c.aset("a", 1)),
    ("adelete", ("cache", "fanout"), lambda c: c.adelete("n")),
    ("aincr", ("cache", "fanout"), lambda c: c.aincr("n")),
    ("lock", ("cache", "fanout"), lambda c: dc.Lock(c, "l").acquire()),
    ("rlock", ("cache", "fanout"), lambda c: dc.RLock(c, "l").acquire()),
    ("semaphore", ("cache", "fanout"), lambda c: dc.BoundedSemaphore(c, "s").acquire()),
    ("averager", ("cache", "fanout"), lambda c: dc.Averager(c, "a").add(1)),
    ("push", ("cache",), lambda c: c.push(1)),
    ("pull", ("cache",), lambda c: c.pull(prefix="q")),
    ("deque append", ("cache",), lambda c: dc.Deque.fromcache(c).append(2)),
    ("deque popleft", ("cache",), lambda c: dc.Deque.fromcache(c).popleft()),
    ("deque clear", ("cache",), lambda c: dc.Deque.fromcache(c).clear()),
    ("index setitem", ("cache",), lambda c: dc.Index.fromcache(c).__setitem__("b", 1)),
    ("index pop", ("cache",), lambda c: dc.Index.fromcache(c).pop("n")),
    ("named deque", ("fanout",), lambda c: c.deque("d").append(2)),
    ("named index", ("fanout",), lambda c: c.index("i").__setitem__("b", 2)),
    ("named cache", ("fanout",), lambda c: c.cache("c").set("b", 2)),
    ("new named deque", ("fanout",), lambda c: c.deque("new").append(2)),  # (none made)
]


@pytest.mark.filterwarnings("ignore::diskcache_core.ReadOnlyCacheWarning")
@pytest.mark.parametrize("opened", ["read_only=True", "read-only mount"])
@pytest.mark.parametrize(
    "kind,name,call",
    [(kind, name, call) for name, kinds, call in _WRITES for kind in kinds],
    ids=[f"{kind}-{name}" for name, kinds, _ in _WRITES for kind in kinds],
)
def test_every_write_to_a_read_only_cache_raises_read_only_error(
    tmp_path: Path, opened: str, kind: str, name: str, call: Any
) -> None:
    # Some writes raised SQLite's "attempt to write a readonly database", others the library's
    # own words; a read-only FanoutCache's named collections were opened writable (and made).
    opener = dc.Cache if kind == "cache" else dc.FanoutCache
    source = tmp_path / "cache"
    with opener(str(source)) as writer:
        _fill(writer)
    directory = source
    if opened == "read-only mount":
        directory = tmp_path / "mounted"
        if not _mount_read_only(source, directory):
            pytest.skip("read-only bind mounts need root and mount permission")
    before = _snapshot(source)
    try:
        cache = opener(str(directory), read_only=opened == "read_only=True")
        try:
            assert cache.read_only
            with pytest.raises(dc.ReadOnlyError, match=r"'[^']+'.* read-only"):
                _run(lambda: call(cache))
            assert cache.get("n") == 1
        finally:
            cache.close()
    finally:
        if opened == "read-only mount":
            subprocess.run(["umount", str(directory)], check=False)
    assert _snapshot(source) == before
