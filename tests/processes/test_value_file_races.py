"""Writers and removers of value files racing in one process and across threads.

Removal prunes emptied fan-out directories while writers may be recreating them; every write
must still succeed and every read see a complete value.
"""

from __future__ import annotations

import os
import threading

import diskcache_core as dc

BIG = 40 * 1024  # above the default 32 KiB disk_min_file_size: stored in value files


def test_concurrent_file_writes_and_deletes_never_fail(tmp_path):
    cache = dc.Cache(tmp_path / "cache")
    errors: list[BaseException] = []

    def worker(worker_id: int) -> None:
        try:
            for round_number in range(300):
                key = f"k{worker_id}-{round_number % 4}"
                value = bytes([worker_id]) * BIG + round_number.to_bytes(4, "big")
                cache.set(key, value)
                assert cache.get(key) == value
                cache.delete(key)
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors[:3]
    cache.close()
    assert cache.check() == []
    leftovers = [
        os.path.join(root, name)
        for root, _, names in os.walk(cache.directory)
        for name in names
        if not name.startswith("cache.db")
    ]
    assert leftovers == []
