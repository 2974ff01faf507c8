"""python-diskcache's ``diskcache.recipes`` module path (an alias): locks, throttle, barrier,
``memoize_stampede`` and the rest."""

from ._disk.disk import ENOVAL
from ._recipes.memo import memoize_stampede
from ._recipes.memokeys import args_to_key
from ._recipes.ratelimit import Averager, throttle
from ._recipes.locks import BoundedSemaphore, Lock, RLock, barrier, full_name

__all__ = [
    "ENOVAL",
    "Averager",
    "BoundedSemaphore",
    "Lock",
    "RLock",
    "args_to_key",
    "barrier",
    "full_name",
    "memoize_stampede",
    "throttle",
]
