"""Mapped files shrunk or replaced while a cache is open (invariant 3; docs/memory.rst, "Lost
coherence channels"): ``cache.db-versions`` truncated (``truncate``, ``cp`` onto it) or replaced
(``os.replace`` of a copy, ``rsync``), and a remote cache's ``cache.db-remote`` truncated.

Before, a process that had the file mapped died of SIGBUS at its next get (and the elected
listener with it), or its memory tier served the value the replaced file last validated for
ever. The process that maps the file is a child here (a SIGBUS kills it, not the test), driven
line by line through its standard input and output; every wait is bounded in count.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import diskcache_core as dc
from diskcache_core import DatabaseError

from redis_servers import needs_redis

VERSIONS = "cache.db-versions"
REMOTE = "cache.db-remote"
REMOTE_SIZE = 8 * (8 + 2**16)  # its header and stamps
WAIT_STEPS = 4000  # polls of 5 ms at most (20 s): for the child to notice the loss

# The child: opens the cache, keeps "k" in its memory tier, then obeys one command per line.
CHILD = r"""
import json, sys, time
import diskcache_core as dc

options = json.loads(sys.argv[2])
cache = dc.Cache(sys.argv[1], **options)
cache.set("k", "v1")
for _ in range(3):
    cache.get("k")

def answer(value):
    print(json.dumps(value), flush=True)

answer(cache.memory_stats().items)
for line in sys.stdin:
    command, _, argument = line.strip().partition(" ")
    if command == "dropped":  # wait until the memory tier forgot everything (the loss noticed)
        for _ in range(int(argument)):
            if cache.memory_stats().items == 0:
                break
            time.sleep(0.005)
        answer(cache.memory_stats().items)
    elif command == "get":
        answer(cache.get("k"))
    elif command == "until":  # read "k" until it is `argument` (bounded): how many reads
        for reads in range(1, 4001):
            if cache.get("k") == argument:
                break
            time.sleep(0.005)
        answer([reads, cache.get("k")])
    elif command == "hits":  # five gets of "k": how many the memory tier answered
        before = cache.memory_stats().hits
        values = [cache.get("k") for _ in range(5)]
        answer([values, cache.memory_stats().hits - before])
    elif command == "set":
        cache.set("k", argument)
        answer("ok")
    elif command == "transact":  # a transaction during which the version file is truncated
        try:
            with cache.transact():
                cache.set("t", 1)
                print(json.dumps("inside"), flush=True)
                sys.stdin.readline()  # the test truncates the file now
                cache.set("t", 2)
            answer("committed")
        except dc.DatabaseError as exc:
            answer("DatabaseError: " + str(exc))
    elif command == "read_t":
        answer(cache.get("t"))
    elif command == "quit":
        cache.close()
        answer("closed")
        break
"""


class Child:
    """A process using the cache at `directory`, whose death by a signal the test sees."""

    def __init__(self, directory: str, **options: object) -> None:
        import json

        self._json = json
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, directory, json.dumps(options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert self.read() == 1  # "k" is kept in its memory tier

    def read(self) -> object:
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        if not line:
            code = self.process.wait(60)
            raise AssertionError(f"the child died: exit status {code} ({_signal_name(code)})")
        return self._json.loads(line)

    def ask(self, command: str) -> object:
        try:
            self.process.stdin.write(command + "\n")  # type: ignore[union-attr]
            self.process.stdin.flush()  # type: ignore[union-attr]
        except BrokenPipeError:  # died before it was asked: say how
            code = self.process.wait(60)
            raise AssertionError(f"the child died: exit status {code} ({_signal_name(code)})")
        return self.read()

    def close(self) -> int:
        if self.process.poll() is None:
            try:
                assert self.ask("quit") == "closed"
            finally:
                self.process.stdin.close()  # type: ignore[union-attr]
        return self.process.wait(60)


def _signal_name(code: int) -> str:
    return signal.Signals(-code).name if code < 0 else "no signal"


@pytest.fixture
def child_of(tmp_path):
    children: list[Child] = []

    def start(directory: str, **options: object) -> Child:
        children.append(Child(directory, **options))
        return children[-1]

    yield start
    for child in children:
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait(60)


def test_a_truncated_version_file_kills_no_process_and_serves_nothing_stale(tmp_path, child_of):
    directory = str(tmp_path / "c")
    child = child_of(directory)
    os.truncate(os.path.join(directory, VERSIONS), 0)
    assert child.ask(f"dropped {WAIT_STEPS}") == 0  # its memory tier was dropped...
    assert child.ask("get") == "v1"  # ... and it lives on: the value from SQLite
    with dc.Cache(directory) as writer:  # another process writes
        writer.set("k", "v2")
    assert child.ask("get") == "v2"
    values, hits = child.ask("hits")
    assert values == ["v2"] * 5 and hits >= 4  # the memory tier answers again
    assert child.close() == 0
    assert os.path.getsize(os.path.join(directory, VERSIONS)) >= 64 + 16 * 8192


def test_a_write_after_a_truncation_finds_it_before_it_stores(tmp_path, child_of):
    # The write checks the file's size before its statement stores into the mapping.
    directory = str(tmp_path / "c")
    child = child_of(directory)
    os.truncate(os.path.join(directory, VERSIONS), 0)
    assert child.ask("set v3") == "ok"
    with dc.Cache(directory) as other:
        assert other.get("k") == "v3"
        other.get("k")
        other.set("k", "v4")
        assert child.ask("get") == "v4"
        assert child.ask("set v5") == "ok"
        assert [other.get("k") for _ in range(3)] == ["v5"] * 3
    assert child.close() == 0


def test_a_transaction_during_a_truncation_commits_and_is_seen(tmp_path, child_of):
    # Its next statement maps the file anew (it holds the write lock) and bumps again the
    # buckets the transaction had bumped in the lost file.
    directory = str(tmp_path / "c")
    child = child_of(directory)
    with dc.Cache(directory) as other:
        assert other.get("t") is None
        assert other.get("t") is None  # "absent" kept in its memory tier
        assert child.ask("transact") == "inside"
        os.truncate(os.path.join(directory, VERSIONS), 0)
        assert child.ask("") == "committed"
        assert child.ask("read_t") == 2
        assert [other.get("t") for _ in range(3)] == [2, 2, 2]
        assert child.ask("set v6") == "ok"
        assert other.get("k") == "v6"
    assert child.close() == 0


def test_a_replaced_version_file_is_followed(tmp_path, child_of):
    directory = str(tmp_path / "c")
    child = child_of(directory)
    path = os.path.join(directory, VERSIONS)
    shutil.copyfile(path, path + ".copy")
    os.replace(path + ".copy", path)  # a restore, or rsync, onto the live directory
    with dc.Cache(directory) as writer:  # a process that maps the new file
        writer.set("k", "v2")
        reads, value = child.ask("until v2")
        assert value == "v2"  # (before: "v1" for ever, from its memory tier)
        writer.get("k")
        writer.get("k")
        assert child.ask("set v3") == "ok"
        assert [writer.get("k") for _ in range(3)] == ["v3"] * 3
    values, hits = child.ask("hits")
    assert values == ["v3"] * 5 and hits >= 4
    assert child.close() == 0


def test_a_version_file_that_cannot_be_mapped_again_fails_writes_clearly(
    tmp_path, caplog, monkeypatch
):
    from diskcache_core import _log

    monkeypatch.setattr(_log, "_lost_files", _log.RateLimit())  # (not limited by earlier tests)
    caplog.set_level("WARNING", logger="diskcache_core.memory")
    directory = str(tmp_path / "c")
    cache = dc.Cache(directory)
    try:
        cache.set("k", 1)
        path = os.path.join(directory, VERSIONS)
        os.remove(path)
        os.mkdir(path)  # what is there now cannot be mapped
        for _ in range(WAIT_STEPS):  # the process notices (its _mapwatch thread)
            if cache.memory_stats().items == 0:
                break
            time.sleep(0.005)
        with pytest.raises(DatabaseError, match=VERSIONS):
            cache.set("k", 2)
        lost = [r for r in caplog.records if r.name == "diskcache_core.memory"]
        assert len(lost) == 1 and "shrunk or replaced" in lost[0].getMessage()  # said once
        assert cache.get("k") == 1  # reads go on, from SQLite
        assert cache.memory_stats().items == 0
        os.rmdir(path)
        cache.set("k", 3)  # mapped anew
        assert cache.get("k") == 3
    finally:
        cache.close()


# --- the remote's stamp file ---------------------------------------------------------------------


def _listener_of(pid: int) -> int | None:
    """The listener process that process `pid` runs (a child of it), if any."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                parent = int(file.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                command = file.read()
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if parent == pid and b"_remote.listenerprocess" in command:
            return int(entry)
    return None


def _hits_again(child: Child, value: str) -> bool:
    """Whether the child's memory tier answers gets again (a listener vouches for its copies)."""
    for _ in range(WAIT_STEPS // 4):
        values, hits = child.ask("hits")
        assert values == [value] * 5
        if hits:
            return True
        time.sleep(0.01)
    return False


def _alive(pid: int) -> bool:
    """Running (not a zombie left for its parent to reap)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
@needs_redis
def test_a_truncated_stamp_file_kills_neither_reader_nor_listener(tmp_path, options, child_of):
    directory = str(tmp_path / "hostB")
    child = child_of(directory, **options)
    assert _hits_again(child, "v1")  # its listener has started, and vouches for its copies
    listener = _listener_of(child.process.pid)
    assert listener is not None and _alive(listener)
    path = os.path.join(directory, REMOTE)
    os.truncate(path, 0)
    for _ in range(WAIT_STEPS):  # made whole again (by whichever process noticed first)
        if os.path.getsize(path) >= REMOTE_SIZE:
            break
        time.sleep(0.005)
    assert child.ask("get") == "v1"  # the child lives on
    with dc.Cache(str(tmp_path / "hostA"), **options) as writer:  # another host writes
        writer.set("k", "v2")
    reads, value = child.ask("until v2")
    assert value == "v2"
    assert _alive(listener)  # the listener lives on too (before: SIGBUS), and vouches again
    assert _hits_again(child, "v2")
    assert child.close() == 0
