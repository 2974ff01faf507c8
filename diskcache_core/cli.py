"""Command-line tool: inspect and maintain cache directories (``python -m diskcache_core``).

Every command takes a cache directory. The tool never creates one: ``Cache(directory)`` makes
missing directories and initialises empty databases, so `find_shard_directories` checks, with a
read-only SQLite connection, that a cache is really there before anything opens it. Caches are
opened with their stored settings only (no setting is passed), so opening rewrites nothing
(except the one-time migration of a python-diskcache database, as any open does).

Values are unpickled with SafeDisk unless ``--disk pickle`` is given: inspecting a directory
someone else can write must not run their code.

Exit codes: 0 success; 1 not found (a missing key, nothing deleted) or ``check`` found problems
it did not fix; 2 usage error or not a cache directory; 3 the cache raised an error.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import os.path as op
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from ._cache import Cache
from ._disk import ENOVAL, Disk, JSONDisk
from ._safedisk import SafeDisk
from ._errors import DiskCacheError, UnsafePickleError
from ._schema import DBNAME, METADATA, setting_name

__all__ = ["NotACacheError", "find_shard_directories", "main", "open_shards"]

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_ERROR = 3

DISKS: dict[str, type[Disk]] = {"safe": SafeDisk, "pickle": Disk, "json": JSONDisk}
KEY_TYPES = ("str", "int", "float", "bytes", "hex")
# Settings whose values are always text (eviction_policy 'none' is not None).
_TEXT_SETTINGS = frozenset({"eviction_policy"})
_PAGE = 1000  # rows per query when listing keys

# Listing reads the table directly: tags and expiry without reading (or unpickling) any value.
_LIST_KEYS = (
    "SELECT rowid, key, raw, expire_time, tag FROM Cache WHERE rowid > ?"
    " AND (? OR expire_time IS NULL OR expire_time > ?) ORDER BY rowid LIMIT ?"
)
_LIST_TAGGED_KEYS = (
    "SELECT rowid, key, raw, expire_time, tag FROM Cache WHERE tag = ? AND rowid > ?"
    " AND (? OR expire_time IS NULL OR expire_time > ?) ORDER BY rowid LIMIT ?"
)
_COUNT_EXPIRED = "SELECT COUNT(*) FROM Cache WHERE expire_time IS NOT NULL AND expire_time < ?"
_ALL_SETTINGS = "SELECT key, value FROM Settings"
# Rows of the Settings table that are not settings: the cache's counters, the schema version,
# and the item count python-diskcache kept there.
_NOT_SETTINGS = frozenset(METADATA) | {"count", "schema_version"}


class NotACacheError(Exception):
    """The directory does not hold a diskcache_core (or python-diskcache) cache."""


class CommandError(Exception):
    """A command failed in a way the user should read about; carries the exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


# --- finding and opening caches --------------------------------------------------------------


def _is_cache_database(path: str) -> bool:
    """True when `path` is an SQLite database with a cache's tables; opened read-only."""
    if not op.isfile(path) or op.getsize(path) == 0:
        return False
    try:
        con = sqlite3.connect("file:" + path + "?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return False
    try:
        names = {
            row[0]
            for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    except sqlite3.Error:
        return False
    finally:
        con.close()
    return {"Settings", "Cache"} <= names


def find_shard_directories(directory: str) -> list[str]:
    """The directories of the cache shards in `directory`, without creating or changing anything.

    A Cache directory is its own single shard; a FanoutCache directory (ours or
    python-diskcache's) holds shards ``000``, ``001``, ... each with a ``cache.db``, and every
    command then works on all of them. Its named sub-collections (``cache/``, ``deque/``,
    ``index/``) are caches of their own: point the tool at them directly. Raises
    NotACacheError when `directory` holds no cache.
    """
    if not op.exists(directory):
        raise NotACacheError(f"{directory}: no such directory")
    if not op.isdir(directory):
        raise NotACacheError(f"{directory}: not a directory")
    database = op.join(directory, DBNAME)
    if op.exists(database):
        if not _is_cache_database(database):
            raise NotACacheError(f"{directory}: {DBNAME} is not a cache database")
        return [directory]
    shards = sorted(
        op.join(directory, name)
        for name in os.listdir(directory)
        if len(name) == 3 and name.isdigit() and op.exists(op.join(directory, name, DBNAME))
    )
    if shards:
        expected = [op.join(directory, "%03d" % number) for number in range(len(shards))]
        if shards != expected:
            raise NotACacheError(f"{directory}: shard directories are not numbered 000 to {len(shards) - 1:03d}")
        for shard in shards:
            if not _is_cache_database(op.join(shard, DBNAME)):
                raise NotACacheError(f"{shard}: {DBNAME} is not a cache database")
        return shards
    raise NotACacheError(f"{directory}: not a cache directory (no {DBNAME}, no shards)")


def open_shards(directory: str, disk: type[Disk] = SafeDisk, timeout: float = 60) -> list[Cache]:
    """Open every shard of the cache in `directory` with its stored settings."""
    shards = []
    try:
        for shard_directory in find_shard_directories(directory):
            shards.append(Cache(shard_directory, timeout=timeout, disk=disk))
    except BaseException:
        for shard in shards:
            shard.close()
        raise
    return shards


# --- presenting values -----------------------------------------------------------------------


def _plain(value: Any) -> str:
    """A value for people: text as is, everything else as its repr."""
    return value if type(value) is str else repr(value)


def _tagged(value: Any) -> dict[str, Any]:
    """A value for programs: JSON that says what type it was."""
    kind = type(value)
    if value is None:
        return {"type": "none", "value": None}
    if kind is bool:
        return {"type": "bool", "value": value}
    if kind is str:
        return {"type": "str", "value": value}
    if kind is int:
        return {"type": "int", "value": value}
    if kind is float:
        return {"type": "float", "value": value if math.isfinite(value) else repr(value)}
    if kind is bytes:
        return {"type": "bytes", "hex": value.hex()}
    return {"type": "object", "class": f"{kind.__module__}.{kind.__qualname__}", "repr": repr(value)}


class _Unreadable:
    """Stands in for a key or value that could not be deserialized (e.g. refused by SafeDisk)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"<unreadable: {self.error}>"


def _present(value: Any, as_json: bool) -> Any:
    if isinstance(value, _Unreadable):
        return {"type": "unreadable", "error": str(value.error)} if as_json else repr(value)
    return _tagged(value) if as_json else _plain(value)


def _parse_typed(text: str, kind: str, what: str) -> Any:
    """Turn command-line text into a key or tag of type `kind`."""
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


def _human_size(size: int) -> str:
    amount = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            return f"{size} bytes" if unit == "bytes" else f"{size} bytes ({amount:.1f} {unit})"
        amount /= 1024
    return f"{size} bytes"  # pragma: no cover


# --- commands --------------------------------------------------------------------------------


class _Output:
    """Writes a command's result as text lines or as one JSON document."""

    def __init__(self, as_json: bool, stream: IO[str]) -> None:
        self.as_json = as_json
        self.stream = stream

    def json(self, document: Any) -> None:
        json.dump(document, self.stream, indent=2, allow_nan=False, default=_tagged)
        self.stream.write("\n")

    def line(self, text: str = "") -> None:
        self.stream.write(text + "\n")


def _settings_of(shard: Cache) -> tuple[dict[str, Any], dict[str, Any]]:
    """(settings, counters) as stored in the shard's Settings table."""
    stored = {setting_name(row): value for row, value in shard._store.read(_ALL_SETTINGS)}
    counters = {name: stored.pop(name) for name in list(stored) if name in _NOT_SETTINGS}
    return dict(sorted(stored.items())), counters


def cmd_stats(args: argparse.Namespace, shards: list[Cache], out: _Output) -> int:
    now = time.time()
    totals = {"count": 0, "expired": 0, "size": 0, "volume": 0, "hits": 0, "misses": 0}
    settings: dict[str, Any] = {}
    for index, shard in enumerate(shards):
        shard_settings, counters = _settings_of(shard)
        if index == 0:
            settings = shard_settings
        totals["count"] += len(shard)
        totals["size"] += counters.get("size", 0)
        totals["hits"] += counters.get("hits", 0)
        totals["misses"] += counters.get("misses", 0)
        totals["expired"] += shard._store.read(_COUNT_EXPIRED, (now,))[0][0]
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
    out.line(f"size:             {_human_size(totals['size'])} in value files")
    out.line(f"volume:           {_human_size(totals['volume'])} on disk (database and value files)")
    recording = "" if settings.get("statistics") else " (statistics are off)"
    out.line(f"hits:             {totals['hits']}{recording}")
    out.line(f"misses:           {totals['misses']}{recording}")
    out.line(f"eviction policy:  {settings.get('eviction_policy')}")
    out.line("settings:")
    for name, value in settings.items():
        out.line(f"  {name:<24}{value!r}")
    return EXIT_OK


def cmd_check(args: argparse.Namespace, shards: list[Cache], out: _Output) -> int:
    problems = []
    for shard in shards:
        for found in shard.check(fix=args.fix, retry=True):
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


def _iter_items(shard: Cache, tag: Any, include_expired: bool) -> Iterator[tuple[Any, Any, Any]]:
    """(key, expire_time, tag) of each item in insertion order, a page of rows at a time."""
    last = 0
    while True:
        now = time.time()
        if tag is ENOVAL:
            rows = shard._store.read(_LIST_KEYS, (last, include_expired, now, _PAGE))
        else:
            rows = shard._store.read(_LIST_TAGGED_KEYS, (tag, last, include_expired, now, _PAGE))
        if not rows:
            return
        for _rowid, db_key, raw, expire_time, item_tag in rows:
            try:
                key = shard.disk.get(db_key, raw)
            except Exception as exc:  # noqa: BLE001 - refused or damaged pickles are shown, not fatal
                key = _Unreadable(exc)
            yield key, expire_time, item_tag
        last = rows[-1][0]


def cmd_keys(args: argparse.Namespace, shards: list[Cache], out: _Output) -> int:
    tag = ENOVAL if args.tag is None else _parse_typed(args.tag, args.tag_type, "tag")
    if args.limit is not None and args.limit < 0:
        raise CommandError("--limit must be >= 0", EXIT_USAGE)
    listed: list[dict[str, Any]] = []
    printed = 0
    for shard in shards:
        for key, expire_time, item_tag in _iter_items(shard, tag, args.expired):
            if args.limit is not None and printed >= args.limit:
                break
            printed += 1
            if out.as_json:
                listed.append(
                    {"key": _present(key, True), "expire_time": expire_time, "tag": _tagged(item_tag)}
                )
            else:
                out.line(_present(key, False))
    if out.as_json:
        out.json(listed)
    return EXIT_OK


def cmd_get(args: argparse.Namespace, shards: list[Cache], out: _Output) -> int:
    key = _parse_typed(args.key, args.key_type, "key")
    for shard in shards:
        if args.raw:
            handle = shard.get(key, ENOVAL, read=True)
            if handle is ENOVAL:
                continue
            return _write_raw(handle)
        value, expire_time, tag = shard.get(key, ENOVAL, expire_time=True, tag=True)
        if value is ENOVAL:
            continue
        if out.as_json:
            out.json(
                {"key": _tagged(key), "found": True, "value": _tagged(value),
                 "expire_time": expire_time, "tag": _tagged(tag)}
            )
        else:
            out.line(_plain(value))
        return EXIT_OK
    if out.as_json:
        out.json({"key": _tagged(key), "found": False})
    print(f"key not found: {key!r}", file=sys.stderr)
    return EXIT_NOT_FOUND


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


def cmd_delete(args: argparse.Namespace, shards: list[Cache], out: _Output) -> int:
    key = _parse_typed(args.key, args.key_type, "key")
    deleted = False
    for shard in shards:
        deleted = shard.delete(key, retry=True) or deleted
    if out.as_json:
        out.json({"key": _tagged(key), "deleted": deleted})
    elif deleted:
        out.line(f"deleted {key!r}")
    if not deleted:
        print(f"key not found: {key!r}", file=sys.stderr)
        return EXIT_NOT_FOUND
    return EXIT_OK


def _report_removed(out: _Output, removed: int, document: dict[str, Any], text: str) -> int:
    if out.as_json:
        out.json({**document, "removed": removed})
    else:
        out.line(text.format(removed=removed))
    return EXIT_OK


def cmd_expire(args: argparse.Namespace, shards: list[Cache], out: _Output) -> int:
    removed = sum(shard.expire(retry=True) for shard in shards)
    return _report_removed(out, removed, {}, "removed {removed} expired item(s)")


def cmd_evict(args: argparse.Namespace, shards: list[Cache], out: _Output) -> int:
    tag = _parse_typed(args.tag, args.tag_type, "tag")
    removed = sum(shard.evict(tag, retry=True) for shard in shards)
    return _report_removed(out, removed, {"tag": _tagged(tag)}, f"removed {{removed}} item(s) tagged {tag!r}")


def cmd_clear(args: argparse.Namespace, shards: list[Cache], out: _Output) -> int:
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
    removed = sum(shard.clear(retry=True) for shard in shards)
    return _report_removed(out, removed, {}, "removed {removed} item(s)")


def cmd_settings(args: argparse.Namespace, shards: list[Cache], out: _Output) -> int:
    settings, _ = _settings_of(shards[0])
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


COMMANDS: dict[str, Callable[[argparse.Namespace, list[Cache], _Output], int]] = {
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


# --- argument parsing ------------------------------------------------------------------------


def _add_common(parser: argparse.ArgumentParser, top: bool) -> None:
    # Accepted before or after the command; the subcommand copies default to SUPPRESS so they
    # do not overwrite what was given before the command.
    default: Callable[[Any], Any] = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", default=default(False),
                        help="print the result as JSON")
    parser.add_argument("--disk", choices=sorted(DISKS), default=default("safe"),
                        help="how values were serialized: safe (default: pickles restricted to "
                        "safe types, so an untrusted directory cannot run code), pickle (any "
                        "pickle: only for directories you trust), json (JSONDisk)")
    parser.add_argument("--timeout", type=float, default=default(60.0), metavar="SECONDS",
                        help="how long a write waits for the database lock (default 60)")


def _add_typed(parser: argparse.ArgumentParser, name: str, what: str) -> None:
    group = parser.add_mutually_exclusive_group()
    dest = f"{name}_type"
    group.add_argument(f"--{name}-type", dest=dest, choices=KEY_TYPES, default="str",
                       help=f"type of {what.upper()}: str (default), int, float, bytes (UTF-8 "
                       "of the text) or hex (bytes written in hex)")
    if name == "key":
        group.add_argument("--int", dest=dest, action="store_const", const="int",
                           help="KEY is an int (same as --key-type int)")
        group.add_argument("--bytes", dest=dest, action="store_const", const="bytes",
                           help="KEY is bytes (same as --key-type bytes)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="diskcache-core",
        description="Inspect and maintain diskcache_core cache directories. A directory that "
        "holds no cache is reported, never created.",
        epilog="Exit status: 0 success, 1 not found (or check found problems), "
        "2 usage error or not a cache directory, 3 the cache reported an error.",
    )
    _add_common(parser, top=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("directory", metavar="DIR", help="cache directory")
        _add_common(sub, top=False)
        return sub

    command("stats", "show item count, size, hits and misses, eviction policy and settings")
    check = command("check", "check that the database and the value files agree")
    check.add_argument("--fix", action="store_true",
                       help="repair what check finds (run it while no other process writes)")
    keys = command("keys", "list keys in insertion order (expired items hidden)")
    keys.add_argument("--tag", metavar="TAG", help="only items with this tag")
    _add_typed(keys, "tag", "tag")
    keys.add_argument("--limit", type=int, metavar="N", help="list at most N keys")
    keys.add_argument("--expired", action="store_true",
                      help="include expired items that have not been removed yet")
    get = command("get", "print the value stored under KEY")
    get.add_argument("key", metavar="KEY", help="the key (text, unless --key-type says otherwise)")
    _add_typed(get, "key", "key")
    get.add_argument("--raw", action="store_true",
                     help="write the value's bytes (text as UTF-8) to stdout, nothing added")
    delete = command("delete", "remove KEY")
    delete.add_argument("key", metavar="KEY", help="the key (text, unless --key-type says otherwise)")
    _add_typed(delete, "key", "key")
    command("expire", "remove expired items")
    evict = command("evict", "remove every item tagged TAG")
    evict.add_argument("tag", metavar="TAG", help="the tag (text, unless --tag-type says otherwise)")
    _add_typed(evict, "tag", "tag")
    clear = command("clear", "remove every item (asks first unless --yes)")
    clear.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    settings = command(
        "settings",
        "show the settings, or change one: VALUE is read as an int, a float, true/false, "
        "none, or else text",
    )
    settings.add_argument("name", metavar="NAME", nargs="?", help="a setting's name")
    settings.add_argument("value", metavar="VALUE", nargs="?", help="its new value")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 for --help
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    args.directory = op.expandvars(op.expanduser(args.directory))
    out = _Output(args.json, sys.stdout)
    try:
        with _opened(args) as shards:
            return COMMANDS[args.command](args, shards, out)
    except NotACacheError as exc:
        print(f"diskcache-core: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CommandError as exc:
        print(f"diskcache-core: {exc}", file=sys.stderr)
        return exc.code
    except DiskCacheError as exc:
        print(f"diskcache-core: {type(exc).__name__}: {exc}", file=sys.stderr)
        if isinstance(exc, UnsafePickleError):
            print("diskcache-core: values of other types need --disk pickle, which runs the"
                  " pickle's code: use it only if you trust whoever can write to this directory",
                  file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, without a second error at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


@contextmanager
def _opened(args: argparse.Namespace) -> Iterator[list[Cache]]:
    try:
        shards = open_shards(args.directory, DISKS[args.disk], args.timeout)
    except (TypeError, ValueError) as exc:  # e.g. disk_* settings of a custom Disk class
        raise CommandError(f"{args.directory}: cannot open the cache: {exc}") from exc
    try:
        yield shards
    finally:
        for shard in shards:
            shard.close()
