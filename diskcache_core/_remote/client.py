"""The remote source of truth: a Redis (or Valkey, or Redis Cluster) server reached with redis-py.

Only imported when a cache is opened with ``remote=``. Here: the URL (a plain ``redis://``,
``rediss://`` or ``unix://`` URL; ``?cluster=true`` for a Redis Cluster), and the commands each
cache operation needs, each one round trip, on items in the stored form of `_remoteform` (one
Redis string whose TTL is the item's expiry). Every call's redis-py errors are translated into
the library's by _remote/failures.py. One client per remote per process serves every store of
it (`_shared_client`); on one server, its hot commands go on connections pinned to threads
(_remote/pinned.py).
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections.abc import Iterator
from typing import Any, Callable, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import redis.cluster
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._errors import RemoteError, RemoteUnavailableError
from .._log import REMOTE as _LOG
from .._log import outage_for
from .._metrics import CommandCounts
from . import tagged
from .failures import REDIS_ERRORS, outage_name, translated
from .form import canonical_tag, decode_tag, encode_tag, expiry_header, tag_fields
from .pinned import PinnedConnections, threads_are_real
from .tagged import TagNames
from .._urls import CLUSTER_WORDS, check_remote_url, safe_url

__all__ = ["RemoteStore", "pxat"]

_T = TypeVar("_T")

# Delete the item if its tag field (length and bytes, from offset 11) is one of ARGV[2...]
# (`tag_fields`: the spellings of one tag), ARGV[1] bytes at most.
_EVICT_TAG = """
local current = redis.call('GETRANGE', KEYS[1], 11, 10 + tonumber(ARGV[1]))
for i = 2, #ARGV do
  if string.sub(current, 1, string.len(ARGV[i])) == ARGV[i] then
    return redis.call('DEL', KEYS[1])
  end
end
return 0
"""
_SCAN_COUNT = 500
_BATCH = 500  # names per pipeline in clear and evict (`each_batch`)
_PXAT_MAX = 2**53  # ms (the year 287,396): an expiry past it is kept without a Redis TTL


def _split_cluster(url: str) -> tuple[str, bool]:
    """The URL without its ``cluster`` option, and whether that option asked for a cluster."""
    plain, cluster = _without_option(url, "cluster")
    return plain, bool(cluster) and cluster[-1].lower() in CLUSTER_WORDS[:4]


def _without_option(url: str, option: str) -> tuple[str, list[str]]:
    """The URL without its query option `option`, and the values it had (none: `url` as is).
    (redis-py's ``from_url`` lets the URL's options override the keyword arguments.)"""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    values = [value for name, value in query if name == option]
    if not values:
        return url, values
    rest = [(name, value) for name, value in query if name != option]
    plain = urlunsplit(parts._replace(query=urlencode(rest)))
    if not parts.netloc:  # unix:///path: urlunsplit would drop the empty authority's "//"
        plain = plain.replace(f"{parts.scheme}:", f"{parts.scheme}://", 1)
    return plain, values


def pxat(expire_time: float | None) -> int | None:
    """Redis's PXAT for an expire time; None (no TTL) past what it holds.

    Redis keeps an item while its clock in whole milliseconds is at most PXAT, and a host takes
    it for expired from the exact time on: rounded down, less one, Redis has dropped it by then
    (else an ``add`` would fail on an item every host reads as missing).
    """
    if expire_time is None or not expire_time < _PXAT_MAX / 1000:  # inf, or years past 2^53 ms
        return None
    return max(1, math.floor(expire_time * 1000) - 1)


class RemoteStore:
    """One cache's view of the remote: its client, its prefix, and one method per command."""

    def __init__(self, url: str, prefix: bytes, timeout: float, connect: bool = True) -> None:
        """`connect=False`: no cluster client for the commands (one connects when made; the
        listener needs only connections of its own, made by `listener_client`)."""
        self.url = check_remote_url(url)
        self.prefix = prefix
        # Reachability as this process sees it, shared by every store of the URL (_log.py).
        self._outage = outage_for(_LOG, outage_name(self.url))
        self.timeout = timeout
        self.sent = CommandCounts()  # commands sent and failed, for `Cache.metrics`
        plain_url, self.cluster = _split_cluster(url)
        self._plain_url = plain_url
        self.client: Any = None
        self._shared: _SharedKey | None = None
        if self.cluster and not connect:
            return
        self._shared = (os.getpid(), plain_url, self.cluster, timeout)
        self.client = _shared_client(self._shared, url)
        # GET, MGET and EVALSHA: on this thread's pinned connection (one server, OS threads),
        # else sent by the client (a cluster client routes each to its node).
        pinned = None if self.cluster else self.client.pinned
        self._command: Callable[..., Any] = (
            self.client.execute_command if pinned is None else pinned.command
        )
        self._evict_tag = self.client.register_script(_EVICT_TAG)
        self.tag_names = TagNames(prefix, self.cluster)
        self._write = self.client.register_script(tagged.WRITE)
        self._set_plain = self.client.register_script(tagged.SET_PLAIN)
        self._remove = self.client.register_script(tagged.REMOVE)
        self._touch = self.client.register_script(tagged.TOUCH)
        self._read = self.client.register_script(tagged.READ)
        self._evict = self.client.register_script(tagged.EVICT)

    @property
    def reconnects(self) -> int:
        """Times the remote answered again after an outage (per URL in this process)."""
        return self._outage.recoveries

    def name(self, encoded_key: bytes) -> bytes:
        return self.prefix + encoded_key

    def call(self, function: Callable[[], _T], write: str = "", many: bool = False) -> _T:
        """Run one client call, translating redis-py's errors into the library's.

        `write` names what the call writes ("" for a read): a write whose request may have
        left raises `RemoteOutcomeUnknownError` (`_request_left`). `many`: the call sends
        several commands (a pipeline), so only a failure before anything was sent is certain.
        """
        self.sent.commands += 1
        try:
            result = function()
        except REDIS_ERRORS as exc:
            self.sent.errors += 1
            raise translated(exc, self.url, write, many) from exc
        if self._outage.down_since:
            self._outage.recovered()
        return result

    def _run(self, script: Any, keys: list[bytes], args: list[Any]) -> Any:
        """Run a registered script: EVALSHA sent as it is (redis-py's Script call costs about
        10 us of argument handling more per write), loaded and sent again if the server does
        not hold it (a restarted or promoted node: nothing of it ran)."""
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            return self._command(*command)
        except redis.exceptions.NoScriptError:
            self.client.script_load(script.script)
            return self._command(*command)

    # --- items --------------------------------------------------------------------------------

    # The hot commands go on the pinned connection (`_command`): redis-py's get()/set()
    # wrappers and execute_command cost several microseconds per call (_remote/pinned.py).

    def get(self, name: bytes) -> bytes | None:
        self.sent.commands += 1
        try:
            data: bytes | None = self._command("GET", name)
        except REDIS_ERRORS as exc:
            self.sent.errors += 1
            raise translated(exc, self.url) from exc
        if self._outage.down_since:
            self._outage.recovered()
        return data

    def get_many(self, names: list[bytes]) -> list[bytes | None]:
        """The value of each name: one MGET (on a cluster, one per slot, as redis-py splits it)."""
        if not names:
            return []
        if self.cluster:
            return self.call(lambda: self.client.mget_nonatomic(names))
        self.sent.commands += 1
        try:
            found: list[bytes | None] = self._command("MGET", *names)
        except REDIS_ERRORS as exc:
            self.sent.errors += 1
            raise translated(exc, self.url) from exc
        if self._outage.down_since:
            self._outage.recovered()
        return found

    # Every write of an item is one script that also keeps its tags (`_remote.tagged`); the
    # methods take the item's name without the prefix.

    def set(
        self, name: bytes, data: bytes, expire_time: float | None, only_new: bool,
        tags: tuple[Any, ...] = (),
    ) -> bool:
        """Store item `name` (only if absent: `only_new`), its expiry as Redis's own absolute
        TTL; its tags become `tags` (checked, the first tag included)."""
        if not tags and not only_new:  # (the commonest write: its own, leaner script)
            _, keys = self.tag_names.item_keys(name)
            when = pxat(expire_time)
            args = [name, data, b"" if when is None else b"%d" % when]
            return bool(self.call(lambda: self._run(self._set_plain, keys, args), "set"))
        return self._written_item(
            name, b"a" if only_new else b"s", data, expire_time, tags, "add" if only_new else "set"
        )

    def compare_and_set(
        self, name: bytes, old: bytes | None, new: bytes | None, expire_time: float | None,
        tags: tuple[Any, ...] | None = None,
    ) -> bool:
        """Store `new` (None: delete the item) only if the item's stored form is still `old`
        (None: still absent). `tags`: its new tags; None: they stay."""
        return self._written_item(
            name, b"c", new or b"", expire_time, tags, "compare-and-set", old, new is None
        )

    def _written_item(
        self, name: bytes, kind: bytes, data: bytes, expire_time: float | None,
        tags: tuple[Any, ...] | None, what: str, old: bytes | None = None, delete: bool = False,
    ) -> bool:
        names = self.tag_names
        home, keys = names.item_keys(name)
        given: list[bytes] = []
        if tags is not None:
            canonicals = [canonical_tag(tag) for tag in tags]
            keys += [names.tag_set(home, canonical) for canonical in canonicals]
            given = [encode_tag(tag) for tag in tags]
            if canonicals and self.cluster:  # the registries first: they over-approximate
                self.call(lambda: self._each(
                    [names.registry(canonical) for canonical in canonicals],
                    lambda pipe, registry: pipe.sadd(registry, home),
                ), what, many=True)
        when = pxat(expire_time)
        args = [
            name, kind, data, b"" if when is None else b"%d" % when, old or b"",
            b"1" if old is None else b"0", b"1" if delete else b"0",
            b"0" if tags is None else b"1", *given,
        ]
        return bool(self.call(lambda: self._run(self._write, keys, args), what))

    def delete(self, name: bytes) -> bool:
        """Remove item `name` and its tag memberships; True when it was there."""
        _, keys = self.tag_names.item_keys(name)
        return bool(self.call(lambda: self._run(self._remove, keys, [name, b"0"]), "delete"))

    def pop(self, name: bytes) -> bytes | None:
        """Remove item `name` and its tag memberships; its stored form (None: absent)."""
        _, keys = self.tag_names.item_keys(name)
        return self.call(  # type: ignore[no-any-return]
            lambda: self._run(self._remove, keys, [name, b"1"]), "pop"
        )

    def touch(self, name: bytes, expire_time: float | None) -> bool:
        """A new expire time for item `name` (and its tag hash); True when it was present."""
        _, keys = self.tag_names.item_keys(name)
        when = pxat(expire_time)
        args = [expiry_header(expire_time), b"" if when is None else b"%d" % when]
        return bool(self.call(lambda: self._run(self._touch, keys, args), "touch"))

    def get_tagged(self, name: bytes) -> tuple[bytes | None, frozenset[Any]]:
        """Item `name`'s stored form (None: absent) and the tags its tag hash holds, at once."""
        _, keys = self.tag_names.item_keys(name)
        data, given = self.call(lambda: self._run(self._read, keys, []))
        return (data or None), frozenset(decode_tag(spelling) for spelling in given)

    def evict_tags(self, tags: tuple[Any, ...]) -> list[bytes]:
        """Remove every item carrying any of `tags` (checked, not None) and its memberships:
        one script on one server; on a cluster, one per home the tags' registries list (a
        transaction per slot). The names removed (without the prefix)."""
        names = self.tag_names
        canonicals = list(dict.fromkeys(canonical_tag(tag) for tag in tags))
        by_home: dict[bytes, list[bytes]] = {}
        if self.cluster:
            registries = [names.registry(canonical) for canonical in canonicals]
            found = self.call(lambda: self._each(registries, lambda pipe, r: pipe.smembers(r)))
            for canonical, homes in zip(canonicals, found):
                for home in sorted(homes):
                    by_home.setdefault(home, []).append(canonical)
        elif canonicals:
            by_home[tagged.SINGLE_HOME] = canonicals
        removed: list[bytes] = []
        for home, spelled in by_home.items():
            keys = [names.tag_set(home, canonical) for canonical in spelled]
            args = [self.prefix, names.hash_prefix(home)]
            removed += self.call(lambda: self._run(self._evict, keys, args), "evict")
        return removed

    # --- whole prefix -------------------------------------------------------------------------

    def names(self) -> Iterator[bytes]:
        """Every Redis name of this cache: the prefix, then a type mark (`encode_key`). SCAN,
        on every primary of a cluster. With the mark in the pattern, a FanoutCache's shard
        names (``<prefix><n>/...``) are not a Cache's of the same prefix."""
        pattern = _glob_escape(self.prefix) + b"[sbifp]*"
        if self.cluster:
            nodes = self.call(lambda: self.client.get_primaries())
            for node in nodes:
                client = node.redis_connection
                yield from self.call(
                    lambda: list(client.scan_iter(match=pattern, count=_SCAN_COUNT))
                )
        else:
            yield from self.call(
                lambda: list(self.client.scan_iter(match=pattern, count=_SCAN_COUNT))
            )

    def each_batch(self, action: Callable[[list[bytes]], int]) -> int:
        """`action` on the prefix's names, a batch at a time; the total it returned. Should
        Redis fail midway, the error raised says in ``args[0]`` how many were removed before
        (as `Timeout` does for a bulk removal); a `RemoteOutcomeUnknownError` when the failed
        batch may have been applied, part or whole."""
        total = 0
        batch: list[bytes] = []
        try:
            for name in self.names():
                batch.append(name)
                if len(batch) >= _BATCH:
                    total += action(batch)
                    batch = []
            return total + int(action(batch))
        except RemoteUnavailableError as exc:
            raise type(exc)(total, f"{exc} ({total} removed before)") from exc

    def delete_names(self, names: list[bytes]) -> int:
        """Remove the items of `names` (Redis names, as `names` yields them) each with its tag
        memberships (one script per item, pipelined); how many were there. The pipeline sends
        EVALSHA itself (redis-py's would first ask whether the script is loaded, a round trip
        before anything of the batch is sent); the items of a node without the script are
        sent again once it is loaded."""
        if not names:
            return 0
        start = len(self.prefix)
        item_keys = self.tag_names.item_keys
        sha = self._remove.sha

        def run(batch: list[bytes]) -> tuple[int, list[bytes]]:
            pipe = self.client.pipeline(transaction=False)
            for full in batch:
                name = full[start:]
                pipe.execute_command("EVALSHA", sha, 2, *item_keys(name)[1], name, b"0")
            removed, missing = 0, []
            for full, result in zip(batch, pipe.execute(raise_on_error=False)):
                if isinstance(result, redis.exceptions.NoScriptError):
                    missing.append(full)
                elif isinstance(result, Exception):
                    raise result
                else:
                    removed += int(result)
            return removed, missing

        removed, missing = self.call(lambda: run(names), "clear", many=True)
        if missing:  # (a restarted or promoted node: its script cache is empty)
            self.call(lambda: self.client.script_load(tagged.REMOVE))
            again, missing = self.call(lambda: run(missing), "clear", many=True)
            removed += again
            if missing:
                raise RemoteError(
                    f"remote {safe_url(self.url)}: the removal script was not kept ({removed}"
                    " removed before)"
                )
        return removed

    def evict_tag(self, names: list[bytes], tag: Any) -> int:
        fields = tag_fields(tag)
        args = [max(map(len, fields)), *fields]
        return sum(
            int(result)
            for result in self.call(
                lambda: self._each(
                    names, lambda pipe, name: self._evict_tag(keys=[name], args=args, client=pipe)
                ),
                "evict",
                many=True,
            )
        )

    def _each(self, names: list[bytes], command: Callable[[Any, bytes], Any]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            command(pipe, name)
        return pipe.execute()  # type: ignore[no-any-return]

    # --- the listener's connections -----------------------------------------------------------

    def listener_client(self, address: tuple[str, int] | None = None) -> redis.Redis:
        """A new RESP2 client for the listener: of the URL's server, or of the cluster node at
        `address` (with the URL's credentials and options). RESP2: the listener reads
        subscription replies and invalidations as RESP2 messages, whatever protocol the URL
        asks the other connections for."""
        options = {
            "socket_timeout": self.timeout, "socket_connect_timeout": self.timeout, "protocol": 2,
        }
        url = _without_option(self._plain_url, "protocol")[0]
        if address is not None:
            parts = urlsplit(url)
            host, port = address
            credentials = parts.netloc.rpartition("@")[0]
            netloc = f"{credentials}@" if credentials else ""
            netloc += f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            url = urlunsplit(parts._replace(netloc=netloc))
        return redis.Redis.from_url(url, **options)

    def known_nodes(self) -> list[tuple[str, int]]:
        """The cluster nodes this process's client knows (none for a single server)."""
        if self.client is None or not self.cluster:
            return []
        try:
            return sorted((node.host, int(node.port)) for node in self.client.get_nodes())
        except (*REDIS_ERRORS, AttributeError, TypeError, ValueError):
            return []

    def seed(self) -> tuple[str, int]:
        """The address of the URL's server (for a cluster: the node to ask first)."""
        parts = urlsplit(self._plain_url)
        return parts.hostname or "localhost", parts.port or 6379

    def close(self) -> None:
        """One user fewer of the process's shared client; the last one closes the connections
        no call is using. A call in flight on another thread goes on to its answer (the
        application's close is no outage, and a write's outcome stays known); its connection
        goes back to the pool, and is closed by a later close or with the client. So a
        Cache's SQLite connections are closed (`Cache.close`). A store used again after its
        close still works (redis-py connects again), outside the shared count."""
        if self.client is None:
            return
        shared, self._shared = self._shared, None
        if not _release_client(shared, self.client):
            return  # other caches of this process use its connections
        try:
            if self.cluster:
                pools = [
                    node.redis_connection.connection_pool
                    for node in self.client.get_nodes() if node.redis_connection is not None
                ]
            else:
                pools = [self.client.connection_pool]
                if self.client.pinned is not None:
                    self.client.pinned.close_idle()
            for pool in pools:
                pool.disconnect(inuse_connections=False)
        except REDIS_ERRORS:
            pass


# One client (and so one connection pool) per remote in this process, shared by every store of
# it: a FanoutCache's shards and every Cache of the URL. Made per store, a FanoutCache(8)'s
# first gets paid eight connects (one per shard's pool), and a cluster client's topology was
# read once per shard. Keyed by the process too: a forked child makes its own (redis-py's pools
# also start afresh in a child, but a cluster client's topology lock may be held at the fork).
_SharedKey = tuple[int, str, bool, float]  # (pid, URL without `cluster`, cluster, timeout)
# key -> [the client (weakly: caches dropped unclosed leave no client behind), its users]
_clients: dict[_SharedKey, list[Any]] = {}
_clients_lock = threading.Lock()


def _shared_client(key: _SharedKey, url: str) -> Any:
    """The process's client of the remote `key` names, made on first use; one more user."""
    with _clients_lock:
        entry = _clients.get(key)
        client = None if entry is None else entry[0]()
        if entry is None or client is None:
            _, plain_url, cluster, timeout = key
            client = _new_client(plain_url, cluster, timeout, url)
            entry = [weakref.ref(client), 0]
            _clients[key] = entry
        entry[1] += 1
        return client


def _release_client(key: _SharedKey | None, client: Any) -> bool:
    """One user fewer of the shared `client` (`key`: its key; None: this user had released it
    already); True when no user is left (then it is forgotten: the next store makes another)."""
    with _clients_lock:
        entry = None if key is None else _clients.get(key)
        if key is None or entry is None or entry[0]() is not client:
            return not any(
                other[0]() is client and other[1] > 0 for other in _clients.values()
            )
        entry[1] -= 1
        if entry[1] > 0:
            return False
        del _clients[key]
        return True


def _new_client(plain_url: str, cluster: bool, timeout: float, url: str) -> Any:
    """A redis-py client of the remote, without retries (a command sent again after a timeout
    could run twice)."""
    options = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    try:
        if cluster:
            return _ClusterClient.from_url(plain_url, **options, **_NO_CLUSTER_RETRIES)
        return _Client.from_url(plain_url, **options, retry=Retry(NoBackoff(), 0))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"remote URL {url!r}: {exc}") from None
    except REDIS_ERRORS as exc:  # a cluster client connects at once
        raise translated(exc, url) from exc


class _Client(redis.Redis):
    """redis-py's client of one server, and the connections its hot commands are sent on
    (`PinnedConnections`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pinned: PinnedConnections | None = (
            PinnedConnections(self.connection_pool, self.execute_command)
            if threads_are_real() else None
        )


class _ClusterClient(redis.cluster.RedisCluster):
    """redis-py's cluster client, its failures while following a redirection raised as the
    `ClusterError` they are. redis-py 8 raises AttributeError for an ``ASK`` to a node it has
    not met yet (a primary added since it read the topology, while a slot moves to it) and for
    a redirection loop it gives up on: the command was refused, not run."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]
        except AttributeError as exc:
            raise redis.exceptions.ClusterError(
                f"redis-py could not follow a redirection ({exc})"
            ) from exc


def _glob_escape(prefix: bytes) -> bytes:
    out = bytearray()
    for byte in prefix:
        if byte in b"*?[]\\":
            out += b"\\"
        out.append(byte)
    return bytes(out)


def _retries_off() -> dict[str, Any]:
    """RedisCluster's options that stop it from sending a command again after a connection
    error or timeout (ten times by default): a write that timed out may have run, and running
    it twice would pop an item from no caller, leave ``add`` without a winner, or count an
    ``incr`` twice. redis-py before 6 counts them in an option of their own."""
    options: dict[str, Any] = {"retry": Retry(NoBackoff(), 0)}
    if int(redis.__version__.split(".")[0]) < 6:
        options["cluster_error_retry_attempts"] = 0
    return options


_NO_CLUSTER_RETRIES = _retries_off()
