"""The signed and per-channel quantized networks take the unsigned network's compiled paths.

mobilenet_v1's three 8-bit variants differ only in their types: int8 activations and filters
(TENSOR_QUANT8_ASYMM_SIGNED) and uint8 activations with per-channel filters
(TENSOR_QUANT8_SYMM_PER_CHANNEL). The driver runs all three the same way: the same operations bound
into the same compiled runs (driver.bound_steps), the same compiled calls in the same order (the
integer GEMM for every convolution when the library has it, the 8-bit depthwise pass), and every
layer's requantization in its 32-bit form (no left shift, every bias below 2^31 - 2^24). A variant
that fell off one of these paths (a step that no longer binds, a per-channel filter sent to the
float-staged GEMM, an int8 requantization taking the int64 form) would run the same arithmetic
slower, which no comparison of output bytes shows; this test does.
"""

from __future__ import annotations

import numpy as np
import pytest

from driver import native
from driver.bound_steps import Chunk
from driver.executor import Plan
from driver.native import layout
from driver.ops import _fast, _qgemm
from mlts.convert import convert
from mlts.hal.enums import DTYPE_NAME, OperandType
from mlts.models import zoo

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")

SMALL = "mobilenet_v1_0.25_128"
VARIANTS = ("_quant", "_quant_signed", "_quant_perchannel")
# The 32-bit requantization's condition (requant_init in driver/native/kernels.c).
NARROW_BIAS = (1 << 31) - (1 << 24)


def _feed(model) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    out = []
    for i in model.main.input_indexes:
        op = model.main.operands[i]
        dtype = np.dtype(DTYPE_NAME[OperandType(op.type)])
        info = np.iinfo(dtype)
        out.append(rng.integers(info.min, info.max + 1, op.dimensions, dtype=np.int64).astype(dtype))
    return out


def _paths(suffix: str, monkeypatch) -> dict:
    """The plan of the zoo's `SMALL + suffix` after two runs: its bound runs (first and last operation),
    the kinds of their compiled calls, and each quantized layer's requantization parameters."""
    params: list = []
    made = _fast.requant_params

    def recording(bias, q, cout):
        rq = made(bias, q, cout)
        params.append(rq)
        return rq

    monkeypatch.setattr(_fast, "requant_params", recording)
    model = convert(zoo.load(SMALL + suffix)).model
    plan = Plan(model)
    feed = _feed(model)
    for _ in range(2):  # compiles and binds, then runs bound
        plan.run(feed, checked=True)
    assert plan._straight is not None
    chunks = [v for v in plan._straight.__globals__.values() if isinstance(v, Chunk)]
    (ws,) = plan.workspaces.free
    kinds = []
    for chunk in chunks:
        assert not chunk.dead, f"{SMALL + suffix}: a run of compiled steps no longer binds"
        kinds.append([int(k) for k in ws.bound[chunk].ints[:, 0]])
    ranges = [(int(c.steps[0].number), int(c.steps[-1].number)) for c in chunks]
    return {"ranges": ranges, "kinds": kinds, "requant": params}


def test_the_three_variants_run_the_same_compiled_calls(monkeypatch):
    seen = {suffix: _paths(suffix, monkeypatch) for suffix in VARIANTS}
    unsigned = seen["_quant"]
    assert unsigned["ranges"] and sum(len(k) for k in unsigned["kinds"]) > 20
    calls = {k for run in unsigned["kinds"] for k in run}
    assert layout.CALL_DEPTHWISE_Q8 in calls
    if _qgemm.available(64):
        assert layout.CALL_QGEMM_REQUANT in calls
        assert not calls & {layout.CALL_GEMM_PACKED_BIAS_ACT_F32, layout.CALL_GEMM_FEWROWS_BIAS_ACT_F32}
    for suffix in VARIANTS[1:]:
        assert seen[suffix]["ranges"] == unsigned["ranges"], suffix
        assert seen[suffix]["kinds"] == unsigned["kinds"], suffix


@pytest.mark.parametrize("suffix", VARIANTS)
def test_every_layer_requantizes_in_32_bits(monkeypatch, suffix):
    params = _paths(suffix, monkeypatch)["requant"]
    assert len(params) >= 27  # 13 depthwise and 14 pointwise convolutions, and the classifier
    for rq in params:
        assert not rq.left.array.any(), f"{SMALL + suffix}: a channel shifts left"
        assert np.abs(rq.bias.array).max() <= NARROW_BIAS, f"{SMALL + suffix}: a bias beyond the 32-bit form"
    if suffix == "_quant_perchannel":  # the filters' scales really differ per channel
        assert any(np.unique(rq.mult.array).size > 1 for rq in params)


def test_seven_bit_filters_take_the_byte_quads(monkeypatch):
    """With AVX2 and no VNNI, every integer GEMM of the per-channel variant (filters quantized to 7 bits:
    every pair of k sums to at most 128 in magnitude) runs vpmaddubsw on its byte quads; the unsigned and
    signed variants' 8-bit filters keep the int16 pairs where one pair exceeds the bound."""
    layouts: list[int] = []

    class Recording(_qgemm.QWeights):
        __slots__ = ()

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            layouts.append(self.layout)

    monkeypatch.setattr(_qgemm, "QWeights", Recording)
    seen = {}
    for suffix in VARIANTS:
        layouts.clear()
        _paths(suffix, monkeypatch)
        seen[suffix] = list(layouts)
    if not _qgemm.available(64) or seen["_quant"][:1] == [_qgemm.VNNI]:
        pytest.skip("no integer GEMM, or the VNNI variant (one layout)")
    assert len(seen["_quant_perchannel"]) >= 14
    assert set(seen["_quant_perchannel"]) == {_qgemm.QUADS}
    assert _qgemm.PAIRS in seen["_quant"] and _qgemm.PAIRS in seen["_quant_signed"]
