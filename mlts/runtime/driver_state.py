"""Recurrent state kept in driver buffers (memory domains) between the steps of a sequence.

Each state pair (the step model's state input i and state output o) gets two
driver buffers, each allocated for both roles; a step reads the state from
one and writes the next state into the other, then they swap. Only the step
input and the other outputs cross shared memory; the state is zeroed by one
`copyFrom` per sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mlts.hal.interface import Buffer
from mlts.hal.types import BufferDesc, BufferRole, ExecutionResult
from mlts.runtime.session import Session


class DriverState:
    """Runs a Session's steps with the states of `pairs` [(input index, output index, shape)] in the driver."""

    def __init__(self, session: Session, pairs: Sequence[tuple[int, int, tuple[int, ...]]]) -> None:
        if session.prepared is None:
            raise ValueError("the session is closed")
        self.session = session
        self.pairs = tuple(pairs)
        self._current: list[Buffer] = []
        self._next: list[Buffer] = []
        try:
            for i, o, _ in self.pairs:
                for side in (self._current, self._next):
                    side.append(
                        session.device.allocate(
                            BufferDesc(), [session.prepared], [BufferRole(0, i)], [BufferRole(0, o)]
                        )
                    )
        except BaseException:
            self.close()
            raise
        self._zeros = [np.zeros(shape, np.float32).tobytes() for _, _, shape in self.pairs]
        # The tokens of each step's reads and writes, made once for each way round (a step alternates).
        self._tokens = [
            self._token_maps(a, b) for a, b in ((self._current, self._next), (self._next, self._current))
        ]
        self._parity = 0

    def _token_maps(self, read: list[Buffer], written: list[Buffer]) -> tuple[dict[int, int], dict[int, int]]:
        ins = {i: b.token for (i, _, _), b in zip(self.pairs, read, strict=True)}
        outs = {o: b.token for (_, o, _), b in zip(self.pairs, written, strict=True)}
        return ins, outs

    def reset(self) -> None:
        """Zero state for a new sequence."""
        for buf, zeros, (_, _, shape) in zip(self._current, self._zeros, self.pairs, strict=True):
            buf.copyFrom(memoryview(zeros), shape)

    def step(self, feed: Sequence[Any]) -> tuple[list[np.ndarray | None], ExecutionResult]:
        """One step: the state inputs of `feed` are ignored; the state outputs come back as None."""
        in_tokens, out_tokens = self._tokens[self._parity]
        outs, result = self.session.run(feed, in_tokens=in_tokens, out_tokens=out_tokens)
        self._current, self._next = self._next, self._current
        self._parity ^= 1
        return outs, result

    def state(self) -> list[np.ndarray]:
        """The current state, copied out of the driver."""
        values = []
        for buf, (_, _, shape) in zip(self._current, self.pairs, strict=True):
            out = bytearray(4 * int(np.prod(shape)))
            buf.copyTo(memoryview(out))
            values.append(np.frombuffer(out, np.float32).reshape(shape))
        return values

    def close(self) -> None:
        for buf in (*self._current, *self._next):
            buf.close()
        self._current, self._next = [], []
