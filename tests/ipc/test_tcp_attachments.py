"""The attachment records of network frames: strict decoding, payloads split over `data` frames, and the
ranges an execution sends and reads back."""

from __future__ import annotations

import pytest

from mlts.ipc.net import attachments as att
from mlts.ipc.net.regions import merge, subtract


def _flat(parts) -> bytes:
    return b"".join(bytes(p) for p in parts)


def test_records_round_trip_and_large_data_is_split_ahead_of_the_frame():
    blob = bytes(range(256)) * 40  # 10 KiB
    builder = att.Builder()
    builder.add(att.Record(att.FD_MEMORY, 7))
    builder.add(att.Record(att.CREATE, 7, len(blob), 3))
    builder.add(att.Record(att.DATA, 7, 0, len(blob), data=blob))
    builder.add(att.Record(att.READ, 7, 100, 50))
    payloads = builder.payloads(4096)
    assert len(payloads) > 2 and all(len(_flat(p)) <= 4096 for p in payloads)
    records = [r for p in payloads for r in att.decode(_flat(p))]
    # State first (in order, the data in pieces), then the frame's own records, all in the last payload.
    assert records[0].type == att.CREATE
    rebuilt = bytearray(len(blob))
    for r in records:
        if r.type == att.DATA:
            rebuilt[r.a : r.a + r.b] = r.data
    assert bytes(rebuilt) == blob
    last = att.decode(_flat(payloads[-1]))
    assert [r.type for r in last][-2:] == [att.FD_MEMORY, att.READ]


@pytest.mark.parametrize(
    "payload, says",
    [
        (b"\x01", "after the last attachment record"),
        (att.HEAD.pack(99, 0, 0, 1, 0, 0), "unknown type"),
        (att.HEAD.pack(att.DATA, 0, 0, 1, 0, 10) + b"abc", "claims 10 bytes, 3 follow"),
        (att.HEAD.pack(att.CREATE, 0, 7, 1, 0, 0), "unknown type"),
    ],
)
def test_payloads_that_are_not_records_are_refused(payload, says):
    with pytest.raises(ValueError, match=says):
        att.decode(payload)


def test_ranges_in_flight_are_left_out_and_ranges_merge():
    assert subtract((0, 100), [(10, 20), (50, 10)]) == [(0, 10), (30, 20), (60, 40)]
    assert subtract((0, 10), [(0, 10)]) == []
    assert subtract((5, 10), [(0, 3), (20, 5)]) == [(5, 10)]
    assert merge([(10, 5), (0, 10), (30, 1), (15, 0)]) == [(0, 15), (30, 1)]
