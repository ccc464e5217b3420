"""`mlts validate --replay FILE`: run a saved reproducer again on a driver and say whether it still fails.

The reproducer's kind picks the replayer (mlts.validate.reproducer.REPLAYERS);
each returns a CaseResult: "pass" when the driver now answers as expected,
"fail" when it still does not, "error"/"hang" when it dies or hangs.
"""

from __future__ import annotations

import base64
import importlib
import socket
import time

import numpy as np

from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.types import OutputShape
from mlts.ipc import wire
from mlts.runtime.execution import EXECUTION_MODES, ExecutionMode, execute
from mlts.runtime.remote import RemoteDevice
from mlts.validate.core import CaseResult, Target, ValidateError, run_case
from mlts.validate.reproducer import (
    REPLAYERS,
    Reproducer,
    ReproducerError,
    expected_outputs,
    load,
    request_from_doc,
)

#: How long a replayed raw frame may take to be answered (or the connection closed) before it counts as a hang.
FRAME_WAIT_S = 10.0


def replay(target: Target, path: str) -> CaseResult:
    """Load the reproducer at `path` and run it on `target`; ValidateError if the file is not one."""
    try:
        repro = load(path)
    except ReproducerError as e:
        raise ValidateError(str(e)) from None
    module_name, _, function = REPLAYERS[repro.kind].partition(":")
    try:
        replayer = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as e:
        raise ValidateError(f"{path}: no replayer for kind {repro.kind!r} ({e})") from None
    results: list[CaseResult] = []
    replayer(target, repro, results.append)
    return results[-1]


def _device(target: Target, repro: Reproducer) -> RemoteDevice:
    return target.raw_device() if repro.raw else target.device()


def _status_text(expected: ErrorStatus | None) -> str:
    return "success" if expected in (None, ErrorStatus.NONE) else expected.name


def replay_model(target: Target, repro: Reproducer, emit) -> CaseResult:
    """Prepare the model (and ask getSupportedOperations); compare the status with expect.status."""
    expected = repro.expected_status
    model = repro.model
    assert model is not None  # load() refuses a model or request reproducer without one

    def body() -> str | None:
        device = _device(target, repro)
        try:
            prepared = device.prepareModel(model)
        except HalError as e:
            if device.dead is not None:
                raise
            if expected is None or e.status == expected:
                return None
            return f"prepareModel answered {e.status.name} ({e.message}); expected {_status_text(expected)}"
        prepared.close()
        if expected not in (None, ErrorStatus.NONE):
            return f"prepareModel succeeded; expected {expected.name}"
        return None

    return run_case(target, repro.suite, f"replay: {repro.case}", body, emit)


def replay_request(target: Target, repro: Reproducer, emit) -> CaseResult:
    """Prepare the model, run the request by the saved path; compare status and, if saved, outputs."""
    expected = repro.expected_status
    execution = repro.doc.get("execution") or {}
    name = execution.get("mode", "sync")
    if name not in EXECUTION_MODES:
        raise ValidateError(
            f"{repro.path}: execution.mode {name!r} is not one of {', '.join(EXECUTION_MODES)}"
        )
    mode = ExecutionMode(name)
    loop_timeout = execution.get("loop_timeout")
    if loop_timeout is not None and (type(loop_timeout) is not int or not 0 <= loop_timeout < 2**64):
        raise ValidateError(f"{repro.path}: execution.loop_timeout must be a nanosecond count or null")
    try:
        request = request_from_doc(repro.doc.get("request"))
        outputs = expected_outputs(repro.doc)
    except ReproducerError as e:
        raise ValidateError(f"{repro.path}: {e}") from None
    model = repro.model
    assert model is not None  # load() refuses a model or request reproducer without one

    def body() -> str | None:
        device = _device(target, repro)
        prepared = device.prepareModel(model)
        try:
            measure = MeasureTiming.YES if execution.get("measure") else MeasureTiming.NO
            result = execute(prepared, request, measure, mode, loop_timeout=loop_timeout)
        except HalError as e:
            if device.dead is not None:
                raise
            if expected is not None and e.status == expected:
                return None
            return (
                f"{mode} execution answered {e.status.name} ({e.message}); expected {_status_text(expected)}"
            )
        finally:
            prepared.close()
        if expected not in (None, ErrorStatus.NONE):
            return f"{mode} execution succeeded; expected {expected.name}"
        return compare_outputs(request, outputs, result.output_shapes)

    return run_case(target, repro.suite, f"replay: {repro.case}", body, emit)


def compare_outputs(request, outputs, shapes: tuple[OutputShape, ...]) -> str | None:
    """None when every saved output matches within its tolerance, else the first mismatch."""
    for spec in outputs:
        k = spec.get("index")
        if type(k) is not int or not 0 <= k < len(request.outputs):
            return f"expect.outputs: index {k!r} is not an output of the request"
        dtype = np.dtype(str(spec.get("dtype")))
        want = np.frombuffer(base64.b64decode(str(spec.get("data", ""))), dtype)
        arg = request.outputs[k]
        pool = request.pools[arg.location.pool_index]
        if isinstance(pool, int):
            return f"output {k}: in a driver buffer, not in memory"
        got = np.frombuffer(pool.buffer, dtype, count=want.size, offset=arg.location.offset)
        atol, rtol = float(spec.get("atol", 0.0)), float(spec.get("rtol", 0.0))
        bad = np.abs(got.astype(np.float64) - want) > atol + rtol * np.abs(want.astype(np.float64))
        if bad.any():
            i = int(np.argmax(bad))
            return f"output {k}[{i}] is {got[i]!r}, expected {want[i]!r} (atol {atol}, rtol {rtol})"
    return None


def replay_frame(target: Target, repro: Reproducer, emit) -> CaseResult:
    """Send the raw bytes to a service that does not pre-validate; it must answer or hang up, and live on."""
    data = repro.data or b""

    def body() -> tuple[str, str] | str | None:
        service = target.shared_service(raw=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(FRAME_WAIT_S)
            sock.connect(service.path)
            wire.recv_frame(sock).close_fds()  # the hello
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            answered = drain_replies(sock, FRAME_WAIT_S)
        except OSError as e:
            answered = f"connection error {e}"
        finally:
            sock.close()
        if answered is None:
            return "hang", f"the service neither answered nor hung up within {FRAME_WAIT_S:g} s"
        time.sleep(0.05)
        if not service.alive():
            return "error", f"the driver service died after the frame ({answered})"
        probe = service.connect(query_timeout=FRAME_WAIT_S)
        try:
            probe.ping()
        finally:
            probe.close()
        return None

    return run_case(target, repro.suite, f"replay: {repro.case}", body, emit)


def drain_replies(sock: socket.socket, timeout: float) -> str | None:
    """Read until end of file; 'answered' or 'hung up', None when nothing came in time."""
    deadline = time.monotonic() + timeout
    got = 0
    while time.monotonic() < deadline:
        if not wire.wait_readable(sock, max(0.0, deadline - time.monotonic())):
            return None
        try:
            chunk = sock.recv(65536)
        except OSError:
            return "hung up"
        if not chunk:
            return "answered, then hung up" if got else "hung up"
        got += len(chunk)
    return None
