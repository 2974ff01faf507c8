"""The memory box: the memory tier, recently used items of one cache kept in this process.

``tier`` (MemoryTier: its map, fills under a version check, write-through, and the one hit path
it builds, which reads the shared version words so a hit is never stale) and ``admission``
(which keys it keeps, and whether gets look it up at all: sampling). The writer side of the
version protocol is the store's (``_store/versions.py``). See docs/memory.rst.
"""
