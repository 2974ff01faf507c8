"""The writer side of the memory tier's version protocol: what a write does to the version words.

The version words (`versionfile`) hold, for each key-hash bucket, two words ``pre`` and ``post``;
the reader side (which entries may be answered, which reads may fill) is the memory tier's
(_memory/tier.py, and docs/memory.rst for the whole protocol). Here: the bucket of a key
(`pre_index`), the SQL function the version triggers call inside every writing statement
(`change_recorder`), and what follows the commit (`publish`). They live with the store because
the store's connections install them and its after-commit hook runs them: the store never needs
the tier above it.

Writers. Every statement that inserts, changes (value or expiry) or deletes a row fires a
  per-connection TEMP trigger (`creation.VERSION_TRIGGERS`) that calls `change_recorder`'s
  function with the row's key. That runs inside the statement, so under SQLite's write lock:
  writers' stores to ``pre`` are serialized. It stores a fresh random nonce ``n`` in the key's
  bucket's ``pre`` and remembers ``(bucket, n)`` in the thread's `Transaction` record. After the
  transaction has committed (or rolled back), `publish` stores ``post = n`` if ``pre`` is still
  ``n`` (otherwise a later writer has already started, and its own ``post`` will follow).
"""

from __future__ import annotations

import math
import os
import random
import zlib
from collections.abc import Callable
from typing import Any

from .._errors import note_interrupt
from .versionfile import BUCKETS, HEADER_WORDS, LOST_WORDS

__all__ = ["change_recorder", "pre_index", "publish"]

_HEADER_WORDS = HEADER_WORDS
_MASK = BUCKETS - 1

_crc32 = zlib.crc32
# Nonces: 64 random bits, seeded from os.urandom (reseeded in a forked child: never the same).
_random = random.Random(os.urandom(32))


def pre_index(db_key: Any) -> int | None:
    """Index of the ``pre`` word of `db_key`'s bucket (``post`` follows it), or None when keys
    of this type are not kept in memory.

    The same in every process and Python version, and equal for keys the database treats as
    equal: integers and floats hash by their float value (SQLite compares them numerically), so
    ``1`` and ``1.0`` share a bucket. Text and blobs hash by CRC-32 of their bytes.
    """
    kind = type(db_key)
    if kind is str:
        try:
            code = _crc32(db_key.encode())
        except UnicodeEncodeError:  # lone surrogates: SQLite cannot store them anyway
            code = _crc32(db_key.encode("utf-8", "surrogatepass"))
    elif kind is bytes or kind is bytearray or kind is memoryview:
        code = _crc32(db_key)
    elif isinstance(db_key, (int, float)):
        try:
            number = float(db_key)
        except OverflowError:
            return None
        if math.isnan(number):
            return None  # NaN: SQLite stores it as NULL, which matches no key
        code = hash(number)  # numeric hashes are not randomized (unlike str and bytes)
    else:
        return None
    return _HEADER_WORDS + 2 * (code & _MASK)


def _stored_key_index(db_key: Any) -> int:
    # A key as SQLite hands it to the trigger: int, float, str, bytes, or None (a NaN key).
    index = pre_index(db_key)
    return _HEADER_WORDS if index is None else index


def change_recorder(txn: Any, source: Any, inserts: Any = None) -> Callable[[Any], None]:
    """The SQL function the version triggers call with a changed row's key.

    Runs inside the writing statement, under the write lock: stores a fresh nonce in the bucket's
    ``pre`` and remembers it in ``txn.versions`` (for `publish`; `txn`: the connection's
    `Transaction` record). A bucket already bumped by
    this thread's open transaction is not bumped again: its ``post`` cannot equal ``pre`` before
    the transaction ends, so no reader can have filled from it meanwhile. `source` holds the
    words (a `WordsCell`). `inserts`: the insert trigger's function, which also notes the
    insert (``inserts.inserted = True``: the connection's `ThreadState`) in the same call.
    """
    getrandbits = _random.getrandbits
    crc32 = _crc32
    header, mask = _HEADER_WORDS, _MASK

    def item_changed(db_key: Any) -> None:
        try:
            if inserts is not None:
                inserts.inserted = True
            words = source.words  # source.writable, inline: this runs inside every write
            if words is LOST_WORDS or words is None:
                words = source.writable(txn)  # mapped anew now, or an error
            if type(db_key) is str:  # the common case, inline
                try:
                    index = header + 2 * (crc32(db_key.encode()) & mask)
                except UnicodeEncodeError:
                    index = _stored_key_index(db_key)
            else:
                index = _stored_key_index(db_key)
            versions = txn.versions
            nonce = versions.get(index)
            if nonce is None or words[index] != nonce:
                nonce = getrandbits(64) | 1  # never 0, the value of a new file
                words[index] = nonce
                versions[index] = nonce
        except BaseException as exc:  # a signal handler's, say: see _errors.note_interrupt
            note_interrupt(exc)
            raise

    return item_changed


def publish(words: memoryview, versions: dict[int, int]) -> None:
    """After the transaction that made `versions` has ended: ``post = pre`` where ``pre`` is
    still ours (otherwise a later writer has started, and it will publish)."""
    for index, nonce in versions.items():
        if words[index] == nonce:
            words[index + 1] = nonce


def _after_fork_in_child() -> None:
    _random.seed(os.urandom(32))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
