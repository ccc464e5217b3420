"""Coverage of the driver, gathered inside the service process, for coverage-guided fuzzing of the driver.

A service started with `--coverage` instruments the driver's own code before the driver is made:
atheris's bytecode instrumentation (the `fuzz` extra) inserts a call at every basic block and
comparison of the driver's modules, and here those calls record which ones ran (a set of counter
numbers). The driver is the factory's top-level package (`driver` for `driver.variants:SampleAll`),
imported under atheris's import hook, which stays on so modules the driver imports later are
instrumented too; a driver loaded from a file has its functions and methods instrumented in place.
So are the HAL's validation rules (`HAL_RULES`, loaded already: the service imports them), which a
driver calls to judge what it receives: a service that does not pre-validate never calls them
itself, so what they report is the driver's doing.
libFuzzer is not involved: the fuzzer is the client (mlts.validate.fuzz), which sends an input, asks
`coverageReport` how many features the driver reached that it never reached before, and keeps the
inputs that found some as seeds for more mutations.

This is a testing mode: the instrumented driver runs several times slower, and the report is the
whole process's (every client's calls count), so only a validation run's own service uses it.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import operator
import sys
import threading
from types import FunctionType, ModuleType
from typing import TYPE_CHECKING, Any

from mlts.hal.loader import split_file_spec

if TYPE_CHECKING:
    from mlts.ipc.service.client import Call, Client

log = logging.getLogger("mlts.ipc.service")

# COMPARE_OP's argument in Python 3.11 indexes dis.cmp_op: <, <=, ==, !=, >, >=.
_COMPARE = (operator.lt, operator.le, operator.eq, operator.ne, operator.gt, operator.ge)


def available() -> bool:
    """Whether atheris (the `fuzz` extra) is installed."""
    return importlib.util.find_spec("atheris") is not None


class DriverCoverage:
    """The features (instrumented blocks and comparisons) the driver has reached in this process."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self._reported = 0
        self._lock = threading.Lock()
        self.modules: list[str] = []

    def report(self) -> dict[str, int]:
        """Features reached so far, and how many of them since the last report."""
        with self._lock:
            total = len(self.seen)
            new, self._reported = total - self._reported, total
        return {"features": total, "new": new}


#: The HAL modules of validation rules a driver calls (instrumented in place: already imported).
HAL_RULES = (
    "mlts.hal.validate",
    "mlts.hal._validate_",
    "mlts.hal._oprules",
    "mlts.hal._opspec",
    "mlts.hal._subgraphs",
    "mlts.hal.buffer_use",
    "mlts.hal.extensions",
)


def _trace_cmp(seen: set[int]) -> Any:
    add = seen.add

    def trace(left: Any, right: Any, op: int, counter: int, left_is_const: bool) -> Any:
        add(counter)
        return _COMPARE[op](left, right)

    return trace


def install(factory: str) -> DriverCoverage:
    """Record coverage of the driver `factory` names from now on (call before the factory is loaded).

    ImportError when atheris is not installed."""
    import atheris

    coverage = DriverCoverage()
    # The instrumented code calls atheris._trace_branch(counter) and atheris._trace_cmp(...), looked
    # up on the module at every call: these record into the set instead of libFuzzer's counters.
    atheris._trace_branch = coverage.seen.add
    atheris._trace_cmp = _trace_cmp(coverage.seen)
    if split_file_spec(factory) is None:
        package = factory.partition(":")[0].split(".")[0]
        # Entered for good: the driver's modules imported later are instrumented as well.
        atheris.instrument_imports(include=[package]).__enter__()
        coverage.modules.append(package)
    for name in sorted(sys.modules):
        module = sys.modules[name]
        if module is not None and name.startswith(HAL_RULES):
            _instrument_module(atheris, module)
            coverage.modules.append(name)
    return coverage


def _instrument_module(atheris: Any, module: ModuleType) -> int:
    """Instrument every function and method defined in `module`, in place; how many."""
    count = 0
    for value in list(vars(module).values()):
        for fn in _functions(value, module):
            atheris.instrument_func(fn)
            count += 1
    return count


def instrument_loaded(coverage: DriverCoverage, device: object) -> None:
    """Instrument a driver loaded from a file (the import hook does not see such modules): every
    function and method defined in the module of the Device's class."""
    import atheris

    module = inspect.getmodule(type(device))
    name = module.__name__ if module is not None else ""
    if module is None or name in coverage.modules or not name.startswith("mlts_driver_plugin_"):
        return
    count = _instrument_module(atheris, module)
    coverage.modules.append(name)
    log.info("coverage: instrumented %d functions of %s", count, module.__name__)


def _functions(value: object, module: ModuleType) -> list[FunctionType]:
    if isinstance(value, FunctionType) and value.__module__ == module.__name__:
        return [value]
    if isinstance(value, type) and value.__module__ == module.__name__:
        found = []
        for member in vars(value).values():
            fn = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if isinstance(fn, FunctionType):
                found.append(fn)
        return found
    return []


def coverage_report(client: Client, call: Call) -> dict[str, Any]:
    """{"features", "new"}: what the driver has reached, and how much of it since the last report."""
    coverage = client.host.coverage
    assert coverage is not None  # registered only with coverage on
    return {**coverage.report(), "modules": list(coverage.modules)}
