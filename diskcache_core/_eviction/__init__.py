"""The eviction box: what leaves a cache, and when.

``evictor`` (Evictor: size and count limits, culling, expiry, the eviction policies' order) and
``access`` (the access times and counts the policies order by, recorded in memory and written in
batches).
"""
