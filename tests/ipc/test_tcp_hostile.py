"""Hostile network clients: half frames, slow frames, oversize frames, attachments that do not check, and a
client that never reads. Each is cut off or answered alone; the service goes on serving everyone else."""

from __future__ import annotations

import time

import pytest

from mlts.ipc import wire
from mlts.ipc.net import attachments as att
from mlts.runtime.remote import RemoteDevice
from tests.ipc.netkit import TOKEN, NetService, call_frame, make_certs, raw_client, token_file
from tests.runtime.fake_drivers import AddDevice

FRAME_TIMEOUT = 0.5


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def service(certs, tmp_path):
    svc = NetService(
        AddDevice(),
        frame_timeout=FRAME_TIMEOUT,
        cert=certs.server_cert,
        key=certs.server_key,
        token_file=token_file(tmp_path, TOKEN),
    )
    yield svc
    svc.close()


def _still_serves(service, certs, tmp_path) -> None:
    url = service.url(ca=certs.ca, **{"token-file": token_file(tmp_path, TOKEN, "check")})
    with RemoteDevice.connect(url) as device:
        assert device.ping() > 0


def _answers(channel, limit: float = 5.0) -> list[dict]:
    """What the service sends until it closes the connection."""
    out = []
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            frame = channel.read_frame(limit, idle=limit)
        except (wire.ConnectionClosed, wire.WireError, OSError):
            return out
        out.append(wire.loads(frame.body) if not frame.compact else {"compact": True})
    raise AssertionError(f"the connection is still open after {limit} s: {out}")


def test_a_half_frame_is_cut_off_after_the_frame_timeout(service, certs, tmp_path):
    channel = raw_client(service.address, certs.ca)
    parts = call_frame(1, "ping")
    whole = b"".join(bytes(p) for p in parts)
    channel.send([whole[:10]], 5.0)
    began = time.monotonic()
    answers = _answers(channel)
    assert time.monotonic() - began >= FRAME_TIMEOUT * 0.9
    assert answers and "not completed within" in answers[-1]["error"]["message"]
    _still_serves(service, certs, tmp_path)


def test_a_slow_frame_is_bounded_as_a_whole(service, certs, tmp_path):
    channel = raw_client(service.address, certs.ca)
    whole = b"".join(bytes(p) for p in call_frame(1, "ping"))
    began = time.monotonic()
    closed = False
    for i in range(len(whole)):  # one byte every 0.1 s: never idle for long, yet never done in time
        try:
            channel.send([whole[i : i + 1]], 1.0)
        except OSError:
            closed = True
            break
        time.sleep(0.1)
        if time.monotonic() - began > FRAME_TIMEOUT * 4:
            break
    answers = [] if closed else _answers(channel)
    assert closed or any("not completed" in a.get("error", {}).get("message", "") for a in answers)
    assert time.monotonic() - began < FRAME_TIMEOUT * 8
    _still_serves(service, certs, tmp_path)


def test_an_oversize_frame_is_refused_before_anything_is_allocated(service, certs, tmp_path):
    channel = raw_client(service.address, certs.ca)
    major, minor = wire.PROTOCOL_VERSION
    channel.send([wire.FIXED_HEADER.pack(wire.MAGIC, major, minor, 16, wire.MAX_PAYLOAD_BYTES + 1)], 5.0)
    answers = _answers(channel)
    assert "payload_len" in answers[-1]["error"]["message"]
    channel = raw_client(service.address, certs.ca)
    channel.send([wire.FIXED_HEADER.pack(b"JUNK", major, minor, 0, 0)], 5.0)
    assert "bad magic" in _answers(channel)[-1]["error"]["message"]
    _still_serves(service, certs, tmp_path)


def _records(*records: att.Record) -> list:
    builder = att.Builder()
    for r in records:
        builder.add(r)
    return builder.payloads(wire.MAX_PAYLOAD_BYTES)[-1]


def test_attachments_that_do_not_check_are_answered_and_the_connection_goes_on(service, certs):
    channel = raw_client(service.address, certs.ca)
    bad = [
        (att.Record(att.DATA, 99, 0, 4, data=b"abcd"),),  # a mirror never created
        (att.Record(att.CREATE, 1, 16, 0), att.Record(att.DATA, 1, 12, 8, data=b"12345678")),  # past its end
        (att.Record(att.CREATE, 2, 1 << 40, 0),),  # more than the connection's memory
        (att.Record(att.FD_PEER_FENCE, 12345),),  # a fence the service never made
        (att.Record(att.FD_FENCE, 0, 0), att.Record(att.FD_FENCE, 0, 0)),  # one pending fence twice
    ]
    for n, records in enumerate(bad, start=1):
        channel.send(call_frame(n, "ping", payload=_records(*records)), 5.0)
        answer = wire.loads(channel.read_frame(5.0, idle=5.0).body)
        assert answer["id"] == n and answer["ok"] is False
        assert answer["error"]["status"] == 4 and answer["error"]["message"].startswith("bad frame:")
    # A payload that is not a list of records at all.
    channel.send(call_frame(50, "ping", payload=[b"\x01\x00"]), 5.0)
    assert wire.loads(channel.read_frame(5.0, idle=5.0).body)["ok"] is False
    channel.send(call_frame(51, "ping"), 5.0)
    answer = wire.loads(channel.read_frame(5.0, idle=5.0).body)
    assert answer["id"] == 51 and answer["ok"] is True
    assert service.host.refusals.total >= len(bad)


def test_a_client_that_never_reads_is_dropped(service, certs, tmp_path):
    channel = raw_client(service.address, certs.ca)
    channel.sock.setsockopt(__import__("socket").SOL_SOCKET, __import__("socket").SO_RCVBUF, 4096)
    calls = b"".join(b"".join(bytes(p) for p in call_frame(i, "serviceStatus")) for i in range(1, 4001))
    began = time.monotonic()
    try:
        channel.send([calls], 10.0)
    except (OSError, TimeoutError):
        pass  # it was dropped while still sending
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and service.host.status()["clients"]:
        time.sleep(0.1)
    assert service.host.status()["clients"] == 0, "the service still serves a client that never reads"
    assert time.monotonic() - began < 15
    channel.close()
    _still_serves(service, certs, tmp_path)
