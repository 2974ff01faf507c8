"""Memcached and Redis servers started by the harness, on loopback only, and always stopped.

Each server is a context manager: entering starts the binary on a free port of 127.0.0.1 and waits
(bounded) until it answers; leaving stops it — terminate, then kill after a grace period — whether
the block ended normally, by an error or by Ctrl-C. Flushing speaks the servers' text protocols
over a plain socket, so the harness needs no client library for it.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from types import TracebackType
from typing import Optional

HOST = "127.0.0.1"  # the only address any server is ever bound to or contacted on
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
_IO_TIMEOUT = 5.0


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _exchange(port: int, request: bytes, expect: bytes) -> bool:
    """Send one request and tell whether the reply starts with ``expect``."""
    try:
        with socket.create_connection((HOST, port), timeout=_IO_TIMEOUT) as conn:
            conn.sendall(request)
            reply = b""
            while len(reply) < len(expect):
                chunk = conn.recv(64)
                if not chunk:
                    break
                reply += chunk
            return reply.startswith(expect)
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the server's process on Linux: get SIGTERM if the harness dies without cleaning up."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1 == PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Server:
    """One server process bound to 127.0.0.1 on a free port (subclasses say which binary)."""

    name = ""
    binary = ""
    install_hint = ""
    ping: tuple[bytes, bytes] = (b"", b"")
    flush_request: tuple[bytes, bytes] = (b"", b"")

    def __init__(self) -> None:
        self.port = 0
        self.process: Optional[subprocess.Popen[bytes]] = None
        self._workdir: Optional[str] = None

    @classmethod
    def missing_reason(cls) -> Optional[str]:
        """Why this server cannot run here, or None when its binary is on PATH."""
        if shutil.which(cls.binary) is None:
            return f"{cls.binary} is not installed: apt-get install {cls.install_hint}"
        return None

    @classmethod
    def version(cls) -> Optional[str]:
        """The binary's version line, for the results' metadata."""
        path = shutil.which(cls.binary)
        if path is None:
            return None
        try:
            done = subprocess.run(
                [path, cls.version_flag()], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        found = re.search(r"\d+\.\d+(\.\d+)?", done.stdout)
        return f"{cls.binary} {found.group(0)}" if found else None

    @staticmethod
    def version_flag() -> str:
        return "--version"

    def command(self) -> list[str]:
        """The argv that starts the server on ``self.port``."""
        raise NotImplementedError

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.stop()

    def start(self, attempts: int = 3) -> None:
        """Start on a free port and wait until it answers; a lost race for the port is retried."""
        problem = ""
        for _ in range(attempts):
            self._launch()
            if self._wait_ready():
                return
            problem = self._log_tail()
            self.stop()
        raise RuntimeError(f"{self.name} did not start on {HOST}: {problem or 'no output'}")

    def _launch(self) -> None:
        self._workdir = tempfile.mkdtemp(prefix=f"bench-{self.name}-")
        self.port = free_port()
        with open(os.path.join(self._workdir, "server.log"), "wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._workdir,
                # Its own session: a Ctrl-C at the terminal reaches the harness, which then
                # stops the server itself, in order, instead of the server dying mid-run.
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            if _exchange(self.port, *self.ping):
                return True
            time.sleep(0.05)
        return False

    def _log_tail(self) -> str:
        if self._workdir is None:
            return ""
        try:
            with open(os.path.join(self._workdir, "server.log"), "rb") as log:
                return log.read()[-500:].decode(errors="replace").strip()
        except OSError:
            return ""

    def flush(self) -> None:
        """Remove every item, so each benchmark run starts from an empty server."""
        if not _exchange(self.port, *self.flush_request):
            raise RuntimeError(f"{self.name} on {self.address} did not accept a flush")

    def stop(self) -> None:
        """Terminate the process, kill it if it lingers, and reap it."""
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=STOP_TIMEOUT)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


class MemcachedServer(Server):
    """memcached on TCP only (``-U 0``), 127.0.0.1 only."""

    name = "memcached"
    binary = "memcached"
    install_hint = "memcached"
    ping = (b"version\r\n", b"VERSION")
    flush_request = (b"flush_all\r\n", b"OK")

    @staticmethod
    def version_flag() -> str:
        return "-V"

    def command(self) -> list[str]:
        argv = [str(shutil.which(self.binary)), "-l", HOST, "-p", str(self.port), "-U", "0"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            argv += ["-u", "root"]  # memcached refuses to run as root without it
        return argv


class RedisServer(Server):
    """redis-server on 127.0.0.1 only, with persistence turned off."""

    name = "redis"
    binary = "redis-server"
    install_hint = "redis-server"
    ping = (b"PING\r\n", b"+PONG")
    flush_request = (b"FLUSHALL\r\n", b"+OK")

    def command(self) -> list[str]:
        return [
            str(shutil.which(self.binary)),
            "--bind", HOST,
            "--port", str(self.port),
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "yes",
        ]  # fmt: skip


SERVERS = {server.name: server for server in (MemcachedServer, RedisServer)}
