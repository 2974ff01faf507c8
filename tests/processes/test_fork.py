"""Fork safety (Invariant 4): a connection opened before fork() is never used, or closed, by
the child; parent and child both keep working on the same cache."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import struct
import time

import pytest
from store_helpers import (
    fork_context_worker,
    item_rows,
    make_value,
    value_problem,
    warning_text,
)

import diskcache_core as dc

pytestmark = pytest.mark.skipif(not hasattr(os, 'fork'), reason='needs os.fork')

BIG = 300_000


def _fork(child) -> int:
    """Run `child()` in a forked process; return its exit status (0 when child() returned True)."""
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 70
        try:
            code = 0 if child() else 1
            gc.collect()
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 2
        finally:
            os._exit(code)
    return _wait(pid)


def _wait(pid: int, timeout: float = 60) -> int:
    """Exit status of child `pid`; kill it and fail if it runs longer than `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError('forked child hung')


def _busy_cache(directory, **settings):
    """A cache used in this process before forking: open connection, reads and writes done."""
    cache = dc.Cache(directory, **settings)
    cache.set('parent', 'parent-value')
    cache.set('parent-file', make_value(1, BIG))
    assert cache.get('parent') == 'parent-value'
    for number in range(20):
        cache.incr('counter')
        cache.get(number)
    return cache


def _fresh_view(directory):
    """What a new connection (opened after everything) sees."""
    with dc.Cache(directory) as fresh:
        return {key: fresh[key] for key in fresh}


@pytest.mark.parametrize(
    'settings',
    [
        pytest.param({}, id='default'),
        pytest.param({'eviction_policy': 'least-recently-used', 'statistics': True}, id='bookkeeping'),
    ],
)
def test_child_uses_cache_then_parent_continues(cache_dir, settings):
    cache = _busy_cache(cache_dir, **settings)
    try:

        def child():
            cache.set('child', 'child-value')
            cache.set('child-file', make_value(2, BIG))
            ok = cache.get('child') == 'child-value' and cache.get('parent') == 'parent-value'
            ok = ok and value_problem(cache['parent-file']) is None
            cache.incr('counter')
            return ok

        assert _fork(child) == 0
        assert cache.get('child') == 'child-value'
        assert value_problem(cache['child-file']) is None
        assert cache['counter'] == 21
        cache.set('after', 'parent-after-fork')
        cache.incr('counter')
        assert warning_text(cache.check()) == []
        view = _fresh_view(cache_dir)
        assert view['after'] == 'parent-after-fork'
        assert view['counter'] == 22
        assert view['child'] == 'child-value'
    finally:
        cache.close()


def test_child_dropping_inherited_cache_does_not_disturb_parent(cache_dir):
    holder = {'cache': _busy_cache(cache_dir)}
    try:

        def child():
            # The child's only reference goes: finalizers run in the child, and must leave the
            # parent's connection (and the WAL it relies on) intact.
            holder.clear()
            gc.collect()
            return True

        assert _fork(child) == 0
        cache = holder['cache']
        for number in range(50):
            cache.set(('after', number), number)
        cache.set('file-after', make_value(3, BIG))
        view = _fresh_view(cache_dir)
        assert all(view[('after', number)] == number for number in range(50))
        assert value_problem(view['file-after']) is None
        assert warning_text(cache.check()) == []
    finally:
        holder['cache'].close()


def test_child_closing_inherited_cache_does_not_disturb_parent(cache_dir):
    cache = _busy_cache(cache_dir)
    try:

        def child():
            cache.close()
            return True

        assert _fork(child) == 0
        cache.set('after', 1)
        with cache.transact():
            cache.set('in-transaction', 2)
        assert _fresh_view(cache_dir)['in-transaction'] == 2
        assert warning_text(cache.check()) == []
    finally:
        cache.close()


def test_fork_during_parent_transaction(cache_dir):
    """A child forked inside the parent's write transaction must not write through it.

    SQLite keeps lock state per process, so such a child may be unable to write at all; it must
    then time out rather than write early or disturb the parent. If it does write, the write
    lands after the parent's commit.
    """
    cache = _busy_cache(cache_dir, timeout=0.2)
    read_end, write_end = os.pipe()
    try:
        with cache.transact():
            cache.set('in-parent-transaction', 1)
            pid = os.fork()
            if pid == 0:
                code = 3
                try:
                    os.close(read_end)
                    wrote_at = 0.0
                    deadline = time.monotonic() + 3
                    while time.monotonic() < deadline:
                        try:
                            cache.set('child', 'child-value')
                        except dc.Timeout:
                            time.sleep(0.05)
                            continue
                        wrote_at = time.time()
                        break
                    os.write(write_end, struct.pack('d', wrote_at))
                    code = 0
                except BaseException:
                    import traceback

                    traceback.print_exc()
                finally:
                    os._exit(code)
            os.close(write_end)
            time.sleep(0.5)
            cache.set('also-in-parent-transaction', 2)
            committed_at = time.time()
        assert _wait(pid) == 0
        with os.fdopen(read_end, 'rb') as pipe:
            (child_wrote_at,) = struct.unpack('d', pipe.read(8))
        view = _fresh_view(cache_dir)
        if child_wrote_at:
            assert child_wrote_at >= committed_at - 0.05, 'the child wrote inside the parent transaction'
            assert view['child'] == 'child-value'
        else:
            assert 'child' not in view
        assert view['in-parent-transaction'] == 1 and view['also-in-parent-transaction'] == 2
        cache.set('after', 3)
        assert _fresh_view(cache_dir)['after'] == 3
        assert warning_text(cache.check()) == []
    finally:
        cache.close()


@pytest.mark.parametrize('outcome', ['commit', 'rollback'])
def test_a_child_leaving_the_parents_transaction_neither_commits_nor_rolls_it_back(cache_dir, outcome):
    """The child's copy of the transaction's context manager runs on when the child leaves the
    block; it must not COMMIT on the inherited connection (that published the parent's open
    writes, and a memory tier then kept one of them past the parent's next write), nor roll
    back (that removed value files the parent then committed). The child is told."""
    cache = _busy_cache(cache_dir)
    cache.set('k', 'old')
    reader = dc.Cache(cache_dir)  # another object, memory tier on: it must follow every commit
    assert reader.get('k') == 'old'

    class Undo(Exception):
        pass

    pid = -1
    try:
        with cache.transact():
            cache.set('k', 'A')
            cache.set('big', b'b' * BIG)  # a value file created inside the transaction
            pid = os.fork()
            if pid != 0:  # the parent; the child leaves the block at once
                assert _wait(pid) == 0
                assert _fresh_view(cache_dir)['k'] == 'old'
                for _ in range(3):
                    assert reader.get('k') == 'old'
                cache.set('k', 'B')
                if outcome == 'rollback':
                    raise Undo
    except dc.DatabaseError as exc:
        if pid == 0:
            os._exit(0 if 'forked inside a transaction' in str(exc) else 4)
        raise
    except Undo:
        pass
    finally:
        if pid == 0:
            os._exit(5)  # the child left the block untold
    expected = 'B' if outcome == 'commit' else 'old'
    assert _fresh_view(cache_dir)['k'] == expected
    for _ in range(3):
        assert reader.get('k') == expected
    assert reader.get('big') == (b'b' * BIG if outcome == 'commit' else None)
    assert warning_text(cache.check()) == []
    reader.close()
    cache.close()


def test_many_forks(cache_dir):
    cache = _busy_cache(cache_dir)
    try:
        for number in range(5):
            cache.set(('parent', number), number)
            assert _fork(lambda n=number: cache.set(('child', n), n) and cache[('parent', n)] == n) == 0
            assert cache[('child', number)] == number
        assert warning_text(cache.check()) == []
    finally:
        cache.close()


def test_multiprocessing_fork_context(cache_dir):
    cache = _busy_cache(cache_dir)
    try:
        context = multiprocessing.get_context('fork')
        processes = [
            context.Process(target=fork_context_worker, args=(cache, ('mp', index), 'value-%d' % index))
            for index in range(4)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        assert [process.exitcode for process in processes] == [0] * 4
        for index in range(4):
            assert cache[('mp', index)] == 'value-%d' % index
        cache.set('after', 1)
        assert warning_text(cache.check()) == []
    finally:
        cache.close()


def test_fork_with_pending_access_bookkeeping(cache_dir):
    """Unflushed LFU counts and statistics in the parent are counted once, not twice."""
    cache = dc.Cache(cache_dir, eviction_policy='least-frequently-used', statistics=True)
    try:
        cache.set('only', 1)
        for _ in range(5):
            cache.get('only')

        def child():
            cache.get('only')
            cache.close()
            return True

        assert _fork(child) == 0
        cache.close()
        with dc.Cache(cache_dir) as fresh:
            hits, misses = fresh.stats()
        assert (hits, misses) == (6, 0)
        assert item_rows(cache_dir, 'access_count') == [(6,)]
    finally:
        cache.close()


def test_a_child_forked_while_a_sub_collection_opens_can_open_one(tmp_path):
    fanout = dc.FanoutCache(str(tmp_path / "fanout"), shards=2)
    try:
        fanout._named._lock.acquire()  # as another thread holds it while it opens one
        try:
            pid = os.fork()
            if pid == 0:  # the child: its copy of the lock is held by no thread of its own
                code = 1
                try:
                    import signal

                    signal.alarm(60)  # a hang fails the test instead of stalling the suite
                    fanout.deque("jobs").append(1)
                    code = 0 if list(fanout.deque("jobs")) == [1] else 2
                finally:
                    os._exit(code)
        finally:
            fanout._named._lock.release()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        fanout.close()


def test_a_child_forked_while_a_worker_thread_marks_a_task_can_await_and_close(cache_dir):
    from diskcache_core._store import workers as _workers

    cache = dc.Cache(cache_dir)
    cache.set("x", 1)
    assert asyncio.run(cache.aget("x")) == 1  # the parent's worker pool runs

    def child() -> bool:
        value = asyncio.run(cache.aget("x"))
        cache.close()
        return value == 1

    with _workers.lock:  # as a worker thread holds it, starting or ending a task, at the fork
        assert _fork(child) == 0
    cache.close()


def _overwrite_files_without_closing(directory: str) -> None:
    cache = dc.Cache(directory)
    for number in range(30):
        cache.set(number, os.urandom(40_000))
    for number in range(30):
        cache.set(number, os.urandom(40_000))  # releases the first value file of each
    for number in range(15):
        cache.delete(number)
    # No close(): multiprocessing ends the child with os._exit, which runs no atexit handler.


def test_a_multiprocessing_child_removes_the_files_it_released_before_it_exits(tmp_path):
    import multiprocessing

    directory = str(tmp_path / "cache")
    dc.Cache(directory).close()
    child = multiprocessing.get_context("fork").Process(
        target=_overwrite_files_without_closing, args=(directory,)
    )
    child.start()
    child.join(120)
    assert child.exitcode == 0
    cache = dc.Cache(directory)
    assert len(cache) == 15
    value_files = [name for _, _, names in os.walk(directory) for name in names
                   if name.endswith(".val")]
    assert len(value_files) == 15
    assert cache.check() == []
    cache.close()
