"""The `validation` suite: invalid models and requests, one broken rule at a time; the driver must say INVALID_ARGUMENT.

Models and requests go through `target.raw_device()`, a service that does not
pre-validate, so the driver's own checks answer (VTS ValidateModel and
ValidateRequest). Sources of mutants:

- every operation × key type the driver claims (getSupportedOperations on the
  one-operation probe models of mlts.hal.opprobe): its signature broken —
  input and output counts, operand types and ranks, parameter values,
  parameters that must be constants (quick run: one key type per operation);
- a few base models: every operand's type, rank, scale, zero point, lifetime,
  consumers, location and extra parameters; operation codes and indexes,
  removed operations, subgraph I/O lists, extension tables;
- requests for the base models on every execution path: argument counts,
  pools, locations, dimensions, omitted values, buffer tokens, loop timeouts.

Each prepareModel mutant is also asked through getSupportedOperations, which
must fail with INVALID_ARGUMENT too. A driver that accepts a mutant fails the
case; one that dies or hangs makes it error/hang and is restarted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from mlts.hal import opprobe
from mlts.hal.enums import ErrorStatus, MeasureTiming, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.types import Model
from mlts.runtime.execution import ExecutionMode, execute
from mlts.runtime.remote import RemoteDevice
from mlts.validate import reproducer
from mlts.validate.control_flow_mutations import if_model, if_mutants, while_model, while_mutants
from mlts.validate.core import CaseResult, SuiteOptions, Target, run_case
from mlts.validate.mutations import Mutant, graph_mutants, judge, operand_mutants
from mlts.validate.operation_mutations import operation_mutants
from mlts.validate.request_mutations import RequestMutant, judge_requests, request_mutants, valid_request

SUITE = "validation"
Emit = Callable[[CaseResult], None]
#: (operation, key type, per-channel) of the base models every operand and graph mutation is applied to.
BASE_MODELS = (
    (OperationType.ADD, OperandType.TENSOR_FLOAT32, False),
    (OperationType.CONV_2D, OperandType.TENSOR_QUANT8_ASYMM, True),
)
#: Preferred key types when a quick run takes one per operation.
_QUICK_ORDER = (OperandType.TENSOR_FLOAT32, OperandType.TENSOR_QUANT8_ASYMM, OperandType.TENSOR_INT32)


def case_name(subject: str, family: str, detail: str) -> str:
    """'ADD/TENSOR_FLOAT32: operation input count: ...' — the operation/type prefix feeds the report's matrix."""
    return f"{subject}: {family}: {detail}"


def supported_probes(
    target: Target, quick: bool
) -> tuple[list[tuple[int, int, bool]], list[tuple[int, int, bool]]]:
    """(claimed, not claimed) probe cases: by one getSupportedOperations call on the probe suite."""
    cases: list[tuple[int, int, bool]] = [(c.op, c.key, False) for c in opprobe.probe_cases()]
    cases += [(op, key, True) for op, key, _ in cases if opprobe.takes_per_channel(op, key)]
    # The raw client answers a valid model as any client does, and saves starting a second driver.
    flags = target.raw_device().getSupportedOperations(opprobe.probe_suite(cases))
    claimed = [c for c, ok in zip(cases, flags, strict=True) if ok]
    unclaimed = [c for c, ok in zip(cases, flags, strict=True) if not ok]
    if quick:
        by_op: dict[int, tuple[int, int, bool]] = {}
        for case in claimed:
            best = by_op.get(case[0])
            if best is None or _rank(case) < _rank(best):
                by_op[case[0]] = case
        claimed = sorted(by_op.values())
    return claimed, unclaimed


def _rank(case: tuple[int, int, bool]) -> tuple[int, int]:
    key = case[1]
    return (_QUICK_ORDER.index(key) if key in _QUICK_ORDER else len(_QUICK_ORDER), int(case[2]))


def probe_label(op: int, key: int, per_channel: bool) -> str:
    suffix = "+PER_CHANNEL" if per_channel else ""
    return f"{OperationType(op).name}/{OperandType(key).name}{suffix}"


def expect_invalid_model(device: RemoteDevice, mutant: Mutant) -> str | None:
    """None if prepareModel and getSupportedOperations both answer INVALID_ARGUMENT, else why not."""
    broken = f"(breaks {mutant.rule}: {mutant.message})"
    try:
        prepared = device.prepareModel(mutant.model)
    except HalError as e:
        if e.status != ErrorStatus.INVALID_ARGUMENT:
            if device.dead is not None:
                raise
            return f"prepareModel answered {e.status.name} ({e.message}), not INVALID_ARGUMENT {broken}"
    else:
        prepared.close()
        return f"prepareModel accepted an invalid model {broken}"
    try:
        device.getSupportedOperations(mutant.model)
    except HalError as e:
        if e.status != ErrorStatus.INVALID_ARGUMENT:
            if device.dead is not None:
                raise
            return f"getSupportedOperations answered {e.status.name} ({e.message}), not INVALID_ARGUMENT {broken}"
        return None
    return f"getSupportedOperations answered for an invalid model {broken}"


def _model_case(target: Target, subject: str, mutant: Mutant, emit: Emit) -> CaseResult:
    name = case_name(subject, mutant.family, mutant.detail)

    def save() -> str:
        return reproducer.save(
            target.out_dir,
            SUITE,
            name,
            "model",
            model=mutant.model,
            expect={"status": "INVALID_ARGUMENT"},
            note=f"breaks {mutant.rule}: {mutant.message}",
        )

    return run_case(
        target, SUITE, name, lambda: expect_invalid_model(target.raw_device(), mutant), emit, save
    )


def _request_case(
    target: Target,
    subject: str,
    model: Model,
    mutant: RequestMutant,
    mode: ExecutionMode,
    emit: Emit,
    prepared_box: dict,
) -> CaseResult:
    name = case_name(f"{subject} [{mode}]", mutant.family, mutant.detail)

    def body() -> str | None:
        device = target.raw_device()
        prepared = prepared_box.get(id(device))
        if prepared is None:
            prepared_box.clear()
            prepared = prepared_box[id(device)] = device.prepareModel(model)
        try:
            execute(prepared, mutant.request, MeasureTiming.NO, mode, loop_timeout=mutant.loop_timeout)
        except HalError as e:
            if e.status == ErrorStatus.INVALID_ARGUMENT:
                return None
            if device.dead is not None:
                raise
            return f"{mode} execution answered {e.status.name} ({e.message}), not INVALID_ARGUMENT (breaks {mutant.rule}: {mutant.message})"
        return f"{mode} execution accepted an invalid request (breaks {mutant.rule}: {mutant.message})"

    def save() -> str:
        return reproducer.save(
            target.out_dir,
            SUITE,
            name,
            "request",
            model=model,
            request=mutant.request,
            execution={"mode": mode, "measure": False, "loop_timeout": mutant.loop_timeout},
            expect={"status": "INVALID_ARGUMENT"},
            note=f"breaks {mutant.rule}: {mutant.message}",
        )

    return run_case(target, SUITE, name, body, emit, save)


def model_sources(
    claimed: list[tuple[int, int, bool]], quick: bool, wanted: Callable[[str], bool] = lambda subject: True
) -> Iterator[tuple[str, Model, list[Mutant]]]:
    """(subject, valid model, judged mutants) for the per-operation and the base-model mutations, of the
    subjects `wanted` accepts (a cluster shard builds only its own)."""
    for op, key, per_channel in claimed:
        if not wanted(probe_label(op, key, per_channel)):
            continue
        model = opprobe.probe_model(op, key, per_channel)
        yield probe_label(op, key, per_channel), model, list(judge(operation_mutants(model)))
    for op, key, per_channel in BASE_MODELS:
        if (op, key, per_channel) not in claimed and (op, key, False) not in claimed:
            continue
        if not wanted(f"model {probe_label(op, key, per_channel)}"):
            continue
        model = opprobe.probe_model(op, key, per_channel)
        operands = range(len(model.main.operands)) if not quick else model.main.operations[0].inputs[:3]
        mutants = list(judge(operand_mutants(model, operands))) + list(judge(graph_mutants(model)))
        yield f"model {probe_label(op, key, per_channel)}", model, mutants
    for op, make, more in (
        (OperationType.IF, if_model, if_mutants),
        (OperationType.WHILE, while_model, while_mutants),
    ):
        if not wanted(f"{op.name}/TENSOR_FLOAT32"):
            continue
        model = make()
        mutants = list(judge(more(model)))
        if not quick:
            mutants += list(judge(graph_mutants(model)))
        yield f"{op.name}/TENSOR_FLOAT32", model, mutants


def run(target: Target, options: SuiteOptions, emit: Emit) -> None:
    """Every mutant of the claimed operations and the base models, then invalid requests on every path."""
    if not target.raw_available:
        emit(
            CaseResult(
                SUITE,
                "driver's own validation",
                "skip",
                f"the service at {target.spec.socket} pre-validates models and requests; serve the driver with "
                "`mlts driver serve NAME --no-prevalidate` to test the driver's own checks",
            )
        )
        return
    claimed, unclaimed = supported_probes(target, options.quick)
    for case in unclaimed:
        name = f"{probe_label(*case)}: not claimed"
        if options.wants(name):
            emit(
                CaseResult(
                    SUITE, name, "skip", "getSupportedOperations does not claim this operation and type"
                )
            )
    rules: set[str] = set()
    tried = 0
    for subject, _model, mutants in model_sources(claimed, options.quick, options.wants_group):
        seen: set[tuple[str, str]] = set()
        for mutant in mutants:
            if options.quick and (mutant.family, mutant.rule) in seen:
                continue  # a quick run tries each rule once per model and family
            seen.add((mutant.family, mutant.rule))
            name = case_name(subject, mutant.family, mutant.detail)
            if options.wants(name):
                _model_case(target, subject, mutant, emit)
                rules.add(mutant.rule)
                tried += 1
    for op, key, per_channel in BASE_MODELS:
        if (op, key, per_channel) not in claimed and (op, key, False) not in claimed:
            continue
        subject = f"request {probe_label(op, key, per_channel)}"
        if not options.wants_group(subject):
            continue
        model = opprobe.probe_model(op, key, per_channel)
        bad_requests = list(judge_requests(request_mutants(model, valid_request(model)), model))
        for mode in target.paths:
            box: dict = {}
            for bad in bad_requests:
                if options.wants(case_name(f"{subject} [{mode}]", bad.family, bad.detail)):
                    _request_case(target, subject, model, bad, mode, emit, box)
                    rules.add(bad.rule)
                    tried += 1
            for prepared in box.values():
                _close_quietly(prepared)
    run_case(
        target, SUITE, "driver alive after the invalid inputs", lambda: _alive(target, tried, rules), emit
    )


def _alive(target: Target, tried: int, rules: set[str]) -> tuple[str, str]:
    device = target.raw_device()
    device.ping()
    model = opprobe.probe_model(*BASE_MODELS[0][:2])
    prepared = device.prepareModel(model)
    try:
        execute(prepared, valid_request(model))
    finally:
        prepared.close()
    return "pass", f"after {tried} invalid models and requests breaking {len(rules)} distinct rules"


def _close_quietly(prepared: object) -> None:
    try:
        prepared.close()  # type: ignore[attr-defined]
    except Exception:
        pass
