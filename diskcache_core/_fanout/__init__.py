"""The fanout box: FanoutCache, keys spread over several Cache shards.

``fanout`` (FanoutCache), ``shards`` (opening each shard with its share of the settings; with a
remote, one listener for all of them), ``removals`` (bulk removals over every shard), ``layout`` (the placement hash and the layout file that fixes it) and ``subcaches`` (named
sub-caches, deques and indexes inside the directory).
"""
