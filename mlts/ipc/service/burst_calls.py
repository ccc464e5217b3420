"""Bursts: configureExecutionBurst and its memory cache, and the listener thread that serves each burst.

A burst is a prepared model plus two rings the client created (requests in,
results out), each with an eventfd. Configuring one calls the prepared model's
`configureExecutionBurst` (HAL 1.2's, within the client's identity), so the
driver learns of every burst and may keep resources for its life; the burst
object it returns executes the burst's requests (the default, any model's
`SynchronousBurst`, runs each through executeSynchronously, so every Device
gets bursts). Its listener thread reads a request message and serves it
through the service's execution pipeline (mlts.ipc.service.pipeline: admission
with the prepared model's request cache, the execution workers and their
priority order, the run, the error mapping), supplying what is the burst's
own: the pools, resolved from the memory slots the message names (an unknown
slot is asked for with a getMemories message on the result ring, and the
client answers over the socket with `burstProvideMemories`), the driver's
burst object that executes, and the answer, written to the result ring.
A slot freed or replaced is passed to the driver's `freeMemory` before its
mapping goes, and every validated request built on it leaves the request
cache at once (`pipeline.unreachable`); the driver's burst is closed when the
burst ends (released, or its client gone).
Mapped slots stay cached until `burstFreeMemory` or the burst's release; the
listener itself releases a freed slot's mapping, between executions, so an
execution uses its slots without taking and giving back a reference each time.
Anything inconsistent in the rings ends that burst only.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from mlts.hal import deadlines, qos
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError, invalid
from mlts.hal.interface import Burst
from mlts.hal.types import Request
from mlts.ipc import burst_messages as msg
from mlts.ipc.burst_ring import DEFAULT_POLLING_US, MessageTooLarge, Ring, RingError
from mlts.ipc.compact_calls import request_head
from mlts.ipc.expected_wait import SERVICE_STRETCH_MAX_US, ExpectedWait, stretch_max_us
from mlts.ipc.service import pipeline
from mlts.ipc.service.args import arg, handle
from mlts.ipc.service.buffer_calls import buffers_of
from mlts.ipc.service.client import Call, Client, Handler
from mlts.ipc.service.device_calls import close_memory, map_memory
from mlts.ipc.service.handles import Kind, Resource
from mlts.ipc.service.profiling import run_profiled
from mlts.ipc.service.request_cache import Known

log = logging.getLogger("mlts.ipc.service")

#: How long the listener waits for the client to provide the memories it asked for.
GET_MEMORIES_WAIT_S = 5.0
#: At most this many slots cached per burst.
MAX_SLOTS = 1024
#: The longest polling window a client may ask for (µs).
MAX_POLLING_US = 10_000
_PREPARED = Kind.PREPARED


class BurstContext:
    """The service side of one burst: its rings, slot cache and listener thread."""

    def __init__(
        self,
        client: Client,
        prepared_number: int,
        prepared: Resource,
        requests: Ring,
        results: Ring,
        polling_us: int,
        executor: Burst,
    ) -> None:
        self.client = client
        #: The driver's burst object (`PreparedModel.configureExecutionBurst`): it runs the executions.
        self.executor = executor
        self.prepared_number = prepared_number
        self.prepared: Resource | None = prepared
        self.requests = requests
        self.results = results
        self.polling_us = polling_us
        self._slots: dict[int, Resource] = {}
        #: The mapping of each cached slot (what `_slots` holds), read without the lock by the listener.
        self._mapped: dict[int, Any] = {}
        self._mapped_get = self._mapped.__getitem__
        # Slots freed or replaced, released by the listener between executions (or when it ends): an
        # execution uses its slots' mappings without holding them, since only the listener releases them.
        self._retired: list[Resource] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._answers = 0  # burstProvideMemories calls so far: an answer ends a wait even if incomplete
        self._encoder = msg.ResultEncoder()
        self._handles = client.handles
        self._prevalidate = client.host.prevalidate
        # The job of the request being served (one at a time: reused), and that request's number.
        self._job = pipeline.Job(
            client_key=client.key,
            app=client.app,
            client_pid=client.pid,
            execute=executor.execute,
            path="burst",
        )
        self._seq = 0
        # Gives back the worker (or preempting) slot of `_exec_pool` this thread holds (see `_run`).
        self._slot: Callable[[], None] | None = None
        self.executions = 0
        #: The listener's plan of its next wait (None in low-power mode), set when it starts.
        self.expected: ExpectedWait | None = None
        self.thread = threading.Thread(target=self._listen, name="burst", daemon=True)

    # ------------------------------------------------------------ slot cache (client's reader thread)

    def provide(self, slot: int, memory: Any) -> None:
        """Cache `memory` under `slot`; its bytes, counted against the client's budget by the caller, are
        given back when the slot goes (here too, when it is refused)."""
        with self._cond:
            if self._stopping:
                close_memory(memory)
                self._handles.release_bytes(memory.size)
                raise invalid("burstProvideMemories: the burst was released")
            if slot not in self._slots and len(self._slots) >= MAX_SLOTS:
                close_memory(memory)
                self._handles.release_bytes(memory.size)
                raise HalError(
                    ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                    f"burstProvideMemories: the burst already caches {MAX_SLOTS} slots; free some first",
                )
            old = self._slots.pop(slot, None)
            handles, size = self._handles, memory.size

            def close() -> None:
                close_memory(memory)
                handles.release_bytes(size)  # counted by provide_memories

            self._slots[slot] = Resource(memory, close, memory.size)
            self._mapped[slot] = memory
            if old is not None:
                pipeline.unreachable(self._handles, old.value)
                self._retired.append(old)
                self._wake()
            self._cond.notify_all()

    def answered(self) -> None:
        with self._cond:
            self._answers += 1
            self._cond.notify_all()

    def free(self, slot: int) -> bool:
        with self._cond:
            resource = self._slots.pop(slot, None)
            if resource is None:
                return False
            del self._mapped[slot]
            pipeline.unreachable(self._handles, resource.value)
            self._retired.append(resource)
            self._wake()
        return True

    def _wake(self) -> None:
        """Wake the listener (if it was blocked) to release the retired slots; called with the lock held.
        Once the burst is stopping the rings may be closed, and `_release` takes the retired slots."""
        if not self._stopping:
            self.requests.signal()

    def _release_retired(self) -> None:
        """Release the slots freed or replaced since the last call (on the listener's thread), each told
        to the driver's burst first (it may drop what it keeps of the memory)."""
        with self._cond:
            retired, self._retired = self._retired, []
        for resource in retired:
            self._tell_driver("freeMemory", functools.partial(self.executor.freeMemory, resource.value))
            resource.release()

    def _tell_driver(self, what: str, call: Callable[[], None]) -> None:
        """A call of the driver's burst object that may not end the burst: a failure is logged."""
        try:
            call()
        except Exception as e:
            log.warning(
                "burst of client %s: the driver's %s raised %s: %s",
                self.client.peer.describe(),
                what,
                type(e).__name__,
                e,
            )

    def cached(self) -> int:
        with self._cond:
            return len(self._slots)

    # ------------------------------------------------------------ ending

    def stop(self) -> None:
        """End the listener (it releases everything when it returns); idempotent."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify_all()
        self.requests.signal()
        if threading.current_thread() is not self.thread and self.thread.is_alive():
            self.thread.join(2.0)
        if not self.thread.is_alive():
            self._release()

    def _release(self) -> None:
        with self._cond:
            slots, self._slots = [*self._slots.values(), *self._retired], {}
            self._mapped.clear()
            self._retired = []
            prepared, self.prepared = self.prepared, None
        if prepared is not None:  # the driver's burst ends first: nothing of it runs past here
            self._tell_driver("close", self.executor.close)
        for resource in slots:
            pipeline.unreachable(self._handles, resource.value)
            resource.release()
        if prepared is not None:
            prepared.release()
            try:
                self.results.mark_closed()
            except ValueError:
                pass
            self.requests.close()
            self.results.close()

    # ------------------------------------------------------------ listener

    def _listen(self) -> None:
        """Serve the request ring until the burst ends; with MLTS_SERVICE_PROFILE=PREFIX in the service's
        environment, under cProfile, writing PREFIX.PID.KEY-burst-N when the burst ends (as the reader
        threads do)."""
        run_profiled(f"{self.client.key}-burst-{id(self):x}", self._listen_loop)

    def _listen_loop(self) -> None:
        requests = self.requests
        client = self.client
        try:
            # Executions run on this thread act for the burst's client (queued ones say so themselves);
            # the priority ticket of each is left once its result is written, as on the other paths.
            with qos.serving_client(self.client.key, self.client.app), qos.holding_tickets() as held:
                polling = self.polling_us
                # A client that sends step after step (an audio model's stream) sends its next request
                # about as long after each answer: the window is stretched over that gap as a client's
                # is over its answers (mlts.ipc.expected_wait), so the next request finds this thread
                # polling instead of asleep. Never in low-power mode (no window).
                expected = self.expected = (
                    ExpectedWait(stretch_max_us(SERVICE_STRETCH_MAX_US)) if polling > 0 else None
                )
                clock = time.perf_counter
                while not self._stopping:
                    began = clock()
                    if not requests.wait(None, polling, self.results, expected if polling else None):
                        continue
                    if self._stopping:
                        break
                    data = requests.read()
                    if self._retired:
                        self._release_retired()
                    if data is None:
                        if requests.peer_closed():
                            break  # the client will send nothing more
                        polling = 0  # a stale signal: block again without another polling window
                        continue
                    if expected is not None and polling:
                        expected.record(clock() - began)
                    polling = self.polling_us
                    client.last_activity = time.monotonic()  # a burst execution: the client is not idle
                    try:
                        self._serve(data)
                    finally:
                        self._replied(held)
        except (RingError, MessageTooLarge) as e:
            log.warning("burst of client %s ended: %s", self.client.peer.describe(), e)
        except Exception as e:
            log.error("burst listener failed: %s: %s", type(e).__name__, e, exc_info=True)
        finally:
            with self._cond:
                self._stopping = True
            if self.results is not None:
                try:
                    self.results.mark_closed()
                except ValueError:
                    pass
            self._release()

    def _serve(self, data: bytes) -> None:
        """Admit, run and answer one request message (the execution pipeline; the ring is this path's
        own: where the pools come from, `_memories`, and how the answer goes out)."""
        seq = 0
        done: Any = None  # a successful execution's result, when it carries no operation times
        reply: msg.BurstResult | None = None
        job = self._job
        try:
            try:
                seq, job.measure, job.deadline, job.loop_timeout, key = request_head(data)
            except ValueError as e:
                seq = msg.request_seq(data)  # 0 when not even the fixed part is whole
                raise invalid(f"burst request: {e}") from None
            self._seq = seq
            prepared = self.prepared
            if prepared is None or self._handles.peek(_PREPARED, self.prepared_number) is not prepared:
                entry, refused = None, invalid(f"burst: prepared model {self.prepared_number} was released")
            else:
                entry, refused = prepared.value, None
            pipeline.admit(
                self.client,
                job,
                "burst",
                entry,
                refused,
                key,
                data,
                "burst request",
                self._memories,
                self._keep,
            )
            # A service that does not pre-validate leaves a passed deadline to the driver.
            if self._prevalidate:
                deadlines.check_before(job.deadline, "burst")
            slot = pipeline.worker_slot(self.client, job.entry.priority)
            if slot is not None:
                # On this thread (which acts for the burst's client); the listener gives the slot back
                # once the result is written (`_replied`).
                self._slot = slot
                result = job.run(None, True)
            else:
                result = pipeline.run_waited(self.client, "burst", job)
            if job.request.measure_operations:
                reply = msg.BurstResult(
                    seq, ErrorStatus.NONE, result.output_shapes, result.timing, "", result.operation_times
                )
            else:
                done = result
        except Exception as e:
            error = pipeline.failure(self.client, "burst", e, named=False)
            reply = msg.BurstResult(seq, error.status, error.output_shapes, message=error.message)
        self.executions += 1
        try:
            if done is not None:
                encoded = self._encoder.success(seq, done.output_shapes, done.timing)
            else:
                assert reply is not None
                encoded = msg.encode_result(reply)
        except Exception as e:  # a shape the format cannot carry (a dimension past uint32)
            encoded = msg.encode_result(
                msg.BurstResult(seq, ErrorStatus.GENERAL_FAILURE, message=f"result cannot be encoded: {e}")
            )
        if not self.results.write(encoded, 1.0):
            raise RingError("the client does not read its results (the result ring stays full)")

    def _replied(self, held: list[Callable[[], None]]) -> None:
        """After `_serve` (its result is on its way): give back the worker slot the execution ran in and
        the priority tickets it left meanwhile (`held`, from `qos.holding_tickets`)."""
        slot = self._slot
        if slot is not None:
            self._slot = None
            slot()
        if held:
            qos.leave_held(held)

    def _memories(self, known: Known) -> tuple[Any, ...]:
        """The mappings of the request's slots, in order: the cached ones at once; else (a slot not
        cached) the request's tokens are checked to name this client's buffers (another client's is
        INVALID_ARGUMENT and logged), the missing slots asked for once, and each slot looked up. A
        slot's mapping stays until this thread releases it, after the execution (`_release_retired`),
        so the execution uses it without holding it."""
        slots = known.slots
        try:
            if len(slots) == 1:  # the usual case: no iterator, no growing tuple
                return (self._mapped_get(slots[0]),)
            return tuple(map(self._mapped_get, slots))
        except KeyError:
            pass
        if known.tokens:  # looked up, not held: see buffer_calls.buffers_of
            buffers_of(self.client, "burst", known.tokens)
        # Asked under this execution's number.
        self._fetch_missing(self._seq, known.slots)
        memories: list[Any] = []
        with self._cond:
            for n, (kind, value) in enumerate(known.decoded.pools):
                if kind == msg.POOL_TOKEN:
                    continue
                memory = self._mapped.get(value)
                if memory is None:
                    raise invalid(
                        f"burst request: pool {n} names slot {value}, which the client did not provide"
                    )
                memories.append(memory)
        return tuple(memories)

    def _keep(
        self, known: Known, memories: tuple[Any, ...], request: Request, guard: Any, files: bool
    ) -> None:
        """Keep a validated record in the prepared model's request cache unless a slot it used was freed
        or replaced meanwhile (checked under the lock `provide` and `free` drop records under)."""
        with self._cond:
            mapped = self._mapped
            for slot, memory in zip(known.slots, memories, strict=True):
                if mapped.get(slot) is not memory:
                    return
            self._job.entry.requests.keep(known, memories, request, guard, files)

    def _fetch_missing(self, seq: int, slots: tuple[int, ...]) -> None:
        """Ask the client once for the slots not cached, and wait (bounded) for its answer."""
        with self._cond:
            missing = tuple(sorted({s for s in slots if s not in self._slots}))
        if not missing:
            return
        self.results.write(msg.encode_get_memories(seq, missing), timeout=1.0)
        limit = time.monotonic() + GET_MEMORIES_WAIT_S
        with self._cond:
            answers = self._answers
            while (
                not self._stopping and answers == self._answers and any(s not in self._slots for s in missing)
            ):
                remaining = limit - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)

    def status(self) -> dict[str, Any]:
        return {"prepared": self.prepared_number, "slots": self.cached(), "executions": self.executions}


# ------------------------------------------------------------ handlers


def _ring(call: Call, key: str) -> Ring:
    ref = arg(call.args, call.method, key, dict)
    what = f"{call.method} {key}"
    size = ref.get("size")
    fd = call.take_fd(ref.get("fd"), f"{key}.fd")
    try:
        event = call.take_fd(ref.get("event"), f"{key}.event")
    except HalError:
        os.close(fd)
        raise
    try:
        return Ring.adopt(fd, size, event, what)
    except ValueError as e:
        raise invalid(str(e)) from None


def configure_execution_burst(client: Client, call: Call) -> dict[str, Any]:
    """Adopt the client's rings and start the burst's listener; replies with the burst handle."""
    m = call.method
    number = handle(call.args, m, "prepared")
    polling_us = arg(call.args, m, "polling_us", int, DEFAULT_POLLING_US)
    if not 0 <= polling_us <= MAX_POLLING_US:
        raise invalid(f"{m}: polling_us={polling_us} is outside 0..{MAX_POLLING_US}")
    client.handles.check_room(Kind.BURST, m)
    prepared = client.handles.get(Kind.PREPARED, number, m)
    rings: list[Ring] = []
    executor: Burst | None = None
    try:
        rings.append(_ring(call, "request_ring"))
        rings.append(_ring(call, "result_ring"))
        # The driver learns of the burst (this thread acts for the client) and gives its burst object.
        executor = prepared.value.prepared.configureExecutionBurst(polling_us=polling_us)
        if not isinstance(executor, Burst):
            raise HalError(
                ErrorStatus.GENERAL_FAILURE,
                f"{m}: the driver returned a {type(executor).__name__}, not an mlts.hal.interface.Burst",
            )
        context = BurstContext(client, number, prepared, rings[0], rings[1], polling_us, executor)
        burst = client.handles.add(Kind.BURST, Resource(context, context.stop), m)
    except BaseException:
        if isinstance(executor, Burst):
            try:
                executor.close()
            except Exception as e:  # the burst is refused anyway
                log.warning("%s: closing the driver's burst raised %s: %s", m, type(e).__name__, e)
        prepared.release()
        for ring in rings:
            ring.close()
        raise
    context.thread.start()
    return {"burst": burst}


def _context(client: Client, call: Call) -> tuple[Resource, BurstContext]:
    resource = client.handles.get(Kind.BURST, handle(call.args, call.method, "burst"), call.method)
    return resource, resource.value


def provide_memories(client: Client, call: Call) -> dict[str, Any]:
    """Map the memories the listener asked for: {"burst", "memories": [{"slot", "fd", "size"}]}."""
    m = call.method
    refs = arg(call.args, m, "memories", list)
    if len(refs) > MAX_SLOTS:
        raise invalid(f"{m}: {len(refs)} memories at once, more than {MAX_SLOTS}")
    resource, context = _context(client, call)
    try:
        for n, ref in enumerate(refs):
            if not isinstance(ref, dict):
                raise invalid(f"{m}: memories[{n}] must be an object")
            slot = arg(ref, f"{m} memories[{n}]", "slot", int)
            if not 0 <= slot < 2**32:
                raise invalid(f"{m}: memories[{n}] slot {slot} is not a uint32")
            size = arg(ref, f"{m} memories[{n}]", "size", int)
            # A slot's mapping counts against the client's budget until the slot is freed or replaced.
            client.handles.reserve_bytes(max(size, 0), m)
            try:
                memory = map_memory(call, ref, f"memories[{n}]")
            except BaseException:
                client.handles.release_bytes(max(size, 0))
                raise
            context.provide(slot, memory)
    finally:
        context.answered()
        resource.release()
    return {}


def free_memory(client: Client, call: Call) -> dict[str, Any]:
    """Forget one slot of the burst's cache (its mapping is released once no execution uses it)."""
    slot = arg(call.args, call.method, "slot", int)
    resource, context = _context(client, call)
    try:
        freed = context.free(slot)
    finally:
        resource.release()
    return {"freed": freed}


def release_burst(client: Client, call: Call) -> dict[str, Any]:
    number = handle(call.args, call.method, "burst")
    if not client.handles.remove(Kind.BURST, number):
        raise invalid(f"{call.method}: unknown burst handle {number}")
    return {}


HANDLERS: dict[str, Handler] = {
    "configureExecutionBurst": configure_execution_burst,
    "burstProvideMemories": provide_memories,
    "burstFreeMemory": free_memory,
    "releaseBurst": release_burst,
}
