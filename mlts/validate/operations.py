"""The `operations` suite: generated correctness cases per operation × operand type × layout (CTS-style).

For every (operation, key type[, per-channel weights]) the signature table defines
(docs/operations.md), the driver is asked by getSupportedOperations whether it claims
the combination; each claimed one becomes a case: the one-operation probe model with
seeded random inputs (and weights), checked against a float64 reference written from
NNAPI's definitions (`operations_refs*`) at NNAPI's CTS tolerances (`operations_data`).
Each case runs on every execution path the driver offers, with input 0 and output 0 in
driver-managed memory, and with outputs of unknown shape (the driver must report the
real shape, and answer OUTPUT_INSUFFICIENT_SIZE when the buffer is too small). Variants:
NCHW layout where the operation has a layout flag, relaxed float32 for float32 cases.

An operation without a reference here is still run on every path; its paths must agree
with each other, and the case is a "skip" that says so. The default (quick) run checks
every claimed combination on the sync path plus a rotating subset of the other checks.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.opprobe import probe_cases, probe_model, probe_suite, takes_per_channel
from mlts.validate import (
    operations_refs_nn,  # noqa: F401  (registers the NN references)
    reproducer,
)
from mlts.validate.core import CaseResult, SuiteOptions, Target, is_death, is_hang, run_case
from mlts.validate.operations_data import (
    bias_scales,
    compare,
    dequantize,
    expected_stored,
    make_inputs,
    randomise_weights,
    tolerance,
)
from mlts.validate.operations_exec import NoDriverMemory, PreparedCase, host_request
from mlts.validate.operations_model import OpModel, assemble, take_apart, to_nchw
from mlts.validate.operations_refs import REFERENCES, Ctx
from mlts.validate.operations_signed import CHECK as SIGNED_CHECK
from mlts.validate.operations_signed import LEFT_OUT, run_pairs

SUITE = "operations"
T = OperandType
#: Checks each case variant gets in a full run, in this order.
CHECKS = ("sync", "async", "fenced", "burst", "driver-memory", "dynamic-shape")
#: In a quick run each case gets sync plus this many other checks, rotating through CHECKS.
QUICK_EXTRA = 1


@dataclass(frozen=True)
class Combo:
    """One row of the coverage table: operation, key type, per-channel weights."""

    op: OperationType
    key: OperandType
    per_channel: bool

    @property
    def name(self) -> str:
        return f"{self.op.name}/{self.key.name}{'/per-channel' if self.per_channel else ''}"


def case_name(combo: Combo, label: str, check: str) -> str:
    """'OPERATION/TYPE: [per-channel/][nchw|relaxed/]CHECK' (the report's matrix reads the prefix)."""
    parts = ["per-channel"] if combo.per_channel else []
    parts += [label] if label else []
    return f"{combo.op.name}/{combo.key.name}: {'/'.join([*parts, check])}"


def combos() -> list[Combo]:
    """Every (operation, key type, per-channel) combination of the signature table."""
    out = []
    for case in probe_cases():
        out.append(Combo(case.op, case.key, False))
        if takes_per_channel(case.op, case.key):
            out.append(Combo(case.op, case.key, True))
    return out


def claimed(target: Target, items: list[Combo]) -> list[bool]:
    """getSupportedOperations on one model holding every combination's probe operation."""
    if not items:
        return []
    model = probe_suite([(c.op, c.key, c.per_channel) for c in items])
    try:
        return list(_ask(target, model))
    except HalError:
        pass
    # The driver refused the combined model: ask about each combination on its own.
    flags = []
    for c in items:
        try:
            flags.append(bool(_ask(target, probe_model(c.op, c.key, c.per_channel))[0]))
        except HalError:
            flags.append(False)
    return flags


def _ask(target: Target, model: Any) -> tuple[bool, ...]:
    """getSupportedOperations; a driver that hangs or dies on it is restarted before the error goes on."""
    device = target.device()
    try:
        return device.getSupportedOperations(model)
    except HalError as e:
        if is_hang(e) or is_death(e, device):
            target.restart(
                f"operations: getSupportedOperations {'hung' if is_hang(e) else 'killed the driver'}"
            )
        raise


@dataclass(frozen=True)
class Variant:
    """A case to run: its name, its operation model and its seeded inputs."""

    combo: Combo
    label: str  # "" | "nchw" | "relaxed"
    case: OpModel
    inputs: list[np.ndarray]

    def case_name(self, check: str) -> str:
        return case_name(self.combo, self.label, check)


def _seed(options_seed: int, name: str) -> int:
    return (options_seed * 1_000_003 + zlib.crc32(name.encode())) & 0xFFFFFFFF


def variants(combo: Combo, seed: int) -> Iterator[Variant]:
    base = take_apart(probe_model(combo.op, combo.key, combo.per_channel))
    s = _seed(seed, combo.name)
    base = randomise_weights(base, combo.op.name, s)
    yield Variant(combo, "", base, make_inputs(base, combo.op.name, s))
    nchw = to_nchw(base, combo.op.name)
    if nchw is not None:
        inputs = make_inputs(base, combo.op.name, s)
        inputs[0] = np.ascontiguousarray(inputs[0].transpose(0, 3, 1, 2))
        yield Variant(combo, "nchw", nchw, inputs)
    if combo.key == T.TENSOR_FLOAT32:
        relaxed = replace(base, relax=True)
        yield Variant(combo, "relaxed", relaxed, make_inputs(relaxed, combo.op.name, s))


# ---------------------------------------------------------------- references


def expected(v: Variant) -> list[np.ndarray] | None:
    """The reference outputs as the output operands store them (float64), or None without a reference."""
    fn = REFERENCES.get(v.combo.op.name)
    if fn is None:
        return None
    case = bias_scales(v.case)
    nchw = v.label == "nchw"
    values = iter(v.inputs)
    args: list[Any] = []
    for pos, slot in enumerate(case.inputs):
        raw = next(values) if slot.kind == "input" else slot.value
        value = dequantize(slot, raw)
        if nchw and pos == 0:
            value = np.transpose(value, (0, 2, 3, 1))
        args.append(value)
    outs = _nhwc_outputs(case.outputs) if nchw else case.outputs
    with np.errstate(all="ignore"):
        got = fn(args, Ctx(v.combo.op.name, outs))
    result = []
    for k, (slot, value) in enumerate(zip(case.outputs, got, strict=False)):
        if value is None:  # an output whose contents NNAPI leaves to the driver (LSTM's scratch buffer)
            result.append(None)
            continue
        arr = np.asarray(value)
        if nchw and k == 0 and arr.ndim == 4:
            arr = np.transpose(arr, (0, 3, 1, 2))
        result.append(expected_stored(slot, arr))
    return result


def _nhwc_outputs(outs: tuple) -> tuple:
    first = outs[0]
    if len(first.dims) != 4:
        return outs
    n, c, h, w = first.dims
    return (replace(first, dims=(n, h, w, c)), *outs[1:])


# ---------------------------------------------------------------- checks


def _check_outputs(
    v: Variant,
    got: list[np.ndarray],
    want: list[np.ndarray] | None,
    agree: list[np.ndarray] | None,
    what: str,
) -> str | None:
    relaxed = v.case.relax
    for k, slot in enumerate(v.case.outputs):
        tol = tolerance(slot, relaxed)
        if want is not None:
            if k >= len(want) or want[k] is None:
                continue
            problem = compare(got[k], want[k], tol)
            if problem:
                return f"{what}: output {k} ({T(slot.type).name}) against the float64 reference: {problem}"
        elif agree is not None:
            problem = compare(got[k], agree[k].astype(np.float64), tol)
            if problem:
                return f"{what}: output {k} differs from the sync path: {problem}"
    return None


def _dynamic(
    target: Target, v: Variant, mode: str, want: list[np.ndarray] | None, agree: list[np.ndarray]
) -> str | None:
    """Outputs declared with unknown dimensions: the driver reports the shapes; a short buffer is refused."""
    model = assemble(v.case, unknown_outputs=True)
    case = PreparedCase(target.device(), model)
    try:
        shapes = [a.shape for a in agree]
        got, result = case.run(mode, v.inputs, case.out_bytes(shapes))
        for k, a in enumerate(agree):
            reported = tuple(result.output_shapes[k].dimensions) if k < len(result.output_shapes) else None
            if a.ndim and reported != tuple(a.shape):
                return (
                    f"dynamic-shape ({mode}): output {k} reported shape {reported}, expected {list(a.shape)}"
                )
        problem = _check_outputs(v, got, want, agree, f"dynamic-shape ({mode})")
        if problem:
            return problem
        big = [k for k, a in enumerate(agree) if a.nbytes > a.itemsize]
        if not big:
            return None
        k = big[0]
        short = case.out_bytes(shapes)
        short[k] = agree[k].nbytes - agree[k].itemsize
        try:
            case.run(mode, v.inputs, short)
        except HalError as e:
            if e.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                return f"dynamic-shape ({mode}): a {short[k]}-byte buffer for output {k} failed with {e.status.name}, expected OUTPUT_INSUFFICIENT_SIZE"
            shapes_back = getattr(e, "output_shapes", ())
            if len(shapes_back) > k and (
                shapes_back[k].is_sufficient or tuple(shapes_back[k].dimensions) != tuple(agree[k].shape)
            ):
                return (
                    f"dynamic-shape ({mode}): OUTPUT_INSUFFICIENT_SIZE reports output {k} as "
                    f"{list(shapes_back[k].dimensions)} sufficient={shapes_back[k].is_sufficient}; expected "
                    f"{list(agree[k].shape)} insufficient"
                )
            return None
        return f"dynamic-shape ({mode}): a {short[k]}-byte buffer for output {k} ({agree[k].nbytes} needed) was accepted"
    finally:
        case.close()


def _checks_for(index: int, quick: bool, paths: tuple[str, ...]) -> list[str]:
    offered = [c for c in CHECKS if c in paths or c in ("driver-memory", "dynamic-shape")]
    if not quick:
        return offered
    extra = [c for c in offered if c != "sync"]
    picked = [extra[(index + j) % len(extra)] for j in range(min(QUICK_EXTRA, len(extra)))] if extra else []
    return ["sync", *picked]


def _save_reproducer(target: Target, v: Variant, want: list[np.ndarray] | None, agree: Any, mode: str) -> str:
    model = assemble(v.case)
    reference = want if want is not None else agree
    shapes = [
        reference[k].shape
        if reference is not None and k < len(reference) and reference[k] is not None
        else s.dims
        for k, s in enumerate(v.case.outputs)
    ]
    outs_bytes = [
        int(np.prod(d, dtype=np.int64)) * s.dtype.itemsize
        for d, s in zip(shapes, v.case.outputs, strict=True)
    ]
    request = host_request(model, v.inputs, outs_bytes)
    outputs = []
    for k, slot in enumerate(v.case.outputs):
        if reference is None or k >= len(reference) or reference[k] is None:
            continue
        tol = tolerance(slot, v.case.relax)
        # Stored in the output's own type: a replay reads the output buffer as that type.
        arr = np.ascontiguousarray(_as_stored(np.asarray(reference[k], dtype=np.float64), slot.dtype))
        outputs.append(
            {
                "index": k,
                "dtype": slot.dtype.name,
                "shape": list(arr.shape),
                "data": base64.b64encode(arr.tobytes()).decode("ascii"),
                "atol": tol.atol,
                "rtol": tol.rtol,
            }
        )
    return reproducer.save(
        target.out_dir,
        SUITE,
        v.case_name(mode),
        "request",
        model=model,
        request=request,
        expect={"status": "NONE", "outputs": outputs},
        raw=False,
        execution={"mode": mode if mode in target.paths else "sync", "measure": False, "loop_timeout": None},
        note="float64 reference" if want is not None else "outputs of the driver's sync path (no reference)",
    )


def _as_stored(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iub":
        return np.round(values).astype(dtype)
    return values.astype(dtype)


def _run_variant(target: Target, v: Variant, index: int, options: SuiteOptions, emit: Callable) -> None:
    try:
        want = expected(v)
    except Exception as e:  # a reference that cannot handle this case: say so, check the paths only
        want = None
        ref_note = f"reference failed ({type(e).__name__}: {e})"
    else:
        ref_note = "" if want is not None else f"no float64 reference for {v.combo.op.name}"
    state: dict[str, Any] = {"agree": None}
    checks = _checks_for(index, options.quick, target.paths)
    model = assemble(v.case)

    def body_for(check: str) -> Callable[[], Any]:
        def body() -> Any:
            if check == "dynamic-shape":
                agree = state["agree"] or _sync_outputs(target, model, v)
                state["agree"] = agree
                modes = ["sync"] if options.quick else [m for m in target.paths if m != "fenced"]
                for mode in modes:
                    problem = _dynamic(target, v, mode, want, agree)
                    if problem:
                        return problem
                return ("skip", f"{ref_note}; shapes checked") if want is None else None
            if check in ("fenced", "driver-memory") and not all(0 not in s.dims for s in v.case.outputs):
                return ("skip", f"outputs of data-dependent shape: {check} needs fully specified outputs")
            case = PreparedCase(target.device(), model)
            try:
                if check == "driver-memory":
                    try:
                        got = case.run_in_driver_memory("sync", v.inputs)
                    except NoDriverMemory as e:
                        return ("skip", f"the driver allocates no buffers (allocate: GENERAL_FAILURE: {e})")
                else:
                    got, _ = case.run(check, v.inputs)
            finally:
                case.close()
            if check == "sync":
                state["agree"] = got
            problem = _check_outputs(v, got, want, state["agree"] if check != "sync" else None, check)
            if problem:
                return problem
            if want is None:
                return ("skip", f"{ref_note}; {'agrees with the sync path' if check != 'sync' else 'ran'}")
            return None

        return body

    def reproducer_for(check: str) -> Callable[[], str | None]:
        # state["agree"] is read when the case fails, after the sync check has filled it in.
        return lambda: _save_reproducer(target, v, want, state["agree"], check)

    for check in checks:
        name = v.case_name(check)
        if not options.wants(name):
            continue
        run_case(
            target,
            SUITE,
            name,
            body_for(check),
            emit,
            reproducer=reproducer_for(check),
        )


def _sync_outputs(target: Target, model: Any, v: Variant) -> list[np.ndarray]:
    case = PreparedCase(target.device(), model)
    try:
        return case.run("sync", v.inputs)[0]
    finally:
        case.close()


def run(target: Target, options: SuiteOptions, emit: Callable[[CaseResult], None]) -> None:
    """Run the operations suite on `target`, emitting one result per case × check, then the
    signed-vs-unsigned cases of every operation it claims in both 8-bit types (operations_signed)."""
    items = [c for c in combos() if _selected(c, options)]
    flags = claimed(target, items)
    index = 0
    pairs: list[tuple[Variant, Combo]] = []
    claimed_set = {c for c, ok in zip(items, flags, strict=True) if ok}
    for combo, supported in zip(items, flags, strict=True):
        if not supported:
            if options.wants(case_name(combo, "", "not claimed")):
                emit(
                    CaseResult(
                        SUITE,
                        case_name(combo, "", "not claimed"),
                        "skip",
                        "the driver does not claim it (getSupportedOperations)",
                    )
                )
            continue
        try:
            vs = list(variants(combo, options.seed))
        except Exception as e:
            emit(
                CaseResult(
                    SUITE,
                    case_name(combo, "", "build"),
                    "error",
                    f"cannot build the case: {type(e).__name__}: {e}",
                )
            )
            continue
        for v in vs:
            _run_variant(target, v, index, options, emit)
            index += 1
        signed = Combo(combo.op, T.TENSOR_QUANT8_ASYMM_SIGNED, combo.per_channel)
        if combo.key == T.TENSOR_QUANT8_ASYMM and signed in claimed_set and combo.op not in LEFT_OUT:
            pairs.append((vs[0], signed))
    run_pairs(target, pairs, options, emit, SUITE, lambda c, check: case_name(c, "", check))


def _selected(combo: Combo, options: SuiteOptions) -> bool:
    """Whether --filter selects any case of this combination (a signed-vs-unsigned case needs both;
    whatever the shard: every shard enumerates the same combinations, so quick runs rotate their
    checks alike)."""
    options = options.unsharded()
    if options.filter is None:
        return True
    if combo.key in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
        signed = Combo(combo.op, T.TENSOR_QUANT8_ASYMM_SIGNED, combo.per_channel)
        if options.wants(case_name(signed, "", SIGNED_CHECK)):
            return True
    checks = (*CHECKS, "not claimed")
    return any(options.wants(case_name(combo, label, c)) for label in ("", "nchw", "relaxed") for c in checks)
