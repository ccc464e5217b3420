"""RemotePreparedModel: a model prepared in a driver service, run by any of the execution paths.

- `executeSynchronously`: one call, answered when the execution is done.
- `execute`: the call returns at once; the completion arrives later as a
  `notify` message and completes the returned `RemoteExecution`.
- `executeFenced`: the call returns at once with the execution's sync fence
  (an eventfd); the execution starts once every input fence is signalled, so
  a chain of fenced executions runs with no round trip between its links.
- `configureExecutionBurst`: a `RemoteBurst` whose executions travel through
  shared-memory rings instead of the socket.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from threading import get_ident
from typing import TYPE_CHECKING, Any

from mlts.hal import codec, operation_times
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.execution import ExecutionCallback, FencedExecutionCallback, FencedExecutionInfo
from mlts.hal.fence import SyncFence
from mlts.hal.interface import PreparedModel
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import ExecutionResult, OptionalTimeoutDuration, OptionalTimePoint, Request, Timing
from mlts.ipc import compact_calls, wire
from mlts.runtime.burst import RemoteBurst
from mlts.runtime.connection import Slot

if TYPE_CHECKING:
    from mlts.runtime.remote import RemoteDevice


_RESULT_KEYS = {"outputShapes", "timing"}
_IS_HOST_MEMORY = HostMemory.__instancecheck__
_RESULT = compact_calls.RESULT


def _copy_back(copies: list[tuple[HostMemory, SharedMemory]]) -> None:
    """Host memory pools get their shared copies' bytes back (outputs), then the copies are closed."""
    for host, shared in copies:
        try:
            if not host.buffer.readonly and host.size:
                host.buffer[:] = shared.buffer
        finally:
            shared.close()


def _close_copies(copies: list[tuple[HostMemory, SharedMemory]]) -> None:
    for _, shared in copies:
        shared.close()


class RemoteExecution(ExecutionCallback):
    """An asynchronous execution in flight; waiting on it reads the connection until its completion arrives."""

    def __init__(
        self, device: RemoteDevice, timeout: float, decoder: compact_calls.ResultDecoder | None = None
    ) -> None:
        super().__init__()
        self.device = device
        self.timeout = timeout
        self.decoder = decoder or compact_calls.ResultDecoder()
        self.slot: Slot | None = None
        self.copies: list[tuple[HostMemory, SharedMemory]] = []
        # Set once the launching thread knows the call's slot and copies: a completion read by another
        # thread (it cannot come before the call was sent) waits for that, never for a lock.
        self._sent = threading.Event()
        self._launcher = get_ident()

    def _on_notify(self, message: dict[str, Any] | None, error: HalError | None) -> None:
        """Called by whichever thread reads the completion (or with `error` when the connection ends)."""
        if get_ident() != self._launcher:
            self._sent.wait()  # the launching thread has set `slot` and `copies` (its send went out)
        slot = self.slot
        try:
            self._complete(message, error)
        finally:
            if slot is not None and slot.after is not None:
                self.device.release_temporaries(slot.after)

    def _complete(self, message: dict[str, Any] | None, error: HalError | None) -> None:
        try:
            if error is None and message is not None:
                compact = message.get("compact")
                if compact is not None:
                    result = self.device.decode("execute", self.decoder.decode, compact)
                    _copy_back(self.copies)
                    self.notify(result)
                    return
                if message.get("status") == 0:
                    result = self.device.decode(
                        "execute", codec.execution_result_from_dict, message.get("result")
                    )
                    _copy_back(self.copies)
                    self.notify(result)
                    return
                from mlts.runtime.remote import error_from_dict

                error = error_from_dict(self.device.name, "execute", message.get("error"))
            _close_copies(self.copies)
            self.notify(error=error)
        except HalError as e:
            _close_copies(self.copies)
            self.notify(error=e)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until complete or `timeout` seconds pass (reading the connection meanwhile)."""
        if self.done() or self.slot is None:
            return super().wait(0 if self.slot is None and not self.done() else timeout)
        try:
            self.device.connection.wait_notify(self.slot, timeout)
        except HalError as e:
            self.notify(error=e)
        return self.done()

    def result(self, timeout: float | None = None) -> ExecutionResult:
        """The result; a completion missing after the device's execute timeout counts as a hung driver."""
        if timeout is not None:
            return super().result(timeout)
        if not self.wait(self.timeout):
            conn = self.device.connection
            self.notify(error=conn.hung("execute", self.timeout))
        return super().result(0)


class _FencedReport:
    """The report a service sends unasked for a compact executeFenced (protocol 1.4), once it arrives."""

    def __init__(self, device: RemoteDevice) -> None:
        self.device = device
        self.info: FencedExecutionInfo | None = None
        self.error: HalError | None = None

    def on_notify(self, message: dict[str, Any] | None, error: HalError | None) -> None:
        if error is not None or message is None:
            self.error = error or HalError(
                ErrorStatus.GENERAL_FAILURE, "the fenced execution's report was lost"
            )
            return
        try:
            self.info = self.device.decode("executeFenced", compact_calls.fenced_done, message.get("compact"))
        except HalError as e:
            self.error = e


class RemoteFencedCallback(FencedExecutionCallback):
    """Asks the service for a fenced execution's status and timings; releases the service's handle on close.

    After a compact executeFenced (protocol 1.4) the service sends the report by itself, before the
    fence signals, and releases its record: the callback reads that report instead of asking."""

    def __init__(
        self,
        device: RemoteDevice,
        handle: int,
        fence: SyncFence,
        measure: MeasureTiming,
        pushed: tuple[_FencedReport, Slot] | None = None,
    ) -> None:
        self.device = device
        self.handle = handle
        self.fence = fence
        self.measure = measure
        self._pushed = pushed
        self._info: FencedExecutionInfo | None = None
        self._closed = pushed is not None  # nothing to release on the service

    def getExecutionInfo(self, *, timeout: float | None = None) -> FencedExecutionInfo:
        """Status and timings once the fence is signalled (waits for it, up to the device's execute timeout)."""
        if self._info is not None:
            return self._info
        limit = self.device.execute_timeout if timeout is None else timeout
        if self.fence.fd >= 0 and not self.fence.wait(limit):
            raise HalError(
                ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                f"fenced execution {self.handle} did not signal its fence within {limit:.1f} s",
            )
        if self._pushed is not None:
            report, slot = self._pushed
            if report.info is None and report.error is None:
                # Sent before the fence signalled: already on the socket, or arriving.
                if not self.device.connection.wait_notify(slot, limit):
                    raise self.device.connection.hung("executeFenced", limit)
            if report.error is not None:
                raise HalError(report.error.status, report.error.message, report.error.output_shapes)
            assert report.info is not None
            self._info = report.info
            return self._info
        # One call reads the report and releases the service's record of the execution.
        args = {"execution": self.handle, "release": True}
        result = self.device.call("getExecutionInfo", args, timeout=timeout)
        self._info = self.device.decode("getExecutionInfo", _info_from_dict, result)
        self._closed = True
        return self._info

    def close(self) -> None:
        """Release the service's record of the execution (the fence stays usable)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.device.call("releaseExecution", {"execution": self.handle})
        except HalError:
            pass


def _info_from_dict(d: Any) -> FencedExecutionInfo:
    if not isinstance(d, dict) or d.get("finished") is not True:
        raise ValueError("the execution has not finished although its fence is signalled")
    status = ErrorStatus(d["status"])
    message = d.get("message", "")
    if not isinstance(message, str):
        raise TypeError("message must be a string")
    times = d.get("operationTimes")
    return FencedExecutionInfo(
        status,
        codec.timing_from_dict(d["timingLaunched"], "timingLaunched"),
        codec.timing_from_dict(d["timingFenced"], "timingFenced"),
        message,
        None if times is None else operation_times.from_list(times),
    )


class RemotePreparedModel(PreparedModel):
    """A model prepared in a driver service, named there by an integer handle."""

    def __init__(self, device: RemoteDevice, handle: int, priority: int = 1) -> None:
        self.device = device
        self.handle = handle
        self.priority = priority
        self._closed = False
        self._bursts: list[RemoteBurst] = []
        # The output shapes of the last synchronous result, as sent and as decoded.
        self._last_shapes: tuple[Any, tuple] | None = None
        # Decodes compact results (protocol 1.4), reusing what repeats from one result to the next.
        self._decoder = compact_calls.ResultDecoder()

    def _check_open(self) -> None:
        if self._closed:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"prepared model {self.handle} was released")

    def _args(
        self, measure: MeasureTiming, deadline: OptionalTimePoint, loop_timeout: OptionalTimeoutDuration
    ) -> dict[str, Any]:
        return {
            "prepared": self.handle,
            "measure": int(measure),
            "deadline": deadline,
            "loop_timeout": loop_timeout,
        }

    def executeSynchronously(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: OptionalTimeoutDuration = None,
        *,
        timeout: float | None = None,
    ) -> ExecutionResult:
        if self._closed:
            self._check_open()
        dev = self.device
        limit = dev.execute_timeout if timeout is None else timeout
        # A compact call when it can be one (the usual case), else the JSON path with its pool copies.
        slot = dev.send_sync_compact(
            self.handle, int(measure), deadline, loop_timeout_duration, request, limit
        )
        if slot is None:
            slot, copies = dev.send_execution(
                "executeSynchronously",
                self._args(measure, deadline, loop_timeout_duration),
                request,
                (),
                limit,
            )
        else:
            copies = []
        # Its priority lets this thread take the reading of the connection over from lower-priority ones.
        slot.priority = self.priority
        try:
            reply = dev.connection.wait_reply(slot, limit)
            if slot.fds:
                wire.close_fds(slot.fds)
            if slot.after is not None:
                dev.settle(slot)  # the pools mapped for this call were (raises: they were not)
            compact = reply.get("compact")
            if compact is not None and reply.get("tag") == _RESULT:
                try:
                    answer = self._decoder.decode(compact)
                except (TypeError, KeyError, ValueError, HalError):
                    answer = dev.decode("executeSynchronously", self._decoder.decode, compact)  # raises
                if copies:
                    _copy_back(copies)
                    copies = []
                return answer
            result = dev.unpack_reply("executeSynchronously", reply)
            _copy_back(copies)
            copies = []
        finally:
            if copies:
                _close_copies(copies)
            if slot.after is not None:
                dev.release_temporaries(slot.after)
        return dev.decode("executeSynchronously", self._result, result)

    def _result(self, d: Any) -> ExecutionResult:
        """A result's record; output shapes equal to the last result's are not decoded again."""
        last = self._last_shapes
        if last is not None and type(d) is dict and d.keys() == _RESULT_KEYS and d["outputShapes"] == last[0]:
            return ExecutionResult(last[1], codec.timing_from_dict(d["timing"], "result.timing"))
        result = codec.execution_result_from_dict(d)
        self._last_shapes = (d["outputShapes"], result.output_shapes)
        return result

    def execute(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: OptionalTimeoutDuration = None,
        *,
        timeout: float | None = None,
    ) -> RemoteExecution:
        """Launch; the returned object completes when the service's completion arrives."""
        self._check_open()
        dev = self.device
        limit = dev.execute_timeout if timeout is None else timeout
        execution = RemoteExecution(dev, limit, self._decoder)
        # Its completion handler (`_on_notify`) may run on a reading thread as soon as the call is sent:
        # it waits until the execution knows its slot and copies.
        try:
            slot, copies = dev.send_execution(
                "execute",
                self._args(measure, deadline, loop_timeout_duration),
                request,
                (),
                limit,
                execution._on_notify,
            )
            execution.copies = copies
            execution.slot = slot
        finally:
            execution._sent.set()
        try:
            reply = dev.connection.wait_reply(slot, limit)
            wire.close_fds(slot.fds)
            dev.settle(slot)
            if reply.get("tag") != compact_calls.LAUNCHED:
                dev.unpack_reply("execute", reply)
        except HalError as e:
            # The launch failed: no completion will come.
            dev.connection.forget(slot)
            _close_copies(copies)
            dev.release_temporaries(slot.after)
            execution.notify(error=e)
        return execution

    def executeFenced(
        self,
        request: Request,
        wait_for: Sequence[SyncFence] = (),
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: OptionalTimeoutDuration = None,
        timeout_after_fence: OptionalTimeoutDuration = None,
        *,
        timeout: float | None = None,
    ) -> tuple[SyncFence, RemoteFencedCallback]:
        """Launch once `wait_for` are signalled; returns the execution's fence and its callback.

        Host memory pools cannot be used here (there is no moment to copy outputs back): use SharedMemory.
        """
        self._check_open()
        # (isinstance over the pools in one C loop: a request naming driver buffers has many pools)
        if any(map(_IS_HOST_MEMORY, request.pools)):
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT,
                "executeFenced needs SharedMemory pools (HostMemory cannot be fenced)",
            )
        dev = self.device
        limit = dev.query_timeout if timeout is None else timeout
        fences = [f.fd for f in wait_for]
        args = {
            **self._args(measure, deadline, loop_timeout_duration),
            "wait_for": list(range(len(fences))),
            "timeout_after_fence": timeout_after_fence,
        }
        report = _FencedReport(dev)
        slot, copies = dev.send_execution("executeFenced", args, request, fences, limit, report.on_notify)
        _close_copies(copies)
        try:
            reply = dev.connection.wait_reply(slot, limit)
        except BaseException:
            dev.connection.forget(slot)
            raise
        fds = list(slot.fds)
        if slot.after is not None:
            try:
                dev.settle(slot)
            except BaseException:
                dev.connection.forget(slot)
                wire.close_fds(fds)
                raise
        pushed = None
        try:
            compact = reply.get("compact")
            if compact is not None and reply.get("tag") == compact_calls.FENCED_LAUNCHED:
                pushed = (report, slot)
                handle = dev.decode("executeFenced", compact_calls.fenced_handle, compact)
                index = 0
            else:
                dev.connection.forget(slot)  # a JSON reply: no report follows
                result = dev.unpack_reply("executeFenced", reply)
                handle = dev.decode("executeFenced", lambda: _int(result["execution"]))
                index = dev.decode("executeFenced", lambda: _int(result["fence"]))
            if not 0 <= index < len(fds):
                raise HalError(
                    ErrorStatus.GENERAL_FAILURE, f"driver {dev.name!r} sent no fence with executeFenced"
                )
            fence = SyncFence.from_fd(fds.pop(index), "the fence executeFenced returned")
        except BaseException:
            dev.connection.forget(slot)
            raise
        finally:
            wire.close_fds(fds)
        return fence, RemoteFencedCallback(dev, handle, fence, measure, pushed)

    def configureExecutionBurst(self, *, polling_us: int | None = None) -> RemoteBurst:
        """A burst over shared-memory rings (see mlts.runtime.burst); released with the model at the latest."""
        self._check_open()
        burst = RemoteBurst(self.device, self.handle, polling_us)
        self._bursts = [b for b in self._bursts if not b.closed]
        self._bursts.append(burst)
        return burst

    def close(self) -> None:
        """Release the driver's prepared model (and its bursts); errors of a dead driver are ignored."""
        if self._closed:
            return
        self._closed = True
        for burst in self._bursts:
            burst.close()
        self._bursts.clear()
        try:
            self.device.call("releasePreparedModel", {"prepared": self.handle})
        except HalError:
            pass

    def __repr__(self) -> str:
        return f"RemotePreparedModel({self.device.name!r}, handle={self.handle})"


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected int, got {type(value).__name__}")
    return value


__all__ = ["RemoteExecution", "RemoteFencedCallback", "RemotePreparedModel", "Timing"]
