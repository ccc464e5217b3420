"""Image sets for the classification models: procedural images, or a user's folder in MLTS's format.

Procedural set: images 0..count-1 of `images.procedural_image` (at most
PROCEDURAL_AVAILABLE). They carry no labels; accuracy is scored against the
golden outputs' argmax (label source "golden").

Folder set (label source "ground_truth"): the layout MLTS's dataset reader
(InferenceInOutSequence.FromDataset in MLTS's benchmark) expects:

    <dir>/<prefix>-<number>.<ext>   the images
    <dir>/labels.txt                one class name per line; line i (from 0) is class i
    <dir>/ground_truth_labels.txt   one line per image: its class name, as written in labels.txt

MLTS sorts the images by the number after the "-" and pairs the i-th image of
that order with the i-th ground-truth line; so does this module. Where MLTS
leaves things open, this module chooses:

- images: .jpg and .jpeg as in MLTS, plus .png, .bmp and .ppm (case-insensitive);
  when any file name is not <prefix>-<number>.<ext>, all images are sorted by
  name in natural order (digit runs compared as numbers: img2 before img10);
  two images with the same number are an error (the pairing would be ambiguous);
- lines: surrounding whitespace (and a UTF-8 byte-order mark) is ignored, blank
  lines at the end of a file are ignored, a blank line elsewhere is an error;
- a ground-truth name missing from labels.txt, a name listed twice in labels.txt,
  or a ground-truth file whose line count differs from the image count is an
  error (MLTS fails on them with an exception or scores garbage);
- grayscale, palette, CMYK and RGBA images are converted to RGB (alpha is
  dropped, not composited); an unreadable or corrupt image is an error naming it.

`ground_truth` holds labels.txt line numbers. A model's output index is that
plus `check_classes(set, num_classes)`: 0 when the model outputs one score per
line of labels.txt, 1 for the 1001-output TF-slim MobileNets (output 0 is
"background", outputs 1..1000 the 1000 ImageNet classes) with a 1000-line
labels.txt. `ImageSet.labels_for(num_classes)` applies it.

Reading images needs Pillow, an optional extra: pip install 'mlts[images]'.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mlts.datasets.images import (
    LAYOUTS,
    fit_preprocess,
    inception_preprocess,
    procedural_image,
    quantize_images,
)
from mlts.errors import InputError
from mlts.hal import files

PROCEDURAL_AVAILABLE = 2000
"""Procedural images 0..PROCEDURAL_AVAILABLE-1 form the procedural set."""
DEFAULT_IMAGES = 100

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".ppm")
LABELS_FILE = "labels.txt"
GROUND_TRUTH_FILE = "ground_truth_labels.txt"
BACKGROUND_OUTPUTS = 1001
"""TF-slim ImageNet classifiers output 1001 scores: 0 is "background", 1..1000 the ImageNet classes."""
IMAGENET_CLASSES = 1000

_MLTS_NAME = re.compile(r"^.*-(\d+)\.[^.]+$")
_DIGITS = re.compile(r"(\d+)")


class DatasetError(InputError):
    """A dataset folder that cannot be used; the message names the file and the expected format."""


class ImageSet:
    """Images for classification models, preprocessed on demand and memoised per (resolution, layout)."""

    def __init__(
        self,
        name: str,
        size: int,
        raw: Callable[[int], np.ndarray],
        *,
        ground_truth: list[int] | None = None,
        class_names: list[str] | None = None,
        label_source: str = "golden",
        preprocessed: Callable[[int, str], np.ndarray] | None = None,
    ) -> None:
        self.name = name
        self.size = size
        self.ground_truth = ground_truth
        self.class_names = class_names
        self.label_source = label_source
        self._raw = raw
        self._preprocessed = preprocessed
        self._batches: dict[tuple[int, str], np.ndarray] = {}
        self._fitted: dict[tuple[int, int, str], np.ndarray] = {}
        self._quantized: dict[tuple[int, float, int, str], np.ndarray] = {}

    def __repr__(self) -> str:
        return f"ImageSet({self.name!r}, size={self.size}, label_source={self.label_source!r})"

    def raw(self, i: int) -> np.ndarray:
        """Image `i` as uint8 [height, width, 3] (RGB), before preprocessing."""
        if not 0 <= i < self.size:
            raise IndexError(
                f"image index {i} is out of range; the set {self.name} has images 0..{self.size - 1}"
            )
        return self._raw(i)

    def batch(self, resolution: int, layout: str = "NCHW") -> np.ndarray:
        """All images, Inception-preprocessed, as read-only float32 [N, 3, r, r] (NCHW) or [N, r, r, 3] (NHWC)."""
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r} is not supported; valid layouts are {', '.join(LAYOUTS)}")
        key = (int(resolution), layout)
        if key not in self._batches:
            out = self._preprocessed(*key) if self._preprocessed else self._preprocess_all(*key)
            # The memo is shared by every caller: nobody may write into it.
            out.flags.writeable = False
            self._batches[key] = out
        return self._batches[key]

    def fitted(self, height: int, width: int, layout: str = "NCHW") -> np.ndarray:
        """All images for an input of `height` x `width` (images.fit_preprocess), read-only, memoised;
        a square one is `batch(height, layout)`."""
        if height == width:
            return self.batch(height, layout)
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r} is not supported; valid layouts are {', '.join(LAYOUTS)}")
        key = (int(height), int(width), layout)
        if key not in self._fitted:
            out = np.empty((self.size, height, width, 3), dtype=np.float32)
            for i in range(self.size):
                out[i] = fit_preprocess(self.raw(i), height, width)
            out = np.ascontiguousarray(out.transpose(0, 3, 1, 2)) if layout == "NCHW" else out
            out.flags.writeable = False
            self._fitted[key] = out
        return self._fitted[key]

    def quantized(self, resolution: int, scale: float, zero_point: int, dtype: type) -> np.ndarray:
        """`batch(resolution)` (NCHW) quantized with `scale` and `zero_point` to `dtype`, read-only, memoised."""
        key = (int(resolution), float(scale), int(zero_point), np.dtype(dtype).str)
        if key not in self._quantized:
            out = quantize_images(self.batch(resolution), scale, zero_point, dtype)
            out.flags.writeable = False
            self._quantized[key] = out
        return self._quantized[key]

    def _preprocess_all(self, resolution: int, layout: str) -> np.ndarray:
        out = np.empty((self.size, resolution, resolution, 3), dtype=np.float32)
        for i in range(self.size):
            out[i] = inception_preprocess(self.raw(i), resolution)
        return np.ascontiguousarray(out.transpose(0, 3, 1, 2)) if layout == "NCHW" else out

    def labels_for(self, num_classes: int) -> list[int] | None:
        """Ground-truth classes in the numbering of a model with `num_classes` outputs (None without labels)."""
        if self.ground_truth is None:
            return None
        offset = check_classes(self, num_classes)
        return [g + offset for g in self.ground_truth]


def procedural_set(count: int = DEFAULT_IMAGES) -> ImageSet:
    """Procedural images 0..count-1, unlabelled (accuracy is scored against the golden outputs)."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= PROCEDURAL_AVAILABLE:
        raise ValueError(
            f"procedural image count {count!r} is out of range; valid counts are 1..{PROCEDURAL_AVAILABLE}"
        )
    return ImageSet("procedural", count, _generated_once(), label_source="golden")


def _generated_once() -> Callable[[int], np.ndarray]:
    """procedural_image, each image generated once (read-only) and then preprocessed at every resolution."""

    @functools.cache
    def raw(i: int) -> np.ndarray:
        image = procedural_image(i)
        image.flags.writeable = False
        return image

    return raw


def check_classes(imageset: ImageSet, num_classes: int) -> int:
    """Offset from a labels.txt line number to the output index of a model with `num_classes` outputs.

    0 when the counts are equal (and for unlabelled sets); 1 for 1001 outputs
    and 1000 labels (output 0 is TF-slim's "background"); otherwise a DatasetError.
    """
    if imageset.class_names is None:
        return 0
    labels = len(imageset.class_names)
    if num_classes == labels:
        return 0
    if num_classes == BACKGROUND_OUTPUTS and labels == IMAGENET_CLASSES:
        return 1
    raise DatasetError(
        f"{LABELS_FILE} in {imageset.name} has {labels} classes; the model outputs {num_classes} "
        f"(expected one class per output, or {IMAGENET_CLASSES} classes for a {BACKGROUND_OUTPUTS}-output "
        "model whose output 0 is 'background')"
    )


def folder_set(path: str | Path, count: int | None = None) -> ImageSet:
    """The images of a folder in MLTS's format (see the module docstring), the first `count` of them if given."""
    folder = Path(path)
    if not folder.exists():
        raise DatasetError(f"image folder {folder} does not exist; {_FORMAT}")
    if not folder.is_dir():
        raise DatasetError(f"image folder {folder} is not a directory; {_FORMAT}")
    image_module = _pillow(folder)
    files = _image_files(folder)
    class_names = _read_labels(folder)
    ground_truth = _read_ground_truth(folder, class_names, len(files))
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(files):
            raise DatasetError(f"image count {count!r} is out of range; {folder} has images 1..{len(files)}")
        files, ground_truth = files[:count], ground_truth[:count]
    for f in files:
        _check_header(image_module, f)
    return ImageSet(
        str(folder),
        len(files),
        lambda i: _read_rgb(image_module, files[i]),
        ground_truth=ground_truth,
        class_names=class_names,
        label_source="ground_truth",
    )


_FORMAT = (
    f"expected a folder of images named <prefix>-<number>.jpg (or .jpeg/.png/.bmp/.ppm) with {LABELS_FILE} "
    f"(one class name per line) and {GROUND_TRUTH_FILE} (one class name per image, in image-number order)"
)


def _pillow(folder: Path):
    """PIL.Image, or a DatasetError saying how to install it."""
    try:
        from PIL import Image
    except ImportError:
        raise DatasetError(f"reading images from {folder} needs Pillow: pip install 'mlts[images]'") from None
    return Image


def _natural_key(name: str) -> list:
    """Sort key comparing digit runs as numbers: 'img2' < 'img10'."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in _DIGITS.split(name) if part]


def _image_files(folder: Path) -> list[Path]:
    """The image files in MLTS's order: by the number in <prefix>-<number>.<ext>, else by natural name order."""
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise DatasetError(f"no images in {folder}; {_FORMAT}")
    matches = [_MLTS_NAME.match(p.name) for p in files]
    if not all(matches):
        return sorted(files, key=lambda p: _natural_key(p.name))
    numbers = [int(m.group(1)) for m in matches if m]
    seen: dict[int, str] = {}
    for p, n in zip(files, numbers, strict=True):
        if n in seen:
            raise DatasetError(
                f"images {seen[n]} and {p.name} in {folder} have the same number {n}; "
                "each image needs its own number to be paired with its ground-truth line"
            )
        seen[n] = p.name
    return [p for _, p in sorted(zip(numbers, files, strict=True), key=lambda t: t[0])]


def _read_lines(path: Path) -> list[str]:
    """Stripped lines of a UTF-8 text file, without trailing blank lines; a blank line elsewhere is an error."""
    if not path.is_file():
        raise DatasetError(f"{path.name} is missing from {path.parent}; {_FORMAT}")
    try:
        text = files.read_text(
            path, what="a label list", limit=files.MAX_TEXT_LIST_BYTES, encoding="utf-8-sig"
        )
    except UnicodeDecodeError as e:
        raise DatasetError(
            f"{path} is not UTF-8 text (byte {e.start}); expected one class name per line"
        ) from None
    except files.FileReadError as e:
        raise DatasetError(str(e)) from None
    except OSError as e:
        raise DatasetError(f"cannot read {path}: {e.strerror or e}") from None
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    for i, line in enumerate(lines):
        if not line:
            raise DatasetError(f"{path} line {i + 1} is blank; expected one class name per line")
    return lines


def _read_labels(folder: Path) -> list[str]:
    names = _read_lines(folder / LABELS_FILE)
    if not names:
        raise DatasetError(f"{folder / LABELS_FILE} is empty; expected one class name per line")
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            raise DatasetError(
                f"{folder / LABELS_FILE} lists {name!r} twice (lines {first[name] + 1} and {i + 1}); "
                "each class name must be unique"
            )
        first[name] = i
    return names


def _read_ground_truth(folder: Path, class_names: list[str], images: int) -> list[int]:
    """labels.txt line number of each image's ground-truth class."""
    path = folder / GROUND_TRUTH_FILE
    lines = _read_lines(path)
    if len(lines) != images:
        raise DatasetError(
            f"{path} has {_count(len(lines), 'line')} but {folder} has {_count(images, 'image')}; "
            "expected one class name per image"
        )
    index = {name: i for i, name in enumerate(class_names)}
    out = []
    for i, name in enumerate(lines):
        if name not in index:
            raise DatasetError(f"{path} line {i + 1}: class {name!r} is not in {LABELS_FILE}")
        out.append(index[name])
    return out


_READ_ERRORS: tuple[type[Exception], ...] = (OSError, ValueError, SyntaxError, EOFError)


def _check_header(image_module, path: Path) -> None:
    """Open `path` far enough to know it is an image Pillow can decode (the pixels are read later)."""
    try:
        with image_module.open(path) as img:
            img.size  # noqa: B018 - touching the header is the check
    except (*_READ_ERRORS, image_module.DecompressionBombError) as e:
        raise DatasetError(f"image {path} cannot be read: {_reason(e)}") from None


def _read_rgb(image_module, path: Path) -> np.ndarray:
    """The pixels of `path` as uint8 [height, width, 3], converted to RGB when stored otherwise."""
    try:
        with image_module.open(path) as img:
            img.load()
            rgb = img if img.mode == "RGB" else img.convert("RGB")
            return np.asarray(rgb, dtype=np.uint8).copy()
    except (*_READ_ERRORS, image_module.DecompressionBombError) as e:
        raise DatasetError(f"image {path} cannot be read: {_reason(e)}") from None


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _reason(e: Exception) -> str:
    return " ".join(str(e).split()) or type(e).__name__
