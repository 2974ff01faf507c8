"""Progress display on stderr: a live line on a terminal, one plain line per run otherwise."""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO


class Progress:
    """Reports each (backend, process count) run; redraws a live line only on a terminal."""

    def __init__(self, total_runs: int, stream: Optional[TextIO] = None,
                 interactive: Optional[bool] = None, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.quiet = quiet
        self.total_runs = total_runs
        self.run_index = 0
        self._title = ""
        self._operations = 0
        self._started = 0.0
        self._last_draw = 0.0
        self._live = False

    def _write(self, text: str) -> None:
        if not self.quiet:
            self.stream.write(text)
            self.stream.flush()

    def _clear_live(self) -> None:
        if self._live:
            self._write("\r\033[K")
            self._live = False

    def note(self, line: str) -> None:
        """A standalone message, such as why a backend is skipped."""
        self._clear_live()
        self._write(line + "\n")

    def start(self, label: str, processes: int, operations: int) -> None:
        """A run begins: ``operations`` is the total over all its workers."""
        self.run_index += 1
        noun = "process" if processes == 1 else "processes"
        self._title = f"[{self.run_index}/{self.total_runs}] {label}, {processes} {noun}"
        self._operations = operations
        self._started = time.monotonic()
        self._last_draw = 0.0
        self.update(0)

    def update(self, done: int) -> None:
        """Redraw the live line (terminal only, at most five times a second)."""
        now = time.monotonic()
        if not self.interactive or now - self._last_draw < 0.2:
            return
        self._last_draw = now
        share = 100.0 * done / self._operations if self._operations else 0.0
        self._write(f"\r\033[K{self._title}: {share:5.1f}% {now - self._started:6.1f} s")
        self._live = True

    def finish(self, outcome: str) -> None:
        """The run is over: one permanent line with its outcome."""
        self._clear_live()
        elapsed = time.monotonic() - self._started
        self._write(f"{self._title}: {outcome} ({elapsed:.1f} s)\n")
