"""A process of another user reads a cache it may not write: it sees every committed write, and
the files the library creates follow the database file's permissions (issue 16, items 2 and 8).

The reader is a forked child that drops to the ``nobody`` user (so these tests need root).
"""

from __future__ import annotations

import multiprocessing
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator

import pytest

import diskcache_core as dc

NOBODY = 65534

pytestmark = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="dropping to another user needs root"
)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user can traverse, holding a cache directory open to readers."""
    base = Path(tempfile.mkdtemp(prefix="dc-other-user-"))
    base.chmod(0o755)
    cache_dir = base / "cache"
    cache_dir.mkdir(mode=0o755)
    cache_dir.chmod(0o755)
    try:
        yield cache_dir
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def _reader(directory: str, requests: Any, answers: Any) -> None:
    """As `nobody`: open the cache when asked, then answer each requested key with what get
    returns."""
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    try:
        requests.get()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache = dc.Cache(directory)
        answers.put(("opened", [w.category.__name__ for w in caught]))
        while True:
            key = requests.get()
            if key is None:
                break
            answers.put(("value", cache.get(key)))
        cache.close()
    except BaseException as exc:  # report it to the test instead of dying silently
        answers.put(("error", repr(exc)))


class Reader:
    """The child process reading as another user, driven one get at a time.

    It is forked before the test opens the cache (SQLite's state of a database open in the
    parent must not reach the child), and opens the cache when `open` is called.
    """

    def __init__(self, directory: Path) -> None:
        context = multiprocessing.get_context("fork")
        self.requests = context.Queue()
        self.answers = context.Queue()
        self.process = context.Process(target=_reader, args=(str(directory), self.requests, self.answers))
        self.process.start()

    def open(self) -> None:
        self.requests.put("open")
        kind, self.warnings = self.answers.get(timeout=120)
        assert kind == "opened", self.warnings

    def get(self, key: str) -> Any:
        self.requests.put(key)
        kind, value = self.answers.get(timeout=120)
        assert kind == "value", value
        return value

    def stop(self) -> None:
        self.requests.put(None)
        self.process.join(120)
        assert self.process.exitcode == 0


def _open_to_readers(directory: Path) -> None:
    for path in directory.iterdir():
        if path.is_file():
            path.chmod(0o644)


def test_reader_without_wal_index_sees_later_writes(shared_dir: Path) -> None:
    # The writer closes: no -wal and no -shm are left, and the reader cannot create them.
    reader = Reader(shared_dir)
    with dc.Cache(shared_dir) as cache:
        cache.set("k", 0)
    _open_to_readers(shared_dir)
    assert not (shared_dir / "cache.db-shm").exists()
    try:
        reader.open()
        assert "ReadOnlyCacheWarning" in reader.warnings
        assert reader.get("k") == 0
        with dc.Cache(shared_dir) as cache:
            cache.set("k", 1)  # the writer has its WAL open now
            assert reader.get("k") == 1
            cache.set("k", 2)
            assert reader.get("k") == 2
        assert reader.get("k") == 2  # checkpointed into the file, WAL gone
        with dc.Cache(shared_dir) as cache:
            cache.set("k", 3)
        assert reader.get("k") == 3
    finally:
        reader.stop()


def test_reader_opened_beside_a_writer_sees_later_writes(shared_dir: Path) -> None:
    reader = Reader(shared_dir)
    writer = dc.Cache(shared_dir)
    writer.set("k", 0)
    _open_to_readers(shared_dir)
    try:
        reader.open()
        assert reader.get("k") == 0
        for value in range(1, 4):
            writer.set("k", value)
            assert reader.get("k") == value
        writer.close()  # the last writer's close removes the WAL and its index
        with dc.Cache(shared_dir) as again:
            again.set("k", 10)
        assert reader.get("k") == 10
        writer = dc.Cache(shared_dir)
        writer.set("k", 11)
        assert reader.get("k") == 11
    finally:
        writer.close()
        reader.stop()


def _modes(directory: Path) -> dict[str, int]:
    """Permission bits by relative path; directories' paths end with a slash."""
    return {
        str(path.relative_to(directory)) + ("/" if path.is_dir() else ""): stat.S_IMODE(path.lstat().st_mode)
        for path in directory.rglob("*")
    }


def test_new_cache_is_owner_only_in_an_open_directory(shared_dir: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        with dc.Cache(shared_dir) as cache:
            cache.set("small", 1)
            cache.set("big", b"x" * 100_000)
            modes = _modes(shared_dir)
    finally:
        os.umask(old_umask)
    files = {name: mode for name, mode in modes.items() if not name.endswith("/")}
    assert {"cache.db", "cache.db-wal", "cache.db-shm", "cache.db-versions"} <= set(files)
    assert all(mode == 0o600 for mode in files.values()), files
    dirs = {name: mode for name, mode in modes.items() if name.endswith("/")}
    assert dirs and all(mode == 0o700 for mode in dirs.values()), dirs


def test_files_follow_a_cache_opened_to_a_group(shared_dir: Path) -> None:
    with dc.Cache(shared_dir) as cache:
        cache.set("first", 1)
    (shared_dir / "cache.db").chmod(0o660)
    (shared_dir / "cache.db-versions").unlink()  # made again by the next open
    old_umask = os.umask(0o077)  # a strict umask must not undo the operator's choice
    try:
        with dc.Cache(shared_dir) as cache:
            cache.set("big", b"x" * 100_000)
            modes = _modes(shared_dir)
    finally:
        os.umask(old_umask)
    assert "cache.db-versions" in modes and any(name.endswith("/") for name in modes)
    for name, mode in modes.items():
        expected = 0o770 if name.endswith("/") else 0o660
        assert mode == expected, (name, oct(mode))


def test_root_creates_files_owned_by_the_caches_owner(shared_dir: Path) -> None:
    os.chown(shared_dir, NOBODY, NOBODY)
    with dc.Cache(shared_dir) as cache:  # as root, in a directory of `nobody`
        cache.set("big", b"x" * 100_000)
        owners = {
            str(path.relative_to(shared_dir)): (path.lstat().st_uid, path.lstat().st_gid)
            for path in shared_dir.rglob("*")
        }
    assert owners and all(owner == (NOBODY, NOBODY) for owner in owners.values()), owners
