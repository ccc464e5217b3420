"""The `model` suite: the driver on the user's own models (`mlts validate --model FILE`).

Per model file (ONNX, converted with the --input-shape and --input-value given; a .tflite file,
converted as TFLite's NNAPI delegate maps it, with LiteRT as its reference; or an .nnm file), on
seeded inputs of the kinds its inputs are (mlts.bench.inputs):

- supported: getSupportedOperations answers once per operation; a model the driver does not
  support wholly is a "skip" naming the operations (the other cases of the model are not run);
- prepare: prepareModel succeeds;
- one case per execution path: every input runs, and each output is judged as the benchmark's
  whole-network verdict judges it: its largest error against the float64 golden outputs at most
  k x onnxruntime's own plus the float32 floor (8-bit outputs: RMS deviation from onnxruntime at
  most one unit; of a .tflite model: from LiteRT's integer kernels). Without a golden reference
  (onnx.reference cannot run the model, a float .tflite or an .nnm file) the paths after the first
  must agree with the first within the float32 floor, and the first is a "skip" saying there is
  nothing to judge it against (for a .tflite model, with its largest difference from LiteRT).

A failing path case saves a reproducer (the model, the request of the input that failed, the
expected outputs with the limit as atol) that `mlts validate --replay` runs again.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlts.bench.user_model import InputSettings, UserModel, resolve
from mlts.records.tolerance import WHOLE_NETWORK_FLOAT, WHOLE_NETWORK_QUANT8
from mlts.runtime.execution import ExecutionMode
from mlts.validate import reproducer
from mlts.validate.core import CaseResult, SuiteOptions, Target, run_case

SUITE = "model"
Emit = Callable[[CaseResult], None]
#: Inputs each path runs: in a quick run and in a full one.
QUICK_INPUTS = 2
FULL_INPUTS = 8


@dataclass
class ModelWork:
    """A model file made ready: its NN model, inputs, and the references' outputs per input."""

    name: str
    model: Any
    output_names: tuple[str, ...]
    quantized: bool
    scales: tuple[float, ...]
    feeds: list[list[np.ndarray]]
    expected: list[list[np.ndarray]] | None = None  # the CPU reference's: onnxruntime's (LiteRT's)
    reference: str = "onnxruntime"  # which CPU reference `expected` comes from
    golden: list[list[np.ndarray]] | None = None  # the float64 reference's outputs
    limits: tuple[float, ...] = ()  # per output: the largest error against golden a driver may have


def settings_of(options: SuiteOptions) -> InputSettings:
    """The --input-shape and --input-value of the run (kept in the options as plain data)."""
    return InputSettings(
        {k: tuple(v) for k, v in options.input_shapes.items()},
        {k: np.asarray(v) for k, v in options.input_values.items()},
        files_option=False,
    )


def prepare_work(path: str, user: UserModel, loaded: Any, count: int, seed: int) -> ModelWork:
    """Convert (ONNX) or take (.nnm) the model, make `count` inputs and compute the references."""
    from mlts.bench.inputs import InputSpec, make_inputs
    from mlts.bench.user_model import nnm_inputs

    name = Path(path).name
    if user.is_nnm:
        model = loaded.model
        sub = model.main
        specs = [
            InputSpec(n, s, np.dtype(d), sc, zp) for n, s, d, sc, zp in nnm_inputs(model, loaded.metadata)
        ]
        outs = [sub.operands[i] for i in sub.output_indexes]
        quantized = bool(outs) and all(o.scale > 0 for o in outs)
        names = tuple(f"output{k}" for k in range(len(outs)))
        work = ModelWork(name, model, names, quantized, tuple(o.scale for o in outs), [])
        work.feeds = make_inputs(specs, count, seed=seed)
        return work
    from mlts.convert import convert

    conv = convert(loaded, input_shapes=user.convert_shapes(), input_values=dict(user.values) or None)
    graph = {i.name: i for i in user.inputs}
    specs = [
        InputSpec(
            t.name, tuple(t.shape), np.dtype(t.dtype), t.scale, t.zero_point,
            getattr(graph.get(t.name), "role", ""), getattr(graph.get(t.name), "vocab", None),
        )
        for t in conv.inputs
    ]  # fmt: skip
    quantized = bool(conv.outputs) and all(t.dtype in ("uint8", "int8") for t in conv.outputs)
    work = ModelWork(
        name,
        conv.model,
        tuple(t.name for t in conv.outputs),
        quantized,
        tuple(t.scale for t in conv.outputs),
        make_inputs(specs, count, seed=seed),
    )
    _references(work, loaded, conv, user)
    return work


def prepare_tflite_work(path: str, count: int, seed: int, shapes: dict | None = None) -> ModelWork:
    """Convert a .tflite model as TFLite's NNAPI delegate maps it; LiteRT's outputs are the reference."""
    from mlts.bench.inputs import make_inputs
    from mlts.bench.litert_reference import LiteRtReference
    from mlts.convert.tflite import convert_tflite_plan, load_tflite

    model = load_tflite(path)
    conv, plan = convert_tflite_plan(model, input_shapes=shapes or None)
    specs = [(tuple(t.shape), t.dtype, t.scale, t.zero_point) for t in conv.inputs]
    quantized = bool(conv.outputs) and all(t.dtype in ("uint8", "int8") for t in conv.outputs)
    work = ModelWork(
        Path(path).name,
        conv.model,
        tuple(t.name for t in conv.outputs),
        quantized,
        tuple(t.scale for t in conv.outputs),
        make_inputs(specs, count, seed=seed),
        reference="LiteRT",
    )
    reference = LiteRtReference(model.data, 1, plan)
    work.expected = [reference.run(f) for f in work.feeds]
    return work


def _references(work: ModelWork, proto: Any, conv: Any, user: UserModel) -> None:
    """onnxruntime's and (float models) the float64 golden outputs, and each output's error limit."""
    from mlts.bench.reference import OnnxRuntimeReference
    from mlts.bench.user_model import reference_feeds
    from mlts.bench.verdict import error_limit
    from mlts.datasets.golden import golden_all_outputs

    reference = OnnxRuntimeReference(proto.SerializeToString(), 1)
    feeds = reference_feeds(proto, reference.input_names, [t.name for t in conv.inputs], work.feeds, user)
    work.expected = [reference.run(f) for f in feeds]
    if work.quantized:
        return
    try:
        work.golden = golden_all_outputs(
            proto, [dict(zip(reference.input_names, f, strict=True)) for f in feeds], Path(work.name).stem
        )
    except Exception:  # onnx.reference cannot run it: the paths are checked against each other only
        return
    limits = []
    for k in range(len(work.output_names)):
        gold = [g[k] for g in work.golden]
        ort_error = max(_max_diff(e[k], g) for e, g in zip(work.expected, gold, strict=True))
        limits.append(error_limit(ort_error, max(float(np.max(np.abs(g), initial=0.0)) for g in gold)))
    work.limits = tuple(limits)


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    d = np.asarray(a, np.float64).reshape(-1) - np.asarray(b, np.float64).reshape(-1)
    return float(np.max(np.abs(d), initial=0.0))


def judge(
    work: ModelWork, outputs: list[list[np.ndarray]], agree: list[list[np.ndarray]] | None
) -> str | None:
    """Why `outputs` (one list per input) break the rule (see the module doc), or None."""
    for i, outs in enumerate(outputs):
        for k, out in enumerate(outs):
            name = work.output_names[k]
            if work.golden is not None:
                error = _max_diff(out, work.golden[i][k])
                if not error <= work.limits[k]:
                    return (
                        f"input {i}, output '{name}': max|driver - golden| {error:.3g} is above its limit "
                        f"{work.limits[k]:.3g} ({WHOLE_NETWORK_FLOAT.k:g} x onnxruntime's error + the float32 floor)"
                    )
            elif work.quantized and work.expected is not None:
                units = np.asarray(out, np.int64) - np.asarray(work.expected[i][k], np.int64).reshape(
                    np.shape(out)
                )
                rms = float(np.sqrt(np.mean(units.astype(np.float64) ** 2))) if units.size else 0.0
                if rms > WHOLE_NETWORK_QUANT8.rms_units:
                    return (
                        f"input {i}, output '{name}': RMS deviation from {work.reference} {rms:.3g} units is above "
                        f"{WHOLE_NETWORK_QUANT8.rms_units:g}"
                    )
            elif agree is not None:
                first = np.asarray(agree[i][k], np.float64)
                floor = WHOLE_NETWORK_FLOAT.floor_rel * max(1.0, float(np.max(np.abs(first), initial=0.0)))
                if not _max_diff(out, first) <= floor:
                    return f"input {i}, output '{name}': differs from the first path's by {_max_diff(out, first):.3g}"
    return None


def run(target: Target, options: SuiteOptions, emit: Emit) -> None:
    settings = settings_of(options)
    count = QUICK_INPUTS if options.quick else FULL_INPUTS
    for path in options.models:
        _run_model(target, path, settings, count, options, emit)


def _case(
    target: Target, options: SuiteOptions, name: str, body, emit: Emit, reproducer=None
) -> CaseResult | None:
    if not options.wants(name):
        return None
    return run_case(target, SUITE, name, body, emit, reproducer)


def _run_model(
    target: Target, path: str, settings: InputSettings, count: int, options: SuiteOptions, emit: Emit
) -> None:
    name = Path(path).name
    state: dict[str, Any] = {}

    def load() -> tuple[str, str] | None:
        from mlts.convert.formats import is_tflite_source

        try:
            if is_tflite_source(path):
                state["work"] = prepare_tflite_work(path, count, options.seed, dict(settings.shapes))
            else:
                user, loaded = resolve(path, settings)
                state["work"] = prepare_work(path, user, loaded, count, options.seed)
        except (ValueError, OSError) as e:  # the user's model, not the driver, is at fault
            return "skip", f"cannot use the model: {' '.join(str(e).split())}"
        return None

    case = f"{name}: load and convert"
    if options.wants(case):
        run_case(target, SUITE, case, load, emit)
    elif load() is not None:
        return
    if "work" not in state:
        return
    work: ModelWork = state["work"]

    def supported() -> tuple[str, str] | str | None:
        from mlts.hal.enums import OperationType

        ops = work.model.main.operations
        answers = target.device().getSupportedOperations(work.model)
        if len(answers) != len(ops):
            return f"getSupportedOperations gave {len(answers)} answers for {len(ops)} operations"
        missing = sorted({OperationType(o.type).name for o, ok in zip(ops, answers, strict=True) if not ok})
        if missing:
            state["unsupported"] = True
            return "skip", f"the driver does not support {', '.join(missing)}"
        return None

    result = _case(target, options, f"{name}: getSupportedOperations", supported, emit)
    if state.get("unsupported") or (result is not None and result.failed):
        return
    _run_paths(target, work, options, emit, state)


def _run_paths(target: Target, work: ModelWork, options: SuiteOptions, emit: Emit, state: dict) -> None:
    from mlts.validate.operations_exec import PreparedCase

    def prepare() -> None:
        state["prepared"] = PreparedCase(target.device(), work.model)

    _case(target, options, f"{work.name}: prepareModel", prepare, emit)
    prepared = state.get("prepared")
    if prepared is None:
        return
    try:
        for mode in target.paths:
            _run_path(target, work, prepared, mode, options, emit, state)
    finally:
        prepared.close()


def _run_path(
    target, work: ModelWork, prepared, mode: ExecutionMode, options, emit: Emit, state: dict
) -> None:
    case_name = f"{work.name} [{mode}]"
    failed_input: list[int] = []

    def body() -> tuple[str, str] | str | None:
        outputs = []
        for i, feed in enumerate(work.feeds):
            failed_input[:] = [i]
            outputs.append(prepared.run(mode, feed)[0])
        agree = state.get("first")
        if agree is None:
            state["first"] = outputs
        problem = judge(work, outputs, agree)
        if problem is not None:
            return problem
        if work.golden is None and not work.quantized and agree is None:
            if work.expected is not None:  # a float .tflite model: LiteRT's outputs, for information
                apart = max(
                    _max_diff(o, e) for outs, exp in zip(outputs, work.expected, strict=True)
                    for o, e in zip(outs, exp, strict=True)
                )  # fmt: skip
                return (
                    "skip",
                    f"no float64 reference of a .tflite model (max|driver - {work.reference}| is {apart:.3g}, "
                    "for information): the other paths are checked against this one",
                )
            return (
                "skip",
                "no float64 reference (onnx.reference cannot run the model, or an .nnm file): the other paths are checked against this one",
            )
        return None

    def save() -> str | None:
        return _save_reproducer(target, work, mode, failed_input[0] if failed_input else 0, case_name)

    _case(target, options, case_name, body, emit, save)


def _save_reproducer(target: Target, work: ModelWork, mode: ExecutionMode, i: int, case: str) -> str | None:
    """The model, the request of input `i` and what it should give (golden, the limit as atol)."""
    from mlts.validate.operations_exec import host_request

    if work.golden is None:
        return None
    sub = work.model.main
    outs = [sub.operands[k] for k in sub.output_indexes]
    sizes = [int(np.prod(o.dimensions, dtype=np.int64)) * np.dtype(_dtype(o)).itemsize for o in outs]
    request = host_request(work.model, work.feeds[i], sizes)
    expected = []
    for k, o in enumerate(outs):
        arr = np.ascontiguousarray(np.asarray(work.golden[i][k], np.float64).astype(_dtype(o)))
        expected.append(
            {
                "index": k,
                "dtype": arr.dtype.name,
                "shape": list(arr.shape),
                "data": base64.b64encode(arr.tobytes()).decode("ascii"),
                "atol": work.limits[k],
                "rtol": 0.0,
            }
        )
    return reproducer.save(
        target.out_dir,
        SUITE,
        case,
        "request",
        model=work.model,
        request=request,
        expect={"status": "NONE", "outputs": expected},
        raw=False,
        execution={"mode": mode, "measure": False, "loop_timeout": None},
        note="float64 golden outputs of the ONNX model; atol is the whole-network limit",
    )


def _dtype(operand) -> np.dtype:
    from mlts.hal.enums import DTYPE_NAME, OperandType

    return np.dtype(DTYPE_NAME[OperandType(operand.type)])
