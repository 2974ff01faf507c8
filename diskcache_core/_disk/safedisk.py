"""SafeDisk: a Disk whose unpickling admits only allow-listed types, and only to instantiate them.

Use it when others can write to the cache directory. The pickle of every value read (and
written: what it would refuse to read it refuses to store) is checked by `._picklecheck` before
the C unpickler, limited to the allow-list's globals, loads it.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import sys
from typing import Any, BinaryIO, Iterable, TypeVar

from .derived import derive
from .disk import Disk
from .._errors import UnsafePickleError
from .picklecheck import Global, check_pickle, global_table, not_listed, refused, safe_globals

__all__ = ["SafeDisk", "UNSAFE_MODULES"]

S = TypeVar("S", bound="SafeDisk")

# Packages whose classes `SafeDisk.with_types` refuses: numpy restores a dtype's internal flags
# from its pickle unchecked, so a crafted pickle can make an array read raw bytes as object
# pointers (diskcache-community refuses them too).
UNSAFE_MODULES = ("numpy",)


def _within(module: str, modules: Iterable[str]) -> bool:
    """Whether `module` is one of `modules` or a module below one."""
    return any(module == name or module.startswith(name + ".") for name in modules)


class _ModuleTable(dict[tuple[str, str], Global]):
    """A global table that also admits the classes defined in `modules` (or below them): found
    among the modules already imported (a pickle never imports one), through the modules' and
    classes' own namespaces (no ``__getattr__`` hook runs)."""

    def __init__(self, table: dict[tuple[str, str], Global], modules: tuple[str, ...]) -> None:
        super().__init__(table)
        self.modules = modules

    def get(self, key: tuple[str, str], default: Any = None) -> Any:
        found = dict.get(self, key)
        if found is None:
            found = self._from_modules(*key)
        return default if found is None else found

    def _from_modules(self, module: str, name: str) -> Global | None:
        if type(module) is not str or type(name) is not str or not _within(module, self.modules):
            return None
        found: Any = sys.modules.get(module)
        for part in name.split("."):
            found = vars(found).get(part) if hasattr(found, "__dict__") else None
        if not isinstance(found, type) or found.__qualname__ != name:
            return None
        if not _within(found.__module__, self.modules) or _within(found.__module__, UNSAFE_MODULES):
            return None
        entry = self[(module, name)] = Global(found, f"{module}.{name}")
        return entry


class _HasGlobals(Exception):
    """The global-free first try of a load met a global: check the pickle, then load it."""


class _RestrictedUnpickler(pickle.Unpickler):
    """The C unpickler, with globals from `table` only (with None: any global aborts the load
    with _HasGlobals) and no persistent ids."""

    def __init__(self, file: BinaryIO, table: dict[tuple[str, str], Global] | None) -> None:
        super().__init__(file)
        self._table = table

    def find_class(self, module: str, name: str) -> Any:
        if self._table is None:
            raise _HasGlobals
        found = self._table.get((module, name))
        if found is None:
            raise not_listed(module, name)
        return found.obj

    def persistent_load(self, pid: Any) -> Any:
        raise refused("a persistent id")


class SafeDisk(Disk):
    """A Disk whose unpickling admits only an allow-list of types.

    Builtin scalars and containers, collections' Counter, OrderedDict, defaultdict and deque,
    the datetime types, Decimal, Fraction and UUID, plus the classes named in `allowed_types`,
    are loaded (diskcache-community's list); any other global in a pickle raises
    UnsafePickleError. Use it when someone else can write to the cache directory: a planted
    pickle cannot run code. Allowed types may only be instantiated: a pickle that returns a class
    or function, keeps one inside its value (but as a defaultdict's factory, an allowed class),
    or sets attributes on one (or on an Enum member) is refused too.

    The allow-list comes from code only (``Cache(..., disk=SafeDisk,
    disk_allowed_types=[MyType])``); it is never read from the cache database.
    """

    #: Classes and modules a type made by `with_types` adds to the allow-list.
    safe_types: frozenset[type] = frozenset()
    safe_modules: tuple[str, ...] = ()

    def __init__(self, directory: str, allowed_types: Iterable[type] = (), **kwargs: Any) -> None:
        super().__init__(directory, **kwargs)
        allowed = dict(safe_globals())
        for allowed_type in (*self.safe_types, *allowed_types):
            if not isinstance(allowed_type, type):
                raise TypeError(f"allowed_types must hold classes, not {allowed_type!r}")
            allowed[(allowed_type.__module__, allowed_type.__qualname__)] = allowed_type
        table = global_table(allowed)
        self._table = _ModuleTable(table, self.safe_modules) if self.safe_modules else table
        self.allowed_types = tuple(allowed_types)

    @classmethod
    def with_types(
        cls: type[S], *types: type, modules: str | Iterable[str] = ()
    ) -> type[S]:
        """A SafeDisk type that also allows `types` and the classes defined in `modules` (or in
        modules below them), to pass as ``disk=``; called on such a type, it adds to its list.

        As diskcache-community's. Allow only plain data classes (dataclasses, named tuples,
        enums) whose construction does nothing but store fields: a pickle may call them. The
        classes of `modules` are looked up among the modules already imported. numpy's are
        refused (`UNSAFE_MODULES`); store arrays as bytes (``numpy.save(...,
        allow_pickle=False)``).
        """
        for entry in types:
            if not isinstance(entry, type):
                raise TypeError(f"with_types takes classes, not {entry!r}")
            if _within(entry.__module__, UNSAFE_MODULES):
                raise ValueError(f"with_types refuses the class {entry!r}")
        prefixes = []
        for name in (modules,) if isinstance(modules, str) else modules:
            prefix = name.rstrip(".") if isinstance(name, str) else ""
            if not prefix or not all(part.isidentifier() for part in prefix.split(".")):
                raise ValueError(f"{name!r} is not a module name")
            if any(_within(prefix, (unsafe,)) or _within(unsafe, (prefix,)) for unsafe in UNSAFE_MODULES):
                raise ValueError(f"with_types refuses the module {name!r}")
            prefixes.append(prefix)
        return derive(
            cls,
            {
                "safe_types": cls.safe_types | frozenset(types),
                "safe_modules": tuple(dict.fromkeys((*cls.safe_modules, *prefixes))),
            },
        )

    def _dumps(self, obj: Any, what: str = "value") -> bytes:
        """Pickle `obj`, refusing with TypeError (before anything is written) what `_loads`
        would refuse, as diskcache-community's SafeDisk does."""
        data = super()._dumps(obj, what)
        if not copyreg._inverted_registry:  # type: ignore[attr-defined]
            # As `_loads`: a pickle that names no global is safe; the C unpickler finds out
            # fastest (a builtin container of builtin values is the common case).
            try:
                _RestrictedUnpickler(io.BytesIO(data), None).load()
                return data
            except _HasGlobals:
                pass
        try:
            check_pickle(data, self._table)
        except UnsafePickleError as exc:
            kind = type(obj)
            raise TypeError(
                f"SafeDisk cannot store {what} of type {kind.__module__}.{kind.__qualname__}: {exc}"
            ) from None
        return data

    def _loads(self, data: bytes) -> Any:
        if type(data) is not bytes:
            data = bytes(data)
        if not copyreg._inverted_registry:  # type: ignore[attr-defined]
            # No extension codes: every global passes find_class. A load that meets none made
            # only new builtin values and touched nothing else, so it stands as it is; one
            # that meets a global stops there, and the pickle is checked and loaded again.
            try:
                return _RestrictedUnpickler(io.BytesIO(data), None).load()
            except _HasGlobals:
                pass
        check_pickle(data, self._table)
        return _RestrictedUnpickler(io.BytesIO(data), self._table).load()
