"""Where FanoutCache keeps a key: the placement hash, and the layout file that fixes it.

A key goes to shard ``placement_hash(stored key) % shards``: CRC-32 of the key's stored form
(as the Disk stores it), spread by a multiplicative (Fibonacci) mix. It is the same in every
process and Python version, costs ~0.2 us (a cryptographic hash costs twice that on every
call, a fifth of a get), and is uniform for integer keys with a stride (python-diskcache hashes
an integer key to itself, so keys 0, 8, 16, ... all land on one of 8 shards).

The layout (shard count and hash) is recorded in ``fanout.json`` when the directory is created;
reopening with another shard count raises ValueError instead of silently missing every moved
key. A directory python-diskcache created (shards but no ``fanout.json``) keeps
python-diskcache's placement, so its items stay reachable.
"""

from __future__ import annotations

import json
import os
import os.path as op
import sqlite3
import stat
import struct
import tempfile
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._arguments import check_text
from .._store.dbfile import refuse_special_file
from .._disk.directories import make_private_dirs, open_subdirectory
from .._disk.disk import Disk, unsupported_key
from .._errors import DiskCacheError, ReadOnlyError, storage_error
from .._store.creation import INSERT_COUNTER as INSERT_SETTING_ONCE  # (the same statement)
from .._store.schema import DBNAME, LAYOUT_FILE, LAYOUT_TEMP_PREFIX, SELECT_SETTING, database_uri

if TYPE_CHECKING:
    from .._cache.cache import Cache

__all__ = [
    "GOLDEN",
    "LAYOUT_FILE",
    "LAYOUT_TEMP_PREFIX",
    "MASK64",
    "MAX_SHARDS",
    "bind_layout",
    "check_shard_count",
    "crc32",
    "guard_shard",
    "hashes_text_inline",
    "placement",
    "placement_hash",
    "proportional_shares",
    "read_layout",
    "shard_name",
]

# Shards live in directories 000-999 (the three digits python-diskcache's layout has too). Each
# is a database, its WAL and version files: a few file descriptors per thread that uses it.
MAX_SHARDS = 1000
_LAYOUT_MAX = 64 * 1024  # bytes: a layout file holds a few dozen
_HASH_CRC = "crc32-fibonacci-v1"
_HASH_PEER = "python-diskcache-adler32"
_U32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: multiplying spreads nearby CRCs apart
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Shard 0's Settings row repeating a layout of ours (python-diskcache skips rows it does not use).
_MARK_ROW = "core_fanout_layout"
crc32 = zlib.crc32


def placement_hash(db_key: Any) -> int:
    """A 32-bit hash of a stored key (as `Disk.put` returns it), stable across processes.

    Keys the database treats as equal hash equally (``1`` and ``1.0``); each stored type
    starts the CRC from a different value, so ``'1'``, ``b'1'`` and ``1`` are unrelated.
    """
    kind = type(db_key)
    if kind is str:
        try:
            crc = crc32(db_key.encode("utf-8"))
        except UnicodeEncodeError:
            check_text("key", db_key)  # ValueError naming the key
            raise
    elif kind is bytes or kind is memoryview or kind is bytearray:  # (a blob: sqlite3.Binary)
        crc = crc32(db_key, 1)
    else:
        if kind is float and db_key.is_integer() and _INT64_MIN <= db_key <= _INT64_MAX:
            db_key, kind = int(db_key), int
        if kind is int:
            crc = crc32(db_key.to_bytes(8, "little", signed=True), 2)
        elif kind is float:
            crc = crc32(struct.pack("<d", db_key), 3)
        else:
            raise unsupported_key(db_key)
    return ((crc * GOLDEN) & MASK64) >> 32


def _peer_hash(db_key: Any) -> int:
    """python-diskcache's placement hash of a stored key, for directories it created."""
    kind = type(db_key)
    if kind is bytes or kind is memoryview or kind is bytearray:
        return zlib.adler32(db_key) & _U32
    if kind is str:
        try:
            return zlib.adler32(db_key.encode("utf-8")) & _U32
        except UnicodeEncodeError:
            check_text("key", db_key)  # ValueError naming the key
            raise
    if kind is int:
        return int(db_key % _U32)
    if kind is float:
        return zlib.adler32(struct.pack("!d", db_key)) & _U32
    raise unsupported_key(db_key)


def placement(layout: str, disk: Disk, count: int) -> Callable[[Any], int]:
    """The function giving a key's shard number, of `count` shards, under `layout`.

    The layout comes from `read_layout`. Every keyed operation of FanoutCache finds its shard
    through it (``get`` inlines its arithmetic, see `hashes_text_inline`). With the standard
    ``Disk.put``, str and bytes keys are their own stored form: they are hashed here, without a
    call to ``put`` or `placement_hash`.
    """
    put = disk.put
    if layout == _HASH_PEER:
        if type(disk).hash is not Disk.hash:
            # python-diskcache places a key with its Disk's hash(): a Disk that overrides it
            # placed the directory's items by it.
            disk_hash = disk.hash
            return lambda key: disk_hash(key) % count
        return lambda key: _peer_hash(put(key)[0]) % count
    if not hashes_text_inline(layout, disk):
        return lambda key: placement_hash(put(key)[0]) % count

    crc, golden, mask = crc32, GOLDEN, MASK64  # cells: read faster than module globals

    def number(key: Any) -> int:
        kind = type(key)
        if kind is str:
            try:
                return (((crc(key.encode()) * golden) & mask) >> 32) % count
            except UnicodeEncodeError:
                check_text("key", key)  # lone surrogates: ValueError naming the key
                raise
        if kind is bytes:
            return (((crc(key, 1) * golden) & mask) >> 32) % count
        return placement_hash(put(key)[0]) % count

    return number


def hashes_text_inline(layout: str, disk: Disk) -> bool:
    """True when `placement` hashes str and bytes keys inline under `layout` with `disk`.

    Then a str key's shard number is ``(((crc32(key.encode()) * GOLDEN) & MASK64) >> 32) %
    shards`` (a bytes key's starts from ``crc32(key, 1)``): the arithmetic a hot path may
    inline to save the call (FanoutCache.get does).
    """
    return layout == _HASH_CRC and type(disk).put is Disk.put


def check_shard_count(shards: Any) -> int:
    """A FanoutCache's shard count: an int from 1 to `MAX_SHARDS` (TypeError, ValueError)."""
    if type(shards) is not int:
        raise TypeError(f"shards must be an int, not {type(shards).__name__}")
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be from 1 to {MAX_SHARDS}, got {shards}")
    return shards


def shard_name(number: int) -> str:
    """The subdirectory of shard `number`: ``000`` to ``999``."""
    return f"{number:03d}"


def read_layout(directory: str, shards: int, read_only: bool = False) -> str:
    """Read, or record (unless `read_only`), how keys are placed in `directory`; returns the
    hash's name.

    ValueError when the directory was laid out for another shard count, or its layout file
    cannot be read; DatabaseError when it holds no cache and is opened `read_only`.
    """
    path = op.join(directory, LAYOUT_FILE)
    # Shards first, then the layout file: ours writes the file before any shard, so a shard
    # seen without a layout file was made by python-diskcache.
    existing = sum(
        len(name) == 3 and name.isdigit() and op.isdir(op.join(directory, name))
        for name in os.listdir(directory)
    )
    try:
        layout = json.loads(_read_layout_file(path))
    except FileNotFoundError:
        marked = _marked_layout(directory) if existing else None
        if marked is not None and read_only:
            layout = marked  # (checked below; the file is written again by a writing opener)
        elif marked is not None:  # ours, its file removed by hand: written again from the copy
            try:
                _record_layout(path, marked)
            except OSError as exc:
                raise storage_error(exc, f"the shard layout {path!r}") from exc
            return read_layout(directory, shards)
        elif existing:
            if existing != shards:
                raise ValueError(
                    f"{directory!r} holds a python-diskcache FanoutCache with {existing} "
                    f"shards; open it with shards={existing}"
                ) from None
            return _HASH_PEER
        else:
            if read_only:
                raise ReadOnlyError(f"no cache in {directory!r} (opened read-only)") from None
            try:
                recorded = _record_layout(path, _our_layout(shards))
            except OSError as exc:  # a full disk says so (DiskFullError)
                raise storage_error(exc, f"the shard layout {path!r}") from exc
            if recorded:
                return _HASH_CRC
            return read_layout(directory, shards)  # another opener recorded it first: theirs
    except (ValueError, OSError) as exc:
        raise ValueError(f"cannot read the shard layout {path!r}: {exc}") from exc
    if not isinstance(layout, dict) or layout.get("hash") not in (_HASH_CRC, _HASH_PEER):
        raise ValueError(f"unknown shard layout in {path!r}: {layout!r}")
    if layout.get("shards") != shards:
        raise ValueError(
            f"{directory!r} was created with shards={layout.get('shards')}; "
            f"opening it with shards={shards} would misplace every key"
        )
    return str(layout["hash"])


def _our_layout(shards: int) -> dict[str, Any]:
    """The layout file's content (and shard 0's copy) for a directory this library lays out."""
    return {"format": 1, "shards": shards, "hash": _HASH_CRC}


def _marked_layout(directory: str) -> dict[str, Any] | None:
    """The layout shard 0's database repeats (see `bind_layout`), or None where it holds none."""
    shard = op.join(directory, shard_name(0))
    path = op.join(shard, DBNAME)
    if op.islink(shard) or not op.lexists(path):
        return None
    refuse_special_file(path)  # (DatabaseError: never a planted link)
    # With no WAL index (-shm) no writer has it open: its file is the whole truth, read as
    # immutable (a mere read-only connection makes a -wal and -shm, or fails where it cannot).
    mode = "mode=ro" if op.exists(path + "-shm") else "mode=ro&immutable=1"
    try:
        con = sqlite3.connect(database_uri(path, mode), uri=True, timeout=5.0)
        try:
            rows = con.execute(SELECT_SETTING, (_MARK_ROW,)).fetchall()
        finally:
            con.close()
        marked = json.loads(rows[0][0]) if rows else None
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None  # (a database being created, by either library)
        raise ValueError(f"cannot read the shard layout in {path!r}: {exc}") from exc
    except (sqlite3.Error, TypeError, ValueError) as exc:
        raise ValueError(f"cannot read the shard layout in {path!r}: {exc}") from exc
    if marked is not None and (not isinstance(marked, dict) or marked.get("hash") != _HASH_CRC):
        raise ValueError(f"unknown shard layout in {path!r}: {marked!r}")
    return marked


def bind_layout(directory: str, layout: str, shards: Sequence[Cache]) -> None:
    """Make shard 0's database repeat a layout of ours: the layout file alone, removed by hand,
    would make the next opener take the directory for python-diskcache's, and place keys where
    old values of them may still be found (each shard's connections check its directory from
    its opening: `guard_shard`, a `Role` of the shard). Best effort: read-only media or a busy
    shard skip it."""
    store = shards[0]._store
    if layout != _HASH_CRC or store.pool.read_only:
        return
    try:
        if not store.read(SELECT_SETTING, (_MARK_ROW,)):
            text = json.dumps(_our_layout(len(shards)))
            with store.transaction(retry=True) as state:
                state.execute(INSERT_SETTING_ONCE, (_MARK_ROW, text))
    except DiskCacheError:
        pass  # (the layout file still holds it; the next opener tries again)


def guard_shard(directory: str, shards: int, layout: str, number: int) -> None:
    """Before a shard's connection opens: its directory must not be a link, even one swapped in
    while open (UnsafeValueFileError). Where it was removed, with `directory` perhaps, they are
    made anew, the layout file first (a shard without it reads as python-diskcache's)."""
    name = shard_name(number)
    if not op.lexists(op.join(directory, name)):
        make_private_dirs(directory)
        if layout == _HASH_CRC:
            path = op.join(directory, LAYOUT_FILE)
            _record_layout(path, _our_layout(shards))
    open_subdirectory(directory, name)


def _read_layout_file(path: str) -> bytes:
    """The layout file's bytes: a regular file, not a link, not waited on, at most 64 KiB."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, _LAYOUT_MAX + 1)
    finally:
        os.close(fd)
    if len(data) > _LAYOUT_MAX:
        raise ValueError(f"larger than {_LAYOUT_MAX} bytes")
    return data


def _record_layout(path: str, layout: dict[str, Any]) -> bool:
    """Write the layout file at `path` unless it exists; False when another opener's is there."""
    fd, temp = tempfile.mkstemp(dir=op.dirname(path), prefix=LAYOUT_TEMP_PREFIX, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(layout, handle)
        try:
            os.link(temp, path)  # atomic, and never replaces another opener's file
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(temp)


def proportional_shares(sizes: Sequence[int], count: int) -> list[int]:
    """Split `count` (at most ``sum(sizes)``) over shards holding `sizes` items, in proportion;
    the remainder goes to the shards with the most left."""
    if type(count) is not int or count < 0:
        raise ValueError(f"count must be an int >= 0, not {count!r}")
    total = sum(sizes)
    count = min(count, total)
    if not count:
        return [0] * len(sizes)
    shares = [size * count // total for size in sizes]
    remainder = count - sum(shares)
    by_left = sorted(range(len(sizes)), key=lambda number: sizes[number] - shares[number])
    for number in by_left[len(by_left) - remainder:]:
        shares[number] += 1
    return shares
