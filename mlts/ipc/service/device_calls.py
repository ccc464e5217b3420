"""Handlers of the Device methods: queries, model preparation and the service status."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mlts.hal import codec, nnfile, trace, validate
from mlts.hal.enums import ExecutionPreference, Priority
from mlts.hal.errors import HalError, invalid
from mlts.hal.interface import PreparedModel
from mlts.hal.memory import SEALS_FROZEN, SEALS_POOL, SharedMemory, receive_pool
from mlts.hal.types import MAX_NUMBER_OF_CACHE_FILES, Model
from mlts.ipc import wire
from mlts.ipc.service.args import arg, cache_token, code_value, int_list, opt_deadline, type_name
from mlts.ipc.service.client import Call, Client, Handler
from mlts.ipc.service.handles import Kind, Resource
from mlts.ipc.service.request_cache import RequestCache


@dataclass
class PreparedEntry:
    """A prepared model of a client, with the model it was prepared from (None: from cache)."""

    prepared: PreparedModel
    model: Model | None
    model_memory: SharedMemory | None
    priority: int
    #: Requests of this model already decoded and validated (mlts.ipc.service.request_cache).
    requests: RequestCache = field(default_factory=RequestCache)


def close_memory(memory: SharedMemory | None) -> None:
    if memory is None:
        return
    try:
        memory.close()
    except (BufferError, OSError):
        # Something still views the mapping; the fd is gone, the map goes with the GC.
        pass


def map_memory(call: Call, ref: object, what: str, seals: int = SEALS_POOL) -> SharedMemory:
    """Map a {"fd": i, "size": n} reference carrying `seals`; the caller owns the result."""
    if not isinstance(ref, dict):
        raise invalid(f"{call.method}: {what} must be an object with 'fd' and 'size', got {type_name(ref)}")
    size = arg(ref, f"{call.method} {what}", "size", int)
    fd = call.take_fd(ref.get("fd"), what)
    if seals == SEALS_POOL:  # a request pool: a sealed memfd, or a client's file (mmap_fd)
        return receive_pool(fd, size, what=f"{call.method}: {what}")
    return SharedMemory.from_fd(fd, size, seals=seals, what=f"{call.method}: {what}")


def _map_model(client: Client, call: Call) -> SharedMemory:
    """Map the call's model file. Its bytes count against the client's mapped-memory budget until the
    caller calls `_unload` (or a prepared model holding the mapping is released). Mapping is cheap:
    decoding it is preparation work (`_decode_model`)."""
    ref = arg(call.args, call.method, "model", dict)
    size = ref.get("size")
    charged = size if type(size) is int and size > 0 else 0
    client.handles.reserve_bytes(charged, call.method)
    try:
        return map_memory(call, ref, "model", SEALS_FROZEN)
    except BaseException:
        client.handles.release_bytes(charged)
        raise


def _decode_model(client: Client, method: str, memory: SharedMemory) -> Model:
    """Decode and (unless the service does not pre-validate) validate a mapped model, and check the
    client may use its extensions.

    Runs on the preparation pool, below the executions (decoding and validating a large model is as
    much interpreter work as compiling it); the caller's cleanup unloads `memory`.
    """
    try:
        model = nnfile.decode(memory.buffer).model
        if client.host.prevalidate:
            validate.validate_model(model)
    except ValueError as e:
        raise invalid(f"{method}: model: {e}") from None
    client.host.allowlist_check(client, model, method)
    return model


def _unload(client: Client, memory: SharedMemory | None) -> None:
    """Unmap a model mapped by `_map_model` and give its bytes back to the client's budget."""
    if memory is None:
        return
    size = memory.size
    close_memory(memory)
    client.handles.release_bytes(size)


def _cache_fds(call: Call) -> tuple[list[int], list[int]]:
    """The call's model and data cache fds; when an argument is bad, the ones already taken are closed."""
    taken: list[int] = []
    counts = []
    try:
        for key in ("model_cache", "data_cache"):
            indexes = int_list(call.args, call.method, key, MAX_NUMBER_OF_CACHE_FILES)
            for n, i in enumerate(indexes):
                taken.append(call.take_fd(i, f"{key}[{n}]"))
            counts.append(len(indexes))
    except BaseException:
        wire.close_fds(taken)
        raise
    return taken[: counts[0]], taken[counts[0] :]


def _register(client: Client, call: Call, entry: PreparedEntry) -> dict[str, Any]:
    def close() -> None:
        try:
            entry.prepared.close()
        finally:
            _unload(client, entry.model_memory)

    try:
        handle = client.handles.add(Kind.PREPARED, Resource(entry, close), call.method)
    except HalError:
        close()
        raise
    client.prepared_at(entry.priority)
    return {"prepared": handle}


# ------------------------------------------------------------ queries


def ping(client: Client, call: Call) -> dict[str, Any]:
    return {"pid": os.getpid()}


def get_capabilities(client: Client, call: Call) -> dict[str, Any]:
    return {"capabilities": codec.capabilities_to_dict(client.host.device.getCapabilities())}


def get_type(client: Client, call: Call) -> dict[str, Any]:
    return {"type": int(client.host.device.getType())}


def get_version_string(client: Client, call: Call) -> dict[str, Any]:
    return {"version": str(client.host.device.getVersionString())}


def get_supported_extensions(client: Client, call: Call) -> dict[str, Any]:
    return {"extensions": [codec.extension_to_dict(e) for e in client.host.device.getSupportedExtensions()]}


def get_number_of_cache_files_needed(client: Client, call: Call) -> dict[str, Any]:
    needed = client.host.device.getNumberOfCacheFilesNeeded()
    return {"num_model_cache": int(needed.num_model_cache), "num_data_cache": int(needed.num_data_cache)}


def get_supported_operations(client: Client, call: Call) -> dict[str, Any]:
    memory = _map_model(client, call)

    def work() -> dict[str, Any]:
        with client.host.give_way.held():
            model = _decode_model(client, call.method, memory)
            supported = client.host.device.getSupportedOperations(model)
        return {"supported": [bool(s) for s in supported]}

    return client.defer(client.host.prepare_pool, call, work, lambda: _unload(client, memory))


def service_status(client: Client, call: Call) -> dict[str, Any]:
    """The service's clients and work; clients of another user are counted, not described."""
    return client.host.status(client)


# ------------------------------------------------------------ preparation


def prepare_model(client: Client, call: Call) -> dict[str, Any]:
    m = call.method
    client.handles.check_room(Kind.PREPARED, m)
    # Without pre-validation the codes reach the driver as they came (its own checks answer).
    checked = client.host.prevalidate
    preference = code_value(
        ExecutionPreference, m, "preference", arg(call.args, m, "preference", int, 1), checked
    )
    priority = code_value(Priority, m, "priority", arg(call.args, m, "priority", int, 1), checked)
    deadline = opt_deadline(call.args, m, "deadline")
    token = cache_token(call.args, m)
    model_cache, data_cache = _cache_fds(call)
    try:
        memory = _map_model(client, call)
    except BaseException:
        wire.close_fds(model_cache + data_cache)
        raise
    kept: list[SharedMemory | None] = [memory]

    def work() -> dict[str, Any]:
        with client.host.give_way.held():
            model = _decode_model(client, m, memory)
            started = trace.now_ns()
            try:
                with client.host.give_way.in_the_driver():
                    prepared = client.host.device.prepareModel(
                        model, preference, priority, deadline, tuple(model_cache), tuple(data_cache), token
                    )
            finally:
                trace.span("prepareModel", "service", started, trace.now_ns(), client_pid=client.pid)
        kept[0] = None  # the prepared model keeps the mapping from now on
        # The driver's own word on the priority it honours orders this model's queued executions.
        honoured = int(getattr(prepared, "priority", priority))
        return _register(client, call, PreparedEntry(prepared, model, memory, honoured))

    def cleanup() -> None:
        # Cache files are lent for the duration of the call (a driver keeps dups if it must).
        wire.close_fds(model_cache + data_cache)
        _unload(client, kept[0])

    return client.defer(client.host.prepare_pool, call, work, cleanup)


def prepare_model_from_cache(client: Client, call: Call) -> dict[str, Any]:
    m = call.method
    client.handles.check_room(Kind.PREPARED, m)
    deadline = opt_deadline(call.args, m, "deadline")
    token = cache_token(call.args, m)
    model_cache, data_cache = _cache_fds(call)

    def work() -> dict[str, Any]:
        with client.host.give_way.held(), client.host.give_way.in_the_driver():
            prepared = client.host.device.prepareModelFromCache(
                tuple(model_cache), tuple(data_cache), token, deadline
            )
        priority = int(getattr(prepared, "priority", Priority.MEDIUM))
        return _register(client, call, PreparedEntry(prepared, None, None, priority))

    return client.defer(
        client.host.prepare_pool, call, work, lambda: wire.close_fds(model_cache + data_cache)
    )


def release_prepared_model(client: Client, call: Call) -> dict[str, Any]:
    handle = arg(call.args, call.method, "prepared", int)
    if not client.handles.remove(Kind.PREPARED, handle):
        raise invalid(f"{call.method}: unknown prepared model handle {handle}")
    return {}


HANDLERS: dict[str, Handler] = {
    "ping": ping,
    "getCapabilities": get_capabilities,
    "getSupportedOperations": get_supported_operations,
    "getType": get_type,
    "getVersionString": get_version_string,
    "getSupportedExtensions": get_supported_extensions,
    "getNumberOfCacheFilesNeeded": get_number_of_cache_files_needed,
    "prepareModel": prepare_model,
    "prepareModelFromCache": prepare_model_from_cache,
    "releasePreparedModel": release_prepared_model,
    "serviceStatus": service_status,
}
