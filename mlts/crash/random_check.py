"""Checking random graphs: inputs, the CPU reference, CTS tolerances, failure classes and reproducible dumps.

The reference is the bundled sample driver's NumPy executor (`driver.executor.run_model`) run in
this process: the same kernels every sample-driver variant uses, without a driver process, a
request or shared memory in between. A driver's outputs pass when each is within the CTS
tolerance of the reference's: float32 |a - e| <= 1e-5 + 5 * 2^-23 * |e|, quant8 one unit,
integers and booleans exactly.

For the random stress modes an "invalid model" (INVALID_ARGUMENT) and an "unsupported model"
(getSupportedOperations says some operation is not supported) count as success; any other failure is dumped with
`dump` as an .nnm file that `mlts inspect` reads and `run_model` runs again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from driver.executor import run_model
from mlts import __version__
from mlts.bench.accuracy import FP32_ATOL, FP32_RTOL, QUANT_TOLERANCE_UNITS, within_tolerance
from mlts.crash.random_graph import INPUT_BOUND, GraphSpec
from mlts.hal import nnfile
from mlts.hal.enums import ErrorStatus, OperandType, name_of_code
from mlts.hal.errors import HalError
from mlts.hal.types import Model

# Float inputs have magnitudes in [INPUT_MIN, INPUT_BOUND]: bounded and never zero.
INPUT_MIN = 0.125
QUANT8_INPUT_RANGE = (1, 255)  # uint8 inputs: any non-zero byte


def random_inputs(model: Model, seed: int) -> list[np.ndarray]:
    """One array per model input, deterministic in `seed`: float32 values of magnitude in
    [INPUT_MIN, INPUT_BOUND] with random signs, TENSOR_QUANT8_ASYMM bytes in [1, 255]."""
    rng = np.random.default_rng(seed)
    sub = model.main
    arrays: list[np.ndarray] = []
    for k, index in enumerate(sub.input_indexes):
        operand = sub.operands[index]
        dims = tuple(operand.dimensions)
        if not dims or 0 in dims:
            raise ValueError(f"input {k} has dimensions {list(dims)}; random inputs need fully known shapes")
        if operand.type == OperandType.TENSOR_FLOAT32:
            magnitude = rng.uniform(INPUT_MIN, INPUT_BOUND, size=dims)
            sign = np.where(rng.random(size=dims) < 0.5, -1.0, 1.0)
            arrays.append((magnitude * sign).astype(np.float32))
        elif operand.type == OperandType.TENSOR_QUANT8_ASYMM:
            lo, hi = QUANT8_INPUT_RANGE
            arrays.append(rng.integers(lo, hi + 1, size=dims, dtype=np.uint8))
        else:
            name = name_of_code(OperandType, operand.type)
            raise ValueError(
                f"input {k} has type {name}; random inputs cover TENSOR_FLOAT32 and TENSOR_QUANT8_ASYMM"
            )
    return arrays


def reference_outputs(model: Model, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The CPU reference's outputs: the sample driver's NumPy executor, run in this process."""
    return run_model(model, inputs)


def _worst_float(a: np.ndarray, e: np.ndarray) -> tuple[int, float, float] | None:
    """(flat index, error, allowed error) of the element furthest outside the float32 tolerance, or None."""
    if within_tolerance(a, e):
        return None
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    allowed = FP32_ATOL + FP32_RTOL * np.abs(e64)
    with np.errstate(invalid="ignore"):
        ratio = np.abs(a64 - e64) / allowed
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    i = int(np.argmax(ratio))
    return i, float(abs(a64.flat[i] - e64.flat[i])), float(allowed.flat[i])


def _worst_exact(a: np.ndarray, e: np.ndarray, units: int) -> tuple[int, float, float] | None:
    """(flat index, error, allowed error) of the element differing by most, when it is more than `units`."""
    diff = np.abs(a.astype(np.int64) - e.astype(np.int64))
    if diff.size == 0 or int(diff.max()) <= units:
        return None
    i = int(np.argmax(diff))
    return i, float(diff.flat[i]), float(units)


def _output_problem(k: int, a: np.ndarray, e: np.ndarray) -> str | None:
    if a.shape != e.shape:
        return f"output {k}: shape {list(a.shape)}, the reference's is {list(e.shape)}"
    if a.dtype != e.dtype:
        return f"output {k}: dtype {a.dtype}, the reference's is {e.dtype}"
    if e.dtype.kind == "f":
        worst, unit = _worst_float(a, e), ""
    else:
        units = QUANT_TOLERANCE_UNITS if e.dtype in (np.uint8, np.int8) else 0
        worst, unit = _worst_exact(a, e, units), " units"
    if worst is None:
        return None
    i, error, allowed = worst
    where = list(np.unravel_index(i, e.shape)) if e.ndim else []
    return (
        f"output {k}: element {[int(x) for x in where]} is {a.flat[i]!r}, the reference gives {e.flat[i]!r} "
        f"(error {error:.6g}{unit} > tolerance {allowed:.6g}{unit})"
    )


def check_outputs(actual: Sequence[np.ndarray | None], expected: Sequence[np.ndarray]) -> str | None:
    """None when every output is within the CTS tolerance of the reference's, else one line naming
    the first bad output and its worst element."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, the reference has {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a is None:
            return f"output {k} is missing (the driver gave no value)"
        problem = _output_problem(k, np.asarray(a), np.asarray(e))
        if problem is not None:
            return problem
    return None


def classify_failure(error: HalError, supported: Sequence[bool] | None = None) -> str:
    """The class of a failed compile or run, decided from structure, never from the message's wording.

    `supported`: the driver's getSupportedOperations for the model (None when it could not answer).
    "unsupported" when the driver refused the preparation with INVALID_ARGUMENT or GENERAL_FAILURE
    and says some operation is not supported (NNAPI: a driver need not prepare a model it does not
    fully support); "invalid" for any other INVALID_ARGUMENT (both count as success in the random
    stress modes); else "failure".
    """
    refused = error.status in (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)
    if refused and supported is not None and not all(supported):
        return "unsupported"
    if error.status == ErrorStatus.INVALID_ARGUMENT:
        return "invalid"
    return "failure"


def supported_operations(device, model: Model) -> tuple[bool, ...] | None:
    """getSupportedOperations of `model`, or None when the driver cannot answer (an invalid model)."""
    try:
        return tuple(device.getSupportedOperations(model))
    except HalError:
        return None


def dump_path(directory: str | Path, seed: int, spec: GraphSpec) -> Path:
    """Where `dump` writes the model of (seed, spec): random-<seed>-<ops>.nnm."""
    return Path(directory) / f"random-{seed}-{spec.ops}.nnm"


def dump(model: Model, directory: str | Path, seed: int, spec: GraphSpec, reason: str) -> Path:
    """Write `model` as random-<seed>-<ops>.nnm in `directory` (created if missing); returns the path.

    The metadata holds the seed, the spec (JSON, `GraphSpec.from_json` reads it back), the reason
    and the mlts version, so the file can be inspected, run again or regenerated.
    """
    path = dump_path(directory, seed, spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = {
        "generator": "mlts.crash.random_graph",
        "seed": str(seed),
        "spec": spec.to_json(),
        "reason": reason,
        "mlts_version": __version__,
    }
    nnfile.write(model, path, metadata=metadata)
    return path
