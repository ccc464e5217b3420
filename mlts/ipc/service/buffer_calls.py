"""Handlers of memory domains: allocate, the IBuffer copies and release, and token checks for executions.

A buffer the driver allocates is a handle of the allocating client keyed by
its token, so only that client can name it: another client's token (even a
correctly guessed one) is unknown here, fails with INVALID_ARGUMENT and is
logged. The client's release, or its disconnection, frees the buffer once
no execution uses it any more.

An execution naming tokens is checked once (`guard_buffers`): the tokens are
looked up among the client's buffers and the request bound to them; a later
execution of the same request reuses that work while its `BufferGuard` holds
(no buffer of the client allocated or released since, every buffer in the
state binding found), with no lookup per token.
"""

from __future__ import annotations

import logging
import os
import time
from operator import attrgetter
from typing import Any

from mlts.hal.buffer_use import buffer_state
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError, invalid
from mlts.hal.memory import read_received, write_received
from mlts.hal.types import BufferDesc, BufferRole
from mlts.ipc.service.args import arg, int_list, pool_token
from mlts.ipc.service.client import Call, Client, Handler
from mlts.ipc.service.handles import HandleTable, Kind, Resource

log = logging.getLogger("mlts.ipc.service")

_VALUE = attrgetter("value")
_STAMP = attrgetter("stamp")

#: At most this many prepared models and roles in one allocation.
MAX_ALLOCATE_MODELS = 64
MAX_ROLES = 256
#: The largest copy into or out of a buffer (HAL sizes are 32-bit).
MAX_COPY_BYTES = 2**32 - 1


def hold_buffer(client: Client, method: str, token: int) -> Resource:
    """The client's buffer with `token`, with one more reference (the caller releases it).

    Shared by every path that takes tokens (executions, bursts, copies). A token the client does not
    hold is refused (and counted in the service's refusal log); a client that keeps guessing is held
    back on its own thread (`refusals.GuessBrake`).
    """
    try:
        return client.handles.get(Kind.BUFFER, token, method)
    except HalError:
        wait = client.host.guesses.charge(client.peer.user_key)
        if wait > 0:
            time.sleep(wait)
        raise invalid(f"{method}: buffer token {token} is not a live buffer of this client") from None


def buffers_of(client: Client, method: str, tokens: list[int]) -> tuple[Any, ...]:
    """The client's buffers with `tokens`, in order, looked up but not held: an execution names buffers
    by token and, as in the HAL, the driver keeps alive what an execution it runs has looked up (the
    sample driver's arrays outlive a release). Another client's token is refused and logged as by
    `hold_buffer`."""
    found = client.handles.peek_many(Kind.BUFFER, tokens)
    if None in found:
        hold_buffer(client, method, tokens[found.index(None)])  # logs and raises
    return tuple(map(_VALUE, found))


class BufferGuard:
    """What a request naming driver buffers was checked against, to reuse the check while it holds.

    `epoch` is the client's buffer table epoch read before the tokens were looked up: while it is the
    same, no buffer of the client was allocated or released, so the tokens name the very buffers
    they named (a freed token, or a token freed and allocated again, changes it). `state` is what
    binding read of the buffers (`mlts.hal.buffer_use.buffer_state`: the driver's stamps, or their
    dimensions and initialised flags). `holds()` costs one comparison of the epoch and one of the
    state, however many tokens the request names.
    """

    __slots__ = ("table", "epoch", "buffers", "state", "stamps")

    def __init__(self, table: HandleTable, epoch: int, buffers: tuple[Any, ...]) -> None:
        self.table = table
        self.epoch = epoch
        self.buffers = buffers
        self.state = buffer_state(buffers)
        # The driver's stamps, when it gives them (compared as they are: a None later never matches).
        self.stamps = self.state[1] if len(self.state) == 2 else None

    def holds(self) -> bool:
        if self.table.buffer_epoch != self.epoch:
            return False
        if self.stamps is not None:
            return tuple(map(_STAMP, self.buffers)) == self.stamps
        return buffer_state(self.buffers) == self.state


def guard_buffers(client: Client, method: str, tokens: list[int]) -> BufferGuard:
    """The client's buffers with `tokens` (another client's token, or a freed one, is refused and
    logged as by `hold_buffer`), guarded for reuse (see BufferGuard)."""
    table = client.handles
    epoch = table.buffer_epoch  # before the lookups: a change after them shows as a new epoch
    return BufferGuard(table, epoch, buffers_of(client, method, tokens))


def _roles(call: Call, key: str) -> list[BufferRole]:
    m = call.method
    docs = arg(call.args, m, key, list, [])
    if len(docs) > MAX_ROLES:
        raise invalid(f"{m}: {key!r} has {len(docs)} roles; at most {MAX_ROLES} are allowed")
    roles = []
    for n, doc in enumerate(docs):
        where = f"{m} {key}[{n}]"
        if not isinstance(doc, dict):
            raise invalid(f"{where} must be an object with 'model', 'io' and 'frequency'")
        roles.append(
            BufferRole(
                arg(doc, where, "model", int),
                arg(doc, where, "io", int),
                float(arg(doc, where, "frequency", (int, float), 1.0)),
            )
        )
    return roles


def allocate(client: Client, call: Call) -> dict[str, Any]:
    m = call.method
    client.handles.check_room(Kind.BUFFER, m)
    desc_doc = arg(call.args, m, "desc", dict)
    dims = int_list(desc_doc, f"{m} desc", "dimensions", 32)
    numbers = int_list(call.args, m, "prepared", MAX_ALLOCATE_MODELS)
    input_roles = _roles(call, "input_roles")
    output_roles = _roles(call, "output_roles")
    held: list[Resource] = []
    try:
        for n, number in enumerate(numbers):
            try:
                held.append(client.handles.get(Kind.PREPARED, number, m))
            except HalError:
                raise invalid(
                    f"{m}: prepared[{n}] = {number} is not a live prepared model of this client"
                ) from None
        prepared = [r.value.prepared for r in held]
        buffer = client.host.device.allocate(BufferDesc(tuple(dims)), prepared, input_roles, output_roles)
    finally:
        for resource in held:
            resource.release()
    token = int(buffer.token)
    try:
        if not 0 < token < 2**32 or client.handles.peek(Kind.BUFFER, token) is not None:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"{m}: the driver returned an invalid token {token}")
        client.handles.add(Kind.BUFFER, Resource(buffer, buffer.close), m, key=token)
    except BaseException:
        buffer.close()
        raise
    return {"token": token, "dimensions": [int(d) for d in buffer.dimensions]}


def _memory_ref(call: Call) -> tuple[int, int]:
    """The call's {"fd": i, "size": n}: a memfd or a mapped file, read or written once with pread/pwrite
    (never mapped, so a sender that truncates it cannot fault the service)."""
    m = call.method
    ref = arg(call.args, m, "memory", dict)
    size = arg(ref, f"{m} memory", "size", int)
    return call.take_fd(ref.get("fd"), "memory"), size


def _staging(client: Client, method: str, size: int) -> None:
    """Count a copy's staging bytes against the client's budget (a HAL buffer is at most 2**32 - 1 bytes);
    the caller gives them back with `release_bytes` when the copy is done."""
    if not 0 <= size <= MAX_COPY_BYTES:
        raise invalid(
            f"{method}: memory size {size} is outside 0 .. {MAX_COPY_BYTES} (a buffer's largest size)"
        )
    client.handles.reserve_bytes(size, method)


def copy_to(client: Client, call: Call) -> dict[str, Any]:
    m = call.method
    resource = hold_buffer(client, m, pool_token(call.args, m, "buffer"))
    try:
        fd, size = _memory_ref(call)
        buffer = resource.value
        try:
            _staging(client, m, size)
        except BaseException:
            os.close(fd)
            raise
        try:
            staging = bytearray(size)
            try:
                buffer.copyTo(memoryview(staging))
            except BaseException:
                os.close(fd)
                raise
            write_received(fd, size, memoryview(staging), f"{m}: memory")
        finally:
            client.handles.release_bytes(size)
    finally:
        resource.release()
    return {"dimensions": [int(d) for d in resource.value.dimensions]}


def copy_from(client: Client, call: Call) -> dict[str, Any]:
    m = call.method
    dims = int_list(call.args, m, "dimensions", 32)
    resource = hold_buffer(client, m, pool_token(call.args, m, "buffer"))
    try:
        fd, size = _memory_ref(call)
        try:
            _staging(client, m, size)
        except BaseException:
            os.close(fd)
            raise
        try:
            data = read_received(fd, size, f"{m}: memory")
            resource.value.copyFrom(memoryview(data), dims)
        finally:
            client.handles.release_bytes(size)
    finally:
        resource.release()
    return {"dimensions": [int(d) for d in resource.value.dimensions]}


def release_buffer(client: Client, call: Call) -> dict[str, Any]:
    token = pool_token(call.args, call.method, "buffer")
    if not client.handles.remove(Kind.BUFFER, token):
        hold_buffer(client, call.method, token)  # logs and raises
    return {}


HANDLERS: dict[str, Handler] = {
    "allocate": allocate,
    "bufferCopyTo": copy_to,
    "bufferCopyFrom": copy_from,
    "releaseBuffer": release_buffer,
}
