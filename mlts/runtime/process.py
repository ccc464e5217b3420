"""Spawn, stop and reap a driver service process connected by a Unix socketpair."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.ipc import wire
from mlts.runtime import allowlist

DEFAULT_START_TIMEOUT = 30.0
DEFAULT_STOP_TIMEOUT = 5.0
_TAIL_BYTES = 64 * 1024


def log_tail(path: str, n: int = 20) -> list[str]:
    """The last `n` lines of a driver's log (read from its last 64 KiB); [] when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-n:] if n > 0 else []


# What the service logs when the Device's factory fails (see mlts.ipc.service.main).
_CREATE_FAILED = "ERROR: cannot create driver "


def describe_returncode(returncode: int | None) -> str:
    """'exited with status 3', 'killed by signal 9 (SIGKILL)' or 'still running'."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            signame = signal.Signals(-returncode).name
        except ValueError:
            signame = "unknown signal"
        return f"killed by signal {-returncode} ({signame})"
    return f"exited with status {returncode}"


def spawn_service(
    spec: str,
    label: str,
    options: Mapping[str, str] | None,
    service_args: Sequence[str],
    log_path: str,
    env: Mapping[str, str] | None,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """Start `python -m mlts.ipc.service` for factory `spec`, its output appended to `log_path`.

    The service watches this process's pid and ends with it, even in the middle of a
    call; it runs in a new session, so a Ctrl-C meant for the client does not kill the
    driver behind its back. It enforces the extensions allowlist this process selected
    (`--extensions-allowlist`), if any.
    """
    cmd = [sys.executable, "-m", "mlts.ipc.service", "--factory", spec, "--name", label]
    cmd += ["--parent-pid", str(os.getpid())]
    selected = allowlist.selected_file()
    if selected is not None and "--extensions-allowlist" not in service_args:
        cmd += ["--extensions-allowlist", os.path.abspath(selected)]
    for key, value in (options or {}).items():
        cmd += ["--option", f"{key}={value}"]
    cmd += list(service_args)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
            env={**os.environ, **dict(env or {})},
        )


class DriverProcess:
    """A driver service in a child process; `sock` is the client end of its connection."""

    def __init__(
        self,
        name: str,
        popen: subprocess.Popen[bytes],
        sock: socket.socket,
        log_path: str,
        hello: dict[str, Any],
    ) -> None:
        self.name = name
        self.popen = popen
        self.sock = sock
        self.log_path = log_path
        self.hello = hello

    @classmethod
    def start(
        cls,
        spec: str,
        *,
        options: Mapping[str, str] | None = None,
        name: str | None = None,
        log_path: str | os.PathLike[str] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        service_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> DriverProcess:
        """Start `python -m mlts.ipc.service` for factory `spec` and wait for its hello."""
        label = name or spec
        if log_path is None:
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:40]
            fd, path = tempfile.mkstemp(prefix=f"mlts-driver-{safe}-", suffix=".log")
            os.close(fd)
        else:
            path = os.fspath(log_path)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            popen = spawn_service(
                spec,
                label,
                options,
                [*service_args, "--fd", str(child.fileno())],
                path,
                env,
                pass_fds=(child.fileno(),),
            )
        except BaseException:
            parent.close()
            raise
        finally:
            # Only the child may hold its end, or its death would not show as EOF here.
            child.close()
        proc = cls(label, popen, parent, path, {})
        try:
            proc.hello = proc._await_hello(start_timeout)
        except BaseException:
            proc.kill()
            raise
        return proc

    def _await_hello(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout

        def wait(partial: bool) -> None:
            while not wire.wait_readable(self.sock, 0.1):
                if time.monotonic() > deadline:
                    raise TimeoutError
                # A dead child whose socket a grandchild still holds never shows end of file.
                if self.popen.poll() is not None:
                    raise wire.ConnectionClosed()

        try:
            frame = wire.recv_frame(self.sock, wait)
        except TimeoutError:
            self.kill()
            raise self._start_error(f"sent no hello within {timeout:.1f} s; stopped it") from None
        except (wire.WireError, OSError) as e:
            self.wait(2.0)
            if isinstance(e, wire.ConnectionClosed):
                raise self._start_error(f"{self.describe_exit()} before its hello") from None
            raise self._start_error(f"sent a bad hello ({e})") from None
        frame.close_fds()
        hello = frame.message
        protocol = hello.get("protocol")
        if (
            hello.get("kind") != "hello"
            or not isinstance(protocol, list)
            or protocol[:1] != [wire.PROTOCOL_VERSION[0]]
        ):
            raise self._start_error(
                f"sent {str(hello)[:200]} instead of a hello for protocol {wire.PROTOCOL_VERSION[0]}.x"
            )
        return hello

    def _start_error(self, what: str) -> HalError:
        lines = self.tail(40)
        # The service says in one line why the Device could not be made; its traceback stays in the log.
        reason = next((line for line in reversed(lines) if _CREATE_FAILED in line), None)
        if reason is not None:
            text = reason.split(_CREATE_FAILED, 1)[1].strip()
            return HalError(
                ErrorStatus.DEVICE_UNAVAILABLE,
                f"driver {self.name!r} failed to start: {what}: cannot create driver {text} "
                f"(details in {self.log_path})",
            )
        tail = "\n".join("    " + line for line in lines[-20:]) or "    (empty)"
        return HalError(
            ErrorStatus.DEVICE_UNAVAILABLE,
            f"driver {self.name!r} failed to start: {what}; last lines of {self.log_path}:\n{tail}",
        )

    # ------------------------------------------------------------ state

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has ended (negative: killed by that signal)."""
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def describe_exit(self) -> str:
        """'exited with status 3', 'killed by signal 9 (SIGKILL)' or 'still running'."""
        return describe_returncode(self.returncode)

    def tail(self, n: int = 20) -> list[str]:
        """The last `n` lines of the driver's log."""
        return log_tail(self.log_path, n)

    # ------------------------------------------------------------ ending

    def stop_for_hang(self) -> str:
        """A call got no answer in time: the driver is hung, so it is killed."""
        self.kill()
        return "driver stopped"

    def death_message(self, method: str) -> str:
        """How the driver ended, once its connection went away during `method`."""
        # The socket ends a moment before the kernel makes the child reapable.
        if not self.wait(2.0):
            self.kill()
            return f"driver {self.name!r} closed its connection during {method}; driver stopped"
        return f"driver {self.name!r} died: {self.describe_exit()} during {method}"

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the process to end and reap it; True if it has."""
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def close_socket(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def kill(self) -> int:
        """SIGKILL the process (if still running) and reap it."""
        self.close_socket()
        if self.popen.poll() is None:
            try:
                self.popen.kill()
            except ProcessLookupError:
                pass
        return self.popen.wait()

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> int:
        """Close the connection and wait; then SIGTERM, then SIGKILL. Always reaps."""
        self.close_socket()
        if self.wait(timeout):
            return self.popen.returncode
        try:
            self.popen.terminate()
        except ProcessLookupError:
            pass
        if self.wait(timeout):
            return self.popen.returncode
        return self.kill()

    def __enter__(self) -> DriverProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"DriverProcess(name={self.name!r}, pid={self.pid}, {self.describe_exit()})"
