"""python-diskcache's ``diskcache.recipes`` module path (an alias): locks, throttle, barrier,
``memoize_stampede`` and the rest."""

from ._disk import ENOVAL
from ._memo import memoize_stampede
from ._memokeys import args_to_key
from ._ratelimit import Averager, throttle
from ._recipes import BoundedSemaphore, Lock, RLock, barrier, full_name

__all__ = [
    "ENOVAL", "Averager", "BoundedSemaphore", "Lock", "RLock", "args_to_key", "barrier", "full_name",
    "memoize_stampede", "throttle",
]  # fmt: skip
