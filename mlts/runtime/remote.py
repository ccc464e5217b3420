"""RemoteDevice: the HAL Device interface spoken to a driver service over its socket.

The service is either private (a process started for this client, the
default) or shared (a service at a socket path that many clients use). All
transport is in `mlts.runtime.connection`; prepared models and their three
execution paths are in `mlts.runtime.remote_prepared`.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from mlts.hal import codec, nnfile
from mlts.hal.enums import DeviceType, ErrorStatus, ExecutionPreference, Priority
from mlts.hal.errors import HalError
from mlts.hal.interface import Device
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import (
    BufferDesc,
    BufferRole,
    CacheFilesNeeded,
    Capabilities,
    Extension,
    Model,
    OptionalTimePoint,
    Request,
)
from mlts.ipc import compact_calls, wire
from mlts.ipc.burst_messages import PoolRef
from mlts.ipc.net.address import is_network
from mlts.runtime import remote_buffer
from mlts.runtime.connection import Endpoint, ServiceConnection, Slot
from mlts.runtime.process import DriverProcess
from mlts.runtime.remote_buffer import RemoteBuffer
from mlts.runtime.remote_prepared import RemotePreparedModel
from mlts.runtime.shared import SharedEndpoint

DEFAULT_QUERY_TIMEOUT = 60.0
DEFAULT_EXECUTE_TIMEOUT = 60.0
DEFAULT_PREPARE_TIMEOUT = 600.0
#: Request pools whose mappings the service keeps; the least recently used beyond this are freed.
MAX_CACHED_MEMORIES = 256
#: Requests whose JSON text is kept for sending again.
MAX_CACHED_REQUESTS = 16


class RemoteDevice(Device):
    """A Device whose driver runs in a service process; thread-safe, several calls may be in flight."""

    def __init__(
        self,
        process: Endpoint,
        *,
        query_timeout: float = DEFAULT_QUERY_TIMEOUT,
        prepare_timeout: float = DEFAULT_PREPARE_TIMEOUT,
        execute_timeout: float = DEFAULT_EXECUTE_TIMEOUT,
    ) -> None:
        #: What is behind the socket: a DriverProcess (private) or a SharedEndpoint.
        self.process: Any = process
        self.name = process.name
        self.shared = isinstance(process, SharedEndpoint)
        self.query_timeout = query_timeout
        self.prepare_timeout = prepare_timeout
        self.execute_timeout = execute_timeout
        self.connection = ServiceConnection(process)
        # id(memory) -> (memory id on the wire, the memory, kept alive so id() stays unique).
        self._memories: OrderedDict[int, tuple[int, SharedMemory]] = OrderedDict()
        self._next_memory_id = 1
        self._wrapped = False  # memory ids went past 2**32 - 1 once: new ones skip those in use
        # Ids of host memory's temporary copies in use (protocol 1.6); used under the send lock.
        self._temporary_ids: set[int] = set()
        # id(request) -> (request, its pool descriptions, its JSON text); used under the send lock.
        self._request_texts: dict[int, tuple[Request, list[dict[str, Any]], bytes]] = {}
        # id(request) -> (request, its pool references, its compact form); used under the send lock.
        # id(request) -> (request, its pool references, its compact template, the pools to check on reuse)
        self._templates: dict[
            int,
            tuple[
                Request, tuple[PoolRef, ...], compact_calls.RequestTemplate, tuple[tuple[Any, PoolRef], ...]
            ],
        ] = {}
        hello = getattr(process, "hello", None)
        #: Whether executions travel as compact calls (the service speaks protocol 1.4 or later): with a
        #: 1.4 or 1.5 service those whose pools it has all mapped, the others as JSON.
        self.compact_calls = _speaks_compact(hello)
        #: Whether every execution travels as a compact call (protocol 1.6): new pools and host memory's
        #: temporary copies are mapped by a mapMemories call sent just before it.
        self.binary_calls = _speaks_compact(hello, wire.BINARY_MINOR)
        self._closed = False
        self._close_lock = threading.Lock()

    @classmethod
    def start(
        cls,
        spec: str,
        *,
        name: str | None = None,
        options: Mapping[str, str] | None = None,
        log_path: str | None = None,
        env: Mapping[str, str] | None = None,
        **timeouts: float,
    ) -> RemoteDevice:
        """Spawn a private driver service for factory `spec` (with extra environment `env`) and connect."""
        return cls(
            DriverProcess.start(spec, options=options, name=name, log_path=log_path, env=env), **timeouts
        )

    @classmethod
    def connect(cls, path: str, **timeouts: float) -> RemoteDevice:
        """Connect to the shared driver service listening at socket `path`, or at network address
        `tcp://HOST:PORT[?...]` (mlts.runtime.network)."""
        if is_network(path):
            from mlts.runtime.network import NetworkEndpoint

            return cls(NetworkEndpoint.connect(path), **timeouts)
        return cls(SharedEndpoint.connect(path), **timeouts)

    # ------------------------------------------------------------ transport

    @property
    def driver_died(self) -> bool:
        """True once the driver's end went away by itself (it died or hung up), not because this side stopped it."""
        return self.connection.driver_died

    @property
    def dead(self) -> HalError | None:
        """The error every call now fails with, or None while the driver is usable."""
        return self.connection.dead

    def unpack_reply(self, method: str, message: dict[str, Any]) -> dict[str, Any]:
        """The result of a reply to `method`, or the HalError the reply reports."""
        if message.get("ok") is True and isinstance(message.get("result"), dict):
            return message["result"]
        raise error_from_dict(self.name, method, message.get("error"))

    def call(
        self,
        method: str,
        args: dict[str, Any] | None = None,
        fds: Sequence[int] = (),
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one call and wait for its reply's result; HalError on any failure."""
        limit = self.query_timeout if timeout is None else timeout
        return self.unpack_reply(method, self.connection.call(method, args or {}, fds, limit))

    def decode(self, method: str, fn: Any, *args: Any) -> Any:
        """`fn(*args)`, the decoding of a `method` result: a malformed one is this driver's GENERAL_FAILURE."""
        try:
            return fn(*args)
        except (TypeError, KeyError, ValueError, HalError) as e:
            raise HalError(
                ErrorStatus.GENERAL_FAILURE, f"driver {self.name!r} sent a malformed {method} result: {e}"
            ) from None

    def service_status(self, *, timeout: float | None = None) -> dict[str, Any]:
        """The service's own report: its clients (of this user), their handles and calls in flight."""
        return self.call("serviceStatus", timeout=timeout)

    # ------------------------------------------------------------ queries

    def ping(self, *, timeout: float | None = None) -> float:
        """Round-trip time of an empty call, in seconds."""
        t0 = time.perf_counter()
        self.call("ping", timeout=timeout)
        return time.perf_counter() - t0

    def getCapabilities(self, *, timeout: float | None = None) -> Capabilities:
        result = self.call("getCapabilities", timeout=timeout)
        return self.decode("getCapabilities", lambda: codec.capabilities_from_dict(result["capabilities"]))

    def getType(self, *, timeout: float | None = None) -> DeviceType:
        result = self.call("getType", timeout=timeout)
        return self.decode("getType", lambda: DeviceType(result["type"]))

    def getVersionString(self, *, timeout: float | None = None) -> str:
        result = self.call("getVersionString", timeout=timeout)
        return self.decode("getVersionString", lambda: _typed(result["version"], str))

    def getSupportedExtensions(self, *, timeout: float | None = None) -> tuple[Extension, ...]:
        result = self.call("getSupportedExtensions", timeout=timeout)
        return self.decode(
            "getSupportedExtensions",
            lambda: tuple(codec.extension_from_dict(e) for e in _typed(result["extensions"], list)),
        )

    def getNumberOfCacheFilesNeeded(self, *, timeout: float | None = None) -> CacheFilesNeeded:
        result = self.call("getNumberOfCacheFilesNeeded", timeout=timeout)
        return self.decode(
            "getNumberOfCacheFilesNeeded",
            lambda: CacheFilesNeeded(
                _typed(result["num_model_cache"], int), _typed(result["num_data_cache"], int)
            ),
        )

    def getSupportedOperations(self, model: Model, *, timeout: float | None = None) -> tuple[bool, ...]:
        memory = _ship_model(model)
        try:
            result = self.call(
                "getSupportedOperations",
                {"model": {"fd": 0, "size": memory.size}},
                [memory.fd],
                timeout=timeout,
            )
        finally:
            memory.close()
        supported = self.decode("getSupportedOperations", lambda: _typed(result["supported"], list))
        if len(supported) != len(model.main.operations) or not all(isinstance(s, bool) for s in supported):
            raise HalError(
                ErrorStatus.GENERAL_FAILURE,
                f"driver {self.name!r} answered getSupportedOperations with {len(supported)} entries "
                f"for {len(model.main.operations)} operations",
            )
        return tuple(supported)

    # ------------------------------------------------------------ preparation

    def prepareModel(
        self,
        model: Model,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        deadline: OptionalTimePoint = None,
        model_cache: Sequence[int] = (),
        data_cache: Sequence[int] = (),
        token: bytes = b"",
        *,
        timeout: float | None = None,
    ) -> RemotePreparedModel:
        _check_fd_count("prepareModel", 1 + len(model_cache) + len(data_cache))
        memory = _ship_model(model)
        fds = [memory.fd, *model_cache, *data_cache]
        args = {
            "model": {"fd": 0, "size": memory.size},
            "preference": int(preference),
            "priority": int(priority),
            "deadline": deadline,
            "model_cache": list(range(1, 1 + len(model_cache))),
            "data_cache": list(range(1 + len(model_cache), len(fds))),
            "token": bytes(token).hex(),
        }
        try:
            result = self.call(
                "prepareModel", args, fds, timeout=self.prepare_timeout if timeout is None else timeout
            )
        finally:
            memory.close()
        return RemotePreparedModel(
            self, self.decode("prepareModel", lambda: _typed(result["prepared"], int)), int(priority)
        )

    def prepareModelFromCache(
        self,
        model_cache: Sequence[int],
        data_cache: Sequence[int],
        token: bytes,
        deadline: OptionalTimePoint = None,
        *,
        timeout: float | None = None,
    ) -> RemotePreparedModel:
        fds = [*model_cache, *data_cache]
        _check_fd_count("prepareModelFromCache", len(fds))
        args = {
            "model_cache": list(range(len(model_cache))),
            "data_cache": list(range(len(model_cache), len(fds))),
            "token": bytes(token).hex(),
            "deadline": deadline,
        }
        result = self.call(
            "prepareModelFromCache", args, fds, timeout=self.prepare_timeout if timeout is None else timeout
        )
        return RemotePreparedModel(
            self, self.decode("prepareModelFromCache", lambda: _typed(result["prepared"], int))
        )

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: Sequence[Any],
        input_roles: Sequence[BufferRole],
        output_roles: Sequence[BufferRole],
    ) -> RemoteBuffer:
        """A driver-managed buffer for roles of this device's prepared models (memory domains)."""
        return remote_buffer.allocate(self, desc, prepared_models, input_roles, output_roles)

    # ------------------------------------------------------------ execution

    def _describe_pools(
        self, request: Request
    ) -> tuple[
        list[dict[str, Any]],
        list[int],
        list[tuple[HostMemory, SharedMemory]],
        list[tuple[int, int, SharedMemory]],
    ]:
        """Wire descriptions of the request's pools, the fds to send, host copies and new cache entries."""
        descs: list[dict[str, Any]] = []
        fds: list[int] = []
        copies: list[tuple[HostMemory, SharedMemory]] = []
        new: dict[int, tuple[int, SharedMemory]] = {}
        try:
            for n, pool in enumerate(request.pools):
                pool = self._pool_of(n, pool)
                if isinstance(pool, int):
                    descs.append({"token": pool})
                elif isinstance(pool, SharedMemory):
                    entry = self._memories.get(id(pool)) or new.get(id(pool))
                    if entry is not None and entry[1] is pool:
                        descs.append({"memory": entry[0]})
                        if id(pool) in self._memories:
                            self._memories.move_to_end(id(pool))
                        continue
                    mem_id = self._new_memory_id(new)
                    new[id(pool)] = (mem_id, pool)
                    descs.append({"memory": mem_id, "fd": len(fds), "size": pool.size})
                    fds.append(pool.fd)
                else:
                    # Host memory cannot cross processes: lend the driver a shared copy for this call.
                    shared = _host_copy(pool, copies)
                    descs.append({"fd": len(fds), "size": pool.size})
                    fds.append(shared.fd)
            _check_new_pools(len(fds))
        except BaseException:
            for _, shared in copies:
                shared.close()
            raise
        return descs, fds, copies, [(key, mid, mem) for key, (mid, mem) in new.items()]

    def _request_text(self, request: Request, descs: list[dict[str, Any]]) -> bytes:
        """The JSON text of `request` with pool descriptions `descs` (made once per request object)."""
        known = self._request_texts.get(id(request))
        if known is not None and known[0] is request and known[1] == descs:
            return known[2]
        text = wire.dumps(codec.request_to_dict(request, descs))
        if len(self._request_texts) >= MAX_CACHED_REQUESTS:
            del self._request_texts[next(iter(self._request_texts))]
        self._request_texts[id(request)] = (request, descs, text)
        return text

    def _compact_refs(self, request: Request) -> tuple[PoolRef, ...] | None:
        """The request's pools as compact references, or None when one is not a cached memory or a
        live buffer (that call takes the JSON path, which maps and caches new pools)."""
        refs = []
        for pool in request.pools:
            if isinstance(pool, SharedMemory):
                entry = self._memories.get(id(pool))
                if entry is None or entry[1] is not pool or entry[0] > compact_calls.MAX_U32 or pool.fd < 0:
                    return None
                self._memories.move_to_end(id(pool))
                refs.append(PoolRef.slot(entry[0]))
                continue
            if isinstance(pool, RemoteBuffer):
                if pool.device is not self or pool.closed:
                    return None  # the JSON path says what is wrong
                pool = pool.token
            if isinstance(pool, int) and not isinstance(pool, bool) and 0 < pool <= compact_calls.MAX_U32:
                refs.append(PoolRef.token(pool))
                continue
            return None
        return tuple(refs)

    def _refs_hold(self, checks: tuple[tuple[Any, PoolRef], ...]) -> bool:
        """Whether the pools of a cached template (those that are not plain tokens: a token stays what it
        is) still have the references it was made with: what `_compact_refs` would give them now."""
        for pool, ref in checks:
            if isinstance(pool, SharedMemory):
                entry = self._memories.get(id(pool))
                if entry is None or entry[1] is not pool or entry[0] != ref.value or pool.fd < 0:
                    return False
                self._memories.move_to_end(id(pool))
            elif pool.device is not self or pool.closed or pool.token != ref.value:  # a RemoteBuffer
                return False
        return True

    def _compact_template(self, request: Request) -> compact_calls.RequestTemplate | None:
        """The compact form of `request` (made once per request object), or None for the JSON path."""
        known = self._templates.get(id(request))
        if known is not None and known[0] is request and self._refs_hold(known[3]):
            return known[2]
        refs = self._compact_refs(request)
        if refs is None:
            return None
        try:
            made = compact_calls.template(request, refs)
        except (ValueError, OverflowError, struct.error):
            return None  # a field beyond the compact format's range
        if len(self._templates) >= MAX_CACHED_REQUESTS:
            del self._templates[next(iter(self._templates))]
        checks = tuple((p, r) for p, r in zip(request.pools, refs, strict=True) if type(p) is not int)
        self._templates[id(request)] = (request, refs, made, checks)
        return made

    def _send_compact(
        self,
        method: str,
        args: dict[str, Any],
        request: Request,
        fds: Sequence[int],
        timeout: float,
        on_notify: Any,
    ) -> Slot | None:
        """Send the execution as a compact call when it can be one; None otherwise. Send lock held."""
        deadline, loop, after = args["deadline"], args["loop_timeout"], args.get("timeout_after_fence")
        if not (compact_calls.fits(deadline) and compact_calls.fits(loop) and compact_calls.fits(after)):
            return None
        made = self._compact_template(request)
        if made is None:
            return None
        code = _COMPACT_METHODS[method]
        prepared, measure = args["prepared"], args["measure"]
        return self.connection.send_compact(
            method,
            lambda call_id: made.call(code, call_id, prepared, measure, deadline, loop, after),
            fds,
            timeout,
            on_notify,
        )

    def send_sync_compact(
        self,
        prepared: int,
        measure: int,
        deadline: int | None,
        loop_timeout: int | None,
        request: Request,
        timeout: float,
    ) -> Slot | None:
        """`send_execution` of an executeSynchronously without fds when it can be a compact call (the
        arguments as they are, no dictionary); None when it cannot (the caller then uses send_execution)."""
        if not self.compact_calls or not (
            (deadline is None or 0 <= deadline <= _MAX_I64)
            and (loop_timeout is None or 0 <= loop_timeout <= _MAX_I64)
        ):
            return None
        conn = self.connection
        with conn.send_lock:
            # (`send_call` checks that the connection is usable, under this lock.)
            # `_compact_template`'s usual case inlined: the template of this very request, on one
            # memory still cached under the slot it was made with.
            known = self._templates.get(id(request))
            made = None
            if known is not None and known[0] is request and len(known[3]) == 1:
                pool, ref = known[3][0]
                if type(pool) is SharedMemory and pool.fd >= 0:
                    entry = self._memories.get(id(pool))
                    if entry is not None and entry[1] is pool and entry[0] == ref.value:
                        self._memories.move_to_end(id(pool))
                        made = known[2]
            if made is None:
                made = self._compact_template(request)
                if made is None:
                    return None
            return conn.send_call(
                "executeSynchronously", made, _SYNC_CODE, prepared, measure, deadline, loop_timeout, timeout
            )

    def send_execution(
        self,
        method: str,
        args: dict[str, Any],
        request: Request,
        fds: Sequence[int],
        timeout: float,
        on_notify: Any = None,
    ) -> tuple[Slot, list[tuple[HostMemory, SharedMemory]]]:
        """Describe the request's pools and send the call, atomically (pool ids reach the service in order).

        With a service of protocol 1.4, a request whose pools the service has all cached travels as a
        compact call (mlts.ipc.compact_calls); its answer then holds the compact body ("compact").
        """
        conn = self.connection
        with conn.send_lock:
            conn.check_usable()
            if self.binary_calls and self.compact_calls:
                return self._send_binary(method, args, request, fds, timeout, on_notify)
            if self.compact_calls:
                slot = self._send_compact(method, args, request, fds, timeout, on_notify)
                if slot is not None:
                    return slot, []
            descs, pool_fds, copies, new = self._describe_pools(request)
            try:
                if len(fds) + len(pool_fds) > wire.MAX_FDS:
                    raise HalError(
                        ErrorStatus.INVALID_ARGUMENT,
                        f"{method}: {len(fds) + len(pool_fds)} fds do not fit in one call (at most {wire.MAX_FDS})",
                    )
                # The call's own fds (fences) come first; pool references count from after them.
                for desc in descs:
                    if "fd" in desc:
                        desc["fd"] += len(fds)
                encoded = None
                if pool_fds:
                    args = {**args, "request": codec.request_to_dict(request, descs)}
                else:
                    # No new pool: the request's text is the same as last time, made once.
                    encoded = {"request": self._request_text(request, descs)}
                # The service maps new pools before it checks anything else, so they count as cached now.
                for key, mem_id, memory in new:
                    self._memories[key] = (mem_id, memory)
                slot = conn.send(method, args, [*fds, *pool_fds], timeout, on_notify, encoded)
                victims = self._evict_locked()
            except BaseException:
                for _, shared in copies:
                    shared.close()
                raise
        if victims:
            try:
                self.call("freeMemory", {"ids": victims})
            except HalError:
                pass
        return slot, copies

    def _new_memory_id(self, taken: Mapping[int, tuple[int, Any]] = {}) -> int:
        """A memory id in [1, 2**32) that no cached pool, temporary copy or pool of `taken` has (ids
        count up and wrap round: they stay within the compact calls' u32). Send lock held."""
        mem_id = self._next_memory_id
        if mem_id > compact_calls.MAX_U32:
            mem_id = 1
        if self._next_memory_id > compact_calls.MAX_U32 or self._wrapped:
            self._wrapped = True
            used = {entry[0] for entry in self._memories.values()} | self._temporary_ids
            used.update(entry[0] for entry in taken.values())
            while mem_id in used:
                mem_id = 1 if mem_id >= compact_calls.MAX_U32 else mem_id + 1
        self._next_memory_id = mem_id + 1
        return mem_id

    def _send_binary(
        self,
        method: str,
        args: dict[str, Any],
        request: Request,
        fds: Sequence[int],
        timeout: float,
        on_notify: Any,
    ) -> tuple[Slot, list[tuple[HostMemory, SharedMemory]]]:
        """Send the execution as a compact call (protocol 1.6); pools the service has not mapped (new
        SharedMemory pools, host memory's temporary shared copies) go first, in one mapMemories call.
        The returned slot's `after` (a `_Mapped`) says what `settle` and `release_temporaries` check and
        free once the answer is in. Send lock held."""
        deadline = compact_calls.call_ns(method, "deadline", args["deadline"])
        loop = compact_calls.call_ns(method, "loop_timeout", args["loop_timeout"])
        after = compact_calls.call_ns(method, "timeout_after_fence", args.get("timeout_after_fence"))
        code = _COMPACT_METHODS[method]
        prepared, measure = args["prepared"], args["measure"]
        made = self._compact_template(request)
        mapped: _Mapped | None = None
        copies: list[tuple[HostMemory, SharedMemory]] = []
        if made is None:
            mapped, copies, refs = self._map_pools(method, request)
            try:
                made = self._compact_template(request) if not copies else None
                if made is None:
                    made = compact_calls.template(request, refs)
            except (ValueError, OverflowError, struct.error):
                self._unmap(mapped, copies)
                raise compact_calls.encoding_error(method, request) from None
            except BaseException:
                self._unmap(mapped, copies)
                raise
            conn = self.connection
            try:
                if not mapped.entries:  # (every pool cached: `made` stood for a value beyond the format)
                    raise compact_calls.encoding_error(method, request)
                memories = [
                    {"memory": mem_id, "fd": n, "size": memory.size}
                    for n, (_, mem_id, memory) in enumerate(mapped.entries)
                ]
                mapped.call = conn.send(
                    "mapMemories", {"memories": memories}, [m.fd for _, _, m in mapped.entries], timeout
                )
            except BaseException:
                self._unmap(mapped, copies)
                raise
        try:
            slot = self.connection.send_compact(
                method,
                lambda call_id: made.call(code, call_id, prepared, measure, deadline, loop, after),
                fds,
                timeout,
                on_notify,
            )
        except BaseException:
            # The pools went to the service (or the connection is dead): the temporary ones are freed.
            self.release_temporaries(mapped)
            for _, shared in copies:
                shared.close()
            raise
        slot.after = mapped
        if len(self._memories) > MAX_CACHED_MEMORIES:
            # The least recently used pools beyond the cache's size (never this call's: it just used
            # them), freed after the call that was just sent, with no wait for the answer.
            self.connection.send("freeMemory", {"ids": self._evict_locked()}, (), timeout)
        return slot, copies

    def _pool_of(self, n: int, pool: object) -> int | SharedMemory | HostMemory:
        """Request pool `n` as it travels: a buffer token (int) for a live RemoteBuffer of this driver or a
        token, else the open SharedMemory or the HostMemory itself; INVALID_ARGUMENT otherwise."""
        if isinstance(pool, RemoteBuffer):
            if pool.device is not self or pool.closed:
                raise HalError(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"request pool {n} ({pool!r}) is not a live buffer of driver {self.name!r}",
                )
            return pool.token
        if isinstance(pool, int) and not isinstance(pool, bool):
            return int(pool)
        if isinstance(pool, SharedMemory):
            if pool.fd < 0:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"request pool {n} ({pool!r}) is closed")
            return pool
        if isinstance(pool, HostMemory):
            return pool
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT,
            f"request pool {n} is a {type(pool).__name__}; expected SharedMemory, HostMemory, a RemoteBuffer or a buffer token",
        )

    def _map_pools(
        self, method: str, request: Request
    ) -> tuple[_Mapped, list[tuple[HostMemory, SharedMemory]], tuple[PoolRef, ...]]:
        """Ids for the request's pools the service has not mapped, registered as cached (SharedMemory)
        or temporary (host memory's shared copies, with its bytes): what a mapMemories call maps, the
        copies, and every pool's reference. Send lock held."""
        mapped = _Mapped()
        copies: list[tuple[HostMemory, SharedMemory]] = []
        refs: list[PoolRef] = []
        new: dict[int, tuple[int, SharedMemory]] = {}
        try:
            for n, pool in enumerate(request.pools):
                pool = self._pool_of(n, pool)
                if isinstance(pool, int):
                    if not 0 < pool <= compact_calls.MAX_U32:
                        raise HalError(
                            ErrorStatus.INVALID_ARGUMENT,
                            f"{method}: request pool {n} is buffer token {pool}; valid tokens are in "
                            f"[1, {compact_calls.MAX_U32}]",
                        )
                    refs.append(PoolRef.token(pool))
                elif isinstance(pool, SharedMemory):
                    entry = self._memories.get(id(pool)) or new.get(id(pool))
                    if entry is None or entry[1] is not pool:
                        entry = new[id(pool)] = (self._new_memory_id(new), pool)
                        mapped.entries.append((id(pool), entry[0], pool))
                    elif id(pool) in self._memories:
                        self._memories.move_to_end(id(pool))
                    refs.append(PoolRef.slot(entry[0]))
                else:
                    # Host memory cannot cross processes: a shared copy, mapped for this call only.
                    shared = _host_copy(pool, copies)
                    mem_id = self._new_memory_id(new)
                    self._temporary_ids.add(mem_id)
                    mapped.temporary.append(mem_id)
                    mapped.entries.append((0, mem_id, shared))
                    refs.append(PoolRef.slot(mem_id))
            _check_new_pools(len(mapped.entries))
        except BaseException:
            self._unmap(mapped, copies)
            raise
        # The service maps them before it reads the execution call: cached from now on.
        for key, mem_id, memory in mapped.entries:
            if key:
                self._memories[key] = (mem_id, memory)
        return mapped, copies, tuple(refs)

    def _unmap(self, mapped: _Mapped, copies: list[tuple[HostMemory, SharedMemory]]) -> None:
        """Undo `_map_pools` before anything was sent. Send lock held."""
        for key, mem_id, memory in mapped.entries:
            entry = self._memories.get(key) if key else None
            if entry is not None and entry[0] == mem_id and entry[1] is memory:
                del self._memories[key]
        self._temporary_ids.difference_update(mapped.temporary)
        mapped.temporary = []
        for _, shared in copies:
            shared.close()

    def settle(self, slot: Slot) -> None:
        """After the answer of an execution sent by `_send_binary`: raise the error of the mapMemories
        call that went before it, if that failed (the service then mapped none of its pools: they are
        dropped from the cache here too, and the execution's own error, "has not mapped", is only its
        consequence)."""
        mapped = slot.after
        if mapped is None or mapped.call is None:
            return
        call, mapped.call = mapped.call, None
        # Answered before the execution (the service answers a connection's calls in order).
        reply = call.reply if call.reply is not None else self.connection.wait_reply(call, self.query_timeout)
        if reply.get("ok") is True:
            return
        with self.connection.send_lock:
            for key, mem_id, memory in mapped.entries:
                entry = self._memories.get(key) if key else None
                if entry is not None and entry[0] == mem_id and entry[1] is memory:
                    del self._memories[key]
            self._temporary_ids.difference_update(mapped.temporary)
            mapped.temporary = []
        raise error_from_dict(self.name, "mapMemories", reply.get("error"))

    def release_temporaries(self, mapped: _Mapped | None) -> None:
        """Free the temporary ids of host memory's copies (after their execution ended): a freeMemory
        call whose answer nobody waits for."""
        if mapped is None or not mapped.temporary:
            return
        conn = self.connection
        with conn.send_lock:
            ids, mapped.temporary = mapped.temporary, []
            self._temporary_ids.difference_update(ids)
            if conn.dead is None:
                try:
                    conn.send("freeMemory", {"ids": ids}, (), self.query_timeout)
                except HalError:
                    pass  # a dead driver holds no mappings any more

    def _evict_locked(self) -> list[int]:
        excess = len(self._memories) - MAX_CACHED_MEMORIES
        return [self._memories.popitem(last=False)[1][0] for _ in range(max(0, excess))]

    def freeMemory(self, memories: Sequence[SharedMemory], *, timeout: float | None = None) -> None:
        """Tell the driver to drop its mappings of `memories` (call before closing pools you reuse ids of)."""
        with self.connection.send_lock:
            ids = [self._memories.pop(id(m))[0] for m in memories if id(m) in self._memories]
        if ids and self.connection.dead is None:
            self.call("freeMemory", {"ids": ids}, timeout=timeout)

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Disconnect; a private driver process is stopped (it closes its Device first). Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self.connection.dead is None:
            self.connection.close(f"driver {self.name!r} was closed")
        with self.connection.send_lock:
            self._memories.clear()
            self._request_texts.clear()
            self._templates.clear()
        self.process.stop()

    def __enter__(self) -> RemoteDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "shared" if self.shared else "private"
        return f"RemoteDevice({self.name!r}, pid={self.process.pid}, {kind})"


def error_from_dict(name: str, method: str, error: Any) -> HalError:
    """The HalError an error object of a reply or notify stands for (GENERAL_FAILURE when malformed)."""
    try:
        status = ErrorStatus(error["status"])
        text = error["message"]
        if not isinstance(text, str) or status == ErrorStatus.NONE:
            raise ValueError("bad message or status")
        shapes = tuple(
            codec.output_shape_from_dict(s, f"error.output_shapes[{i}]")
            for i, s in enumerate(error.get("output_shapes", []))
        )
    except (TypeError, KeyError, ValueError, HalError) as e:
        return HalError(
            ErrorStatus.GENERAL_FAILURE, f"driver {name!r} sent a malformed reply to {method}: {e}"
        )
    return HalError(status, text, shapes)


_MAX_I64 = (1 << 63) - 1  # what compact_calls.fits allows
_SYNC_CODE = compact_calls.SYNC
_COMPACT_METHODS = {
    "executeSynchronously": compact_calls.SYNC,
    "execute": compact_calls.ASYNC,
    "executeFenced": compact_calls.FENCED,
}


class _Mapped:
    """The pools a mapMemories call mapped for one execution (protocol 1.6): (cache key or 0 for a
    temporary copy, memory id, memory), the call, and the temporary ids to free after the execution."""

    __slots__ = ("call", "entries", "temporary")

    def __init__(self) -> None:
        self.entries: list[tuple[int, int, SharedMemory]] = []
        self.call: Slot | None = None
        self.temporary: list[int] = []


def _speaks_compact(hello: Any, minor: int = wire.COMPACT_MINOR) -> bool:
    """Whether a service's hello announces protocol 1.`minor` or later (by default 1.4: compact
    execution calls; 1.6: mapMemories, every execution binary)."""
    protocol = hello.get("protocol") if isinstance(hello, dict) else None
    return (
        isinstance(protocol, list)
        and len(protocol) == 2
        and protocol[0] == wire.PROTOCOL_VERSION[0]
        and type(protocol[1]) is int
        and protocol[1] >= minor
    )


def _typed(value: Any, kind: type) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _host_copy(pool: HostMemory, copies: list[tuple[HostMemory, SharedMemory]]) -> SharedMemory:
    """A shared copy of host memory for one call (host memory cannot cross processes), noted in `copies`."""
    shared = SharedMemory.create(pool.size, "mlts-host-copy")
    copies.append((pool, shared))
    if pool.size:
        shared.buffer[:] = pool.buffer
    return shared


def _check_new_pools(count: int) -> None:
    """One call maps at most wire.MAX_FDS new pools."""
    if count > wire.MAX_FDS:
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT,
            f"request brings {count} new memory pools; at most {wire.MAX_FDS} fit in one call "
            "(reuse pools or run a smaller request first)",
        )


def _check_fd_count(method: str, count: int) -> None:
    """One call carries at most wire.MAX_FDS fds (the model's, then the cache files)."""
    if count > wire.MAX_FDS:
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT,
            f"{method}: {count} fds do not fit in one call (at most {wire.MAX_FDS}); use fewer cache files",
        )


def _ship_model(model: Model) -> SharedMemory:
    """The model as .nnm bytes in a fresh, sealed shared memory pool."""
    # Sealed against writing: the driver runs exactly the constants it validated.
    return SharedMemory.frozen(nnfile.encode(model), "mlts-model")
