"""Benchmark inputs that fit the model: images, signals, recurrent state, token ids, masks, seeded values.

Each model input gets the kind of data its shape, type and use say it takes (`input_kind`):

- image: a 4-D input with 3 channels (NCHW or NHWC), float32 or 8-bit with a scale: the procedural
  images of `mlts.datasets.images`, preprocessed to its height and width (quantized with its scale
  and zero point for 8-bit inputs, so a quantized model sees what its float model sees);
- signal: a float input of rank 1, 2 or [N, 1, T] with at least SIGNAL_MIN_SAMPLES samples, or
  one named like audio: a speech-like waveform (a voiced harmonic tone gliding in pitch, syllable
  envelopes, a little noise) at 16 kHz, peak about 0.5;
- state: recurrent state (an input an LSTM/GRU/RNN reads as its initial state, or named so): zeros,
  as at the start of a sequence (small seeded values when every input of the model is state);
- tokens: integers that index a table (Gather of an initializer): ids in 1..min(rows, 1000) - 1;
- mask: integer or boolean inputs named like a mask: all ones (everything attended);
- other inputs: seeded values that are never all zero (normal floats, integers 1..7, booleans
  with both values, 8-bit values over their whole range); a scalar float is in [0.5, 1.5].
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: A float input of rank 1 or 2 with at least this many samples on its last axis is a signal.
SIGNAL_MIN_SAMPLES = 1024
SAMPLE_RATE = 16_000
_AUDIO_NAME = re.compile(r"audio|wav|waveform|signal|pcm|speech|samples", re.IGNORECASE)
_SALT = 0x5349_474E  # mixed into signal seeds so they never share a stream with other generators


@dataclass(frozen=True)
class InputSpec:
    """One model input as the generator sees it (role and vocab from the ONNX graph, when known)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float = 0.0
    zero_point: int = 0
    role: str = ""
    vocab: int | None = None

    @classmethod
    def of(cls, spec) -> InputSpec:
        """An InputSpec from one, or from a (shape, dtype) or (shape, dtype, scale, zero_point) tuple."""
        if isinstance(spec, InputSpec):
            return spec
        scale, zero_point = (float(spec[2]), int(spec[3])) if len(spec) > 2 else (0.0, 0)
        return cls("", tuple(int(d) for d in spec[0]), np.dtype(spec[1]), scale, zero_point)


def image_layout(shape: tuple[int, ...], dtype: np.dtype, scale: float) -> str | None:
    """ "NCHW" or "NHWC" for an image input (4-D, 3 channels, at least 8x8), else None."""
    quantized = np.dtype(dtype) in (np.dtype(np.uint8), np.dtype(np.int8)) and scale > 0
    if len(shape) != 4 or not (np.dtype(dtype) == np.float32 or quantized):
        return None
    if shape[1] == 3 and min(shape[2], shape[3]) >= 8:
        return "NCHW"
    if shape[3] == 3 and min(shape[1], shape[2]) >= 8:
        return "NHWC"
    return None


def input_kind(spec: InputSpec) -> str:
    """image, signal, state, tokens, mask, bool, quantized, integers or values (see the module doc)."""
    dtype = np.dtype(spec.dtype)
    if image_layout(spec.shape, dtype, spec.scale) is not None:
        return "image"
    if spec.role in ("state", "tokens", "mask") and (spec.role != "state" or dtype.kind == "f"):
        return spec.role
    if dtype.kind == "b":
        return "bool"
    if dtype.kind in "iu":
        return "quantized" if spec.scale > 0 else "integers"
    rank = len(spec.shape)
    signal_shape = rank in (1, 2) or (rank == 3 and spec.shape[1] == 1)
    if signal_shape and (
        spec.shape[-1] >= SIGNAL_MIN_SAMPLES or (_AUDIO_NAME.search(spec.name) and spec.shape[-1] >= 64)
    ):
        return "signal"
    return "values"


def speech_like(index: int, length: int, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Waveform number `index`: float32 [length], a voiced tone with gliding pitch under syllable envelopes."""
    rng = np.random.default_rng([_SALT, int(index)])
    t = np.arange(length, dtype=np.float64) / sample_rate
    f0 = rng.uniform(90.0, 300.0) * (
        1.0 + 0.12 * np.sin(2 * math.pi * rng.uniform(0.3, 2.0) * t + rng.uniform(0, 6))
    )
    phase = 2 * math.pi * np.cumsum(f0) / sample_rate
    voiced = sum(np.sin(h * phase + rng.uniform(0, 2 * math.pi)) / h for h in range(1, 7))
    rate = rng.uniform(3.0, 5.0)  # syllables per second
    envelope = np.clip(
        np.sin(2 * math.pi * rate * t / 2 + rng.uniform(0, math.pi)) ** 2 * 1.2 - 0.1, 0.0, 1.0
    )
    wave = envelope * voiced / max(1e-9, float(np.abs(voiced).max())) + rng.normal(0.0, 0.01, length)
    return (0.5 * wave / max(1e-9, float(np.abs(wave).max()))).astype(np.float32)


def _images(spec: InputSpec, count: int, start: int, imageset=None) -> list[np.ndarray]:
    """`count` feeds of `spec`'s batch of images from image `start` on (of `imageset`, or procedural)."""
    from mlts.datasets.images import image_batch, quantize_images

    layout = image_layout(spec.shape, np.dtype(spec.dtype), spec.scale)
    assert layout is not None
    batch = spec.shape[0]
    h, w = (spec.shape[2], spec.shape[3]) if layout == "NCHW" else (spec.shape[1], spec.shape[2])
    needed = count * batch
    if imageset is not None and start + needed <= imageset.size:
        images = imageset.fitted(h, w, layout)[start : start + needed]
    else:
        images = image_batch(needed, h, start=start, layout=layout, width=w)
    if np.dtype(spec.dtype) != np.float32:
        images = quantize_images(images, spec.scale, spec.zero_point, np.dtype(spec.dtype).type)
    return [np.ascontiguousarray(images[i * batch : (i + 1) * batch]) for i in range(count)]


def _signals(spec: InputSpec, count: int, start: int) -> list[np.ndarray]:
    rows = int(np.prod(spec.shape[:-1], dtype=np.int64))
    out = []
    for i in range(count):
        waves = [speech_like(start + i * rows + r, spec.shape[-1]) for r in range(rows)]
        out.append(np.stack(waves).reshape(spec.shape).astype(spec.dtype))
    return out


def _values(spec: InputSpec, kind: str, rng: np.random.Generator) -> np.ndarray:
    """One seeded array of `spec` that is never all zero (state aside)."""
    shape, dtype = spec.shape, np.dtype(spec.dtype)
    if kind == "state":
        return np.zeros(shape, dtype)
    if kind == "mask":
        return np.ones(shape, dtype)
    if kind == "tokens":
        top = max(2, min(spec.vocab or 100, 1000))
        return rng.integers(1, top, size=shape).astype(dtype)
    if kind == "bool":
        arr = rng.random(shape) < 0.5
        if arr.size and not arr.any():
            arr.flat[0] = True
        return arr.astype(dtype)
    if kind == "quantized":
        info = np.iinfo(dtype)
        values = rng.integers(int(info.min), int(info.max) + 1, size=shape)
        return np.where(values == spec.zero_point, spec.zero_point + 1, values).astype(dtype)
    if kind == "integers":
        return rng.integers(1, 8, size=shape).astype(dtype)
    if not shape:
        return np.asarray(rng.uniform(0.5, 1.5), dtype)
    return rng.standard_normal(shape).astype(dtype)


def make_inputs(specs: Sequence, count: int, seed: int = 0, imageset=None) -> list[list[np.ndarray]]:
    """`count` input sets; `specs` are InputSpecs or (shape, dtype[, scale, zero_point]) per model input.

    Each input gets data of its kind (`input_kind`; the module doc). Image inputs take images
    0..count*batch-1 of `imageset` (when it has that many), else the procedural ones; a second image
    input goes on from where the first stopped.
    """
    specs = [InputSpec.of(s) for s in specs]
    kinds = [input_kind(s) for s in specs]
    sets: list[list[np.ndarray]] = [[] for _ in range(count)]
    images = 0
    for k, (spec, kind) in enumerate(zip(specs, kinds, strict=True)):
        if kind == "image":
            arrays = _images(spec, count, images, imageset)
            images += count * spec.shape[0]
        elif kind == "signal":
            arrays = _signals(spec, count, 7919 * k)
        else:
            rng = np.random.default_rng(seed + 7919 * k)
            if kind == "state" and all(c == "state" for c in kinds):
                kind = "values"  # nothing else would be non-zero: never time all-zero inputs
            arrays = [_values(spec, kind, rng) for _ in range(count)]
        for i in range(count):
            sets[i].append(arrays[i])
    return sets
