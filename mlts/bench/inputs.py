"""Benchmark inputs: procedural images for image models (quantized for 8-bit inputs), seeded non-zero tensors otherwise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _is_image(shape: tuple[int, ...], dtype: np.dtype, scale: float) -> bool:
    square_rgb = len(shape) == 4 and shape[1] == 3 and shape[2] == shape[3]
    quantized = dtype in (np.dtype(np.uint8), np.dtype(np.int8)) and scale > 0
    return square_rgb and (dtype == np.float32 or quantized)


def make_inputs(specs: Sequence[tuple], count: int, seed: int = 0) -> list[list[np.ndarray]]:
    """`count` input sets; `specs` are (shape, dtype) or (shape, dtype, scale, zero_point) per model input.

    NCHW RGB image inputs get the preprocessed procedural images 0..count-1 of
    `mlts.datasets.images`; an 8-bit image input with a scale gets the same
    images quantized with its scale and zero point, so a quantized model sees
    what its float model sees. Other inputs get seeded non-zero values.
    """
    from mlts.datasets.images import image_batch, quantize_images

    sets: list[list[np.ndarray]] = [[] for _ in range(count)]
    for k, spec in enumerate(specs):
        shape = tuple(int(d) for d in spec[0])
        dtype = np.dtype(spec[1])
        scale, zero_point = (float(spec[2]), int(spec[3])) if len(spec) > 2 else (0.0, 0)
        if _is_image(shape, dtype, scale):
            batch = shape[0]
            images = image_batch(count * batch, shape[2], start=0, layout="NCHW")
            if dtype != np.float32:
                images = quantize_images(images, scale, zero_point, dtype.type)
            for i in range(count):
                sets[i].append(np.ascontiguousarray(images[i * batch : (i + 1) * batch]))
        else:
            rng = np.random.default_rng(seed + 7919 * k)
            for i in range(count):
                if np.issubdtype(dtype, np.floating):
                    arr = rng.standard_normal(shape).astype(dtype)
                else:
                    arr = rng.integers(0, 8, size=shape).astype(dtype)
                sets[i].append(arr)
    return sets
