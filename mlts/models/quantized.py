"""Quantized MobileNets made from the float zoo models by onnxruntime's static quantization.

Pipeline, per model and variant:

1. onnxruntime's `quant_pre_process` on the float model (shape inference and
   the basic graph optimisations, which fold every BatchNormalization into the
   convolution before it);
2. `quantize_static` in QDQ format, calibrated (MinMax) on CALIBRATION_IMAGES
   procedural images from `mlts.datasets.images` that the benchmark does not
   use for evaluation (indexes from CALIBRATION_START), with two quantization
   overrides that MLTS's quantized models share: the input is quantized with
   scale 1/128 (MLTS's 0.007812) and zero point 128 (0 for signed), and the
   softmax output with NNAPI's fixed 1/256 and zero point 0 (-128 for signed);
3. the leading QuantizeLinear and trailing DequantizeLinear are removed, so the
   model takes the 8-bit image and returns 8-bit probabilities, as MLTS's
   quantized models do.

Variants: `unsigned` (uint8 activations, per-tensor uint8 weights — the
default of ORT's quantizer and of MLTS), `signed` (int8 activations and
per-tensor symmetric int8 weights: TENSOR_QUANT8_ASYMM_SIGNED), `perchannel`
(uint8 activations, per-channel symmetric int8 weights:
TENSOR_QUANT8_SYMM_PER_CHANNEL) with 7-bit weights (`reduce_range`).

Why 7 bits for per-channel: onnxruntime's uint8 x int8 kernels on x86-64 CPUs
without VNNI (AVX2 only) add pairs of products in 16 bits with saturation, so
255 * 127 * 2 = 64770 becomes 32767 and its results are no longer NNAPI's exact
integer arithmetic. With weights in [-64, 64] a pair is at most 32640 and the
reference is exact on every x86-64 CPU; onnxruntime's quantizer documents this
pairing (QUInt8 activations, QInt8 weights, reduce_range) for CPUs without
VNNI. uint8 x uint8 and int8 x int8 do not saturate, so the other variants keep
8-bit weights. `mlts.bench.ort_exactness` checks the claim at run time.

The result depends on onnxruntime's quantizer, so the zoo keys the cached file
by onnxruntime's version as well as the generator version. The calibration
ranges come from onnxruntime's float kernels, whose results do not depend on
its thread count. They do not depend on the variant either (the same float
model on the same images), so they are computed once per float model and kept
in <cache>/quant_calibration/ (onnxruntime's own JSON calibration cache, whose
round trip is exact), keyed by the preprocessed float model's bytes, the
calibration images' bytes, onnxruntime's version and the generator version;
the other variants of that float model read them. A cache file that cannot be
read is removed with a warning and the ranges are computed again.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from mlts.datasets.images import QUANT_SCALE

QUANT_GENERATOR_VERSION = "2"
CALIBRATION_IMAGES = 32
CALIBRATION_START = 100_000
INPUT_SCALE = QUANT_SCALE  # 1/128; MLTS prints it as 0.007812
SOFTMAX_SCALE = 1.0 / 256.0


@dataclass(frozen=True, slots=True)
class Variant:
    """How one family of quantized models is made."""

    suffix: str
    signed: bool
    per_channel: bool
    description: str
    reduce_range: bool = False  # 7-bit weights, so onnxruntime is exact without VNNI (see above)

    @property
    def dtype(self) -> str:
        return "int8" if self.signed else "uint8"

    @property
    def weights(self) -> str:
        if self.per_channel:
            return "int8 per-channel"
        return "int8" if self.signed else "uint8"

    @property
    def input_zero_point(self) -> int:
        return 0 if self.signed else 128

    @property
    def output_zero_point(self) -> int:
        return -128 if self.signed else 0


VARIANTS: dict[str, Variant] = {
    v.suffix: v
    for v in (
        Variant("_quant", False, False, "uint8 activations, per-tensor uint8 weights"),
        Variant("_quant_signed", True, False, "int8 activations, per-tensor symmetric int8 weights"),
        Variant(
            "_quant_perchannel",
            False,
            True,
            "uint8 activations, per-channel symmetric int8 weights (7-bit range)",
            reduce_range=True,
        ),
    )
}


log = logging.getLogger("mlts.models")


def calibration_batch(resolution: int) -> np.ndarray:
    """The preprocessed procedural images every quantized model of this resolution is calibrated on."""
    from mlts.datasets.images import image_batch

    return image_batch(CALIBRATION_IMAGES, resolution, start=CALIBRATION_START)


def calibration_cache_path(preprocessed: bytes, batch: np.ndarray) -> Path:
    """Where the MinMax ranges of `preprocessed` (a float model's bytes) on `batch` are kept."""
    import onnxruntime

    from mlts.datasets.cache import cache_root

    h = hashlib.sha256()
    h.update(f"q{QUANT_GENERATOR_VERSION}|ort{onnxruntime.__version__}|MinMax|".encode())
    h.update(hashlib.sha256(preprocessed).digest())
    batch = np.ascontiguousarray(batch)
    h.update(f"{batch.dtype.str}{batch.shape}".encode())
    h.update(batch.tobytes())
    return cache_root() / "quant_calibration" / f"{h.hexdigest()}.json"


def _usable_calibration(path: Path) -> bool:
    """Whether `path` holds MinMax ranges onnxruntime can load; an unreadable file is removed with a warning."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, load_tensors_data

    if not path.is_file():
        return False
    try:
        ranges = load_tensors_data(path)
        if ranges.calibration_method != CalibrationMethod.MinMax or not ranges.data:
            raise ValueError("not MinMax ranges of any tensor")
        return True
    except Exception as e:  # any damage: malformed JSON, missing keys, wrong types
        reason = " ".join(str(e).split()) or type(e).__name__
        log.warning("ignoring unusable calibration cache %s: %s; computing the ranges again", path, reason)
        path.unlink(missing_ok=True)
        return False


class _Images:
    """onnxruntime CalibrationDataReader over preprocessed procedural images (float input)."""

    def __init__(self, input_name: str, batch: np.ndarray) -> None:
        self._name = input_name
        self._feeds = iter(batch[i : i + 1] for i in range(len(batch)))

    def get_next(self) -> dict[str, np.ndarray] | None:
        x = next(self._feeds, None)
        return None if x is None else {self._name: x}


def _override(scale: float, zero_point: int, signed: bool) -> list[dict]:
    dtype = np.int8 if signed else np.uint8
    return [{"scale": np.array(scale, dtype=np.float32), "zero_point": np.array(zero_point, dtype=dtype)}]


def quantize(float_model: onnx.ModelProto, variant: Variant, resolution: int) -> onnx.ModelProto:
    """The quantized QDQ model of `float_model` (input "input", output "probabilities") for `variant`."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(_Images, CalibrationDataReader):
        pass

    act = QuantType.QInt8 if variant.signed else QuantType.QUInt8
    weight = QuantType.QInt8 if (variant.signed or variant.per_channel) else QuantType.QUInt8
    with tempfile.TemporaryDirectory(prefix="mlts-quant-") as tmp:
        src, pre, out = (Path(tmp) / n for n in ("float.onnx", "pre.onnx", "quant.onnx"))
        onnx.save(float_model, str(src))
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        batch = calibration_batch(resolution)
        ranges = calibration_cache_path(pre.read_bytes(), batch)
        ranges.parent.mkdir(parents=True, exist_ok=True)
        _usable_calibration(ranges)
        quantize_static(
            str(pre),
            str(out),
            Reader("input", batch),
            calibration_cache_path=ranges,
            quant_format=QuantFormat.QDQ,
            activation_type=act,
            weight_type=weight,
            per_channel=variant.per_channel,
            reduce_range=variant.reduce_range,
            extra_options={
                "TensorQuantOverrides": {
                    "input": _override(INPUT_SCALE, variant.input_zero_point, variant.signed),
                    "probabilities": _override(SOFTMAX_SCALE, variant.output_zero_point, variant.signed),
                },
            },
        )
        model = onnx.load(str(out))
    return _integer_io(model, variant)


def _integer_io(model: onnx.ModelProto, variant: Variant) -> onnx.ModelProto:
    """Drop the input's QuantizeLinear and the output's DequantizeLinear: 8-bit image in, 8-bit scores out."""
    g = model.graph
    (inp,) = g.input
    (outp,) = g.output
    q_in = [n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] == inp.name]
    dq_out = [n for n in g.node if n.op_type == "DequantizeLinear" and n.output[0] == outp.name]
    if len(q_in) != 1 or len(dq_out) != 1:
        raise RuntimeError(
            "quantized model does not have one input QuantizeLinear and one output DequantizeLinear"
        )
    q, dq = q_in[0], dq_out[0]
    elem = onnx.TensorProto.INT8 if variant.signed else onnx.TensorProto.UINT8
    for node in g.node:
        for i, name in enumerate(node.input):
            if name == q.output[0]:
                node.input[i] = inp.name
    producer = next(n for n in g.node if dq.input[0] in n.output)
    producer.output[list(producer.output).index(dq.input[0])] = outp.name
    g.node.remove(q)
    g.node.remove(dq)
    inp.type.tensor_type.elem_type = elem
    outp.type.tensor_type.elem_type = elem
    used = {n.domain for n in g.node}
    keep = [o for o in model.opset_import if o.domain in ("", "ai.onnx") or o.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(keep)
    del g.value_info[:]
    model.producer_name = "mlts"
    model.doc_string = (
        "Synthetic-weight MobileNet quantized by onnxruntime static quantization (QDQ); "
        f"{variant.description}; input scale {INPUT_SCALE} zero point {variant.input_zero_point}."
    )
    meta = {
        "mlts.quant.variant": variant.suffix.lstrip("_"),
        "mlts.quant.generator_version": QUANT_GENERATOR_VERSION,
        "mlts.quant.calibration": f"MinMax on {CALIBRATION_IMAGES} procedural images from index {CALIBRATION_START}",
    }
    for key, value in meta.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    onnx.checker.check_model(model)
    return model
