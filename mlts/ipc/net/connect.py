"""Connecting to a network service: TCP, TLS with the server checked, the client's hello, and the bridge.

`open_connection(address)` returns the local socket the runtime speaks the Unix protocol on (its
other end is a `ClientBridge`), the service's hello and the bridge. Every failure is a `NetError`
whose message is one line naming the address: a name that does not resolve, nobody listening, a
certificate that does not check, a plaintext service, a refused token or certificate.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
from typing import Any

from mlts.ipc import wire
from mlts.ipc.net import address as addresses
from mlts.ipc.net import tls, tokens
from mlts.ipc.net.channel import Channel, HandshakeError, frame_parts
from mlts.ipc.net.client_bridge import ClientBridge
from mlts.ipc.net.listener import keepalive
from mlts.ipc.net.service_bridge import NET_VERSION, boot_id

#: Seconds the bridge waits for the service to take a frame, and for a started frame to arrive.
BRIDGE_TIMEOUT = 60.0


class NetError(Exception):
    """A network service that cannot be reached or refused this client; `refused_status` is the service's
    status when it sent a `refused` message."""

    def __init__(self, message: str, refused_status: int | None = None) -> None:
        super().__init__(message)
        self.refused_status = refused_status


def _dial(where: addresses.NetAddress, timeout: float) -> socket.socket:
    infos = addresses.resolve(where)
    last: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
        except OSError as e:
            sock.close()
            last = e
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        keepalive(sock)
        return sock
    why = last.strerror if last is not None and last.strerror else str(last)
    raise NetError(f"no driver service listens on {where.plain}: {why}")


def _tls_failure(where: addresses.NetAddress, error: BaseException) -> NetError:
    text = str(error)
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text or "packet length too long" in text:
        return NetError(
            f"the service at {where.plain} does not speak TLS (a plaintext --insecure service?): {text}"
        )
    if "certificate not accepted" in text or "CERTIFICATE_VERIFY_FAILED" in text:
        return NetError(
            f"cannot verify the certificate of the service at {where.plain}: {text.split(': ', 1)[-1]} "
            "(give the authority that signed it with --tls-ca)"
        )
    if "ALERT" in text.upper() and "CERTIFICATE" in text.upper() or "UNKNOWN_CA" in text.upper():
        return NetError(
            f"the service at {where.plain} refused this client's certificate ({text}); it wants one its "
            "client authority signed (--tls-cert, --tls-key)"
        )
    return NetError(f"TLS with the service at {where.plain} failed: {text}")


def open_connection(text: str, timeout: float) -> tuple[socket.socket, dict[str, Any], ClientBridge]:
    """Connect to the network service at address `text` (with this process's defaults filled in)."""
    where = addresses.parse(text).with_defaults(addresses.client_defaults())
    if where.insecure and not where.is_loopback():
        raise NetError(
            f"{where.plain}: plaintext (insecure) connections are allowed only to a loopback address; "
            "connect with TLS"
        )
    context = None if where.insecure else tls.client_context(where.ca, where.cert, where.key)
    secret = tokens.client_secret(where.token_file) if where.token_file else None
    sock = _dial(where, timeout)
    try:
        if context is not None:
            try:
                channel = Channel.tls(sock, context, server=False, hostname=where.host)
            except HandshakeError as e:
                raise _tls_failure(where, e) from None
        else:
            channel = Channel(sock)
    except BaseException:
        sock.close()
        raise
    try:
        hello: dict[str, Any] = {
            "kind": "hello",
            "net": NET_VERSION,
            "shared_memory": False,
            "client": {"host": socket.gethostname(), "pid": os.getpid()},
        }
        if secret is not None:
            hello["token"] = secret
        began = time.monotonic_ns()
        try:
            channel.send(frame_parts(wire.dumps(hello)), timeout)
        except OSError:
            pass  # refused already: what the service said (a TLS alert) is read below
        try:
            frame = channel.read_frame(timeout, idle=timeout)
        except TimeoutError:
            raise NetError(f"the service at {where.plain} sent no hello within {timeout:.1f} s") from None
        except ssl.SSLError as e:
            raise _tls_failure(where, e) from None
        except (wire.WireError, OSError) as e:
            hint = (
                " (does it want a client certificate, --tls-cert?)"
                if context is not None and not where.cert
                else ""
            )
            raise NetError(
                f"the service at {where.plain} closed the connection before its hello ({e}){hint}"
            ) from None
        ended = time.monotonic_ns()
        answer = wire.loads(frame.body) if not frame.compact else {}
        if answer.get("kind") == "refused":
            status = answer.get("status")
            raise NetError(
                f"the service at {where.plain} refused this connection: {str(answer.get('message'))[:300]}",
                status if type(status) is int else None,
            )
        protocol = answer.get("protocol")
        if (
            answer.get("kind") != "hello"
            or not isinstance(protocol, list)
            or protocol[:1] != [wire.PROTOCOL_VERSION[0]]
        ):
            raise NetError(f"{where.plain} sent {str(answer)[:200]} instead of a driver service's hello")
    except BaseException:
        channel.close()
        raise
    offset = 0
    clock = answer.get("clock_ns")
    if answer.get("boot_id") != boot_id() and type(clock) is int:
        offset = clock - (began + ended) // 2  # the service's CLOCK_MONOTONIC minus this machine's
    local, remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    local.set_inheritable(False)
    remote.set_inheritable(False)
    bridge = ClientBridge(channel, remote, where.plain, offset, BRIDGE_TIMEOUT)
    bridge.start()
    return local, answer, bridge
