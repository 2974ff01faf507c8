"""Deque and Index, persistent collections on one Cache (python-diskcache's ``persistent``).

They live in `_deque` and `_index` (what they share in `_collection`); this module keeps the
import path that `diskcache_core.__init__`, `_fanout` and existing code use.
"""

from .deque import Deque
from .index import Index, IndexItemsView, IndexKeysView, IndexValuesView

__all__ = ["Deque", "Index", "IndexItemsView", "IndexKeysView", "IndexValuesView"]
