"""What PAD and PAD_V2 share: the [rank, 2] paddings and filling a larger array around the input.

Float32, or quant8 with the output sharing the input's type, scale and zero
point; a quantized pad value is in quantized units (the zero point for PAD).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run
from driver.ops._params import int_tensor_input, int_values
from driver.ops._qelementwise import moving_signature
from mlts.hal.errors import invalid


def _check(name: str, pads: np.ndarray, rank: int | None) -> np.ndarray:
    if pads.ndim != 2 or pads.shape[1] != 2 or (rank is not None and pads.shape[0] != rank):
        want = f"[{rank}, 2]" if rank is not None else "[rank, 2]"
        raise invalid(f"{name}: paddings have shape {pads.shape}, expected {want}")
    if (pads < 0).any():
        raise invalid(f"{name}: paddings {pads.tolist()} hold a negative amount, expected >= 0")
    return pads


def prepare_pad(name: str, ins: Sequence[ArgInfo], outs: Sequence[ArgInfo], value: float | None) -> Run:
    """A kernel padding input 0 by input 1 ([rank, 2] before/after amounts) with `value`.

    `value` None pads with 0.0 (float32) or the zero point (quant8).
    """
    quantized = moving_signature(name, ins[0], outs)
    pads = int_tensor_input(name, "paddings", ins[1])
    if pads is not None:
        _check(name, pads, len(ins[0].shape) or None)
    if value is None:
        value = ins[0].zero_point if quantized else 0.0
    fill = value if quantized else np.float32(value)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = args[0]
        p = _check(name, int_values(pads, args[1]), x.ndim)
        out = np.full(
            tuple(int(b + d + a) for d, (b, a) in zip(x.shape, p, strict=True)), fill, dtype=x.dtype
        )
        out[tuple(slice(int(b), int(b) + d) for d, (b, _) in zip(x.shape, p, strict=True))] = x
        return [out]

    return run
