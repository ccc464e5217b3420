"""Validator and kernels agree: every operation x type the validator accepts (its probe models), the driver
prepares and runs; operations the validator refuses, the kernels refuse too when the validator is bypassed."""

from __future__ import annotations

import numpy as np
import pytest

from driver.executor import Plan, dtype_of
from driver.ops import kernel_for
from mlts.hal.enums import DTYPE_NAME, ErrorStatus, OperandType
from mlts.hal.errors import HalError
from mlts.hal.opprobe import probe_cases, probe_model, takes_per_channel
from mlts.hal.types import Model
from mlts.hal.validate import validate_model
from tests.hal.mutationkit import BROKEN

T = OperandType
CASES = [
    (c.op, c.key, pc)
    for c in probe_cases()
    if kernel_for(int(c.op)) is not None
    for pc in ((False, True) if takes_per_channel(c.op, c.key) else (False,))
]


def random_inputs(model: Model, seed: int = 0) -> list[np.ndarray]:
    """Values for the model inputs that every operation takes: positive floats (LOG, SQRT, POW), any
    quantised value, zeros for TENSOR_INT32 (valid as an index into any non-empty dimension)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for idx in model.main.input_indexes:
        o = model.main.operands[idx]
        shape = tuple(o.dimensions)
        dtype = dtype_of(o.type)
        if o.type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
            arr = rng.uniform(0.25, 1.0, size=shape)
        elif o.type == T.TENSOR_INT32:
            arr = np.zeros(shape)
        elif o.type == T.TENSOR_BOOL8:
            arr = rng.integers(0, 2, size=shape)
        else:
            info = np.iinfo(np.dtype(DTYPE_NAME[T(o.type)]))
            arr = rng.integers(max(info.min, -100), min(info.max, 100) + 1, size=shape)
        arrays.append(np.ascontiguousarray(arr, dtype=dtype))
    return arrays


@pytest.mark.parametrize(
    ("op", "key", "per_channel"), CASES, ids=[f"{o.name}-{k.name}{'-pc' if p else ''}" for o, k, p in CASES]
)
def test_valid_probe_prepares_and_runs(op, key, per_channel) -> None:
    model = probe_model(op, key, per_channel)
    validate_model(model)
    outputs = Plan(model).run(random_inputs(model))
    for idx, arr in zip(model.main.output_indexes, outputs, strict=True):
        operand = model.main.operands[idx]
        assert arr.dtype == dtype_of(operand.type)
        dims = tuple(operand.dimensions)
        assert len(arr.shape) == len(dims) and all(d in (0, a) for d, a in zip(dims, arr.shape, strict=True))


# Broken rules the kernels leave to the validator, and why.
KERNEL_LEAVES_TO_VALIDATOR: dict[str, str] = {
    "conv-bias-omitted": "CONV_2D's kernel reads an omitted bias as zeros; the validator refuses it first",
}
# Broken rules about a declared output shape: the kernel computes the shape its inputs make and the
# executor refuses the disagreement when it runs (GENERAL_FAILURE, as NNAPI's execution fails).
REFUSED_AT_RUN_TIME = frozenset({"fc-output-units", "multinomial-samples"})


@pytest.mark.parametrize(("name", "op", "key", "mutate"), [b[:4] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_kernel_refuses_what_the_validator_refuses(name, op, key, mutate) -> None:
    if name in KERNEL_LEAVES_TO_VALIDATOR:
        pytest.skip(KERNEL_LEAVES_TO_VALIDATOR[name])
    model = mutate(probe_model(op, key))
    with pytest.raises(HalError) as info:
        Plan(model).run(random_inputs(model))
    if name in REFUSED_AT_RUN_TIME:
        assert info.value.status == ErrorStatus.GENERAL_FAILURE and "model declares" in info.value.message
    else:
        assert info.value.status == ErrorStatus.INVALID_ARGUMENT, info.value.message
