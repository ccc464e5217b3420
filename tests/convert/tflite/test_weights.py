"""Weights as real TFLite files store them: float16 behind DEQUANTIZE, sparse behind DENSIFY (or read
directly), 8-bit weights of hybrid operators, per-channel weights behind DEQUANTIZE."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.convert.tflite import convert_tflite
from tests.convert.tflite._check import assert_matches, check, rand, run_litert, run_nn
from tests.convert.tflite._tflbuild import TflModel

CONV = {"padding": 0, "stride_w": 1, "stride_h": 1, "dilation_w_factor": 1, "dilation_h_factor": 1}


def _conv_model(weights_builder, x_shape=(1, 5, 5, 8), out_channels=4, bias=True) -> bytes:
    """x -> CONV_2D(x, <weights from weights_builder(g)>, bias) -> y."""
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor(x_shape, name="x")
    w = weights_builder(g)
    b = g.tensor([out_channels], data=rand([out_channels], seed=2)) if bias else -1
    y = g.tensor([*x_shape[:3], out_channels], name="y")
    g.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", **CONV)
    g.io([x], [y])
    return m.finish()


def test_float16_weights_behind_dequantize_become_float32_constants() -> None:
    weights = rand([4, 3, 3, 8], seed=5).astype(np.float16)

    def build(g):
        w16 = g.tensor([4, 3, 3, 8], "float16", weights)
        w = g.tensor([4, 3, 3, 8])
        g.op("DEQUANTIZE", [w16], [w], version=2)
        return w

    data = _conv_model(build)
    conv = convert_tflite(data)
    assert any("FLOAT16 weights" in n for n in conv.notes)
    # The filter is a float32 constant holding the float16 values exactly: no DEQUANTIZE operation.
    assert [op.type for op in conv.model.main.operations] == [3]  # CONV_2D
    check(data, [rand([1, 5, 5, 8])])


def _csr(dense: np.ndarray) -> dict:
    """Sparsity of a [O, H, W, I] tensor: O, H, W dense, I compressed (CSR), no blocks."""
    o, h, w, i = dense.shape
    flat = dense.reshape(-1, i)
    segments, indices, values = [0], [], []
    for row in flat:
        nz = np.nonzero(row)[0]
        indices += nz.tolist()
        values += row[nz].tolist()
        segments.append(len(indices))
    dims = [("dense", o), ("dense", h), ("dense", w), ("sparse", segments, indices)]
    return {"order": [0, 1, 2, 3], "dims": dims}, np.asarray(values, dtype=dense.dtype)


def _block_csr(dense: np.ndarray, block: int) -> dict:
    """Sparsity of a [O, I] tensor with 1 x `block` blocks along I: O dense, I/block compressed, block dense."""
    o, i = dense.shape
    blocks = dense.reshape(o, i // block, block)
    segments, indices, values = [0], [], []
    for r in range(o):
        for c in range(i // block):
            if np.any(blocks[r, c]):
                indices.append(c)
                values += blocks[r, c].tolist()
        segments.append(len(indices))
    dims = [("dense", o), ("sparse", segments, indices), ("dense", block)]
    return {"order": [0, 1, 2], "block_map": [1], "dims": dims}, np.asarray(values, dtype=dense.dtype)


def _sparse_weights(shape, seed: int, dtype=np.float32) -> np.ndarray:
    dense = rand(shape, seed=seed).astype(dtype)
    rng = np.random.default_rng(seed + 1)
    dense[rng.random(shape) < 0.6] = 0
    return dense


def test_sparse_weights_behind_densify_are_densified() -> None:
    dense = _sparse_weights([4, 3, 3, 8], seed=9)
    sparsity, values = _csr(dense)

    def build(g):
        sw = g.tensor([4, 3, 3, 8], "float32", values, sparsity=sparsity)
        w = g.tensor([4, 3, 3, 8])
        g.op("DENSIFY", [sw], [w])
        return w

    data = _conv_model(build)
    conv = convert_tflite(data)
    assert any("densified 1 sparse" in n for n in conv.notes)
    check(data, [rand([1, 5, 5, 8])])


def test_sparse_float16_weights_behind_densify_and_dequantize() -> None:
    """The pattern of MediaPipe's sparse models: sparse FLOAT16 -> DENSIFY -> DEQUANTIZE -> CONV_2D."""
    dense = _sparse_weights([4, 3, 3, 8], seed=10, dtype=np.float16)
    sparsity, values = _csr(dense)

    def build(g):
        sw = g.tensor([4, 3, 3, 8], "float16", values, sparsity=sparsity)
        w16 = g.tensor([4, 3, 3, 8], "float16")
        w = g.tensor([4, 3, 3, 8])
        g.op("DENSIFY", [sw], [w16])
        g.op("DEQUANTIZE", [w16], [w], version=2)
        return w

    data = _conv_model(build)
    check(data, [rand([1, 5, 5, 8])])


def test_block_sparse_fully_connected_weights_read_directly() -> None:
    """TFLite's FULLY_CONNECTED reads sparse weights without DENSIFY; the importer densifies them."""
    dense = _sparse_weights([6, 16], seed=11)
    dense[:, 4:8] = 0  # one whole zero block per row
    sparsity, values = _block_csr(dense, 4)
    m = TflModel()
    g = m.subgraph("main")
    x = g.tensor([2, 16], name="x")
    w = g.tensor([6, 16], "float32", values, sparsity=sparsity)
    b = g.tensor([6], data=rand([6], seed=3))
    y = g.tensor([2, 6], name="y")
    g.op("FULLY_CONNECTED", [x, w, b], [y], "FullyConnectedOptions")
    g.io([x], [y])
    check(m.finish(), [rand([2, 16])])


def _float_twin(shape, q: np.ndarray, scales, axis: int) -> np.ndarray:
    s = np.asarray(scales, dtype=np.float32).reshape([-1 if k == axis else 1 for k in range(len(shape))])
    return (q.astype(np.float32) * s).astype(np.float32)


@pytest.mark.parametrize("per_channel", [False, True])
def test_hybrid_conv_dequantizes_its_weights_as_the_delegate(per_channel: bool) -> None:
    """NNAPI has no hybrid CONV_2D: the delegate DEQUANTIZEs the 8-bit weights and runs a float conv.

    TFLite's own hybrid kernel quantizes the input as well, so the reference here is LiteRT running the
    same conv with the dequantized weights stored as float32.
    """
    q = rand([4, 3, 3, 8], "int8", seed=3)
    scales = [0.01, 0.02, 0.005, 0.015] if per_channel else [0.012]

    def hybrid(g):
        return g.tensor([4, 3, 3, 8], "int8", q, scale=scales, zero_point=0, axis=0)

    def twin(g):
        return g.tensor([4, 3, 3, 8], "float32", _float_twin(q.shape, q, scales, 0))

    x = [rand([1, 5, 5, 8])]
    data = _conv_model(hybrid)
    conv = convert_tflite(data)
    assert [op.type for op in conv.model.main.operations] == [6, 3]  # DEQUANTIZE, CONV_2D
    expected = run_litert(_conv_model(twin), x)
    assert_matches(run_nn(data, x)[0], expected[0])


def test_hybrid_fully_connected() -> None:
    q = rand([5, 6], "int8", seed=4)

    def model(weights: dict) -> bytes:
        m = TflModel()
        g = m.subgraph("main")
        x = g.tensor([2, 6], name="x")
        w = g.tensor([5, 6], **weights)
        y = g.tensor([2, 5], name="y")
        g.op("FULLY_CONNECTED", [x, w, -1], [y], "FullyConnectedOptions")
        g.io([x], [y])
        return m.finish()

    x = [rand([2, 6])]
    hybrid = model({"dtype": "int8", "data": q, "scale": 0.02, "zero_point": 0})
    twin = model({"dtype": "float32", "data": q.astype(np.float32) * np.float32(0.02)})
    assert_matches(run_nn(hybrid, x)[0], run_litert(twin, x)[0])


def test_per_channel_weights_behind_dequantize_feed_a_float_conv() -> None:
    """Weight-only quantization: a constant int8 per-channel tensor, DEQUANTIZE, then a float CONV_2D."""
    q = rand([4, 3, 3, 8], "int8", seed=6)

    def build(g):
        wq = g.tensor([4, 3, 3, 8], "int8", q, scale=[0.01, 0.02, 0.03, 0.04], zero_point=0, axis=0)
        w = g.tensor([4, 3, 3, 8])
        g.op("DEQUANTIZE", [wq], [w], version=2)
        return w

    check(_conv_model(build), [rand([1, 5, 5, 8])])
