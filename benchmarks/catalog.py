"""Every backend the harness knows: selecting them by name, why one is skipped, opening one."""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Optional

from .backends import ADAPTERS, CACHE_BACKENDS, Adapter, BackendSpec
from .django_backends import DJANGO_BACKENDS, DjangoAdapter
from .servers import SERVERS

ALL_BACKENDS: tuple[BackendSpec, ...] = CACHE_BACKENDS + DJANGO_BACKENDS
_ADAPTERS: dict[str, type[Adapter]] = {**ADAPTERS, "django": DjangoAdapter}


def _memory_off(spec: BackendSpec) -> BackendSpec:
    """The same diskcache_core backend with its memory tier off (``memory_size_limit=0``)."""
    kwargs = {**spec.options["kwargs"], "memory_size_limit": 0}
    if spec.label.endswith(")"):
        label = spec.label[:-1] + ", memory off)"
    else:
        label = spec.label + "(memory off)"
    return replace(
        spec,
        name="memoff-" + spec.name,
        label=label,
        short=spec.short + " mem off",
        options={**spec.options, "kwargs": kwargs},
    )


#: Variants run only when named (``--backends 'memoff-*'``): each diskcache_core backend with its
#: memory tier off, compared with the same python-diskcache baseline, to show what the tier does.
VARIANT_BACKENDS: tuple[BackendSpec, ...] = tuple(
    _memory_off(spec) for spec in CACHE_BACKENDS if spec.options.get("module") == "diskcache_core"
)
_SELECTABLE: tuple[BackendSpec, ...] = ALL_BACKENDS + VARIANT_BACKENDS


def by_name(name: str) -> BackendSpec:
    """The backend with this selection id."""
    for spec in _SELECTABLE:
        if spec.name == name:
            return spec
    raise KeyError(name)


def select(patterns: Optional[Sequence[str]], django: bool = False) -> list[BackendSpec]:
    """Backends matching any of the names or shell patterns (``core-*``), in catalog order.

    With no patterns: every cache-level backend, plus the Django-level ones when ``django``.
    The memory-off variants (``memoff-*``) run only when a pattern names them.
    """
    if not patterns:
        return [s for s in ALL_BACKENDS if s.level == "cache" or django]
    chosen = []
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(spec.name, pattern) for spec in _SELECTABLE):
            known = ", ".join(spec.name for spec in _SELECTABLE)
            raise ValueError(f"no backend matches {pattern!r}; known backends: {known}")
    for spec in _SELECTABLE:
        if any(fnmatch.fnmatchcase(spec.name, pattern) for pattern in patterns):
            chosen.append(spec)
    return chosen


def _missing_attribute(dotted: str) -> Optional[str]:
    """Import ``package.module.Name``'s module and tell what is missing, if anything."""
    module_name, _, attribute = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        return f"{module_name} cannot be imported ({type(exc).__name__}: {exc})"
    if getattr(module, attribute, None) is None:
        return f"{dotted} does not exist yet"
    return None


def skip_reason(spec: BackendSpec) -> Optional[str]:
    """One line saying why a backend cannot run here (and how to fix it), or None."""
    for module, hint in spec.requires:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            top_level = module.split(".")[0]
            if exc.name == top_level:
                return f"{top_level} is not installed: {hint}"
            return f"{module} cannot be imported yet ({exc})"
        except Exception as exc:  # a module that fails while importing is skipped, not fatal
            return f"{module} cannot be imported ({type(exc).__name__}: {exc})"
    if spec.adapter == "diskcache":
        missing = _missing_attribute(f"{spec.options['module']}.{spec.options['class']}")
    elif spec.adapter == "django":
        missing = _missing_attribute(spec.options["backend"])
    else:
        missing = None
    if missing:
        return missing
    if spec.server is not None:
        return SERVERS[spec.server].missing_reason()
    return None


def servers_needed(specs: Iterable[BackendSpec]) -> list[str]:
    """Names of the servers the given backends talk to, each once, in a stable order."""
    return sorted({spec.server for spec in specs if spec.server is not None})


def open_adapter(spec: BackendSpec, location: str) -> Adapter:
    """Open the backend's client in the calling process."""
    return _ADAPTERS[spec.adapter].open(spec, location)
