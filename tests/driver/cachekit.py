"""Test helpers for compilation caching: small converted models, their inputs, saving and loading cache files."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from driver.operands import dtype_of
from mlts.convert import Conversion, convert
from mlts.hal.interface import Device, PreparedModel
from mlts.hal.types import Model

TOKEN = bytes(range(32))


class PackCounter:
    """Counts the packed arrays kernels compute (not those a plan takes from the cache); uses `monkeypatch`."""

    def __init__(self, monkeypatch) -> None:
        import driver.ops._base as base

        self.computed = 0
        real = base.packed

        def counting(name: str, compute: Callable[[], np.ndarray], **kw: Any) -> np.ndarray:
            def counted() -> np.ndarray:
                self.computed += 1
                return compute()

            return real(name, counted, **kw)

        for module in ("driver.ops._conv_common", "driver.ops._qconv", "driver.ops._lstm_cell"):
            monkeypatch.setattr(f"{module}.packed", counting)


@functools.cache
def float_onnx() -> onnx.ModelProto:
    """Conv-Relu, depthwise Conv-Clip, Add, GlobalAveragePool, Flatten, Gemm on a 1x3x12x12 float input."""
    from tests.convert.quantkit import tiny_net

    return tiny_net()


@functools.cache
def quant_onnx(per_channel: bool) -> onnx.ModelProto:
    """`float_onnx` quantized by onnxruntime (QDQ, uint8 activations; uint8 or per-channel int8 weights)."""
    from onnxruntime.quantization import QuantFormat, QuantType

    from tests.convert.quantkit import quantize_tiny_net

    with tempfile.TemporaryDirectory(prefix="mlts-cachekit-") as tmp:
        return quantize_tiny_net(
            Path(tmp),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8 if per_channel else QuantType.QUInt8,
            per_channel=per_channel,
        )


@functools.cache
def lstm_onnx() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One ONNX LSTM (5 steps, batch 2, 6 inputs, 8 units, peepholes) and its feeds."""
    from tests.convert.lstmkit import Case, lstm_model

    return lstm_model(Case(steps=5, batch=2, inputs=6, units=8, peep=True, init="input"))


MODELS = ("float", "quant", "quant_pc", "lstm")


def onnx_model(name: str) -> onnx.ModelProto:
    """One of MODELS as ONNX: "float", "quant" (uint8 weights), "quant_pc" (per-channel) or "lstm"."""
    return {
        "float": float_onnx,
        "quant": lambda: quant_onnx(False),
        "quant_pc": lambda: quant_onnx(True),
        "lstm": lambda: lstm_onnx()[0],
    }[name]()


def conversion(name: str) -> Conversion:
    return convert(onnx_model(name))


def model(name: str) -> Model:
    """One of MODELS converted to an NN model."""
    return conversion(name).model


def inputs(m: Model, seed: int = 0) -> list[np.ndarray]:
    """Random inputs of the model's input operands: standard normal floats, uniform 8-bit integers."""
    rng = np.random.default_rng(seed)
    sub = m.main
    arrays = []
    for i in sub.input_indexes:
        operand = sub.operands[i]
        dtype = dtype_of(operand.type)
        shape = tuple(d or 1 for d in operand.dimensions)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            arrays.append(rng.integers(info.min, info.max + 1, shape).astype(dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(dtype))
    return arrays


def run(prepared: PreparedModel, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs of an in-process sample-driver prepared model."""
    return [np.array(o, copy=True) for o in prepared.plan.run(arrays)]  # type: ignore[attr-defined]


def open_fds(paths: list[Path], flags: int) -> list[int]:
    return [os.open(p, flags | os.O_CLOEXEC, 0o600) for p in paths]


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def save(
    device: Device, m: Model, directory: Path, token: bytes = TOKEN, stem: str = "c"
) -> tuple[Path, Path]:
    """prepareModel with fresh cache files `stem`.model and `stem`.data in `directory`; their paths."""
    paths = [directory / f"{stem}.model", directory / f"{stem}.data"]
    fds = open_fds(paths, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        device.prepareModel(m, model_cache=fds[:1], data_cache=fds[1:], token=token).close()
    finally:
        close_fds(fds)
    return paths[0], paths[1]


def load(device: Device, model_path: Path, data_path: Path, token: bytes = TOKEN) -> PreparedModel:
    """prepareModelFromCache on the two files, opened read-only."""
    fds = open_fds([model_path, data_path], os.O_RDONLY)
    try:
        return device.prepareModelFromCache(fds[:1], fds[1:], token)
    finally:
        close_fds(fds)
