"""Validation of one operand: type, dimensions, quantisation, extra params, lifetime and location."""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from mlts.hal._validate_common import (
    ELEMENT_BYTES,
    LIFETIME_CODES,
    OPERAND_TYPE_CODES,
    UINT32_MAX,
    check_dims,
    check_location_fields,
    is_finite_number,
    is_int,
    known_product,
    lifetime_label,
    split_type,
    type_label,
)
from mlts.hal.enums import SCALAR_TYPES, OperandLifeTime, OperandType
from mlts.hal.errors import invalid
from mlts.hal.types import DataLocation, ExtensionData, Model, Operand, SymmPerChannelQuantParams

T = OperandType
L = OperandLifeTime

# Types whose scale and zero point must both be 0.
_NO_QUANT = frozenset(
    {
        T.FLOAT32,
        T.INT32,
        T.UINT32,
        T.FLOAT16,
        T.BOOL,
        T.TENSOR_FLOAT32,
        T.TENSOR_FLOAT16,
        T.TENSOR_BOOL8,
        T.SUBGRAPH,
        T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
    }
)
# Quantised types: scale > 0 and zero point in the given closed range.
_QUANT_ZERO_POINT: dict[int, tuple[int, int]] = {
    T.TENSOR_QUANT8_ASYMM: (0, 255),
    T.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
    T.TENSOR_QUANT8_SYMM: (0, 0),
    T.TENSOR_QUANT16_ASYMM: (0, 65535),
    T.TENSOR_QUANT16_SYMM: (0, 0),
}
_LOCATIONLESS = frozenset({L.TEMPORARY_VARIABLE, L.SUBGRAPH_INPUT, L.SUBGRAPH_OUTPUT, L.NO_VALUE})
CONSTANT_LIFETIMES = frozenset({L.CONSTANT_COPY, L.CONSTANT_REFERENCE})


def operand_where(subgraph: str, index: int, operand: Operand) -> str:
    """The prefix of every message about operand `index`, e.g. 'operand 7 of main subgraph (TENSOR_FLOAT32 CONSTANT_COPY)'."""
    t = getattr(operand, "type", None)
    lt = getattr(operand, "lifetime", None)
    return f"operand {index} of {subgraph} ({type_label(t)} {lifetime_label(lt)})"


def check_operand(
    model: Model,
    pool_sizes: tuple[int, ...],
    subgraph: str,
    index: int,
    operand: Operand,
    ext_prefixes: Set[int],
) -> None:
    """Raise INVALID_ARGUMENT at the first rule `operand` breaks."""
    where = operand_where(subgraph, index, operand)
    if not isinstance(operand, Operand):
        raise invalid(
            f"operand {index} of {subgraph}: expected an Operand record, got {type(operand).__name__}"
        )
    code = operand.type
    extension = _check_type(code, where, ext_prefixes)
    dims = check_dims(operand.dimensions, where)
    if not extension:
        _check_rank(code, dims, where)
        size = ELEMENT_BYTES.get(code)
        if size is not None and size * known_product(dims) > UINT32_MAX:
            raise invalid(
                f"{where}: {size * known_product(dims)} bytes for dimensions {list(dims)} exceeds the uint32 size limit"
            )
    _check_quant(code, operand.scale, operand.zero_point, extension, where)
    _check_extra_params(code, dims, operand.extra_params, extension, where)
    if not is_int(operand.number_of_consumers) or operand.number_of_consumers < 0:
        raise invalid(
            f"{where}: number_of_consumers is {operand.number_of_consumers!r}; it must be an int >= 0"
        )
    _check_lifetime(model, pool_sizes, operand, dims, extension, where)


def _check_type(code: Any, where: str, ext_prefixes: Set[int]) -> bool:
    """True for an extension type; invalid for an unknown or undeclared one."""
    if not is_int(code) or code < 0 or code > UINT32_MAX:
        raise invalid(
            f"{where}: type {code!r} is not an operand type code (an OperandType or an extension code)"
        )
    if code in OPERAND_TYPE_CODES:
        return False
    prefix, _ = split_type(code)
    if prefix == 0:
        raise invalid(
            f"{where}: type {code} is neither an OperandType nor an extension type (prefix << 16 | type)"
        )
    if prefix not in ext_prefixes:
        raise invalid(f"{where}: extension type prefix {prefix} is not declared in extension_name_to_prefix")
    return True


def _check_rank(code: int, dims: tuple[int, ...], where: str) -> None:
    if code in SCALAR_TYPES and dims:
        raise invalid(
            f"{where}: scalar type with dimensions {list(dims)}; scalars have rank 0 (dimensions ())"
        )


def _check_quant(code: int, scale: Any, zero_point: Any, extension: bool, where: str) -> None:
    if not is_finite_number(scale):
        raise invalid(f"{where}: scale {scale!r} is not a finite number")
    if not is_int(zero_point):
        raise invalid(f"{where}: zero_point {zero_point!r} is not an int")
    if extension or code in (T.OEM, T.TENSOR_OEM_BYTE):
        return  # their quantisation is defined by the vendor
    if code in _NO_QUANT:
        if scale != 0 or zero_point != 0:
            raise invalid(
                f"{where}: scale {scale} and zero_point {zero_point}; this type requires scale 0 and zero_point 0"
            )
    elif code == T.TENSOR_INT32:
        if scale < 0:
            raise invalid(f"{where}: scale {scale} < 0; TENSOR_INT32 takes scale 0 or a positive bias scale")
        if zero_point != 0:
            raise invalid(f"{where}: zero_point {zero_point} != 0; TENSOR_INT32 requires zero_point 0")
    else:
        lo, hi = _QUANT_ZERO_POINT[code]
        if scale <= 0:
            raise invalid(f"{where}: scale {scale} <= 0; quantised types require scale > 0")
        if not lo <= zero_point <= hi:
            raise invalid(f"{where}: zero_point {zero_point} outside [{lo}, {hi}]")


def _check_extra_params(code: int, dims: tuple[int, ...], extra: Any, extension: bool, where: str) -> None:
    if code == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        if not isinstance(extra, SymmPerChannelQuantParams):
            raise invalid(
                f"{where}: extra_params is {type(extra).__name__}; per-channel types require SymmPerChannelQuantParams"
            )
        cd = extra.channel_dim
        if not is_int(cd) or not 0 <= cd < len(dims):
            raise invalid(f"{where}: channel_dim {cd!r} outside [0, rank {len(dims)})")
        scales = extra.scales
        if not isinstance(scales, (tuple, list)):
            raise invalid(f"{where}: channel scales must be a tuple of floats, got {type(scales).__name__}")
        if dims[cd] and len(scales) != dims[cd]:
            raise invalid(f"{where}: {len(scales)} channel scales != dimension {cd} ({dims[cd]})")
        if not scales or len(scales) > UINT32_MAX:
            raise invalid(f"{where}: {len(scales)} channel scales; at least one is required")
        for i, s in enumerate(scales):
            if not is_finite_number(s) or s <= 0:
                raise invalid(
                    f"{where}: channel scale {i} is {s!r}; every channel scale must be finite and > 0"
                )
    elif extension:
        if extra is not None and not isinstance(extra, ExtensionData):
            raise invalid(
                f"{where}: extra_params is {type(extra).__name__}; extension types take None or ExtensionData"
            )
        if extra is not None and not isinstance(extra.data, (bytes, bytearray)):
            raise invalid(
                f"{where}: extension extra_params data must be bytes, got {type(extra.data).__name__}"
            )
    elif extra is not None:
        raise invalid(
            f"{where}: extra_params is {type(extra).__name__}; only TENSOR_QUANT8_SYMM_PER_CHANNEL "
            "(channel quantisation) and extension types take extra params"
        )


def _check_lifetime(
    model: Model,
    pool_sizes: tuple[int, ...],
    operand: Operand,
    dims: tuple[int, ...],
    extension: bool,
    where: str,
) -> None:
    lifetime = operand.lifetime
    if not is_int(lifetime) or lifetime not in LIFETIME_CODES:
        raise invalid(f"{where}: lifetime {lifetime!r} is not an OperandLifeTime (0..6)")
    if not isinstance(operand.location, DataLocation):
        raise invalid(f"{where}: location must be a DataLocation, got {type(operand.location).__name__}")
    pool, offset, length = check_location_fields(operand.location, where)
    is_subgraph_type = operand.type == T.SUBGRAPH
    if (lifetime == L.SUBGRAPH) != is_subgraph_type:
        raise invalid(
            f"{where}: type SUBGRAPH and lifetime SUBGRAPH go together; "
            "a subgraph reference needs both, any other operand neither"
        )
    if lifetime in _LOCATIONLESS:
        if pool or offset or length:
            raise invalid(
                f"{where}: location ({pool}, {offset}, {length}) must be all zeros for this lifetime"
            )
        return
    if lifetime == L.SUBGRAPH:
        if pool or length:
            raise invalid(
                f"{where}: subgraph reference needs location.pool_index 0 and length 0, got {pool} and {length}"
            )
        if offset >= len(model.referenced):
            raise invalid(
                f"{where}: location.offset {offset} is not a referenced subgraph index "
                f"(model has {len(model.referenced)} referenced subgraphs)"
            )
        return
    if lifetime == L.CONSTANT_COPY:
        if pool:
            raise invalid(
                f"{where}: location.pool_index {pool} != 0; CONSTANT_COPY values live in operand_values"
            )
        available, what = len(model.operand_values), "operand_values"
    else:
        if pool >= len(pool_sizes):
            raise invalid(
                f"{where}: location.pool_index {pool} out of range (model has {len(pool_sizes)} pools)"
            )
        available, what = pool_sizes[pool], f"pool {pool}"
    if offset + length > available:
        raise invalid(
            f"{where}: location offset {offset} + length {length} exceeds {what} ({available} bytes)"
        )
    _check_constant_size(operand.type, dims, length, extension, where)


def _check_constant_size(code: int, dims: tuple[int, ...], length: int, extension: bool, where: str) -> None:
    size = None if extension else ELEMENT_BYTES.get(code)
    if size is None:
        return  # extension and OEM scalar sizes are vendor-defined
    if code not in SCALAR_TYPES:
        if not dims or 0 in dims:
            raise invalid(
                f"{where}: constant with dimensions {list(dims)}; constants must be fully specified"
            )
    expected = size * known_product(dims)
    if length != expected:
        raise invalid(f"{where}: location.length {length} != {expected} bytes (type size x dims)")
