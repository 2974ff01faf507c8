"""The listener process's log channel: its records go, one line each, down the pipe of its
standard output to the process that started it (`ParentLog`), which logs them through the
application's logging configuration (`ChildLog`). A child process cannot reach the
application's handlers itself.
"""

from __future__ import annotations

import logging
import os
import stat

__all__ = ["ChildLog", "ParentLog", "forward_logs_to_parent"]


class ParentLog(logging.Handler):
    """Hands this process's log records to the electing process, which logs them through its
    own logging (`ChildLog`): one line each on standard output, a pipe it reads."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record).replace("\n", " ")
            os.write(1, f"{record.levelno} {record.name} {text}\n".encode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 - a log line never stops the listener
            pass


def forward_logs_to_parent() -> None:
    handler = ParentLog()
    handler.setFormatter(logging.Formatter("%(message)s"))
    package = logging.getLogger("diskcache_core")
    package.addHandler(handler)
    package.setLevel(logging.INFO)  # the electing process's configuration filters them
    package.propagate = False
    try:
        if stat.S_ISFIFO(os.fstat(1).st_mode):
            os.set_blocking(1, False)  # a full pipe drops lines rather than stop the listener
    except OSError:
        pass


class ChildLog:
    """The listener process's log lines (``<level> <logger> <message>``, see
    `ParentLog`), logged in this process, where the application configured logging."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._pending = b""

    def forward(self) -> None:
        """Log the lines the listener process wrote since the last call (never waits)."""
        while True:
            try:
                data = os.read(self._fd, 65536)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            *lines, self._pending = (self._pending + data).split(b"\n")
            for line in lines:
                level, _, rest = line.decode("utf-8", "replace").partition(" ")
                name, _, message = rest.partition(" ")
                if level.isdigit() and name.startswith("diskcache_core"):
                    logging.getLogger(name).log(int(level), "%s", message)
