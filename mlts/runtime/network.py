"""A driver service on another machine (or this one, over TCP): the endpoint of a network address.

`NetworkEndpoint.connect("tcp://HOST:PORT[?...]")` opens the connection (mlts.ipc.net.connect) and
gives the runtime a local socket on which the service looks like any shared service: everything of
RemoteDevice works unchanged, tensors travelling inside frames behind it. A call that gets no
answer in time closes this connection only, as with a shared service.
"""

from __future__ import annotations

from typing import Any

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.ipc.net import address as addresses
from mlts.ipc.net.connect import NetError, open_connection
from mlts.runtime.process import DEFAULT_START_TIMEOUT
from mlts.runtime.shared import SharedEndpoint


class NetworkEndpoint(SharedEndpoint):
    """One client connection to a network driver service."""

    def __init__(self, address: str, sock: Any, hello: dict[str, Any], bridge: Any) -> None:
        super().__init__(address, sock, hello)
        self.bridge = bridge
        #: "tcp+tls" or "tcp", as the service announced it.
        self.transport = str(hello.get("transport", "tcp"))

    @classmethod
    def connect(cls, path: str, timeout: float = DEFAULT_START_TIMEOUT) -> NetworkEndpoint:  # type: ignore[override]
        """Connect to the service at network address `path`; HalError (DEVICE_UNAVAILABLE, or the status of
        the service's refusal) with a one-line message on any failure."""
        try:
            where = addresses.parse(path)
            sock, hello, bridge = open_connection(path, timeout)
        except NetError as e:
            status = ErrorStatus.DEVICE_UNAVAILABLE
            if e.refused_status is not None:
                try:
                    status = ErrorStatus(e.refused_status)
                except ValueError:
                    pass
                if status == ErrorStatus.NONE:
                    status = ErrorStatus.DEVICE_UNAVAILABLE
            raise HalError(status, str(e)) from None
        except (addresses.AddressError, OSError) as e:
            raise HalError(ErrorStatus.DEVICE_UNAVAILABLE, str(e)) from None
        # InputError of a TLS or token file is the user's to fix: it goes up as it is.
        return cls(where.plain, sock, hello, bridge)

    def alive(self) -> bool:
        return not self._closed and not self.bridge.closed

    def describe_exit(self) -> str:
        return "connected" if self.alive() else f"disconnected ({self.bridge.reason})"

    def death_message(self, method: str) -> str:
        return (
            f"driver {self.name!r} at {self.path} ({self.transport}): the connection ended during {method} "
            f"({self.bridge.reason or 'closed'})"
        )

    def close_socket(self) -> None:
        super().close_socket()
        self.bridge.close("closed by the client")

    def __repr__(self) -> str:
        return f"NetworkEndpoint({self.path!r}, {self.transport})"


def connect_endpoint(path: str, timeout: float = DEFAULT_START_TIMEOUT) -> SharedEndpoint:
    """The endpoint of a shared service: a Unix socket path or a network address."""
    if addresses.is_network(path):
        return NetworkEndpoint.connect(path, timeout)
    return SharedEndpoint.connect(path, timeout)
