"""The result shapes of ``get`` for type checkers: ``value``, ``(value, expire_time)``,
``(value, tag)``, ``(value, expire_time, tag)``, each with ``store_time`` after them when asked,
and the item's tags (a frozenset) last with ``tags=True``.

`typed_get` and `typed_aget` give a method these overloaded signatures and return it
unchanged: nothing is added to a call at run time (the hot path stays as written).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Literal, Protocol, TypeVar, overload

__all__ = ["AsyncGetForms", "GetForms", "typed_aget", "typed_get"]

T = TypeVar("T")
Time = float | None  # an expire or store time: None for an item without one, or a missing key
_Co = Coroutine[Any, Any, T]


class GetForms(Protocol):
    """``get``'s result by the flags asked (a flag passed as a plain bool: Any)."""

    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: Literal[False] = ...,
        tag: Literal[False] = ..., retry: bool = ..., store_time: Literal[False] = ...,
        *, tags: Literal[False] = ...,
    ) -> Any: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., *, expire_time: Literal[True],
        tag: Literal[False] = ..., retry: bool = ..., store_time: Literal[False] = ...,
        tags: Literal[False] = ...,
    ) -> tuple[Any, Time]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: Literal[False] = ...,
        *, tag: Literal[True], retry: bool = ..., store_time: Literal[False] = ...,
        tags: Literal[False] = ...,
    ) -> tuple[Any, Any]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., *, expire_time: Literal[True],
        tag: Literal[True], retry: bool = ..., store_time: Literal[False] = ...,
        tags: Literal[False] = ...,
    ) -> tuple[Any, Time, Any]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: Literal[False] = ...,
        tag: Literal[False] = ..., retry: bool = ..., *, store_time: Literal[True],
        tags: Literal[False] = ...,
    ) -> tuple[Any, Time]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., *, expire_time: Literal[True],
        tag: Literal[False] = ..., retry: bool = ..., store_time: Literal[True],
        tags: Literal[False] = ...,
    ) -> tuple[Any, Time, Time]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: Literal[False] = ...,
        *, tag: Literal[True], retry: bool = ..., store_time: Literal[True],
        tags: Literal[False] = ...,
    ) -> tuple[Any, Any, Time]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., *, expire_time: Literal[True],
        tag: Literal[True], retry: bool = ..., store_time: Literal[True],
        tags: Literal[False] = ...,
    ) -> tuple[Any, Time, Any, Time]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: bool = ...,
        tag: bool = ..., retry: bool = ..., store_time: bool = ..., *, tags: Literal[True],
    ) -> tuple[Any, ...]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: bool = ...,
        tag: bool = ..., retry: bool = ..., store_time: bool = ..., *, tags: bool = ...,
    ) -> Any: ...


class AsyncGetForms(Protocol):
    """``aget``'s result: `GetForms`'s, awaited."""

    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: Literal[False] = ...,
        tag: Literal[False] = ..., retry: bool = ..., store_time: Literal[False] = ...,
        *, tags: Literal[False] = ...,
    ) -> _Co[Any]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., *, expire_time: Literal[True],
        tag: Literal[False] = ..., retry: bool = ..., store_time: Literal[False] = ...,
        tags: Literal[False] = ...,
    ) -> _Co[tuple[Any, Time]]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: Literal[False] = ...,
        *, tag: Literal[True], retry: bool = ..., store_time: Literal[False] = ...,
        tags: Literal[False] = ...,
    ) -> _Co[tuple[Any, Any]]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., *, expire_time: Literal[True],
        tag: Literal[True], retry: bool = ..., store_time: Literal[False] = ...,
        tags: Literal[False] = ...,
    ) -> _Co[tuple[Any, Time, Any]]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: Literal[False] = ...,
        tag: Literal[False] = ..., retry: bool = ..., *, store_time: Literal[True],
        tags: Literal[False] = ...,
    ) -> _Co[tuple[Any, Time]]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., *, expire_time: Literal[True],
        tag: Literal[False] = ..., retry: bool = ..., store_time: Literal[True],
        tags: Literal[False] = ...,
    ) -> _Co[tuple[Any, Time, Time]]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: Literal[False] = ...,
        *, tag: Literal[True], retry: bool = ..., store_time: Literal[True],
        tags: Literal[False] = ...,
    ) -> _Co[tuple[Any, Any, Time]]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., *, expire_time: Literal[True],
        tag: Literal[True], retry: bool = ..., store_time: Literal[True],
        tags: Literal[False] = ...,
    ) -> _Co[tuple[Any, Time, Any, Time]]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: bool = ...,
        tag: bool = ..., retry: bool = ..., store_time: bool = ..., *, tags: Literal[True],
    ) -> _Co[tuple[Any, ...]]: ...
    @overload
    def __call__(
        self, key: Any, default: Any = ..., read: bool = ..., expire_time: bool = ...,
        tag: bool = ..., retry: bool = ..., store_time: bool = ..., *, tags: bool = ...,
    ) -> _Co[Any]: ...


def typed_get(method: Callable[..., Any]) -> GetForms:
    """`method` (a ``get``), unchanged, typed as `GetForms`."""
    return method


def typed_aget(method: Callable[..., Any]) -> AsyncGetForms:
    """`method` (an ``aget``), unchanged, typed as `AsyncGetForms`."""
    return method
