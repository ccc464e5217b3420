"""The capabilities file (`capabilities.json`): where it lives, how it is checked, merged and written.

`mlts calibrate` writes one file per driver; a driver loads its file once at
start and reports the measured numbers in place of its defaults. A file
replaces exactly the entries it measures. An invalid file is rejected whole
with a one-line reason and the driver keeps all its defaults.

The document (version 1)::

    {"format": "mlts-capabilities", "version": 1, "driver": NAME, "driver_version": TEXT,
     "created_utc": ISO-8601, "power_source": "rapl" | "cpu-time",
     "capabilities": {"relaxed_scalar": PERF | null, "relaxed_tensor": PERF | null,
                      "operand_performance": {OPERAND_TYPE_NAME: PERF, ...},
                      "if": PERF | null, "while": PERF | null},
     "not_measured": [ENTRY_NAME, ...], ...free extra keys}

with PERF = {"exec_time": x, "power_usage": y}, both finite, > 0 and at most
FLT_MAX. Loading needs format, version, driver and capabilities; writing needs
every key above.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mlts.errors import InputError
from mlts.hal import files, strict_json
from mlts.hal.atomic import write_atomic
from mlts.hal.enums import OperandType
from mlts.hal.types import FLT_MAX, Capabilities, OperandPerformance, PerformanceInfo

FORMAT = "mlts-capabilities"
VERSION = 1
#: A capabilities file larger than this is refused unread (it is read by every driver start).
MAX_FILE_BYTES = 8 << 20
POWER_SOURCES = ("rapl", "cpu-time")
#: The entries of "capabilities" other than operand_performance, in file order.
SPECIAL_ENTRIES = ("relaxed_scalar", "relaxed_tensor", "if", "while")
#: The operand types a capabilities file may give numbers for (every type but the OEM ones).
OPERAND_TYPE_NAMES = tuple(
    t.name for t in OperandType if t not in (OperandType.OEM, OperandType.TENSOR_OEM_BYTE)
)
#: What "not_measured" may list.
ENTRY_NAMES = SPECIAL_ENTRIES + OPERAND_TYPE_NAMES
_LOAD_KEYS = ("format", "version", "driver", "capabilities")
_WRITE_KEYS = _LOAD_KEYS + ("driver_version", "created_utc", "power_source", "not_measured")
_CAPABILITIES_KEYS = SPECIAL_ENTRIES + ("operand_performance",)

Source = dict[str, Any]


class CapabilitiesFileError(InputError):
    """A capabilities file cannot be used; the message is the one-line reason."""


@dataclass(frozen=True, slots=True)
class Measured:
    """The entries a capabilities file measured; None (or a missing type) keeps the default."""

    relaxed_scalar: PerformanceInfo | None = None
    relaxed_tensor: PerformanceInfo | None = None
    operand_performance: tuple[OperandPerformance, ...] = ()  # sorted by type
    if_performance: PerformanceInfo | None = None
    while_performance: PerformanceInfo | None = None


@dataclass(frozen=True, slots=True)
class CapabilitiesDocument:
    """A checked capabilities file; the descriptive fields are None when a loaded file leaves them out."""

    driver: str
    measured: Measured
    driver_version: str | None = None
    created_utc: str | None = None
    power_source: str | None = None
    not_measured: tuple[str, ...] = ()


# ------------------------------------------------------------------ where the file lives


def config_dir() -> Path:
    """mlts's configuration folder: $MLTS_CONFIG_DIR, else $XDG_CONFIG_HOME/mlts, else ~/.config/mlts."""
    explicit = os.environ.get("MLTS_CONFIG_DIR", "")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "mlts"
    return Path("~/.config/mlts").expanduser()


def default_path(driver_name: str) -> Path:
    """Where the capabilities file of `driver_name` is looked for: <config_dir>/capabilities/<name>.json."""
    if not _is_file_name(driver_name):
        raise CapabilitiesFileError(f"driver name {driver_name!r} cannot be a file name")
    return config_dir() / "capabilities" / f"{driver_name}.json"


def locate(driver_name: str, explicit_path: str | os.PathLike[str] | None = None) -> Path | None:
    """The file to load: `explicit_path` if given, else the config-dir file when it exists, else None."""
    if explicit_path is not None:
        return Path(explicit_path).expanduser().absolute()
    if not _is_file_name(driver_name):
        return None
    candidate = default_path(driver_name)
    return candidate if candidate.exists() else None


def _is_file_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


# ------------------------------------------------------------------ checking a document


def _where(path: str, message: str) -> CapabilitiesFileError:
    return CapabilitiesFileError(f"{path}: {message}")


def _show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, bool)) or value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _perf(value: Any, path: str) -> PerformanceInfo:
    """A PERF object: exec_time and power_usage, each a finite number in (0, FLT_MAX]."""
    if not isinstance(value, dict):
        raise _where(path, f"must be an object with exec_time and power_usage, got {_show(value)}")
    numbers = []
    for key in ("exec_time", "power_usage"):
        if key not in value:
            raise _where(path, f"missing {key}")
        number = value[key]
        # bool is an int to Python but not a number here; NaN fails every comparison, huge ints compare exactly.
        if not (type(number) in (int, float) and 0 < number <= FLT_MAX):
            raise _where(
                f"{path}.{key}", f"must be a finite number > 0 (at most {FLT_MAX:g}), got {_show(number)}"
            )
        numbers.append(float(number))
    return PerformanceInfo(numbers[0], numbers[1])


def _optional_perf(caps: Mapping[str, Any], key: str) -> PerformanceInfo | None:
    value = caps.get(key)
    return None if value is None else _perf(value, f"capabilities.{key}")


def _operand_performance(value: Any) -> tuple[OperandPerformance, ...]:
    path = "capabilities.operand_performance"
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise _where(path, f"must be an object mapping operand type names to PERF, got {_show(value)}")
    entries = []
    for name, perf in value.items():
        if name not in OPERAND_TYPE_NAMES:
            raise _where(path, f"unknown operand type {name!r}")
        entries.append(OperandPerformance(int(OperandType[name]), _perf(perf, f"{path}.{name}")))
    return tuple(sorted(entries, key=lambda e: e.type))


def _measured(value: Any) -> Measured:
    if not isinstance(value, dict):
        raise _where("capabilities", f"must be an object, got {_show(value)}")
    unknown = sorted(set(value) - set(_CAPABILITIES_KEYS))
    if unknown:
        raise _where("capabilities", f"unknown entry {unknown[0]!r}; known: {', '.join(_CAPABILITIES_KEYS)}")
    return Measured(
        _optional_perf(value, "relaxed_scalar"),
        _optional_perf(value, "relaxed_tensor"),
        _operand_performance(value.get("operand_performance")),
        _optional_perf(value, "if"),
        _optional_perf(value, "while"),
    )


def measured_names(measured: Measured) -> tuple[str, ...]:
    """The entry names (as "not_measured" spells them) that `measured` gives numbers for."""
    specials = (
        measured.relaxed_scalar,
        measured.relaxed_tensor,
        measured.if_performance,
        measured.while_performance,
    )
    names = [name for name, info in zip(SPECIAL_ENTRIES, specials, strict=True) if info is not None]
    return tuple(names + [OperandType(e.type).name for e in measured.operand_performance])


def _not_measured(value: Any, measured: Measured) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _where("not_measured", f"must be a list of entry names, got {_show(value)}")
    for name in value:
        if name not in ENTRY_NAMES:
            raise _where("not_measured", f"unknown entry {name!r}")
    both = sorted(set(value) & set(measured_names(measured)))
    if both:
        raise _where("not_measured", f"{both[0]!r} is listed but also measured")
    return tuple(value)


def _created(value: Any) -> str:
    """An ISO-8601 time stamp in UTC (offset +00:00 or Z)."""
    try:
        when = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        when = None
    if when is None or when.utcoffset() != timedelta(0):
        raise _where(
            "created_utc", f"must be an ISO-8601 UTC time like 2026-11-21T20:00:00+00:00, got {_show(value)}"
        )
    return value


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise _where(key, f"must be a non-empty string, got {_show(value)}")
    return value


def _power_source(value: Any) -> str:
    if value not in POWER_SOURCES:
        raise _where("power_source", f"must be one of {', '.join(POWER_SOURCES)}, got {_show(value)}")
    return str(value)


def parse_document(
    doc: Any, driver_name: str | None = None, *, complete: bool = False
) -> CapabilitiesDocument:
    """The checked document `doc` (parsed JSON) for `driver_name` (None: any driver).

    `complete` also requires the descriptive keys a writer must give.
    Raises CapabilitiesFileError with a one-line reason.
    """
    if not isinstance(doc, dict):
        raise CapabilitiesFileError(f"not a JSON object but {type(doc).__name__}")
    for key in _WRITE_KEYS if complete else _LOAD_KEYS:
        if key not in doc:
            raise CapabilitiesFileError(f"missing key {key!r}")
    if doc["format"] != FORMAT:
        raise _where("format", f"{_show(doc['format'])} is not {FORMAT!r}")
    if type(doc["version"]) is not int or doc["version"] != VERSION:
        raise _where(
            "version", f"{_show(doc['version'])} is not supported (this mlts reads version {VERSION})"
        )
    driver = _text(doc["driver"], "driver")
    if driver_name is not None and driver != driver_name:
        raise CapabilitiesFileError(f"the file is for driver {driver!r}, not {driver_name!r}")
    measured = _measured(doc["capabilities"])
    return CapabilitiesDocument(
        driver=driver,
        measured=measured,
        driver_version=_text(doc["driver_version"], "driver_version") if "driver_version" in doc else None,
        created_utc=_created(doc["created_utc"]) if "created_utc" in doc else None,
        power_source=_power_source(doc["power_source"]) if "power_source" in doc else None,
        not_measured=_not_measured(doc["not_measured"], measured) if "not_measured" in doc else (),
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


def read_document(path: str | os.PathLike[str], driver_name: str | None) -> CapabilitiesDocument:
    """Read and check the capabilities file at `path`; CapabilitiesFileError with a one-line reason."""
    try:
        data = files.read_bytes(path, what="a capabilities file", limit=MAX_FILE_BYTES)
    except files.FileReadError as e:
        raise CapabilitiesFileError(
            str(e.strerror).removeprefix("cannot read a capabilities file: ")
        ) from None
    except OSError as e:
        raise CapabilitiesFileError(f"cannot read it: {e.strerror or e}") from None
    try:
        doc = strict_json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise CapabilitiesFileError("not UTF-8 text") from None
    except RecursionError:
        raise CapabilitiesFileError("not valid JSON: nested too deeply") from None
    except ValueError as e:
        raise CapabilitiesFileError(f"not valid JSON: {_one_line(str(e))}") from None
    return parse_document(doc, driver_name)


# ------------------------------------------------------------------ loading


def merge(defaults: Capabilities, measured: Measured) -> Capabilities:
    """`defaults` with every entry `measured` gives replaced by the measured numbers."""
    by_type = {e.type: e for e in defaults.operand_performance}
    by_type.update((e.type, e) for e in measured.operand_performance)
    return dataclasses.replace(
        defaults,
        relaxed_float32_to_float16_performance_scalar=_pick(
            measured.relaxed_scalar, defaults.relaxed_float32_to_float16_performance_scalar
        ),
        relaxed_float32_to_float16_performance_tensor=_pick(
            measured.relaxed_tensor, defaults.relaxed_float32_to_float16_performance_tensor
        ),
        operand_performance=tuple(by_type[t] for t in sorted(by_type)),
        if_performance=_pick(measured.if_performance, defaults.if_performance),
        while_performance=_pick(measured.while_performance, defaults.while_performance),
    )


def _pick(measured: PerformanceInfo | None, default: PerformanceInfo) -> PerformanceInfo:
    return default if measured is None else measured


def _source(kind: str, path: Path | None, created_utc: str | None = None, error: str | None = None) -> Source:
    return {
        "kind": kind,
        "path": None if path is None else str(path),
        "created_utc": created_utc,
        "error": error,
    }


def inspect_file(
    path: str | os.PathLike[str] | None, driver_name: str
) -> tuple[CapabilitiesDocument | None, Source]:
    """The checked document at `path` (None when there is none or it is rejected) and its Source."""
    if path is None:
        return None, _source("default", None)
    path = Path(path)
    try:
        doc = read_document(path, driver_name)
    except CapabilitiesFileError as e:
        return None, _source("default", path, error=_one_line(str(e)))
    return doc, _source("calibrated", path, doc.created_utc)


def load_capabilities(
    path: str | os.PathLike[str] | None, driver_name: str, defaults: Capabilities
) -> tuple[Capabilities, Source]:
    """The capabilities to report: `defaults` merged with the file at `path`, and where they came from.

    The Source is {"kind": "default"|"calibrated", "path", "created_utc", "error"}; a bad
    file never raises: it gives the defaults unchanged and the reason in "error".
    """
    doc, source = inspect_file(path, driver_name)
    return (defaults if doc is None else merge(defaults, doc.measured)), source


def _close(a: PerformanceInfo, b: PerformanceInfo) -> bool:
    return math.isclose(a.exec_time, b.exec_time, rel_tol=1e-6) and math.isclose(
        a.power_usage, b.power_usage, rel_tol=1e-6
    )


def reports_measured(caps: Capabilities, measured: Measured) -> bool:
    """Whether `caps` carries every number `measured` gives (to float32 precision)."""
    pairs = [
        (measured.relaxed_scalar, caps.relaxed_float32_to_float16_performance_scalar),
        (measured.relaxed_tensor, caps.relaxed_float32_to_float16_performance_tensor),
        (measured.if_performance, caps.if_performance),
        (measured.while_performance, caps.while_performance),
    ]
    pairs += [(e.info, caps.performance_of(e.type)) for e in measured.operand_performance]
    return all(want is None or _close(want, got) for want, got in pairs)


def describe_source(source: Source) -> str:
    """One line: "calibrated (FILE, created T)", "default", or "default (FILE rejected: reason)"."""
    if source["kind"] == "calibrated":
        created = f", created {source['created_utc']}" if source.get("created_utc") else ""
        return f"calibrated ({source['path']}{created})"
    if source.get("error"):
        return f"default ({source['path']} rejected: {source['error']})"
    return "default"


# ------------------------------------------------------------------ writing


def write_capabilities_file(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> None:
    """Check `doc` as a complete document and write it to `path` atomically, as indented JSON.

    Raises CapabilitiesFileError (one line) when `doc` is incomplete or invalid,
    or holds extras that are not JSON; `path` is then left as it was.
    """
    parse_document(dict(doc), complete=True)
    try:
        text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise CapabilitiesFileError(f"cannot be written as JSON: {_one_line(str(e))}") from None
    data = text.encode("utf-8")
    if len(data) > MAX_FILE_BYTES:
        raise CapabilitiesFileError(f"{len(data)} bytes is more than the {MAX_FILE_BYTES} a driver reads")
    write_atomic(path, data)
