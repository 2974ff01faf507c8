"""The lock handoff (diskcache_core/_store/handoff.py): a writer waiting for the write lock is woken
when the holder releases it; a holder that dies or never wakes anybody costs a poll, never a
waiter blocked past its timeout; without the handoff SQLite's busy handler waits as before."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading

import pytest
from store_helpers import wait_until

import diskcache_core as dc
from diskcache_core._store import handoff as _handoff

SPAWN = multiprocessing.get_context("spawn")

pytestmark = pytest.mark.skipif(
    _handoff.lock_handoff(memoryview(bytearray(64)).cast("Q")) is None,
    reason="this platform has no futex: SQLite's busy handler waits (tested below)",
)


def _hold_lock(directory: str, held, release) -> None:
    """Take the write lock (an open transaction) until `release` is set."""
    cache = dc.Cache(directory)
    with cache.transact():
        cache.set("holder", 1)
        held.set()
        release.wait(120)
    cache.close()


def _hold_lock_forever(directory: str, held) -> None:
    cache = dc.Cache(directory)
    with cache.transact():
        cache.set("holder", 1)
        held.set()
        threading.Event().wait(600)  # killed by the test


def _incr_many(directory: str, count: int, start) -> None:
    cache = dc.Cache(directory)
    start.wait(60)
    for _ in range(count):
        cache.incr("total")
        with cache.transact():  # a transaction's BEGIN waits through the handoff too
            cache.incr("in-transactions")
    cache.close()


def _set_in_thread(cache, key, value, outcome: dict) -> threading.Thread:
    def run() -> None:
        try:
            outcome["result"] = cache.set(key, value)
        except BaseException as exc:  # reported by the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)  # a broken wake-up must not hang exit
    thread.start()
    return thread


def _waiting(cache) -> bool:
    return bool(cache._store.handoff.words[_handoff.WAITING_WORD])


def test_a_waiting_writer_is_woken_by_the_release(tmp_path, monkeypatch):
    # No polling and a long timeout: only the holder's wake-up ends the wait in time.
    monkeypatch.setattr(_handoff, "POLL_LIMIT", 600.0)
    directory = str(tmp_path)
    cache = dc.Cache(directory, timeout=600)
    assert cache._store.handoff is not None and cache._store.pool.busy_wait == 0
    held, release = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=_hold_lock, args=(directory, held, release))
    holder.start()
    try:
        assert held.wait(60)
        counter = cache._store.handoff.words[_handoff.COUNTER_WORD]
        outcome: dict = {}
        waiter = _set_in_thread(cache, "waiter", 2, outcome)
        assert wait_until(lambda: _waiting(cache), timeout=60)
        release.set()
        waiter.join(60)
        assert not waiter.is_alive(), "the release did not wake the waiting writer"
        assert outcome == {"result": True}, outcome
        assert cache._store.handoff.words[_handoff.COUNTER_WORD] != counter  # it was woken
        assert cache.get("waiter") == 2 and cache.get("holder") == 1
    finally:
        release.set()
        holder.join(60)
    assert holder.exitcode == 0


def test_a_holder_in_another_thread_wakes_the_waiter(tmp_path, monkeypatch):
    monkeypatch.setattr(_handoff, "POLL_LIMIT", 600.0)
    cache = dc.Cache(str(tmp_path), timeout=600)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with cache.transact():
            cache.set("holder", 1)
            held.set()
            release.wait(120)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(60)
    outcome: dict = {}
    waiter = _set_in_thread(cache, "waiter", 2, outcome)
    assert wait_until(lambda: _waiting(cache), timeout=60)
    release.set()
    holder.join(60)
    waiter.join(60)
    assert not waiter.is_alive(), "the release did not wake the waiting writer"
    assert outcome == {"result": True}, outcome
    assert cache.get("waiter") == 2


def test_a_killed_holder_costs_a_poll_not_the_timeout(tmp_path):
    directory = str(tmp_path)
    cache = dc.Cache(directory, timeout=60)
    held = SPAWN.Event()
    holder = SPAWN.Process(target=_hold_lock_forever, args=(directory, held))
    holder.start()
    try:
        assert held.wait(60)
        outcome: dict = {}
        waiter = _set_in_thread(cache, "waiter", 2, outcome)
        assert wait_until(lambda: _waiting(cache), timeout=60)
        os.kill(holder.pid, signal.SIGKILL)  # SQLite's lock dies with it; nobody wakes the waiter
        waiter.join(120)
        assert outcome == {"result": True}, outcome
    finally:
        if holder.is_alive():
            os.kill(holder.pid, signal.SIGKILL)
        holder.join(60)
    assert cache.get("waiter") == 2
    assert cache.get("holder") is None  # the killed transaction never committed


def test_a_waiter_gives_up_at_its_timeout(tmp_path):
    directory = str(tmp_path)
    cache = dc.Cache(directory, timeout=0.05)
    fanout = dc.FanoutCache(str(tmp_path / "fanout"), shards=1, timeout=0.05)
    held, release = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=_hold_lock, args=(directory, held, release))
    fanout_held, fanout_release = SPAWN.Event(), SPAWN.Event()
    fanout_holder = SPAWN.Process(
        target=_hold_lock, args=(str(tmp_path / "fanout" / "000"), fanout_held, fanout_release)
    )
    holder.start()
    fanout_holder.start()
    try:
        assert held.wait(60) and fanout_held.wait(60)
        with pytest.raises(dc.Timeout):
            cache.set("late", 1)
        with pytest.raises(dc.Timeout):
            with cache.transact():
                pass
        assert fanout.set("late", 1) is False  # reported as a give-up, not raised
    finally:
        release.set()
        fanout_release.set()
        holder.join(60)
        fanout_holder.join(60)
    assert cache.set("late", 1) is True and cache.get("late") == 1
    assert fanout.set("late", 1) is True and fanout.get("late") == 1


def test_contending_processes_lose_no_write(tmp_path):
    directory = str(tmp_path)
    dc.Cache(directory).close()
    start = SPAWN.Event()
    workers = [SPAWN.Process(target=_incr_many, args=(directory, 150, start)) for _ in range(4)]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(300)
    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
    cache = dc.Cache(directory)
    assert cache.get("total") == 600 and cache.get("in-transactions") == 600


def test_without_the_handoff_the_busy_handler_waits(tmp_path, monkeypatch):
    monkeypatch.setenv("DISKCACHE_CORE_NO_HANDOFF", "1")
    directory = str(tmp_path)
    cache = dc.Cache(directory, timeout=60)
    assert cache._store.handoff is None and cache._store.pool.busy_wait == 60
    held, release = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=_hold_lock, args=(directory, held, release))
    holder.start()
    try:
        assert held.wait(60)
        outcome: dict = {}
        waiter = _set_in_thread(cache, "waiter", 2, outcome)
        release.set()
        waiter.join(120)
        assert outcome == {"result": True}, outcome
    finally:
        release.set()
        holder.join(60)
    # A shorter wait for one transaction (the access-log flusher's) is undone after it.
    with cache._store.transaction(timeout=0.1):
        pass
    assert cache._store.read("PRAGMA busy_timeout") == [(60000,)]


def test_a_journal_mode_other_than_wal_keeps_the_busy_handler(tmp_path):
    cache = dc.Cache(str(tmp_path), sqlite_journal_mode="delete")
    assert cache._store.handoff is None
    assert cache.set("k", 1) and cache.get("k") == 1
