"""The recipes box: what programs build on a cache.

``locks`` (Lock, RLock, BoundedSemaphore, barrier), ``leases`` (holds of those recipes on a cache
with a remote), ``ratelimit`` (Averager, throttle), ``memo`` (memoize, memoize_stampede) and
``memokeys`` (a call's arguments as a canonical key).
"""
