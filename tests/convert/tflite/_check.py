"""Run a hand-built .tflite on LiteRT (TFLite's kernels) and, converted, on the sample driver; compare.

Float outputs: CTS's fp32 rule (|a - e| <= 1e-5 + 5*2^-23 |e|). 8-bit outputs: within 1 quantized
unit (CTS; NNAPI's and TFLite's integer kernels round a requantization differently at times).
INT32 and BOOL outputs: exact.
"""

from __future__ import annotations

import numpy as np
import pytest

from mlts.convert.tflite import convert_tflite_plan
from tests.convert.tflite._tflbuild import TYPE_NAMES, TflModel

ATOL, RTOL = 1e-5, 5 * 2**-23

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT (ai-edge-litert) is not installed")


def run_litert(data: bytes, feeds: list[np.ndarray], signature: str | None = None) -> list[np.ndarray]:
    it = litert.Interpreter(
        model_content=data,
        num_threads=1,
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], np.asarray(x).reshape(d["shape"]))
    it.invoke()
    return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]


def run_nn(data: bytes, feeds: list[np.ndarray], **options) -> list[np.ndarray]:
    from driver.executor import run_model
    from mlts.hal.validate import validate_model

    conv, _ = convert_tflite_plan(data, **options)
    validate_model(conv.model)
    shaped = [np.asarray(x).reshape(t.shape) for x, t in zip(feeds, conv.inputs, strict=True)]
    return [np.asarray(o) for o in run_model(conv.model, shaped)]


def assert_matches(actual: np.ndarray, expected: np.ndarray, units: int = 1) -> None:
    actual = np.asarray(actual).reshape(expected.shape)
    if expected.dtype.kind == "f":
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        bad = np.abs(a - e) > ATOL + RTOL * np.abs(e)
        both_nan = np.isnan(a) & np.isnan(e)
        assert not np.any(bad & ~both_nan), f"max |err| {np.nanmax(np.abs(a - e))} (CTS fp32 rule)"
    elif expected.dtype in (np.uint8, np.int8, np.int16):
        d = np.abs(actual.astype(np.int64) - expected.astype(np.int64))
        assert d.max(initial=0) <= units, f"{int(d.max())} units off (at most {units})"
    else:
        np.testing.assert_array_equal(actual, expected)


def check(data: bytes, feeds: list[np.ndarray], units: int = 1) -> list[np.ndarray]:
    """LiteRT and the converted model agree on `feeds`; returns LiteRT's outputs."""
    expected = run_litert(data, feeds)
    actual = run_nn(data, feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert_matches(a, e, units)
    return expected


def rand(shape, dtype: str = "float32", seed: int = 0, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        return rng.uniform(lo, hi, shape).astype(np.float32)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    info = np.iinfo(dtype)
    low, high = (max(info.min, int(lo)), min(info.max, int(hi))) if dtype == "int32" else (info.min, info.max)
    return rng.integers(low, high + 1, shape).astype(dtype)


def one_op(
    builtin: str,
    inputs: list[dict],
    outputs: list[dict],
    options_name: str | None = None,
    version: int = 1,
    **options,
) -> tuple[bytes, list[np.ndarray]]:
    """A model of one operator: inputs without `data` are graph inputs (fed random values)."""
    m = TflModel()
    g = m.subgraph("main")
    ins, feeds, graph_inputs = [], [], []
    for k, spec in enumerate(inputs):
        if spec is None:
            ins.append(-1)
            continue
        spec = dict(spec)
        feed = spec.pop("feed", None)
        t = g.tensor(spec.pop("shape"), spec.pop("dtype", "float32"), spec.pop("data", None), **spec)
        ins.append(t)
        if g.tensors[t].buffer == 0:
            graph_inputs.append(t)
            tt = g.tensors[t]
            feeds.append(feed if feed is not None else rand(tt.shape, TYPE_NAMES[tt.type], seed=k))
    outs = []
    for spec in outputs:
        spec = dict(spec)
        outs.append(g.tensor(spec.pop("shape"), spec.pop("dtype", "float32"), **spec))
    g.op(builtin, ins, outs, options_name, version=version, **options)
    g.io(graph_inputs, outs)
    return m.finish(), feeds
