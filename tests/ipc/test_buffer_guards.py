"""The service checks a request naming driver buffers once and reuses it while its guard holds: the
client's buffer table unchanged (its epoch) and every buffer in the state binding read."""

from __future__ import annotations

from mlts.hal.memory import FileMemory, SharedMemory
from mlts.ipc.burst_messages import BurstRequest, PoolRef
from mlts.ipc.service.buffer_calls import BufferGuard
from mlts.ipc.service.handles import HandleTable, Kind, Limits, Resource
from mlts.ipc.service.request_cache import RequestCache


class _Stamped:
    """A buffer whose driver gives stamps."""

    def __init__(self) -> None:
        self.stamp = 0
        self.dimensions = (2, 3)
        self.initialized = True


class _Unstamped:
    """A buffer whose driver gives no stamps: its dimensions and initialised flag are compared."""

    stamp = None

    def __init__(self) -> None:
        self.dimensions = (0, 3)
        self.initialized = False


def test_the_buffer_epoch_moves_when_a_buffer_handle_comes_or_goes_and_only_then() -> None:
    table = HandleTable(Limits())
    start = table.buffer_epoch
    table.add(Kind.MEMORY, Resource(object()), "t", key=1)
    table.remove(Kind.MEMORY, 1)
    assert table.buffer_epoch == start
    table.add(Kind.BUFFER, Resource(_Stamped()), "t", key=7)
    added = table.buffer_epoch
    assert added != start
    assert not table.remove(Kind.BUFFER, 8)  # unknown: nothing changed
    assert table.buffer_epoch == added
    table.add(Kind.BUFFER, Resource(_Stamped()), "t", key=7)  # replaced under the same token
    replaced = table.buffer_epoch
    assert replaced != added
    assert table.remove(Kind.BUFFER, 7)
    removed = table.buffer_epoch
    assert removed != replaced
    table.close_all()
    assert table.buffer_epoch != removed


def test_a_guard_holds_while_no_buffer_comes_or_goes_and_its_buffers_keep_their_stamps() -> None:
    table = HandleTable(Limits())
    a, b = _Stamped(), _Stamped()
    table.add(Kind.BUFFER, Resource(a), "t", key=1)
    table.add(Kind.BUFFER, Resource(b), "t", key=2)
    guard = BufferGuard(table, table.buffer_epoch, (a, b))
    assert guard.holds() and guard.holds()
    b.stamp += 1  # written for the first time, resized, freed: the driver's stamp changes
    assert not guard.holds()
    guard = BufferGuard(table, table.buffer_epoch, (a, b))
    assert guard.holds()
    table.add(Kind.BUFFER, Resource(_Stamped()), "t", key=3)  # another buffer of the client
    assert not guard.holds()
    guard = BufferGuard(table, table.buffer_epoch, (a, b))
    table.remove(Kind.BUFFER, 3)
    assert not guard.holds()
    # An epoch read before the lookups, then moved: the guard never holds.
    stale = BufferGuard(table, table.buffer_epoch - 1, (a, b))
    assert not stale.holds()


def test_without_stamps_a_guard_compares_dimensions_and_initialised_flags() -> None:
    table = HandleTable(Limits())
    buf = _Unstamped()
    table.add(Kind.BUFFER, Resource(buf), "t", key=1)
    guard = BufferGuard(table, table.buffer_epoch, (buf,))
    assert guard.holds()
    buf.initialized = True
    assert not guard.holds()
    guard = BufferGuard(table, table.buffer_epoch, (buf,))
    buf.dimensions = (2, 3)
    assert not guard.holds()
    assert BufferGuard(table, table.buffer_epoch, (buf,)).holds()


class _Switch:
    def __init__(self) -> None:
        self.ok = True

    def holds(self) -> bool:
        return self.ok


def test_the_request_cache_reuses_a_guarded_request_only_while_its_guard_holds() -> None:
    cache = RequestCache()
    pool, other = object(), object()
    first, second, plain = object(), object(), object()
    decoded = BurstRequest(0, (PoolRef.slot(3), PoolRef.token(7)), (), ())
    known = cache.learn(b"request", decoded)
    assert cache.known(b"request") is known and known.slots == (3,) and known.tokens == [7]
    assert known.pools((pool,)) == (pool, 7)
    guard = _Switch()
    cache.keep(known, (pool,), first, guard, False)  # type: ignore[arg-type]
    assert cache.validated(known, (pool,)) == (first, False)
    assert cache.validated(known, (other,)) is None
    guard.ok = False
    assert cache.validated(known, (pool,)) is None
    # Bound again: the new record replaces the stale one.
    cache.keep(known, (pool,), second, _Switch(), True)  # type: ignore[arg-type]
    assert cache.validated(known, (pool,)) == (second, True) and len(cache) == 1
    plain_known = cache.learn(b"plain", BurstRequest(0, (PoolRef.slot(3),), (), ()))
    cache.keep(plain_known, (pool,), plain, None, False)  # type: ignore[arg-type]
    assert cache.validated(plain_known, (pool,)) == (plain, False)
    assert cache.validated(known, (pool,)) == (second, True)
    assert cache.hits == 4
    cache.forget(pool)
    assert len(cache) == 0 and cache.known(b"request") is known  # decoded once, still known


def test_the_request_cache_keeps_a_bounded_number_of_messages_and_records() -> None:
    cache = RequestCache(size=2, variants=2)
    decoded = BurstRequest(0, (PoolRef.slot(1),), (), ())
    first = cache.learn(b"a", decoded)
    cache.learn(b"b", decoded)
    cache.learn(b"c", decoded)
    assert cache.known(b"a") is None and cache.known(b"c") is not None
    assert cache.learn(None, decoded) is not None and cache.known(b"b") is not None  # None: not kept
    pools = [object() for _ in range(3)]
    for n, pool in enumerate(pools):
        cache.keep(first, (pool,), n, None, False)  # type: ignore[arg-type]
    assert cache.validated(first, (pools[0],)) is None  # the oldest record went
    assert cache.validated(first, (pools[2],)) == (2, False)


def test_mappings_compare_by_identity_as_the_request_cache_assumes() -> None:
    # The cache compares the tuples of mappings a request resolved to with `==`: a mapping must equal
    # only itself (two mappings of equal contents are two pools).
    assert SharedMemory.__eq__ is object.__eq__ and FileMemory.__eq__ is object.__eq__
    a, b = SharedMemory.create(64), SharedMemory.create(64)
    try:
        assert (a,) == (a,) and (a,) != (b,)
    finally:
        a.close()
        b.close()
