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
from mlts.hal.enums import ErrorStatus
from mlts.hal.interface import Device
from mlts.hal.types import Model
from mlts.ipc import wire
from mlts.ipc.peer import Peer
from mlts.ipc.service import (
    buffer_calls,
    burst_calls,
    compact_dispatch,
    device_calls,
    execution_calls,
    fenced_calls,
    memory_calls,
)
from mlts.ipc.service.allowlist_policy import AllowlistPolicy
from mlts.ipc.service.apps import AppRegistry
from mlts.ipc.service.background import PREPARE_NICE, Background, GiveWay
from mlts.ipc.service.client import Client, Handler
from mlts.ipc.service.coverage import DriverCoverage, coverage_report
from mlts.ipc.service.fence_watcher import FenceWatcher
from mlts.ipc.service.handles import Limits
from mlts.ipc.service.linger import DEFAULT_LINGER_S, Linger
from mlts.ipc.service.memory_trim import Trimmer
from mlts.ipc.service.refusals import GuessBrake, RefusalLog
from mlts.ipc.service.scheduler import WorkerPool
from mlts.ipc.service.transport import Connection
from mlts.ipc.socket_dir import check_folder

log = logging.getLogger("mlts.ipc.service")

#: Once a frame has started, the rest must arrive within this many seconds.
DEFAULT_FRAME_TIMEOUT = 10.0
#: Executions running at once (the worker pool); preparations have their own pool.
DEFAULT_WORKERS = 2
DEFAULT_PREPARE_WORKERS = 2
#: A fenced execution waits at most this long for its input fences when it has no deadline.
DEFAULT_FENCE_WAIT_LIMIT = 60.0
DEFAULT_MAX_CLIENTS = 64
#: Connections one user (uid) and one process (pid) may hold at once: room is always left for others.
DEFAULT_MAX_CLIENTS_PER_UID = 48
DEFAULT_MAX_CLIENTS_PER_PID = 16
#: A shared service disconnects a client with no call in flight that sent nothing for this long (s).
DEFAULT_IDLE_TIMEOUT = 600.0


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
        max_clients_per_uid: int = DEFAULT_MAX_CLIENTS_PER_UID,
        max_clients_per_pid: int = DEFAULT_MAX_CLIENTS_PER_PID,
        idle_timeout: float | None = None,
        shared: bool = False,
        prevalidate: bool = True,
        allowlist: AllowlistPolicy | None = None,
        prepare_nice: int = PREPARE_NICE,
        coverage: DriverCoverage | None = None,
        priority_linger: float = DEFAULT_LINGER_S,
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
        self.max_clients_per_uid = max_clients_per_uid
        self.max_clients_per_pid = max_clients_per_pid
        #: Seconds a client may stay idle (no call in flight, nothing received); None: for ever.
        self.idle_timeout = idle_timeout
        #: Calls answered with an error, logged in aggregate; and the brake on buffer token guesses.
        self.refusals = RefusalLog()
        self.guesses = GuessBrake()
        #: Returns freed heap memory to the system after clients leave.
        self.trimmer = Trimmer()
        #: Which clients may use which extensions (enforced unless the service does not pre-validate).
        self.allowlist = allowlist if allowlist is not None else AllowlistPolicy()
        self.shared = shared
        #: Which program each client is (connections of one program are one app).
        self.apps = AppRegistry()
        self.handlers: dict[str, Handler] = {
            **device_calls.HANDLERS,
            **execution_calls.HANDLERS,
            **fenced_calls.HANDLERS,
            **burst_calls.HANDLERS,
            **buffer_calls.HANDLERS,
            **memory_calls.HANDLERS,
        }
        #: Serves a compact frame (protocol 1.4) of a client.
        self.dispatch_compact = compact_dispatch.dispatch_compact
        #: The driver's coverage when the service instruments it (`--coverage`: fuzzing the driver).
        self.coverage = coverage
        if coverage is not None:
            self.handlers["coverageReport"] = coverage_report
        self.exec_pool = WorkerPool("execute", workers)
        #: Keeps a higher-priority execution's ticket a moment after its answer while lower-priority
        #: work is in the pool (mlts.ipc.service.linger).
        self.linger = Linger(priority_linger)
        # Preparations run below executions (lower priority, short switch interval), as an accelerator
        # driver's compiler never slows its executions: mlts.ipc.service.background.
        self.prepare_pool = WorkerPool("prepare", prepare_workers, Background(prepare_nice))
        #: Around the driver's work of a preparation (its compile): it waits while executions run.
        self.give_way = GiveWay(self.exec_pool)
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
            "idle_timeout": self.idle_timeout,
            "coverage": self.coverage is not None,
        }

    def allowlist_check(self, client: Client, model: Model, method: str) -> None:
        """INVALID_ARGUMENT when `model` uses an extension `client` may not use (the service's allowlist);
        a service that does not pre-validate hands the driver every model it can decode."""
        if self.prevalidate:
            self.allowlist.check(client.peer, model, method)

    # ------------------------------------------------------------ clients

    def serve_connection(self, sock: socket.socket) -> None:
        """Serve one client on `sock` in this thread until it hangs up; then release what it holds."""
        self._serve(self._register(self._connection(sock)))

    def _connection(self, sock: socket.socket, peer: Peer | None = None) -> Connection:
        return Connection(sock, self.frame_timeout, peer=peer, max_queued=self.limits.max_queued_bytes)

    def connection(self, sock: socket.socket, peer: Peer) -> Connection:
        """A connection of this service on `sock` for a client the caller identified (a network bridge's
        local end): `admit` it."""
        return self._connection(sock, peer)

    def _register(self, conn: Connection) -> Client:
        client = Client(self, conn)
        with self._lock:
            self._clients[id(client)] = client
            self.served += 1
        log.info("client %s connected", client.peer.describe())
        return client

    def _serve(self, client: Client) -> None:
        try:
            client.serve()
        finally:
            with self._lock:
                self._clients.pop(id(client), None)
            client.close()
            client.conn.close()
            try:
                client.conn.sock.close()
            except OSError:
                pass
            self.refusals.flush(client.peer.process_key)
            with self._lock:
                left = len(self._clients)
            self.trimmer.client_left(left)
            log.info("client %s released its handles after %d calls", client.peer.describe(), client.calls)

    def listen(self, path: str) -> None:
        """Accept clients on a Unix socket at `path` (mode 0600) until `stop()`; removes the file after.

        The socket's folder must be this user's and writable by nobody else (OSError otherwise)."""
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
                    self.refusals.flush()  # summaries of clients that stopped being refused
                    continue
                try:
                    sock, _ = listener.accept()
                except OSError:
                    continue
                self._admit(sock)
        finally:
            self._close_listener()

    def _prepare_path(self, path: str) -> None:
        """Refuse a folder others could write to (socket_dir.check_folder), and to replace anything but a
        stale socket of a service that is gone."""
        check_folder(os.path.dirname(os.path.abspath(path)))
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
        """Take a new connection of the Unix listener (see `admit`)."""
        sock.set_inheritable(False)
        self.admit(self._connection(sock))

    def admit(self, conn: Connection) -> None:
        """Take a new connection: refused at once (with one `refused` message) when the service is full or
        the peer's process or user (a network client: its identity, on one machine or in all) holds its
        share of the connections already; else served on a thread of its own."""
        sock = conn.sock
        peer = conn.peer
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            clients = list(self._clients.values())
            why = None
            if len(clients) >= self.max_clients:
                why = f"{len(clients)} clients are connected already (at most {self.max_clients})"
            elif sum(c.peer.user_key == peer.user_key for c in clients) >= self.max_clients_per_uid:
                why = (
                    f"{peer.describe_user()} holds {self.max_clients_per_uid} connections already "
                    "(the most one user may)"
                )
            elif sum(c.peer.process_key == peer.process_key for c in clients) >= self.max_clients_per_pid:
                why = (
                    f"{peer.describe_process()} holds {self.max_clients_per_pid} connections already "
                    "(the most one process may)"
                )
            if why is None:
                client = Client(self, conn)
                self._clients[id(client)] = client
                self.served += 1
        if why is not None:
            self.refusals.note(peer, f"connection refused: {why}")
            # One small frame on a new socket: its buffer is empty, so this never waits.
            conn.send(
                {"kind": "refused", "status": int(ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT), "message": why}
            )
            conn.close()
            sock.close()
            return
        log.info("client %s connected", peer.describe())
        thread = threading.Thread(target=self._serve, args=(client,), name="client", daemon=True)
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
        user = asking.peer.user_key if asking is not None else os.getuid()
        described = [c.status() for c in clients if c.peer.user_key == user]
        return {
            "device": self.name,
            "pid": os.getpid(),
            "shared": self.shared,
            "clients": len(clients),
            "driver_buffers": sum(c.handles.counts().get("buffer", 0) for c in clients),
            "served": self.served,
            "you": asking.status() if asking is not None else None,
            "visible_clients": described,
            "execute_pool": {
                **self.exec_pool.status(),
                "priority_linger_us": round(self.linger.seconds * 1e6),
                "lingered": self.linger.kept,
            },
            "prepare_pool": {**self.prepare_pool.status(), **self._background()},
            "fence_waits": self.fences.count(),
            "burst_listeners": sum(1 for t in threading.enumerate() if t.name == "burst"),
            "limits": {
                "max_prepared": self.limits.max_prepared,
                "max_memories": self.limits.max_memories,
                "max_fenced": self.limits.max_fenced,
                "max_bursts": self.limits.max_bursts,
                "max_in_flight": self.limits.max_in_flight,
                "max_mapped_bytes": self.limits.max_mapped_bytes,
                "max_queued_bytes": self.limits.max_queued_bytes,
                "max_clients": self.max_clients,
                "max_clients_per_uid": self.max_clients_per_uid,
                "max_clients_per_pid": self.max_clients_per_pid,
                "idle_timeout": self.idle_timeout,
            },
        }

    def _background(self) -> dict[str, float]:
        background = self.prepare_pool.background
        described = background.describe() if background is not None else {}
        return {**described, **self.give_way.describe()}

    def stop(self) -> None:
        """Stop accepting, disconnect every client (which releases its handles)."""
        self._stop.set()
        with self._lock:
            clients = list(self._clients.values())
            threads = list(self._threads)
        for client in clients:
            client.conn.close()
        for thread in threads:
            thread.join(2.0)
        self._close_listener()

    def close(self) -> None:
        """Stop everything and close the Device."""
        self.stop()
        self.fences.stop()
        self.linger.stop()
        # Work still running after this is abandoned: its threads are daemons and end with the process.
        self.exec_pool.stop(1.0)
        self.prepare_pool.stop(0.5)
        try:
            self.device.close()
        except Exception as e:
            log.warning("closing the device failed: %s: %s", type(e).__name__, e)
