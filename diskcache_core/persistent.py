"""python-diskcache's ``diskcache.persistent`` module path (an alias): ``Deque``, ``Index``, and
the names python-diskcache's module imports there."""

from ._cache.cache import Cache
from ._disk.disk import ENOVAL
from ._collections.persistent import Deque, Index

__all__ = ["ENOVAL", "Cache", "Deque", "Index"]
