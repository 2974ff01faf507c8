"""close() closes every connection the Cache opened, in every thread, at once (issue 16, item 9)."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from pathlib import Path

import pytest

import diskcache_core as dc

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")


def _open_fds() -> int:
    """This process's open descriptors, counted when the library's background threads hold
    none for a moment: no checkpoint round in flight (its connection opens three), and no
    released file of an earlier test still being removed."""
    from diskcache_core._store import checkpointer as _checkpointer
    from diskcache_core._store import reaper as _reaper

    _reaper.drain()
    with _checkpointer._checkpointer.busy:
        return len(os.listdir("/proc/self/fd"))


def _use_in_threads(cache: dc.Cache, count: int) -> None:
    """Read and write from `count` threads, which have finished when this returns."""

    def work(n: int) -> None:
        cache.set(f"thread-{n}", n)
        assert cache.get(f"thread-{n}") == n

    threads = [threading.Thread(target=work, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _use_through_awaitables(cache: dc.Cache, count: int) -> None:
    """Read and write through the awaitable twins (the library's worker threads)."""

    async def work() -> None:
        await asyncio.gather(*(cache.aset(f"async-{n}", n) for n in range(count)))
        values = await asyncio.gather(*(cache.aget(f"async-{n}") for n in range(count)))
        assert values == list(range(count))

    asyncio.run(work())


def test_close_removes_the_wal_after_a_bulk_fill(tmp_path: Path) -> None:
    cache = dc.Cache(tmp_path, eviction_policy="least-recently-used")  # bookkeeping thread too
    with cache.transact():
        for n in range(2000):
            cache.set(n, b"v" * 2000)
    for n in range(0, 2000, 7):
        cache.get(n)
    _use_in_threads(cache, 3)
    _use_through_awaitables(cache, 20)
    cache.close()
    assert not (tmp_path / "cache.db-wal").exists()
    assert not (tmp_path / "cache.db-shm").exists()
    assert cache.get(1999) == b"v" * 2000  # a closed cache opens again on use
    cache.close()


def test_close_closes_the_connections_of_finished_threads_and_idle_workers(tmp_path: Path) -> None:
    gc.disable()  # close() itself must release them, not the garbage collector
    try:
        cache = dc.Cache(tmp_path)
        before = _open_fds()
        _use_in_threads(cache, 4)
        _use_through_awaitables(cache, 20)
        assert _open_fds() > before
        cache.close()
        assert _open_fds() <= before
        assert not (tmp_path / "cache.db-wal").exists()
        _use_through_awaitables(cache, 5)  # the workers open new connections on their next task
        cache.close()
        assert _open_fds() <= before
    finally:
        gc.enable()


def test_a_transaction_in_another_thread_survives_close(tmp_path: Path) -> None:
    cache = dc.Cache(tmp_path, timeout=1)  # close() waits this long to write bookkeeping
    inside = threading.Event()
    closed = threading.Event()
    errors: list[BaseException] = []

    def transaction() -> None:
        try:
            with cache.transact():
                cache.set("a", 1)
                inside.set()
                closed.wait(60)
                cache.set("b", 2)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=transaction)
    thread.start()
    assert inside.wait(60)
    cache.close()
    closed.set()
    thread.join()
    assert not errors, errors
    assert cache.get("a") == 1 and cache.get("b") == 2
    cache.close()


def test_open_close_cycles_hold_no_descriptors(tmp_path: Path) -> None:
    with dc.Cache(tmp_path) as cache:
        cache.set("k", 1)
    gc.collect()
    gc.disable()  # what close() releases must not wait for the garbage collector
    try:
        before = _open_fds()
        for n in range(100):
            cache = dc.Cache(tmp_path)
            cache.set("k", n)
            assert cache.get("k") == n
            cache.close()
        assert _open_fds() <= before + 2
    finally:
        gc.enable()


@pytest.mark.parametrize("kind", ["Cache", "FanoutCache", "Deque", "Index"])
def test_caches_dropped_without_close_release_their_descriptors(tmp_path: Path, kind) -> None:
    # Each connection's SQL functions hold its thread's state: a cycle the garbage collector
    # cannot see through sqlite3, so before, every dropped cache kept its files open for good
    # (62 caches exhausted a 256-descriptor limit).
    gc.collect()
    before = _open_fds()
    for n in range(30):
        if kind in ("Cache", "FanoutCache"):
            cache = getattr(dc, kind)(str(tmp_path / str(n)))
            cache.set("k", n)
            _use_in_threads(cache, 2)
            _use_through_awaitables(cache, 4)
            assert cache.get("k") == n
        elif kind == "Deque":
            cache = dc.Deque(range(n), directory=str(tmp_path / str(n)))
            assert list(cache) == list(range(n))
        else:
            cache = dc.Index({"k": n}, directory=str(tmp_path / str(n)))
            assert cache["k"] == n
        del cache
    for _ in range(600):  # a background thread may hold the last cache for a round, briefly
        gc.collect()
        if _open_fds() <= before + 2:
            break
        time.sleep(0.05)
    assert _open_fds() <= before + 2
    assert not list(tmp_path.rglob("*-wal"))  # the last connection's close trimmed each


def test_threads_go_on_after_another_thread_closes(tmp_path: Path) -> None:
    cache = dc.Cache(tmp_path)
    errors: list[BaseException] = []
    stop = threading.Event()

    def work() -> None:
        n = 0
        try:
            while not stop.is_set() and n < 20_000:
                cache.set("k", n)
                assert cache.get("k") == n
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    for _ in range(300):
        cache.close()
    stop.set()
    worker.join()
    cache.set("after", 1)
    assert cache.get("after") == 1
    assert not errors, errors
    cache.close()


def test_a_remover_thread_that_cannot_start_costs_no_write_and_no_hang(tmp_path, monkeypatch):
    import threading

    from diskcache_core._store import reaper as _reaper

    monkeypatch.setattr(_reaper, "_reaper", _reaper._Reaper())  # no remover thread yet
    start = threading.Thread.start

    def refused(self):
        if self.name == "diskcache_core-file-remover":
            raise RuntimeError("can't start new thread")  # CPython's error at a thread limit
        start(self)

    cache = dc.Cache(str(tmp_path))
    cache.set("big", b"x" * 100_000)
    monkeypatch.setattr(threading.Thread, "start", refused)
    assert cache.set("big", b"y" * 100_000) is True  # the old file is removed by the writer
    monkeypatch.setattr(threading.Thread, "start", start)
    assert cache.set("big", b"z" * 100_000) is True  # a remover starts this time
    cache.close()  # returns: it waits for a thread that runs
    assert cache.get("big") == b"z" * 100_000 and cache.check() == []


@pytest.mark.parametrize("kind", [dc.Cache, dc.FanoutCache])
def test_close_inside_this_threads_transaction_closes_when_it_ends(tmp_path: Path, kind) -> None:
    """close() called inside the calling thread's own transaction: the transaction stays whole
    (committed, or rolled back, as one) and its connection closes when it ends."""
    cache = kind(tmp_path)
    with cache.transact():
        cache.set("a", 1)
        cache.close()
        cache.set("b", 2)
    assert not list(tmp_path.rglob("*.db-wal"))  # the last connection closed as it ended
    with pytest.raises(KeyError):
        with cache.transact():
            cache.set("c", 3)
            cache.close()
            raise KeyError("c")
    cache.close()
    with kind(tmp_path) as again:
        assert (again.get("a"), again.get("b"), again.get("c")) == (1, 2, None)


def test_a_closed_cache_holds_one_descriptor_for_its_version_file(tmp_path: Path) -> None:
    # What a closed Cache keeps (until it is dropped) is the memory tier's mapping of
    # cache.db-versions, which the object may use again; it costs one descriptor, the mapping's
    # own, shared by every Cache of the directory in this process.
    gc.disable()
    try:
        before = _open_fds()
        kept = []
        for n in range(5):
            cache = dc.Cache(tmp_path / str(n))
            cache.set("key", n)
            assert cache.get("key") == n
            cache.close()
            kept.append(cache)
        assert _open_fds() - before == 5
        for _ in range(3):
            again = dc.Cache(tmp_path / "0")
            assert again.get("key") == 0
            again.close()
            kept.append(again)
        assert _open_fds() - before == 5
    finally:
        gc.enable()


def test_a_closed_cache_dropped_is_freed_at_once_with_its_version_file(tmp_path):
    # No reference cycle in a Cache's parts: dropped after close(), reference counting frees
    # it and closes its version file at once (a removed directory's space comes back then).
    import gc
    import weakref

    gc.disable()
    try:
        cache = dc.Cache(str(tmp_path / "c"))
        cache.set("k", b"v" * 10)
        cache.get("k")
        cache.close()
        parts = [weakref.ref(part) for part in (cache, cache._store, cache._store.pool, cache._evictor)]
        del cache
        assert [part() for part in parts] == [None] * len(parts)
        names = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                names.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass  # (the listing's own descriptor, closed since)
        assert not [name for name in names if name.startswith(str(tmp_path))]
    finally:
        gc.enable()
