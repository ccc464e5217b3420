"""Compact execution calls (protocol 1.4) on the service side: the fixed part read and checked, then
the usual handler (the execution pipeline decodes the request itself only when it is new)."""

from __future__ import annotations

from mlts.hal.errors import invalid
from mlts.ipc import compact_calls, wire
from mlts.ipc.service.client import Call, Client, Handler
from mlts.ipc.service.execution_calls import execute, execute_synchronously
from mlts.ipc.service.fenced_calls import execute_fenced
from mlts.ipc.service.transport import error_reply


def dispatch_compact(client: Client, frame: wire.Frame) -> None:
    """Serve one compact call (protocol 1.4); a message that does not decode gets an error reply."""
    assert frame.compact is not None
    client.compact_calls += 1
    try:
        decoded = client.decoder.head(frame.compact)
    except ValueError as e:
        frame.close_fds()
        client.calls += 1
        msg_id = wire.compact_id(frame.compact)
        client.conn.send(error_reply(msg_id, invalid(f"bad compact call: {e}")))
        return
    method = compact_calls.METHODS[decoded.method]
    call = Call(decoded.id, method, {}, frame.fds, compact=decoded)
    client.run_call(call, COMPACT_HANDLERS[decoded.method])


COMPACT_HANDLERS: dict[int, Handler] = {
    compact_calls.SYNC: execute_synchronously,
    compact_calls.ASYNC: execute,
    compact_calls.FENCED: execute_fenced,
}
