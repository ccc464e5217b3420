"""Who may use a network driver service: TLS, client certificates, tokens, plaintext only on loopback, and
a one-line refusal (logged) for everyone else."""

from __future__ import annotations

import os
import time

import pytest

from mlts.errors import InputError
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.ipc import wire
from mlts.ipc.net import address as addresses
from mlts.ipc.net import tokens
from mlts.ipc.net.listener import ListenError, listen_config
from mlts.runtime.remote import RemoteDevice
from tests.ipc.netkit import OTHER_TOKEN, TOKEN, NetService, make_certs, raw_client, token_file
from tests.runtime.fake_drivers import AddDevice


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def token_service(certs, tmp_path):
    svc = NetService(
        AddDevice(), cert=certs.server_cert, key=certs.server_key, token_file=token_file(tmp_path, TOKEN)
    )
    yield svc
    svc.close()


def _connect(url: str) -> RemoteDevice:
    return RemoteDevice.connect(url)


def _refusal(url: str) -> str:
    with pytest.raises(HalError) as info:
        _connect(url).close()
    message = info.value.message
    assert "\n" not in message
    return message


def test_addresses_parse_strictly():
    a = addresses.parse("tcp://board-a:7700?ca=ca.pem&token-file=tok", base="/lab")
    assert (a.host, a.port, a.ca, a.token_file, a.tls) == ("board-a", 7700, "/lab/ca.pem", "/lab/tok", True)
    assert a.plain == "tcp://board-a:7700" and addresses.parse(str(a)) == a
    v6 = addresses.parse("tcp://[::1]:5?insecure=1")
    assert v6.host == "::1" and v6.insecure and v6.is_loopback() and v6.transport == "tcp"
    assert addresses.parse("tcp://127.0.0.1:0", listen=True).port == 0
    for bad, why in (
        ("tcp://host", "port"),
        ("tcp://host:99999", "port"),
        ("tcp://host:0", "port"),
        ("tcp://::1:80", "brackets"),
        ("tcp://h:1/path", "no user, path"),
        ("tcp://h:1?colour=red", "unknown option"),
        ("tcp://h:1?insecure=maybe", "insecure"),
        ("/run/a.sock", "not a network address"),
    ):
        with pytest.raises(addresses.AddressError, match=why):
            addresses.parse(bad)


def test_token_files_must_be_private_and_are_compared_whole(tmp_path):
    path = token_file(tmp_path, f"# the lab's tokens\nci {TOKEN}\n{OTHER_TOKEN}")
    found = tokens.read_tokens(path)
    assert [t.id for t in found][0] == "ci" and found[1].id.startswith("sha256:")
    assert tokens.match(found, TOKEN).id == "ci"
    assert tokens.match(found, TOKEN[:-1]) is None and tokens.match(found, None) is None
    assert TOKEN not in repr(found)
    os.chmod(path, 0o640)
    with pytest.raises(tokens.TokenFileError, match="chmod 600"):
        tokens.read_tokens(path)
    with pytest.raises(tokens.TokenFileError, match="at least 16"):
        tokens.read_tokens(token_file(tmp_path, "short", "weak"))


def test_a_service_refuses_to_listen_unsafely(certs, tmp_path):
    with pytest.raises(ListenError, match="only on a loopback"):
        listen_config("tcp://0.0.0.0:7700", insecure=True)
    with pytest.raises(ListenError, match="--tls-cert"):
        listen_config("tcp://127.0.0.1:7700")
    with pytest.raises(ListenError, match="say who may connect"):
        listen_config("tcp://0.0.0.0:7700", cert=certs.server_cert, key=certs.server_key)
    with pytest.raises(InputError, match="chmod 600"):
        listen_config(
            "tcp://0.0.0.0:7700",
            cert=certs.server_cert,
            key=certs.server_key,
            token_file=token_file(tmp_path, TOKEN, mode=0o644),
        )
    with pytest.raises(InputError, match="no such file"):
        listen_config(
            "tcp://0.0.0.0:7700", cert=str(tmp_path / "none.pem"), token_file=token_file(tmp_path, TOKEN)
        )


def test_tokens_are_checked_and_refusals_logged(token_service, certs, tmp_path):
    good = token_file(tmp_path, TOKEN, "good")
    with _connect(token_service.url(ca=certs.ca, **{"token-file": good})) as device:
        assert device.ping() > 0
    before = token_service.host.refusals.total
    wrong = token_file(tmp_path, OTHER_TOKEN, "wrong")
    message = _refusal(token_service.url(ca=certs.ca, **{"token-file": wrong}))
    assert "refused this connection: a token this service does not accept" in message
    assert "no token" in _refusal(token_service.url(ca=certs.ca))
    assert token_service.host.refusals.total == before + 2


def test_plaintext_and_unverified_clients_get_one_line(token_service, certs, tmp_path):
    tok = token_file(tmp_path, TOKEN)
    # A plaintext client of a TLS service is told so, in plaintext.
    message = _refusal(token_service.url(insecure="1", **{"token-file": tok}))
    assert "this service speaks TLS" in message
    # The client checks the service: a certificate its authority did not sign is not trusted.
    message = _refusal(token_service.url(ca=certs.rogue_ca, **{"token-file": tok}))
    assert "cannot verify the certificate" in message
    # Plaintext only to loopback, whatever the client is told.
    with pytest.raises(HalError, match="only to a loopback address"):
        _connect("tcp://192.0.2.1:7700?insecure=1")


def test_client_certificates(certs, tmp_path):
    svc = NetService(AddDevice(), cert=certs.server_cert, key=certs.server_key, client_ca=certs.ca)
    try:
        with _connect(svc.url(ca=certs.ca, cert=certs.client_cert, key=certs.client_key)) as device:
            assert device.connection.endpoint.hello["peer"].endswith("(cert CN=board-client,O=mlts tests)")
        before = svc.host.refusals.total
        stranger = _refusal(svc.url(ca=certs.ca, cert=certs.rogue_cert, key=certs.rogue_key))
        assert "certificate" in stranger
        nobody = _refusal(svc.url(ca=certs.ca))
        assert "certificate" in nobody
        # The service counts a refusal after the client has read it: wait for its count to catch up.
        deadline = time.monotonic() + 10
        while svc.host.refusals.total < before + 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert svc.host.refusals.total == before + 2
    finally:
        svc.close()


def test_an_insecure_loopback_service_and_a_tls_client(certs):
    svc = NetService(AddDevice(), insecure=True)
    try:
        with _connect(svc.url(insecure="1")) as device:
            assert device.connection.endpoint.hello["transport"] == "tcp"
        assert "does not speak TLS" in _refusal(svc.url(ca=certs.ca))
    finally:
        svc.close()


def test_connection_caps_count_by_identity_and_machine(certs, tmp_path):
    svc = NetService(
        AddDevice(), cert=certs.server_cert, key=certs.server_key, token_file=token_file(tmp_path, TOKEN)
    )
    svc.host.max_clients_per_pid = 2
    url = svc.url(ca=certs.ca, **{"token-file": token_file(tmp_path, TOKEN, "mine")})
    try:
        first, second = _connect(url), _connect(url)
        with pytest.raises(HalError) as info:
            _connect(url)
        assert info.value.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
        assert "token sha256:" in info.value.message and "127.0.0.1 holds 2 connections" in info.value.message
        first.close()
        second.close()
    finally:
        svc.close()


def test_raw_hello_rules(token_service, certs):
    channel = raw_client(token_service.address, certs.ca, hello=False)
    from mlts.ipc.net.channel import frame_parts

    channel.send(
        frame_parts(wire.dumps({"kind": "hello", "net": 1, "shared_memory": True, "token": TOKEN})), 5
    )
    answer = wire.loads(channel.read_frame(5, idle=5).body)
    assert answer["kind"] == "refused" and "cannot share this machine's memory" in answer["message"]
    channel.close()
