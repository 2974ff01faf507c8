"""The command line's commands: each takes the parsed arguments, the open shards and an Output,
and returns the exit status (see `diskcache_core.cli` for the statuses and the parser).

Commands work across every shard of a FanoutCache directory: a keyed command tries each shard
(a key lives in exactly one), and counts and removals add up over all of them.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Any

from .._arguments import check_tag
from .._cache.cache import Cache
from .caches import (
    NOT_SETTINGS,
    Listed,
    count_expired,
    list_items,
    settings_of,
    settings_of_all,
)
from .output import Output, Progress, human_size, plain, present_key, tagged
from .._disk.disk import ENOVAL, JSONDisk
from .._errors import DiskCacheError
from .._settings import validate_setting
from .._fanout.shards import split_evenly

__all__ = [
    "COMMANDS",
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "KEY_TYPES",
    "CommandError",
    "parse_setting_value",
]

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_ERROR = 3

KEY_TYPES = ("str", "int", "float", "bytes", "hex")
# Settings whose values are always text (eviction_policy 'none' is not None).
_TEXT_SETTINGS = frozenset({"eviction_policy"})


class CommandError(Exception):
    """A command failed in a way the user should read about; carries the exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def parse_typed(text: str, kind: str, what: str) -> Any:
    """Turn command-line text into a key or tag of type `kind` (one of KEY_TYPES)."""
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "bytes":
            return text.encode("utf-8")
        if kind == "hex":
            return bytes.fromhex(text)
    except ValueError:
        raise CommandError(f"{what} {text!r} is not a valid {kind}", EXIT_USAGE) from None
    return text


def parse_setting_value(name: str, text: str) -> Any:
    """Read VALUE of ``settings NAME VALUE``: int, then float, true/false, none/null, else text."""
    if name in _TEXT_SETTINGS:
        return text
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    return text


def cmd_stats(args: argparse.Namespace, shards: list[Cache], out: Output) -> int:
    """Counts, sizes, hit and miss counters, and the first shard's settings."""
    now = time.time()
    totals = {"count": 0, "expired": 0, "size": 0, "volume": 0, "hits": 0, "misses": 0}
    settings = settings_of_all(shards)
    for shard in shards:
        _, counters = settings_of(shard)
        totals["count"] += len(shard)
        totals["size"] += counters.get("size", 0)
        totals["hits"] += counters.get("hits", 0)
        totals["misses"] += counters.get("misses", 0)
        totals["expired"] += count_expired(shard, now)
        totals["volume"] += shard.volume()
    document = {
        "directory": args.directory,
        "shards": len(shards),
        **totals,
        "eviction_policy": settings.get("eviction_policy"),
        "statistics": bool(settings.get("statistics")),
        "settings": settings,
    }
    if out.as_json:
        out.json(document)
        return EXIT_OK
    out.line(f"directory:        {args.directory}")
    if len(shards) > 1:
        out.line(f"shards:           {len(shards)}")
    out.line(f"count:            {totals['count']} items, {totals['expired']} of them expired")
    out.line(f"size:             {human_size(totals['size'])} in value files")
    out.line(f"volume:           {human_size(totals['volume'])} on disk (database and value files)")
    recording = "" if settings.get("statistics") else " (statistics are off)"
    out.line(f"hits:             {totals['hits']}{recording}")
    out.line(f"misses:           {totals['misses']}{recording}")
    out.line(f"eviction policy:  {settings.get('eviction_policy')}")
    out.line("settings:")
    for name, value in settings.items():
        out.line(f"  {name:<24}{value!r}")
    return EXIT_OK


def cmd_check(args: argparse.Namespace, shards: list[Cache], out: Output) -> int:
    """`Cache.check` on every shard; status 1 when problems were found and not fixed."""
    problems = []
    with _progress("check --fix" if args.fix else "check") as progress:
        for number, shard in enumerate(shards):
            progress.step(f"shard {number + 1} of {len(shards)}")
            for found in shard.check(fix=args.fix):
                problems.append({"category": found.category.__name__, "message": str(found.message)})
    if out.as_json:
        out.json({"problems": problems, "fixed": bool(args.fix and problems)})
    else:
        for problem in problems:
            out.line(f"{problem['category']}: {problem['message']}")
        if not problems:
            out.line("no problems found")
        elif args.fix:
            out.line(f"{len(problems)} problem(s) found and fixed")
        else:
            out.line(f"{len(problems)} problem(s) found; run with --fix to repair")
    return EXIT_NOT_FOUND if problems and not args.fix else EXIT_OK


def cmd_keys(args: argparse.Namespace, shards: list[Cache], out: Output) -> int:
    """Keys in insertion order across all shards; ``--limit`` cuts the merged list."""
    tag = ENOVAL if args.tag is None else check_tag(parse_typed(args.tag, args.tag_type, "tag"))
    if args.limit is not None and not 0 <= args.limit <= sys.maxsize:
        raise CommandError(f"--limit must be from 0 to {sys.maxsize}", EXIT_USAGE)
    items: Iterable[Listed] = list_items(shards, tag, args.expired)
    if args.limit is not None:
        items = islice(items, args.limit)
    with _progress("keys") as progress:
        items = _counted(items, progress)
        if out.as_json:
            out.json(
                [
                    {"key": present_key(item.key, True), "expire_time": item.expire_time,
                     "tag": tagged(item.tag)}
                    for item in items
                ]
            )
        else:
            for item in items:  # line by line, so ``| head`` sees keys as they are read
                out.line(present_key(item.key, False))
    return EXIT_OK


@contextmanager
def _progress(what: str) -> Iterator[Progress]:
    """A `Progress` on stderr (shown on a terminal only), cleared when the work ends."""
    progress = Progress(what, sys.stderr)
    try:
        yield progress
    finally:
        progress.done()


def _counted(items: Iterable[Listed], progress: Progress) -> Iterator[Listed]:
    for done, item in enumerate(items, 1):
        progress.count(done, "keys")
        yield item


def _each_shard(shards: list[Cache], what: str, action: Callable[[Cache], int]) -> int:
    """`action`'s results over the shards, summed, with a progress line per shard."""
    total = 0
    with _progress(what) as progress:
        for number, shard in enumerate(shards):
            progress.step(f"shard {number + 1} of {len(shards)}, {total} removed so far")
            total += action(shard)
    return total


def cmd_get(args: argparse.Namespace, shards: list[Cache], out: Output) -> int:
    """The value under KEY (its bytes with ``--raw``); status 1 when missing."""
    key = parse_typed(args.key, args.key_type, "key")
    for shard in shards:
        # A JSONDisk's file objects hold what it stored (compressed JSON), not the value.
        if args.raw and not isinstance(shard.disk, JSONDisk):
            handle = _read_value(key, lambda: shard.get(key, ENOVAL, read=True))
            if handle is ENOVAL:
                continue
            return _write_raw(handle)
        value, expire_time, tag = _read_value(
            key, lambda: shard.get(key, ENOVAL, expire_time=True, tag=True)
        )
        if value is ENOVAL:
            continue
        if args.raw:
            return _write_raw(value)
        if out.as_json:
            out.json(
                {"key": tagged(key), "found": True, "value": tagged(value),
                 "expire_time": expire_time, "tag": tagged(tag)}
            )
        else:
            out.line(plain(value))
        return EXIT_OK
    if out.as_json:
        out.json({"key": tagged(key), "found": False})
    print(f"key not found: {key!r}", file=sys.stderr)
    return EXIT_NOT_FOUND


def _read_value(key: Any, read: Callable[[], Any]) -> Any:
    """`read`'s result; CommandError (status 3) naming the key where its value cannot be decoded
    here (a class this shell cannot import, a damaged pickle, a truncated stream)."""
    try:
        return read()
    except DiskCacheError:
        raise  # (UnsafePickleError too: main explains how to allow the type)
    except (pickle.UnpicklingError, ImportError, AttributeError, EOFError, zlib.error,
            UnicodeDecodeError, json.JSONDecodeError, IndexError, KeyError) as exc:
        raise CommandError(f"cannot read the value of {key!r}: {type(exc).__name__}: {exc}") from exc


def _write_raw(value: Any) -> int:
    """``get --raw``: the value's bytes (text as UTF-8) to stdout, streamed from value files."""
    sys.stdout.flush()
    target = sys.stdout.buffer
    if hasattr(value, "read"):
        with value:
            for chunk in iter(lambda: value.read(2**20), b""):
                target.write(chunk)
    elif type(value) is str:
        target.write(value.encode("utf-8"))
    elif type(value) is bytes:
        target.write(value)
    else:
        raise CommandError(
            f"--raw needs a bytes or str value, not {type(value).__name__}", EXIT_USAGE
        )
    target.flush()
    return EXIT_OK


def cmd_delete(args: argparse.Namespace, shards: list[Cache], out: Output) -> int:
    """Remove KEY; status 1 when it was not there."""
    key = parse_typed(args.key, args.key_type, "key")
    deleted = False
    for shard in shards:
        deleted = shard.delete(key) or deleted
    if out.as_json:
        out.json({"key": tagged(key), "deleted": deleted})
    elif deleted:
        out.line(f"deleted {key!r}")
    if not deleted:
        print(f"key not found: {key!r}", file=sys.stderr)
        return EXIT_NOT_FOUND
    return EXIT_OK


def _report_removed(out: Output, removed: int, document: dict[str, Any], text: str) -> int:
    """The result of a removing command: `document` plus the count, or `text` with it."""
    if out.as_json:
        out.json({**document, "removed": removed})
    else:
        out.line(text.format(removed=removed))
    return EXIT_OK


def cmd_expire(args: argparse.Namespace, shards: list[Cache], out: Output) -> int:
    """Remove expired items."""
    removed = sum(shard.expire() for shard in shards)
    return _report_removed(out, removed, {}, "removed {removed} expired item(s)")


def cmd_evict(args: argparse.Namespace, shards: list[Cache], out: Output) -> int:
    """Remove the items carrying TAG; with several tags, those carrying any (evict_tags)."""
    texts = [*args.tags, *args.more_tags]
    if not texts:
        raise CommandError("evict needs a TAG", EXIT_USAGE)
    tags = [parse_typed(text, args.tag_type, "tag") for text in texts]
    if len(tags) == 1:
        (tag,) = tags
        removed = _each_shard(shards, "evict", lambda shard: shard.evict(tag))
        return _report_removed(
            out, removed, {"tag": tagged(tag)}, f"removed {{removed}} item(s) tagged {tag!r}"
        )
    removed = _each_shard(shards, "evict", lambda shard: shard.evict_tags(tags))
    return _report_removed(
        out, removed, {"tags": [tagged(tag) for tag in tags]},
        "removed {removed} item(s) tagged any of "
        + ", ".join(map(repr, tags)).replace("{", "{{").replace("}", "}}"),
    )


def cmd_clear(args: argparse.Namespace, shards: list[Cache], out: Output) -> int:
    """Remove every item, after a confirmation on a terminal unless ``--yes``."""
    if not args.yes:
        if not sys.stdin.isatty():
            raise CommandError(
                "refusing to clear without --yes: stdin is not a terminal to confirm on", EXIT_USAGE
            )
        count = sum(len(shard) for shard in shards)
        sys.stderr.write(f"Remove all {count} item(s) from {args.directory}? [y/N] ")
        sys.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            print("not cleared", file=sys.stderr)
            return EXIT_NOT_FOUND
    removed = _each_shard(shards, "clear", lambda shard: shard.clear())
    return _report_removed(out, removed, {}, "removed {removed} item(s)")


def cmd_settings(args: argparse.Namespace, shards: list[Cache], out: Output) -> int:
    """Show the settings, show one, or change one on every shard (through `Cache.reset`;
    ``size_limit`` is the total, split evenly over the shards as FanoutCache splits it)."""
    settings = settings_of_all(shards)
    if args.name is None:
        if out.as_json:
            out.json(settings)
        else:
            for name, value in settings.items():
                out.line(f"{name} = {value!r}")
        return EXIT_OK
    if args.value is None:
        if args.name not in settings:
            print(f"no setting named {args.name!r}", file=sys.stderr)
            return EXIT_NOT_FOUND
        value = settings[args.name]
        if out.as_json:
            out.json({"name": args.name, "value": value})
        else:
            out.line(f"{args.name} = {value!r}")
        return EXIT_OK
    value = parse_setting_value(args.name, args.value)
    try:
        if args.name in NOT_SETTINGS:  # Cache.reset stores counters too; not a setting here
            raise ValueError(f"{args.name!r} is a counter the cache keeps, not a setting")
        if args.name == "size_limit" and len(shards) > 1:
            total = validate_setting(args.name, value)
            for shard, share in zip(shards, split_evenly(total, len(shards))):
                shard.reset(args.name, share)
            value = total
        else:
            for shard in shards:
                value = shard.reset(args.name, value)
    except (TypeError, ValueError, KeyError) as exc:
        raise CommandError(f"cannot set {args.name}: {exc}", EXIT_USAGE) from None
    previous = settings.get(args.name)
    if out.as_json:
        out.json({"name": args.name, "value": value, "previous": previous})
    else:
        out.line(f"{args.name} = {value!r} (was {previous!r})")
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace, list[Cache], Output], int]] = {
    "stats": cmd_stats,
    "check": cmd_check,
    "keys": cmd_keys,
    "get": cmd_get,
    "delete": cmd_delete,
    "expire": cmd_expire,
    "evict": cmd_evict,
    "clear": cmd_clear,
    "settings": cmd_settings,
}
