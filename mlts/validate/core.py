"""The validation framework: case results, the driver under test (Target), suite options and the registry.

A suite is a module with

    def run(target: Target, options: SuiteOptions, emit: Callable[[CaseResult], None]) -> None

that calls `emit` once per case. Suites are loaded lazily by module name
(`SUITES`), so a suite that cannot be imported does not break the others.
"""

from __future__ import annotations

import importlib
import os
import re
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.records.validate import FAILING, CaseResult
from mlts.records.validate import OUTCOMES as OUTCOMES  # re-exported: the suites import it from here
from mlts.runtime.discovery import DriverSpec, thread_env
from mlts.runtime.execution import EXECUTION_MODES, ExecutionMode
from mlts.runtime.process import DEFAULT_START_TIMEOUT, DriverProcess
from mlts.runtime.remote import RemoteDevice

#: Suite name -> module that implements it (imported on first use).
SUITES: Mapping[str, str] = {
    "validation": "mlts.validate.validation",
    "operations": "mlts.validate.operations",
    "behaviour": "mlts.validate.behaviour",
    "fuzz": "mlts.validate.fuzz",
    "model": "mlts.validate.models",
}
#: The suites a run without --suite runs, in this order.
DEFAULT_SUITES = ("validation", "operations", "behaviour", "fuzz")
#: Seconds one driver call may take before the driver counts as hung (it is then stopped and restarted).
DEFAULT_CALL_TIMEOUT = 20.0
#: After this many failed starts in a row the target stops trying (each case then errs at once).
MAX_START_FAILURES = 3
#: The service option that hands models and requests to the driver without checking them first.
NO_PREVALIDATE = "--no-prevalidate"
#: The kind of client whose service measures the driver's coverage (and does not pre-validate).
COVERAGE = "raw-coverage"
COVERAGE_START_TIMEOUT = 180.0
#: A case's body (see `run_case`): None (pass), a failure reason (fail), or (outcome, reason).
CaseBody = Callable[[], tuple[str, str] | str | None]


class ValidateError(ValueError):
    """Bad input to `mlts validate` (unknown suite, driver that cannot start, bad replay file): one line."""


@dataclass(frozen=True)
class SuiteOptions:
    """How much each suite does: `quick` is the CI-sized run; `filter` is a regex on case names."""

    quick: bool = True
    fuzz_seconds: float | None = None
    fuzz_cases: int | None = None
    seed: int = 0
    filter: str | None = None
    #: Seconds one driver call may take before it counts as a hang.
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    #: (k, n): run only the cases of case group shard k of n (a cluster spreads a suite over n units).
    shard: tuple[int, int] | None = None
    #: The `model` suite: the user's model files, and their --input-shape / --input-value (plain data).
    models: tuple[str, ...] = ()
    input_shapes: Mapping[str, list[int]] = field(default_factory=dict)
    input_values: Mapping[str, Any] = field(default_factory=dict)

    def wants(self, name: str) -> bool:
        """Whether case `name` passes the --filter regex (re.search) and belongs to this run's shard."""
        if self.filter is not None and re.search(self.filter, name) is None:
            return False
        return self.shard is None or case_shard(name, self.shard[1]) == self.shard[0]

    def wants_group(self, group: str) -> bool:
        """Whether case group `group` (see `case_group`) belongs to this run's shard: a suite skips
        building the cases of another shard's groups."""
        return self.shard is None or zlib.crc32(group.encode("utf-8")) % self.shard[1] == self.shard[0]

    def unsharded(self) -> SuiteOptions:
        """These options for the whole suite (what a run without a cluster would get)."""
        return replace(self, shard=None)


def case_group(name: str) -> str:
    """The group a case belongs to: its subject (before the first ": ", or the first "/" when there is
    none), without a trailing "[path]": the cases of one operation and type, one request subject or one
    fuzz target stay together, so a shard builds each model once."""
    head = name.split(": ", 1)[0] if ": " in name else name.split("/", 1)[0]
    return re.sub(r"\s*\[[^\]]*\]$", "", head)


def case_shard(name: str, shards: int) -> int:
    """The shard (0 .. shards-1) of case `name`: a stable hash of its group, the same on every machine."""
    return zlib.crc32(case_group(name).encode("utf-8")) % shards


def load_suite(name: str) -> ModuleType:
    """The module of suite `name`; ValidateError if the name is unknown or the module cannot load."""
    module = SUITES.get(name)
    if module is None:
        raise ValidateError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ValidateError(f"suite {name!r} is not available: {e}") from e


@dataclass
class Target:
    """The driver under test: opens its devices, restarts it after a crash or hang, says where files go.

    `device()` is a normal client (the service checks models and requests before the driver sees
    them, as every other tool gets); `raw_device()` is a client of a service started with
    --no-prevalidate, so the driver's own validation is what answers. With a user's service
    (`--driver-socket`) both are connections to it; `raw_available` then says whether that service was
    started with --no-prevalidate (its hello says so).
    """

    spec: DriverSpec
    out_dir: str
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    options: Mapping[str, str] = field(default_factory=dict)
    threads: int = 1
    log_dir: str | None = None
    #: Execution paths the driver offers through the HAL (every service offers all four).
    paths: tuple[ExecutionMode, ...] = EXECUTION_MODES
    restarts: int = 0
    #: Why each restart happened, in order (a case that hung or crashed the driver, or one that restarts
    #: it on purpose), so "driver restarts: 2" on a passing run explains itself.
    restart_reasons: list[str] = field(default_factory=list)
    _devices: dict[str, RemoteDevice] = field(default_factory=dict, repr=False)
    _services: dict[str, Any] = field(default_factory=dict, repr=False)
    _start_failures: int = field(default=0, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def shared(self) -> bool:
        return self.spec.socket is not None

    def _timeouts(self) -> dict[str, float]:
        t = self.call_timeout
        return {"query_timeout": t, "prepare_timeout": t, "execute_timeout": t}

    def _log_path(self, kind: str) -> str | None:
        if self.log_dir is None:
            return None
        os.makedirs(self.log_dir, exist_ok=True)
        return os.path.join(self.log_dir, f"driver-{kind}.log")

    def _open(self, kind: str) -> RemoteDevice:
        if self._start_failures >= MAX_START_FAILURES:
            raise HalError(
                ErrorStatus.DEVICE_UNAVAILABLE,
                f"driver {self.name!r} failed to start {self._start_failures} times in a row; not trying again",
            )
        try:
            device = self._start(kind)
        except HalError:
            self._start_failures += 1
            raise
        self._start_failures = 0
        return device

    def _start(self, kind: str) -> RemoteDevice:
        if self.spec.socket is not None:
            return RemoteDevice.connect(self.spec.socket, **self._timeouts())
        service_args = {"raw": [NO_PREVALIDATE], COVERAGE: [NO_PREVALIDATE, "--coverage"]}.get(kind, [])
        process = DriverProcess.start(
            self.spec.factory,
            options=self.options,
            name=self.spec.name,
            log_path=self._log_path(kind),
            service_args=service_args,
            env=thread_env(self.threads),
            # Instrumenting the driver's modules takes a while (atheris rewrites every function).
            start_timeout=COVERAGE_START_TIMEOUT if kind == COVERAGE else DEFAULT_START_TIMEOUT,
        )
        return RemoteDevice(process, **self._timeouts())

    def _get(self, kind: str) -> RemoteDevice:
        device = self._devices.get(kind)
        if device is not None and device.dead is None:
            return device
        if device is not None:
            self._close(kind)
        device = self._open(kind)
        self._devices[kind] = device
        return device

    def device(self) -> RemoteDevice:
        """A connected client of the driver (service pre-validation on); reopened if the driver died."""
        return self._get("checked")

    def opened(self, kind: str) -> RemoteDevice | None:
        """The client of `kind` ("checked": `device()`, "raw": `raw_device()`, COVERAGE) as it is now,
        dead or not; None before one was opened."""
        return self._devices.get(kind)

    def raw_device(self) -> RemoteDevice:
        """A client whose service passes decoded but unchecked models and requests to the driver."""
        return self._get("raw")

    @property
    def coverage_available(self) -> bool:
        """Whether the driver's coverage can be measured: atheris is installed and this target starts
        the driver's service itself."""
        from mlts.ipc.service.coverage import available

        return self.spec.socket is None and available()

    def coverage_device(self) -> RemoteDevice | None:
        """A raw client of a service that measures the driver's coverage (`--coverage`, for coverage-
        guided fuzzing), or None when there can be none (`coverage_available`)."""
        return self._get(COVERAGE) if self.coverage_available else None

    def new_client(self, raw: bool = False) -> RemoteDevice:
        """Another client of the same service as `device()` (for cross-client isolation tests).

        A private service serves only the client it was started for, so the target then runs a shared
        service; the caller closes the device it gets.
        """
        return self.shared_service(raw).connect(**self._timeouts())

    def shared_service(self, raw: bool = False) -> Any:
        """A shared service of the driver (started on first use, stopped by restart/close), or the user's."""
        from mlts.runtime.shared import SharedService

        if self.spec.socket is not None:
            return _SocketService(self.spec.socket)
        key = "shared-raw" if raw else "shared"
        service = self._services.get(key)
        if service is None or not service.alive():
            service = SharedService.start(
                self.spec.factory,
                name=self.spec.name,
                options=self.options,
                log_path=self._log_path(key),
                env=thread_env(self.threads),
                service_args=[NO_PREVALIDATE] if raw else [],
            )
            self._services[key] = service
        return service

    @property
    def raw_available(self) -> bool:
        """Whether raw_device() really reaches the driver without service checks."""
        if self.spec.socket is None:
            return True
        hello = getattr(self.raw_device().process, "hello", {})
        return hello.get("prevalidate") is False

    def restart(self, reason: str) -> None:
        """Stop every driver process this target started; the next device() starts a fresh one.

        `reason` (one line) says why, for the run's record.
        """
        self._stop_drivers()
        self.restarts += 1
        self.restart_reasons.append(reason)

    def _stop_drivers(self) -> None:
        for kind in list(self._devices):
            self._close(kind)
        for service in self._services.values():
            service.stop()
        self._services.clear()

    def _close(self, kind: str) -> None:
        device = self._devices.pop(kind, None)
        if device is not None:
            try:
                device.close()
            except Exception:  # a dead or hung driver: closing must not fail the run
                pass

    def close(self) -> None:
        self._stop_drivers()

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SocketService:
    """A user's shared service, seen like a SharedService we started (never stopped by us)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def connect(self, **timeouts: float) -> RemoteDevice:
        return RemoteDevice.connect(self.path, **timeouts)

    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        pass


#: How the runtime words a call that got no answer in time (a reply, a burst result, a fence).
_HANG_TEXTS = ("no reply within", "no burst result within", "did not signal its fence within")


def is_hang(error: BaseException) -> bool:
    """Whether a call failed because the driver gave no answer in time (the connection then stopped it)."""
    return isinstance(error, HalError) and any(text in error.message for text in _HANG_TEXTS)


def is_death(error: BaseException, device: RemoteDevice | None) -> bool:
    """Whether a call failed because the driver process died."""
    return isinstance(error, HalError) and (
        (device is not None and device.driver_died) or error.status == ErrorStatus.DEVICE_UNAVAILABLE
    )


@contextmanager
def timed() -> Iterator[Callable[[], float]]:
    """`with timed() as elapsed:` ... `elapsed()` seconds since the block began."""
    t0 = time.perf_counter()
    yield lambda: time.perf_counter() - t0


def run_case(
    target: Target,
    suite: str,
    name: str,
    body: CaseBody,
    emit: Callable[[CaseResult], None],
    reproducer: Callable[[], str | None] | None = None,
) -> CaseResult:
    """Run one case and emit its result.

    `body` returns None (pass), a failure reason (fail), or (outcome, reason). A driver that hangs makes
    the case "hang", one that dies makes it "error"; either way the target is restarted so the next case
    gets a fresh driver. `reproducer` (called only for a failing case) saves one and returns its path.
    """
    t0 = time.perf_counter()
    try:
        got = body()
        if got is None:
            outcome, reason = "pass", ""
        elif isinstance(got, str):
            outcome, reason = "fail", got
        else:
            outcome, reason = got
    except HalError as e:
        died = any(d.dead is not None for d in target._devices.values())
        if is_hang(e):
            outcome, reason = "hang", e.message
        elif died:
            outcome, reason = "error", f"the driver died: {e.message}"
        else:
            outcome, reason = "error", f"{e.status.name}: {e.message}"
        if died or is_hang(e):
            target.restart(f"{suite}: {name}: the driver {'hung' if is_hang(e) else 'died'}")
    except Exception as e:  # a bug in a case must not end the run; the case says what went wrong
        outcome, reason = "error", f"{type(e).__name__}: {e}"
    path = None
    if outcome in FAILING and reproducer is not None:
        try:
            path = reproducer()
        except Exception as e:
            reason += f" (no reproducer: {type(e).__name__}: {e})"
    result = CaseResult(suite, name, outcome, " ".join(reason.split()), path, time.perf_counter() - t0)
    emit(result)
    return result
