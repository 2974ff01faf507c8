"""The reading commands (``stats``, ``keys``, ``get``, ``check``) on a remote's near cache,
with ``--remote URL``: the items are Redis's, the directory holds this host's copies.

No `Cache` is opened with the remote: that would join the directory's listener election and
write its stamp file. Items are read from Redis with the commands the remote tier uses (SCAN of
the prefix, GET) and decoded as it decodes them; the copies in the directory are read as rows,
read-only, as the doctor reads them. A FanoutCache's shard ``n`` uses the prefix
``<prefix><n>/`` (as `FanoutCache` makes them).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import Any

from .._arguments import check_tag
from .._cache.check import check_cache
from .caches import Unreadable, find_shard_directories, shard_prefixes
from .commands import EXIT_NOT_FOUND, EXIT_OK, CommandError, EXIT_USAGE, parse_typed
from .doctor import open_rows
from .output import Output, Progress, human_size, plain, present_key, tagged
from .._disk.disk import Disk

__all__ = ["run_remote"]


def run_remote(args: argparse.Namespace, disk_type: type[Disk], out: Output) -> int:
    """Run a reading command on a near cache with ``--remote``; its exit status."""
    if args.command not in _COMMANDS:  # (the parser gives --remote to reading commands only)
        raise CommandError(f"{args.command} does not take --remote", EXIT_USAGE)
    from .._remote.client import RemoteStore  # imports redis: only with --remote

    directories = find_shard_directories(args.directory)
    shards = []
    stores = []
    try:
        for directory, prefix in zip(directories, shard_prefixes(args.remote_prefix, len(directories))):
            shards.append(open_rows(directory, disk_type, args.timeout, args.allow_type))
            stores.append(RemoteStore(args.remote, prefix.encode("utf-8"), args.timeout))
        return _COMMANDS[args.command](args, shards, stores, out)
    except ValueError as exc:  # a URL that does not parse
        raise CommandError(str(exc), EXIT_USAGE) from None
    finally:
        for store in stores:
            store.close()
        for shard in shards:
            shard.store.pool.close_all()


def _items(stores: list[Any], disks: list[Disk], progress: Progress) -> Iterator[tuple[Any, Any]]:
    """(key, item data) of every item in Redis, in SCAN order; keys this library did not write
    are skipped, keys this shell cannot decode are `Unreadable`."""
    from .._remote.form import decode_key

    seen = 0
    for store, disk in zip(stores, disks):
        names = list(store.names())
        for start in range(0, len(names), 500):
            batch = names[start:start + 500]
            for name, data in zip(batch, store.get_many(batch)):
                decoded = decode_key(name[len(store.prefix):])
                if decoded is None or data is None:
                    continue  # not ours, or expired since the scan
                try:
                    key = disk.get(*decoded)
                except Exception as exc:  # noqa: BLE001 - shown, not fatal (as `keys` does)
                    key = Unreadable(exc)
                seen += 1
                progress.count(seen, "keys")
                yield key, data


def _keys(args: argparse.Namespace, shards: list[Any], stores: list[Any], out: Output) -> int:
    """``keys --remote``: Redis's keys (in its scan order: Redis keeps no insertion order)."""
    from .._remote.form import decode_item

    if args.limit is not None and not 0 <= args.limit <= sys.maxsize:
        raise CommandError(f"--limit must be from 0 to {sys.maxsize}", EXIT_USAGE)
    tag = None if args.tag is None else check_tag(parse_typed(args.tag, args.tag_type, "tag"))
    progress = Progress("keys", sys.stderr)
    listed: list[dict[str, Any]] = []
    shown = 0
    try:
        for key, data in _items(stores, [shard.disk for shard in shards], progress):
            if args.limit is not None and shown >= args.limit:
                break
            item = decode_item(data)
            if tag is not None and item.tag != tag:
                continue
            shown += 1
            if out.as_json:
                listed.append({"key": present_key(key, True), "expire_time": item.expire_time,
                               "tag": tagged(item.tag)})
            else:
                out.line(present_key(key, False))
    finally:
        progress.done()
    if out.as_json:
        out.json(listed)
    return EXIT_OK


def _get(args: argparse.Namespace, shards: list[Any], stores: list[Any], out: Output) -> int:
    """``get --remote``: the value Redis holds under KEY."""
    from .._remote.form import decode_item, encode_key

    key = parse_typed(args.key, args.key_type, "key")
    item = None
    number = 0
    for number, (shard, store) in enumerate(zip(shards, stores)):  # a key is in one shard
        db_key, raw = shard.disk.put(key)
        data = store.get(store.name(encode_key(db_key, 1 if raw else 0)))
        item = None if data is None else decode_item(data)
        if item is not None and (item.expire_time is None or item.expire_time > time.time()):
            break
        item = None
    if item is None:
        if out.as_json:
            out.json({"key": tagged(key), "found": False})
        print(f"key not found: {key!r}", file=sys.stderr)
        return EXIT_NOT_FOUND
    value = shards[number].disk.fetch(item.mode, None, item.db_value, False)
    if args.raw:
        from .commands import _write_raw

        return _write_raw(value)
    if out.as_json:
        out.json({"key": tagged(key), "found": True, "value": tagged(value),
                  "expire_time": item.expire_time, "tag": tagged(item.tag)})
    else:
        out.line(plain(value))
    return EXIT_OK


def _stats(args: argparse.Namespace, shards: list[Any], stores: list[Any], out: Output) -> int:
    """``stats --remote``: Redis's item count, and this host's copies."""
    progress = Progress("stats", sys.stderr)
    try:
        count = 0
        for store in stores:
            for _ in store.names():
                count += 1
                progress.count(count, "names")
    finally:
        progress.done()
    copies = sum(shard.store.read("SELECT COUNT(*) FROM Cache")[0][0] for shard in shards)
    document = {"directory": args.directory, "shards": len(shards), "remote": stores[0].url,
                "remote_prefix": args.remote_prefix, "count": count, "copies": copies,
                "settings": shards[0].settings}
    if out.as_json:
        out.json(document)
        return EXIT_OK
    out.line(f"directory:        {args.directory}")
    out.line(f"remote:           {stores[0].url} (prefix {args.remote_prefix!r})")
    if len(shards) > 1:
        out.line(f"shards:           {len(shards)}")
    out.line(f"count:            {count} items in Redis")
    out.line(f"copies:           {copies} on this host (a near cache's rows)")
    out.line(f"size limit:       {human_size(int(shards[0].settings.get('size_limit', 0)))}"
             " per shard, for the copies")
    out.line("settings (of the copies):")
    for name, value in sorted(shards[0].settings.items()):
        out.line(f"  {name:<24}{value!r}")
    return EXIT_OK


def _check(args: argparse.Namespace, shards: list[Any], stores: list[Any], out: Output) -> int:
    """``check --remote``: the copies' rows against their value files (read-only: a near cache
    is repaired by the application that opens it, or cleared)."""
    if args.fix:
        raise CommandError("check --fix does not take --remote: open the cache with its remote"
                           " (Cache(directory, remote=URL).check(fix=True))", EXIT_USAGE)
    problems = []
    progress = Progress("check", sys.stderr)
    try:
        for number, shard in enumerate(shards):
            progress.step(f"shard {number + 1} of {len(shards)}")
            for found in check_cache(shard.store, shard.disk, shard.directory):
                problems.append({"category": found.category.__name__,
                                 "message": str(found.message)})
        for store in stores:
            store.call(lambda: store.client.ping())  # (unreachable: the cache's error, status 3)
    finally:
        progress.done()
    if out.as_json:
        out.json({"problems": problems, "fixed": False})
    else:
        for problem in problems:
            out.line(f"{problem['category']}: {problem['message']}")
        out.line("no problems found" if not problems else
                 f"{len(problems)} problem(s) found in this host's copies")
    return EXIT_NOT_FOUND if problems else EXIT_OK


_COMMANDS = {"keys": _keys, "get": _get, "stats": _stats, "check": _check}
