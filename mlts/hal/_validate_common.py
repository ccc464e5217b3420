"""Shared pieces of model and request validation: limits, labels and integer checks."""

from __future__ import annotations

import math
from typing import Any

from mlts.hal.enums import ELEMENT_SIZE, EXTENSION_TYPE_LOW_BITS, OperandLifeTime, OperandType, OperationType
from mlts.hal.errors import invalid

# HAL dimensions, offsets and lengths are uint32; sizes above this cannot be expressed.
UINT32_MAX = 2**32 - 1
# No NNAPI operation takes tensors near this rank; the limit keeps hostile
# dimension lists cheap to reject.
MAX_RANK = 32

OPERAND_TYPE_CODES = frozenset(int(t) for t in OperandType)
OPERATION_TYPE_CODES = frozenset(int(t) for t in OperationType)
LIFETIME_CODES = frozenset(int(t) for t in OperandLifeTime)
# Element size by plain int code, so untrusted ints can be looked up directly.
ELEMENT_BYTES: dict[int, int] = {int(t): n for t, n in ELEMENT_SIZE.items()}


def is_int(value: Any) -> bool:
    """A true integer (IntEnum members count; bool and float do not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """An int or float that is neither NaN nor infinite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


def split_type(code: int) -> tuple[int, int]:
    """(prefix, low bits) of an operand or operation type code."""
    return code >> EXTENSION_TYPE_LOW_BITS, code & ((1 << EXTENSION_TYPE_LOW_BITS) - 1)


def type_label(code: Any) -> str:
    """A readable name for an operand type code, known or not."""
    if is_int(code):
        if code in OPERAND_TYPE_CODES:
            return OperandType(code).name
        if code > 0:
            prefix, low = split_type(code)
            if prefix:
                return f"extension type {low} of prefix {prefix}"
    return f"type {code!r}"


def op_label(code: Any) -> str:
    """A readable name for an operation type code, known or not."""
    if is_int(code):
        if code in OPERATION_TYPE_CODES:
            return OperationType(code).name
        if code > 0:
            prefix, low = split_type(code)
            if prefix:
                return f"extension operation {low} of prefix {prefix}"
    return f"operation type {code!r}"


def lifetime_label(code: Any) -> str:
    """A readable name for a lifetime code, known or not."""
    if is_int(code) and code in LIFETIME_CODES:
        return OperandLifeTime(code).name
    return f"lifetime {code!r}"


def check_dims(dims: Any, where: str) -> tuple[int, ...]:
    """Dimensions as a tuple of ints in [0, UINT32_MAX] with rank <= MAX_RANK, else invalid."""
    if not isinstance(dims, (tuple, list)):
        raise invalid(f"{where}: dimensions must be a tuple of ints, got {type(dims).__name__}")
    # Length first, so a hostile rank is refused before any element is looked at.
    if len(dims) > MAX_RANK:
        raise invalid(f"{where}: rank {len(dims)} exceeds the maximum rank {MAX_RANK}")
    for axis, d in enumerate(dims):
        if not is_int(d) or d < 0 or d > UINT32_MAX:
            raise invalid(
                f"{where}: dimension {axis} is {d!r}; valid dimensions are ints in [0, {UINT32_MAX}] (0 = unknown)"
            )
    return tuple(dims)


def check_location_fields(loc: Any, where: str) -> tuple[int, int, int]:
    """(pool_index, offset, length) as uint32 ints, else invalid."""
    values: list[int] = []
    for name in ("pool_index", "offset", "length"):
        v = getattr(loc, name, None)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > UINT32_MAX:
            raise invalid(f"{where}: location.{name} is {v!r}; valid values are ints in [0, {UINT32_MAX}]")
        values.append(v)
    return values[0], values[1], values[2]


def known_product(dims: tuple[int, ...]) -> int:
    """Product of the known (non-zero) dimensions, stopping once it exceeds uint32."""
    n = 1
    for d in dims:
        if d:
            n *= d
            if n > UINT32_MAX:
                return n
    return n
