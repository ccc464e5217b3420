"""Shared driver services: connect to one by its socket path, or start one that a tool owns and stops.

A shared service (`python -m mlts.ipc.service --socket PATH`, or
`mlts driver serve NAME`) serves every client that connects; a client never
stops it. A call that gets no answer in time therefore only closes this
client's connection (its handles are released by the service).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.ipc import wire
from mlts.ipc.peer import UNKNOWN_UID, credentials
from mlts.runtime.process import (
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    describe_returncode,
    log_tail,
    spawn_service,
)


def _unavailable(text: str) -> HalError:
    return HalError(ErrorStatus.DEVICE_UNAVAILABLE, text)


def _connect(path: str, timeout: float) -> socket.socket:
    """A socket connected to `path`. A full listen queue (EAGAIN: many clients connect at once) is
    waited out until `timeout`; anything else is DEVICE_UNAVAILABLE at once."""
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
            return sock
        except BlockingIOError as e:
            sock.close()
            if time.monotonic() >= deadline:
                raise _unavailable(
                    f"the driver service at {path} accepts no connection ({e.strerror or e})"
                ) from None
            time.sleep(0.01)
        except OSError as e:
            sock.close()
            raise _unavailable(f"no driver service listens on {path}: {e.strerror or e}") from None


def check_service_peer(sock: socket.socket, path: str) -> int:
    """The pid of the service at the other end of `sock`; DEVICE_UNAVAILABLE unless it runs as this user or
    root (SO_PEERCRED, as the kernel recorded it when the service listened)."""
    pid, uid, _ = credentials(sock)
    me = os.geteuid()
    if uid not in (me, 0):
        who = "an unknown user" if uid == UNKNOWN_UID else f"uid {uid}"
        raise _unavailable(
            f"the process listening on {path} (pid {pid}) runs as {who}, neither this user (uid {me}) nor "
            "root: nothing was sent to it (another user may have taken the socket path; serve the driver "
            "from a folder only you can write)"
        )
    return pid


def _refusal_status(value: object) -> ErrorStatus:
    try:
        status = ErrorStatus(value)  # type: ignore[arg-type]
    except ValueError:
        return ErrorStatus.DEVICE_UNAVAILABLE
    return status if status != ErrorStatus.NONE else ErrorStatus.DEVICE_UNAVAILABLE


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SharedEndpoint:
    """One client connection to a shared service at a socket path."""

    log_path: str | None = None

    def __init__(self, path: str, sock: socket.socket, hello: dict[str, Any]) -> None:
        self.path = path
        self.sock = sock
        self.hello = hello
        self.name = str(hello.get("device", "unnamed"))
        pid = hello.get("pid")
        self.pid = pid if type(pid) is int else 0
        self._closed = False

    @classmethod
    def connect(cls, path: str, timeout: float = DEFAULT_START_TIMEOUT) -> SharedEndpoint:
        """Connect to the service listening at `path` and read its hello.

        Before anything is sent or believed, the kernel's word on who listens (SO_PEERCRED) must be this
        user or root: another user who bound the path first gets nothing (models, inputs) and is never
        trusted for outputs.
        """
        sock = _connect(path, timeout)
        try:
            pid = check_service_peer(sock, path)
        except HalError:
            sock.close()
            raise
        deadline = time.monotonic() + timeout

        def wait(partial: bool) -> None:
            if not wire.wait_readable(sock, max(0.0, deadline - time.monotonic())):
                raise TimeoutError

        try:
            frame = wire.recv_frame(sock, wait)
        except TimeoutError:
            sock.close()
            raise _unavailable(f"the service at {path} sent no hello within {timeout:.1f} s") from None
        except (wire.WireError, OSError) as e:
            sock.close()
            raise _unavailable(
                f"the service at {path} closed the connection before its hello ({e})"
            ) from None
        frame.close_fds()
        hello = frame.message
        if hello.get("kind") == "refused":
            sock.close()
            raise HalError(
                _refusal_status(hello.get("status")),
                f"the service at {path} refused this connection: {str(hello.get('message'))[:300]}",
            )
        protocol = hello.get("protocol")
        if (
            hello.get("kind") != "hello"
            or not isinstance(protocol, list)
            or protocol[:1] != [wire.PROTOCOL_VERSION[0]]
        ):
            sock.close()
            raise _unavailable(
                f"{path} sent {str(hello)[:200]} instead of a hello for protocol {wire.PROTOCOL_VERSION[0]}.x"
            )
        endpoint = cls(path, sock, hello)
        endpoint.pid = pid  # the kernel's word, not the hello's
        return endpoint

    def alive(self) -> bool:
        return not self._closed and _pid_alive(self.pid)

    @property
    def returncode(self) -> int | None:
        return None

    def describe_exit(self) -> str:
        return "still running" if _pid_alive(self.pid) else "gone"

    def tail(self, n: int = 20) -> list[str]:
        return []

    def stop_for_hang(self) -> str:
        """A shared service is never stopped by a client: only this connection is closed."""
        self.close_socket()
        return "connection closed"

    def death_message(self, method: str) -> str:
        end = time.monotonic() + 1.0
        while time.monotonic() < end and _pid_alive(self.pid):
            time.sleep(0.02)
        state = "exited" if not _pid_alive(self.pid) else "closed the connection"
        return f"driver {self.name!r} (shared service pid {self.pid}) {state} during {method}"

    def close_socket(self) -> None:
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> int | None:
        """Disconnect; the service goes on serving its other clients."""
        self.close_socket()
        return None

    def kill(self) -> None:
        self.close_socket()

    def wait(self, timeout: float) -> bool:
        return True

    def __repr__(self) -> str:
        return f"SharedEndpoint({self.path!r}, pid={self.pid})"


class SharedService:
    """A shared driver service process started and owned by this process (stopped by `stop()`)."""

    def __init__(
        self, name: str, popen: subprocess.Popen[bytes], path: str, tmpdir: str | None, log_path: str
    ) -> None:
        self.name = name
        self.popen = popen
        self.path = path
        self._tmpdir = tmpdir
        self.log_path = log_path

    @classmethod
    def start(
        cls,
        spec: str,
        *,
        name: str | None = None,
        options: Mapping[str, str] | None = None,
        socket_path: str | None = None,
        log_path: str | None = None,
        env: Mapping[str, str] | None = None,
        service_args: Sequence[str] = (),
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> SharedService:
        """Start `python -m mlts.ipc.service --socket PATH` for factory `spec`; wait until it accepts."""
        label = name or spec
        tmpdir = None
        if socket_path is None:
            tmpdir = tempfile.mkdtemp(prefix="mlts-svc-")
            socket_path = os.path.join(tmpdir, "driver.sock")
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="mlts-shared-driver-", suffix=".log")
            os.close(fd)
        popen = spawn_service(spec, label, options, ["--socket", socket_path, *service_args], log_path, env)
        service = cls(label, popen, socket_path, tmpdir, log_path)
        try:
            service._await_listening(start_timeout)
        except BaseException:
            service.stop()
            raise
        return service

    def _await_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.popen.poll() is not None:
                raise self._start_error(f"{describe_returncode(self.popen.returncode)} before it listened")
            if os.path.exists(self.path):
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    probe.connect(self.path)
                    return
                except OSError:
                    pass
                finally:
                    probe.close()
            if time.monotonic() > deadline:
                raise self._start_error(f"did not listen on {self.path} within {timeout:.1f} s")
            time.sleep(0.02)

    def _start_error(self, what: str) -> HalError:
        tail = "\n".join("    " + line for line in self.tail(20)) or "    (empty)"
        return _unavailable(
            f"shared driver service {self.name!r} failed to start: {what}; last lines of {self.log_path}:\n{tail}"
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 20) -> list[str]:
        """The last `n` lines of the service's log."""
        return log_tail(self.log_path, n)

    def connect(self, **timeouts: float):
        """A new client (RemoteDevice) of this service."""
        from mlts.runtime.remote import RemoteDevice

        return RemoteDevice.connect(self.path, **timeouts)

    def status(self) -> dict[str, Any]:
        """The service's serviceStatus, asked over a connection of its own."""
        with self.connect() as device:
            return device.service_status()

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> int:
        """SIGTERM (the service disconnects every client and exits), then SIGKILL; always reaps."""
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        return self.popen.returncode

    def __enter__(self) -> SharedService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"SharedService({self.name!r}, pid={self.pid}, {self.path!r})"
