"""Disk types derived with options: `Disk.with_options` and `SafeDisk.with_types` return a
subclass whose class attributes hold them, to pass as ``disk=`` (as diskcache-community's do).

Deriving from a derived type starts again from its root with the options merged, so derived
types never nest. A derived type pickles as its root and options (a pickled Cache names its Disk
type); a class of the user's own that subclasses one is a root of its own, pickled by name.
"""

from __future__ import annotations

import copyreg
from typing import Any, TypeVar

__all__ = ["DerivedDiskType", "derive"]

T = TypeVar("T", bound=type)


class DerivedDiskType(type):
    """The metaclass of derived Disk types: what makes them pickle as root and options."""


def derive(base: T, options: dict[str, Any]) -> T:
    """A subclass of `base`'s root whose class attributes are `base`'s options and `options`."""
    root = base.__dict__.get("_derived_root", base)
    merged = {**getattr(base, "_derived_options", {}), **options}
    attributes = {
        **merged,
        "__module__": root.__module__,
        "__qualname__": root.__qualname__,
        "__doc__": root.__doc__,
        "_derived_root": root,
        "_derived_options": merged,
    }
    derived: T = DerivedDiskType(root.__name__, (root,), attributes)  # type: ignore[assignment]
    return derived


def _reduce(cls: DerivedDiskType) -> str | tuple[Any, ...]:
    if "_derived_root" not in cls.__dict__:
        return cls.__qualname__  # a class of its own: by name
    return derive, (cls.__dict__["_derived_root"], cls.__dict__["_derived_options"])


copyreg.pickle(DerivedDiskType, _reduce)
