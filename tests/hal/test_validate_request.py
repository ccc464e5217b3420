"""Request and call-argument validation, and hostile values rejected quickly and cheaply."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable
from dataclasses import replace

import pytest

from mlts.hal.memory import HostMemory
from mlts.hal.types import (
    DataLocation,
    ExtensionNameAndPrefix,
    Model,
    Operation,
    Request,
    Subgraph,
)
from mlts.hal.validate import (
    validate_cache_token,
    validate_execution_preference,
    validate_loop_timeout,
    validate_model,
    validate_priority,
    validate_request,
)
from tests.hal.validatekit import (
    COPY,
    IN,
    OUT,
    REF,
    TEMP,
    M,
    Op,
    T,
    arg,
    expect_invalid,
    make_model,
    make_request,
    model_with_dims,
    opnd,
    per_channel,
    set_graph,
    set_op,
    set_operand,
)


@pytest.mark.parametrize(
    "request_, model, kwargs",
    [
        (make_request(), make_model(), {}),
        (make_request(inputs=(arg(length=0, no_value=True),)), make_model(), {}),
        (make_request(outputs=(arg(pool=2, length=0),), pools=(*make_request().pools, 7)), make_model(), {}),
        (make_request(inputs=(arg(dims=(1, 4, 4, 2)),)), model_with_dims((1, 0, 0, 2)), {}),
        (make_request(inputs=(arg(dims=(1, 4, 4, 2)),)), model_with_dims(()), {}),
        (make_request(), model_with_dims(output_dims=(1, 0, 4, 3)), {}),
        (
            make_request(outputs=(arg(pool=1, length=192, dims=(1, 4, 4, 3)),)),
            model_with_dims(output_dims=()),
            {"allow_unspecified_output": False},
        ),
    ],
    ids=[
        "plain",
        "omitted-input",
        "token-output",
        "input-dims-given",
        "input-rank-given",
        "output-unknown-dim",
        "output-dims-given",
    ],
)
def test_valid_requests_pass(request_: Request, model: Model, kwargs: dict) -> None:
    validate_model(model)
    validate_request(request_, model, **kwargs)


REQUEST_RULES: list[tuple[str, Callable[[], tuple[Request, Model, dict]], tuple[str, ...]]] = [
    (
        "input-count",
        lambda: (make_request(inputs=()), M(), {}),
        ("request has 0 inputs", "main subgraph has 1"),
    ),
    (
        "output-count",
        lambda: (make_request(outputs=make_request().outputs * 2), M(), {}),
        ("request has 2 outputs",),
    ),
    (
        "pool-type",
        lambda: (make_request(pools=(b"x" * 128, make_request().pools[1])), M(), {}),
        ("request pool 0 is bytes",),
    ),
    (
        "pool-token-zero",
        lambda: (make_request(pools=(*make_request().pools, 0)), M(), {}),
        ("request pool 2", "token 0"),
    ),
    (
        "pool-index",
        lambda: (make_request(inputs=(arg(pool=5),)), M(), {}),
        ("request input 0 (operand 0 of main subgraph, TENSOR_FLOAT32)", "pool_index 5 out of range"),
    ),
    (
        "pool-range",
        lambda: (make_request(inputs=(arg(offset=8),)), M(), {}),
        ("request input 0", "offset 8 + length 128 exceeds pool 0 (128 bytes)"),
    ),
    (
        "token-location",
        lambda: (make_request(outputs=(arg(pool=2, length=4),), pools=(*make_request().pools, 3)), M(), {}),
        ("request output 0", "driver buffer", "must be 0"),
    ),
    (
        "no-value-location",
        lambda: (make_request(inputs=(arg(no_value=True, length=4),)), M(), {}),
        ("request input 0", "all-zero location"),
    ),
    (
        "no-value-dims",
        lambda: (make_request(outputs=(arg(no_value=True, length=0, dims=(1,)),)), M(), {}),
        ("request output 0", "no dimensions"),
    ),
    (
        "rank-mismatch",
        lambda: (make_request(inputs=(arg(dims=(1, 4, 8)),)), M(), {}),
        ("request input 0", "rank 3", "!= model rank 4"),
    ),
    (
        "dim-mismatch",
        lambda: (make_request(inputs=(arg(dims=(1, 4, 5, 2)),)), M(), {}),
        ("request input 0", "dimension 2 is 5, the model fixes it to 4"),
    ),
    (
        "dim-negative",
        lambda: (make_request(inputs=(arg(dims=(1, -4, 4, 2)),)), M(), {}),
        ("request input 0", "dimension 1 is -4"),
    ),
    (
        "input-length",
        lambda: (make_request(inputs=(arg(length=64),)), M(), {}),
        ("request input 0", "location.length 64 != 128 bytes"),
    ),
    (
        "input-unspecified",
        lambda: (make_request(), model_with_dims((1, 0, 4, 2)), {}),
        ("request input 0", "not fully specified"),
    ),
    (
        "input-unknown-rank",
        lambda: (make_request(), model_with_dims(()), {}),
        ("request input 0", "not fully specified"),
    ),
    (
        "input-zero-dim-given",
        lambda: (make_request(inputs=(arg(dims=(1, 0, 4, 2)),)), model_with_dims((1, 0, 4, 2)), {}),
        ("request input 0", "not fully specified"),
    ),
    (
        "output-unspecified",
        lambda: (
            make_request(),
            model_with_dims(output_dims=(1, 0, 4, 3)),
            {"allow_unspecified_output": False},
        ),
        ("request output 0", "does not allow unspecified outputs"),
    ),
    (
        "argument-type",
        lambda: (make_request(inputs=(DataLocation(0, 0, 128),)), M(), {}),
        ("request input 0", "expected a RequestArgument"),
    ),
]


@pytest.mark.parametrize("rule, mutate, fragments", REQUEST_RULES, ids=[r[0] for r in REQUEST_RULES])
def test_request_rule(
    rule: str, mutate: Callable[[], tuple[Request, Model, dict]], fragments: tuple[str, ...]
) -> None:
    request, model, kwargs = mutate()
    validate_model(model)  # the mutation breaks the request, never the model
    expect_invalid(lambda: validate_request(request, model, **kwargs), *fragments)


# ---------------------------------------------------------------- call arguments


@pytest.mark.parametrize("value", [0, 1, 2])
def test_priority_and_preference_valid(value: int) -> None:
    validate_priority(value)
    validate_execution_preference(value)


@pytest.mark.parametrize("value", [-1, 3, 2**40, 1.0, "1", None])
def test_priority_and_preference_invalid(value: object) -> None:
    expect_invalid(lambda: validate_priority(value), "priority", "valid values are LOW 0")
    expect_invalid(lambda: validate_execution_preference(value), "execution preference", "LOW_POWER 0")


def test_cache_token_and_loop_timeout() -> None:
    validate_cache_token(bytes(32))
    validate_cache_token(None)
    expect_invalid(lambda: validate_cache_token(bytes(31)), "31 bytes", "exactly 32")
    expect_invalid(lambda: validate_cache_token("x" * 32), "must be bytes")  # type: ignore[arg-type]
    for ok in (None, 0, 2_000_000_000, 15_000_000_000):
        validate_loop_timeout(ok)
    for bad in (-1, 15_000_000_001, 2.0):
        expect_invalid(lambda bad=bad: validate_loop_timeout(bad), "loop timeout", "at most 15 s")


# ---------------------------------------------------------------- hostile values and cost


def vm(model: Model) -> Callable[[], object]:
    return lambda: validate_model(model)


def vr(request: Request, model: Model) -> Callable[[], object]:
    return lambda: validate_request(request, model)


# Each entry builds the hostile object first, so only validation itself is measured.
HOSTILE: list[Callable[[], Callable[[], object]]] = [
    lambda: vm(set_operand(M(), 4, location=(0, 2**31, 2**31))),
    lambda: vm(set_operand(M(), 4, location=(0, 2**62, 216))),
    lambda: vm(set_operand(M(), 5, location=(0, 0, 2**64))),
    lambda: vm(set_operand(M(), 3, dimensions=(-(2**63), 1))),
    lambda: vm(set_operand(M(), 3, dimensions=(2**31,) * 4)),
    lambda: vm(set_operand(M(), 3, dimensions=(1,) * 1000)),
    lambda: vm(set_operand(M(), 3, dimensions=(0,) * 1_000_000)),
    lambda: vm(set_operand(M(), 3, dimensions=[1.5, 2])),
    lambda: vm(set_operand(M(), 0, scale=math.nan)),
    lambda: vm(set_operand(M(), 0, type=2**40)),
    lambda: vm(set_operand(M(), 0, lifetime=-7)),
    lambda: vm(set_op(M(), 0, type=2**70)),
    lambda: vm(set_op(M(), 0, inputs=(2**63,))),
    lambda: vm(per_channel(M(), scales=(1.0,) * 100_000)),
    lambda: vm(set_graph(M(), input_indexes=(0,) * 100_000)),
    lambda: vm(replace(M(), extension_name_to_prefix=(ExtensionNameAndPrefix("a." * 10_000, 1),))),
    lambda: vr(make_request(inputs=(arg(offset=2**63, length=2**63),)), M()),
    lambda: vr(make_request(inputs=(arg(dims=(2**40,) * 4),)), M()),
    lambda: vr(make_request(pools=(-5,)), M()),
    lambda: lambda: validate_priority(2**100),
]


@pytest.mark.parametrize("build", HOSTILE, ids=[f"hostile-{i}" for i in range(len(HOSTILE))])
def test_hostile_values_rejected_without_allocating_by_them(
    build: Callable[[], Callable[[], object]],
) -> None:
    # Refused before anything is sized by the hostile value: a bounded allocation, whatever the value.
    # (How fast: benchmarks/validation_speed.py; this machine may be busy.)
    call = build()
    tracemalloc.start()
    try:
        expect_invalid(call)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def make_big_model(layers: int = 100, pool_bytes: int = 17 * 1024 * 1024) -> Model:
    """A chain of `layers` ADDs, each adding a 16 KiB constant from one large pool (MobileNet-sized)."""
    shape = (1, 64, 64, 1)
    nbytes = 4 * 64 * 64
    operands = [opnd(T.TENSOR_FLOAT32, shape, IN, consumers=1), opnd(T.INT32, (), COPY, (0, 0, 4), layers)]
    ops = []
    prev = 0
    for k in range(layers):
        const = len(operands)
        operands.append(opnd(T.TENSOR_FLOAT32, shape, REF, (0, k * nbytes, nbytes), 1))
        out = len(operands)
        last = k == layers - 1
        operands.append(opnd(T.TENSOR_FLOAT32, shape, OUT if last else TEMP, consumers=0 if last else 1))
        ops.append(Operation(Op.ADD, (prev, const, 1), (out,)))
        prev = out
    main = Subgraph(tuple(operands), tuple(ops), (0,), (prev,))
    return Model(main, operand_values=bytes(4), pools=(HostMemory(bytearray(pool_bytes)),))


def test_mobilenet_sized_model_copies_nothing() -> None:
    # Its speed (50 ms budget) is checked by benchmarks/validation_speed.py, not here: a busy machine.
    model = make_big_model()
    assert len(model.main.operands) >= 150
    validate_model(model)
    tracemalloc.start()
    try:
        validate_model(model)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, f"validation allocated {peak} bytes"
