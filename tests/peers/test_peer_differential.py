"""The same random sequences of calls on python-diskcache and on diskcache_core give the same
results: return values, exceptions (by type) and the state they leave.

The calls leave out the documented differences (docs/migrating.rst): in most runs no item
expires (so where each library removes expired items does not show), ``read=True`` is not used,
no stored number leaves 64 bits, and FanoutCache's iteration order (its placement differs) is
compared as a set. The runs with expiry move a patched ``time.time`` (both libraries read it)
and leave out what counts or orders expired items (len, iteration, peekitem); no expiry time
ever equals the clock (python-diskcache itself takes equality as expired in get, not in incr).
FanoutCache's shards wait up to 5 s for a lock, so that neither gives up on a loaded machine.
Seeds are fixed: a failure names the first call whose result differs.
"""

from __future__ import annotations

import functools
import random
from typing import Any, Callable
from unittest import mock

import pytest

import diskcache_core

diskcache = pytest.importorskip("diskcache")

SEEDS = range(12)
CALLS = 300
KEYS = [0, 1, "a", "b", b"c", 2.5, (1, 2), None, True, 10**20, -3]
VALUES = [0, 1, -5, 2.5, "x", b"y", None, [1], b"z" * 70_000, "w" * 70_000]
Call = Callable[[Any, random.Random], Any]


def _cache_calls(sharded: bool) -> dict[str, Call]:
    """Calls on a Cache; on a FanoutCache (`sharded`): no queue calls, keys compared as a set."""
    def key(rnd: random.Random) -> Any:
        return rnd.choice(KEYS)

    def item(rnd: random.Random) -> dict[str, Any]:
        return {"expire": rnd.choice([None, None, 100, 50]), "tag": rnd.choice([None, "t", "u"])}

    calls: dict[str, Call] = {
        "set": lambda c, r: c.set(key(r), r.choice(VALUES), **item(r)),
        "add": lambda c, r: c.add(key(r), r.choice(VALUES), **item(r)),
        "get": lambda c, r: c.get(key(r), default="D"),
        "get tuple": lambda c, r: _no_time(c.get(key(r), expire_time=True, tag=True)),
        "getitem": lambda c, r: c[key(r)],
        "contains": lambda c, r: key(r) in c,
        "delete": lambda c, r: c.delete(key(r)),
        "delitem": lambda c, r: c.__delitem__(key(r)),
        "pop": lambda c, r: c.pop(key(r), default="D"),
        "pop tuple": lambda c, r: _no_time(c.pop(key(r), expire_time=True, tag=True)),
        "incr": lambda c, r: c.incr(key(r), r.choice([1, -2, 5]), default=r.choice([0, None, 3])),
        "decr": lambda c, r: c.decr(key(r), 1),
        "touch": lambda c, r: c.touch(key(r), expire=r.choice([None, 100])),
        "len": lambda c, r: len(c),
        "evict": lambda c, r: c.evict(r.choice(["t", "u"])),
        "expire": lambda c, r: c.expire(),
        "clear": lambda c, r: c.clear() if r.random() < 0.2 else None,
        "iter": lambda c, r: sorted(map(repr, c)) if sharded else list(c),
    }
    if not sharded:
        side = ["back", "front"]
        calls.update({
            "push": lambda c, r: c.push(r.choice(VALUES), prefix=r.choice([None, "q"]),
                                        side=r.choice(side), tag=r.choice([None, "t"])),
            "pull": lambda c, r: c.pull(prefix=r.choice([None, "q"]), side=r.choice(side),
                                        tag=True),
            "peek": lambda c, r: c.peek(prefix=r.choice([None, "q"]), side=r.choice(side)),
            "peekitem": lambda c, r: c.peekitem(last=r.choice([True, False])),
        })  # fmt: skip
    return calls


def _no_time(result: Any) -> Any:
    """A (value, expire_time, tag) result with the expiry time reduced to whether it is set."""
    value, expire_time, tag = result
    return value, expire_time is not None, tag


def _deque_calls() -> dict[str, Call]:
    def value(rnd: random.Random) -> Any:
        return rnd.choice([0, 1, "a", b"b", None, 2.5, (1,)])

    def index(rnd: random.Random) -> int:
        return rnd.randint(-4, 4)

    return {
        "append": lambda d, r: d.append(value(r)),
        "appendleft": lambda d, r: d.appendleft(value(r)),
        "pop": lambda d, r: d.pop(),
        "popleft": lambda d, r: d.popleft(),
        "extend": lambda d, r: d.extend([value(r), value(r)]),
        "extendleft": lambda d, r: d.extendleft([value(r), 1]),
        "rotate": lambda d, r: d.rotate(index(r)),
        "reverse": lambda d, r: d.reverse(),
        "getitem": lambda d, r: d[index(r)],
        "setitem": lambda d, r: d.__setitem__(index(r), value(r)),
        "delitem": lambda d, r: d.__delitem__(index(r)),
        "remove": lambda d, r: d.remove(value(r)),
        "count": lambda d, r: d.count(value(r)),
        "index": lambda d, r: d.index(value(r)),
        "contains": lambda d, r: value(r) in d,
        "compare": lambda d, r: (d == list(d), d != [1], d < [9]),
        "peek": lambda d, r: (d.peek(), d.peekleft()),
        "list": lambda d, r: (len(d), list(d), list(reversed(d))),
        "clear": lambda d, r: d.clear() if r.random() < 0.2 else None,
    }


def _index_calls() -> dict[str, Call]:
    def key(rnd: random.Random) -> Any:
        return rnd.choice([0, 1, "a", b"b", None, 2.5, (1,)])

    return {
        "setitem": lambda i, r: i.__setitem__(key(r), r.randint(-4, 4)),
        "getitem": lambda i, r: i[key(r)],
        "delitem": lambda i, r: i.__delitem__(key(r)),
        "pop": lambda i, r: i.pop(key(r), "D"),
        "popitem": lambda i, r: i.popitem(last=r.choice([True, False])),
        "peekitem": lambda i, r: i.peekitem(last=r.choice([True, False])),
        "setdefault": lambda i, r: i.setdefault(key(r), r.randint(-4, 4)),
        "update": lambda i, r: i.update({key(r): 1, "u": r.randint(-4, 4)}),
        "push": lambda i, r: i.push(key(r), side=r.choice(["back", "front"])),
        "pull": lambda i, r: i.pull(side=r.choice(["back", "front"])),
        "views": lambda i, r: (len(i), list(i.keys()), list(i.items()), list(reversed(i))),
        "compare": lambda i, r: (i == dict(i.items()), i != {}),
        "clear": lambda i, r: i.clear() if r.random() < 0.2 else None,
    }


def _expiry_calls() -> dict[str, Call]:
    """Calls whose results depend on expiry, on keys no queue key can equal."""
    keys = ["a", "b", b"c", (1, 2), None, -3, 10**20]
    sides = ["back", "front"]

    def key(rnd: random.Random) -> Any:
        return rnd.choice(keys)

    def expire(rnd: random.Random) -> Any:
        return rnd.choice([None, 1.3, 5.7, 30.1, -1.3])  # the clock moves in halves

    calls = {
        name: call for name, call in _cache_calls(sharded=False).items()
        if name not in ("len", "iter", "expire", "evict", "clear", "peekitem")
    }  # fmt: skip
    calls.update({
        "set": lambda c, r: c.set(key(r), r.choice(VALUES), expire=expire(r)),
        "add": lambda c, r: c.add(key(r), r.choice(VALUES), expire=expire(r)),
        "get": lambda c, r: c.get(key(r), default="D"),
        "get tuple": lambda c, r: c.get(key(r), expire_time=True, tag=True),
        "getitem": lambda c, r: c[key(r)],
        "contains": lambda c, r: key(r) in c,
        "delete": lambda c, r: c.delete(key(r)),
        "delitem": lambda c, r: c.__delitem__(key(r)),
        "pop": lambda c, r: c.pop(key(r), default="D"),
        "pop tuple": lambda c, r: c.pop(key(r), expire_time=True, tag=True),
        "incr": lambda c, r: c.incr(key(r), 2, default=r.choice([0, None])),
        "decr": lambda c, r: c.decr(key(r), 1),
        "touch": lambda c, r: c.touch(key(r), expire=expire(r)),
        "push": lambda c, r: c.push(r.choice(VALUES), side=r.choice(sides), expire=expire(r)),
        "pull": lambda c, r: c.pull(side=r.choice(sides), expire_time=True, tag=True),
        "peek": lambda c, r: c.peek(side=r.choice(sides), expire_time=True),
    })  # fmt: skip
    return calls


class _Clock:
    """A time.time that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _run(
    make: Callable[[], Any], calls: dict[str, Call], seed: int, clock: _Clock | None = None
) -> list[tuple[Any, ...]]:
    """The results of CALLS calls chosen by `seed`; an exception is recorded by its type. With
    `clock`, it moves by 0 to 20 s before each call."""
    rnd = random.Random(seed)
    names = sorted(calls)
    target = make()
    results = []
    try:
        for number in range(CALLS):
            if clock is not None:
                clock.now += rnd.choice([0.0, 0.0, 0.5, 3.0, 20.0])
            name = rnd.choice(names)
            try:
                result = repr(calls[name](target, rnd))
            except Exception as exc:  # noqa: BLE001 - compared by type
                result = f"raised {type(exc).__name__}"
            results.append((number, name, result))
    finally:
        close = getattr(target, "close", None) or target.cache.close
        close()
    return results


# A push whose next key is already an item's key (one set directly): python-diskcache lets
# SQLite's IntegrityError through, ours raises ValueError naming it (migrating.rst).
_SAME = {("push", "raised ValueError", "raised IntegrityError")}


def _compare(ours: list[tuple[Any, ...]], peers: list[tuple[Any, ...]]) -> None:
    for mine, theirs in zip(ours, peers):
        if (mine[1], mine[2], theirs[2]) in _SAME:
            continue
        assert mine == theirs, f"call {mine[0]} ({mine[1]}): ours {mine[2]}, peer's {theirs[2]}"


@pytest.mark.parametrize("seed", SEEDS)
def test_cache(tmp_path, seed):
    calls = _cache_calls(sharded=False)
    ours = _run(lambda: diskcache_core.Cache(tmp_path / "ours", cull_limit=0), calls, seed)
    peers = _run(lambda: diskcache.Cache(tmp_path / "peer", cull_limit=0), calls, seed)
    _compare(ours, peers)


@pytest.mark.parametrize("seed", SEEDS)
def test_fanout_cache(tmp_path, seed):
    calls = _cache_calls(sharded=True)
    ours = _run(lambda: diskcache_core.FanoutCache(tmp_path / "ours", 4, 5), calls, seed)
    peers = _run(lambda: diskcache.FanoutCache(tmp_path / "peer", 4, 5), calls, seed)
    _compare(ours, peers)


@pytest.mark.parametrize("seed", SEEDS)
def test_deque(tmp_path, seed):
    calls = _deque_calls()
    ours = _run(lambda: diskcache_core.Deque(directory=tmp_path / "ours"), calls, seed)
    peers = _run(lambda: diskcache.Deque(directory=tmp_path / "peer"), calls, seed)
    _compare(ours, peers)


@pytest.mark.parametrize("seed", SEEDS)
def test_index(tmp_path, seed):
    calls = _index_calls()
    ours = _run(lambda: diskcache_core.Index(str(tmp_path / "ours")), calls, seed)
    peers = _run(lambda: diskcache.Index(str(tmp_path / "peer")), calls, seed)
    _compare(ours, peers)


@pytest.mark.parametrize("seed", SEEDS)
def test_cache_with_expiry(tmp_path, seed):
    calls = _expiry_calls()
    results = []
    for module, name in ((diskcache_core, "ours"), (diskcache, "peer")):
        clock = _Clock()
        with mock.patch("time.time", clock):
            make = functools.partial(module.Cache, tmp_path / name, cull_limit=0)
            results.append(_run(make, calls, seed, clock))
    _compare(*results)
