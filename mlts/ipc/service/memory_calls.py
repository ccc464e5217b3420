"""mapMemories (protocol 1.6): a client maps request pools before the binary execution calls that name them.

From 1.6 a client sends every execution as a compact call, which names pools
by memory ids only; a pool the service has not mapped yet is mapped first by
this call. Each reference is mapped and cached exactly as a JSON execution's
`{"memory": id, "fd": i, "size": n}` pool is (the same budget, handle limit,
seal checks, id table and error texts): the ids are then usable by every
later call, until `freeMemory` names them or the connection ends.

The call is all or nothing: when a reference fails, the ids this call mapped
are dropped again, so a client that sees the error knows none of them is
mapped.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from mlts.hal.errors import invalid
from mlts.ipc.service import pipeline
from mlts.ipc.service.args import arg, type_name
from mlts.ipc.service.client import Call, Client, Handler
from mlts.ipc.service.device_calls import close_memory, map_memory
from mlts.ipc.service.handles import Kind, Resource

#: A memory id fits the binary calls' u32 pool references.
MAX_MEMORY_ID = (1 << 32) - 1


def map_memories(client: Client, call: Call) -> dict[str, Any]:
    """Map and cache each {"memory": id, "fd": i, "size": n} of `memories`; {"mapped": count}."""
    m = call.method
    refs = arg(call.args, m, "memories", list)
    if len(refs) > len(call.fds):
        raise invalid(f"{m}: {len(refs)} memories described but the frame carries {len(call.fds)} fds")
    handles = client.handles
    added: list[int] = []
    try:
        for n, ref in enumerate(refs):
            what = f"memories[{n}]"
            if not isinstance(ref, dict):
                raise invalid(
                    f"{m}: {what} must be an object with 'memory', 'fd' and 'size', got {type_name(ref)}"
                )
            mem_id = arg(ref, f"{m} {what}", "memory", int)
            if not 0 <= mem_id <= MAX_MEMORY_ID:
                raise invalid(f"{m}: {what}: memory id {mem_id} is not in [0, 2**32)")
            size = arg(ref, f"{m} {what}", "size", int)
            handles.check_bytes(size, m)
            if handles.peek(Kind.MEMORY, mem_id) is None:
                handles.check_room(Kind.MEMORY, m)
            memory = map_memory(call, ref, what)
            old = handles.peek(Kind.MEMORY, mem_id)
            try:
                handles.add(
                    Kind.MEMORY,
                    Resource(memory, partial(close_memory, memory), memory.size),
                    m,
                    key=mem_id,
                )
            except BaseException:
                close_memory(memory)
                raise
            if old is not None:  # the id now names another mapping: the old one is unreachable
                pipeline.unreachable(handles, old.value)
            added.append(mem_id)
    except BaseException:
        for mem_id in added:
            handles.remove(Kind.MEMORY, mem_id)
        raise
    return {"mapped": len(added)}


HANDLERS: dict[str, Handler] = {"mapMemories": map_memories}
