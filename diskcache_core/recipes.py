"""python-diskcache's ``diskcache.recipes`` module path (an alias): locks, throttle, barrier,
``memoize_stampede`` and the rest."""

from ._memo import memoize_stampede
from ._recipes import Averager, BoundedSemaphore, Lock, RLock, barrier, throttle

__all__ = ["Averager", "BoundedSemaphore", "Lock", "RLock", "barrier", "memoize_stampede", "throttle"]
