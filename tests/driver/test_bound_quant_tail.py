"""The 8-bit MEAN, RESHAPE and SOFTMAX that bind (driver.bound_steps; mk_mean_q8, a copy,
mk_softmax_q8): a quantized network's last operations bound equal the same operations called one by
one, bit for bit, for uint8 and int8; reductions the compiled call does not take (axes not adjacent,
more than 4096 values) stay unbound and still agree; the means against a float64 reference within
one unit."""

from __future__ import annotations

import numpy as np
import pytest

from driver import native
from driver.bound_steps import Chunk
from driver.executor import Plan
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as O
from tests.driver import bindkit

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")

TYPES = {"uint8": (T.TENSOR_QUANT8_ASYMM, np.uint8, 0), "int8": (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8, -128)}
SHAPE = (2, 5, 7, 40)
X_SCALE, X_ZP = 0.05, 3  # the input's zero point (plus the type's offset)
M_SCALE, M_ZP = 0.03, 10  # the means' quantization


def _mean(bld, qt, offset, x, axes, keep, shape):
    y = bld.add_operand(qt, shape, M_SCALE, M_ZP + offset)
    bld.add_operation(O.MEAN, [x, bld.add_int32_tensor(axes), bld.add_int32(keep)], [y])
    return y


def _model(kind: str, shape: tuple[int, ...] = SHAPE):
    """x -> MEAN over H, W (kept) -> RESHAPE -> SOFTMAX; x -> MEAN over C -> MEAN over everything;
    x -> MEAN over N and W (not adjacent); x -> MEAN over H, W of a large image (more than 4096 values)."""
    qt, _, offset = TYPES[kind]
    n, h, w, c = shape
    bld = ModelBuilder()
    x = bld.add_input(qt, shape, X_SCALE, X_ZP + offset)
    spatial = _mean(bld, qt, offset, x, [1, 2], 1, (n, 1, 1, c))
    logits = bld.add_operand(qt, (n, c), M_SCALE, M_ZP + offset)
    bld.add_operation(O.RESHAPE, [spatial, bld.add_int32_tensor([n, -1])], [logits])
    probs = bld.add_operand(qt, (n, c), 1 / 256, offset)
    bld.add_operation(O.SOFTMAX, [logits, bld.add_float32(1.5)], [probs])
    channels = _mean(bld, qt, offset, x, [-1], 0, (n, h, w))
    everything = _mean(bld, qt, offset, channels, [0, 1, -1], 0, (1,))
    apart = _mean(bld, qt, offset, x, [0, 2], 1, (1, h, 1, c))
    big = bld.add_input(qt, (1, 70, 60, 3), X_SCALE, X_ZP + offset)
    wide = _mean(bld, qt, offset, big, [1, 2], 0, (1, 3))
    bld.mark_outputs([spatial, probs, channels, everything, apart, wide])
    return bld.build()


def _feeds(kind: str, seed: int) -> list[np.ndarray]:
    _, dtype, _ = TYPES[kind]
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, SHAPE).astype(dtype)
    x[0, :, :, 0] = info.max  # a channel of extremes: the largest sums
    x[1, :, :, 1] = info.min
    big = rng.integers(info.min, info.max + 1, (1, 70, 60, 3)).astype(dtype)
    return [x, big]


def _reference(x: np.ndarray, axes: tuple[int, ...], offset: int, keep: bool) -> np.ndarray:
    """The mean in float64 requantized to the means' scale and zero point, rounded half away from 0."""
    real = (x.astype(np.float64) - (X_ZP + offset)) * X_SCALE
    q = real.mean(axis=axes, keepdims=keep) / M_SCALE
    return np.sign(q) * np.floor(np.abs(q) + 0.5) + M_ZP + offset


@pytest.mark.parametrize("kind", list(TYPES))
def test_bound_tail_equals_the_steps_called_one_by_one(kind) -> None:
    model = _model(kind)
    bound, unbound = Plan(model), bindkit.unbound(Plan(model))
    for seed in (1, 2):
        feeds = _feeds(kind, seed)
        for _ in range(2):  # binds, then runs bound
            got, want = bound.run(feeds, checked=True), unbound.run(feeds, checked=True)
            for g, w in zip(got, want, strict=True):
                assert g.dtype == w.dtype and g.shape == w.shape
                assert g.tobytes() == w.tobytes()
        _, _, offset = TYPES[kind]
        lo, hi = np.iinfo(TYPES[kind][1]).min, np.iinfo(TYPES[kind][1]).max
        x, big = feeds
        for out, (src, axes, keep) in zip(
            (got[0], got[2], got[4], got[5]),
            ((x, (1, 2), True), (x, (3,), False), (x, (0, 2), True), (big, (1, 2), False)),
            strict=True,
        ):
            ref = np.clip(_reference(src, axes, offset, keep), lo, hi)
            assert np.abs(out.astype(np.int64) - ref).max() <= 1
        assert len(np.unique(got[1])) > 8  # the softmax saw real spreads of values
    chunks = [v for v in bound._straight.__globals__.values() if isinstance(v, Chunk)]
    # MEAN over H, W, RESHAPE, SOFTMAX, MEAN over C, MEAN over everything: one run; the others alone.
    assert [[int(s.number) for s in c.steps] for c in chunks] == [[0, 1, 2, 3, 4]]
    assert not chunks[0].dead
