"""Compressors of serialized values: zlib, and zstd and lz4 where installed; their levels.

Each has an id, stored in a value's mode bits (see _disk), so a value is decompressed by the
compressor that made it, whatever the Disk is set to now. The optional ones are imported on
first use only.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, cast

from .._errors import DiskCacheError

__all__ = [
    "CODEC_FACTORIES",
    "CODEC_NAMES_BY_ID",
    "COMPRESS_LEVELS",
    "Codec",
    "check_compress_level",
    "codec_named",
]


class Codec:
    """One compressor: an id stored in the mode bits, and its two functions."""

    def __init__(
        self,
        name: str,
        codec_id: int,
        compress: Callable[[bytes, int | None], bytes],
        decompress: Callable[[bytes], bytes],
    ) -> None:
        self.name = name
        self.codec_id = codec_id
        self.compress = compress
        self.decompress = decompress


def _zlib_codec() -> Codec:
    return Codec(
        "zlib",
        1,
        lambda data, level: zlib.compress(data, -1 if level is None else level),
        zlib.decompress,
    )


def _zstd_codec() -> Codec:
    import zstandard  # optional dependency, imported only when asked for

    decompressor = zstandard.ZstdDecompressor()

    def compress(data: bytes, level: int | None) -> bytes:
        # With a checksum of the content, a damaged frame is an error, never a wrong value.
        level = 3 if level is None else level
        return zstandard.ZstdCompressor(level=level, write_checksum=True).compress(data)

    return Codec("zstd", 2, compress, decompressor.decompress)


def _lz4_codec() -> Codec:
    import lz4.frame  # optional dependency, imported only when asked for

    def compress(data: bytes, level: int | None) -> bytes:
        # lz4 ships no type information: its compress is typed here, where it is called.
        level = 0 if level is None else level
        return cast(bytes, lz4.frame.compress(data, compression_level=level, content_checksum=True))

    return Codec("lz4", 3, compress, lz4.frame.decompress)


CODEC_FACTORIES: dict[str, tuple[int, Callable[[], Codec], str]] = {
    "zlib": (1, _zlib_codec, "the standard library"),
    "zstd": (2, _zstd_codec, "pip install zstandard"),
    "lz4": (3, _lz4_codec, "pip install lz4"),
}
CODEC_NAMES_BY_ID = {codec_id: name for name, (codec_id, _, _) in CODEC_FACTORIES.items()}
_loaded_codecs: dict[str, Codec] = {}


def codec_named(name: str) -> Codec:
    """The codec called `name`, imported on first use, with a clear error when unavailable."""
    codec = _loaded_codecs.get(name)
    if codec is None:
        try:
            _, factory, install = CODEC_FACTORIES[name]
        except KeyError:
            choices = ", ".join(sorted(CODEC_FACTORIES))
            raise ValueError(f"unknown compressor {name!r}; choose one of: {choices}") from None
        try:
            codec = factory()
        except ImportError as exc:
            raise DiskCacheError(f"compressor {name!r} is not installed ({install})") from exc
        _loaded_codecs[name] = codec
    return codec


# Each compressor's levels (zstd's negative ones are its fast levels); with none chosen yet, a
# level any of them takes. A level the compressor refuses would fail every later write.
COMPRESS_LEVELS = {"zlib": range(-1, 10), "zstd": range(-(2**17), 23), "lz4": range(0, 17)}
_ANY_LEVEL = range(
    min(r.start for r in COMPRESS_LEVELS.values()), max(r.stop for r in COMPRESS_LEVELS.values())
)


def check_compress_level(
    compress: Any, level: Any, name: str = "setting 'disk_compress_level'"
) -> None:
    """ValueError unless `level` (None: the default) is a level of compressor `compress`.

    Checked wherever both are known: they may be given apart, or one given and one stored.
    """
    levels = COMPRESS_LEVELS.get(compress, _ANY_LEVEL)
    if level is not None and level not in levels:
        codec = f" with compressor {compress!r}" if compress in COMPRESS_LEVELS else ""
        raise ValueError(
            f"{name} must be None or from {levels.start} to {levels.stop - 1}{codec}, not {level!r}"
        )
