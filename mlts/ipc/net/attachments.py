"""Attachments: what a network frame's payload carries in place of file descriptors and shared memory.

A network frame has the message of the Unix protocol unchanged; its payload is a list of records
(docs/wire-protocol.md, "Network transport"). Each record is a fixed 24-byte head
`struct "<BBHIQQ"` (type, flags, 0, id, a, b) followed, for DATA and MESSAGE, by `b` bytes:

| type | id | a | b | meaning |
|---|---|---|---|---|
| CREATE 1 | mirror | size | seals | a new mirror (flags: 1 transient, 2 file) |
| DATA 2 | mirror | offset | length | bytes of a mirror at offset |
| READ 3 | mirror | offset | length | send these bytes back with the call's last answer |
| READ_FILE 4 | mirror | 0 | 0 | send the whole file back (FILE_SIZE, then DATA) |
| FILE_SIZE 5 | mirror | size | 0 | the file now has this size |
| RELEASE 6 | mirror | 0 | 0 | the sender no longer names this mirror |
| FD_MEMORY 7 | mirror | 0 | 0 | the next fd of the frame: the mirror's memory |
| FD_FENCE 8 | fence | state | 0 | the next fd: a sync fence of the sender (state 0 active, 1 signalled, 2 error) |
| FD_PEER_FENCE 9 | fence | 0 | 0 | the next fd: the receiver's own fence `id` |
| FD_RING 10 | stream | part | size | the next fd: part 0..3 (request memory, request event, result memory, result event) of a burst stream |
| MESSAGE 11 | stream | 0 | length | a burst ring message |

Decoding checks every length against the payload before reading, and the counts against limits.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

HEAD = struct.Struct("<BBHIQQ")

CREATE = 1
DATA = 2
READ = 3
READ_FILE = 4
FILE_SIZE = 5
RELEASE = 6
FD_MEMORY = 7
FD_FENCE = 8
FD_PEER_FENCE = 9
FD_RING = 10
MESSAGE = 11
_NAMES = {
    CREATE: "CREATE",
    DATA: "DATA",
    READ: "READ",
    READ_FILE: "READ_FILE",
    FILE_SIZE: "FILE_SIZE",
    RELEASE: "RELEASE",
    FD_MEMORY: "FD_MEMORY",
    FD_FENCE: "FD_FENCE",
    FD_PEER_FENCE: "FD_PEER_FENCE",
    FD_RING: "FD_RING",
    MESSAGE: "MESSAGE",
}
FD_TYPES = frozenset({FD_MEMORY, FD_FENCE, FD_PEER_FENCE, FD_RING})
_WITH_BYTES = frozenset({DATA, MESSAGE})
#: Records that change the receiver's mirrors before the frame's message is handled; they may travel in
#: `data` frames ahead of it when the whole does not fit in one frame.
_STATE = frozenset({CREATE, DATA, FILE_SIZE, RELEASE})

FLAG_TRANSIENT = 1
FLAG_FILE = 2

#: Records one frame may carry.
MAX_RECORDS = 1 << 16
U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1


@dataclass(slots=True)
class Record:
    type: int
    id: int = 0
    a: int = 0
    b: int = 0
    flags: int = 0
    data: bytes | bytearray | memoryview = b""

    @property
    def name(self) -> str:
        return _NAMES.get(self.type, str(self.type))


def decode(payload: bytes | bytearray | memoryview) -> list[Record]:
    """The records of a payload; ValueError naming what is wrong."""
    view = memoryview(payload).cast("B")
    records: list[Record] = []
    at = 0
    while at < len(view):
        if len(records) >= MAX_RECORDS:
            raise ValueError(f"more than {MAX_RECORDS} attachment records")
        if len(view) - at < HEAD.size:
            raise ValueError(f"{len(view) - at} bytes after the last attachment record")
        kind, flags, zero, ident, a, b = HEAD.unpack_from(view, at)
        at += HEAD.size
        if kind not in _NAMES or zero:
            raise ValueError(f"attachment record {len(records)} has unknown type {kind}")
        data: memoryview | bytes = b""
        if kind in _WITH_BYTES:
            if b > len(view) - at:
                raise ValueError(
                    f"attachment record {len(records)} ({_NAMES[kind]}) claims {b} bytes, {len(view) - at} follow"
                )
            data = view[at : at + b]
            at += b
        records.append(Record(kind, ident, a, b, flags, data))
    return records


@dataclass
class Builder:
    """Records to send: state changes first (they may go ahead in `data` frames), then the frame's own."""

    state: list[Record] = field(default_factory=list)
    final: list[Record] = field(default_factory=list)

    def add(self, record: Record) -> Record:
        (self.state if record.type in _STATE else self.final).append(record)
        return record

    def __bool__(self) -> bool:
        return bool(self.state or self.final)

    def size(self) -> int:
        return sum(
            HEAD.size + (len(r.data) if r.type in _WITH_BYTES else 0) for r in (*self.state, *self.final)
        )

    def payloads(self, limit: int) -> list[list[bytes | bytearray | memoryview]]:
        """The payloads (each a list of parts, at most `limit` bytes in all) this builder needs: every one
        but the last goes in a `data` frame ahead of the frame itself, which carries the last."""
        out: list[list[bytes | bytearray | memoryview]] = []
        parts: list[bytes | bytearray | memoryview] = []
        used = 0
        final_size = sum(_size(r) for r in self.final)
        for record in _split(self.state, limit // 2):
            size = _size(record)
            if parts and used + size > limit:
                out.append(parts)
                parts, used = [], 0
            parts += _encode(record)
            used += size
        if parts and used + final_size > limit:
            out.append(parts)
            parts = []
        for record in self.final:
            parts += _encode(record)
        out.append(parts)
        return out


def _size(record: Record) -> int:
    return HEAD.size + (len(record.data) if record.type in _WITH_BYTES else 0)


def _encode(record: Record) -> list[bytes | bytearray | memoryview]:
    head = HEAD.pack(record.type, record.flags, 0, record.id, record.a, record.b)
    if record.type in _WITH_BYTES:
        return [head, record.data]
    return [head]


def _split(records: list[Record], room: int) -> Iterator[Record]:
    """DATA records cut into pieces that fit `room` bytes with their head."""
    step = max(1, room - HEAD.size)
    for record in records:
        if record.type != DATA or len(record.data) <= step:
            yield record
            continue
        view = memoryview(record.data).cast("B")
        for start in range(0, len(view), step):
            piece = view[start : start + step]
            yield Record(DATA, record.id, record.a + start, len(piece), record.flags, piece)


def total(parts: list[bytes | bytearray | memoryview]) -> int:
    return sum(len(p) for p in parts)
