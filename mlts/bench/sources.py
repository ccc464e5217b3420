"""Which models a benchmark runs: zoo models chosen by regex and the user's own ONNX, TFLite and .nnm files."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlts.errors import InputError


class ModelSelectionError(InputError):
    """A model regex, name or file the user gave cannot be used."""


@dataclass(frozen=True)
class ModelSource:
    name: str
    path: Path | None  # None: a zoo model, built on first use
    zoo_name: str | None = None
    twin: Path | None = None  # the same model in the other format (--reference both): an ONNX file
    user: Any = None  # a user's file: its mlts.bench.user_model.UserModel (inputs resolved)
    #: A .tflite file: (input name, shape) for the inputs --input-shape names (their dynamic dimensions).
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def is_nnm(self) -> bool:
        """Whether the model is an NN graph file (no ONNX model: no onnxruntime or golden reference)."""
        return self.user is not None and self.user.is_nnm

    def onnx_path(self) -> Path:
        if self.path is not None:
            return self.path
        from mlts.models import zoo

        if self.zoo_name is None:
            raise ModelSelectionError(f"model {self.name!r} names neither a file nor a zoo model")
        return zoo.model_path(self.zoo_name)


def zoo_entry(source: ModelSource):
    """The zoo entry of a zoo model, None for a user's file."""
    if source.zoo_name is None:
        return None
    from mlts.models import zoo

    return zoo.get(source.zoo_name)


def family_of(source: ModelSource) -> str:
    """The model family the report groups by: the zoo family (with "_quant" for 8-bit models) or "user"."""
    entry = zoo_entry(source)
    if entry is None:
        return "user"
    return entry.family + ("_quant" if entry.float_name is not None else "")


def compile_regex(pattern: str, what: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ModelSelectionError(f"bad {what} regex {pattern!r}: {e}") from None


def select_models(
    models_regex: str | None, model_files: tuple[str, ...] = (), settings=None
) -> list[ModelSource]:
    """Zoo models whose name matches `models_regex` (all when None and no files are given), then the files.

    The files' inputs are resolved with `settings` (mlts.bench.user_model.InputSettings: --input-shape,
    --input-value, --inputs DIR); a setting that cannot be used is a one-line InputError."""
    from mlts.bench.user_model import InputSettings, resolve_all
    from mlts.models import zoo

    sources: list[ModelSource] = []
    if models_regex is not None or not model_files:
        rx = compile_regex(models_regex or ".*", "--models")
        names = [m.name for m in zoo.list_models()]
        chosen = [n for n in names if rx.search(n)]
        if not chosen:
            raise ModelSelectionError(
                f"--models {models_regex!r} matches no model; available: {', '.join(names)}"
            )
        sources += [ModelSource(n, None, n) for n in chosen]
    user_files = []  # ONNX and .nnm files: their inputs are resolved with the input options
    settings = settings or InputSettings()
    tflite_names: set[str] = set()
    for f in model_files:
        if f.startswith("real:") and not Path(f).exists():
            from mlts.models.real_tflite import find

            sources.append(ModelSource(f[len("real:") :], find(f[len("real:") :])))
            continue
        p = Path(f)
        if not p.is_file():
            raise ModelSelectionError(f"{f}: no such model file")
        from mlts.convert.formats import is_tflite_source

        if is_tflite_source(p):  # --input-shape sizes its dynamic dimensions (docs/tflite.md)
            inputs = _tflite_input_names(p)
            tflite_names |= inputs
            fixed = sorted(inputs & set(settings.values))
            if fixed:
                raise ModelSelectionError(
                    f"--input-value {fixed[0]}: input '{fixed[0]}' of {f} is a TFLite model's input; only ONNX "
                    "model inputs can be fixed to a value"
                )
            shapes = tuple((n, tuple(d)) for n, d in settings.shapes.items() if n in inputs)
            sources.append(ModelSource(p.stem, p, input_shapes=shapes))
        else:
            user_files.append(f)
    for (user, _), f in zip(
        resolve_all(user_files, settings, also_named=frozenset(tflite_names)), user_files, strict=True
    ):
        sources.append(ModelSource(Path(f).stem, Path(f), user=user))
    return sources


def _tflite_input_names(path: Path) -> set[str]:
    """The input names of a .tflite file's main subgraph (none when it cannot be read: the run reports that)."""
    from mlts.convert.errors import ConversionError
    from mlts.convert.tflite import load_tflite

    try:
        model = load_tflite(path)
    except ConversionError:
        return set()
    sg = model.subgraphs[0]
    return {sg.tensors[i].name for i in sg.inputs}
