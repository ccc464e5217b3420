"""The service host: one Device shared by every client, its worker pools, fence watcher and clients.

A host serves either one inherited connection (a private service, ended when
that client hangs up) or a listening Unix socket that any number of clients
connect to (a shared service, ended by `stop()`). One client going away,
cleanly or not, releases only its own handles.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import stat
import threading
from typing import Any

from mlts.hal import trace
from mlts.hal.interface import Device
from mlts.ipc import wire
from mlts.ipc.service import (
    buffer_calls,
    burst_calls,
    compact_dispatch,
    device_calls,
    execution_calls,
    fenced_calls,
)
from mlts.ipc.service.client import Client, Handler
from mlts.ipc.service.fence_watcher import FenceWatcher
from mlts.ipc.service.handles import Limits
from mlts.ipc.service.scheduler import WorkerPool
from mlts.ipc.service.transport import Connection

log = logging.getLogger("mlts.ipc.service")

#: Once a frame has started, the rest must arrive within this many seconds.
DEFAULT_FRAME_TIMEOUT = 10.0
#: Executions running at once (the worker pool); preparations have their own pool.
DEFAULT_WORKERS = 2
DEFAULT_PREPARE_WORKERS = 2
#: A fenced execution waits at most this long for its input fences when it has no deadline.
DEFAULT_FENCE_WAIT_LIMIT = 60.0
DEFAULT_MAX_CLIENTS = 64


class ServiceHost:
    """Serves one Device to many clients at once."""

    def __init__(
        self,
        device: Device,
        *,
        name: str | None = None,
        limits: Limits | None = None,
        workers: int = DEFAULT_WORKERS,
        prepare_workers: int = DEFAULT_PREPARE_WORKERS,
        frame_timeout: float = DEFAULT_FRAME_TIMEOUT,
        fence_wait_limit: float = DEFAULT_FENCE_WAIT_LIMIT,
        max_clients: int = DEFAULT_MAX_CLIENTS,
        shared: bool = False,
        prevalidate: bool = True,
    ) -> None:
        self.device = device
        #: False: models and requests reach the Device decoded (sizes and types checked) but not
        #: validated, so a conformance run tests the driver's own validation (`--no-prevalidate`).
        self.prevalidate = prevalidate
        self.name = name or getattr(device, "name", "unnamed")
        self.limits = limits or Limits()
        self.frame_timeout = frame_timeout
        self.fence_wait_limit = fence_wait_limit
        self.max_clients = max_clients
        self.shared = shared
        self.handlers: dict[str, Handler] = {
            **device_calls.HANDLERS,
            **execution_calls.HANDLERS,
            **fenced_calls.HANDLERS,
            **burst_calls.HANDLERS,
            **buffer_calls.HANDLERS,
        }
        #: Serves a compact frame (protocol 1.4) of a client.
        self.dispatch_compact = compact_dispatch.dispatch_compact
        self.exec_pool = WorkerPool("execute", workers)
        self.prepare_pool = WorkerPool("prepare", prepare_workers)
        self.fences = FenceWatcher()
        self._lock = threading.Lock()
        self._clients: dict[int, Client] = {}
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self._socket_path: str | None = None
        self._stop = threading.Event()
        self.served = 0
        trace.name_process(f"driver service {self.name}")  # when tracing (mlts.hal.trace)

    def hello(self) -> dict[str, Any]:
        return {
            "kind": "hello",
            "protocol": list(wire.PROTOCOL_VERSION),
            "device": self.name,
            "pid": os.getpid(),
            "shared": self.shared,
            "workers": self.exec_pool.workers,
            "prevalidate": self.prevalidate,
        }

    # ------------------------------------------------------------ clients

    def serve_connection(self, sock: socket.socket) -> None:
        """Serve one client on `sock` in this thread until it hangs up; then release what it holds."""
        client = Client(self, Connection(sock, self.frame_timeout))
        with self._lock:
            self._clients[id(client)] = client
            self.served += 1
        log.info("client pid %d uid %d connected", client.pid, client.uid)
        try:
            client.serve()
        finally:
            with self._lock:
                self._clients.pop(id(client), None)
            client.close()
            client.conn.shutdown()
            try:
                sock.close()
            except OSError:
                pass
            log.info("client pid %d released its handles", client.pid)

    def listen(self, path: str) -> None:
        """Accept clients on a Unix socket at `path` (mode 0600) until `stop()`; removes the file after."""
        self._prepare_path(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(path)
        finally:
            os.umask(old_umask)
        self._socket_path = path
        listener.listen(64)
        self._listener = listener
        log.info("listening on %s", path)
        try:
            while not self._stop.is_set():
                poller = select.poll()
                poller.register(listener, select.POLLIN)
                if not poller.poll(200):
                    continue
                try:
                    sock, _ = listener.accept()
                except OSError:
                    continue
                self._admit(sock)
        finally:
            self._close_listener()

    def _prepare_path(self, path: str) -> None:
        """Refuse to replace anything but a stale socket of a service that is gone."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(f"{path} exists and is not a socket; not replacing it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # nobody listens: a stale socket
            return
        finally:
            probe.close()
        raise OSError(f"a service already listens on {path}")

    def _admit(self, sock: socket.socket) -> None:
        sock.set_inheritable(False)
        with self._lock:
            full = len(self._clients) >= self.max_clients
            self._threads = [t for t in self._threads if t.is_alive()]
        if full:
            log.warning("refusing a client: %d clients are connected already", self.max_clients)
            sock.close()
            return
        thread = threading.Thread(target=self.serve_connection, args=(sock,), name="client", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        path, self._socket_path = self._socket_path, None
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass

    # ------------------------------------------------------------ status and ending

    def status(self, asking: Client | None = None) -> dict[str, Any]:
        """Clients and work in progress; only clients of the asking user are described."""
        with self._lock:
            clients = list(self._clients.values())
        uid = asking.uid if asking is not None else os.getuid()
        described = [c.status() for c in clients if c.uid == uid]
        return {
            "device": self.name,
            "pid": os.getpid(),
            "shared": self.shared,
            "clients": len(clients),
            "driver_buffers": sum(c.handles.counts().get("buffer", 0) for c in clients),
            "served": self.served,
            "you": asking.status() if asking is not None else None,
            "visible_clients": described,
            "execute_pool": self.exec_pool.status(),
            "prepare_pool": self.prepare_pool.status(),
            "fence_waits": self.fences.count(),
            "burst_listeners": sum(1 for t in threading.enumerate() if t.name == "burst"),
            "limits": {
                "max_prepared": self.limits.max_prepared,
                "max_memories": self.limits.max_memories,
                "max_fenced": self.limits.max_fenced,
                "max_bursts": self.limits.max_bursts,
                "max_in_flight": self.limits.max_in_flight,
                "max_mapped_bytes": self.limits.max_mapped_bytes,
            },
        }

    def stop(self) -> None:
        """Stop accepting, disconnect every client (which releases its handles)."""
        self._stop.set()
        with self._lock:
            clients = list(self._clients.values())
            threads = list(self._threads)
        for client in clients:
            client.conn.shutdown()
        for thread in threads:
            thread.join(2.0)
        self._close_listener()

    def close(self) -> None:
        """Stop everything and close the Device."""
        self.stop()
        self.fences.stop()
        # Work still running after this is abandoned: its threads are daemons and end with the process.
        self.exec_pool.stop(1.0)
        self.prepare_pool.stop(0.5)
        try:
            self.device.close()
        except Exception as e:
            log.warning("closing the device failed: %s: %s", type(e).__name__, e)
