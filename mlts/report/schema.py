"""Reading results.json back: load it and check it against schema version 2 (docs/results-schema.md).

`validate_results` is hand-written: each check names the JSON path of the first
problem ("results[3].latency_ms.median: expected a number, got 'x'"). Fields the
schema does not know are allowed, so additive changes need no new version.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from mlts.errors import InputError
from mlts.hal import files
from mlts.report.results import SCHEMA_VERSION

KINDS = ("benchmark", "stress")
STATUSES = ("ok", "error")
OUTCOMES = ("SUCCESS", "FAILURE", "HANG", "CRASH")
NOT_MEASURED = "not measured"
# The describe() numbers, all in the statistics' unit (ms, or µs for driver timing), all >= 0.
STAT_NUMBERS = ("mean", "std", "median", "mad", "p50", "p90", "p95", "p99", "min", "max")
COMPILE_TIMINGS = ("without_cache", "save_to_cache", "prepare_from_cache")
TOPK = ("top1", "top2", "top3", "top4", "top5")
# Latency histograms have 32 equal buckets (mlts.bench.stats.histogram); a different count is a new schema.
HISTOGRAM_BUCKETS = 32


class ResultsSchemaError(InputError):
    """A results document that this version of mlts cannot read."""


# --- loading ------------------------------------------------------------------------------------


def load_results(path: str | Path) -> dict:
    """The validated results document at `path`.

    A missing file or a directory raises the OSError open() gives; text that is
    not JSON, another schema version or a schema violation raise
    ResultsSchemaError; every message is one line starting with the path.
    """
    path = Path(path)
    try:
        text = files.read_text(path, what="a results file", limit=files.MAX_RESULTS_BYTES)
    except UnicodeDecodeError:
        raise ResultsSchemaError(f"{path}: not a JSON results file (not UTF-8 text)") from None
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ResultsSchemaError(f"{path}: not a JSON results file ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise ResultsSchemaError(f"{path}: not a JSON results file (nested too deeply)") from None
    try:
        validate_results(doc)
    except ResultsSchemaError as e:
        raise ResultsSchemaError(f"{path}: {e}") from None
    return doc


def _reject_constant(name: str) -> Any:
    """NaN and Infinity are not JSON; mlts never writes them (json.dumps(allow_nan=False))."""
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


# --- the document ---------------------------------------------------------------------------------


def validate_results(doc: Any) -> None:
    """Raise ResultsSchemaError naming the JSON path of the first problem; return None if `doc` is valid."""
    if not isinstance(doc, dict):
        raise ResultsSchemaError(f"not an mlts results document: the top level is {_got(doc)}, not an object")
    _check_version(doc.get("schema_version"))
    kind = _field(doc, "kind", "")
    if kind not in KINDS:
        _fail("kind", f"expected one of {_choices(KINDS)}, got {_got(kind)}")
    for key in ("environment", "config"):
        _obj(_field(doc, key, ""), key)
    _optional(doc, "devices", "", _obj)
    check = _benchmark_record if kind == "benchmark" else _stress_record
    for i, rec in enumerate(_list(_field(doc, "results", ""), "results")):
        check(rec, f"results[{i}]")


def _check_version(found: Any) -> None:
    if found == SCHEMA_VERSION and isinstance(found, int) and not isinstance(found, bool):
        return
    if found is None:
        raise ResultsSchemaError("schema_version: missing; not an mlts results document")
    if isinstance(found, int) and not isinstance(found, bool) and found > SCHEMA_VERSION:
        fix = "upgrade mlts to read it"
    else:
        fix = "re-run the benchmark to get a new file"
    raise ResultsSchemaError(
        f"results schema version {_got(found)}; this mlts reads version {SCHEMA_VERSION} ({fix})"
    )


# --- benchmark records ------------------------------------------------------------------------------

# Checked on every row where present; an "ok" row must have all of REQUIRED_OK.
REQUIRED_OK = (
    "warmup",
    "run",
    "latency_ms",
    "accuracy",
    "validation_errors",
    "compilation",
    "driver_timing_us",
    "memory_mb",
)


def _benchmark_record(rec: Any, where: str) -> None:
    """One model × backend row: identity and status, then every known field that is present."""
    _obj(rec, where)
    for key in ("model", "backend"):
        _str(_field(rec, key, where), _at(where, key))
    status = _field(rec, "status", where)
    if status not in STATUSES:
        _fail(_at(where, "status"), f"expected one of {_choices(STATUSES)}, got {_got(status)}")
    if status == "error":
        _str(_field(rec, "error", where, why="error rows need it"), _at(where, "error"))
    else:
        for key in REQUIRED_OK:
            _field(rec, key, where, why="ok rows need it")
    for key, check in BENCHMARK_FIELDS.items():
        _optional(rec, key, where, check)


def _warmup(value: Any, where: str) -> None:
    """{iterations, seconds, target_seconds?}: untimed calls and how long they took (s)."""
    _obj(value, where)
    _count(_field(value, "iterations", where), _at(where, "iterations"))
    _number(_field(value, "seconds", where), _at(where, "seconds"))
    _optional(value, "target_seconds", where, _nullable(_number))


def _run(value: Any, where: str) -> None:
    """{iterations, seconds, min_seconds?, min_iterations?}: the timed run and its stopping rule."""
    _obj(value, where)
    _count(_field(value, "iterations", where), _at(where, "iterations"))
    _number(_field(value, "seconds", where), _at(where, "seconds"))
    _optional(value, "min_seconds", where, _nullable(_number))
    _optional(value, "min_iterations", where, _nullable(_count))


def _dataset(value: Any, where: str) -> None:
    _obj(value, where)
    _optional(value, "name", where, _str)
    _optional(value, "size", where, _nullable(_count))
    _optional(value, "labels", where, _nullable(_str))


def _memory(value: Any, where: str) -> None:
    """{client_peak_rss, driver_peak_rss, method}: peaks in MiB, null where not measured."""
    _obj(value, where)
    for key in ("client_peak_rss", "driver_peak_rss"):
        _optional(value, key, where, _nullable(_number))
    _optional(value, "method", where, _str)


def _accuracy(value: Any, where: str) -> None:
    """{evaluator name: object}; the known numbers inside each evaluator are checked."""
    _obj(value, where)
    for name, evaluator in value.items():
        _evaluator(evaluator, _at(where, name))


def _evaluator(value: Any, where: str) -> None:
    """Fractions in [0, 1] (top-k, agreement), non-negative errors, a boolean CTS verdict, per-output errors."""
    _obj(value, where)
    for key in (*TOPK, "top1_agreement"):
        _optional(value, key, where, _nullable(_fraction))
    for key in ("mse", "max_abs_error", "cts_ratio", "max_quant_deviation"):
        _optional(value, key, where, _nullable(_number))
    _optional(value, "cts_pass", where, _bool)
    _optional(value, "n", where, _count)
    _optional(value, "metric", where, _metric)
    if "outputs" in value:
        outputs = _obj(value["outputs"], _at(where, "outputs"))
        for name, errors in outputs.items():
            _errors(errors, _at(_at(where, "outputs"), name))


def _metric(value: Any, where: str) -> None:
    """MLTS's speech metrics: PhoneErrorRate or MelCepLogF0 (null log_f0_rms: no frame voiced in both)."""
    _obj(value, where)
    _optional(value, "name", where, _str)
    for key in ("phone_error_rate", "mel_cep_distortion", "log_f0_rms"):
        _optional(value, key, where, _nullable(_number))
    _optional(value, "ok", where, _bool)


def _errors(value: Any, where: str) -> None:
    _obj(value, where)
    for key in ("mse", "max_abs_error"):
        _optional(value, key, where, _nullable(_number))


def _string_list(value: Any, where: str) -> None:
    for i, item in enumerate(_list(value, where)):
        _str(item, f"{where}[{i}]")


def _compilation(value: Any, where: str) -> None:
    """null, or MLTS's three compilation timings (each statistics in ms, or null) and the cache size."""
    if value is None:
        return
    _obj(value, where)
    for key in COMPILE_TIMINGS:
        _nullable(_stats)(_field(value, key, where), _at(where, key))
    _optional(value, "cache_size_bytes", where, _nullable(_count))
    _optional(value, "cache_files", where, _obj)
    _optional(value, "note", where, _nullable(_str))


def _driver_timing(value: Any, where: str) -> None:
    """null (not a driver row), or the driver's own Timing: statistics in µs or "not measured" per field."""
    if value is None:
        return
    _obj(value, where)
    for key in ("time_on_device", "time_in_driver"):
        timing = _field(value, key, where)
        if timing != NOT_MEASURED:
            if not isinstance(timing, dict):
                _fail(_at(where, key), f"expected statistics or {NOT_MEASURED!r}, got {_got(timing)}")
            _stats(timing, _at(where, key))


# --- latency statistics -------------------------------------------------------------------------------


def _stats(value: Any, where: str) -> None:
    """The keys of mlts.bench.stats.describe with their types, plus an optional `samples` list of length n."""
    _obj(value, where)
    n = _field(value, "n", where)
    _count(n, _at(where, "n"), minimum=1)
    for key in STAT_NUMBERS:
        _number(_field(value, key, where), _at(where, key))
    _str(_field(value, "percentile_estimator", where), _at(where, "percentile_estimator"))
    _numbers(_field(value, "median_ci95", where), _at(where, "median_ci95"), length=2)
    ranks = _list(_field(value, "median_ci95_ranks", where), _at(where, "median_ci95_ranks"))
    if len(ranks) != 2:
        _fail(_at(where, "median_ci95_ranks"), f"expected 2 ranks, got {len(ranks)}")
    for i, rank in enumerate(ranks):
        _count(rank, f"{_at(where, 'median_ci95_ranks')}[{i}]", minimum=1)
    _nullable(_str)(_field(value, "median_ci95_note", where), _at(where, "median_ci95_note"))
    _histogram(_field(value, "histogram", where), _at(where, "histogram"), n)
    _string_list(_field(value, "warnings", where), _at(where, "warnings"))
    if "samples" in value:
        _numbers(value["samples"], _at(where, "samples"), length=n)
    _stats_order(value, where)


def _histogram(value: Any, where: str, n: int) -> None:
    """33 edges and 32 bucket counts (non-negative integers summing to n)."""
    _obj(value, where)
    _numbers(_field(value, "edges", where), _at(where, "edges"), length=HISTOGRAM_BUCKETS + 1)
    counts = _list(_field(value, "counts", where), _at(where, "counts"))
    if len(counts) != HISTOGRAM_BUCKETS:
        _fail(_at(where, "counts"), f"expected {HISTOGRAM_BUCKETS} counts, got {len(counts)}")
    for i, c in enumerate(counts):
        _count(c, f"{_at(where, 'counts')}[{i}]")
    if sum(counts) != n:
        _fail(_at(where, "counts"), f"counts sum to {sum(counts)}, expected n = {n}")


def _stats_order(value: dict, where: str) -> None:
    """min <= p50 <= p90 <= p95 <= p99 <= max, and min <= ci95 lo <= median <= ci95 hi <= max."""
    chain = ("min", "p50", "p90", "p95", "p99", "max")
    for lower, upper in zip(chain, chain[1:], strict=False):
        if value[lower] > value[upper]:
            _fail(_at(where, upper), f"expected >= {lower} ({value[lower]!r}), got {value[upper]!r}")
    lo, hi = value["median_ci95"]
    if not value["min"] <= lo <= value["median"] <= hi <= value["max"]:
        _fail(
            _at(where, "median_ci95"),
            f"[{lo!r}, {hi!r}] must satisfy min <= lo <= median <= hi <= max "
            f"(min {value['min']!r}, median {value['median']!r}, max {value['max']!r})",
        )


# --- stress records -----------------------------------------------------------------------------------


def _stress_record(rec: Any, where: str) -> None:
    """One stress test: mode, driver and outcome, plus the optional details of how it ended."""
    _obj(rec, where)
    for key in ("mode", "driver"):
        _str(_field(rec, key, where), _at(where, key))
    _outcome(_field(rec, "outcome", where), _at(where, "outcome"))
    for key, check in STRESS_FIELDS.items():
        _optional(rec, key, where, check)


def _outcome(value: Any, where: str) -> None:
    if value not in OUTCOMES:
        _fail(where, f"expected one of {_choices(OUTCOMES)}, got {_got(value)}")


def _signal(value: Any, where: str) -> None:
    """The signal that ended the process: its number or its name ("SIGKILL"), or null."""
    if value is not None and not isinstance(value, str):
        _count(value, where)


# --- primitive checks -------------------------------------------------------------------------------------

Check = Callable[[Any, str], Any]


def _fail(where: str, message: str) -> NoReturn:
    raise ResultsSchemaError(f"{where}: {message}" if where else message)


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _got(value: Any) -> str:
    """A value as JSON would call it: null, true, an object, a list, a quoted string or the number."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _choices(values: Sequence[str]) -> str:
    return ", ".join(repr(v) for v in values)


def _field(obj: dict, key: str, where: str, why: str = "") -> Any:
    if key not in obj:
        _fail(_at(where, key), "missing" + (f" ({why})" if why else ""))
    return obj[key]


def _optional(obj: dict, key: str, where: str, check: Check) -> None:
    if key in obj:
        check(obj[key], _at(where, key))


def _nullable(check: Check) -> Check:
    def check_or_null(value: Any, where: str) -> None:
        if value is not None:
            check(value, where)

    return check_or_null


def _obj(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        _fail(where, f"expected an object, got {_got(value)}")
    return value


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        _fail(where, f"expected a list, got {_got(value)}")
    return value


def _str(value: Any, where: str) -> None:
    if not isinstance(value, str):
        _fail(where, f"expected a string, got {_got(value)}")


def _bool(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        _fail(where, f"expected true or false, got {_got(value)}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any, where: str) -> None:
    """A finite number >= 0 (JSON has no NaN; times, sizes and errors are never negative)."""
    if not _is_number(value):
        _fail(where, f"expected a number, got {_got(value)}")
    if not math.isfinite(value) or value < 0:
        _fail(where, f"expected a finite number >= 0, got {_got(value)}")


def _fraction(value: Any, where: str) -> None:
    _number(value, where)
    if value > 1:
        _fail(where, f"expected a fraction in [0, 1], got {_got(value)}")


def _count(value: Any, where: str, minimum: int = 0) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        _fail(where, f"expected an integer, got {_got(value)}")
    if value < minimum:
        _fail(where, f"expected an integer >= {minimum}, got {value}")


def _numbers(value: Any, where: str, length: int) -> None:
    """A list of exactly `length` finite numbers >= 0; the value checks run on the whole array at once."""
    items = _list(value, where)
    if len(items) != length:
        _fail(where, f"expected {length} numbers, got {len(items)}")
    if not all(map(_is_number, items)):
        i = next(i for i, x in enumerate(items) if not _is_number(x))
        _fail(f"{where}[{i}]", f"expected a number, got {_got(items[i])}")
    arr = np.asarray(items, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
    if bad.size:
        _fail(f"{where}[{bad[0]}]", f"expected a finite number >= 0, got {_got(items[bad[0]])}")


BENCHMARK_FIELDS: dict[str, Check] = {
    "family": _str,
    "threads": _count,
    "warmup": _warmup,
    "run": _run,
    "iterations": _count,
    "dataset": _dataset,
    "percentile_estimator": _str,
    "latency_ms": _stats,
    "sequence_latency_ms": _stats,
    "step_latency_ms": _stats,
    "latency_unit": _str,
    "mode": _str,
    "sequences": _count,
    "steps": _count,
    "driver_timing_us": _driver_timing,
    "accuracy": _accuracy,
    "quantization": _obj,
    "validation_errors": _string_list,
    "extensions": _string_list,
    "compilation": _compilation,
    "memory_mb": _memory,
}

STRESS_FIELDS: dict[str, Check] = {
    "model": _str,
    "expected": _nullable(_outcome),
    "reason": _nullable(_str),
    "duration_s": _number,
    "iterations": _count,
    "signal": _signal,
    "log_tail": _string_list,
}
