"""A hostile client for the service tests: floods synchronous executions and never reads a reply.

    python -m tests.runtime.flooder SOCKET_PATH SECONDS

Connects, prepares the ADD model, then sends `executeSynchronously` calls (each answered by a reply
that a worker of the service sends) as fast as the socket takes them, never reading. When the service drops it, it connects
again, until SECONDS have passed. Prints the number of connections it made.
"""

from __future__ import annotations

import socket
import sys
import time

from mlts.hal import nnfile
from mlts.hal.memory import SharedMemory
from mlts.ipc import wire
from tests.runtime.models import add_model

_ARG = {"hasNoValue": False, "location": {"poolIndex": 0, "offset": 0, "length": 24}, "dimensions": [2, 3]}
_OUT = {**_ARG, "location": {"poolIndex": 0, "offset": 128, "length": 24}}


def _call(sock: socket.socket, msg_id: int, method: str, args: dict, fds=()) -> None:
    wire.send_frame(sock, {"kind": "call", "id": msg_id, "method": method, "args": args}, fds=fds)


def _reply(sock: socket.socket) -> dict:
    def wait(partial: bool) -> None:
        if not wire.wait_readable(sock, 10.0):
            raise TimeoutError("no answer")

    while True:
        frame = wire.recv_frame(sock, wait)
        frame.close_fds()
        if frame.message.get("kind") == "reply":
            return frame.message


def flood_once(path: str, until: float, model: SharedMemory, pool: SharedMemory) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        wire.recv_frame(sock).close_fds()  # the hello
        _call(sock, 1, "prepareModel", {"model": {"fd": 0, "size": model.size}}, [model.fd])
        handle = _reply(sock)["result"]["prepared"]
        request = {"inputs": [_ARG, _ARG], "outputs": [_OUT], "pools": [{"memory": 1, "fd": 0, "size": 256}]}
        _call(sock, 2, "executeSynchronously", {"prepared": handle, "request": request}, [pool.fd])
        request = {**request, "pools": [{"memory": 1}]}
        body = {"prepared": handle, "request": request}
        msg_id = 3
        # Blocking sends: once the service takes nothing more, this waits until it drops us (or the end).
        while (left := until - time.monotonic()) > 0:
            sock.settimeout(left)
            _call(sock, msg_id, "executeSynchronously", body)
            msg_id += 1
    except OSError:
        pass  # dropped by the service
    finally:
        sock.close()


def main(path: str, seconds: float) -> int:
    until = time.monotonic() + seconds
    data = nnfile.encode(add_model())
    model = SharedMemory.frozen(data)
    pool = SharedMemory.create(256)
    connections = 0
    while time.monotonic() < until:
        connections += 1
        flood_once(path, until, model, pool)
    print(connections)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2])))
