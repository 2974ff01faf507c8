"""The remote box: Redis (or Valkey, or Redis Cluster) as the shared truth of many hosts.

Imported only by a cache made with ``remote=``. ``client`` (the connection, the scripts, outcome
of a write), ``form`` (the stored form of an item in Redis), ``tier`` (the remote tier: the host
directory a near cache of Redis), ``stamps`` (which host copies may still be served; the
listener's lease), ``listener`` (the election of one listener per host directory, a FanoutCache's shards
included),
``listenerprocess`` and ``listenerlog`` (the listener process and its log channel) and
``topology`` (a cluster's nodes as the listener follows them).
"""
