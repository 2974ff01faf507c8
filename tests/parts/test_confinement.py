"""Value files stay inside the cache directory (issue 16, items 3 and 4, part of 1).

No symbolic link below the cache directory is followed on write, read or remove; check() reports
links and with fix removes the links themselves; a row can only name a value file, so neither
check(fix=True) nor a removal ever unlinks the database, its journals, the version or layout
file, or anything outside; a value write that fails on a full disk leaves no temporary file and
no empty fan-out directory behind and says the disk is full. The cache directory itself may be
reached through a link.

Every test runs both ways of confining paths: dir_fd (openat-style, POSIX) and the lstat checks
used where there is no dir_fd (Windows).
"""

from __future__ import annotations

import errno
import io
import os
import os.path as op
import subprocess
import threading

import pytest
from store_helpers import category_of, connect, item_table, warning_text

import diskcache_core as dc
from diskcache_core._store import reaper as _reaper
from diskcache_core._disk import valuefiles as _valuefiles
from diskcache_core._errors import DiskFullError

BIG = 100_000  # above the default 32 KiB disk_min_file_size: stored in a value file
HEX_NAME = "0123456789abcdef0123456789ab.val"


@pytest.fixture(params=["dir_fd", "lstat"])
def confine(request, monkeypatch):
    """Run the test with openat-style confinement and with the no-dir_fd (lstat) fallback."""
    if request.param == "dir_fd" and not getattr(_valuefiles, "USE_DIR_FD", True):
        pytest.skip("no dir_fd support on this platform")
    if request.param == "lstat":
        monkeypatch.setattr(_valuefiles, "USE_DIR_FD", False)
    return request.param


def _pin_name(monkeypatch, cache, name: str) -> None:
    """Make `cache`'s Disk name every new value file `name` (filename() is an override point)."""
    disk = cache._disk
    monkeypatch.setattr(disk, "filename", lambda key=None, value=None: (name, op.join(disk._directory, name)))


def _tree(path) -> list:
    """Every entry below `path` (relative), links not followed."""
    found = []
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            found.append(op.relpath(op.join(dirpath, name), path))
    return sorted(found)


def _name_row(directory: str, key: str, filename: str) -> None:
    """Point the row of `key` at `filename`, as someone who can write the database could."""
    con = connect(directory)
    try:
        table = item_table(con)
        changed = con.execute('UPDATE "%s" SET filename = ? WHERE key = ?' % table, (filename, key)).rowcount
    finally:
        con.close()
    assert changed == 1


# --------------------------------------------------------------------------------------------
# Symbolic links in the fan-out
# --------------------------------------------------------------------------------------------


def _link_fanout(directory, outside, level: int) -> None:
    """Make fan-out level 1 (``ab``) or 2 (``ab/cd``) a link to `outside`."""
    if level == 1:
        os.symlink(outside, op.join(directory, "ab"))
    else:
        os.makedirs(op.join(directory, "ab"), exist_ok=True)
        os.symlink(outside, op.join(directory, "ab", "cd"))


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("read", [False, True], ids=["bytes", "read-file"])
def test_write_refuses_symlinked_fanout_directory(store, tmp_path, monkeypatch, confine, level, read):
    outside = tmp_path / "outside"
    outside.mkdir()
    _link_fanout(store.directory, outside, level)
    _pin_name(monkeypatch, store, op.join("ab", "cd", HEX_NAME))
    value = io.BytesIO(os.urandom(BIG)) if read else os.urandom(BIG)
    with pytest.raises(dc.UnsafeValueFileError, match="symbolic link"):
        store.set("key", value, read=read)
    assert _tree(outside) == [], "a value file was written through the link"
    assert "key" not in store


@pytest.mark.parametrize("level", [1, 2])
def test_read_and_remove_refuse_symlinked_fanout_directory(store, tmp_path, confine, level):
    store.set("key", os.urandom(BIG))
    ((filename,),) = [row for row in _rows(store.directory) if row[0] is not None]
    parts = filename.split(os.sep)
    # Move the real fan-out directory out of the cache and link it back in.
    outside = tmp_path / "outside"
    real = op.join(store.directory, *parts[:level])
    os.rename(real, outside)
    os.symlink(outside, real)
    with pytest.raises(dc.UnsafeValueFileError):
        store.get("key")
    with pytest.raises(dc.UnsafeValueFileError):
        store.get("key", read=True)
    with pytest.raises(dc.UnsafeValueFileError):
        store._disk.remove(filename)
    with pytest.warns(RuntimeWarning, match="symbolic link"):
        store.delete("key")  # the remover refuses the released name: nothing removed
        _reaper.drain()
    assert op.join(*parts[level:]) in _tree(outside)


def _rows(directory: str) -> list:
    con = connect(directory)
    try:
        return con.execute('SELECT filename FROM "%s"' % item_table(con)).fetchall()
    finally:
        con.close()


def test_check_reports_and_removes_links_not_targets(store, tmp_path, confine):
    store.set("kept", os.urandom(BIG))
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "keep.val").write_bytes(b"must survive")
    (outside / "sub" / "deep.val").write_bytes(b"must survive too")
    directory = store.directory
    # Not hex: "kept"'s own value file (random hex fan-out names) never collides with them.
    links = [
        op.join(directory, "zz"),  # a first-level fan-out directory
        op.join(directory, "yy", "xx"),  # a second-level one
        op.join(directory, "ww", "vv", HEX_NAME),  # a value file
        op.join(directory, "dangling.val"),  # a link to nothing
    ]
    os.makedirs(op.join(directory, "yy"))
    os.makedirs(op.join(directory, "ww", "vv"))
    os.symlink(outside, links[0])
    os.symlink(outside / "sub", links[1])
    os.symlink(outside / "keep.val", links[2])
    os.symlink(tmp_path / "nothing", links[3])

    texts = warning_text(store.check())
    for link in links:
        assert any(link in text and "symbolic link" in text for text in texts), (link, texts)
    assert all(op.lexists(link) for link in links), "check() without fix removed something"

    store.check(fix=True)
    for link in links:
        assert not op.lexists(link), link
    assert _tree(outside) == ["keep.val", "sub", op.join("sub", "deep.val")]
    assert (outside / "keep.val").read_bytes() == b"must survive"
    assert (outside / "sub" / "deep.val").read_bytes() == b"must survive too"
    assert store.check() == []
    assert len(store.get("kept")) == BIG


# --------------------------------------------------------------------------------------------
# Rows that name something other than a value file
# --------------------------------------------------------------------------------------------

NOT_VALUE_FILES = [
    "cache.db",
    "cache.db-wal",
    "cache.db-shm",
    "cache.db-versions",
    "fanout.json",
    "outside-relative",
    "outside-absolute",
    "symlink",
]


def _plant_target(store, tmp_path, kind: str) -> tuple:
    """(the filename to put in a row, the path of the file it names) for `kind`."""
    directory = store.directory
    if kind.startswith("cache.db"):
        path = op.join(directory, kind)
        assert op.exists(path), path
        return kind, path
    if kind == "fanout.json":  # the FanoutCache layout file, as if this cache were opened there
        path = op.join(directory, kind)
        with open(path, "w") as handle:
            handle.write('{"format": 1, "shards": 8, "hash": "crc32-fibonacci-v1"}')
        return kind, path
    outside = tmp_path / "outside.val"
    outside.write_bytes(b"x" * BIG)
    if kind == "outside-relative":
        return op.relpath(outside, directory), str(outside)
    if kind == "outside-absolute":
        return str(outside), str(outside)
    name = op.join("ab", "cd", HEX_NAME)  # a value-file name that is a link to a file outside
    os.makedirs(op.join(directory, "ab", "cd"))
    os.symlink(outside, op.join(directory, name))
    return name, str(outside)


@pytest.mark.parametrize("kind", NOT_VALUE_FILES)
def test_check_fix_drops_row_naming_non_value_file(store, tmp_path, confine, kind):
    value = os.urandom(BIG)
    store.set("victim", os.urandom(BIG))
    store.set("other", value)
    filename, path = _plant_target(store, tmp_path, kind)
    before = os.stat(path).st_size
    _name_row(store.directory, "victim", filename)

    warns = store.check()
    assert warns, "check() found nothing wrong with a row naming %r" % filename
    warns = store.check(fix=True)
    assert any(filename in text for text in warning_text(warns)), warning_text(warns)
    _reaper.drain()
    assert op.exists(path), "the named file was removed"
    if not kind.startswith("cache.db-"):  # SQLite's own files change as it works
        assert os.stat(path).st_size == before
    assert "victim" not in store
    assert store.get("other") == value
    store.set("new", os.urandom(BIG))
    assert [category_of(w) for w in store.check()] == []
    store.close()
    with dc.Cache(store.directory) as reopened:
        assert reopened.get("other") == value
        assert reopened.check() == []


@pytest.mark.parametrize("kind", NOT_VALUE_FILES)
def test_removal_never_unlinks_non_value_file(store, tmp_path, confine, kind):
    store.set("victim", os.urandom(BIG))
    store.set("other", b"still here")
    filename, path = _plant_target(store, tmp_path, kind)
    _name_row(store.directory, "victim", filename)
    with pytest.warns(RuntimeWarning) if kind != "symlink" else _no_warning():
        store.delete("victim")  # releases the name: the remover must refuse it
        _reaper.drain()
    assert op.exists(path), "the named file was removed"
    assert store.get("other") == b"still here"
    if kind != "symlink":
        with pytest.raises(dc.UnsafeValueFileError):
            store._disk.remove(filename)
        assert op.exists(path)


class _no_warning:
    """A context manager that checks nothing (the link itself may be removed: never its target)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


@pytest.mark.parametrize(
    "name",
    ["", "x", "ab/cd/x.tmp", "ab/cd/x.val.tmp", "ab//x.val", "./x.val", "ab/./x.val", "ab/../x.val"]
    + ["/x.val", ".val", "cache.db", "fanout.json", "ab/cd/x.val\0"],
)
def test_disk_remove_refuses_names_that_are_not_value_files(tmp_path, name):
    disk = dc.Disk(str(tmp_path))
    with pytest.raises(dc.UnsafeValueFileError):
        disk.remove(name)


def test_check_leaves_nested_caches_and_layout_file_alone(store, tmp_path, confine):
    """A Cache opened on a directory that also holds other caches (a FanoutCache's, say)."""
    store.set("key", os.urandom(BIG))
    layout = op.join(store.directory, "fanout.json")
    with open(layout, "w") as handle:
        handle.write("{}")
    with dc.Cache(op.join(store.directory, "000")) as shard:
        shard.set("shard-key", os.urandom(BIG))
    shard_files = _tree(op.join(store.directory, "000"))
    assert any(name.endswith(".val") for name in shard_files)
    assert store.check(fix=True) == []
    assert op.exists(layout)
    assert _tree(op.join(store.directory, "000")) == shard_files
    with dc.Cache(op.join(store.directory, "000")) as shard:
        assert len(shard.get("shard-key")) == BIG


def test_planted_fifo_is_refused_not_waited_on(store, confine):
    store.set("key", os.urandom(BIG))
    name = op.join("ab", "cd", HEX_NAME)
    os.makedirs(op.join(store.directory, "ab", "cd"))
    fifo = op.join(store.directory, name)
    os.mkfifo(fifo)
    _name_row(store.directory, "key", name)
    outcome: list = []

    def read() -> None:
        try:
            outcome.append(store.get("key"))
        except Exception as exc:  # noqa: BLE001 - inspected below
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # unblock the reader before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
        pytest.fail("get() blocked opening a FIFO planted as a value file")
    assert isinstance(outcome[0], dc.UnsafeValueFileError), outcome


def test_custom_disk_filename_layouts(tmp_path, confine):
    """A Disk subclass may choose other names (python-diskcache documents filename() as a hook),
    deeper or flatter, as long as they are relative '.val' paths."""

    class DeepDisk(dc.Disk):
        def filename(self, key=dc.UNKNOWN, value=dc.UNKNOWN):
            name = op.join("v", "w", "x", "y", os.urandom(8).hex() + ".val")
            return name, op.join(self._directory, name)

    class OtherSuffixDisk(dc.Disk):
        def filename(self, key=dc.UNKNOWN, value=dc.UNKNOWN):
            name = op.join("v", os.urandom(8).hex() + ".bin")
            return name, op.join(self._directory, name)

    with dc.Cache(tmp_path / "deep", disk=DeepDisk) as cache:
        value = os.urandom(BIG)
        cache.set("key", value)
        assert cache.get("key") == value
        assert cache.check() == []
        cache.delete("key")
        _reaper.drain()
        assert not op.exists(op.join(cache.directory, "v")), "emptied directories are pruned"
    with dc.Cache(tmp_path / "other", disk=OtherSuffixDisk) as cache:
        with pytest.raises(dc.UnsafeValueFileError, match=".val"):
            cache.set("key", os.urandom(BIG))
        assert not op.exists(op.join(cache.directory, "v"))


# --------------------------------------------------------------------------------------------
# The cache directory itself reached through a link
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cache_class", [dc.Cache, dc.FanoutCache])
def test_cache_directory_through_a_symlink(tmp_path, confine, cache_class):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    value = os.urandom(BIG)
    with cache_class(str(link)) as cache:
        cache.set("key", value)
        cache.set("stream", io.BytesIO(value), read=True)
        assert cache.get("key") == value
        with cache.get("stream", read=True) as reader:
            assert reader.read() == value
        assert cache.check() == []
        assert cache.check(fix=True) == []
        assert cache.delete("key") and cache.delete("stream")
    assert op.islink(link)
    leftovers = [name for name in _tree(real) if name.endswith(".val")]
    assert leftovers == []


# --------------------------------------------------------------------------------------------
# A full disk
# --------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    target = tmp_path / "small"
    target.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)], check=True, capture_output=True
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def _fill(path, leave: int) -> None:
    """Fill the file system of `path` until about `leave` bytes are left."""
    with open(path / "filler", "wb") as handle:
        block = b"\0" * 4096
        try:
            while True:
                handle.write(block)
                handle.flush()
                stat = os.statvfs(path)
                if stat.f_bavail * stat.f_frsize <= leave:
                    break
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


@pytest.mark.parametrize("leave", [0, 40_000])
def test_full_disk_value_write_leaves_nothing_behind(small_disk, confine, leave):
    directory = small_disk / "cache"
    with dc.Cache(str(directory)) as cache:
        cache.set("small", 1)
        _fill(small_disk, leave)
        for number in range(5):  # each try picks new fan-out directories
            with pytest.raises(OSError) as info:
                cache.set(("big", number), os.urandom(300_000))
            assert [name for name in _tree(directory) if not name.startswith("cache.db")] == []
            assert isinstance(info.value, DiskFullError)
            assert info.value.errno == errno.ENOSPC
            message = str(info.value)
            assert "no space left" in message and "value file" in message, message
        os.remove(small_disk / "filler")
        assert cache.check() == []
        assert cache.set("big", os.urandom(300_000))
        assert cache.get("small") == 1


# --- directories and files below the cache directory that a cache opens by name --------------


def _precious(tmp_path):
    outside = tmp_path / "outside"
    (outside / "photos").mkdir(parents=True)
    (outside / "notes.txt").write_text("not a cache file")
    (outside / "photos" / "a.jpg").write_text("nor this")
    return outside


def _listing(directory):
    return sorted(op.relpath(op.join(root, name), directory)
                  for root, _, names in os.walk(directory) for name in names)


def test_a_shard_directory_planted_as_a_link_is_refused(tmp_path):
    outside = _precious(tmp_path)
    directory = tmp_path / "cache"
    dc.FanoutCache(str(directory), shards=2).close()
    for name in os.listdir(directory / "001"):
        os.unlink(directory / "001" / name)
    os.rmdir(directory / "001")
    os.symlink(outside, directory / "001")
    with pytest.raises(dc.UnsafeValueFileError, match="is a link"):
        dc.FanoutCache(str(directory), shards=2)
    assert _listing(outside) == ["notes.txt", "photos/a.jpg"]


@pytest.mark.parametrize("kind", ["cache", "deque", "index"])
@pytest.mark.parametrize("level", ["kind", "name"])
def test_a_sub_collection_directory_planted_as_a_link_is_refused(tmp_path, kind, level):
    outside = _precious(tmp_path)
    directory = tmp_path / "cache"
    with dc.FanoutCache(str(directory), shards=2) as fanout:
        if level == "kind":
            os.symlink(outside, directory / kind)
        else:
            (directory / kind).mkdir()
            os.symlink(outside, directory / kind / "sub")
        with pytest.raises(dc.UnsafeValueFileError, match="is a link"):
            getattr(fanout, kind)("sub")
        assert fanout.check(fix=True) is not None
    assert _listing(outside) == ["notes.txt", "photos/a.jpg"]


@pytest.mark.parametrize("read_only", [False, True])
def test_a_database_file_planted_as_a_link_or_fifo_is_refused(tmp_path, read_only):
    outside = tmp_path / "empty.log"
    outside.write_bytes(b"")
    for plant in ("link", "fifo"):
        directory = tmp_path / f"cache-{plant}"
        directory.mkdir()
        if plant == "link":
            os.symlink(outside, directory / "cache.db")
        else:
            os.mkfifo(directory / "cache.db")
        with pytest.raises(dc.DatabaseError, match="cache.db' is (a link|not a regular file)"):
            dc.Cache(str(directory), read_only=read_only)  # neither followed nor waited on
    assert outside.read_bytes() == b"" and sorted(os.listdir(tmp_path)) == [
        "cache-fifo", "cache-link", "empty.log"
    ]


def test_a_wal_index_planted_as_a_fifo_is_refused_by_a_reader(tmp_path):
    directory = tmp_path / "cache"
    with dc.Cache(str(directory)) as cache:
        cache.set("key", 1)
    os.mkfifo(directory / "cache.db-shm")
    with dc.Cache(str(directory), read_only=True) as reader:  # opened as immutable
        with pytest.raises(dc.DatabaseError, match="not a regular file"):
            reader.get("key")  # a later read pins the WAL index: not waited on


@pytest.mark.parametrize("plant", ["fifo", "link to /dev/zero", "huge"])
def test_a_layout_file_that_is_not_one_is_refused(tmp_path, plant):
    directory = tmp_path / "cache"
    dc.FanoutCache(str(directory), shards=2).close()
    layout = directory / "fanout.json"
    layout.unlink()
    if plant == "fifo":
        os.mkfifo(layout)
    elif plant == "huge":
        layout.write_bytes(b" " * (1 << 20))
    else:
        os.symlink("/dev/zero", layout)
    with pytest.raises(ValueError, match="cannot read the shard layout"):
        dc.FanoutCache(str(directory), shards=2)
