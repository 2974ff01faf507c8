"""Serialization: keys to database keys, values to inline columns or value files.

A `Disk` turns a key into ``(db_key, raw)`` and a value into ``(size, mode, filename, db_value)``,
and back. The interface (``put/get/store/fetch/filename/remove/hash``) is python-diskcache's, so
custom Disk subclasses written for it keep working.

Modes: the low four bits say what the bytes are (raw column value, binary, UTF-8 text, pickle);
the next four name the compressor, if any. Value files are written under a temporary name and
renamed into place, so a file a row names is always complete (invariant 1).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import os.path as op
import pickle
import pickletools
import stat
import struct
import zlib
from typing import Any, Iterable, TypeVar

from .._arguments import check_text, whole_number
from .codecs import CODEC_NAMES_BY_ID, check_compress_level, codec_named
from .derived import derive
from .._errors import DiskCacheError, DiskFullError, UnsafeValueFileError
from .ownership import PRIVATE, Ownership
from .valuefiles import (
    FULL_DISK_ERRNOS,
    OPEN_RETRIES,
    READ_FLAGS,
    VALUE_SUFFIX,
    WRITE_FLAGS,
    ValueDir,
    is_link,
    split_value_name,
    write_chunks,
)

__all__ = [
    "Constant",
    "Disk",
    "ENOVAL",
    "JSONDisk",
    "MODE_BINARY",
    "MODE_NONE",
    "MODE_PICKLE",
    "MODE_RAW",
    "MODE_TEXT",
    "UNKNOWN",
    "CutShortValueFile",
    "UNSTORABLE",
    "as_read_back",
    "check_disk_class",
    "is_value_mode",
    "unsupported_key",
]


class Constant(tuple[str]):
    """A named sentinel that pickles and compares by identity of name (python-diskcache's shape)."""

    def __new__(cls, name: str) -> "Constant":
        return tuple.__new__(cls, (name,))

    def __repr__(self) -> str:
        return self[0]


ENOVAL = Constant("ENOVAL")
UNKNOWN = Constant("UNKNOWN")
# What a read-modify-write function returns to leave the item as it is, or to delete it.
KEEP = Constant("KEEP")
DELETE = Constant("DELETE")

MODE_NONE = 0
MODE_RAW = 1
MODE_BINARY = 2
MODE_TEXT = 3
MODE_PICKLE = 4
_BASE_MODE_MASK = 0x0F
_CODEC_SHIFT = 4

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_CHUNK_SIZE = 2**22


def is_value_mode(mode: int) -> bool:
    """True for a mode `Disk.fetch` decodes: raw, or binary, text or pickle (each compressed
    by a compressor this library knows, or not)."""
    codec_id = mode >> _CODEC_SHIFT
    return mode == MODE_RAW or (
        MODE_BINARY <= mode & _BASE_MODE_MASK <= MODE_PICKLE
        and (not codec_id or codec_id in CODEC_NAMES_BY_ID)
    )


# --- Disk ----------------------------------------------------------------------------------


_OPTION = "Disk option"


D = TypeVar("D", bound="Disk")

class Disk:
    """Cache key and value serialization for the SQLite database and value files.

    Native ``int`` (64-bit), ``float``, ``str`` and ``bytes`` are stored as they are; other
    objects are pickled. Values whose serialized size reaches `min_file_size` go to a value file.
    With `compress` (``'zlib'``, ``'zstd'`` or ``'lz4'``), serialized values of at least
    `compress_threshold` bytes are compressed when that makes them smaller.
    """

    #: Modes and owner of the value files and directories it makes: set by the Cache from its
    #: database file (see _ownership); owner-only by default.
    ownership: Ownership = PRIVATE
    #: What `Cache.get` does with an entry it finds but cannot read back: ``'raise'`` the
    #: error, or ``'miss'`` (see `with_options`).
    on_error: str = "raise"

    @classmethod
    def with_options(cls: type[D], *, on_error: str) -> type[D]:
        """A subclass of this Disk type with `on_error`, to pass as ``disk=``.

        With ``on_error='miss'``, an entry that ``get`` (``cache[key]``, ``read``) finds but
        cannot read back — a corrupt pickle, a class that no longer exists, a pickle SafeDisk
        refuses, a value file that is not valid text — is deleted and read as missing (on a
        read-only cache only read as missing); the first of each cache is logged as a warning
        on the ``diskcache_core`` logger. A missing value file is a miss anyway; `OSError`,
        `MemoryError` and `RecursionError` are raised. As in diskcache-community.
        """
        if on_error not in ("raise", "miss"):
            raise ValueError(f"on_error must be 'raise' or 'miss', not {on_error!r}")
        return derive(cls, {"on_error": on_error})

    def __init__(
        self,
        directory: str,
        min_file_size: int = 0,
        pickle_protocol: int = 0,
        compress: str | None = None,
        compress_level: int | None = None,
        compress_threshold: int = 1024,
    ) -> None:
        # Checked here, as a Cache checks its disk_* settings: a Disk made directly with a bad
        # option would otherwise fail later, at some write or read, with an unrelated error.
        self._directory = directory
        self._real_directory = op.realpath(directory)
        self.min_file_size = whole_number("min_file_size", min_file_size, what=_OPTION)
        self.pickle_protocol = whole_number(
            "pickle_protocol", pickle_protocol, -1, pickle.HIGHEST_PROTOCOL, what=_OPTION
        )
        self.compress = compress
        # A subclass written the python-diskcache way sets its own ``compress_level`` (say, for
        # its JSON compression) before calling this: when none is given here, it stays.
        if compress_level is not None or not hasattr(self, "compress_level"):
            if compress_level is not None:
                compress_level = whole_number("compress_level", compress_level, None, what=_OPTION)
                check_compress_level(compress, compress_level, f"{_OPTION} 'compress_level'")
            self.compress_level = compress_level
        self.compress_threshold = whole_number("compress_threshold", compress_threshold, what=_OPTION)

    # `compress` is a property so that Cache.reset('disk_compress', ...) revalidates it.
    @property
    def compress(self) -> str | None:
        """Name of the compressor for new values, or None."""
        return self._codec.name if self._codec is not None else None

    @compress.setter
    def compress(self, name: str | None) -> None:
        self._codec = None if name is None else codec_named(name)

    # -- keys --

    def hash(self, key: Any) -> int:
        """A portable 64-bit hash of `key`: the same in every process and Python version.

        Keys that the database treats as equal hash equally (``1`` and ``1.0``).
        """
        db_key, raw = self.put(key)
        kind = type(db_key)
        if kind is float and db_key.is_integer() and _INT64_MIN <= db_key <= _INT64_MAX:
            db_key, kind = int(db_key), int
        if kind is bytes or kind is memoryview or kind is bytearray:  # (sqlite3.Binary)
            data = (b"b" if raw else b"p") + bytes(db_key)
        elif kind is str:
            data = b"s" + db_key.encode("utf-8")
        elif kind is int:
            data = b"i" + struct.pack("<q", db_key)
        elif kind is float:
            data = b"f" + struct.pack("<d", db_key)
        else:
            raise unsupported_key(db_key)
        return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")

    def put(self, key: Any) -> tuple[Any, bool]:
        """Convert `key` to the ``(db_key, raw)`` pair stored in the Cache table."""
        kind = type(key)
        if kind is bytes or kind is str or kind is float:
            return key, True
        if kind is int and _INT64_MIN <= key <= _INT64_MAX:
            return key, True
        data = self._dumps(key, "key")
        return pickletools.optimize(data), False

    def get(self, key: Any, raw: bool) -> Any:
        """Convert a ``(db_key, raw)`` pair from the Cache table back to the key."""
        if raw:
            return key
        return self._loads(key)

    # -- values --

    def store(self, value: Any, read: bool, key: Any = UNKNOWN) -> tuple[int, int, str | None, Any]:
        """Convert `value` to ``(size, mode, filename, db_value)`` for the Cache table.

        `size` is the number of bytes in the value file (0 for inline values). With `read`,
        `value` is a binary file object whose contents are streamed into a value file.
        """
        kind = type(value)
        if kind is bytes or kind is str:
            if len(value) < self.min_file_size and (
                self._codec is None or len(value) < self.compress_threshold
            ):
                return 0, MODE_RAW, None, value
            if kind is bytes:
                return self._store_serialized(value, MODE_BINARY, key, value)
            try:
                data = value.encode("utf-8")
            except UnicodeEncodeError:
                check_text("value", value)  # ValueError naming the value (lone surrogates)
                raise
            return self._store_serialized(data, MODE_TEXT, key, value)
        if kind is float:
            if value == value:
                return 0, MODE_RAW, None, value
            # NaN: SQLite would store NULL (None for every other process); pickled, it reads
            # back as NaN everywhere.
            return self._store_serialized(self._dumps(value), MODE_PICKLE, key, value)
        if kind is int and _INT64_MIN <= value <= _INT64_MAX:
            return 0, MODE_RAW, None, value
        if read:
            read_chunk = getattr(value, "read", None)
            if read_chunk is None:
                raise TypeError(f"read=True needs a binary file object, not {kind.__name__}")
            filename, full_path = self.filename(key, value)
            size = self._write(full_path, iter(lambda: read_chunk(_CHUNK_SIZE), b""))
            return size, MODE_BINARY, filename, None
        return self._store_serialized(self._dumps(value), MODE_PICKLE, key, value)

    def _store_serialized(
        self, data: bytes, mode: int, key: Any, value: Any
    ) -> tuple[int, int, str | None, Any]:
        codec = self._codec
        if codec is not None and len(data) >= self.compress_threshold:
            packed = codec.compress(data, self.compress_level)
            if len(packed) < len(data):
                data = packed
                mode |= codec.codec_id << _CODEC_SHIFT
        if len(data) < self.min_file_size:
            if mode == MODE_BINARY or mode == MODE_TEXT:
                return 0, MODE_RAW, None, value  # uncompressed after all: the native column value
            return 0, mode, None, data
        filename, full_path = self.filename(key, value)
        size = self._write(full_path, (data,))
        return size, mode, filename, None

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        """Convert ``(mode, filename, db_value)`` from the Cache table back to the value.

        With `read`, bytes values come back as a binary file object (a value file's is named
        by its path, ``.name``). Raises FileNotFoundError when the value file is gone (the item
        was replaced meanwhile), and a subclass of it when `value`, for a value file, is an int
        (the row's size: what the cache's gets pass) that the file's length is not (cut short
        by a power loss, or by hand): it is not read.
        """
        if mode == MODE_RAW:
            if read and type(value) is bytes:
                return io.BytesIO(value)
            return value
        base = mode & _BASE_MODE_MASK
        codec_id = mode >> _CODEC_SHIFT
        if filename is not None:
            size = value if type(value) is int else None
            if read and base == MODE_BINARY and not codec_id:
                raw = io.FileIO(self._open_value_file(filename, size), "rb")
                # Named by its path, as python-diskcache's reader is (callers use .name).
                raw.name = op.join(self._directory, filename)
                return io.BufferedReader(raw)
            data = self._read_file(filename, size)
        else:
            data = value
        if codec_id:
            data = self._decompress(codec_id, data)
        if base == MODE_BINARY:
            if type(data) is not bytes and not isinstance(data, (bytearray, memoryview)):
                # A row naming neither a value file nor inline bytes (damaged): not a value.
                raise DiskCacheError(f"a row of mode {mode} names no value file and holds no bytes")
            return io.BytesIO(data) if read else data
        if base == MODE_TEXT:
            return data.decode("utf-8")
        if base == MODE_PICKLE:
            return self._loads(data)
        raise DiskCacheError(f"unknown value mode {mode} in the cache database")

    # -- files --

    def filename(self, key: Any = UNKNOWN, value: Any = UNKNOWN) -> tuple[str, str]:
        """A new random value-file name (two fan-out directory levels) and its full path."""
        hex_name = os.urandom(16).hex()
        filename = op.join(hex_name[:2], hex_name[2:4], hex_name[4:] + VALUE_SUFFIX)
        return filename, op.join(self._directory, filename)

    def remove(self, file_path: str) -> None:
        """Remove value file `file_path` (relative) and prune its emptied directories.

        Safe across threads and processes: a file or directory already gone is not an error.
        Anything but a value-file name (see `split_value_name`) or a path through a symbolic
        link raises UnsafeValueFileError and removes nothing.
        """
        parts = split_value_name(file_path)
        with ValueDir(self._directory, parts, file_path) as levels:
            try:
                levels.open(create=False)
            except FileNotFoundError:
                return  # gone, directories and all
            try:
                levels.unlink(parts[-1])
            except FileNotFoundError:
                pass
            levels.prune()

    def _checked_path(self, filename: str, root: str | None = None) -> str:
        """Full path (in the resolved cache directory, or `root`: the directory resolved now,
        should a link on the way have changed since) of value file `filename`.

        UnsafeValueFileError for anything but a value-file name, or when a level on the way or
        the file itself is a symbolic link (each is lstat-checked; `_open_value_file` opens
        one without that check-then-use race). A missing level is left to the caller's open.
        """
        parts = split_value_name(filename)
        path = root = self._real_directory if root is None else root
        for depth, name in enumerate(parts):
            path = op.join(path, name)
            try:
                status = os.lstat(path)
            except OSError:
                return op.join(root, *parts)
            if is_link(status):
                raise UnsafeValueFileError(
                    f"refusing value file {filename!r}: {op.join(*parts[: depth + 1])!r} in the"
                    " cache directory is a symbolic link; links below the cache directory are"
                    " never followed (check(fix=True) removes them)"
                )
        return path

    def _open_value_file(self, filename: str, size: int | None = None) -> int:
        """A read-only descriptor of value file `filename`, opened level by level without
        following a link. UnsafeValueFileError for a bad name, a link, or not a regular file;
        FileNotFoundError when it is gone, or (CutShortValueFile) not `size` bytes long."""
        parts = split_value_name(filename)
        with ValueDir(self._directory, parts, filename) as levels:
            levels.open(create=False)
            fd = levels.open_file(parts[-1], READ_FLAGS)
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise UnsafeValueFileError(f"refusing value file {filename!r}: not a regular file")
            if size is not None and status.st_size != size:
                raise CutShortValueFile(
                    f"value file {filename!r} is {status.st_size} bytes, its row says {size}:"
                    " damaged (a power loss, a hand edit), read as missing"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _read_file(self, filename: str, size: int | None = None) -> bytes:
        """The bytes of value file `filename` (never read through a link, see `_open_value_file`)."""
        with open(self._open_value_file(filename, size), "rb", buffering=0) as reader:
            return reader.readall()

    def _write(self, full_path: str, chunks: Iterable[bytes]) -> int:
        """Write `chunks` to value file `full_path` atomically (a temporary name, then a rename)
        and return the size.

        Every level below the cache directory is opened without following a link (made 0700 if
        missing), so nothing is ever written outside it: a link raises UnsafeValueFileError. On
        failure the temporary file goes, and so do the fan-out directories left empty (a full
        disk must not leave hundreds behind); a full disk raises DiskFullError, an OSError.
        """
        parts = self._relative_parts(full_path)
        temp_name = parts[-1] + ".tmp"
        ownership = self.ownership
        levels = ValueDir(self._directory, parts, full_path, ownership)
        fd = -1
        try:
            for attempt in range(OPEN_RETRIES):
                try:
                    levels.open(create=True)
                    fd = levels.open_file(temp_name, WRITE_FLAGS)
                    if not ownership.is_private:
                        ownership.apply(fd)  # the database file's modes and owner
                    break
                except FileNotFoundError:
                    # A remover pruned a level after we opened it (maybe between our mkdirs):
                    # open, and make, them all again.
                    if attempt == OPEN_RETRIES - 1:
                        raise
                    levels.close()
            try:
                size = write_chunks(fd, chunks)
            finally:
                os.close(fd)
            levels.rename(temp_name, parts[-1])
            return size
        except BaseException as exc:
            if fd != -1:
                try:
                    levels.unlink(temp_name)
                except OSError:
                    pass
            levels.prune()
            if isinstance(exc, OSError) and not isinstance(exc, DiskFullError):
                reason = FULL_DISK_ERRNOS.get(exc.errno or 0)
                if reason is not None:
                    raise DiskFullError(
                        exc.errno, f"{reason} while writing value file {full_path!r} ({exc.strerror})"
                    ) from exc
            raise
        finally:
            levels.close()

    def _relative_parts(self, full_path: str) -> list[str]:
        """The checked components of `full_path` below the cache directory, as `filename` made it."""
        directory = self._directory
        if type(directory) is str:  # the common case, without op.join's cost on the set path
            prefix = directory if directory.endswith(os.sep) else directory + os.sep
            if full_path.startswith(prefix):
                return split_value_name(full_path[len(prefix) :])
        for base in (directory, self._real_directory):
            prefix = op.join(base, "")
            if full_path.startswith(prefix):
                return split_value_name(full_path[len(prefix) :])
        raise UnsafeValueFileError(
            f"refusing to write value file {full_path!r}: not inside the cache directory"
            f" {self._directory!r}"
        )

    # -- pickling --

    def _dumps(self, obj: Any, what: str = "value") -> bytes:
        """Pickle `obj`, a key or value as `what` says (SafeDisk's refusals name which)."""
        try:
            return pickle.dumps(obj, protocol=self.pickle_protocol)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise TypeError(f"cannot serialize {type(obj).__qualname__} object: {exc}") from exc

    def _loads(self, data: bytes) -> Any:
        return pickle.loads(data)

    @staticmethod
    def _decompress(codec_id: int, data: bytes) -> bytes:
        name = CODEC_NAMES_BY_ID.get(codec_id)
        if name is None:
            raise DiskCacheError(f"unknown compressor id {codec_id} in the cache database")
        decompress = codec_named(name).decompress
        try:
            return decompress(data)
        except Exception as exc:  # zlib.error, zstandard.ZstdError, lz4's RuntimeError
            raise DiskCacheError(f"a {name}-compressed value is damaged: {exc}") from exc


class JSONDisk(Disk):
    """Keys and values as JSON, compressed with zlib at `compress_level` (-1 to 9; 1 is fastest).

    JSON keeps data readable by other languages and never runs code on load; tuples come back
    as lists.
    """

    def __init__(self, directory: str, compress_level: int = 1, **kwargs: Any) -> None:
        super().__init__(directory, **kwargs)
        # python-diskcache's meaning: the zlib level of the JSON (also used by `compress`).
        if compress_level is not None:
            compress_level = whole_number("compress_level", compress_level, None, what=_OPTION)
            check_compress_level("zlib", compress_level, f"JSONDisk's {_OPTION} 'compress_level'")
            check_compress_level(self.compress, compress_level, f"{_OPTION} 'compress_level'")
        self.compress_level = compress_level

    @property
    def json_level(self) -> int:
        """The zlib level for the JSON text: `compress_level`, 1 when unset."""
        return 1 if self.compress_level is None else self.compress_level

    def _pack(self, obj: Any) -> bytes:
        try:
            text = json.dumps(obj)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"JSONDisk cannot serialize {type(obj).__qualname__}: {exc}") from exc
        return zlib.compress(text.encode("utf-8"), self.json_level)

    @staticmethod
    def _unpack(data: bytes) -> Any:
        return json.loads(zlib.decompress(data).decode("utf-8"))

    def put(self, key: Any) -> tuple[Any, bool]:
        return super().put(self._pack(key))

    def get(self, key: Any, raw: bool) -> Any:
        if type(key) is int:  # a queue key (push stores integers as they are): never packed
            return key
        return self._unpack(super().get(key, raw))

    def store(self, value: Any, read: bool, key: Any = UNKNOWN) -> tuple[int, int, str | None, Any]:
        if not read:
            value = self._pack(value)
        return super().store(value, read, key=key)

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        data = super().fetch(mode, filename, value, read)
        if read:
            return data
        return self._unpack(data)


def unsupported_key(db_key: Any) -> TypeError:
    """The error for a key that a Disk's ``put`` stored as another type than SQLite keys by."""
    return TypeError(
        f"the Disk stored a key as {type(db_key).__name__}: Disk.put must return a str, bytes,"
        " int or float key"
    )


class CutShortValueFile(FileNotFoundError):
    """A value file whose length is not its row's size: read as missing, as a lost one is."""


class _NotADiskClass(TypeError, ValueError):
    """A `disk` argument that is not a Disk subclass: a TypeError, and a ValueError as
    python-diskcache raises, so that code written for either catches it."""


UNSTORABLE: Any = object()  # `as_read_back`: a value SQLite cannot store in a column


def as_read_back(db_value: Any) -> Any:
    """What the database gives back for `db_value`, a value column a Disk's ``store`` made (so
    what its ``fetch`` sees there): bytes for any buffer (``sqlite3.Binary``), a plain int,
    float or str for their subclasses (bool, enums), None for NaN; `UNSTORABLE` otherwise."""
    kind = type(db_value)
    if kind is bytes or kind is str or kind is int or db_value is None:
        return db_value
    if isinstance(db_value, (memoryview, bytearray)):
        return bytes(db_value)
    if isinstance(db_value, float):
        return None if db_value != db_value else float(db_value)
    if isinstance(db_value, int):
        return int(db_value)
    if isinstance(db_value, str):
        return str(db_value)
    return UNSTORABLE


def check_disk_class(disk: Any) -> None:
    """`disk` (of Cache and FanoutCache) must be Disk or a subclass, not an instance."""
    if not (isinstance(disk, type) and issubclass(disk, Disk)):
        raise _NotADiskClass(f"disk must be a subclass of diskcache_core.Disk, not {disk!r}")
