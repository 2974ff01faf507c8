"""The eviction box: what leaves a cache, and when.

``evictor`` (Evictor: size and count limits, culling, expiry, the eviction policies' order),
``sizecheck`` (the size check a Store is made with, run once per budget of bytes written) and
``access`` (the access times and counts the policies order by, recorded in memory and written in
batches). The policies' SQL is the store's (``_store/schema.py``).
"""
