"""The invalidation listener: one per host directory, elected, hearing every change from Redis.

Invalidation uses Redis's server-assisted client tracking in broadcast mode with the cache's
prefix (``CLIENT TRACKING ON REDIRECT <id> BCAST PREFIX <prefix>``): Redis itself reports every
change to a name under the prefix — writes by any client, expiry, eviction under ``maxmemory``,
``FLUSHDB`` — on the ``__redis__:invalidate`` channel of a subscribed connection, and asks no extra
command of writers. (Explicit publishing by writers would cost a command per write and would miss
expiry, eviction and other clients.) A host also hears of its own writes. After each batch, the
names it bumped are handed to the refresher (_remote/listenerprocess.py), which renews the host's copies.

Election: every process using the directory runs a `ListenerThread`, which tries to take an
exclusive ``flock`` on ``cache.db-remote.lock``. The one that has it listens; the others retry
every `_ELECTION_POLL`. The kernel drops the lock when its holder dies, however it dies. A
FanoutCache's shards elect one listener in the FanoutCache's directory, which serves them all
(`StampSet`: every shard's prefix heard, every shard's stamp file kept).

Listening, per node (the server; on a cluster, every node that serves slots and every healthy
replica, see _remote/topology.py): a subscribed connection and a tracking connection redirected to it.
Once all are set up, every stamp is renewed (`RemoteWords.renew_all`: whatever was copied before
may have changed unheard), and then the lease is renewed every `_RENEW` while the connections are
healthy (a PING every `_PING_EVERY`), never beyond the last healthy moment plus
``max_staleness``. Each invalidated name bumps its bucket's stamp; a flush (no names) renews
all. On any connection error the lease is cleared at once, and listening starts over (with
renewed stamps) after a pause.

A cluster's topology is the listener's own, read afresh with ``CLUSTER NODES`` each time it
starts over and every `_PING_EVERY` (in place of the PING) from every node it listens on: a
node serving slots (or importing one) that it does not listen on ends the lease at once, and no
lease is granted until it listens on every such node (a primary that is down and not replaced
leaves the host without copies: a WARNING says so, at most every `_WARN_EVERY`); a healthy node
it does not listen on yet (a primary added, a node back) makes it start over with it. Listening
on replicas too, it already listens on the one promoted at a failover: Redis keeps a
connection's tracking across the promotion. Log records of the listener process are handed to
the electing process (`_listenerlog`), whose logging the application configures.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from .listenerlog import ChildLog, LeaseWatch
from .._log import LISTENER as _LOG
from .._log import RateLimit
from .client import RemoteStore
from .lagprobe import LagProbe
from .._errors import DiskCacheError
from .stamps import LEASE, LOCK_FILE, Member, StampSet
from .topology import Address, Topology

__all__ = ["Listener", "ListenerThread", "listener_for", "release_listener", "stop_electing"]

_ELECTION_POLL = 0.025
_RENEW = LEASE / 4
_PING_EVERY = 0.25
_RETRY_PAUSE = 0.2
_MAX_PAUSE = 10.0  # the longest wait before restarting a listener process that keeps dying
# After reading changes, wait this long before reading again: under a stream of writes the
# listener then wakes once per batch instead of once per change (each wake costs tens of us of
# CPU in the process it runs in); a change is read at most this much later. Measured: 90 us
# of listener CPU per write with one wake per change, 17 us with this pause (and hiredis).
_BATCH_PAUSE = 0.001
_CHANNEL = b"__redis__:invalidate"
_CONNECT_ROUNDS = 3  # rounds of asking the nodes listened on which others there are
_UNREACHABLE_WAIT = 1.0  # before trying again a node worth listening on that did not answer
_UNREACHABLE_MAX = 60.0  # (the wait doubles each time it does not answer, up to this)
_WARN_EVERY = 60.0  # the most often a lasting "cannot listen" is logged


def _serving(missing: set[Address | str]) -> str:
    return ", ".join(sorted(map(_shown, missing))) + ", serving Redis Cluster slots"


def _shown(node: Address | str) -> str:
    """A node for a message: host:port, or its id when no address is known."""
    if isinstance(node, str):
        return f"node {node}"
    return f"{node[0]}:{node[1]}"


class _Node:
    """The two connections of one node (the server, or a node of a cluster)."""

    def __init__(self, client: Any, prefixes: list[bytes], address: Address) -> None:
        # `client` speaks RESP2: there the invalidations arrive as plain pub/sub messages.
        self.address = address
        pool = client.connection_pool
        self.subscriber = pool.make_connection()
        self.tracker = pool.make_connection()
        try:
            self.subscriber.connect()
            self.subscriber.send_command("CLIENT", "ID")
            client_id = self.subscriber.read_response()
            self.subscriber.send_command("SUBSCRIBE", _CHANNEL)
            self.subscriber.read_response()
            self.tracker.connect()
            tracked: list[Any] = []
            for prefix in prefixes:
                tracked += ["PREFIX", prefix]
            self.tracker.send_command(
                "CLIENT", "TRACKING", "ON", "REDIRECT", client_id, "BCAST", *tracked
            )
            reply = self.tracker.read_response()
            if reply not in (b"OK", "OK"):
                raise ConnectionError(f"CLIENT TRACKING answered {reply!r}")
        except BaseException:
            self.close()
            raise

    def socket(self) -> Any:
        return self.subscriber._sock

    def close(self) -> None:
        for connection in (self.subscriber, self.tracker):
            try:
                connection.disconnect()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass


class _Uncovered(ConnectionError):
    """A cluster node that serves slots is not listened on: no lease."""


class _TopologyChanged(ConnectionError):
    """A node worth listening on appeared: start over with it."""


class Listener:
    """The listening itself (module docstring), run by the elected listener process."""

    def __init__(
        self, remote: RemoteStore, words: StampSet, max_staleness: float,
        stopped: Callable[[], bool], changed: Callable[[list[bytes]], None] | None = None,
        nodes: list[Address] | None = None,
    ) -> None:
        """`words`: the stamp files of the caches it serves (their prefixes are the ones
        heard); `nodes`: cluster nodes to ask for the topology before the URL's."""
        self._remote = remote
        self._words = words
        self._max_staleness = max_staleness
        self._stopped = stopped
        # Told the Redis names (prefix included) of each batch of changes once their stamps are
        # bumped: the refresher (_remote/listenerprocess.py) renews the host's copies of them.
        self._changed = changed
        self._names: list[bytes] = []
        self._probe = LagProbe(words)  # the invalidation lag, timed at each ping
        self._known: list[Address] = list(nodes or [])  # asked for the topology first
        # Cluster nodes worth listening on that did not answer: when to try again, and the
        # wait after that (doubling), so that an unreachable replica does not make the
        # listener start over (and drop the host's copies) in a loop.
        self._unreachable: dict[Address, tuple[float, float]] = {}
        self._uncovered_since: float | None = None
        self._warned_at = -_WARN_EVERY

    def run(self) -> None:
        """Listen until stopped, starting over after any connection error."""
        while not self._stopped():
            nodes: dict[Address, _Node] = {}
            try:
                nodes = self._connect()
                self._words.renew_all()
                self._covered()
                self._listen(list(nodes.values()))
            except _Uncovered as exc:
                self._words.set_lease(0.0)
                self._uncovered(exc)
                time.sleep(_RETRY_PAUSE)
            except Exception:  # noqa: BLE001 - any failure: no lease, then start over
                self._words.set_lease(0.0)
                time.sleep(_RETRY_PAUSE)
            finally:
                for node in nodes.values():
                    node.close()

    # --- the cluster's topology (_remote/topology.py) ---------------------------------------

    def _connect(self) -> dict[Address, _Node]:
        """Listen on the server, or on every node of the cluster worth it: raise `_Uncovered`
        unless all those that serve slots are listened on."""
        prefix = self._words.prefixes
        if not self._remote.cluster:
            seed = self._remote.seed()
            return {seed: _Node(self._remote.listener_client(), prefix, seed)}
        nodes: dict[Address, _Node] = {}
        try:
            view = self._ask_any()
            tried: set[Address] = set()
            for _ in range(_CONNECT_ROUNDS):  # a node's view may name nodes another's lacked
                required = view.required()
                targets = sorted(
                    address for address in view.wanted()
                    if address not in nodes and address not in tried
                    and (address in required or self._may_try(address))
                )
                if not targets:
                    break
                for address in targets:
                    tried.add(address)
                    try:
                        client = self._remote.listener_client(address)
                        nodes[address] = _Node(client, prefix, address)
                    except Exception:  # noqa: BLE001 - not answering: maybe it need not
                        self._failed(address)
                    else:
                        self._unreachable.pop(address, None)
                view = self._views(list(nodes.items()))
            missing = view.required() - nodes.keys()
            if missing:
                raise _Uncovered(_serving(missing))
        except BaseException:
            for node in nodes.values():
                node.close()
            raise
        return nodes

    def _ask_any(self) -> Topology:
        """The topology as the first node that answers sees it: nodes seen before first (the
        URL's node may be the one that failed), the URL's last."""
        seed = self._remote.seed()
        order = [address for address in self._known if address not in self._unreachable]
        order += [address for address in self._known if address in self._unreachable]
        asked = [*order, seed] if seed not in order else order
        for address in asked:
            client: Any = self._remote.listener_client(address)
            try:
                reply = client.execute_command("CLUSTER", "NODES")
            except Exception:  # noqa: BLE001 - try the next one
                continue
            finally:
                client.close()
            view = Topology()
            view.add(reply)
            return view
        raise _Uncovered(f"the cluster (no node answered: {', '.join(map(_shown, asked))})")

    def _views(self, nodes: list[tuple[Address, _Node]]) -> Topology:
        """The merged views of the nodes listened on (their tracking connections answer)."""
        if not nodes:
            raise _Uncovered("the cluster (no node answered)")
        for _, node in nodes:
            node.tracker.send_command("CLUSTER", "NODES")
        view = Topology()
        for _, node in nodes:
            view.add(node.tracker.read_response())
        self._known = view.known()
        return view

    def _check(self, nodes: list[_Node]) -> None:
        """The periodic check of a cluster's topology (it also serves as the PING)."""
        view = self._views([(node.address, node) for node in nodes])
        listened = {node.address for node in nodes}
        missing = view.required() - listened
        if missing:
            raise _Uncovered(_serving(missing))
        if any(address not in listened and self._may_try(address) for address in view.wanted()):
            raise _TopologyChanged("a node to listen on appeared")

    def _may_try(self, address: Address) -> bool:
        retry = self._unreachable.get(address)
        return retry is None or time.monotonic() >= retry[0]

    def _failed(self, address: Address) -> None:
        wait = self._unreachable.get(address, (0.0, _UNREACHABLE_WAIT / 2))[1] * 2
        wait = min(wait, _UNREACHABLE_MAX)
        self._unreachable[address] = (time.monotonic() + wait, wait)

    def _uncovered(self, exc: _Uncovered) -> None:
        """Say (at most every `_WARN_EVERY`) that this host serves no copies, and why."""
        now = time.monotonic()
        if self._uncovered_since is None:
            self._uncovered_since = now
        if now - self._warned_at >= _WARN_EVERY:
            self._warned_at = now
            _LOG.warning(
                "remote prefix %r: the listener cannot listen on %s; this host serves no "
                "local copies (it reads Redis) until it can (%.1f s so far)",
                self._remote.prefix.decode("utf-8", "replace"), exc, now - self._uncovered_since,
            )

    def _covered(self) -> None:
        since, self._uncovered_since = self._uncovered_since, None
        if since is not None:
            self._warned_at = -_WARN_EVERY
            _LOG.info(
                "remote prefix %r: the listener listens on every primary again, after %.1f s",
                self._remote.prefix.decode("utf-8", "replace"), time.monotonic() - since,
            )

    # --- listening ------------------------------------------------------------------------

    def _listen(self, nodes: list[_Node]) -> None:
        words = self._words
        healthy = time.time()
        pinged = healthy
        # The trackers too: one closed (a killed client, a reset) sends no more invalidations,
        # so it must end the lease at once, not at the next PING.
        sockets = [node.socket() for node in nodes] + [node.tracker._sock for node in nodes]
        waiting = select.poll()  # not select(): it fails on descriptors from 1024 up
        for sock in sockets:
            waiting.register(sock, select.POLLIN)
        while not self._stopped():
            handled = 0
            for node in nodes:
                if node.tracker.can_read(timeout=0):  # it is sent nothing unasked
                    raise ConnectionError("the tracking connection closed, or spoke unasked")
                while node.subscriber.can_read(timeout=0):
                    self._apply(node.subscriber.read_response())
                    handled += 1
            if self._names:
                names, self._names = self._names, []
                if self._changed is not None:
                    self._changed(names)
            now = time.time()
            if now - pinged >= _PING_EVERY:
                if self._remote.cluster:
                    self._check(nodes)  # may start over: see _check
                else:
                    for node in nodes:  # (one: the server)
                        self._probe.ping(node.tracker)
                healthy = pinged = time.time()
            words.set_lease(min(now + LEASE, healthy + self._max_staleness))
            if handled:
                # Changes are coming in: let the next ones gather and read them as one batch.
                # A change after a quiet spell is still read at once (the select below).
                time.sleep(_BATCH_PAUSE)
            else:
                waiting.poll(_RENEW * 1000)

    def _apply(self, message: Any) -> None:
        if not isinstance(message, list) or len(message) != 3 or message[0] != b"message":
            return  # the subscription's confirmation, or a PING's answer
        names = message[2]
        words = self._words
        if names is None:  # FLUSHDB / FLUSHALL: everything may have gone
            words.renew_all()
            return
        for name in names:
            if self._probe.heard(name):
                continue
            if words.heard(name):
                self._names.append(name)


class ListenerThread(threading.Thread):
    """This process's candidate for listener of one directory: it competes for the lock, and
    while it holds it, runs the listener in a child process of its own
    (_remote/listenerprocess.py), restarted if it dies. One listener serves every near cache of
    the directory's `members` (a FanoutCache's shards: their stamp files, their prefixes): one
    lock, one listener process, one refresher, whatever the shard count. A process of its own:
    in the caller's process the listener would wait for the GIL behind the application's
    threads (up to the 5 ms switch interval per change), and the application behind it."""

    def __init__(
        self, directory: str, remote: RemoteStore, members: list[Member], max_staleness: float,
        refresh: bool,
    ) -> None:
        super().__init__(name=f"diskcache_core listener {directory}", daemon=True)
        self._directory = directory
        self._members = members
        self._refresh = refresh
        self._lock_path = os.path.join(directory, LOCK_FILE)
        self._remote = remote
        self._max_staleness = max_staleness
        self._stop_event = threading.Event()
        self.users = 0
        self.pid = os.getpid()
        self.child: subprocess.Popen[bytes] | None = None
        self.fd = -1
        self._spawned = 0.0
        # False once the thread ended, or in a forked child: its caches elect anew (a flag,
        # not is_alive() and getpid(): a get that asks Redis checks it).
        self.current = True

    @property
    def listening(self) -> bool:
        """Whether this process holds the lock and its listener process runs."""
        child = self.child
        return child is not None and child.poll() is None

    def stop(self) -> None:
        self._stop_event.set()

    def start(self) -> None:
        """Try for the lock once in the calling thread (the cache's opening), starting the
        listener process if elected (`_first_try`); then the thread supervises it, or keeps
        trying. In the thread, that Python work (the mapping, the election, the spawn: about
        0.6 ms) held the GIL while the application's first gets waited for it after each Redis
        answer; while the cache opens, it waits for nothing."""
        self._first_try()
        super().start()

    def _first_try(self) -> None:
        try:
            self._words = StampSet(self._members)
        except (DiskCacheError, OSError, ValueError):
            return  # a stamp file we cannot map: no listener here, so no copy is ever served
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self.fd = os.open(self._lock_path, flags, 0o600)
        except OSError:  # a directory we cannot write: no listener here, so no copy is served
            self._words.close()
            return
        if self._take_lock():
            try:
                self.child = self._spawn()
            except OSError:  # (the thread tries again, and its failure is reported there)
                self._release_lock()

    def run(self) -> None:
        if self.fd == -1:
            self.current = False
            return
        try:
            self._elect()
        finally:
            self.current = False
            os.close(self.fd)
            self.fd = -1
            self._words.close()

    def _take_lock(self) -> bool:
        """Try for the lock once; True when taken (the previous listener's lease ends here)."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        self._words.set_lease(0.0)
        previous = self._words.listener_pid()
        self._words.set_listener(os.getpid())
        _LOG.info(
            "process %d takes over the listener of %r%s", os.getpid(), self._directory,
            f" from process {previous}" if previous not in (0, os.getpid()) else "",
        )
        return True

    def _release_lock(self) -> None:
        self._words.set_lease(0.0)
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _elect(self) -> None:
        first = self.child  # (started by `_first_try`: supervised even if stopped already)
        while first is not None or not self._stop_event.is_set():
            if first is None and not self._take_lock():
                self._stop_event.wait(_ELECTION_POLL)
                continue
            try:
                self._supervise(first)
            finally:
                first = None
                self._release_lock()

    def _spawn(self) -> subprocess.Popen[bytes]:
        """Start a listener process, its settings written to its standard input."""
        config = json.dumps({
            "directory": self._directory, "url": self._remote.url, "members": self._members,
            "timeout": self._remote.timeout,
            "max_staleness": self._max_staleness, "refresh": self._refresh,
            "parent": os.getpid(), "nodes": self._remote.known_nodes(),
        }).encode()
        self._spawned = time.monotonic()
        child = subprocess.Popen(
            [sys.executable, "-m", "diskcache_core._remote.listenerprocess"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, close_fds=True,
        )
        try:
            assert child.stdin is not None
            child.stdin.write(config)  # on a pipe: the URL's password stays out of ps
            child.stdin.close()
        except OSError:
            pass
        return child

    def _supervise(self, child: subprocess.Popen[bytes] | None) -> None:
        """Run the listener process (`child`, or one started now) until stopped; restart it
        when it dies."""
        pause = _RETRY_PAUSE
        watch = LeaseWatch(self._directory, self._words)
        deaths = RateLimit()
        while child is not None or not self._stop_event.is_set():
            if child is None:
                child = self.child = self._spawn()
            assert child.stdout is not None
            logs = ChildLog(child.stdout.fileno())
            while not self._stop_event.is_set() and child.poll() is None:
                self._stop_event.wait(_RETRY_PAUSE / 4)
                watch.check()
                logs.forward()
            logs.forward()
            self._words.set_lease(0.0)
            if child.poll() is None:
                child.terminate()
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            child.stdout.close()
            # It died: start another after a pause, longer each time it dies young (say, when
            # sys.executable cannot run it), so as not to spawn processes in a loop.
            pause = _RETRY_PAUSE if time.monotonic() - self._spawned > _MAX_PAUSE else min(
                pause * 2, _MAX_PAUSE
            )
            if not self._stop_event.is_set():
                deaths.warn(
                    _LOG, "the listener process of %r exited (status %s); another starts in %.1f s",
                    self._directory, child.returncode, pause,
                )
            child = None
            if not self._stop_event.is_set():
                self._stop_event.wait(pause)


# One candidate per directory in this process, shared by the caches that use it.
_threads: dict[str, ListenerThread] = {}
_threads_lock = threading.Lock()
_electing = [True]  # False in the refresher (_remote/listenerprocess.py): its cache takes no part


def stop_electing() -> None:
    """This process never competes to listen (the refresher, for its own cache)."""
    _electing[0] = False


def listener_for(
    directory: str, remote: RemoteStore, members: list[Member], max_staleness: float,
    refresh: bool,
) -> ListenerThread | None:
    """This process's listener candidate for `directory` (serving `members`), started if need
    be; one more user. The caches of one group share it: a FanoutCache's shards name their
    FanoutCache's directory, and so share one candidate, and one listener."""
    if not _electing[0]:
        return None
    key = os.path.realpath(directory)
    with _threads_lock:
        thread = _threads.get(key)
        if thread is None or not thread.current:
            thread = ListenerThread(directory, remote, members, max_staleness, refresh)
            thread.start()
            _threads[key] = thread
        thread.users += 1
        return thread


def release_listener(thread: ListenerThread) -> None:
    """One user fewer; the last one stops the thread (another process takes over)."""
    with _threads_lock:
        thread.users -= 1
        if thread.users > 0:
            return
        for key, value in list(_threads.items()):
            if value is thread:
                del _threads[key]
    thread.stop()
    if thread is not threading.current_thread() and thread.pid == os.getpid():
        thread.join(timeout=5)


def _forget_after_fork() -> None:
    # The child has none of the parent's threads, but their lock descriptors: close them, or a
    # child outliving its parent would keep the lock with nobody listening. The parent keeps
    # its lock (a flock belongs to the open file, released when its last descriptor closes).
    for thread in _threads.values():
        thread.current = False
        if thread.fd != -1:
            try:
                os.close(thread.fd)
            except OSError:
                pass
    _threads.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
