"""The cache box: the Cache facade over its parts.

``cache`` (Cache: argument checks, result shapes, the one read path and the one write path;
and RemoteCache, what ``remote=`` makes), ``remote`` (the item API of a cache with a remote,
each method the remote tier's), ``base`` (a directory's parts composed: opening, settings,
administration, close), ``memorysettings`` (the memory tier's bounds and statistics),
``serializer`` (the write paths' ``Disk.store``, and the `Role` an owner fixes: a shard's
maximum item size), ``counters`` (incr/decr and update), ``queue`` (push, pull, peek),
``iteration`` (keys a page at a time), ``check`` (do the database and the value files agree),
``awaitable`` (the ``a*`` twins) and ``getforms`` (the result shapes of ``get`` for type
checkers).
"""
