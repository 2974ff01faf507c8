"""First gets that go to Redis: redis-py's GET against Cache(remote=).get and
FanoutCache(remote=).get on keys not yet local, the first 20 calls and the steady state.

Each measurement runs in a fresh process (``python -m benchmarks.nearget --child KIND``) with a
fresh directory; ``--trees OLD NEW`` alternates two source trees (old and new code) round by
round and prints per-tree medians and their ratios to redis-py's GET. Used for docs/remote.rst's
"Speed" paragraph (issue 39, item 3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

FIRST = 20  # the first calls of a fresh process
STEADY = 2000  # then this many more, keys still not local
VALUE = b"x" * 100


def child(kind: str, url: str, prefix: str) -> dict[str, float]:
    """One fresh process: time gets of keys no process of this directory has read."""
    import redis

    client = redis.Redis.from_url(url)
    keys = [f"k{index}" for index in range(FIRST + STEADY)]
    directory = tempfile.mkdtemp(prefix="nearget-")
    if kind == "redis":
        get = client.get
        names = [f"{prefix}{key}".encode() for key in keys]
    else:
        import diskcache_core

        factory = diskcache_core.Cache if kind == "cache" else diskcache_core.FanoutCache
        cache = factory(directory, remote=url, remote_prefix=prefix)
        get = cache.get
        names = keys
    times = []
    clock = time.perf_counter
    for name in names:
        start = clock()
        value = get(name)
        times.append(clock() - start)
        assert value is not None, name
    return {
        "first": statistics.median(times[:FIRST]) * 1e6,
        "steady": statistics.median(times[FIRST:]) * 1e6,
    }


def fill(url: str, prefix: str) -> None:
    """Write the items once (through a Cache: the remote's stored form) and raw keys for GET."""
    import redis

    import diskcache_core

    for factory, part in ((diskcache_core.Cache, "c:"), (diskcache_core.FanoutCache, "f:")):
        directory = tempfile.mkdtemp(prefix="nearget-fill-")
        cache = factory(directory, remote=url, remote_prefix=prefix + part)
        for index in range(FIRST + STEADY):
            cache.set(f"k{index}", VALUE)
        cache.close()
    client = redis.Redis.from_url(url)
    client.mset({f"{prefix}r:k{index}": VALUE for index in range(FIRST + STEADY)})


def run(tree: str, kind: str, url: str, prefix: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.nearget", "--child", kind, "--url", url,
         "--prefix", prefix],
        env=env, cwd=tree, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--url")
    parser.add_argument("--prefix", default="ng:")
    parser.add_argument("--trees", nargs="+", default=[os.getcwd()])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.url, args.prefix)))
        return
    from benchmarks.servers import RedisServer

    with RedisServer() as server:
        url = f"redis://{server.address}/0"
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        for round_ in range(args.rounds):
            prefix = f"ng{round_}:"
            fill(url, prefix)
            for tree in args.trees:  # old and new alternated, a fresh process each
                for kind, kprefix in (("redis", prefix + "r:"), ("cache", prefix + "c:"),
                                      ("fanout", prefix + "f:")):
                    results.setdefault((tree, kind), []).append(run(tree, kind, url, kprefix))
    for tree in args.trees:
        print(tree)
        base = {part: statistics.median(r[part] for r in results[(tree, "redis")])
                for part in ("first", "steady")}
        for kind in ("redis", "cache", "fanout"):
            for part in ("first", "steady"):
                value = statistics.median(r[part] for r in results[(tree, kind)])
                print(f"  {kind:7} {part:6} {value:8.1f} us  ratio {value / base[part]:.2f}")


if __name__ == "__main__":
    main()
