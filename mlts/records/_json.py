"""The JSON checks every record's `from_json` is made of, and the decoder that drives them.

Each check takes a JSON value and the JSON path it was found at, and returns the value (converted where
the record keeps another type) or raises RecordError naming that path: `results[3].latency_ms.median:
expected a number, got 'x'`. A record is a frozen dataclass whose fields carry their check in
`field(metadata=...)` (see `value`); `decode` and `encode` walk those fields, so a record's JSON form and
its validation are written once, in its field list.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

import numpy as np

from mlts.errors import InputError

Check = Callable[[Any, str], Any]
R = TypeVar("R")


class RecordError(InputError):
    """A JSON value that does not fit its record: `path` (JSON path, "" for the top) and what is wrong.

    Bad input (a file the user gave): one line and exit status 2 at the command line.
    """

    def __init__(self, path: str, problem: str, message: str | None = None) -> None:
        super().__init__(message or (f"{path}: {problem}" if path else problem))
        self.path = path
        self.problem = problem


def fail(where: str, message: str) -> NoReturn:
    raise RecordError(where, message)


def at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def got(value: Any) -> str:
    """A value as JSON would call it: null, true, an object, a list, a quoted string or the number."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def choices(values: Sequence[str]) -> str:
    return ", ".join(repr(v) for v in values)


# --- primitive checks ----------------------------------------------------------------------------------


def obj(value: Any, where: str) -> dict:
    if not isinstance(value, Mapping):
        fail(where, f"expected an object, got {got(value)}")
    return dict(value)


def lst(value: Any, where: str) -> list:
    if not isinstance(value, (list, tuple)):
        fail(where, f"expected a list, got {got(value)}")
    return list(value)


def text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        fail(where, f"expected a string, got {got(value)}")
    return value


def boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        fail(where, f"expected true or false, got {got(value)}")
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(value: Any, where: str) -> float:
    """A finite number >= 0 (JSON has no NaN; times, sizes and errors are never negative)."""
    if not is_number(value):
        fail(where, f"expected a number, got {got(value)}")
    if not math.isfinite(value) or value < 0:
        fail(where, f"expected a finite number >= 0, got {got(value)}")
    return value


def signed(value: Any, where: str) -> float:
    """A finite number of either sign (a difference, a limit that may be negative)."""
    if not is_number(value) or not math.isfinite(value):
        fail(where, f"expected a finite number, got {got(value)}")
    return value


def fraction(value: Any, where: str) -> float:
    number(value, where)
    if value > 1:
        fail(where, f"expected a fraction in [0, 1], got {got(value)}")
    return value


def count(value: Any, where: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        fail(where, f"expected an integer, got {got(value)}")
    if value < minimum:
        fail(where, f"expected an integer >= {minimum}, got {value}")
    return value


def positive(value: Any, where: str) -> int:
    return count(value, where, minimum=1)


def one_of(values: Sequence[str]) -> Check:
    def check(value: Any, where: str) -> str:
        if value not in values:
            fail(where, f"expected one of {choices(values)}, got {got(value)}")
        return value

    return check


def numbers(value: Any, where: str, length: int | None = None) -> tuple[float, ...]:
    """A list of finite numbers >= 0 (of exactly `length` when given); the value checks run on the whole array."""
    items = lst(value, where)
    if length is not None and len(items) != length:
        fail(where, f"expected {length} numbers, got {len(items)}")
    if not all(map(is_number, items)):
        i = next(i for i, x in enumerate(items) if not is_number(x))
        fail(f"{where}[{i}]", f"expected a number, got {got(items[i])}")
    arr = np.asarray(items, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
    if bad.size:
        fail(f"{where}[{bad[0]}]", f"expected a finite number >= 0, got {got(items[bad[0]])}")
    return tuple(items)


def fixed_numbers(length: int) -> Check:
    return lambda value, where: numbers(value, where, length)


def nullable(check: Check) -> Check:
    def check_or_null(value: Any, where: str) -> Any:
        return None if value is None else check(value, where)

    return check_or_null


def list_of(check: Check) -> Check:
    def check_items(value: Any, where: str) -> tuple:
        return tuple(check(item, f"{where}[{i}]") for i, item in enumerate(lst(value, where)))

    return check_items


def map_of(check: Check) -> Check:
    def check_values(value: Any, where: str) -> dict:
        return {str(k): check(v, at(where, str(k))) for k, v in obj(value, where).items()}

    return check_values


def anything(value: Any, where: str) -> Any:
    return value


texts = list_of(text)


# --- records --------------------------------------------------------------------------------------------

EXTRA = "extra"  # the field that keeps the JSON keys a record does not know (additive schema changes)


def value(check: Check, *, key: str | None = None, default: Any = dataclasses.MISSING, omit: bool = False):
    """A record field: its JSON check, its JSON key when not the field's name, and its default.

    A field without a default is required. `omit`: left out of the JSON when None (an optional key), as
    opposed to written as null (a nullable key that is always present).
    """
    meta = {"check": check, "key": key, "omit": omit}
    if isinstance(default, (dict, list)):
        factory = lambda d=default: type(d)(d)  # noqa: E731
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def extra():
    """The catch-all field: JSON keys the record does not model, kept as they are and written back."""
    return dataclasses.field(default_factory=dict, metadata={"extra": True})


def decode(cls: type[R], data: Any, where: str, required_because: Mapping[str, str] | None = None) -> R:
    """`cls` from a JSON object: every field's check at its path; missing required keys named."""
    source = obj(data, where)
    kwargs: dict[str, Any] = {}
    known = set()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.metadata.get("extra"):
            continue
        key = f.metadata.get("key") or f.name
        known.add(key)
        if key in source:
            kwargs[f.name] = f.metadata["check"](source[key], at(where, key))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            why = (required_because or {}).get(key)
            fail(at(where, key), "missing" + (f" ({why})" if why else ""))
    if any(f.metadata.get("extra") for f in dataclasses.fields(cls)):  # type: ignore[arg-type]
        # Unknown keys, and optional keys given as null (so that writing back keeps the null).
        kwargs[EXTRA] = {k: v for k, v in source.items() if k not in known or v is None}
    return cls(**kwargs)


def make(cls: type[R], values: Mapping[str, Any]) -> R:
    """`cls` built by a producer from field values (records, not JSON): like `decode`, an omitted-when-None
    field given as None is kept in `extra` as null, and names `cls` does not have go to `extra` too."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for name, v in values.items():
        f = fields.get(name)
        if f is None or f.metadata.get("extra"):
            rest[name] = v
        elif v is None and f.metadata.get("omit"):
            rest[f.metadata.get("key") or name] = None
        else:
            kwargs[name] = v
    if rest:
        kwargs[EXTRA] = rest
    return cls(**kwargs)


def encode(value: Any) -> Any:
    """The JSON form of a record, a list/tuple/dict of them, or a plain value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_json = getattr(value, "to_json", None)
        return to_json() if to_json is not None else encode_fields(value)
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    return value


def encode_fields(record: Any) -> dict:
    """A record's fields under their JSON keys (omitted optional ones left out), then its extra keys."""
    out: dict[str, Any] = {}
    rest: Mapping = {}
    for f in dataclasses.fields(record):
        v = getattr(record, f.name)
        if f.metadata.get("extra"):
            rest = v
            continue
        if v is None and f.metadata.get("omit"):
            continue
        out[f.metadata.get("key") or f.name] = encode(v)
    for k, v in rest.items():
        out.setdefault(k, v)
    return out


def record_check(cls: type[R]) -> Check:
    """The check of a field holding a record: the record's own from_json."""
    return lambda value, where: cls.from_json(value, where)  # type: ignore[attr-defined]


class Record:
    """Base of the records: `from_json` validates (RecordError naming the path) and `to_json` writes back."""

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Any:
        return decode(cls, data, where)

    def to_json(self) -> dict:
        return encode_fields(self)

    @classmethod
    def make(cls, **values: Any) -> Any:
        """The record a producer builds from field values: an optional key given as None is written as
        null (not left out), as from_json keeps it; names the record does not have go to `extra`."""
        return make(cls, values)
