"""A child forked while the parent had the cache open keeps seeing and making committed writes
after the parent closes it.

SQLite keeps per-process state of each open database (the locks it holds, its mapping of the WAL
index). A connection open at fork() leaves that state in the child, where new connections share
it and so take no locks of their own; when the parent then closed, SQLite removed the WAL and its
index under the child: the child read stale values and its writes were lost. Connections no
thread can be using are now closed just before a fork, and where another thread's connection
stays open (and is parked in the child) the child takes the locks SQLite's state claims.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import diskcache_core as dc

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def _write_from_another_process(directory: Path, key: str, value: int) -> None:
    code = f"import diskcache_core as dc; c = dc.Cache({str(directory)!r}); c.set({key!r}, {value}); c.close()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _let_the_child_finish(directory: Path, pid: int, to_child: int, fds: tuple[int, ...]) -> None:
    """Once the parent closed: another process writes k = 5, then the child goes on, and must
    exit 0 (it read what it should)."""
    _write_from_another_process(directory, "k", 5)
    os.write(to_child, b"g")
    _, status = os.waitpid(pid, 0)
    for fd in fds:
        os.close(fd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the child read stale values"


@pytest.mark.parametrize("memory", [True, False])
def test_child_sees_and_keeps_writes_after_the_parent_closes(tmp_path: Path, memory: bool) -> None:
    settings = {} if memory else {"memory_size_limit": 0}
    cache = dc.Cache(tmp_path, **settings)
    cache.set("k", 0)
    assert cache.get("k") == 0  # the parent's connection is open and idle at the fork
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it reads, and write once more
        status = 1
        try:
            fresh = dc.Cache(tmp_path, memory_size_limit=0)
            first = (cache.get("k"), fresh.get("k"))
            os.write(to_parent_w, b"r")
            os.read(to_child_r, 1)  # the parent closed and another process wrote 5
            second = (cache.get("k"), fresh.get("k"))
            fresh.set("from-child", 99)
            cache.close()
            fresh.close()
            status = 0 if first == (0, 0) and second == (5, 5) else 2
        finally:
            os._exit(status)
    os.read(to_parent_r, 1)
    cache.close()  # the parent's last connection: SQLite may checkpoint and remove the WAL
    fds = (to_child_r, to_child_w, to_parent_r, to_parent_w)
    _let_the_child_finish(tmp_path, pid, to_child_w, fds)
    with dc.Cache(tmp_path, memory_size_limit=0) as again:
        assert again.get("from-child") == 99  # the child's write was not lost
        assert again.get("k") == 5


def test_a_transaction_open_in_the_forking_thread_survives_the_fork(tmp_path: Path) -> None:
    cache = dc.Cache(tmp_path)
    with cache.transact():
        cache.set("a", 1)
        pid = os.fork()
        if pid == 0:
            os._exit(0)  # the child never touches the parent's transaction
        os.waitpid(pid, 0)
        cache.set("b", 2)
    assert cache.get("a") == 1 and cache.get("b") == 2
    cache.close()


def _count_from_another_process(directory: Path, prefix: str, count: int) -> int:
    code = (
        f"import diskcache_core as dc; c = dc.Cache({str(directory)!r}, memory_size_limit=0);"
        f" print(sum(c.get({prefix!r} + str(i)) == i for i in range({count})))"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                          capture_output=True, text=True)
    return int(done.stdout)


@pytest.mark.parametrize("opener", ["thread", "awaitable"])
def test_child_keeps_writes_when_another_thread_had_a_connection_open(
    tmp_path: Path, opener: str
) -> None:
    """Another live thread's connection (a worker thread's, or the pool behind the awaitable
    methods after one ``aset``) stays open across the fork and is parked in the child: the child's
    writes made after the parent's last close must still be committed to the cache."""
    cache = dc.Cache(tmp_path)
    cache.set("k", 0)
    release = threading.Event()
    used = threading.Event()

    def other_thread() -> None:
        cache.set("b", 1)  # opens this thread's connection; idle from now on
        used.set()
        release.wait(120)
        cache.close()  # the thread's own connection closes after the fork

    worker = None
    if opener == "thread":
        worker = threading.Thread(target=other_thread)
        worker.start()
        assert used.wait(120)
    else:
        asyncio.run(cache.aset("b", 1))  # the async pool's thread keeps its connection
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            early = cache.set("early", 1)  # the child's connection opens before the parent closes
            os.write(to_parent_w, b"r")
            os.read(to_child_r, 1)  # the parent has closed its every connection
            late = all(cache.set(f"late{i}", i) for i in range(20))
            seen = cache.get("k")
            cache.close()
            status = 0 if early and late and seen == 5 else 2
        finally:
            os._exit(status)
    os.read(to_parent_r, 1)
    release.set()
    if worker is not None:
        worker.join(120)
    cache.close()
    fds = (to_child_r, to_child_w, to_parent_r, to_parent_w)
    _let_the_child_finish(tmp_path, pid, to_child_w, fds)
    assert _count_from_another_process(tmp_path, "late", 20) == 20, "the child's writes were lost"
