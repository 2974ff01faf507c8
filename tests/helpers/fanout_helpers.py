"""Child-process workers for test_fanout (importable, so they work under spawn)."""

from __future__ import annotations

import json


def hold_shard_lock(shard_directory: str, ready, release, max_hold: float = 60.0) -> None:
    """Hold a write transaction on one shard's database until `release` is set."""
    import diskcache_core

    shard = diskcache_core.Cache(shard_directory)
    with shard.transact():
        shard.set('held-by-another-process', 1)
        ready.set()
        release.wait(max_hold)
    shard.close()


def hold_all_locks(directory: str, shards: int, ready, release) -> None:
    """Hold FanoutCache.transact() (every shard's lock) until `release` is set."""
    import diskcache_core

    cache = diskcache_core.FanoutCache(directory, shards=shards, timeout=5.0)
    with cache.transact():
        ready.set()
        release.wait(60)
    cache.close()


def add_race(directory: str, worker_id: int, keys: list, start, result_path: str) -> None:
    """Try to add every key (retrying on busy shards); record the keys this worker won."""
    import diskcache_core

    cache = diskcache_core.FanoutCache(directory)
    start.wait(30)
    won = [key for key in keys if cache.add(key, worker_id, retry=True)]
    cache.close()
    with open(result_path, 'w') as handle:
        json.dump(won, handle)


def shard_numbers(keys: list, directory: str) -> None:
    """Print the shard number of each key (run in a fresh interpreter with its own hash seed)."""
    import diskcache_core

    cache = diskcache_core.FanoutCache(directory)
    print(json.dumps([cache.shards.index(cache.shard_for(key)) for key in keys]))
    cache.close()
