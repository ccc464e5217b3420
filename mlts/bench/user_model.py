"""A user's model file made ready to run: an ONNX or .nnm file, each input's final shape, fixed values, files.

The options `--input-shape NAME=D0,D1,...`, `--input-value NAME=V[,V...]` and `--inputs DIR` apply to
every model file given with `--model` that has an input of that name (a name no file has is an
error). Each input's final shape comes from `--input-shape`, else from its file in `--inputs DIR`,
else from the model (a symbolic leading dimension is the batch: 1); any other symbolic dimension
left is an error that names the option to give it. An input given a value is fixed: the converter
folds it into a constant and the references are fed it. An .nnm file (an NN graph file from `mlts
convert`) has the shapes it was converted with: no option may name its inputs, and as it is no ONNX
model it has no onnxruntime reference and no float64 golden reference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlts.bench import input_files
from mlts.bench.input_files import InputFiles
from mlts.errors import InputError

NNM_SUFFIX = ".nnm"

#: Ops whose input at these positions is recurrent state (initial_h, initial_c).
_STATE_INPUTS = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}
#: Ops a value passes through unchanged in meaning (followed when looking for what reads an input).
_PASS_THROUGH = {"Identity", "Cast", "Squeeze", "Unsqueeze", "Reshape", "Transpose", "Flatten"}
#: Words of an input's name that say recurrent state (the words split at anything but letters and
#: digits: "h0", "lstm_state", "hidden.c"), and words that say it is data after all ("hidden_states"
#: of an encoder).
_STATE_WORDS = frozenset({"state", "h", "c", "h0", "c0", "hx", "cx", "hidden", "cell"})
_DATA_WORDS = frozenset({"states", "encoder", "embeds", "embeddings"})


def named_state(name: str) -> bool:
    """Whether input `name` is named like recurrent state."""
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    return bool(words & _STATE_WORDS) and not words & _DATA_WORDS


_MASK_NAME = re.compile(r"mask", re.IGNORECASE)


class UserModelError(InputError):
    """A model file or an input option that cannot be used with it (one line naming the option)."""


@dataclass(frozen=True)
class InputSettings:
    """What the user said about the inputs of the model files: shapes, fixed values, a folder of files."""

    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    values: Mapping[str, Any] = field(default_factory=dict)
    inputs_dir: str | None = None
    files_option: bool = True  # whether the command takes --inputs DIR (its messages then suggest it)

    def names(self) -> set[str]:
        return set(self.shapes) | set(self.values)


@dataclass(frozen=True)
class GraphInput:
    """One input a caller feeds: ONNX name, element type, declared dims (str: symbolic), what reads it."""

    name: str
    dtype: np.dtype
    dims: tuple[int | str, ...] | None
    role: str = ""  # "state" (recurrent state), "tokens" (indexes a table), "mask", or ""
    vocab: int | None = None  # tokens: the number of rows of the table they index

    def shape_text(self) -> str:
        return "unknown" if self.dims is None else "[" + ", ".join(str(d) for d in self.dims) + "]"


@dataclass(frozen=True)
class UserModel:
    """A model file with its inputs resolved: `shapes` to give the converter, `values` to fix, `files`."""

    path: Path
    kind: str  # "onnx" or "nnm"
    inputs: tuple[GraphInput, ...]
    shapes: Mapping[str, tuple[int, ...]]  # the final shape of every input fed (not fixed)
    values: Mapping[str, np.ndarray]  # fixed inputs, in the input's type and shape
    files: InputFiles | None = None
    unreadable: str | None = None  # why the file cannot be loaded (the run makes error rows of it)

    @property
    def is_nnm(self) -> bool:
        return self.kind == "nnm"

    def input(self, name: str) -> GraphInput | None:
        return next((i for i in self.inputs if i.name == name), None)

    def convert_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shapes the converter needs: those of inputs declared with a symbolic or unknown dim."""
        return {
            i.name: self.shapes[i.name]
            for i in self.inputs
            if i.name in self.shapes and (i.dims is None or any(not isinstance(d, int) for d in i.dims))
        }


def is_nnm(path: str | Path) -> bool:
    return Path(path).suffix.lower() == NNM_SUFFIX


def _dims(value_info) -> tuple[int | str, ...] | None:
    tt = value_info.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return tuple(
        int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
        for d in tt.shape.dim
    )


def graph_inputs(proto) -> list[GraphInput]:
    """The inputs a caller feeds (not initializers), with the role the graph gives each."""
    from onnx import helper, numpy_helper

    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    consumers: dict[str, list[tuple[Any, int]]] = {}
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name:
                consumers.setdefault(name, []).append((node, k))

    def readers(name: str, depth: int = 0):
        for node, k in consumers.get(name, []):
            yield node, k
            if node.op_type in _PASS_THROUGH and k == 0 and depth < 4:
                for out in node.output:
                    yield from readers(out, depth + 1)

    out = []
    for vi in graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        role, vocab = "", None
        for node, k in readers(vi.name):
            if k in _STATE_INPUTS.get(node.op_type, ()):
                role = "state"
                break
            if node.op_type == "Gather" and k == 1 and node.input[0] in inits:
                role, vocab = "tokens", int(numpy_helper.to_array(inits[node.input[0]]).shape[0])
                break
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
        if not role and _MASK_NAME.search(vi.name) and dtype.kind in "biu":
            role = "mask"
        elif not role and dtype.kind == "f" and named_state(vi.name):
            role = "state"
        out.append(GraphInput(vi.name, dtype, _dims(vi), role, vocab))
    return out


def nnm_inputs(model, metadata: Mapping[str, str]) -> list[tuple[str, tuple[int, ...], str, float, int]]:
    """(name, shape, dtype, scale, zero point) of an NN model's inputs; names from the file's metadata
    (`mlts convert` writes them), else input0, input1, ..."""
    from mlts.hal.enums import DTYPE_NAME, OperandType

    sub = model.main
    operands = [sub.operands[i] for i in sub.input_indexes]
    names = [f"input{k}" for k in range(len(operands))]
    listed = [p.rsplit(":", 2)[0] for p in (metadata.get("inputs") or "").split(",") if p.count(":") >= 2]
    if len(listed) == len(operands) and len(set(listed)) == len(listed):
        names = listed
    return [
        (name, tuple(int(d) for d in op.dimensions), DTYPE_NAME[OperandType(op.type)], float(op.scale),
         int(op.zero_point))
        for name, op in zip(names, operands, strict=True)
    ]  # fmt: skip


def load_inputs(path: Path) -> tuple[str, list[GraphInput], Any]:
    """(kind, inputs, loaded model: a ModelProto or an NnFile) of a model file; UserModelError otherwise."""
    from mlts.convert import ConversionError, load_model
    from mlts.hal import nnfile

    if is_nnm(path):
        try:
            loaded = nnfile.load(path)
        except (nnfile.NnFileError, OSError) as e:
            raise UserModelError(f"--model {path}: {' '.join(str(e).split())}") from None
        inputs = [
            GraphInput(name, np.dtype(dtype), shape if all(shape) else None)
            for name, shape, dtype, _, _ in nnm_inputs(loaded.model, loaded.metadata)
        ]
        return "nnm", inputs, loaded
    try:
        proto = load_model(path)
    except (ConversionError, OSError, ValueError) as e:
        raise UserModelError(f"--model {path}: {' '.join(str(e).split())}") from None
    return "onnx", graph_inputs(proto), proto


def _value(path: Path, inp: GraphInput, raw: Any, shape: tuple[int, ...] | None) -> np.ndarray:
    """`--input-value` for `inp` in its type and shape (`shape`: given with --input-shape)."""
    given = np.asarray(raw)
    declared = shape if shape is not None else inp.dims
    if declared is not None and all(isinstance(d, int) for d in declared):
        target = tuple(int(d) for d in declared)  # type: ignore[arg-type]
    elif declared is not None and len(declared) <= 1:
        target = () if not declared else (given.size,)
    else:
        raise UserModelError(
            f"--input-value {inp.name}: input '{inp.name}' of {path} has shape {inp.shape_text()}; "
            f"give its shape with --input-shape {inp.name}=D0,D1,..."
        )
    if given.size != int(np.prod(target, dtype=np.int64)):
        raise UserModelError(
            f"--input-value {inp.name}: {given.size} value(s), but input '{inp.name}' of {path} has shape "
            f"{list(target)} ({int(np.prod(target, dtype=np.int64))} values)"
        )
    typed = given.astype(inp.dtype).reshape(target)
    if inp.dtype.kind != "f" and not np.array_equal(
        typed.astype(np.float64), given.astype(np.float64).reshape(target)
    ):
        raise UserModelError(
            f"--input-value {inp.name}: input '{inp.name}' of {path} is {inp.dtype}; "
            f"{given.tolist()} is not exactly that"
        )
    return typed


def _check_shape(path: Path, inp: GraphInput, dims: tuple[int, ...], option: str) -> None:
    if inp.dims is None:
        return
    if len(dims) != len(inp.dims):
        raise UserModelError(
            f"{option}: input '{inp.name}' of {path} has {len(inp.dims)} dimensions {inp.shape_text()}, "
            f"not {len(dims)} ({list(dims)})"
        )
    for k, (want, got) in enumerate(zip(inp.dims, dims, strict=True)):
        if isinstance(want, int) and want != got:
            raise UserModelError(
                f"{option}: input '{inp.name}' of {path} has dimension {k} fixed to {want} "
                f"({inp.shape_text()}), not {got}"
            )


def _final_shape(
    path: Path, inp: GraphInput, given: tuple[int, ...] | None, file_shape, files_option: bool
) -> tuple[int, ...]:
    """The shape input `inp` is fed with: --input-shape, else its file's, else the declared one (batch 1)."""
    if given is not None:
        _check_shape(path, inp, given, f"--input-shape {inp.name}")
        return given
    if file_shape is not None and inp.dims is not None and len(file_shape) == len(inp.dims):
        _check_shape(path, inp, tuple(file_shape), f"--inputs file of '{inp.name}'")
        return tuple(int(d) for d in file_shape)
    if inp.dims is None:
        raise UserModelError(
            f"input '{inp.name}' of {path} is declared without a shape; give it with "
            f"--input-shape {inp.name}=D0,D1,..."
        )
    dims = [d if isinstance(d, int) else (1 if k == 0 else None) for k, d in enumerate(inp.dims)]
    if None in dims:
        k = dims.index(None)
        example = ",".join(str(d) if d is not None else str(inp.dims[j]) for j, d in enumerate(dims))
        also = (
            f" (or its file in --inputs DIR: {input_files.file_stem(inp.name)}.npy)" if files_option else ""
        )
        raise UserModelError(
            f"input '{inp.name}' of {path} has symbolic dimension {k} ('{inp.dims[k]}') beyond the batch; "
            f"give its whole shape with --input-shape {inp.name}={example}, each name a number{also}"
        )
    return tuple(int(d) for d in dims)  # type: ignore[arg-type]


def resolve(
    path: str | Path, settings: InputSettings, found: Mapping | None = None, loaded_inputs=None
) -> tuple[UserModel, Any]:
    """(the UserModel of `path` under `settings`, the loaded model); UserModelError for what cannot be used.

    `found` is the scan of settings.inputs_dir (input_files.scan), done once for every model;
    `loaded_inputs` what load_inputs(path) gave, when it was called already.
    """
    path = Path(path)
    kind, inputs, loaded = loaded_inputs or load_inputs(path)
    names = {i.name for i in inputs}
    if kind == "nnm":
        named = sorted(settings.names() & names)
        if named:
            option = "--input-shape" if named[0] in settings.shapes else "--input-value"
            raise UserModelError(
                f"{option} {named[0]}: {path} is an NN graph file; its inputs keep the shapes and values "
                f"it was converted with (give them to mlts convert, or use the ONNX file)"
            )
    values = {
        i.name: _value(path, i, settings.values[i.name], settings.shapes.get(i.name))
        for i in inputs
        if i.name in settings.values
    }
    fed = [i for i in inputs if i.name not in values]
    mine, stems = input_files.match(found, [i.name for i in fed]) if found else ({}, {})
    count, raw = input_files.read_raw(settings.inputs_dir or ".", mine, stems) if stems else (1, {})
    shapes = {
        i.name: _final_shape(
            path,
            i,
            settings.shapes.get(i.name),
            raw[i.name][0][1].shape if i.name in raw else None,
            settings.files_option,
        )
        for i in fed
    }
    files = None
    if raw:
        files = input_files.fit_all(
            settings.inputs_dir or ".", count, raw, shapes, {i.name: i.dtype for i in fed}
        )
        _refuse_all_zero(files, fed, str(settings.inputs_dir))
    return UserModel(path, kind, tuple(inputs), shapes, values, files), loaded


def _refuse_all_zero(files: InputFiles, fed: Sequence[GraphInput], folder: str) -> None:
    """A sample whose every input comes from a file and is all zeros is not timed: a driver may shortcut zeros."""
    if any(i.name not in files.arrays for i in fed):
        return  # the generated inputs are never all zero
    for k in range(files.samples):
        if all(not np.any(files.value(i.name, k)) for i in fed):
            raise UserModelError(
                f"--inputs {folder}: every input of sample {k} is all zeros; mlts does not time all-zero "
                f"inputs (a driver may take shortcuts on zeros)"
            )


def resolve_all(
    paths: Sequence[str | Path], settings: InputSettings, also_named: frozenset[str] = frozenset()
) -> list[tuple[UserModel, Any]]:
    """resolve() of every file; a name in the options or a file in --inputs DIR that none of them has is
    an error that lists their inputs (checked before any file's inputs are resolved). A file that cannot
    be loaded is no error here: its UserModel says why (`unreadable`), for the run to report.
    `also_named`: input names of the run's other (TFLite) files, which --input-shape may name too."""
    found = input_files.scan(settings.inputs_dir) if settings.inputs_dir is not None else None
    loaded, unreadable = [], {}
    for p in paths:
        try:
            loaded.append((Path(p), load_inputs(Path(p))))
        except UserModelError as e:  # not fatal: the run reports it as the model's error rows
            unreadable[Path(p)] = str(e)
    every = {i.name for _, (_, inputs, _) in loaded for i in inputs}
    for option, names in (("--input-shape", settings.shapes), ("--input-value", settings.values)):
        for name in names:
            if name not in every and not (option == "--input-shape" and name in also_named):
                listed = "; ".join(
                    f"{p.name}: {', '.join(repr(i.name) for i in inputs) or 'none'}"
                    for p, (_, inputs, _) in loaded
                )
                where = (
                    f"no --model file has an input '{name}' ({listed})"
                    if loaded
                    else "applies to --model files; none is given"
                )
                raise UserModelError(f"{option} {name}: {where}")
    if found is not None:
        stems = {input_files.file_stem(i.name) for _, (_, inputs, _) in loaded for i in inputs}
        for stem, by_index in found.items():
            named = stem in stems or any(f"{stem}_{k}" in stems for k in by_index if k is not None)
            if not named:
                first = next(iter(by_index.values()))
                raise UserModelError(
                    f"--inputs {first}: names no input of the --model files (their inputs, as file names: "
                    f"{', '.join(sorted(stems)) or 'none'})"
                )
    resolved = {p: resolve(p, settings, found, got) for p, got in loaded}
    out = []
    for p in map(Path, paths):
        if p in unreadable:
            kind = "nnm" if is_nnm(p) else "onnx"
            out.append((UserModel(p, kind, (), {}, {}, None, unreadable[p]), None))
        else:
            out.append(resolved[p])
    return out


def reference_feeds(
    proto, order: Sequence[str], names: Sequence[str], feeds, user: UserModel | None
) -> list[list[np.ndarray]]:
    """The ONNX model's inputs (in `order`, e.g. onnxruntime's) for each driver feed of the inputs
    `names`: by name, in the ONNX types, in each input's final shape, with the fixed values added."""
    from onnx import helper

    dtypes = {
        i.name: np.dtype(helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
        for i in proto.graph.input
        if i.type.HasField("tensor_type")
    }
    fixed = {} if user is None else dict(user.values)
    shapes = {} if user is None else dict(user.shapes)
    declared = {i.name: _dims(i) for i in proto.graph.input}
    out = []
    for feed in feeds:
        by_name = {**dict(zip(names, feed, strict=True)), **fixed}
        row = []
        for name in order:
            x = np.asarray(by_name[name], dtype=dtypes.get(name))
            if name in shapes:
                x = x.reshape(shapes[name])
            elif declared.get(name) == ():
                x = x.reshape(())  # a rank-0 input the driver takes as one value of rank 1
            row.append(x)
        out.append(row)
    return out
