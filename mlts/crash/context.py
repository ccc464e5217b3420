"""What a stress test sees inside its child process: its spec, drivers, models, inputs and clock.

Drivers are opened through the runtime (each in its own process) and their
pids and log files reported to the supervisor. Models are zoo names or ONNX
files, converted once per process. `ready()` ends set-up: the test's duration
counts from there.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from mlts.crash.channel import Reporter
from mlts.crash.outcome import StressFailure
from mlts.hal.errors import HalError

if TYPE_CHECKING:
    from mlts.runtime.execution import ExecutionMode
    from mlts.runtime.qos_settings import QosSettings

PROGRESS_EVERY_S = 0.25


class StressContext:
    def __init__(self, spec: dict[str, Any], reporter: Reporter) -> None:
        self.spec = spec
        self.reporter = reporter
        self.duration_s = float(spec["duration_s"])
        self.threads = int(spec.get("threads", 1))
        self.seed = int(spec.get("seed", 0))
        self.params: dict[str, Any] = dict(spec.get("params") or {})
        self.deadline = float("inf")
        self.iterations = 0
        self._lock = threading.Lock()
        self._last_report = 0.0
        self._devices: list[Any] = []
        self._models: dict[str, Any] = {}
        self._protos: dict[str, Any] = {}

    # ------------------------------------------------------------ time

    def ready(self) -> None:
        """Set-up is done: the test runs for duration_s from now."""
        self.deadline = time.monotonic() + self.duration_s
        self.reporter.send("ready")

    def running(self) -> bool:
        return time.monotonic() < self.deadline

    def progress(self, n: int = 1) -> None:
        """Count `n` iterations (thread-safe) and tell the supervisor now and then."""
        with self._lock:
            self.iterations += n
            now = time.monotonic()
            if now - self._last_report >= PROGRESS_EVERY_S:
                self._last_report = now
                self.reporter.send("progress", iterations=self.iterations)

    # ------------------------------------------------------------ drivers

    def open_device(self, options: dict[str, str] | None = None):
        """A new connection to the test's driver: a new private driver process (reported to the
        supervisor) or, when the test names a shared service, a new client of that service."""
        from mlts.runtime.discovery import DriverSpec, discover, open_device

        name = self.spec["driver"]
        socket = self.spec.get("driver_socket")
        if socket:
            try:
                device = open_device(DriverSpec(name, "", f"service {socket}", socket=str(socket)))
            except HalError as e:
                raise StressFailure(f"cannot connect to the shared driver service: {e}") from None
            self._devices.append(device)
            return device
        specs = discover(self.spec.get("plugin_files") or [])
        if name not in specs:
            raise StressFailure(f"unknown driver {name!r}")
        merged = {**dict(self.spec.get("driver_options") or {}), **dict(options or {})}
        in_process = bool(self.spec.get("in_process"))
        try:
            device = open_device(specs[name], in_process=in_process, options=merged or None, threads=1)
        except HalError as e:
            raise StressFailure(f"the driver could not be started: {e}") from None
        except (TypeError, ValueError) as e:  # an in-process factory refusing its options
            raise StressFailure(f"the driver could not be created: {e}") from None
        self._devices.append(device)
        process = getattr(device, "process", None)
        if process is not None:
            self.reporter.send("driver", pid=process.pid, log=str(process.log_path))
        return device

    def driver_died(self) -> bool:
        """Whether a driver this test opened went away by itself (died or hung up on the client)."""
        return any(getattr(device, "driver_died", False) for device in self._devices)

    def failure(self, error: HalError, what: str) -> StressFailure:
        """A HalError as the test's FAILURE; a dead driver process is said to be one."""
        died = self.driver_died()
        prefix = "driver died: " if died else ""
        return StressFailure(f"{prefix}{what}: {error}", driver_died=died)

    def close(self) -> None:
        for device in self._devices:
            try:
                device.close()
            except Exception:  # a dead driver has nothing left to close
                pass
        self._devices.clear()

    # ------------------------------------------------------------ models

    @property
    def qos(self) -> QosSettings:
        """The run's --priority, --preference, --deadline-ms, --prepare-deadline-ms and --loop-timeout-ms."""
        from mlts.runtime.qos_settings import QosSettings

        return QosSettings.from_json(self.params.get("qos"))

    @property
    def execution(self) -> ExecutionMode:
        """The execution path of the inference modes (sync unless the run asked for another)."""
        from mlts.runtime.execution import ExecutionMode

        return ExecutionMode.parse(str(self.params.get("execution", "sync")))

    def model(self, name: str):
        """The NN model of zoo model `name` or model file `name` (ONNX, converted with the shapes and
        values the user gave, or an .nnm file), made once."""
        if name not in self._models:
            from mlts.convert import convert

            user = (self.params.get("user_models") or {}).get(name) or {}
            if user.get("kind") == "nnm":
                from mlts.hal import nnfile

                self._models[name] = nnfile.load(name).model
            else:
                values = {
                    n: np.array(v["data"], dtype=np.dtype(v["dtype"])).reshape(v["shape"])
                    for n, v in (user.get("input_values") or {}).items()
                }
                self._models[name] = convert(
                    self.proto(name),
                    input_shapes=user.get("input_shapes") or None,
                    input_values=values or None,
                ).model
        return self._models[name]

    def proto(self, name: str):
        if name not in self._protos:
            from pathlib import Path

            from mlts.convert import load_model
            from mlts.models import zoo

            user_models = self.params.get("user_models") or {}
            is_file = name in user_models or name.endswith((".onnx", ".tflite"))
            path = Path(name) if is_file else zoo.model_path(name)
            self._protos[name] = load_model(path)
        return self._protos[name]

    def inputs(self, model, seed: int = 0) -> list[np.ndarray]:
        """Seeded non-zero inputs for every model input (images for image inputs)."""
        from mlts.bench.inputs import make_inputs
        from mlts.hal.enums import DTYPE_NAME, OperandType

        sub = model.main
        specs = [
            (op.dimensions, DTYPE_NAME[OperandType(op.type)], op.scale, op.zero_point)
            for op in (sub.operands[i] for i in sub.input_indexes)
        ]
        return make_inputs(specs, 1, seed=seed)[0]
