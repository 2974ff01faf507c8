"""A child forked while the parent had the cache open keeps seeing and making committed writes
after the parent closes it.

SQLite keeps per-process state of each open database (the locks it holds, its mapping of the WAL
index). A connection open at fork() leaves that state in the child, where new connections share
it and so take no locks of their own; when the parent then closed, SQLite removed the WAL and its
index under the child: the child read stale values and its writes were lost. Connections no
thread can be using are now closed just before a fork.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import diskcache_core as dc

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def _write_from_another_process(directory: Path, key: str, value: int) -> None:
    code = f"import diskcache_core as dc; c = dc.Cache({str(directory)!r}); c.set({key!r}, {value}); c.close()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


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
    _write_from_another_process(tmp_path, "k", 5)
    os.write(to_child_w, b"g")
    _, status = os.waitpid(pid, 0)
    for fd in (to_child_r, to_child_w, to_parent_r, to_parent_w):
        os.close(fd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the child read stale values"
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
