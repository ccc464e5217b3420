"""Bursts: configureExecutionBurst and its memory cache, and the listener thread that serves each burst.

A burst is a prepared model plus two rings the client created (requests in,
results out), each with an eventfd. Configuring one calls the prepared model's
`configureExecutionBurst` (HAL 1.2's, within the client's identity), so the
driver learns of every burst and may keep resources for its life; the burst
object it returns executes the burst's requests (the default, any model's
`SynchronousBurst`, runs each through executeSynchronously, so every Device
gets bursts). Its listener thread reads a request,
resolves the memory slots it names (an unknown slot is asked for with a
getMemories message on the result ring, and the client answers over the
socket with `burstProvideMemories`) and the driver buffer tokens it names
(checked against the client's handle table and held for the execution, as
on every other execution path), executes through the driver's burst object
within the service's execution workers and their priority order, and writes
the result. A slot freed or replaced is passed to the driver's `freeMemory`
before its mapping goes; the driver's burst is closed when the burst ends
(released, or its client gone).
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

from mlts.hal import deadlines, qos, trace, validate
from mlts.hal.buffer_use import bind_buffers
from mlts.hal.deadlines import TimePoint
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError, invalid
from mlts.hal.interface import Burst
from mlts.hal.memory import FileMemory, file_pools_in, file_pools_out
from mlts.hal.types import Request
from mlts.ipc import burst_messages as msg
from mlts.ipc.burst_ring import DEFAULT_POLLING_US, MessageTooLarge, Ring, RingError
from mlts.ipc.service.args import arg, handle
from mlts.ipc.service.buffer_calls import BufferGuard, buffers_of, guard_buffers
from mlts.ipc.service.client import Call, Client, Handler
from mlts.ipc.service.device_calls import PreparedEntry, close_memory, map_memory
from mlts.ipc.service.handles import Kind, Resource
from mlts.ipc.service.profiling import run_profiled

log = logging.getLogger("mlts.ipc.service")

#: How long the listener waits for the client to provide the memories it asked for.
GET_MEMORIES_WAIT_S = 5.0
#: At most this many slots cached per burst.
MAX_SLOTS = 1024
#: The longest polling window a client may ask for (µs).
MAX_POLLING_US = 10_000
#: Decoded request messages a burst keeps.
MAX_KNOWN_MESSAGES = 16

_EXECUTE = msg.EXECUTE_KIND_BYTES
_seq_of = msg.U32.unpack_from  # the sequence number at byte 4 of a message (`msg.message_seq`)
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
        self._files = False  # a slot holds a client's file (FileMemory): executions read it in, write it back
        # Slots freed or replaced, released by the listener between executions (or when it ends): an
        # execution uses its slots' mappings without holding them, since only the listener releases them.
        self._retired: list[Resource] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._answers = 0  # burstProvideMemories calls so far: an answer ends a wait even if incomplete
        # Execute messages already decoded (keyed by their bytes after the sequence number), each with
        # the pools, validated Request and slots of its last run: a repeated message on the same
        # mappings is not checked again.
        self._known: dict[bytes, list[Any]] = {}
        self._encoder = msg.ResultEncoder()
        self._handles = client.handles
        self._exec_pool = client.host.exec_pool
        # Gives back the worker (or preempting) slot of `_exec_pool` this thread holds (see `_run`).
        self._slot: Callable[[], None] | None = None
        self.executions = 0
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
            self._files = self._files or isinstance(memory, FileMemory)
            if old is not None:
                self._forget(old.value)
                self._retired.append(old)
                self._wake()
            self._cond.notify_all()

    def _forget(self, memory: Any) -> None:
        """Drop the validated requests that ran on `memory` (its slot was freed or replaced); called
        with the lock held."""
        for known in list(self._known.values()):
            validated = known[1]
            if validated is not None and any(p is memory for p in validated[0]):
                known[1] = None

    def answered(self) -> None:
        with self._cond:
            self._answers += 1
            self._cond.notify_all()

    def free(self, slot: int) -> bool:
        with self._cond:
            resource = self._slots.pop(slot, None)
            if resource is None:
                return False
            self._forget(resource.value)
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
            self._retired = []
            prepared, self.prepared = self.prepared, None
        if prepared is not None:  # the driver's burst ends first: nothing of it runs past here
            self._tell_driver("close", self.executor.close)
        for resource in slots:
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
                while not self._stopping:
                    if not requests.wait(None, polling, self.results):
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
        seq = 0
        held: list[Resource] = []
        done: Any = None  # a successful execution's result, when it carries no operation times
        reply: msg.BurstResult | None = None
        try:
            # The same execute message as before, but for its sequence number (bytes 4..8), decodes the
            # same: decode once.
            key = data[8:]
            known = self._known.get(key) if data[:4] == _EXECUTE else None
            if known is not None:
                seq = _seq_of(data, 4)[0]  # msg.message_seq, inlined
            else:
                seq = msg.request_seq(data)  # 0 when not even the fixed part is whole
                try:
                    request = msg.decode_request(data)
                except ValueError as e:
                    raise invalid(f"burst request: {e}") from None
                known = self._remember(key, request)
            request = known[0]
            validated = known[1]  # read once: a freed or replaced slot sets it to None
            if validated is not None and validated[2] is not None and not validated[2].holds():
                validated = None  # a driver buffer allocated or released, or changed: bind again
            if validated is not None:
                # This message ran before on these mappings, none freed since it was read: they stay
                # mapped until this thread releases them, and the Request passed validation (its driver
                # buffers, this client's still, are as they were when it was bound).
                result = self._run(request, validated[1])
            else:
                result = self._execute(request, self._resolve(request, seq, held), known)
            if request.measure_operations:
                reply = msg.BurstResult(
                    seq, ErrorStatus.NONE, result.output_shapes, result.timing, "", result.operation_times
                )
            else:
                done = result
        except HalError as e:
            self.client.refused("burst", e)
            reply = msg.BurstResult(seq, e.status, e.output_shapes, message=e.message)
        except Exception as e:
            error = HalError(ErrorStatus.GENERAL_FAILURE, f"{type(e).__name__}: {e}")
            self.client.driver_raised("burst", e, error)
            reply = msg.BurstResult(seq, error.status, message=error.message)
        finally:
            if held:
                for resource in held:
                    resource.release()
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

    def _remember(self, key: bytes, request: msg.BurstRequest) -> list[Any]:
        """Cache a decoded request message: [the request, (pools, validated Request) of its last run, or
        None]."""
        known: list[Any] = [request, None]
        if len(self._known) >= MAX_KNOWN_MESSAGES:
            del self._known[next(iter(self._known))]
        self._known[key] = known
        return known

    def _resolve(self, request: msg.BurstRequest, seq: int, held: list[Resource]) -> tuple[Any, ...]:
        """The request's pools in order: a token stays a token (its buffer must be this client's:
        another client's is INVALID_ARGUMENT and logged), a slot becomes its cached memory (unknown
        slots are asked for once; a slot's mapping stays until this thread releases it, after the
        execution, see `_release_retired`). Every resource held is appended to `held` for the caller
        to release when the execution ends."""
        # The tokens name this client's buffers (looked up, not held: see buffer_calls.buffers_of).
        buffers_of(self.client, "burst", [v for k, v in request.pools if k == msg.POOL_TOKEN])
        # Asked under this execution's number (a cached request keeps the number of its first run).
        self._fetch_missing(seq, [v for k, v in request.pools if k == msg.POOL_SLOT])
        pools: list[Any] = []
        with self._cond:
            for n, (kind, value) in enumerate(request.pools):
                if kind == msg.POOL_TOKEN:
                    pools.append(value)
                    continue
                resource = self._slots.get(value)
                if resource is None:
                    raise invalid(
                        f"burst request: pool {n} names slot {value}, which the client did not provide"
                    )
                pools.append(resource.value)  # mapped until this thread releases it
        return tuple(pools)

    def _fetch_missing(self, seq: int, slots: list[int]) -> None:
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

    def _execute(self, request: msg.BurstRequest, pools: tuple[Any, ...], known: list[Any]) -> Any:
        entry = self._entry()
        # Driver buffers: the tokens are this client's, looked up once and guarded for the message's
        # later runs (buffer_calls.BufferGuard); slots are compared by identity.
        tokens = [v for k, v in request.pools if k == msg.POOL_TOKEN]
        guard = guard_buffers(self.client, "burst", tokens) if tokens else None
        ident = [None if type(p) is int else p for p in pools] if tokens else pools
        hal_request = Request(request.inputs, request.outputs, pools, request.measure_operations)
        if entry.model is not None:
            if self.client.host.prevalidate:  # else the driver judges it (as `execution_calls`)
                hal_request = bind_buffers(hal_request, entry.prepared, self._buffer)
                validate.validate_request(hal_request, entry.model)
            self._keep_validated(known, request, pools, hal_request, ident, guard)
        return self._run(request, hal_request, entry)

    def _entry(self) -> PreparedEntry:
        """The burst's prepared model, unless the client released it."""
        prepared = self.prepared
        if prepared is None or self._handles.peek(_PREPARED, self.prepared_number) is not prepared:
            raise invalid(f"burst: prepared model {self.prepared_number} was released")
        return prepared.value  # type: ignore[no-any-return]

    def _run(
        self, request: msg.BurstRequest, hal_request: Request, entry: PreparedEntry | None = None
    ) -> Any:
        """Execute a bound, validated request (the prepared model looked up again unless given) within
        the service's execution workers, as every other execution: on this thread (which acts for the
        burst's client) when a worker slot is free (no hand-off), else queued by priority (or started
        at once when it preempts) and waited for.
        """
        if entry is None:
            prepared = self.prepared  # `_entry`, inlined
            if prepared is None or self._handles.peek(_PREPARED, self.prepared_number) is not prepared:
                raise invalid(f"burst: prepared model {self.prepared_number} was released")
            entry = prepared.value
        deadline = request.deadline
        # A service that does not pre-validate leaves a passed deadline to the driver.
        if self.client.host.prevalidate:
            deadlines.check_before(deadline, "burst")
        if self._files:  # a client's file among the slots: read in before, outputs written after
            pending = file_pools_in(hal_request)
            result = self._execute_now(request, hal_request, entry, deadline)
            file_pools_out(pending)
            return result
        return self._execute_now(request, hal_request, entry, deadline)

    def _execute_now(
        self,
        request: msg.BurstRequest,
        hal_request: Request,
        entry: PreparedEntry,
        deadline: TimePoint | None,
    ) -> Any:
        if trace.enabled:
            started = trace.now_ns()
            try:
                return self._execute_in_pool(request, hal_request, entry, deadline)
            finally:
                trace.span(
                    "execute", "service", started, trace.now_ns(), client_pid=self.client.pid, path="burst"
                )
        return self._execute_in_pool(request, hal_request, entry, deadline)

    def _execute_in_pool(
        self,
        request: msg.BurstRequest,
        hal_request: Request,
        entry: PreparedEntry,
        deadline: TimePoint | None,
    ) -> Any:
        pool, app, priority = self._exec_pool, self.client.app, entry.priority
        # On this thread when a worker slot is free (counted at the execution's priority); the listener
        # gives the slot back once the result is written. Otherwise queued, or started at once on an
        # extra thread when it outranks what every worker runs (see execution_calls._inline_slot).
        if pool.try_inline(app, priority):
            self._slot = lambda: pool.end_inline(app, priority)
            return self.executor.execute(hal_request, request.measure, deadline, request.loop_timeout)
        return self._queued(
            self.executor.execute,
            (hal_request, request.measure, deadline, request.loop_timeout),
            entry.priority,
        )

    def _keep_validated(
        self,
        known: list[Any],
        request: msg.BurstRequest,
        pools: tuple[Any, ...],
        hal_request: Request,
        ident: Any,
        guard: BufferGuard | None,
    ) -> None:
        """Remember that `request` passed validation on `pools` (`ident`: the pools with tokens as None;
        its driver buffers as `guard` found them) unless a slot was freed or replaced meanwhile (under
        the lock `_forget` runs under)."""
        with self._cond:
            for (kind, value), pool in zip(request.pools, pools, strict=True):
                resource = self._slots.get(value) if kind == msg.POOL_SLOT else None
                if kind == msg.POOL_SLOT and (resource is None or resource.value is not pool):
                    return
            known[1] = (ident, hal_request, guard)

    def _buffer(self, token: int) -> Any:
        """The buffer behind a token of this client (as on the other execution paths)."""
        resource = self.client.handles.peek(Kind.BUFFER, token)
        if resource is None:
            raise invalid(f"burst: buffer token {token} is not a live buffer of this client")
        return resource.value

    def _queued(self, run: Callable[..., Any], args: tuple[Any, ...], priority: int) -> Any:
        """`run(*args)` on an execution worker, queued by priority among the client's work; waited for."""
        pool = self._exec_pool
        done = threading.Event()
        outcome: list[Any] = []
        client, app = self.client.key, self.client.app

        def work() -> None:
            try:
                # As on every execution path: the driver tells clients apart by these keys.
                with qos.serving_client(client, app):
                    outcome.append((True, run(*args)))
            except BaseException as e:
                outcome.append((False, e))
            finally:
                done.set()

        try:
            pool.submit(work, priority, app)  # apps take turns, as for other executions
        except RuntimeError:
            raise HalError(ErrorStatus.DEVICE_UNAVAILABLE, "burst: the service is stopping") from None
        done.wait()
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

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
