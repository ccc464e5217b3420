"""The bundled real image set: three photographs with ImageNet ground truth (real_images/README.md).

`mlts benchmark --dataset real` names it; any other --dataset value is a folder path.
"""

from __future__ import annotations

from pathlib import Path

NAME = "real"
FOLDER = Path(__file__).resolve().parent / "real_images"


def dataset_folder(argument: str) -> str:
    """The folder a --dataset argument names: the bundled set for "real" (unless such a folder exists)."""
    if argument == NAME and not Path(argument).is_dir():
        return str(FOLDER)
    return argument
