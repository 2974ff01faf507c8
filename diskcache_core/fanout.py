"""python-diskcache's ``diskcache.fanout`` module path (an alias): ``FanoutCache``, and the
names python-diskcache's module imports there."""

from ._cache.cache import Cache
from ._disk.disk import ENOVAL, Disk
from ._errors import Timeout
from ._fanout.fanout import FanoutCache
from ._collections.persistent import Deque, Index
from ._settings import DEFAULT_SETTINGS

__all__ = ["DEFAULT_SETTINGS", "ENOVAL", "Cache", "Deque", "Disk", "FanoutCache", "Index", "Timeout"]
