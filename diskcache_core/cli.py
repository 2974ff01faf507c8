"""Command-line tool: inspect and maintain cache directories (``python -m diskcache_core``).

This module parses the command line, opens the caches and reports errors; the commands are in
`_cli_commands`, finding and reading caches in `_cli_caches`, presentation in `_cli_output`.

Every command takes a cache directory, which the tool never creates (see `_cli_caches`). Values
are unpickled with SafeDisk unless ``--disk pickle`` is given: inspecting a directory someone
else can write must not run their code. ``--allow-type MODULE.CLASS`` adds a class to SafeDisk's
allow-list (its ``disk_allowed_types``), as code using the library would.

Exit codes: 0 success; 1 not found (a missing key, nothing deleted) or ``check`` found problems
it did not fix, or ``doctor`` warnings; 2 usage error or not a cache directory; 3 the cache raised
an error, or ``doctor`` found one.
"""

from __future__ import annotations

import argparse
import importlib
import os
import os.path as op
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from . import __version__
from ._cache.cache import Cache
from ._cli.caches import NotACacheError, find_shard_directories, open_shards
from ._cli.commands import (
    COMMANDS,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    KEY_TYPES,
    CommandError,
    parse_setting_value,
)
from ._cli.doctor import run_doctor
from ._cli.output import Output
from ._cli.remote import run_remote
from ._disk.disk import Disk, JSONDisk
from ._arguments import check_timeout
from ._errors import DiskCacheError, Timeout, UnsafePickleError
from ._remote.stamps import REMOTE_FILE
from ._disk.safedisk import SafeDisk

__all__ = [
    "COMMANDS",
    "NotACacheError",
    "build_parser",
    "find_shard_directories",
    "import_class",
    "main",
    "open_shards",
    "parse_setting_value",
]

DISKS: dict[str, type[Disk]] = {"safe": SafeDisk, "pickle": Disk, "json": JSONDisk}
# The type SafeDisk names when it refuses a pickle, for a ready-to-use --allow-type hint.
_REFUSED_TYPE = re.compile(r"refusing to unpickle ([\w.]+):")


def import_class(name: str) -> type:
    """The class named by ``--allow-type``: ``module.Class``, ``module.Outer.Inner`` or
    ``module:Qualified.Name``. Imports the module, as the application that stored it would."""
    module_name, colon, qualname = name.partition(":")
    if colon:
        splits = [(module_name, qualname)]
    else:
        parts = name.split(".")
        splits = [(".".join(parts[:cut]), ".".join(parts[cut:])) for cut in range(len(parts) - 1, 0, -1)]
    for module_name, qualname in splits:
        if not module_name or not qualname:
            continue
        try:
            found: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
                continue  # no such module: the class may be nested one level further up
            raise argparse.ArgumentTypeError(f"cannot import {module_name}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - whatever the module raised, reported as usage
            raise argparse.ArgumentTypeError(f"cannot import {module_name}: {exc}") from None
        for attribute in qualname.split("."):
            if not hasattr(found, attribute):
                raise argparse.ArgumentTypeError(f"{name}: {module_name} has no {qualname}")
            found = getattr(found, attribute)
        if not isinstance(found, type):
            raise argparse.ArgumentTypeError(f"{name}: not a class")
        return found
    raise argparse.ArgumentTypeError(f"{name}: no such module (give MODULE.CLASS)")


# --- argument parsing ------------------------------------------------------------------------


def _add_common(parser: argparse.ArgumentParser, top: bool) -> None:
    # Accepted before or after the command; the subcommand copies default to SUPPRESS so they
    # do not overwrite what was given before the command. --allow-type, which may be repeated on
    # both sides, keeps the two sides apart (``allow_type`` and ``allow_type_after``).
    default: Callable[[Any], Any] = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", default=default(False),
                        help="print the result as JSON")
    parser.add_argument("--disk", choices=sorted(DISKS), default=default("safe"),
                        help="how values were serialized: safe (default: pickles restricted to "
                        "safe types, so an untrusted directory cannot run code), pickle (any "
                        "pickle: only for directories you trust), json (JSONDisk)")
    parser.add_argument("--allow-type", action="append", type=import_class, metavar="MODULE.CLASS",
                        dest="allow_type" if top else "allow_type_after", default=default([]),
                        help="with --disk safe, also unpickle instances of this class (SafeDisk's "
                        "disk_allowed_types); repeat for several classes")
    parser.add_argument("--timeout", type=_timeout, default=default(60.0), metavar="SECONDS",
                        help="how long a write waits for the database lock (default 60)")


def _timeout(text: str) -> float:
    """``--timeout``'s value, checked as Cache checks it: a usage error (status 2) if refused."""
    try:
        return check_timeout(float(text))
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


def _add_remote(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--remote", metavar="URL",
                        help="the cache's remote (Redis) URL, for a directory that is a remote's"
                        " near cache: items are read from Redis (see docs: Command-line tool)")
    parser.add_argument("--remote-prefix", metavar="PREFIX", default="diskcache_core:",
                        help="the remote_prefix the cache's processes use (default"
                        " 'diskcache_core:')")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the whole tool: common options, then one subcommand."""
    parser = argparse.ArgumentParser(
        prog="diskcache-core",
        description="Inspect and maintain diskcache_core cache directories. A directory that "
        "holds no cache is reported, never created.",
        epilog="Exit status: 0 success, 1 not found (or check or doctor found problems), "
        "2 usage error or not a cache directory, 3 the cache reported an error (or doctor "
        "found one).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_common(parser, top=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("directory", metavar="DIR", help="cache directory")
        _add_common(sub, top=False)
        return sub

    stats = command("stats", "show item count, size, hits and misses, eviction policy and settings")
    check = command("check", "check that the database and the value files agree")
    check.add_argument("--fix", action="store_true",
                       help="repair what check finds (run it while no other process writes)")
    keys = command("keys", "list keys in insertion order, each by its repr (expired items "
                   "hidden); a FanoutCache's shards are merged by store time")
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
    evict = command("evict", "remove every item carrying TAG (several: any of them, in one"
                    " transaction per shard)")
    evict.add_argument("tags", metavar="TAG", nargs="*",
                       help="the tag (text, unless --tag-type says otherwise)")
    evict.add_argument("--tag", dest="more_tags", metavar="TAG", action="append", default=[],
                       help="one more tag (repeatable)")
    _add_typed(evict, "tag", "tag")
    clear = command("clear", "remove every item (asks first unless --yes)")
    clear.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    doctor = command("doctor", "report what is wrong with the cache directory and how to fix it"
                     " (reads only): integrity, files, permissions, space, processes, remote")
    for reading in (stats, check, keys, get, doctor):
        _add_remote(reading)
    settings = command(
        "settings",
        "show the settings, or change one: VALUE is read as an int, a float, true/false, "
        "none, or else text",
    )
    settings.add_argument("name", metavar="NAME", nargs="?", help="a setting's name")
    settings.add_argument("value", metavar="VALUE", nargs="?", help="its new value")
    return parser


# --- running ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.allow_type = [*args.allow_type, *getattr(args, "allow_type_after", [])]
        if args.allow_type and args.disk != "safe":
            parser.error(f"--allow-type applies to --disk safe only, not --disk {args.disk}")
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 for --help and --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    args.directory = op.expandvars(op.expanduser(args.directory))
    out = Output(args.json, sys.stdout)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning  # a line of ours, not Python's source excerpt
            if args.command == "doctor":
                return run_doctor(args, DISKS[args.disk], out)
            if getattr(args, "remote", None):
                return run_remote(args, DISKS[args.disk], out)
            with _opened(args) as shards:
                return COMMANDS[args.command](args, shards, out)
    except NotACacheError as exc:
        print(f"diskcache-core: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CommandError as exc:
        print(f"diskcache-core: {exc}", file=sys.stderr)
        return exc.code
    except DiskCacheError as exc:
        if isinstance(exc, Timeout):  # (a bulk removal's first argument: items removed before)
            removed = exc.args[0] if exc.args and type(exc.args[0]) is int else None
            done = "" if removed is None else f", after removing {removed} item(s)"
            exc = Timeout(f"the database stayed locked past --timeout {args.timeout:g} s{done}")
        print(f"diskcache-core: {type(exc).__name__}: {exc}", file=sys.stderr)
        if isinstance(exc, UnsafePickleError):
            _explain_refusal(exc)
        return EXIT_ERROR
    except UnicodeError as exc:  # an argument of bytes that are not UTF-8, or output that
        # the terminal's encoding cannot show
        print(
            f"diskcache-core: {exc} (arguments must be UTF-8 text; for output the terminal"
            " cannot show, set PYTHONIOENCODING=utf-8)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except (TypeError, ValueError) as exc:  # an argument the cache refused (a NaN key, ...)
        print(f"diskcache-core: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, without a second error at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


def _show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    print(f"diskcache-core: {category.__name__}: {message}", file=sys.stderr)


def _explain_refusal(exc: UnsafePickleError) -> None:
    """After SafeDisk refused a pickle: how to read it from the command line."""
    refused = _REFUSED_TYPE.search(str(exc))
    option = f"--allow-type {refused.group(1)}" if refused else "--allow-type MODULE.CLASS"
    print(f"diskcache-core: to read it, allow its type with {option} (repeatable: the command"
          " line's disk_allowed_types)", file=sys.stderr)
    print("diskcache-core: --disk pickle reads every type but runs the pickle's code: use it"
          " only if you trust whoever can write to this directory", file=sys.stderr)


# Commands that change nothing: they open the cache read-only, so not a byte of the directory
# changes (no migration of an older or python-diskcache database, no new file).
READING_COMMANDS = frozenset({"stats", "check", "keys", "get", "settings", "doctor"})


def _refuse_near_cache(args: argparse.Namespace) -> None:
    """A remote's near cache holds copies, not items: a reading command reads it with
    ``--remote``; a changing one is refused (its items are changed through the remote)."""
    for directory in find_shard_directories(args.directory):
        if op.exists(op.join(directory, REMOTE_FILE)):
            if args.command in READING_COMMANDS and args.command != "settings":
                hint = ("pass --remote URL (and --remote-prefix PREFIX unless the cache uses"
                        " 'diskcache_core:') to read its items from Redis")
            elif args.command == "settings" and args.value is None:
                hint = "`stats DIR --remote URL` shows the settings of this host's copies"
            else:
                hint = ("change its items through the cache, opened with its remote"
                        " (Cache(directory, remote=URL)); the command line reads them with"
                        " stats, keys, get, check and doctor --remote URL")
            raise CommandError(
                f"{args.directory} is the near cache of a remote (Redis) cache: its rows are"
                f" copies of Redis's items; {hint}", EXIT_USAGE)


@contextmanager
def _opened(args: argparse.Namespace) -> Iterator[list[Cache]]:
    _refuse_near_cache(args)
    try:
        reading = (
            args.command in READING_COMMANDS
            and not getattr(args, "fix", False)  # check --fix repairs
            and getattr(args, "value", None) is None  # settings NAME VALUE changes one
        )
        shards = open_shards(
            args.directory, DISKS[args.disk], args.timeout, args.allow_type, read_only=reading
        )
    except (TypeError, ValueError) as exc:  # e.g. disk_* settings of a custom Disk class
        raise CommandError(f"{args.directory}: cannot open the cache: {exc}") from exc
    try:
        yield shards
    finally:
        for shard in shards:
            shard.close()
