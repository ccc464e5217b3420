"""Decoding of call arguments: every value is checked for type and range before it is used."""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from mlts.hal.deadlines import TimePoint
from mlts.hal.errors import invalid
from mlts.hal.types import CACHE_TOKEN_BYTES

_MISSING = object()


def type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def arg(
    args: Mapping[str, Any], method: str, key: str, kind: type | tuple[type, ...], default: Any = ...
) -> Any:
    """Argument `key` of `method`, checked against `kind` (bool is never an int here)."""
    value = args.get(key, _MISSING)
    if type(value) is kind:  # the usual case, decided at once
        return value
    if value is _MISSING:
        if default is ...:
            raise invalid(f"{method}: missing argument {key!r}")
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = any(
        (
            value is None
            if k is type(None)
            else isinstance(value, k) and not (k is int and isinstance(value, bool))
        )
        for k in kinds
    )
    if not ok:
        wanted = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise invalid(f"{method}: argument {key!r} must be {wanted}, got {type_name(value)} {value!r:.60}")
    return value


def int_list(args: Mapping[str, Any], method: str, key: str, limit: int) -> list[int]:
    """A list of at most `limit` integers (default empty)."""
    values = arg(args, method, key, list, [])
    if len(values) > limit:
        raise invalid(f"{method}: {key!r} has {len(values)} entries; at most {limit} are allowed")
    for v in values:
        if type(v) is not int:
            raise invalid(f"{method}: {key!r} must hold integers, got {type_name(v)} {v!r:.60}")
    return values


def enum_value(enum: type[IntEnum], method: str, key: str, value: int) -> Any:
    """`value` as a member of `enum`; the error lists the valid codes."""
    try:
        return enum(value)
    except ValueError:
        valid = ", ".join(f"{m.name}={m.value}" for m in enum)
        raise invalid(f"{method}: {key}={value} is not a valid {enum.__name__} ({valid})") from None


def code_value(enum: type[IntEnum], method: str, key: str, value: int, checked: bool) -> Any:
    """`enum_value` when the service judges such codes (`checked`); else any int32 as it came (a service
    that does not pre-validate leaves the code to the driver: only what the wire can carry is checked)."""
    if checked:
        return enum_value(enum, method, key, value)
    if not -(2**31) <= value < 2**31:
        raise invalid(f"{method}: {key}={value} is not an int32")
    return value


def opt_ns(args: Mapping[str, Any], method: str, key: str) -> int | None:
    """An optional nanosecond count (a deadline or a duration)."""
    value = args.get(key)
    if value is None:
        return None
    if type(value) is not int:
        value = arg(args, method, key, (int, type(None)), None)
    if value is not None and not 0 <= value < 2**64:
        raise invalid(f"{method}: {key}={value} must be a nanosecond count in [0, 2**64)")
    return value


def opt_deadline(args: Mapping[str, Any], method: str, key: str = "deadline") -> TimePoint | None:
    """An optional deadline: a CLOCK_MONOTONIC time point in nanoseconds (mlts.hal.deadlines)."""
    value = opt_ns(args, method, key)
    return None if value is None else TimePoint(value)


def handle(args: Mapping[str, Any], method: str, key: str) -> int:
    """A handle number: a positive integer below 2**63."""
    value = arg(args, method, key, int)
    if not 0 < value < 2**63:
        raise invalid(f"{method}: {key}={value} is not a handle (1 .. 2**63-1)")
    return value


def cache_token(args: Mapping[str, Any], method: str) -> bytes:
    """The 32-byte compilation cache token from its hex text, or b"" when absent."""
    text = arg(args, method, "token", str, "")
    if text == "":
        return b""
    if len(text) != 2 * CACHE_TOKEN_BYTES:
        raise invalid(
            f"{method}: token must be {2 * CACHE_TOKEN_BYTES} hex digits or empty, got {len(text)} characters"
        )
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise invalid(f"{method}: token {text!r} is not hexadecimal") from None


def pool_token(ref: Mapping[str, Any], method: str, what: str) -> int:
    """A driver buffer token of a request pool (memory domains)."""
    token = arg(ref, f"{method} {what}", "token", int)
    if not 0 < token < 2**32:
        raise invalid(f"{method}: {what} token {token} is not a valid buffer token (1 .. 2**32-1)")
    return token
