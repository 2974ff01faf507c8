"""How the command line shows keys, values and sizes: text for people, tagged JSON for programs.

Text output prints a value as it is when it is text (so ``get`` can feed other tools) and by
its repr otherwise. On a terminal, control characters in any line are shown escaped
(``\\x1b``), so that a value (or a file name in the directory) cannot drive the terminal:
retitle it, clear it, rewrite lines. Keys are always printed by their repr: a key names an
item only together with its type, so the int ``42`` (``42``) and the str ``"42"`` (``'42'``)
must never print alike, and a key holding a newline must stay on its line. JSON output says
each value's type.
"""

from __future__ import annotations

import json
import math
import time
from typing import IO, Any

from .caches import Unreadable

__all__ = ["Output", "Progress", "escape_controls", "human_size", "key_text", "plain", "present_key", "tagged"]

# Control characters (C0 but tab and newline, DEL, C1) as Python escapes: ESC starts the
# terminal's sequences, CSI (U+009B) does on some terminals, CR overwrites the line.
_ESCAPES = {
    code: f"\\x{code:02x}"
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))
    if chr(code) not in "\t\n"
}


def plain(value: Any) -> str:
    """A value for people: text as is, everything else as its repr."""
    return value if type(value) is str else repr(value)


def escape_controls(text: str) -> str:
    """`text` with its control characters (but tab and newline) written as ``\\xNN``."""
    return text.translate(_ESCAPES)


def key_text(key: Any) -> str:
    """A key for people: its repr, which differs for keys of different types (see above)."""
    return repr(key)


def tagged(value: Any) -> dict[str, Any]:
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


def present_key(key: Any, as_json: bool) -> Any:
    """A listed key, which may be Unreadable, as text or as tagged JSON."""
    if not as_json:
        return key_text(key)
    if isinstance(key, Unreadable):
        return {"type": "unreadable", "error": str(key.error)}
    return tagged(key)


def human_size(size: int) -> str:
    """A byte count, with a binary-unit approximation from 1 KiB up."""
    amount = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            return f"{size} bytes" if unit == "bytes" else f"{size} bytes ({amount:.1f} {unit})"
        amount /= 1024
    return f"{size} bytes"  # pragma: no cover


class Output:
    """Writes a command's result as text lines or as one JSON document."""

    def __init__(self, as_json: bool, stream: IO[str]) -> None:
        self.as_json = as_json
        self.stream = stream
        try:
            self.terminal = stream.isatty()  # text is shown escaped there (see `line`)
        except (AttributeError, ValueError, OSError):  # no such method, or a closed stream
            self.terminal = False

    def json(self, document: Any) -> None:
        """Write `document` as indented JSON; values JSON cannot hold are written `tagged`."""
        json.dump(document, self.stream, indent=2, allow_nan=False, default=tagged)
        self.stream.write("\n")

    def line(self, text: str = "") -> None:
        """Write one line of text; on a terminal with its control characters escaped (a value,
        a file name found by check), a pipe or file gets the text as it is."""
        self.stream.write((escape_controls(text) if self.terminal else text) + "\n")


class Progress:
    """Progress of work that can take more than a second, on a terminal's stderr only: one line
    rewritten in place, at most every `interval` seconds, cleared when the work is done. On a
    pipe or a file it writes nothing, so output stays scriptable."""

    def __init__(self, what: str, stream: IO[str], interval: float = 0.2) -> None:
        self.what = what
        self.stream = stream
        self.interval = interval
        try:
            self.enabled = stream.isatty()
        except (AttributeError, ValueError, OSError):
            self.enabled = False
        self._shown = False
        self._last = 0.0

    def step(self, status: str, force: bool = True) -> None:
        """Show `status`; unless `force`, only when `interval` passed since the last line."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        self.stream.write(f"\r\x1b[K{self.what}: {escape_controls(status)}")
        self.stream.flush()
        self._shown = True

    def count(self, done: int, unit: str) -> None:
        """Rate-limited: `done` `unit` so far."""
        self.step(f"{done} {unit}", force=False)

    def done(self) -> None:
        """Clear the progress line (if one was shown)."""
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False
