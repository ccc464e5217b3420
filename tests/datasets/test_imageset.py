"""Image sets: the procedural set, a user's folder in MLTS's format (built with Pillow as PNG so pixels are exact)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mlts.datasets.images import image_batch, inception_preprocess, procedural_image, quantize_images
from mlts.datasets.imageset import (
    PROCEDURAL_AVAILABLE,
    DatasetError,
    check_classes,
    folder_set,
    procedural_set,
)

# Preprocessing runs in float32 on values up to 2: a few roundings of 2**-23 * 2 each.
PRE_ATOL = 1e-6


def _solid(rgb: tuple[int, int, int], h: int = 12, w: int = 12) -> np.ndarray:
    return np.broadcast_to(np.array(rgb, np.uint8), (h, w, 3)).copy()


def _dataset(
    root: Path,
    images: dict[str, np.ndarray | Image.Image],
    labels: list[str] | None = ("cat", "dog", "fish"),
    truth: list[str] | None = None,
) -> Path:
    """A folder with PNG images, labels.txt and ground_truth_labels.txt (skipped when None)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, img in images.items():
        (img if isinstance(img, Image.Image) else Image.fromarray(img)).save(root / name, format="PNG")
    if labels is not None:
        (root / "labels.txt").write_text("\n".join(labels) + "\n")
    if truth is not None:
        (root / "ground_truth_labels.txt").write_text("\n".join(truth) + "\n")
    return root


def _error(path, **kwargs) -> str:
    with pytest.raises(DatasetError) as info:
        folder_set(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- procedural set -------------------------------------------------------------------------------


def test_procedural_set_is_deterministic():
    a, b = procedural_set(3), procedural_set(3)
    assert (a.name, a.size, a.ground_truth, a.class_names, a.label_source) == (
        "procedural",
        3,
        None,
        None,
        "golden",
    )
    np.testing.assert_array_equal(a.raw(1), b.raw(1))
    np.testing.assert_array_equal(a.raw(2), procedural_image(2))
    assert not np.array_equal(a.raw(0), a.raw(1))
    np.testing.assert_array_equal(a.batch(24), b.batch(24))
    np.testing.assert_array_equal(a.batch(24), image_batch(3, 24))


def test_procedural_set_batches_are_memoised_and_read_only():
    s = procedural_set(2)
    nchw = s.batch(16)
    assert nchw.shape == (2, 3, 16, 16) and nchw.dtype == np.float32
    assert s.batch(16) is nchw
    nhwc = s.batch(16, "NHWC")
    assert nhwc.shape == (2, 16, 16, 3)
    np.testing.assert_array_equal(nhwc.transpose(0, 3, 1, 2), nchw)
    with pytest.raises(ValueError, match="read-only"):
        nchw[0, 0, 0, 0] = 1.0
    with pytest.raises(ValueError, match="valid layouts are NCHW, NHWC"):
        s.batch(16, "CHW")


def test_procedural_set_quantized_batches_are_memoised_and_read_only():
    s = procedural_set(2)
    q = s.quantized(16, 1 / 128, 128, np.uint8)
    assert q.dtype == np.uint8 and q.shape == (2, 3, 16, 16)
    np.testing.assert_array_equal(q, quantize_images(image_batch(2, 16), 1 / 128, 128, np.uint8))
    assert s.quantized(16, 1 / 128, 128, np.uint8) is q
    signed = s.quantized(16, 1 / 128, 0, np.int8)
    assert signed.dtype == np.int8 and signed is not q
    with pytest.raises(ValueError, match="read-only"):
        q[0, 0, 0, 0] = 1
    with pytest.raises(ValueError, match="read-only"):
        s.raw(0)[0, 0, 0] = 1


@pytest.mark.parametrize("count", [0, -1, PROCEDURAL_AVAILABLE + 1, 2.5, True])
def test_procedural_set_range(count):
    with pytest.raises(ValueError, match=f"valid counts are 1..{PROCEDURAL_AVAILABLE}"):
        procedural_set(count)


def test_procedural_set_limits():
    assert procedural_set(PROCEDURAL_AVAILABLE).size == PROCEDURAL_AVAILABLE
    with pytest.raises(IndexError, match="has images 0..1"):
        procedural_set(2).raw(2)
    assert check_classes(procedural_set(1), 1001) == 0
    assert procedural_set(1).labels_for(1001) is None


# --- preprocessing against hand-computed pixels ---------------------------------------------------


def test_constant_image_preprocesses_to_its_scaled_colour(tmp_path):
    d = _dataset(tmp_path / "d", {"img-1.png": _solid((0, 51, 255), 20, 16)}, truth=["cat"])
    out = folder_set(d).batch(5, "NHWC")
    expected = np.array([0, 51, 255]) * 2 / 255 - 1  # -1, -0.6, 1
    np.testing.assert_allclose(out, np.broadcast_to(expected, (1, 5, 5, 3)), rtol=0, atol=PRE_ATOL)


def test_linear_ramps_preprocess_by_hand(tmp_path):
    # 40 x 32 image: red = 8*x, green = 4*y, blue = 77.
    # Crop side round(0.875*32) = 28 at top (40-28)//2 = 6, left (32-28)//2 = 2.
    # Resizing 28 -> 7 samples crop pixel 4*o + 1.5 (half-pixel centres, no clamping), so
    # red = 8*(4*o + 1.5 + 2) = 32*o + 28 and green = 4*(4*o + 1.5 + 6) = 16*o + 30.
    y, x = np.mgrid[0:40, 0:32]
    img = np.stack([8 * x, 4 * y, np.full_like(x, 77)], axis=-1).astype(np.uint8)
    d = _dataset(tmp_path / "d", {"img-0.png": img}, truth=["dog"])
    out = folder_set(d).batch(7)  # NCHW
    o = np.arange(7, dtype=np.float64)
    red = np.broadcast_to((32 * o + 28)[None, :], (7, 7))
    green = np.broadcast_to((16 * o + 30)[:, None], (7, 7))
    blue = np.full((7, 7), 77.0)
    expected = np.stack([red, green, blue])[None] * 2 / 255 - 1
    np.testing.assert_allclose(out, expected, rtol=0, atol=PRE_ATOL)


# --- folder sets ----------------------------------------------------------------------------------


def test_folder_images_pair_with_ground_truth_in_number_order(tmp_path):
    colours = {"img-10.png": (10, 0, 0), "img-2.png": (2, 0, 0), "img-1.png": (1, 0, 0)}
    d = _dataset(tmp_path / "d", {n: _solid(c) for n, c in colours.items()}, truth=["fish", "cat", "dog"])
    s = folder_set(d)
    assert (s.name, s.size, s.label_source) == (str(d), 3, "ground_truth")
    assert s.class_names == ["cat", "dog", "fish"]
    # Sorted by number 1, 2, 10; line i of the ground truth belongs to the i-th image.
    assert [int(s.raw(i)[0, 0, 0]) for i in range(3)] == [1, 2, 10]
    assert s.ground_truth == [2, 0, 1]
    assert s.labels_for(3) == [2, 0, 1]
    expected = np.stack([inception_preprocess(s.raw(i), 8) for i in range(3)]).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(s.batch(8), expected)


def test_folder_without_numbered_names_uses_natural_order(tmp_path):
    colours = {"b.png": (3, 0, 0), "a10.png": (2, 0, 0), "a2.png": (1, 0, 0)}
    d = _dataset(tmp_path / "d", {n: _solid(c) for n, c in colours.items()}, truth=["cat", "dog", "fish"])
    s = folder_set(d)
    assert [int(s.raw(i)[0, 0, 0]) for i in range(3)] == [1, 2, 3]


def test_folder_count_takes_the_first_images(tmp_path):
    imgs = {f"x-{i}.png": _solid((i, i, i)) for i in range(3)}
    d = _dataset(tmp_path / "d", imgs, truth=["dog", "fish", "cat"])
    s = folder_set(d, count=2)
    assert s.size == 2 and s.ground_truth == [1, 2]
    assert "1..3" in _error(d, count=4)
    assert "1..3" in _error(d, count=0)


def test_background_offset(tmp_path):
    labels = [f"class {i}" for i in range(1000)]
    d = _dataset(tmp_path / "d", {"im-1.png": _solid((1, 2, 3))}, labels=labels, truth=["class 0"])
    s = folder_set(d)
    assert s.ground_truth == [0]
    assert check_classes(s, 1001) == 1
    assert check_classes(s, 1000) == 0
    assert s.labels_for(1001) == [1]
    with pytest.raises(DatasetError, match="labels.txt in .* has 1000 classes; the model outputs 10 "):
        check_classes(s, 10)
    small = folder_set(_dataset(tmp_path / "e", {"im-1.png": _solid((1, 2, 3))}, truth=["dog"]))
    with pytest.raises(DatasetError, match="has 3 classes; the model outputs 4"):
        check_classes(small, 4)


def test_grayscale_palette_and_rgba_become_rgb(tmp_path):
    gray = Image.fromarray(np.full((6, 6), 90, np.uint8))
    rgba = Image.fromarray(np.tile(np.array([10, 20, 30, 7], np.uint8), (6, 6, 1)))
    pal = Image.fromarray(_solid((200, 100, 50), 6, 6)).convert("P", palette=Image.Palette.ADAPTIVE)
    assert (gray.mode, rgba.mode, pal.mode) == ("L", "RGBA", "P")
    d = _dataset(tmp_path / "d", {"g-1.png": gray, "g-2.png": rgba, "g-3.png": pal}, truth=["cat"] * 3)
    s = folder_set(d)
    np.testing.assert_array_equal(s.raw(0), _solid((90, 90, 90), 6, 6))
    np.testing.assert_array_equal(s.raw(1), _solid((10, 20, 30), 6, 6))  # alpha dropped
    np.testing.assert_array_equal(s.raw(2), _solid((200, 100, 50), 6, 6))
    assert s.batch(4).shape == (3, 3, 4, 4)


def test_folder_structure_errors(tmp_path):
    assert "does not exist" in _error(tmp_path / "nowhere")
    (tmp_path / "file.txt").write_text("x")
    assert "is not a directory" in _error(tmp_path / "file.txt")
    empty = _dataset(tmp_path / "empty", {}, truth=["cat"])
    message = _error(empty)
    assert message.startswith(
        f"no images in {empty}; expected a folder of images named <prefix>-<number>.jpg"
    )
    no_labels = _dataset(tmp_path / "nl", {"a-1.png": _solid((0, 0, 0))}, labels=None, truth=["cat"])
    assert _error(no_labels).startswith(f"labels.txt is missing from {no_labels}; expected")
    no_truth = _dataset(tmp_path / "nt", {"a-1.png": _solid((0, 0, 0))})
    assert _error(no_truth).startswith(f"ground_truth_labels.txt is missing from {no_truth}; expected")


def test_label_file_errors(tmp_path):
    one = {"a-1.png": _solid((0, 0, 0))}
    two = {"a-1.png": _solid((0, 0, 0)), "a-2.png": _solid((1, 1, 1))}
    unknown = _dataset(tmp_path / "u", one, truth=["horse"])
    assert (
        _error(unknown) == f"{unknown / 'ground_truth_labels.txt'} line 1: class 'horse' is not in labels.txt"
    )
    fewer = _dataset(tmp_path / "f", two, truth=["cat"])
    assert _error(fewer) == (
        f"{fewer / 'ground_truth_labels.txt'} has 1 line but {fewer} has 2 images; expected one class name per image"
    )
    more = _dataset(tmp_path / "m", one, truth=["cat", "dog"])
    assert "has 2 lines but" in _error(more)
    twice = _dataset(tmp_path / "t", one, labels=["cat", "dog", "cat"], truth=["cat"])
    assert "lists 'cat' twice (lines 1 and 3)" in _error(twice)
    blank = _dataset(tmp_path / "b", two, truth=["cat", "", "dog"])
    assert "line 2 is blank" in _error(blank)
    same_number = _dataset(tmp_path / "s", {"a-1.png": _solid((0, 0, 0)), "b-01.png": _solid((0, 0, 0))})
    (same_number / "ground_truth_labels.txt").write_text("cat\ncat\n")
    assert "have the same number 1" in _error(same_number)


def test_whitespace_bom_and_crlf_are_tolerated(tmp_path):
    d = _dataset(tmp_path / "d", {"a-1.png": _solid((0, 0, 0)), "a-2.png": _solid((0, 0, 0))})
    (d / "labels.txt").write_bytes("\ufeffcat\r\nsea lion \r\n".encode())
    (d / "ground_truth_labels.txt").write_text("sea lion\n  cat\n\n\n")
    s = folder_set(d)
    assert s.class_names == ["cat", "sea lion"] and s.ground_truth == [1, 0]


def test_unreadable_images_are_named(tmp_path):
    d = _dataset(tmp_path / "d", {"a-1.png": _solid((0, 0, 0))}, truth=["cat", "cat"])
    (d / "a-2.jpg").write_bytes(b"not an image at all")
    assert _error(d).startswith(f"image {d / 'a-2.jpg'} cannot be read: ")
    # A PNG cut short passes the header check; decoding it names the file.
    t = _dataset(tmp_path / "t", {"a-1.png": np.arange(48 * 48 * 3, dtype=np.uint8).reshape(48, 48, 3)})
    (t / "ground_truth_labels.txt").write_text("cat\n")
    data = (t / "a-1.png").read_bytes()
    (t / "a-1.png").write_bytes(data[: len(data) // 2])
    s = folder_set(t)
    with pytest.raises(DatasetError, match=r"image .*a-1\.png cannot be read: "):
        s.batch(8)


def test_missing_pillow_is_one_line(tmp_path, monkeypatch):
    d = _dataset(tmp_path / "d", {"a-1.png": _solid((0, 0, 0))}, truth=["cat"])
    monkeypatch.setitem(sys.modules, "PIL", None)  # `from PIL import Image` now raises ImportError
    assert _error(d) == f"reading images from {d} needs Pillow: pip install 'mlts[images]'"
