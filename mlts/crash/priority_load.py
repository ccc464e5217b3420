"""The other client of `priority-stress-two-clients` and `performance-degradation-stress`: model B's
load, run from a process of its own.

The timing client starts `python -m mlts.crash.priority_load PARENT_PID`, writes its test spec as one
JSON line (plus `load_model`, the model, and `load_kind`: `execute`, the default, or `compile`) and
then drives it with one command per line: `low` / `medium` start the threads running B at that
priority, or `compile` starts compiling B in a loop (answer `started`); `count` asks how many
executions (or compilations) of B completed since (answer `count N`); `stop` stops them, a
compilation in flight ending first (answer `stopped N`, N those completed since they started, or
`error MESSAGE` when one failed); `quit` ends it. Set-up ends with `ready`, or `error MESSAGE`. The process connects to the test's shared service with a connection of
its own, so to the service and the driver it is another client; it ends when its parent does.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from typing import Any

from mlts.crash.context import StressContext
from mlts.crash.outcome import StressFailure

#: Seconds the load process may take to connect, convert and prepare B (and to answer a command).
SETUP_TIMEOUT_S = 170.0
COMMAND_TIMEOUT_S = 60.0


class ProcessLoad:
    """The timing client's handle on the load process (the same start/stop/close as the thread load)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    @classmethod
    def launch(cls, ctx: StressContext, b_name: str, kind: str = "execute") -> ProcessLoad:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlts.crash.priority_load", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        load = cls(proc)
        try:
            load._send(json.dumps({**ctx.spec, "load_model": b_name, "load_kind": kind}))
            load._expect("ready", SETUP_TIMEOUT_S, "set up")
        except BaseException:
            load.close()
            raise
        return load

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except OSError as e:
            raise StressFailure(f"the load client is gone ({e})") from None

    def _expect(self, word: str, timeout: float, what: str) -> str:
        """Read the answer `word` (alone, or followed by a value: returned); StressFailure otherwise."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().strip() if ready else None
        if line == word:
            return ""
        if line is not None and line.startswith(word + " ") and not line.startswith("error "):
            return line[len(word) + 1 :]
        if line is None:
            raise StressFailure(f"the load client did not {what} within {timeout:g} s")
        if line.startswith("error "):
            raise StressFailure(f"the load client could not {what}: {line[6:]}")
        raise StressFailure(f"the load client could not {what} (exit status {self.proc.poll()})")

    def start_load(self, which: str) -> None:
        self._send(which)
        self._expect("started", COMMAND_TIMEOUT_S, f"start its {which.upper()} load")

    def _count(self, word: str, what: str) -> int:
        value = self._expect(word, COMMAND_TIMEOUT_S, what)
        if not value.isdigit():
            raise StressFailure(f"the load client answered {word!r} without a count")
        return int(value)

    def completed(self) -> int:
        """B's executions (compilations) the load process completed since `start_load`."""
        self._send("count")
        return self._count("count", "count its executions")

    def stop(self) -> int:
        """Stop the load (a compilation in flight ends first); B's executions (compilations) completed
        since `start_load`."""
        self._send("stop")
        return self._count("stopped", "run its load")

    def close(self) -> None:
        """End the load process (asked first, then killed); always reaps it."""
        if self.proc.poll() is None:
            try:
                self._send("quit")
            except StressFailure:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


class _Quiet:
    """A reporter for a StressContext whose events nobody reads."""

    def send(self, event: str, **fields: Any) -> None:
        pass


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class CompileLoad:
    """B compiled in a loop on one connection while started (the load of performance-degradation-stress)."""

    def __init__(self, device: Any, model: Any) -> None:
        self.device = device
        self.model = model
        self._on = threading.Event()
        self._thread: threading.Thread | None = None
        self._done = 0
        self._error: BaseException | None = None

    def start_load(self, which: str) -> None:
        self._done, self._error = 0, None
        self._on.set()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while self._on.is_set():
                self.device.prepareModel(self.model).close()
                self._done += 1
        except BaseException as e:  # noqa: BLE001  (reported by `stop`)
            self._error = e

    def completed(self) -> int:
        return self._done

    def stop(self) -> int:
        self._on.clear()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise StressFailure(f"prepareModel of the compiled model failed: {self._error}")
        return self._done

    def close(self) -> None:
        self._on.clear()
        if self._thread is not None:
            self._thread.join(COMMAND_TIMEOUT_S)


def serve(spec: dict[str, Any]) -> int:
    """Set up B's sessions, then follow the commands on stdin; 0 on `quit`, 1 when set-up failed."""
    from dataclasses import replace

    from mlts.crash.priority_mode import ThreadLoad
    from mlts.hal.enums import Priority
    from mlts.hal.errors import HalError
    from mlts.runtime.session import Session

    ctx = StressContext(spec, _Quiet())  # type: ignore[arg-type]
    b_name = str(spec["load_model"])
    compiling = spec.get("load_kind", "execute") == "compile"
    threads = max(1, int(spec.get("threads", 2)))
    sessions: list[Any] = []
    load: Any
    try:
        device = ctx.open_device()
        b_model = ctx.model(b_name)
        if compiling:
            load = CompileLoad(device, b_model)
        else:
            for priority in (Priority.LOW, Priority.MEDIUM):
                qos = replace(ctx.qos, priority=priority)
                sessions += [Session(device, b_model, qos=qos) for _ in range(threads)]
            load = ThreadLoad(
                ctx, b_name, sessions[:threads], sessions[threads:], ctx.inputs(b_model, ctx.seed + 1)
            )
    except (HalError, StressFailure, OSError, ValueError) as e:
        _say(f"error {' '.join(str(e).split())}")
        ctx.close()
        return 1
    _say("ready")
    try:
        for line in sys.stdin:
            command = line.strip()
            if command in (("compile",) if compiling else ("low", "medium")):
                load.start_load(command)
                _say("started")
            elif command == "count":
                _say(f"count {load.completed()}")
            elif command == "stop":
                try:
                    done = load.stop()
                except (HalError, StressFailure) as e:
                    _say(f"error {' '.join(str(e).split())}")
                else:
                    _say(f"stopped {done}")
            elif command == "quit":
                break
    finally:
        load.close()
        for s in sessions:
            s.close()
        ctx.close()
    return 0


def main(argv: list[str]) -> int:  # pragma: no cover - the load process itself
    from mlts.hal import procctl

    parent = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else os.getppid()
    procctl.exit_when_orphaned(parent)
    line = sys.stdin.readline()
    try:
        spec = json.loads(line)
    except ValueError:
        _say("error the spec line is not JSON")
        return 2
    return serve(spec)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv))
