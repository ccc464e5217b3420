"""Network service fixtures: certificates made with the machine's openssl, token files, and a service host
with a TCP listener running in this process (fast to start, easy to inspect)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlts.hal.interface import Device
from mlts.ipc.net.listener import NetListener, listen_config
from mlts.ipc.service.host import ServiceHost

TOKEN = "s3cret-token-for-the-tests-0123456789"
OTHER_TOKEN = "another-token-nobody-accepts-98765"


@dataclass(frozen=True)
class Certs:
    """A test CA with a server certificate (localhost, 127.0.0.1, ::1) and a client certificate; a second,
    unrelated CA with its own client certificate (a stranger's)."""

    folder: Path
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    rogue_ca: str
    rogue_cert: str
    rogue_key: str


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _ca(folder: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip


def _leaf(folder: Path, ca: str, name: str, subject: str, ext: str) -> None:
    (folder / f"{name}.ext").write_text(ext)
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
        "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
        cwd=folder,
    )  # fmt: skip


def make_certs(folder: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (the certificates of the TLS tests are made with it)")
    folder.mkdir(parents=True, exist_ok=True)
    _ca(folder, "ca")
    _ca(folder, "rogue-ca")
    server_ext = "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n"
    client_ext = "extendedKeyUsage=clientAuth\n"
    _leaf(folder, "ca", "server", "/CN=localhost", server_ext)
    _leaf(folder, "ca", "client", "/CN=board-client/O=mlts tests", client_ext)
    _leaf(folder, "rogue-ca", "rogue", "/CN=stranger", client_ext)
    f = str(folder)
    return Certs(
        folder,
        f"{f}/ca.pem",
        f"{f}/server.pem",
        f"{f}/server.key",
        f"{f}/client.pem",
        f"{f}/client.key",
        f"{f}/rogue-ca.pem",
        f"{f}/rogue.pem",
        f"{f}/rogue.key",
    )


def token_file(folder: Path, text: str, name: str = "token", mode: int = 0o600) -> str:
    path = folder / name
    path.write_text(text + "\n")
    os.chmod(path, mode)
    return str(path)


class NetService:
    """A ServiceHost of `device` with a TCP listener on 127.0.0.1 (a free port), served on threads."""

    def __init__(self, device: Device, *, frame_timeout: float = 10.0, **listen: object) -> None:
        self.host = ServiceHost(device, frame_timeout=frame_timeout, shared=True, idle_timeout=None)
        self.config = listen_config("tcp://127.0.0.1:0", **listen)  # type: ignore[arg-type]
        self.listener = NetListener(self.host, self.config)
        self.address = self.listener.bind()
        self.port = self.listener.port
        self._thread = threading.Thread(target=self.listener.serve, daemon=True)
        self._thread.start()

    def url(self, **query: str) -> str:
        from urllib.parse import urlencode

        return self.address + (f"?{urlencode(query)}" if query else "")

    def close(self) -> None:
        self.listener.close()
        self._thread.join(2.0)
        self.host.close()


def raw_client(address: str, ca: str | None, token: str | None = TOKEN, *, hello: bool = True):
    """A network channel to the service at `address` (TLS unless `ca` is None), its hello sent and the
    service's read when `hello`: for tests that speak the wire themselves."""
    import socket

    from mlts.ipc import wire
    from mlts.ipc.net import address as addresses
    from mlts.ipc.net import tls
    from mlts.ipc.net.channel import Channel, frame_parts

    where = addresses.parse(address)
    sock = socket.create_connection((where.host, where.port), timeout=5)
    channel = (
        Channel.tls(sock, tls.client_context(ca), server=False, hostname=where.host) if ca else Channel(sock)
    )
    if hello:
        message = {"kind": "hello", "net": 1, "shared_memory": False}
        if token is not None:
            message["token"] = token
        channel.send(frame_parts(wire.dumps(message)), 5.0)
        answer = wire.loads(channel.read_frame(5.0, idle=5.0).body)
        assert answer["kind"] == "hello", answer
    return channel


def call_frame(call_id: int, method: str, args: dict | None = None, payload: list | tuple = ()) -> list:
    from mlts.ipc import wire
    from mlts.ipc.net.channel import frame_parts

    message = {"kind": "call", "id": call_id, "method": method, "args": args or {}}
    return frame_parts(wire.dumps(message), list(payload))
