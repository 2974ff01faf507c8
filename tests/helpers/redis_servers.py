"""Real redis-server processes for the tests: a single server and a Redis Cluster (3 primaries,
optionally with replicas).

Built on the benchmark harness's servers (benchmarks/servers.py): 127.0.0.1 only, free ports
picked here, their own working directories, always stopped by the code that started them (and
sent SIGTERM by the kernel if the test process dies first). Waits are bounded loops.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest
import redis

from benchmarks.servers import HOST, START_TIMEOUT, RedisServer, _die_with_parent, free_port

__all__ = ["RedisTestCluster", "RedisTestServer", "needs_redis", "redis_missing"]

_CLUSTER_WAIT = 60.0


def redis_missing() -> str | None:
    """Why no redis-server can run here (None: it can)."""
    return RedisServer.missing_reason()


# The mark of a test that needs redis-server: skipped where none can run, except on CI, which
# installs it (there the test runs and fails, so that a missing server is never a silent pass).
needs_redis = pytest.mark.skipif(
    redis_missing() is not None and os.environ.get("CI") != "true", reason=str(redis_missing())
)


class RedisTestServer(RedisServer):
    """A redis-server for one test: optional password, restart on the same port, pause; with
    ``transports=True`` it also listens on a Unix socket in its working directory and on a
    TLS port of 127.0.0.1 (a throwaway certificate authority made by trustme)."""

    def __init__(self, password: str | None = None, transports: bool = False) -> None:
        super().__init__()
        self.password = password
        self.transports = transports
        self.tls_port = 0
        self._keep_port = 0

    def command(self) -> list[str]:
        argv = super().command()
        argv += ["--dir", str(self._workdir), "--dbfilename", "dump.rdb"]
        if self.password is not None:
            argv += ["--requirepass", self.password]
        if self.transports:
            argv += self._transport_options()
        return argv

    def _transport_options(self) -> list[str]:
        import trustme

        workdir = str(self._workdir)
        authority = trustme.CA()
        certificate = authority.issue_cert(HOST)
        authority.cert_pem.write_to_path(os.path.join(workdir, "ca.pem"))
        certificate.private_key_pem.write_to_path(os.path.join(workdir, "server.key"))
        certificate.cert_chain_pems[0].write_to_path(os.path.join(workdir, "server.pem"))
        self.tls_port = free_port()
        return [
            "--unixsocket", self.socket_path, "--unixsocketperm", "700",
            "--tls-port", str(self.tls_port), "--tls-auth-clients", "no",
            "--tls-cert-file", os.path.join(workdir, "server.pem"),
            "--tls-key-file", os.path.join(workdir, "server.key"),
            "--tls-ca-cert-file", os.path.join(workdir, "ca.pem"),
        ]

    @property
    def socket_path(self) -> str:
        return os.path.join(str(self._workdir), "redis.sock")

    @property
    def unix_url(self) -> str:
        """The server's Unix-socket URL (``transports=True``)."""
        return f"unix://{self.socket_path}?db=0"

    @property
    def tls_url(self) -> str:
        """The server's TLS URL, trusting the test authority (``transports=True``)."""
        authority = os.path.join(str(self._workdir), "ca.pem")
        return f"rediss://{HOST}:{self.tls_port}/0?ssl_ca_certs={authority}"

    @property
    def url(self) -> str:
        secret = f":{self.password}@" if self.password is not None else ""
        return f"redis://{secret}{HOST}:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=10)

    def _launch(self) -> None:
        if not self._keep_port:
            super()._launch()
            return
        # A restart: the same port and working directory (with the snapshot, if any).
        self.port = self._keep_port
        with open(os.path.join(str(self._workdir), "server.log"), "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self._workdir, start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            try:
                if self.client().ping():
                    return True
            except redis.exceptions.AuthenticationError:
                return True
            except redis.exceptions.RedisError:
                pass
            time.sleep(0.05)
        return False

    def restart(self, keep_data: bool) -> None:
        """Stop and start again on the same port: with its data (an RDB snapshot) or empty."""
        if keep_data:
            self.client().save()
        else:
            snapshot = os.path.join(str(self._workdir), "dump.rdb")
            if os.path.exists(snapshot):
                os.remove(snapshot)
        self._halt()
        self._keep_port = self.port
        try:
            self._launch()
            if not self._wait_ready():
                raise RuntimeError(f"redis-server did not restart: {self._log_tail()}")
        finally:
            self._keep_port = 0

    def _halt(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL the server (the port closes; nothing is saved)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the server keeps its connections but answers nothing (a hung host)."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)


class RedisTestCluster:
    """A real Redis Cluster on loopback: three primaries, slots split evenly, and `replicas`
    replicas of each (``cluster-replicas``). Nodes can be killed (SIGKILL) and restarted on
    their port with their ``nodes.conf`` (a restarted former primary rejoins as a replica),
    failed over by hand, and primaries added."""

    def __init__(self, replicas: int = 0, node_timeout: int = 5000) -> None:
        self.replicas = replicas
        self.node_timeout = node_timeout
        self.ports: list[int] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        self._workdir = ""
        self._binary = ""
        self._dirs: dict[int, str] = {}

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.ports[0]}/0?cluster=true"

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host=HOST, port=port, socket_timeout=10)

    def __enter__(self) -> RedisTestCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: apt-get install redis-server")
        self._binary = binary
        self._workdir = tempfile.mkdtemp(prefix="test-redis-cluster-")
        count = 3 * (1 + self.replicas)
        for _ in range(count):
            self._start_node()
        # Distinct config epochs before the nodes meet, as `redis-cli --cluster create` sets them: left
        # to the collision resolution, a node may bump its epoch during a slot move and win the slot
        # back in a third node's view for good (redis/redis#12336).
        for epoch, port in enumerate(self.ports, start=1):
            self.node(port).execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
        first = self.node(self.ports[0])
        for port in self.ports[1:]:
            first.execute_command("CLUSTER", "MEET", HOST, port)
        share = 16384 // 3
        ranges = [(0, share - 1), (share, 2 * share - 1), (2 * share, 16383)]
        for port, (low, high) in zip(self.ports, ranges):
            self.node(port).execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
        self._wait(lambda: all(self._knows(port, count) for port in self.ports), "meet")
        for number, port in enumerate(self.ports[3:]):
            primary = self.node_id(self.ports[number % 3])
            self.node(port).execute_command("CLUSTER", "REPLICATE", primary)
        self._wait(self._healthy, "become healthy")

    def _start_node(self) -> int:
        for _attempt in range(5):  # a free port may be taken by someone else meanwhile
            port = free_port()
            if port + 10000 > 65535:  # the cluster bus listens on port + 10000
                continue
            workdir = os.path.join(self._workdir, str(port))
            os.mkdir(workdir)
            self._dirs[port] = workdir
            process = self._launch(port)
            if self._wait_answer(port, process):
                self.ports.append(port)
                self.processes.append(process)
                return port
            process.kill()
            process.wait(timeout=10)
        raise RuntimeError("a cluster node did not start")

    def _launch(self, port: int) -> subprocess.Popen[bytes]:
        workdir = self._dirs[port]
        argv = [
            self._binary, "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no",
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout), "--dir", workdir,
            "--cluster-replica-validity-factor", "0",  # a replica may always take over
        ]
        with open(os.path.join(workdir, "server.log"), "ab") as log:
            return subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=workdir, start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )

    def _wait_answer(self, port: int, process: subprocess.Popen[bytes]) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None:
            if self._answers(port):
                return True
            time.sleep(0.05)
        return False

    def _answers(self, port: int) -> bool:
        try:
            return bool(self.node(port).ping())
        except redis.exceptions.RedisError:
            return False

    def _process(self, port: int) -> subprocess.Popen[bytes]:
        return self.processes[self.ports.index(port)]

    def alive(self) -> list[int]:
        """The ports of the nodes whose process runs."""
        return [port for port in self.ports if self._process(port).poll() is None]

    def _knows(self, port: int, count: int) -> bool:
        info = self.node(port).execute_command("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        return f"cluster_known_nodes:{count}" in text

    def _healthy(self) -> bool:
        try:
            for port in self.alive():
                info = self.node(port).execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
                if not self._knows(port, len(self.ports)):
                    return False
                replication = self.node(port).info("replication")
                if replication["role"] == "slave" and replication["master_link_status"] != "up":
                    return False
            return True
        except redis.exceptions.RedisError:
            return False

    def _wait(self, check: Any, what: str) -> None:
        deadline = time.monotonic() + _CLUSTER_WAIT
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.1)
        raise RuntimeError(f"the Redis Cluster did not {what} within {_CLUSTER_WAIT} s")

    def node_id(self, port: int) -> str:
        reply = self.node(port).execute_command("CLUSTER", "MYID")
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    def role(self, port: int) -> str:
        """``master`` or ``slave``, as the node itself says."""
        reply = self.node(port).execute_command("ROLE")[0]
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    def primaries(self) -> list[int]:
        """The ports of the live nodes that are primaries."""
        return [port for port in self.alive() if self.role(port) == "master"]

    def owner(self, slot: int) -> int:
        """The port of the primary that serves `slot`, as the first live node sees it."""
        return self._owner_seen_by(self.alive()[0], slot)

    def replica_of(self, primary: int) -> int:
        """The port of a live replica of the primary on `primary`."""
        for port in self.alive():
            replication = self.node(port).info("replication")
            if replication["role"] == "slave" and int(replication["master_port"]) == primary:
                return port
        raise LookupError(primary)

    def kill(self, port: int) -> None:
        """SIGKILL the node on `port` (nothing is saved; it keeps its nodes.conf)."""
        process = self._process(port)
        process.kill()
        process.wait(timeout=10)

    def restart(self, port: int) -> None:
        """Start the killed node on `port` again, with its nodes.conf: it rejoins the cluster."""
        process = self._launch(port)
        self.processes[self.ports.index(port)] = process
        if not self._wait_answer(port, process):
            raise RuntimeError(f"cluster node {port} did not restart")

    def failover(self, replica: int) -> None:
        """``CLUSTER FAILOVER`` on the replica on `replica`, and wait until it is a primary
        that every live node knows as such."""
        self.node(replica).execute_command("CLUSTER", "FAILOVER")
        replica_id = self.node_id(replica)
        self._wait(lambda: self.role(replica) == "master" and all(
            self._flags_seen_by(port, replica_id).startswith(("master", "myself,master"))
            for port in self.alive()), "fail over")

    def wait_promoted(self, slot: int, old: int) -> int:
        """Wait until a node other than `old` serves `slot` in every live node's view; its port."""
        self._wait(lambda: all(
            self._owner_seen_by(port, slot) not in (old, -1) for port in self.alive()
        ), "promote a replica")
        return self.owner(slot)

    def add_primary(self) -> int:
        """A new node that joins as a primary without slots; its port."""
        port = self._start_node()
        self.node(self.alive()[0]).execute_command("CLUSTER", "MEET", HOST, port)
        self._wait(self._healthy, "take in a node")  # it knows who serves each slot
        return port

    def _flags_seen_by(self, port: int, node_id: str) -> str:
        text = self.node(port).execute_command("CLUSTER", "NODES")
        text = text.decode() if isinstance(text, bytes) else str(text)
        for line in text.splitlines():
            fields = line.split()
            if fields and fields[0] == node_id:
                return fields[2]
        return ""

    def move_slot(self, slot: int, to_port: int) -> None:
        """Migrate `slot` and its keys to the primary on `to_port`, live (clients get MOVED)."""
        source_port = self.owner(slot)
        if source_port == to_port:
            return
        source, target = self.node(source_port), self.node(to_port)
        source_id, target_id = self.node_id(source_port), self.node_id(to_port)
        target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while True:
            keys = source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            source.execute_command("MIGRATE", HOST, to_port, "", 0, 10000, "KEYS", *keys)
        # The order Redis documents: the target first (it takes a new config epoch), then the
        # source, then the other primaries.
        others = [port for port in self.primaries() if port not in (to_port, source_port)]
        for port in [to_port, source_port, *others]:
            self.node(port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        try:
            self._wait(lambda: all(
                self._owner_seen_by(port, slot) == to_port for port in self.alive()),
                "agree on a slot")
        except RuntimeError as error:
            views = {port: self.node(port).execute_command("CLUSTER", "NODES") for port in self.alive()}
            raise RuntimeError(f"{error}: slot {slot} moved {source_port} -> {to_port}; {views}")

    def _owner_seen_by(self, port: int, slot: int) -> int:
        try:
            entries = self.node(port).execute_command("CLUSTER", "SLOTS")
        except redis.exceptions.RedisError:
            return -1
        for entry in entries:
            if entry[0] <= slot <= entry[1]:
                return int(entry[2][1])
        return -1

    def stop(self) -> None:
        processes, self.processes = self.processes, []
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = ""
