"""Benchmark inputs: procedural images for image models, seeded non-zero tensors otherwise."""

from __future__ import annotations

import numpy as np


def make_inputs(specs, count: int, seed: int = 0) -> list[list[np.ndarray]]:
    """`count` input sets; `specs` are (shape, dtype) per model input, batch dims already fixed."""
    from mlts.datasets.images import image_batch

    sets: list[list[np.ndarray]] = [[] for _ in range(count)]
    for k, (shape, dtype) in enumerate(specs):
        shape = tuple(int(d) for d in shape)
        is_image = (
            len(shape) == 4 and shape[1] == 3 and shape[2] == shape[3] and np.dtype(dtype) == np.float32
        )
        if is_image:
            batch = shape[0]
            images = image_batch(count * batch, shape[2], start=0, layout="NCHW")
            for i in range(count):
                sets[i].append(np.ascontiguousarray(images[i * batch : (i + 1) * batch]))
        else:
            rng = np.random.default_rng(seed + 7919 * k)
            for i in range(count):
                if np.issubdtype(np.dtype(dtype), np.floating):
                    arr = rng.standard_normal(shape).astype(dtype)
                else:
                    arr = rng.integers(0, 8, size=shape).astype(dtype)
                sets[i].append(arr)
    return sets
