"""Procedural images, Inception preprocessing and input quantization, against hand-computed and float64 references."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlts.datasets.images import (
    QUANT_SCALE,
    image_batch,
    inception_preprocess,
    procedural_image,
    quantize_images,
    quantize_input,
)


def _bilinear_reference(img: np.ndarray, out: int) -> np.ndarray:
    """Half-pixel-centre bilinear resize of a square float64 image, one output pixel at a time."""
    n = img.shape[0]
    res = np.zeros((out, out, img.shape[2]))
    for oy in range(out):
        for ox in range(out):
            sy = min(max((oy + 0.5) * n / out - 0.5, 0.0), n - 1.0)
            sx = min(max((ox + 0.5) * n / out - 0.5, 0.0), n - 1.0)
            y0, x0 = math.floor(sy), math.floor(sx)
            y1, x1 = min(y0 + 1, n - 1), min(x0 + 1, n - 1)
            dy, dx = sy - y0, sx - x0
            res[oy, ox] = (
                img[y0, x0] * (1 - dy) * (1 - dx)
                + img[y0, x1] * (1 - dy) * dx
                + img[y1, x0] * dy * (1 - dx)
                + img[y1, x1] * dy * dx
            )
    return res


def test_procedural_images_are_deterministic_and_distinct():
    a, b = procedural_image(7), procedural_image(7)
    assert a.shape == (256, 256, 3) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, procedural_image(8))
    assert procedural_image(3, size=64).shape == (64, 64, 3)


def test_procedural_images_have_natural_statistics():
    imgs = np.stack([procedural_image(i) for i in range(8)]).astype(np.float64)
    assert 70 < imgs.mean() < 180
    assert all(img.std() > 20 for img in imgs)
    # Colour channels share most of their structure, as in photographs.
    corr = [np.corrcoef(img.reshape(-1, 3).T)[np.triu_indices(3, 1)].mean() for img in imgs]
    assert np.mean(corr) > 0.5
    # The power spectrum falls roughly as 1/f^2 (slope -2 on log-log axes).
    lum = imgs.mean(axis=3)
    power = np.mean([np.abs(np.fft.fft2(x - x.mean())) ** 2 for x in lum], axis=0)
    f = np.hypot(*np.meshgrid(np.fft.fftfreq(256), np.fft.fftfreq(256), indexing="ij"))
    band = (f > 0.02) & (f < 0.25)
    slope = np.polyfit(np.log(f[band]), np.log(power[band]), 1)[0]
    assert -3.2 < slope < -1.4, slope


def test_negative_index_is_rejected():
    with pytest.raises(ValueError, match="index -1"):
        procedural_image(-1)


def test_preprocess_hand_computed_ramp():
    # 8x8 horizontal ramp 0,10,...,70: the crop is round(0.875*8)=7 pixels from (0, 0),
    # so columns 0..6 (0..60); resizing 7 -> 2 samples x = 1.25 and 4.75.
    img = np.tile((np.arange(8, dtype=np.uint8) * 10)[None, :, None], (8, 1, 3))
    out = inception_preprocess(img, 2)
    expected = np.array([12.5, 47.5]) * 2 / 255 - 1
    np.testing.assert_allclose(out[0, :, 0], expected, atol=1e-6)
    np.testing.assert_allclose(out[:, :, 1], out[:, :, 0])


@pytest.mark.parametrize("resolution", [4, 9, 13])
def test_preprocess_matches_float64_reference(resolution):
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, size=(10, 12, 3), dtype=np.uint8)
    # min side 10 -> crop side round(8.75) = 9 at top (10-9)//2 = 0, left (12-9)//2 = 1.
    crop = img[0:9, 1:10].astype(np.float64)
    expected = _bilinear_reference(crop, resolution) * 2 / 255 - 1
    out = inception_preprocess(img, resolution)
    assert out.dtype == np.float32 and out.shape == (resolution, resolution, 3)
    np.testing.assert_allclose(out, expected, atol=1e-5, rtol=0)


def test_preprocess_range_is_minus_one_to_one():
    assert np.all(inception_preprocess(np.zeros((20, 20, 3), np.uint8), 8) == -1.0)
    assert np.all(inception_preprocess(np.full((20, 20, 3), 255, np.uint8), 8) == 1.0)
    x = inception_preprocess(procedural_image(0), 224)
    assert x.min() >= -1.0 and x.max() <= 1.0


def test_preprocess_rejects_non_hwc_rgb():
    with pytest.raises(ValueError, match=r"\[height, width, 3\]"):
        inception_preprocess(np.zeros((3, 8, 8), np.uint8), 4)


def test_quantize_input_known_values():
    s = QUANT_SCALE
    x = np.array([0.0, 1.0, -1.0, 0.5 * s, -0.5 * s, 0.2, -0.2, 10 * s, 3.0, -3.0])
    # 0.2/s = 25.6 -> 26; +-0.5 rounds away from zero; +-1 and beyond saturate.
    expected = [128, 255, 0, 129, 127, 154, 102, 138, 255, 0]
    q = quantize_input(x)
    assert q.dtype == np.uint8
    assert q.tolist() == expected


@pytest.mark.parametrize(
    ("dtype", "scale", "zero_point"), [(np.uint8, QUANT_SCALE, 128), (np.int8, 0.0123, -3)]
)
def test_quantize_images_blocks_match_the_formula(dtype, scale, zero_point):
    # More values than one block, ties on both sides of zero, both saturation ends, an odd shape.
    rng = np.random.default_rng(1)
    x = (rng.random((3, 5, 97, 61), dtype=np.float32) * 4 - 2).astype(np.float32)
    ties = (np.arange(-300, 300) + 0.5) * scale
    x.reshape(-1)[: ties.size] = ties
    q = quantize_images(x, scale, zero_point, dtype)
    # round half away from zero in float64, then saturate: computed one value at a time.
    info = np.iinfo(dtype)
    want = [
        min(max(int(math.copysign(math.floor(abs(v / scale) + 0.5), v)) + zero_point, info.min), info.max)
        for v in x.reshape(-1).astype(np.float64).tolist()
    ]
    assert q.dtype == dtype and q.shape == x.shape
    assert q.reshape(-1).tolist() == want


def test_image_batch_layouts_and_offsets():
    nchw = image_batch(3, 32, start=5)
    nhwc = image_batch(3, 32, start=5, layout="NHWC")
    assert nchw.shape == (3, 3, 32, 32) and nchw.dtype == np.float32
    np.testing.assert_array_equal(nchw, nhwc.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(nhwc[1], inception_preprocess(procedural_image(6), 32))
    with pytest.raises(ValueError, match="NCHW, NHWC"):
        image_batch(1, 32, layout="CHW")
