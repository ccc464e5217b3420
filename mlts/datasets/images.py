"""Deterministic procedural images with natural-image statistics, and MLTS's Inception preprocessing.

No image set can be downloaded, so test inputs are generated: per-channel 1/f
noise with strongly correlated colours (natural images have an amplitude
spectrum close to 1/f and colour channels that mostly share luminance), a
smooth illumination gradient and a few soft-edged shapes with their own
colour and texture. The image index seeds everything.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

IMAGE_SIZE = 256
"""Side of the source images `image_batch` generates before preprocessing."""

CROP_FRACTION = 0.875
QUANT_SCALE = 1.0 / 128.0
"""MLTS's quantized input scale: it prints 0.007812, the quantized MobileNets store exactly 1/128."""
QUANT_ZERO_POINT = 128
LAYOUTS = ("NCHW", "NHWC")

# Mixed into every seed so these images never share a stream with weight generators.
_SALT = 0x6D6C_7473

# Values per block of quantize_images.
_QUANTIZE_BLOCK = 1 << 16


@lru_cache(maxsize=8)
def _radial_frequency(size: int) -> np.ndarray:
    """|f| on the rfft2 grid, with the DC term set to 1 so powers stay finite."""
    fy = np.fft.fftfreq(size)[:, None]
    fx = np.fft.rfftfreq(size)[None, :]
    f = np.sqrt(fy * fy + fx * fx).astype(np.float32)
    f[0, 0] = 1.0
    return f


def _pink_noise(rng: np.random.Generator, size: int, exponent: float) -> np.ndarray:
    """Three channels of zero-mean, unit-std noise with amplitude spectrum 1/f**exponent."""
    freq = _radial_frequency(size)
    # Uniform real and imaginary parts are 5x cheaper to draw than normal ones, and the
    # inverse FFT sums so many of them that the field is Gaussian anyway.
    white = rng.random((3, *freq.shape, 2), dtype=np.float32).view(np.complex64)[..., 0] - (0.5 + 0.5j)
    amplitude = freq**-exponent
    amplitude[0, 0] = 0.0  # zero mean
    noise = np.fft.irfft2(white * amplitude, s=(size, size))
    std = np.sqrt(np.mean(noise * noise, axis=(1, 2), keepdims=True, dtype=np.float64))
    return (noise / std.astype(np.float32)).astype(np.float32, copy=False)


def _correlated_texture(rng: np.random.Generator, noise: np.ndarray) -> np.ndarray:
    """[3, H, W]: a shared luminance field plus weaker random chroma fields."""
    chroma_mix = rng.normal(0.0, 0.3, size=(3, 2)).astype(np.float32)
    return noise[0][None] + np.einsum("kc,chw->khw", chroma_mix, noise[1:])


def _paint_shape(rng: np.random.Generator, image: np.ndarray, texture: np.ndarray, axis: np.ndarray) -> None:
    """Blend one soft-edged rotated superellipse (ellipse- or box-like) with its own colour into `image`."""
    size = axis.size
    # Python floats are "weak" scalars in NumPy 2, so the float32 grids stay float32.
    cy, cx = (float(v) for v in rng.uniform(0.1, 0.9, size=2))
    ry, rx = (float(v) for v in rng.uniform(0.08, 0.35, size=2))
    angle = float(rng.uniform(0.0, np.pi))
    power = float(rng.choice((2.0, 6.0)))
    softness = float(rng.uniform(0.005, 0.04))
    lum = float(rng.uniform(20.0, 235.0))
    colour = (lum + rng.normal(0.0, 30.0, size=3)).astype(np.float32)
    gain = float(rng.uniform(5.0, 35.0))
    shift = tuple(int(v) for v in rng.integers(0, size, size=2))

    # Only the bounding box (plus the soft edge) is touched: that keeps generation fast.
    reach = max(rx, ry) * 2**0.5 + 8 * softness
    y0, y1 = (int(np.clip(np.floor((cy + d) * size), 0, size)) for d in (-reach, reach + 1 / size))
    x0, x1 = (int(np.clip(np.floor((cx + d) * size), 0, size)) for d in (-reach, reach + 1 / size))
    yy, xx = axis[y0:y1, None] - cy, axis[None, x0:x1] - cx
    c, s = math.cos(angle), math.sin(angle)
    u = np.abs((xx * c + yy * s) / rx)
    v = np.abs((yy * c - xx * s) / ry)
    if power == 2.0:
        radius = np.sqrt(u * u + v * v)
    else:
        u, v = u * u * u, v * v * v
        radius = np.cbrt(np.sqrt(u * u + v * v))
    edge = (radius - 1.0) * (min(rx, ry) / softness)
    mask = 1.0 / (1.0 + np.exp(np.clip(edge, -30.0, 30.0)))
    # Each shape sees the shared texture at its own offset so surfaces differ.
    surface = colour[:, None, None] + gain * np.roll(texture, shift, axis=(1, 2))[:, y0:y1, x0:x1]
    window = image[:, y0:y1, x0:x1]
    window += mask * (surface - window)


def procedural_image(index: int, size: int = IMAGE_SIZE) -> np.ndarray:
    """The procedural image number `index`: uint8 [size, size, 3], identical on every call."""
    if index < 0:
        raise ValueError(f"image index {index} is negative; valid indexes are integers >= 0")
    if size < 8:
        raise ValueError(f"image size {size} is too small; valid sizes are integers >= 8")
    rng = np.random.default_rng([_SALT, int(index)])
    texture = _correlated_texture(rng, _pink_noise(rng, size, float(rng.uniform(0.9, 1.3))))
    axis = (np.arange(size, dtype=np.float32) + 0.5) / np.float32(size)
    yy, xx = axis[:, None], axis[None, :]

    base = (rng.uniform(50.0, 190.0) + rng.normal(0.0, 25.0, size=3)).astype(np.float32)
    direction = float(rng.uniform(0.0, 2.0 * math.pi))
    ramp = math.cos(direction) * (xx - 0.5) + math.sin(direction) * (yy - 0.5)
    shade = (rng.uniform(-70.0, 70.0) * (1.0 + rng.normal(0.0, 0.15, size=3))).astype(np.float32)
    contrast = float(rng.uniform(18.0, 40.0))
    image = base[:, None, None] + shade[:, None, None] * ramp + contrast * texture

    for _ in range(int(rng.integers(2, 6))):
        _paint_shape(rng, image, texture, axis)

    return np.clip(np.rint(image), 0, 255).astype(np.uint8).transpose(1, 2, 0).copy()


def _resize_weights(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indexes and weights of bilinear resizing with half-pixel centres (edge-clamped)."""
    src = (np.arange(out_size, dtype=np.float64) + 0.5) * (in_size / out_size) - 0.5
    lower = np.floor(src)
    frac = (src - lower).astype(np.float32)
    i0 = np.clip(lower, 0, in_size - 1).astype(np.intp)
    i1 = np.clip(lower + 1, 0, in_size - 1).astype(np.intp)
    return i0, i1, frac


def center_crop_box(height: int, width: int) -> tuple[int, int, int]:
    """(top, left, side) of the square centre crop of side round(0.875 * min(height, width))."""
    side = max(1, int(round(CROP_FRACTION * min(height, width))))
    return (height - side) // 2, (width - side) // 2, side


def inception_preprocess(image: np.ndarray, resolution: int) -> np.ndarray:
    """MLTS "Inception" preprocessing: centre crop, bilinear resize, map [0, 255] to [-1, 1]."""
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image has shape {image.shape}; expected [height, width, 3] (HWC, RGB)")
    if resolution < 1:
        raise ValueError(f"resolution {resolution} is invalid; expected an integer >= 1")
    top, left, side = center_crop_box(image.shape[0], image.shape[1])
    crop = image[top : top + side, left : left + side].astype(np.float32)
    i0, i1, f = _resize_weights(side, resolution)
    fy = f[:, None, None]
    rows = crop[i0] * (1 - fy) + crop[i1] * fy
    fx = f[None, :, None]
    out = rows[:, i0] * (1 - fx) + rows[:, i1] * fx
    return out * np.float32(2.0 / 255.0) - np.float32(1.0)


def fit_preprocess(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """An image for an input of `height` x `width`: a square one gets inception_preprocess; any other the
    centre crop of that aspect ratio (0.875 of the largest that fits), bilinear resize, [0, 255] to [-1, 1]."""
    if height == width:
        return inception_preprocess(image, height)
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image has shape {image.shape}; expected [height, width, 3] (HWC, RGB)")
    if height < 1 or width < 1:
        raise ValueError(f"size {height}x{width} is invalid; expected integers >= 1")
    h, w = image.shape[:2]
    scale = CROP_FRACTION * min(h / height, w / width)
    ch, cw = max(1, int(round(height * scale))), max(1, int(round(width * scale)))
    top, left = (h - ch) // 2, (w - cw) // 2
    crop = image[top : top + ch, left : left + cw].astype(np.float32)
    y0, y1, fy = _resize_weights(ch, height)
    x0, x1, fx = _resize_weights(cw, width)
    rows = crop[y0] * (1 - fy[:, None, None]) + crop[y1] * fy[:, None, None]
    out = rows[:, x0] * (1 - fx[None, :, None]) + rows[:, x1] * fx[None, :, None]
    return out * np.float32(2.0 / 255.0) - np.float32(1.0)


def quantize_input(x: np.ndarray) -> np.ndarray:
    """Quantize preprocessed floats to MLTS's uint8 input: scale 1/128 (MLTS prints 0.007812), zero point 128."""
    return quantize_images(x, QUANT_SCALE, QUANT_ZERO_POINT, np.uint8)


def quantize_images(x: np.ndarray, scale: float, zero_point: int, dtype: type) -> np.ndarray:
    """round(x / scale) + zero_point (ties away from zero), saturated to `dtype` (uint8 or int8)."""
    if not scale > 0:
        raise ValueError(f"quantization scale {scale!r} must be > 0")
    info = np.iinfo(dtype)
    x = np.asarray(x)
    flat = x.reshape(-1)
    out: np.ndarray = np.empty(flat.shape, dtype)
    # In float64 blocks that stay in the CPU cache: a whole image set at once is several times slower.
    step = min(flat.size, _QUANTIZE_BLOCK) or 1
    scaled, rounded = np.empty(step, np.float64), np.empty(step, np.float64)
    for start in range(0, flat.size, step):
        n = min(step, flat.size - start)
        s, r = scaled[:n], rounded[:n]
        np.divide(flat[start : start + n], scale, out=s, dtype=np.float64)
        np.abs(s, out=r)
        r += 0.5
        np.floor(r, out=r)
        np.copysign(r, s, out=r)
        r += zero_point
        np.clip(r, info.min, info.max, out=r)
        out[start : start + n] = r
    return out.reshape(x.shape)


def image_batch(
    count: int, resolution: int, *, start: int = 0, layout: str = "NCHW", width: int | None = None
) -> np.ndarray:
    """Preprocessed procedural images start..start+count-1 as float32 [count, 3, D, D] (or NHWC);
    with `width`, [count, 3, D, width] (fit_preprocess)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not supported; valid layouts are {', '.join(LAYOUTS)}")
    if count < 0:
        raise ValueError(f"image count {count} is negative; expected an integer >= 0")
    width = resolution if width is None else width
    batch = np.empty((count, resolution, width, 3), dtype=np.float32)
    for i in range(count):
        batch[i] = fit_preprocess(procedural_image(start + i), resolution, width)
    if layout == "NCHW":
        return np.ascontiguousarray(batch.transpose(0, 3, 1, 2))
    return batch
