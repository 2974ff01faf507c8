"""A full disk raises a clear error, never kills the process; reads go on; nothing acknowledged is
lost once space is freed (issue 16, item 1).

Each test mounts a small tmpfs of its own (root only), fills it, and runs the cache in a child
process, so that a SIGBUS would show as the child's death instead of the test run's.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

import diskcache_core as dc

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0, reason="mounts a tmpfs: Linux and root only"
)


class SmallDisk:
    """A tmpfs mounted for one test, which `fill` fills to the last byte."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for chunk in (65536, 4096, 512, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    root = tmp_path / "disk"
    root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(root)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield SmallDisk(root)
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


_CHILD_PRELUDE = """
import errno, os
import diskcache_core as dc

def fill(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for chunk in (65536, 4096, 512, 1):
        try:
            while True:
                os.write(fd, bytes(chunk))
        except OSError:
            pass
    os.close(fd)
"""


def run_child(code: str) -> str:
    """Run `code` in a new interpreter; its stdout, failing the test if it died of a signal."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD_PRELUDE + textwrap.dedent(code)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode >= 0, (
        f"child killed by {signal.Signals(-done.returncode).name}: {done.stderr[-2000:]}"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_writes_on_a_full_disk_raise_and_reads_go_on(small_disk: SmallDisk) -> None:
    cache_dir = small_disk.root / "cache"
    holder = dc.Cache(cache_dir)  # keeps the WAL and its index open, as a busy site would
    holder.set("kept", 1)
    holder.set("big-kept", b"k" * 50_000)
    small_disk.fill()
    out = run_child(f"""
        cache = dc.Cache({str(cache_dir)!r})
        print("get", cache.get("kept"), len(cache.get("big-kept")))
        for name, value in (("small", 2), ("big", b"x" * 200_000)):
            try:
                cache.set(name, value)
            except OSError as exc:  # the library's DiskFullError is an OSError
                print("raised", name, type(exc).__name__, exc.errno == errno.ENOSPC, "space" in str(exc))
            else:
                print("stored", name)
        print("get", cache.get("kept"), len(cache.get("big-kept")))
    """)
    lines = out.splitlines()
    assert lines[0] == lines[-1] == "get 1 50000"
    for line in lines[1:-1]:
        # a write may still fit in space SQLite holds already; one that does not raises clearly
        assert line.startswith("stored") or line.endswith("DiskFullError True True"), out
    assert any(line.startswith("raised big") for line in lines), out
    small_disk.free()
    holder.close()
    with dc.Cache(cache_dir) as cache:
        assert cache.get("kept") == 1 and cache.get("big-kept") == b"k" * 50_000
        cache.set("after", 3)
        assert cache.get("after") == 3
        assert cache.check() == []  # no orphan file, no empty fan-out directory


def test_first_use_in_a_new_process_on_a_full_disk_raises_clearly(small_disk: SmallDisk) -> None:
    cache_dir = small_disk.root / "cache"
    with dc.Cache(cache_dir) as cache:
        cache.set("kept", 1)
    # Opening leaves no connection open: the first use must create the WAL and its index.
    out = run_child(f"""
        import threading
        cache = dc.Cache({str(cache_dir)!r})
        fill({str(small_disk.filler)!r})
        results = []
        def first_use():
            try:
                results.append(("value", cache.get("kept")))
            except Exception as exc:
                results.append((type(exc).__name__, str(exc)))
        thread = threading.Thread(target=first_use)
        thread.start()
        thread.join()
        print(results[0][0])
        print(results[0][1])
    """)
    kind, detail = out.splitlines()[:2]
    assert kind in ("value", "DiskFullError"), out
    if kind == "DiskFullError":
        assert "no space left" in detail
    small_disk.free()
    with dc.Cache(cache_dir) as cache:
        assert cache.get("kept") == 1


@pytest.mark.parametrize("kind", [dc.Cache, dc.FanoutCache])
def test_creating_a_cache_on_a_full_disk_says_so(small_disk: SmallDisk, kind: type) -> None:
    small_disk.fill()
    with pytest.raises(dc.DiskFullError, match="no space left") as raised:
        kind(small_disk.root / "new")
    assert raised.value.errno == errno.ENOSPC
    assert isinstance(raised.value, OSError) and isinstance(raised.value, dc.DatabaseError)


def test_sparse_version_file_is_allocated_or_refused_never_faults(small_disk: SmallDisk) -> None:
    cache_dir = small_disk.root / "cache"
    with dc.Cache(cache_dir) as cache:
        cache.set("kept", 1)
    # A version file as earlier releases made it: the header written, the rest a hole.
    versions = cache_dir / "cache.db-versions"
    header = versions.read_bytes()[:64]
    size = versions.stat().st_size
    versions.unlink()
    with open(versions, "wb") as file:
        file.write(header)
        file.truncate(size)
    assert versions.stat().st_blocks * 512 < size
    small_disk.fill()
    out = run_child(f"""
        try:
            cache = dc.Cache({str(cache_dir)!r})
            cache.get("kept")
            cache.set("k", 1)
            cache.delete("k")
            print("worked")
        except OSError as exc:
            print("refused", type(exc).__name__, exc)
    """)
    assert out.startswith("worked") or out.startswith("refused DiskFullError"), out
    small_disk.free()
    with dc.Cache(cache_dir) as cache:
        assert cache.get("kept") == 1
        cache.set("k", 2)
        assert cache.get("k") == 2
    assert versions.stat().st_blocks * 512 >= size  # allocated for real now


def test_a_transaction_a_full_disk_rolled_back_takes_no_further_write(small_disk: SmallDisk) -> None:
    # SQLite may answer a full disk by rolling back the whole transaction (here: its page
    # cache, kept tiny, spills into the database file). A caller that catches the error inside
    # transact() and writes on must not see those writes commit one by one, nor lose the value
    # file of one that did (its row committed, its file removed as the block's rollback).
    cache_dir = small_disk.root / "cache"
    out = run_child(f"""
        cache = dc.Cache({str(cache_dir)!r}, sqlite_cache_size=10)
        cache.set("base", b"b" * 100)
        filler = {str(small_disk.filler)!r}
        fill(filler)
        os.truncate(filler, os.path.getsize(filler) - 300_000)
        try:
            with cache.transact():
                try:
                    for n in range(200):
                        cache.set(("t", n), os.urandom(10_000))
                except dc.DiskFullError:
                    print("full after", n)
                os.unlink(filler)
                for name, value in (("after", b"a" * 50), ("big", b"g" * 200_000)):
                    try:
                        cache.set(name, value)
                    except dc.DatabaseError as exc:
                        print("refused", name, exc)
        except dc.DatabaseError as exc:
            print("block", exc)
        else:
            print("block committed")
        cache.close()
    """)
    lines = out.splitlines()
    assert lines[0].startswith("full after"), out
    with dc.Cache(cache_dir) as cache:
        if lines[-1] == "block committed":  # SQLite undid only the failed statement: all kept
            assert cache.get("after") == b"a" * 50 and cache.get("big") == b"g" * 200_000
            assert "refused" not in out
        else:  # SQLite ended the transaction: nothing after it may commit on its own
            assert "rolled back" in lines[-1], out
            assert [line.split()[:2] for line in lines[1:-1]] == [["refused", "after"], ["refused", "big"]]
            assert sorted(map(str, cache)) == ["base"]
        assert cache.get("base") == b"b" * 100
        assert cache.check() == []


def test_out_of_descriptors_at_open_is_said_not_taken_for_a_damaged_database(tmp_path):
    # SQLite says only "unable to open database file"; that was reported as "not a usable cache
    # database" (a user may then delete a healthy cache).
    directory = str(tmp_path / "c")
    with dc.Cache(directory) as cache:
        cache.set("k", 1)
    script = f"""
import os, resource, diskcache_core as dc
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
for spare in range(12):
    hog = []
    while True:
        try: hog.append(os.open('/dev/null', os.O_RDONLY))
        except OSError: break
    for _ in range(spare): os.close(hog.pop())
    try:
        with dc.Cache({directory!r}) as c: print(spare, 'opened', c.get('k'))
    except dc.DatabaseError as e: print(spare, 'error', e)
    for fd in hog: os.close(fd)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 12, done.stderr
    errors = [line for line in lines if " error " in line]
    assert errors and all("Too many open files" in line for line in errors), lines
    assert not any("not a usable" in line for line in lines)
    assert "opened 1" in lines[-1]


def test_no_inode_left_at_open_is_a_full_disk(tmp_path, monkeypatch):
    import os
    import sqlite3

    from diskcache_core._errors import translate_sqlite_error

    try:
        sqlite3.connect(str(tmp_path / "missing" / "x.db"))
    except sqlite3.OperationalError as exc:
        cannot_open = exc
    existing = tmp_path / "cache.db"
    existing.write_bytes(b"")
    real = os.statvfs(str(tmp_path))
    fields = {name: getattr(real, name) for name in ("f_bavail", "f_frsize", "f_files")}

    class NoInodes:
        f_favail = 0
        __getattr__ = fields.__getitem__

    monkeypatch.setattr(os, "statvfs", lambda path: NoInodes())
    error = translate_sqlite_error(cannot_open, str(existing))
    assert isinstance(error, dc.DiskFullError) and "inode" in str(error)


def test_check_fix_on_a_full_disk_removes_orphan_files_before_it_vacuums(
    small_disk: SmallDisk,
) -> None:
    """check(fix=True) removes value files no row names first, then rewrites the database:
    the rewrite needs room, which the removal frees (vacuuming first raised DiskFullError)."""
    cache_dir = small_disk.root / "cache"
    holder = dc.Cache(cache_dir)  # keeps the WAL and its index open, as a busy site would
    with holder.transact():  # one commit: a short WAL
        for number in range(60):
            holder.set(number, bytes([number % 251]) * 1000)  # inline: a database of ~80 KB
    orphan, orphan_path = holder.disk.filename()
    os.makedirs(os.path.dirname(orphan_path))
    with open(orphan_path, "wb") as file:
        file.write(b"o" * 400_000)  # left by a writer killed before its row committed
    small_disk.fill()
    out = run_child(f"""
        with dc.Cache({str(cache_dir)!r}) as cache:
            try:
                found = cache.check(fix=True)
            except OSError as exc:
                print("raised", type(exc).__name__)
            else:
                print("checked", sum("{orphan}" in str(w.message) for w in found))
            print("items", len(cache), cache.get(7) == bytes([7]) * 1000)
        print("orphan", os.path.exists({orphan_path!r}))
    """)
    assert out.splitlines() == ["checked 1", "items 60 True", "orphan False"], out
    small_disk.free()
    holder.close()
