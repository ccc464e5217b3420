"""RemoteBurst: burst executions of a prepared model in a driver service, over shared-memory rings.

The client creates the two rings (requests, results) and their eventfds and
hands them over with `configureExecutionBurst`. An execution is then one
message written into the request ring and one read back from the result
ring, with no socket round trip. Memory pools are named by slot ids; the
first time the driver meets a slot it asks for it (a getMemories message on
the result ring) and the client sends the memory over the socket
(`burstProvideMemories`); afterwards the driver's cached mapping is reused.
Driver-managed buffers (memory domains) are named by their tokens: a pool
that is an int token or a RemoteBuffer of this device.

While waiting for a result the client polls for the polling window, then
blocks on the result eventfd in 50 ms steps, checking between them that the
driver still lives, so a driver that dies mid-execution is reported as
DEVICE_UNAVAILABLE within about 50 ms.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from mlts.hal.codec import UINT32_MAX
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.interface import Burst
from mlts.hal.memory import SharedMemory
from mlts.hal.types import ExecutionResult, OptionalTimeoutDuration, OptionalTimePoint, Request
from mlts.ipc import burst_messages as msg
from mlts.ipc.burst_ring import DEFAULT_CAPACITY, DEFAULT_POLLING_US, MessageTooLarge, Ring, RingError
from mlts.ipc.expected_wait import ExpectedWait, stretch_max_us
from mlts.runtime.remote_buffer import RemoteBuffer

if TYPE_CHECKING:
    from mlts.runtime.remote import RemoteDevice

#: Between two checks of the driver's liveness while a burst execution is pending.
LIVENESS_STEP_S = 0.05
#: The largest result message a client reads.
MAX_RESULT_BYTES = 1 << 20
#: Request messages a burst keeps for resending (the most recent ones).
RECENT_REQUESTS = 4

_set_seq = msg.U32.pack_into


class RemoteBurst(Burst):
    """A burst of a RemotePreparedModel; one execution at a time (thread-safe); a context manager."""

    def __init__(
        self,
        device: RemoteDevice,
        prepared_handle: int,
        polling_us: int | None = None,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self.device = device
        self.polling_us = DEFAULT_POLLING_US if polling_us is None else polling_us
        if not 0 <= self.polling_us <= 10_000:
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT, f"polling window {self.polling_us} µs is outside 0..10000"
            )
        self._lock = threading.Lock()
        self._seq = 0
        # id(memory) -> (slot, memory kept alive so id() stays unique while cached).
        self._slots: dict[int, tuple[int, SharedMemory]] = {}
        self._next_slot = 1
        #: Whether the burst was released (a plain attribute: the execution seam reads it every run).
        self.closed = False
        self._broken: HalError | None = None
        # The last requests sent (request, measure, deadline, loop timeout, its message), most recent
        # first: resent with a new sequence number when an execution is the same request object on the
        # same pools (a few, so requests used in turn, driver buffers swapped every step, are too).
        self._recent: list[tuple] = []
        self._results = msg.ResultDecoder()
        # Stretches the result window over the expected execution (never in low-power mode).
        self._expected = ExpectedWait(stretch_max_us() if self.polling_us > 0 else 0)
        #: Memories sent to the driver over the socket (each once per slot).
        self.memories_sent = 0
        self.requests = Ring.create(capacity, "mlts-burst-requests")
        try:
            self.results = Ring.create(capacity, "mlts-burst-results")
        except BaseException:
            self.requests.close()
            raise
        try:
            args = {
                "prepared": prepared_handle,
                "polling_us": self.polling_us,
                "request_ring": {"fd": 0, "event": 1, "size": self.requests.size},
                "result_ring": {"fd": 2, "event": 3, "size": self.results.size},
            }
            fds = [self.requests.fd, self.requests.event_fd, self.results.fd, self.results.event_fd]
            result = device.call("configureExecutionBurst", args, fds)
            handle = result.get("burst")
            if type(handle) is not int:
                raise HalError(
                    ErrorStatus.GENERAL_FAILURE,
                    f"driver {device.name!r} sent no burst handle: {result!r:.80}",
                )
            self.handle = handle
        except BaseException:
            self.requests.close()
            self.results.close()
            raise

    # ------------------------------------------------------------ executing

    def _pool(self, n: int, pool: object) -> msg.PoolRef:
        """How request pool `n` travels: a SharedMemory by its slot, a driver buffer by its token."""
        if isinstance(pool, RemoteBuffer):
            if pool.device is not self.device or pool.closed:
                raise HalError(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"request pool {n} ({pool!r}) is not a live buffer of driver {self.device.name!r}",
                )
            pool = pool.token
        if isinstance(pool, int) and not isinstance(pool, bool):
            if not 0 < pool <= UINT32_MAX:
                raise HalError(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"request pool {n} is buffer token {pool}; valid tokens are in [1, {UINT32_MAX}]",
                )
            return msg.PoolRef.token(pool)
        if not isinstance(pool, SharedMemory):
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT,
                f"burst request pool {n} is a {type(pool).__name__}; bursts take SharedMemory pools "
                "or driver buffer tokens",
            )
        if pool.fd < 0:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"request pool {n} ({pool!r}) is closed")
        entry = self._slots.get(id(pool))
        if entry is None:
            entry = (self._next_slot, pool)
            self._next_slot += 1
            self._slots[id(pool)] = entry
        return msg.PoolRef.slot(entry[0])

    def execute(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: OptionalTimeoutDuration = None,
        *,
        timeout: float | None = None,
    ) -> ExecutionResult:
        """Run `request` through the burst's rings; raises the execution's HalError on failure."""
        lock = self._lock
        lock.acquire()  # acquire/release: cheaper than a `with` statement on this per-execution path
        try:
            if self.closed or self._broken is not None:
                self._check_usable()
            payload = None
            for n, last in enumerate(self._recent):
                if last[0] is request:
                    if (
                        (last[1] is measure or last[1] == measure)
                        and last[2] == deadline
                        and last[3] == loop_timeout_duration
                        and (
                            # `_still_usable`'s usual case inlined: one memory, open and still cached.
                            named[0].fd >= 0 and id(named[0]) in self._slots
                            if len(named := request.pools) == 1 and type(named[0]) is SharedMemory
                            else self._still_usable(named)
                        )
                    ):
                        payload = last[4]  # the same request again: only its sequence number changes
                        if n:
                            self._recent.insert(0, self._recent.pop(n))
                    else:
                        del self._recent[n]
                    break
            if payload is None:
                pools = tuple(self._pool(n, p) for n, p in enumerate(request.pools))
                payload = bytearray(self._encode(request, pools, measure, deadline, loop_timeout_duration))
                self._recent = [
                    (request, measure, deadline, loop_timeout_duration, payload),
                    *self._recent[: RECENT_REQUESTS - 1],
                ]
            self._seq = seq = (self._seq + 1) & 0xFFFFFFFF
            _set_seq(payload, 4, seq)  # msg.set_seq, inlined
            limit = self.device.execute_timeout if timeout is None else timeout
            try:
                if not self.requests.write(payload, limit if limit < 1.0 else 1.0):
                    raise self._break("the driver does not read the burst's request ring")
                return self._await(seq, limit)
            except MessageTooLarge as e:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{e}; use a synchronous execution") from None
            except RingError as e:
                raise self._break(f"the burst's rings are inconsistent ({e})") from None
        finally:
            lock.release()

    def _still_usable(self, pools: tuple[object, ...]) -> bool:
        """Whether the pools of the last request sent can be named as they were then: each memory
        still open and cached under its slot, each driver buffer still open."""
        slots = self._slots
        if len(pools) == 1 and type(pools[0]) is SharedMemory:  # the common case: one pool
            return pools[0].fd >= 0 and id(pools[0]) in slots
        for pool in pools:
            if type(pool) is int:  # a buffer token: nothing to go stale
                continue
            if isinstance(pool, SharedMemory):
                if pool.fd < 0 or id(pool) not in slots:
                    return False
            elif isinstance(pool, RemoteBuffer) and pool.closed:
                return False
        return True

    def _encode(
        self,
        request: Request,
        pools: tuple[msg.PoolRef, ...],
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout_duration: OptionalTimeoutDuration,
    ) -> bytes:
        try:
            return msg.encode_request(
                msg.BurstRequest(
                    self._seq,
                    pools,
                    request.inputs,
                    request.outputs,
                    measure,
                    deadline,
                    loop_timeout_duration,
                    request.measure_operations,
                )
            )
        except Exception as e:  # a field past its fixed width (struct.error, OverflowError)
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"burst request cannot be encoded: {e}") from None

    def _await(self, seq: int, limit: float) -> ExecutionResult:
        ring = self.results
        expected = self._expected
        started = time.perf_counter()
        polling = self.polling_us
        stretching: ExpectedWait | None = expected if polling else None
        decoder = self._results
        deadline: float | None = None
        while True:
            if not ring.wait(LIVENESS_STEP_S, polling, expected=stretching):
                stretching = None
                self._check_driver()
                if deadline is None:
                    deadline = time.monotonic() + limit - LIVENESS_STEP_S
                elif time.monotonic() >= deadline:
                    raise self._break(f"no burst result within {limit:.1f} s")
                continue
            data = ring.read(MAX_RESULT_BYTES)
            if data is None:
                if ring.peer_closed():
                    raise self._break("the driver ended the burst", dead_driver=False)
                polling, stretching = 0, None  # a stale signal woke this side: block again without polling
                continue
            try:
                repeated = decoder.success(data)
                if repeated is not None:
                    if repeated[0] == seq:
                        expected.record(time.perf_counter() - started)
                        return repeated[1]
                    continue  # the late result of an execution this client gave up on
                kind = msg.result_kind(data)
                if kind == msg.KIND_GET_MEMORIES:
                    asked_seq, asked = msg.decode_get_memories(data)
                    if asked_seq == seq:
                        self._provide(asked)
                    continue
                result = decoder.decode(data)
            except ValueError as e:
                raise self._break(f"driver {self.device.name!r} sent a malformed burst result: {e}") from None
            if result.seq != seq:
                continue  # the late result of an execution this client gave up on
            expected.record(time.perf_counter() - started)
            if result.status != ErrorStatus.NONE:
                raise HalError(result.status, result.message or result.status.name, result.output_shapes)
            return ExecutionResult(result.output_shapes, result.timing, result.operation_times)

    def _provide(self, slots: tuple[int, ...]) -> None:
        by_slot = {slot: memory for slot, memory in self._slots.values()}
        refs: list[dict[str, int]] = []
        fds: list[int] = []
        for slot in slots:
            memory = by_slot.get(slot)
            if memory is None:
                continue  # a slot this client never named (or freed): the driver reports it
            refs.append({"slot": slot, "fd": len(fds), "size": memory.size})
            fds.append(memory.fd)
        self.device.call("burstProvideMemories", {"burst": self.handle, "memories": refs}, fds)
        self.memories_sent += len(refs)

    def _check_driver(self) -> None:
        conn = self.device.connection
        if conn.dead is not None:
            raise self._break(conn.dead.message)
        if not conn.endpoint.alive():
            conn.driver_died = True
            raise self._break(conn.endpoint.death_message("a burst execution"))

    def _break(self, text: str, dead_driver: bool = True) -> HalError:
        """Mark the burst unusable (later executions fail at once) and return the error."""
        status = ErrorStatus.DEVICE_UNAVAILABLE if dead_driver else ErrorStatus.GENERAL_FAILURE
        if self._broken is None:
            self._broken = HalError(status, f"burst of driver {self.device.name!r}: {text}")
        return HalError(self._broken.status, self._broken.message)

    def _check_usable(self) -> None:
        if self.closed:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "the burst was released")
        if self._broken is not None:
            raise HalError(self._broken.status, self._broken.message)

    # ------------------------------------------------------------ memory cache

    def freeMemory(self, memory: object) -> None:
        """Let the driver drop its mapping of `memory` (a pool used by this burst); unknown is a no-op."""
        with self._lock:
            entry = self._slots.pop(id(memory), None)
            self._recent = []
            if entry is None or self.closed:
                return
            try:
                self.device.call("burstFreeMemory", {"burst": self.handle, "slot": entry[0]})
            except HalError:
                pass

    @property
    def cached_slots(self) -> int:
        return len(self._slots)

    # ------------------------------------------------------------ ending

    def close(self) -> None:
        """Release the burst in the driver (its listener and cached mappings) and the rings; idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._slots.clear()
            try:
                if self.device.connection.dead is None:
                    self.device.call("releaseBurst", {"burst": self.handle})
            except HalError:
                pass
            finally:
                self.requests.close()
                self.results.close()

    def __repr__(self) -> str:
        return f"RemoteBurst({self.device.name!r}, handle={getattr(self, 'handle', None)})"
