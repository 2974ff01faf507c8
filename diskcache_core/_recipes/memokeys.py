"""Memoization keys: `make_key` turns a call's arguments into a canonical JSON string.

Tuples, str, bytes, int, float, bool and None (and lists, dicts, sets of them) encode by value,
so equal arguments give the same key in every process and every run. python-diskcache pickles
the argument tuple instead, whose bytes depend on object identity (``('ab', 'ab')`` pickles
differently when the two strings are one object) and on type (``f(3)`` and ``f(3.0)`` miss
each other even untyped). Other types fall back to pickle (fixed protocol).
"""

from __future__ import annotations

import base64
import inspect
import pickle
import pickletools
from collections.abc import Callable, Iterable
from json.encoder import encode_basestring_ascii
from typing import Any

__all__ = [
    "args_to_key",
    "check_ignore",
    "encode_typed",
    "encode_value",
    "make_key",
    "quote_text",
    "with_positions",
]

_PICKLE_PROTOCOL = 4  # fixed, not the interpreter's default: keys must not change with Python


def quote_text(value: str) -> str:
    """`value` as a JSON string literal in ASCII (so lone surrogates cannot break the UTF-8 the
    database wants). A str holding surrogates is tagged with its code units instead: in JSON,
    the pair ``\\ud83d\\ude00`` and the one character it stands for would read the same."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return '{"str":"' + value.encode("utf-8", "surrogatepass").hex() + '"}'
    return encode_basestring_ascii(value)


_INT64 = 2**63
_SPECIAL_FLOATS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def encode_value(value: Any) -> str:
    """`value` as canonical JSON text: equal for equal values in every process and run.

    Numbers that compare equal encode equally (``1``, ``1.0``, ``True``); typed keys use
    `encode_typed`. Tuples become JSON arrays; every other container is tagged so none collide.
    The text is built directly: ``json.dumps`` with options builds a new encoder on every call.
    """
    kind = type(value)
    if kind is str:  # (quote_text, inlined for the common ASCII argument)
        return encode_basestring_ascii(value) if value.isascii() else quote_text(value)
    if kind is int or kind is bool:
        return _encode_int(int(value))
    if value is None:
        return "null"
    if kind is float:
        return _encode_int(int(value)) if value.is_integer() else _float_text(value)
    return _encode_other(value, kind, encode_value)


def encode_typed(value: Any) -> str:
    """`encode_value` for typed keys: a bool or float keeps its type inside containers too, so
    ``f((1, 2))`` and ``f((1.0, 2.0))`` differ (``make_key`` names the arguments' own types)."""
    kind = type(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is float:
        return _float_text(value)  # always with a point, an exponent, or as NaN/Infinity
    if kind is tuple or kind is list or kind is dict or kind is set or kind is frozenset:
        return _encode_other(value, kind, encode_typed)
    return encode_value(value)


def _float_text(value: float) -> str:
    text = repr(value)  # shortest round-trip form: the same everywhere
    return _SPECIAL_FLOATS.get(text, text)


def _encode_other(value: Any, kind: type, encode: Callable[[Any], str]) -> str:
    """A container, its items encoded with `encode`; bytes; anything else pickled."""
    if kind is tuple:
        return "[" + ",".join(map(encode, value)) + "]"
    if kind is bytes:
        return '{"bytes":"' + bytes.hex(value) + '"}'
    if kind is list:
        return '{"list":[' + ",".join(map(encode, value)) + "]}"
    if kind is dict:
        items = sorted("[" + encode(k) + "," + encode(v) + "]" for k, v in value.items())
        return '{"dict":[' + ",".join(items) + "]}"
    if kind is set or kind is frozenset:  # {1} == frozenset({1}): one tag for both
        return '{"set":[' + ",".join(sorted(map(encode, value))) + "]}"
    return _pickled(value)


def _pickled(value: Any) -> str:
    data = pickletools.optimize(pickle.dumps(value, protocol=_PICKLE_PROTOCOL))
    return '{"pickle":"' + base64.b64encode(data).decode("ascii") + '"}'


def _or_pickled(encode: Callable[[Any], str]) -> Callable[[Any], str]:
    """`encode`, or for a container that holds itself (or is nested too deeply to walk) its
    pickle, which keeps such cycles: the argument is still a key, as in python-diskcache."""

    def encode_argument(value: Any) -> str:
        try:
            return encode(value)
        except RecursionError:
            return _pickled(value)

    return encode_argument


def _arguments_text(
    args: tuple[Any, ...], kwargs: dict[str, Any], names: list[str], encode: Callable[[Any], str]
) -> str:
    text = ",".join(map(encode, args)) + "],["
    if names:
        text += ",".join("[" + quote_text(name) + "," + encode(kwargs[name]) + "]" for name in names)
    return text


def _encode_int(value: int) -> str:
    # Decimal up to 64 bits; bigger in hex (str(int) is limited to 4300 digits by default).
    return str(value) if -_INT64 <= value < _INT64 else '{"int":"' + hex(value) + '"}'


def _type_name(kind: type) -> str:
    return quote_text(f"{kind.__module__}.{kind.__qualname__}")


def make_key(
    base: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    typed: bool = False,
    ignore: Iterable[int | str] = (),
) -> str:
    """The cache key of a call: ``[base,[args],[[name,value],...]]`` (+ types), JSON text.

    Keyword arguments are sorted by name. Positions and names in `ignore` are left out. With
    `typed`, the arguments' type names are appended, so ``f(3)`` and ``f(3.0)`` differ, and
    bools and floats inside them are encoded as such (`encode_typed`).
    """
    if ignore:
        skip = ignore if type(ignore) is frozenset else check_ignore(ignore)
        args = tuple(arg for index, arg in enumerate(args) if index not in skip)
        kwargs = {name: value for name, value in kwargs.items() if name not in skip}
    names = sorted(kwargs)
    encode = encode_typed if typed else encode_value
    try:
        arguments = _arguments_text(args, kwargs, names, encode)
    except RecursionError:  # rare: a cycle; the common call pays no extra frame per argument
        arguments = _arguments_text(args, kwargs, names, _or_pickled(encode))
    text = quote_text(base) + ",[" + arguments + "]"
    if typed:
        types = [type(arg) for arg in args] + [type(kwargs[name]) for name in names]
        text += ",[" + ",".join(map(_type_name, types)) + "]"
    return "[" + text + "]"


def check_ignore(ignore: Any) -> frozenset[Any]:
    """`ignore` as a set; not a str, which would ignore its letters (python-diskcache: substrings)."""
    if isinstance(ignore, (str, bytes)) or not isinstance(ignore, Iterable):
        raise TypeError(f"ignore must be a set of positions and names as {{0, 'session'}}, not {ignore!r:.50}")
    return frozenset(ignore)


def with_positions(func: Any, ignore: frozenset[Any]) -> frozenset[Any]:
    """`ignore` with the position of each name in it that is a positional parameter of `func`,
    so that the argument is left out whether it is passed by position or by keyword
    (python-diskcache issue 240, as diskcache-community does). Unchanged for a callable
    without a signature."""
    names = {name for name in ignore if type(name) is str}
    if not names:
        return ignore
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return ignore
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positions = {
        index
        for index, parameter in enumerate(parameters)
        if parameter.kind in positional and parameter.name in names
    }
    return ignore | positions


def args_to_key(
    base: tuple[str] | str, args: tuple[Any, ...], kwargs: dict[str, Any], typed: bool,
    ignore: Iterable[int | str],
) -> str:
    """python-diskcache's name and signature for `make_key`: the key ``memoize`` stores for a
    call, its `base` the one-item tuple of the function's name (or that name)."""
    name = base[0] if type(base) is tuple and len(base) == 1 else base
    if type(name) is not str:
        raise TypeError(f"base must be a function's name or a one-item tuple of it, not {base!r}")
    return make_key(name, args, kwargs, typed, ignore)
