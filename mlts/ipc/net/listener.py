"""The service's TCP listener: TLS, who the client is, and then a bridge into the service host.

A connection is taken in this order, each step bounded by the handshake timeout and each failure a
one-line `refused` message (when the client can still read one) and a line in the service's
aggregated refusal log:

1. a TLS service looks at the first byte: a client that does not start a TLS handshake is told, in
   plaintext, that the service speaks TLS; a plaintext (`--insecure`) service closes a TLS client's
   connection (it cannot answer in TLS);
2. the TLS handshake: the service's certificate, and with `--tls-client-ca` the client's, checked by
   OpenSSL against that authority;
3. the client's hello (`{"kind": "hello", "net": 1, "shared_memory": false, "token": ...}`): with
   `--token-file` the token must be one of the file's (compared in constant time);
4. the service host admits it like a Unix client (its connection limits count by the client's proven
   identity and address) and the bridge serves it until either side ends.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
from dataclasses import dataclass

from mlts.errors import InputError
from mlts.hal.enums import ErrorStatus
from mlts.ipc import wire
from mlts.ipc.net import address as addresses
from mlts.ipc.net import tls, tokens
from mlts.ipc.net.channel import HANDSHAKE_TIMEOUT, TLS_HANDSHAKE_BYTE, Channel, HandshakeError, frame_parts
from mlts.ipc.net.service_bridge import NET_VERSION, ServiceBridge
from mlts.ipc.peer import Peer

log = logging.getLogger("mlts.ipc.net")

#: Connections between accept and admission (handshakes) at once; more are closed at once.
MAX_PENDING = 64
#: Mirrors a connection may hold beyond its cached pools: burst slots and one call's transients.
EXTRA_MIRRORS = 2048


class ListenError(InputError):
    """A --listen setting that cannot be served (one line)."""


@dataclass(frozen=True)
class ListenConfig:
    """How the service listens on one TCP address and whom it lets in."""

    address: addresses.NetAddress
    context: ssl.SSLContext | None  # None: plaintext (--insecure, loopback only)
    client_certificates: bool
    tokens: tuple[tokens.Token, ...] | None

    @property
    def transport(self) -> str:
        return "tcp+tls" if self.context is not None else "tcp"

    def describe(self) -> str:
        how = []
        if self.context is None:
            how.append("plaintext, loopback only")
        else:
            how.append("TLS")
        if self.client_certificates:
            how.append("client certificates")
        if self.tokens:
            how.append(f"{len(self.tokens)} token(s)")
        if self.context is None and not self.tokens:
            how.append("no authentication")
        return ", ".join(how)


def listen_config(
    listen: str,
    *,
    cert: str | None = None,
    key: str | None = None,
    client_ca: str | None = None,
    token_file: str | None = None,
    insecure: bool = False,
) -> ListenConfig:
    """The checked settings of `--listen tcp://HOST:PORT` (ListenError, or a file's InputError, otherwise)."""
    where = addresses.parse(listen, listen=True)
    if insecure:
        if cert or key or client_ca:
            raise ListenError(
                f"--listen {listen}: --insecure serves plaintext; drop --tls-cert/--tls-key/--tls-client-ca"
            )
        if not where.is_loopback():
            raise ListenError(
                f"--listen {listen}: plaintext is allowed only on a loopback address (127.0.0.1, ::1); "
                "give --tls-cert and --tls-key to serve TLS"
            )
    else:
        if not cert:
            raise ListenError(
                f"--listen {listen}: a network service speaks TLS: give --tls-cert and --tls-key "
                "(or --insecure for plaintext on loopback)"
            )
        if not client_ca and not token_file:
            raise ListenError(
                f"--listen {listen}: say who may connect: --tls-client-ca (client certificates) or "
                "--token-file (bearer tokens); anyone who reaches the port could use the driver otherwise"
            )
    context = None if insecure else tls.server_context(cert or "", key, client_ca)
    found = tuple(tokens.read_tokens(token_file)) if token_file else None
    return ListenConfig(where, context, client_ca is not None, found)


class NetListener:
    """Accepts network clients on one address and hands each, once it has proved who it is, to the host."""

    def __init__(self, host: object, config: ListenConfig) -> None:
        self.host = host
        self.config = config
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._pending = threading.BoundedSemaphore(MAX_PENDING)
        self.port = 0

    def bind(self) -> str:
        """Bind and listen; the address it listens on (`tcp://HOST:PORT`, the port the system chose for 0)."""
        where = self.config.address
        infos = addresses.resolve(where, listen=True)
        family, kind, proto, _, sockaddr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
            sock.listen(64)
        except OSError as e:
            sock.close()
            raise ListenError(f"--listen {where.plain}: cannot listen: {e.strerror or e}") from None
        sock.set_inheritable(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        host = f"[{where.host}]" if ":" in where.host else where.host
        return f"tcp://{host}:{self.port}"

    def serve(self) -> None:
        """Accept until `close()`."""
        sock = self._sock
        assert sock is not None, "bind() first"
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(200):
                continue
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            conn.set_inheritable(False)
            if not self._pending.acquire(blocking=False):
                self._note(
                    Peer(identity="unauthenticated", address=_address(conn)), "too many handshakes at once"
                )
                conn.close()
                continue
            threading.Thread(target=self._take, args=(conn,), name="net-accept", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    # ------------------------------------------------------------ one connection

    def _note(self, peer: Peer, what: str) -> None:
        self.host.refusals.note(peer, f"connection refused: {what}")  # type: ignore[attr-defined]

    def _take(self, sock: socket.socket) -> None:
        try:
            self._admit(sock)
        except Exception as e:  # a bug must not take the listener down
            log.exception("network connection failed: %s", e)
            sock.close()

    def _admit(self, sock: socket.socket) -> None:
        admitted = False
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _keepalive(sock)
            channel = Channel(sock)
            stranger = Peer(identity="unauthenticated", address=channel.peer_address)
            first = channel.first_byte(HANDSHAKE_TIMEOUT)
            if first is None:
                self._note(stranger, "sent nothing within the handshake time")
                channel.close()
                return
            config = self.config
            if config.context is not None:
                if first != TLS_HANDSHAKE_BYTE:
                    self._note(stranger, "plaintext client of a TLS service")
                    _refuse(
                        channel,
                        "this service speaks TLS: connect with TLS (a tcp:// address without insecure=1)",
                    )
                    return
                try:
                    channel = Channel.tls(sock, config.context, server=True)
                except HandshakeError as e:
                    self._note(stranger, str(e))
                    _linger_close(sock)
                    return
            elif first == TLS_HANDSHAKE_BYTE:
                # It cannot read an answer in plaintext, but its TLS then fails at once, saying so.
                self._note(stranger, "TLS client of a plaintext (--insecure) service")
                message = {
                    "kind": "refused",
                    "status": int(ErrorStatus.DEVICE_UNAVAILABLE),
                    "message": "plaintext",
                }
                try:
                    sock.send(
                        b"".join(bytes(p) for p in frame_parts(wire.dumps(message))), socket.MSG_NOSIGNAL
                    )
                except OSError:
                    pass
                _linger_close(sock)
                return
            peer, why = self._identify(channel)
            if why is not None:
                self._note(peer, why)
                _refuse(channel, why)
                return
            local, remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            limits = self.host.limits  # type: ignore[attr-defined]
            bridge = ServiceBridge(
                channel,
                remote,
                peer,
                frame_timeout=self.host.frame_timeout,  # type: ignore[attr-defined]
                max_mirrors=limits.max_memories + EXTRA_MIRRORS,
                max_mirror_bytes=limits.max_mapped_bytes,
                note_refusal=self.host.refusals.note,  # type: ignore[attr-defined]
                transport=config.transport,
            )
            self.host.admit(self.host.connection(local, peer))  # type: ignore[attr-defined]
            admitted = True
            self._pending.release()
            bridge.start()
        finally:
            if not admitted:
                self._pending.release()

    def _identify(self, channel: Channel) -> tuple[Peer, str | None]:
        """Who the client is (its certificate, its token), or why it is refused."""
        config = self.config
        names = []
        subject = tls.subject_of(channel.peer_certificate()) if config.client_certificates else None
        if subject is not None:
            names.append(f"cert {subject}")
        stranger = Peer(identity="unauthenticated", address=channel.peer_address)
        try:
            frame = channel.read_frame(HANDSHAKE_TIMEOUT, idle=HANDSHAKE_TIMEOUT)
            hello = wire.loads(frame.body) if not frame.compact else {}
        except TimeoutError:
            return stranger, "sent no hello within the handshake time"
        except (wire.WireError, ssl.SSLError, OSError) as e:
            return stranger, f"no hello: {e}"
        if hello.get("kind") != "hello" or type(hello.get("net")) is not int:
            return stranger, "the first message was not a network client's hello"
        if hello["net"] < NET_VERSION:
            return (
                stranger,
                f"network protocol {hello['net']} is not served (this service speaks {NET_VERSION})",
            )
        if hello.get("shared_memory") is not False:
            return stranger, "a network client cannot share this machine's memory: say shared_memory false"
        if config.tokens:
            token = tokens.match(list(config.tokens), hello.get("token"))
            if token is None:
                what = "no token" if hello.get("token") is None else "a token this service does not accept"
                return stranger, f"{what} (give --token-file with a token of the service's file)"
            names.append(f"token {token.id}")
        identity = ", ".join(names) or "insecure"
        return Peer(identity=identity, address=channel.peer_address), None


def _refuse(channel: Channel, why: str) -> None:
    message = {"kind": "refused", "status": int(ErrorStatus.DEVICE_UNAVAILABLE), "message": why}
    try:
        channel.send(frame_parts(wire.dumps(message)), 1.0)
    except (OSError, ConnectionError, TimeoutError, ssl.SSLError):
        pass
    channel.close()


def _linger_close(sock: socket.socket) -> None:
    """Close after the TLS alert reached the peer: a socket closed with the peer's bytes unread is reset,
    and a reset can take the alert with it."""
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(1.0)
        for _ in range(64):
            if not sock.recv(1 << 16):
                break
    except OSError:
        pass
    sock.close()


def _address(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "unknown"
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _keepalive(sock: socket.socket) -> None:
    """Find a peer whose machine went away within about a minute, even while nothing is sent."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    except (OSError, AttributeError):
        pass


keepalive = _keepalive
