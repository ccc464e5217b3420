"""Which bytes of which memories an execution reads and writes: what travels with a call over a network.

Inputs go to the service before the call (DATA), outputs come back with its last answer (READ). An
input range that an execution still in flight will write (a chained fenced execution, an
asynchronous one) is not sent: the service's copy is the one that execution fills.
"""

from __future__ import annotations

from collections.abc import Iterable

Range = tuple[int, int]  # offset, length


def subtract(want: Range, holes: Iterable[Range]) -> list[Range]:
    """The parts of `want` outside every range of `holes`."""
    start, length = want
    parts = [(start, start + length)]
    for h_off, h_len in holes:
        h_end = h_off + h_len
        if h_len <= 0:
            continue
        nxt = []
        for a, b in parts:
            if h_end <= a or h_off >= b:
                nxt.append((a, b))
                continue
            if a < h_off:
                nxt.append((a, h_off))
            if h_end < b:
                nxt.append((h_end, b))
        parts = nxt
    return [(a, b - a) for a, b in parts if b > a]


def merge(ranges: Iterable[Range]) -> list[Range]:
    """Overlapping or touching ranges joined, in order."""
    out: list[list[int]] = []
    for off, length in sorted(r for r in ranges if r[1] > 0):
        if out and off <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], off + length - out[-1][0])
        else:
            out.append([off, length])
    return [(a, b) for a, b in out]
