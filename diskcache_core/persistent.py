"""python-diskcache's ``diskcache.persistent`` module path (an alias): ``Deque``, ``Index``."""

from ._persistent import Deque, Index

__all__ = ["Deque", "Index"]
