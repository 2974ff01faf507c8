"""The stored form of the remote tier: what a cache's item is called in Redis and what Redis
holds for it.

A name is the cache's prefix, then the database key with a one-byte type mark (`encode_key`); an
item is one Redis string: a fixed header (format version, mode, body kind, expire time, tag
length), the tag, then the serialized value (`encode_item`). The Lua scripts of the client
(`_remote`) read the header at fixed offsets, so its layout is fixed here. `stamp_hash` places
a name in a stamp bucket of the host's stamp file.
"""

from __future__ import annotations

import math
import os
import struct
import zlib
from typing import Any, NamedTuple

from .._disk.disk import MODE_BINARY, MODE_PICKLE, MODE_RAW, Disk
from .._errors import RemoteError

__all__ = [
    "Item", "canonical_tag", "decode_item", "decode_key", "decode_tag", "encode_item",
    "encode_key", "encode_tag", "expiry_header", "serialized", "stamp_hash", "tag_fields",
]

_FORMAT = 1
# version, mode, body kind, expire_time (big-endian double, NaN: none), tag length
_HEADER = struct.Struct(">BBBdH")
_NO_EXPIRY = math.nan
_INT64 = 2**63


class Item(NamedTuple):
    """An item as Redis holds it: what `Disk.fetch` needs (inline), its expiry and its tag."""

    mode: int
    db_value: Any
    expire_time: float | None
    tag: Any


def encode_key(db_key: Any, raw: int) -> bytes:
    """The Redis name of a database key, without the prefix: a type mark, then the key.

    Keys the database treats as equal get the same name (``1`` and ``1.0``).
    """
    kind = type(db_key)
    if not raw:
        pickled: bytes = db_key
        return b"p" + pickled
    if kind is str:
        text: str = db_key
        return b"s" + text.encode("utf-8")
    if kind is bytes:
        data: bytes = db_key
        return b"b" + data
    if kind is float and db_key.is_integer() and -_INT64 <= db_key < _INT64:
        return b"i%d" % int(db_key)
    if kind is int:
        return b"i%d" % db_key
    return b"f" + repr(db_key).encode()


def decode_key(name: bytes) -> tuple[Any, bool] | None:
    """The database key and raw flag of a name made by `encode_key` (None: not one of ours)."""
    mark, body = name[:1], name[1:]
    try:
        if mark == b"s":
            return body.decode("utf-8"), True
        if mark == b"b":
            return body, True
        if mark == b"i":
            return int(body), True
        if mark == b"f":
            return float(body), True
    except ValueError:  # UnicodeDecodeError included: written by someone else
        return None
    if mark == b"p":
        return body, False
    return None


def encode_tag(tag: Any) -> bytes:
    """A tag's stored spelling: a type mark, then the tag (empty for None)."""
    if tag is None:
        return b""
    kind = type(tag)
    if kind is str:
        text: str = tag
        return b"s" + text.encode("utf-8")
    if kind is bytes:
        data: bytes = tag
        return b"b" + data
    if kind is int or kind is bool:
        return b"i%d" % tag
    if kind is float:
        return b"f" + repr(tag).encode()
    raise TypeError(f"a tag must be str, bytes, int or float, not {kind.__name__}")


def decode_tag(data: bytes) -> Any:
    """A tag from its stored spelling (`encode_tag`; empty: None)."""
    if not data:
        return None
    mark, body = data[:1], data[1:]
    if mark == b"s":
        return body.decode("utf-8")
    if mark == b"b":
        return body
    if mark == b"i":
        return int(body)
    return float(body)


def tag_fields(tag: Any) -> list[bytes]:
    """Every tag field (its length, then its encoded form) of a tag that SQLite finds equal to
    `tag`, for `_EVICT_TAG`: SQLite compares an INTEGER and a REAL by their values (exactly),
    so ``1``, ``1.0`` and ``True`` (stored as 1) are one tag, and ``0.0`` and ``-0.0`` are ``0``.
    A stored tag keeps its own spelling (``get(tag=True)`` returns it as it was set, as SQLite
    does); only the comparison takes them all."""
    spellings = [encode_tag(tag)]
    kind = type(tag)
    if kind is int or kind is bool:
        number = float(tag)  # exact for the tags a float equals; int64 tags never overflow
        if number == tag:
            spellings.append(encode_tag(number))
            if not number:
                spellings.append(encode_tag(-0.0))
    elif kind is float and tag.is_integer():
        if -_INT64 <= tag < _INT64:
            spellings.append(encode_tag(int(tag)))
        if not tag:
            spellings.append(encode_tag(-tag))
    return [struct.pack(">H", len(data)) + data for data in dict.fromkeys(spellings)]


def canonical_tag(tag: Any) -> bytes:
    """One spelling for all the tags SQLite finds equal to `tag` (a checked tag, not None):
    ``1``, ``1.0`` and ``True`` are ``i1``, ``0.0`` and ``-0.0`` are ``i0`` (see `tag_fields`).
    It names the tag's set of items in Redis."""
    if type(tag) is float and tag.is_integer() and -_INT64 <= tag < _INT64:
        return encode_tag(int(tag))
    if type(tag) is bool:
        return encode_tag(int(tag))
    return encode_tag(tag)


def encode_item(mode: int, db_value: Any, expire_time: float | None, tag: Any) -> bytes:
    """The stored form of an item (`db_value`: an inline column value of `mode`)."""
    kind = type(db_value)
    if kind is bytes:
        mark, body = b"b", db_value
    elif kind is str:
        mark, body = b"s", db_value.encode("utf-8")
    elif kind is int:
        mark, body = b"i", b"%d" % db_value
    elif kind is float:
        mark, body = b"f", repr(db_value).encode()
    else:
        raise TypeError(f"cannot store a column value of type {kind.__name__} remotely")
    tag_data = encode_tag(tag)
    header = _HEADER.pack(
        _FORMAT, mode, mark[0], _NO_EXPIRY if expire_time is None else expire_time, len(tag_data)
    )
    return b"".join((header, tag_data, body))


def decode_item(data: bytes) -> Item:
    """An item from its stored form; RemoteError when it is not one this library wrote."""
    try:
        version, mode, mark, expires, tag_length = _HEADER.unpack_from(data)
    except struct.error:
        raise RemoteError("a remote value that this library did not write") from None
    if version != _FORMAT:
        raise RemoteError(f"a remote value of unknown format {version}")
    start = _HEADER.size + tag_length
    tag = decode_tag(data[_HEADER.size:start])
    body = data[start:]
    db_value: Any
    if mark == 98:  # b
        db_value = body
    elif mark == 115:  # s
        db_value = body.decode("utf-8")
    elif mark == 105:  # i
        db_value = int(body)
    else:
        db_value = float(body)
    return Item(mode, db_value, None if expires != expires else expires, tag)


def expiry_header(expire_time: float | None) -> bytes:
    """The 8 expiry bytes of the header (`_TOUCH` writes them)."""
    return struct.pack(">d", _NO_EXPIRY if expire_time is None else expire_time)


def stamp_hash(name: bytes) -> int:
    """The hash that places a Redis name (without prefix) in a stamp bucket."""
    return zlib.crc32(name)


def serialized(
    disk: Disk, native_numbers: bool, directory: str, key: Any, value: Any, read: bool
) -> tuple[int, Any]:
    """``(mode, inline value)`` of a value for Redis: never a value file (a value the Disk
    writes to one in `directory` is read back from it, and the file removed). `native_numbers`:
    the Disk stores and fetches as the standard one does (numbers, text, bytes as they are)."""
    if read:
        read_chunk = getattr(value, "read", None)
        if read_chunk is None:
            raise TypeError(f"read=True needs a binary file object, not {type(value).__name__}")
        return MODE_BINARY, read_chunk()
    if native_numbers:
        kind = type(value)
        if kind is bytes or kind is str or (kind is float and value == value) or (
            kind is int and -_INT64 <= value < _INT64
        ):
            if kind is str:
                value.encode("utf-8")  # lone surrogates: UnicodeEncodeError, as SQLite
            return MODE_RAW, value
        return MODE_PICKLE, disk._dumps(value)  # noqa: SLF001 - the Disk's own pickling
    size, mode, filename, db_value = disk.store(value, False, key=key)
    if filename is None:
        return mode, db_value
    path = os.path.join(directory, filename)
    try:
        with open(path, "rb") as handle:
            return mode, handle.read()
    finally:
        disk.remove(path)
