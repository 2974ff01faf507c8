"""The pickle checker behind SafeDisk: every global a pickle names must be allowed, and may only be called.

A planted pickle must neither run code nor change the process. Globals are looked up in a table
resolved from the allow-list (never imported on demand); `check_pickle` reads the opcodes with
a symbolic stack and memo, so that a global is only ever called — never returned, stored in a
value, or given state — and state (BUILD, item and attribute setting) only reaches objects the
pickle itself made. One exception: a defaultdict's factory, which pickle passes as a bare class.
"""

from __future__ import annotations

import _compat_pickle
import collections
import copyreg
import enum
import importlib
import pickletools
from typing import Any, Iterable

from .._errors import UnsafePickleError

_SAFE_GLOBALS = frozenset(
    {
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "complex"),
        ("builtins", "bytearray"),
        ("builtins", "slice"),
        ("builtins", "range"),
        ("collections", "Counter"),
        ("collections", "OrderedDict"),
        ("collections", "defaultdict"),  # its factory: see `FACTORY_ARGS`
        ("collections", "deque"),
        ("_codecs", "encode"),  # how protocols 0-2 spell bytes
        ("copyreg", "_reconstructor"),  # protocols 0-1 objects; the classes are still checked
        ("datetime", "date"),
        ("datetime", "time"),
        ("datetime", "datetime"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("decimal", "Decimal"),
        ("fractions", "Fraction"),
        ("uuid", "UUID"),
        ("uuid", "SafeUUID"),
    }
)
_SAFE_BUILTIN_TYPES = frozenset({"object", "int", "float", "str", "bytes", "tuple", "list", "dict", "bool"})


class Global:
    """A stack tag for an allowed global: the object, its name for messages, and whether calling
    it may hand back a shared object (an Enum member) rather than a new one. With `classes` it
    stands for the arguments ``(cls, base, state)`` of ``copyreg._reconstructor`` instead.
    `factory`: whether it may be a defaultdict's default factory (an allowed class, not an Enum)."""

    __slots__ = ("obj", "name", "shared", "classes", "factory")

    def __init__(self, obj: Any, name: str, classes: tuple[Global, Global] | None = None) -> None:
        self.obj = obj
        self.name = name
        self.shared = isinstance(obj, enum.EnumMeta)
        self.classes = classes
        self.factory = isinstance(obj, type) and not self.shared and classes is None


# The tag of the 1-tuple ``(factory,)`` that pickle passes to defaultdict: the one place a class
# stands as a value. Harmless there: loading it runs nothing, and the defaultdict later calls it
# with no arguments, which makes an empty value of an allowed type (or raises). Any other use of
# this tuple (a value, the arguments of another call) is refused as a global is.
FACTORY_ARGS = Global(None, "(a defaultdict factory,)")


def global_table(allowed: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Global]:
    """`allowed` keyed by each spelling a pickle may use: the name itself, and the Python 2 name
    that protocols 0-2 write (``__builtin__.set``, ``copy_reg._reconstructor``)."""
    table = {key: Global(obj, f"{key[0]}.{key[1]}") for key, obj in allowed.items()}
    modules = {module for module, _ in allowed}
    for old, new in _compat_pickle.NAME_MAPPING.items():
        if new in allowed:
            table.setdefault(old, table[new])
    for old_module, module in _compat_pickle.IMPORT_MAPPING.items():
        if module in modules:
            for new_module, name in allowed:
                if new_module == module and (old_module, name) not in _compat_pickle.NAME_MAPPING:
                    table.setdefault((old_module, name), table[(new_module, name)])
    return table


_default_globals: dict[tuple[str, str], Any] = {}


def safe_globals() -> dict[tuple[str, str], Any]:
    """The default allow-list's objects, imported once."""
    if not _default_globals:
        names = _SAFE_GLOBALS | {("builtins", name) for name in _SAFE_BUILTIN_TYPES}
        _default_globals.update(
            {(module, name): getattr(importlib.import_module(module), name) for module, name in names}
        )
    return _default_globals


def refused(reason: str) -> UnsafePickleError:
    return UnsafePickleError(f"refusing to unpickle: {reason}")


def not_listed(module: str, name: str) -> UnsafePickleError:
    return UnsafePickleError(
        f"refusing to unpickle {module}.{name}: not on SafeDisk's allow-list"
        " (name the type in disk_allowed_types to allow it)"
    )


# How the check reads an opcode's argument: its size in bytes when >= 0, else one of these.
_LINE, _TWO_LINES, _SIZE1, _SIZE4, _SIZE4U, _SIZE8U = -1, -2, -3, -4, -5, -6
# What an opcode does to the stack, as far as the check cares (the commonest first; the
# check copies these into locals, which Python reads faster).
_ACTION_CODES = (
    _PUSH, _STRING, _MEMOIZE, _GET, _PUT, _TUPLE_N, _REDUCE, _MARK, _FILL, _NEWOBJ, _BUILD,
    _SETITEM, _APPEND, _GLOBAL, _CONTAINER, _TUPLE, _NOP, _STOP, _POP, _DUP, _POP_MARK, _EXT,
    _INST, _OBJ, _NEWOBJ_EX,
) = tuple(range(25))
_ACTIONS = {
    **dict.fromkeys(
        "INT BININT BININT1 BININT2 LONG LONG1 LONG4 STRING BINSTRING SHORT_BINSTRING BINBYTES"
        " SHORT_BINBYTES BINBYTES8 BYTEARRAY8 NONE NEWTRUE NEWFALSE FLOAT BINFLOAT EMPTY_LIST"
        " EMPTY_TUPLE EMPTY_DICT EMPTY_SET".split(),
        _PUSH,
    ),
    **dict.fromkeys("UNICODE SHORT_BINUNICODE BINUNICODE BINUNICODE8".split(), _STRING),
    **dict.fromkeys("GET BINGET LONG_BINGET".split(), _GET),
    **dict.fromkeys("PUT BINPUT LONG_BINPUT".split(), _PUT),
    **dict.fromkeys("TUPLE1 TUPLE2 TUPLE3".split(), _TUPLE_N),
    **dict.fromkeys("APPENDS SETITEMS ADDITEMS".split(), _FILL),
    **dict.fromkeys("GLOBAL STACK_GLOBAL".split(), _GLOBAL),
    **dict.fromkeys("LIST DICT FROZENSET".split(), _CONTAINER),
    **dict.fromkeys("PROTO FRAME".split(), _NOP),
    **dict.fromkeys("EXT1 EXT2 EXT4".split(), _EXT),
    "MEMOIZE": _MEMOIZE, "REDUCE": _REDUCE, "MARK": _MARK, "NEWOBJ": _NEWOBJ, "BUILD": _BUILD,
    "SETITEM": _SETITEM, "APPEND": _APPEND, "TUPLE": _TUPLE, "STOP": _STOP, "POP": _POP,
    "DUP": _DUP, "POP_MARK": _POP_MARK, "INST": _INST, "OBJ": _OBJ, "NEWOBJ_EX": _NEWOBJ_EX,
}  # refused, as not listed: PERSID, BINPERSID, NEXT_BUFFER, READONLY_BUFFER, any future opcode


def _opcode_table() -> list[tuple[int, int] | None]:
    """``(action, argument layout)`` by opcode byte; None for an opcode SafeDisk refuses."""
    sizes = {
        pickletools.UP_TO_NEWLINE: _LINE,
        pickletools.TAKEN_FROM_ARGUMENT1: _SIZE1,
        pickletools.TAKEN_FROM_ARGUMENT4: _SIZE4,
        pickletools.TAKEN_FROM_ARGUMENT4U: _SIZE4U,
        pickletools.TAKEN_FROM_ARGUMENT8U: _SIZE8U,
    }
    table: list[tuple[int, int] | None] = [None] * 256
    for opcode in pickletools.opcodes:
        action = _ACTIONS.get(opcode.name)
        if action is None:
            continue
        arg = opcode.arg
        if arg is None:
            layout = 0
        elif arg is pickletools.stringnl_noescape_pair:
            layout = _TWO_LINES  # GLOBAL and INST: the module and the name, a line each
        else:
            layout = arg.n if arg.n >= 0 else sizes[arg.n]
        table[ord(opcode.code)] = (action, layout)
    return table


_OPCODES = _opcode_table()
_SHARED = -1  # stack tag: what calling an Enum class gave (a value, perhaps a shared member)
_STACK_GLOBAL = 0x93


def _describe(tag: Any) -> str:
    """What a stack tag stands for, in a refusal message."""
    if type(tag) is Global:
        return f"global {tag.name}"
    return "an Enum member" if tag == _SHARED else "a value"


def _check_values(tags: Iterable[Any]) -> None:
    """Refuse a global (class or function) that would end up inside the result."""
    for tag in tags:
        if type(tag) is Global:
            raise refused(f"{_describe(tag)} as a value (allowed types may only be instantiated)")


def _check_target(tag: Any, what: str) -> None:
    """Refuse to fill or set the state of anything but an object this pickle made."""
    if not (tag is None or (type(tag) is int and tag >= 0)):
        raise refused(f"{what} {_describe(tag)}")


def _tuple_tag(items: list[Any]) -> Global:
    """The tag of a tuple holding a global: ``(factory,)`` for defaultdict, or ``(cls, base,
    state)`` for _reconstructor."""
    if len(items) == 1 and items[0].factory:
        return FACTORY_ARGS
    if len(items) == 3 and FACTORY_ARGS not in items[:2]:
        cls, base, state = items
        if type(cls) is Global and type(base) is Global and not (cls.classes or base.classes):
            if not (cls.shared or base.shared):  # an Enum class would give back a shared member
                _check_values((state,))
                return Global(None, f"({cls.name}, {base.name}, ...)", (cls, base))
    _check_values(items)  # raises: no other tuple may hold a global (nor an Enum class)
    raise AssertionError("unreachable: the tuple holds a global")


def _memo_index(data: bytes, start: int, end: int, layout: int) -> int:
    """The memo index of LONG_BINGET/LONG_BINPUT (4 bytes) or GET/PUT (a decimal line)."""
    if layout == 4:
        return int.from_bytes(data[start:end], "little")
    line = data[start : end - 1]
    if not line.isdigit():  # digits only: what int() and the C unpickler read alike
        raise refused(f"memo index {line!r}")
    return int(line)


def _global_names(data: bytes, start: int, end: int) -> tuple[str, str]:
    """The module and name lines of GLOBAL or INST (UTF-8, as the C unpickler reads them)."""
    split = data.index(b"\n", start)
    return data[start:split].decode(), data[split + 1 : end - 1].decode()


def _string_at(data: bytes, pos: int) -> str:
    """The str that the unicode opcode at `pos` pushes (decoded as the C unpickler does)."""
    code = data[pos]
    if code == 0x8C:  # SHORT_BINUNICODE
        start, size = pos + 2, data[pos + 1]
    elif code == 0x58:  # BINUNICODE
        start, size = pos + 5, int.from_bytes(data[pos + 1 : pos + 5], "little")
    elif code == 0x8D:  # BINUNICODE8
        start, size = pos + 9, int.from_bytes(data[pos + 1 : pos + 9], "little")
    else:  # UNICODE: one raw-unicode-escape line
        return data[pos + 1 : data.index(b"\n", pos + 1)].decode("raw-unicode-escape")
    return data[start : start + size].decode("utf-8", "surrogatepass")


# One function, over 100 lines, by design: a single pass over the opcodes that follows the stack
# and the memo symbolically; each opcode's case reads and changes that shared state, so split
# into functions it would pass the state to and fro per opcode, slower and harder to audit.
def check_pickle(data: bytes, table: dict[tuple[str, str], Global]) -> None:
    """Refuse pickle `data` unless every global in it is allowed and is only ever called.

    The C unpickler has no hook on BUILD, so the opcodes are read first and the stack followed
    symbolically. A slot holds a tag: None for a value this pickle made, an int >= 0 for a str
    (the offset of its opcode: STACK_GLOBAL reads its names there), `_SHARED` for what an Enum
    class returned, or a `Global`. A global may be called (REDUCE, NEWOBJ, NEWOBJ_EX, INST, OBJ,
    or passed as a class to _reconstructor; a class may also be a defaultdict's factory), never
    kept in a value or returned; neither it nor
    an Enum member gets state or items (BUILD, SETITEM(S), APPEND(S), ADDITEMS). The memo keeps
    tags, so GET brings back what PUT saw.
    """
    (
        PUSH, STRING, MEMOIZE, GET, PUT, TUPLE_N, REDUCE, MARK, FILL, NEWOBJ, BUILD, SETITEM,
        APPEND, GLOBAL, CONTAINER, TUPLE, NOP, STOP, POP, DUP, POP_MARK, EXT, INST, OBJ, NEWOBJ_EX,
    ) = _ACTION_CODES
    SIZE1, LINE, SIZE4, SIZE4U, SIZE8U = _SIZE1, _LINE, _SIZE4, _SIZE4U, _SIZE8U
    opcodes = _OPCODES
    end = len(data)
    stack: list[Any] = []
    marks: list[list[Any]] = []
    memo: dict[int, Any] = {}
    seen_global = False  # until a global is pushed, every tag is a plain value
    pos = at = 0
    try:
        while True:
            at = pos
            code = data[at]
            if code == 0x94:  # MEMOIZE, the commonest opcode from protocol 4 on: a shortcut
                memo[len(memo)] = stack[-1]
                pos += 1
                continue
            entry = opcodes[code]
            if entry is None:
                raise refused(f"opcode {bytes([code])!r} at byte {at}")
            action, layout = entry
            start = at + 1
            if layout >= 0:
                pos = start + layout
            elif layout == SIZE1:
                start += 1
                pos = start + data[at + 1]
            elif layout == LINE:
                pos = data.index(b"\n", start) + 1
            elif layout == SIZE4U or layout == SIZE4:
                size = int.from_bytes(data[start : start + 4], "little", signed=layout == SIZE4)
                if size < 0:
                    raise refused(f"negative length at byte {at}")
                start += 4
                pos = start + size
            elif layout == SIZE8U:
                start += 8
                pos = start + int.from_bytes(data[at + 1 : start], "little")
            else:  # _TWO_LINES
                pos = data.index(b"\n", data.index(b"\n", start) + 1) + 1
            if pos > end:
                raise refused("truncated pickle")

            if action == PUSH:
                stack.append(None)
            elif action == STRING:
                stack.append(at)
            elif action == MEMOIZE:
                memo[len(memo)] = stack[-1]
            elif action == GET:
                stack.append(memo[data[start] if layout == 1 else _memo_index(data, start, pos, layout)])
            elif action == PUT:
                index = data[start] if layout == 1 else _memo_index(data, start, pos, layout)
                if index > end:  # the C unpickler would size its memo for it
                    raise refused(f"memo index {index}")
                memo[index] = stack[-1]
            elif action == TUPLE_N:  # TUPLE1, TUPLE2, TUPLE3
                count = code - 0x84
                if len(stack) < count:
                    raise IndexError("stack underflow")
                if seen_global and Global in map(type, stack[-count:]):
                    stack[-count:] = (_tuple_tag(stack[-count:]),)
                else:
                    stack[-count:] = (None,)
            elif action == REDUCE:
                args = stack.pop()
                func = stack[-1]
                if type(func) is not Global or func.classes is not None:
                    raise refused(f"a call of {_describe(func)}")
                if type(args) is Global and (
                    func.obj is not collections.defaultdict if args is FACTORY_ARGS
                    else args.classes is None or func.obj is not copyreg._reconstructor  # type: ignore[attr-defined]
                ):
                    raise refused(f"{_describe(args)} passed to {func.name}")
                stack[-1] = _SHARED if func.shared else None
            elif action == MARK:
                marks.append(stack)
                stack = []
            elif action == FILL:  # APPENDS, SETITEMS, ADDITEMS: the items since MARK
                items = stack
                stack = marks.pop()
                if seen_global:
                    _check_values(items)
                    _check_target(stack[-1], "items added to")
            elif action == NEWOBJ or action == NEWOBJ_EX:
                if action == NEWOBJ_EX:
                    _check_values((stack.pop(),))  # the keyword arguments
                args, cls = stack.pop(), stack.pop()
                if type(cls) is not Global or cls.classes is not None:
                    raise refused(f"an instance of {_describe(cls)}")
                _check_values((args,))
                stack.append(_SHARED if cls.shared else None)
            elif action == BUILD:
                state = stack.pop()
                _check_values((state,))
                _check_target(stack[-1], "state set on")
            elif action == SETITEM or action == APPEND:
                items = [stack.pop()] if action == APPEND else [stack.pop(), stack.pop()]
                if seen_global:
                    _check_values(items)
                    _check_target(stack[-1], "items added to")
            elif action == GLOBAL or action == EXT:
                if code == _STACK_GLOBAL:
                    name, module = stack.pop(), stack.pop()
                    if type(module) is not int or type(name) is not int or _SHARED in (module, name):
                        raise refused("STACK_GLOBAL names that are not unicode strings")
                    names = (_string_at(data, module), _string_at(data, name))
                elif action == GLOBAL:
                    names = _global_names(data, start, pos)
                else:
                    ext = int.from_bytes(data[start:pos], "little", signed=layout == 4)
                    names = copyreg._inverted_registry.get(ext)  # type: ignore[attr-defined]
                    if names is None:
                        raise refused(f"unregistered extension code {ext}")
                found = table.get(names)
                if found is None:
                    raise not_listed(*names)
                if action == EXT:
                    # The C unpickler takes a cached extension without asking find_class.
                    cached = copyreg._extension_cache.get(ext)  # type: ignore[attr-defined]
                    if cached is not None and cached is not found.obj:
                        raise refused(f"extension code {ext} is cached as another object")
                seen_global = True
                stack.append(found)
            elif action == CONTAINER:  # LIST, DICT, FROZENSET: the items since MARK
                if seen_global:
                    _check_values(stack)
                stack = marks.pop()
                stack.append(None)
            elif action == TUPLE:
                items = stack
                stack = marks.pop()
                if seen_global and Global in map(type, items):
                    stack.append(_tuple_tag(items))
                else:
                    stack.append(None)
            elif action == NOP:  # PROTO, FRAME
                pass
            elif action == STOP:
                _check_values((stack[-1],))
                return
            elif action == POP:
                if stack:
                    stack.pop()
                else:  # as in the unpicklers: POP on an empty mark frame drops the MARK
                    stack = marks.pop()
            elif action == DUP:
                stack.append(stack[-1])
            elif action == POP_MARK:
                stack = marks.pop()
            else:  # INST, OBJ: a class and its arguments since MARK
                items = stack
                stack = marks.pop()
                if action == INST:
                    names = _global_names(data, start, pos)
                    cls = table.get(names)
                    if cls is None:
                        raise not_listed(*names)
                    seen_global = True
                else:
                    cls = items.pop(0)
                if type(cls) is not Global or cls.classes is not None:
                    raise refused(f"an instance of {_describe(cls)}")
                _check_values(items)
                stack.append(_SHARED if cls.shared else None)
    except (IndexError, KeyError, ValueError) as exc:
        raise refused(f"malformed pickle ({exc.__class__.__name__} at byte {at})") from exc
