"""The model zoo: MLTS's MobileNet and LSTM speech model names, built on first use into a per-user
cache and reused afterwards.

Cache directory: $MLTS_CACHE_DIR, else $XDG_CACHE_HOME/mlts, else
~/.cache/mlts; models live in its `models/` folder under file names that carry
the generator version and the versions of NumPy, ONNX (and onnxruntime for the
quantized models), so a changed generator or library never serves stale bytes.
Builds are atomic (temporary file + os.replace) and serialised per model by an
fcntl lock file, so concurrent processes all end with the same valid file.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import onnx

from mlts.datasets.cache import cache_root, cached_file
from mlts.errors import InputError
from mlts.hal.atomic import write_atomic
from mlts.models import gelu_mlp, mobilenet, quantized, refine, speech

GENERATOR_VERSION = mobilenet.GENERATOR_VERSION
"""Part of every cached file name; a new version rebuilds instead of reusing old files."""
COUNT_RULES_VERSION = 2
"""Part of the cached summaries' file name: changes when what count_params/count_macs count changes."""


def _dist_version(name: str) -> str:
    """The installed version of distribution `name` (its module's __version__ as a fallback)."""
    from importlib import import_module, metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return str(getattr(import_module(name), "__version__", "unknown"))


class UnknownModelError(InputError):
    """A model name that is not in the zoo."""


@dataclass(frozen=True, slots=True)
class ZooModel:
    """One zoo entry: MLTS's name, tensor shapes and the zero-argument builder of its ONNX graph.

    `input_shape`/`output_shape` describe the main input and output (0 marks
    the symbolic time dimension of a whole-sequence model). A per-step
    recurrent model (`form` "step") also has `state`: (input name, output
    name, shape) of every state tensor the caller carries between steps.
    """

    name: str
    family: str
    dtype: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    description: str
    builder: Callable[[], onnx.ModelProto]
    synthetic: bool = True
    weights: str = "float32"  # how the weights are stored: float32, uint8, int8 or int8 per-channel
    float_name: str | None = None  # for quantized models: the float model they were made from
    quant_variant: str | None = None  # "_quant", "_quant_signed" or "_quant_perchannel"
    input_scale: float = 0.0  # quantized input: scale and zero point
    input_zero_point: int = 0
    input_name: str = "input"
    output_name: str = "probabilities"
    form: str = "single"  # "single" (one input, one output), "step" or "sequence" (recurrent models)
    state: tuple[tuple[str, str, tuple[int, ...]], ...] = ()
    structure: Callable[[], onnx.ModelProto] | None = None  # a cheap build for counting params and MACs
    step_model: str | None = None  # a whole-sequence model's per-step twin

    @property
    def recurrent(self) -> bool:
        return self.form in ("step", "sequence")

    def signature(self) -> tuple[list[tuple[str, tuple[int, ...]]], list[tuple[str, tuple[int, ...]]]]:
        """(inputs, outputs) as (name, shape) in graph order; 0 for a symbolic dimension."""
        inputs = [(self.input_name, self.input_shape)] + [(i, shape) for i, _, shape in self.state]
        outputs = [(self.output_name, self.output_shape)] + [(o, shape) for _, o, shape in self.state]
        return inputs, outputs

    @property
    def quantized(self) -> bool:
        return self.quant_variant is not None

    @property
    def cache_key(self) -> str:
        """What the cached file name carries so that nothing that changed the bytes serves stale ones.

        The generator's version, and the versions of the libraries that shape the bytes: NumPy
        (random streams, the images calibration runs on), ONNX (serialisation) and, for
        quantized models, onnxruntime (its quantizer and its float kernels' calibration ranges).
        The BLAS and its thread count are not in the key because they cannot change the bytes
        (see mlts.models._layers.exact_matmul).
        """
        libs = f"np{_dist_version('numpy')}.onnx{_dist_version('onnx')}"
        if self.recurrent:
            return f"s{speech.SPEECH_GENERATOR_VERSION}.{libs}"
        if not self.quantized:
            return f"g{GENERATOR_VERSION}.{libs}"
        ort = _dist_version("onnxruntime")
        return f"g{GENERATOR_VERSION}.q{quantized.QUANT_GENERATOR_VERSION}.{libs}.ort{ort}"

    def build(self) -> onnx.ModelProto:
        """Generate the model now, bypassing the cache."""
        return self.builder()


def _mobilenet(family: str, alpha: float, resolution: int, seed: int) -> ZooModel:
    make = mobilenet.mobilenet_v1 if family == "mobilenet_v1" else mobilenet.mobilenet_v2
    version = family.rsplit("_", 1)[1]
    return ZooModel(
        name=f"{family}_{alpha}_{resolution}",
        family=family,
        dtype="float32",
        input_shape=(1, 3, resolution, resolution),
        output_shape=(1, mobilenet.NUM_CLASSES),
        description=(
            f"MobileNet {version}, width {alpha}, {resolution}x{resolution} RGB input, "
            f"{mobilenet.NUM_CLASSES} classes (synthetic weights, seed {seed})"
        ),
        builder=partial(make, alpha, resolution, seed=seed),
        structure=partial(make, alpha, resolution, seed=seed, calibrate=False),
    )


def _speech(net: speech.SpeechNet) -> list[ZooModel]:
    """The per-step model (MLTS's name) and its whole-sequence twin."""
    kind = "speech recognition" if net is speech.ASR else "text-to-speech"
    layers = f"{net.layers} LSTM layers of {net.lstm_units[0]} units" + (
        " with peepholes" if net.peepholes else ""
    )
    common: dict[str, Any] = dict(
        family=net.name.split("_")[0],
        dtype="float32",
        input_name=net.input_name,
        output_name=net.output_name,
        structure=partial(speech.speech_step_model, net),
    )
    step = ZooModel(
        name=net.name,
        input_shape=(1, net.input_size),
        output_shape=net.step_output_shape,
        description=f"LSTM acoustic model for {kind}, one step per call: {layers} (synthetic weights, seed {net.seed})",
        builder=partial(speech.speech_step_model, net),
        form="step",
        state=tuple(
            (i, o, shape) for (i, o), shape in zip(net.state_names(), net.state_shapes(), strict=True)
        ),
        **common,
    )
    tail = (1, net.output_size) if net is speech.ASR else net.step_output_shape[1:]
    sequence = ZooModel(
        name=net.name + "_sequence",
        input_shape=(0, 1, net.input_size),
        output_shape=(0, *tail),
        description=f"{net.name} over a whole sequence (ONNX LSTM over the symbolic dimension 'time')",
        builder=partial(speech.speech_sequence_model, net),
        form="sequence",
        step_model=net.name,
        **common,
    )
    return [step, sequence]


def _build_quantized(float_name: str, variant: quantized.Variant, resolution: int) -> onnx.ModelProto:
    return quantized.quantize(load(float_name), variant, resolution)


def _quantized(base: ZooModel, suffix: str) -> ZooModel:
    variant = quantized.VARIANTS[suffix]
    resolution = base.input_shape[-1]
    return ZooModel(
        name=base.name + suffix,
        family=base.family,
        dtype=variant.dtype,
        weights=variant.weights,
        input_shape=base.input_shape,
        output_shape=base.output_shape,
        description=f"{base.name} quantized by onnxruntime (QDQ): {variant.description}",
        builder=partial(_build_quantized, base.name, variant, resolution),
        float_name=base.name,
        quant_variant=suffix,
        input_scale=quantized.INPUT_SCALE,
        input_zero_point=variant.input_zero_point,
    )


_FLOAT = [
    _mobilenet("mobilenet_v1", 1.0, 224, seed=101),
    _mobilenet("mobilenet_v1", 0.75, 192, seed=102),
    _mobilenet("mobilenet_v1", 0.5, 160, seed=103),
    _mobilenet("mobilenet_v1", 0.25, 128, seed=104),
    _mobilenet("mobilenet_v2", 0.35, 128, seed=201),
    _mobilenet("mobilenet_v2", 0.5, 160, seed=202),
    _mobilenet("mobilenet_v2", 0.75, 192, seed=203),
    _mobilenet("mobilenet_v2", 1.0, 224, seed=204),
]
# MLTS's quantized MobileNets, each also in a signed and a per-channel variant.
_QUANT_BASES = (
    "mobilenet_v1_1.0_224",
    "mobilenet_v1_0.75_192",
    "mobilenet_v1_0.5_160",
    "mobilenet_v1_0.25_128",
    "mobilenet_v2_1.0_224",
)
_REGISTRY: dict[str, ZooModel] = {m.name: m for m in _FLOAT}
for _suffix in quantized.VARIANTS:
    for _base in _QUANT_BASES:
        _q = _quantized(_REGISTRY[_base], _suffix)
        _REGISTRY[_q.name] = _q
for _net in speech.NETS.values():
    _REGISTRY.update((m.name, m) for m in _speech(_net))


def _tokens_block(name: str, family: str, shape: tuple[int, int], description: str, builder) -> ZooModel:
    """A float model of one [tokens, width] input and one output of the same shape."""
    return ZooModel(
        name=name,
        family=family,
        dtype="float32",
        input_shape=shape,
        output_shape=shape,
        description=description,
        builder=builder,
        output_name="output",
    )


_REGISTRY[gelu_mlp.NAME] = _tokens_block(
    gelu_mlp.NAME,
    "transformer",
    (gelu_mlp.TOKENS, gelu_mlp.DIM),
    f"Transformer MLP block, {gelu_mlp.TOKENS} tokens x {gelu_mlp.DIM} -> {gelu_mlp.HIDDEN} -> "
    f"{gelu_mlp.DIM} with GELU (needs the extension com.example.mlts.activations; synthetic weights, seed 301)",
    gelu_mlp.gelu_mlp_block,
)
_REGISTRY[refine.NAME] = _tokens_block(
    refine.NAME,
    "refinement",
    (refine.TOKENS, refine.DIM),
    f"Fixed-point refinement, {refine.TOKENS} tokens x {refine.DIM}: an ONNX Loop (NNAPI WHILE) that "
    f"runs until the change is small, at most {refine.MAX_ITERATIONS} times (synthetic weights, seed 401)",
    refine.iterative_refinement,
)


def list_models() -> list[ZooModel]:
    """Every zoo model, in registry order."""
    return list(_REGISTRY.values())


def get(name: str) -> ZooModel:
    """The zoo entry called `name`; UnknownModelError names close matches and every valid name."""
    try:
        return _REGISTRY[name]
    except KeyError:
        pass
    close = difflib.get_close_matches(name, _REGISTRY, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise UnknownModelError(f"unknown model {name!r}; {hint}valid names: {', '.join(_REGISTRY)}")


def cache_dir() -> Path:
    """Where built models are cached: <$MLTS_CACHE_DIR | $XDG_CACHE_HOME/mlts | ~/.cache/mlts>/models."""
    return cache_root() / "models"


def cache_path(entry: ZooModel) -> Path:
    """Where the model cache keeps `entry`'s ONNX file (present once it was built)."""
    return cache_dir() / f"{entry.name}.{entry.cache_key}.onnx"


def _is_valid(path: Path, entry: ZooModel) -> bool:
    """True when `path` loads, passes the checker and has the entry's input and output signature."""
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception:  # any failure to load means the file cannot be trusted
        return False

    def signature(values: Iterable[Any]) -> list[tuple[str, tuple[int, ...]]]:
        return [(v.name, tuple(d.dim_value for d in v.type.tensor_type.shape.dim)) for v in values]

    inputs, outputs = signature(model.graph.input), signature(model.graph.output)
    elem = {"uint8": onnx.TensorProto.UINT8, "int8": onnx.TensorProto.INT8}.get(
        entry.dtype, onnx.TensorProto.FLOAT
    )
    want_inputs, want_outputs = entry.signature()
    return (
        inputs == want_inputs
        and outputs == want_outputs
        and all(v.type.tensor_type.elem_type == elem for v in [*model.graph.input, *model.graph.output])
    )


#: Cached files this process checked (parsed, ONNX checker, signature) and found valid, by path, with
#: their identity then (inode, size, modification and change times): the same unchanged file is not
#: parsed again for every use in a run (a rewrite, atomic or in place, changes the identity).
_checked: dict[Path, tuple[int, int, int, int]] = {}


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _is_valid_once(path: Path, entry: ZooModel) -> bool:
    """_is_valid, remembered for the file as it is: an unchanged file checked before is not parsed again."""
    before = _identity(path)
    if before is not None and _checked.get(path) == before:
        return True
    valid = _is_valid(path, entry)
    if valid and before is not None and _identity(path) == before:
        _checked[path] = before
    else:
        _checked.pop(path, None)
    return valid


def model_path(name: str) -> Path:
    """Path of the cached ONNX file of model `name`, building it first when missing or corrupt."""
    entry = get(name)
    return cached_file(
        cache_path(entry), partial(_is_valid_once, entry=entry), lambda: entry.build().SerializeToString()
    )


def load(name: str) -> onnx.ModelProto:
    """The ONNX model `name`, from the cache (built on first use)."""
    return onnx.load(str(model_path(name)))


def summary(name: str) -> dict:
    """Name, family, dtype, shapes, parameter count and MACs of model `name`.

    The counts depend only on the topology, so they come from a structure-only
    build (no calibration) and are cached beside the models.
    """
    import json

    from mlts.models.stats import count_macs, count_params

    entry = get(name)
    # A quantized model has its float model's topology, hence its parameter and MAC counts.
    base = get(entry.float_name) if entry.float_name else entry
    store = (
        cache_dir()
        / f"summaries.g{GENERATOR_VERSION}.s{speech.SPEECH_GENERATOR_VERSION}.c{COUNT_RULES_VERSION}.json"
    )
    try:
        known = json.loads(store.read_text(encoding="utf-8"))
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    counts = known.get(base.name)
    if not (
        isinstance(counts, dict)
        and isinstance(counts.get("params"), int)
        and isinstance(counts.get("macs"), int)
    ):
        graph = (base.structure or base.builder)()
        counts = {"params": count_params(graph), "macs": count_macs(graph)}
        known[base.name] = counts
        try:
            store.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(store, json.dumps(known, indent=1).encode())
        except OSError:
            pass  # a read-only cache only costs recomputation
    return {
        "name": entry.name,
        "family": entry.family,
        "dtype": entry.dtype,
        "weights": entry.weights,
        "float_model": entry.float_name,
        "input_quantization": (
            {"scale": entry.input_scale, "zero_point": entry.input_zero_point} if entry.quantized else None
        ),
        "form": entry.form,
        "input_shape": list(entry.input_shape),
        "output_shape": list(entry.output_shape),
        "state": [{"input": i, "output": o, "shape": list(shape)} for i, o, shape in entry.state],
        "sequence_dimension": "time" if entry.form == "sequence" else None,
        "params": counts["params"],
        "macs": counts["macs"],
        "macs_per": "step" if entry.recurrent else "inference",
        "synthetic_weights": entry.synthetic,
        "description": entry.description,
    }
