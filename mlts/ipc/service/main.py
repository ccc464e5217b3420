"""The service's command line: create the Device, then serve one inherited connection or a socket path."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence

from mlts.errors import InputError
from mlts.hal import procctl
from mlts.hal.interface import Device
from mlts.hal.loader import load_factory
from mlts.ipc.extension_allowlist import AllowlistError
from mlts.ipc.net.listener import NetListener, listen_config
from mlts.ipc.service import coverage as driver_coverage
from mlts.ipc.service.allowlist_policy import AllowlistPolicy
from mlts.ipc.service.background import MAX_NICE, PREPARE_NICE
from mlts.ipc.service.handles import Limits
from mlts.ipc.service.host import (
    DEFAULT_FENCE_WAIT_LIMIT,
    DEFAULT_FRAME_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CLIENTS,
    DEFAULT_MAX_CLIENTS_PER_PID,
    DEFAULT_MAX_CLIENTS_PER_UID,
    DEFAULT_PREPARE_WORKERS,
    DEFAULT_WORKERS,
    ServiceHost,
)
from mlts.ipc.service.linger import DEFAULT_LINGER_S

log = logging.getLogger("mlts.ipc.service")


class _Terminate(BaseException):
    """Raised from the SIGTERM handler to leave the serving loop cleanly."""


def parse_options(items: Sequence[str]) -> dict[str, str]:
    """KEY=VALUE items as a dict (keys must be identifiers)."""
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--option {item!r} must look like key=value with an identifier key")
        options[key] = value
    return options


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _nice(text: str) -> int:
    value = int(text)
    if not 0 <= value <= MAX_NICE:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_NICE}, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _linger_us(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1000000 microseconds, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mlts.ipc.service",
        description="Serve one driver over Unix sockets (and TCP with --listen).",
    )
    p.add_argument(
        "--factory", required=True, help="'module:attr' or '/path/file.py[:Class]' making the Device"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--fd", type=int, help="inherited fd of a connected Unix socket (a private service)")
    where.add_argument("--socket", metavar="PATH", help="listen on this Unix socket path (a shared service)")
    net = p.add_argument_group("network (docs/wire-protocol.md, Network transport)")
    net.add_argument(
        "--listen",
        action="append",
        default=[],
        metavar="tcp://HOST:PORT",
        help="also (or only) serve network clients here (repeatable; port 0: the system chooses)",
    )
    net.add_argument("--tls-cert", metavar="FILE", help="the service's certificate chain (PEM)")
    net.add_argument("--tls-key", metavar="FILE", help="its private key (PEM; default: in --tls-cert)")
    net.add_argument("--tls-client-ca", metavar="FILE", help="require client certificates signed by this CA")
    net.add_argument("--token-file", metavar="FILE", help="accept clients presenting a token of this file")
    net.add_argument(
        "--insecure", action="store_true", help="plaintext TCP without TLS (loopback addresses only)"
    )
    p.add_argument("--name", help="driver name announced in the hello (default: the Device's name)")
    p.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="exit (as on SIGTERM) once this parent process is gone, even while busy",
    )
    p.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="keyword argument for the factory"
    )
    p.add_argument(
        "--frame-timeout",
        type=_positive_float,
        default=DEFAULT_FRAME_TIMEOUT,
        help="seconds to finish a started frame",
    )
    p.add_argument("--workers", type=_positive_int, default=DEFAULT_WORKERS, help="executions run at once")
    p.add_argument(
        "--prepare-workers",
        type=_positive_int,
        default=DEFAULT_PREPARE_WORKERS,
        help="preparations run at once",
    )
    p.add_argument(
        "--prepare-nice",
        type=_nice,
        default=PREPARE_NICE,
        metavar="STEPS",
        help="how many nice steps below the executions the preparation workers run "
        f"(0 to {MAX_NICE}; 0: the same priority)",
    )
    p.add_argument(
        "--priority-linger-us",
        type=_linger_us,
        default=round(DEFAULT_LINGER_S * 1e6),
        metavar="US",
        help="microseconds a higher-priority execution keeps lower-priority ones paused after its answer, "
        "for the same client's next call (0: none)",
    )
    p.add_argument(
        "--fence-wait-limit",
        type=_positive_float,
        default=DEFAULT_FENCE_WAIT_LIMIT,
        help="seconds a fenced execution without deadline waits for its input fences",
    )
    p.add_argument("--max-clients", type=_positive_int, default=DEFAULT_MAX_CLIENTS)
    p.add_argument(
        "--max-clients-per-uid",
        type=_positive_int,
        default=DEFAULT_MAX_CLIENTS_PER_UID,
        help="connections one user may hold at once",
    )
    p.add_argument(
        "--max-clients-per-pid",
        type=_positive_int,
        default=DEFAULT_MAX_CLIENTS_PER_PID,
        help="connections one process may hold at once",
    )
    p.add_argument(
        "--idle-timeout",
        type=_non_negative_float,
        default=None,
        metavar="S",
        help=f"disconnect a client with no call in flight that sent nothing for S seconds (0: never; "
        f"default {DEFAULT_IDLE_TIMEOUT:g} for --socket, never for --fd)",
    )
    p.add_argument(
        "--extensions-allowlist",
        metavar="FILE",
        default=None,
        help="which clients may use which extensions (default: <config dir>/extensions_allowlist, else the "
        "bundled tools may use com.example.mlts.activations)",
    )
    p.add_argument(
        "--no-prevalidate",
        dest="prevalidate",
        action="store_false",
        help="pass decoded models and requests to the driver without validating them first "
        "(tests the driver's own validation; decoding still checks every size and type)",
    )
    p.add_argument(
        "--coverage",
        action="store_true",
        help="instrument the driver's code and answer coverageReport (coverage-guided fuzzing of the "
        "driver; needs atheris, the fuzz extra; the driver runs several times slower)",
    )
    defaults = Limits()
    p.add_argument("--max-prepared", type=_positive_int, default=defaults.max_prepared, help="per client")
    p.add_argument("--max-memories", type=_positive_int, default=defaults.max_memories, help="per client")
    p.add_argument("--max-fenced", type=_positive_int, default=defaults.max_fenced, help="per client")
    p.add_argument("--max-in-flight", type=_positive_int, default=defaults.max_in_flight, help="per client")
    p.add_argument(
        "--max-mapped-mib", type=_positive_int, default=defaults.max_mapped_bytes >> 20, help="per client"
    )
    p.add_argument(
        "--max-queued-kib",
        type=_positive_int,
        default=defaults.max_queued_bytes >> 10,
        help="per client: replies waiting for a client that does not read them (beyond: disconnected)",
    )
    return p


def _on_signal(signum: int, frame: object) -> None:
    raise _Terminate(signal.Signals(signum).name)


def make_device(factory: str, options: dict[str, str]) -> Device:
    """The Device made by factory spec `factory` with keyword `options`."""
    device = load_factory(factory)(**options)
    if not isinstance(device, Device):
        raise TypeError(f"{factory} made a {type(device).__name__}, not an mlts.hal.interface.Device")
    return device


def main(argv: Sequence[str] | None = None) -> int:
    """Create the Device and serve; 0 on a clean end, 1 when the Device cannot be made, 2 on a bad fd/socket."""
    args = parser().parse_args(argv)
    if args.fd is None and args.socket is None and not args.listen:
        parser().error("one of --fd, --socket or --listen is required")
    if args.fd is not None and args.listen:
        parser().error("--listen serves a shared service; it does not go with --fd")
    # Clients' tensors and models are mapped here: no other process of the user may read them via /proc.
    procctl.make_non_dumpable()
    soft_nofile, _ = procctl.raise_fd_limit()
    if args.parent_pid is not None:
        procctl.exit_when_orphaned(args.parent_pid)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(name)s[%(process)d] %(levelname)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    sock = None
    if args.fd is not None:
        try:
            sock = socket.socket(fileno=args.fd)
            sock.set_inheritable(False)
        except OSError as e:
            log.error("--fd %d is not a usable socket: %s", args.fd, e)
            return 2
    label = args.name or args.factory
    try:
        allowlist = AllowlistPolicy.from_file(args.extensions_allowlist)
    except AllowlistError as e:
        log.error("%s", e)
        return 2
    coverage = None
    if args.coverage:
        try:
            coverage = driver_coverage.install(args.factory)
        except ImportError as e:
            log.error("--coverage needs atheris (pip install 'mlts[fuzz]'): %s", e)
            return 2
    try:
        net_configs = [
            listen_config(
                where,
                cert=args.tls_cert,
                key=args.tls_key,
                client_ca=args.tls_client_ca,
                token_file=args.token_file,
                insecure=args.insecure,
            )
            for where in args.listen
        ]
    except InputError as e:
        log.error("%s", e)
        return 2
    try:
        options = parse_options(args.option)
        started = time.monotonic()
        device = make_device(args.factory, options)
        if coverage is not None:
            driver_coverage.instrument_loaded(coverage, device)
        log.info(
            "driver %r created from %s in %.3f s (open-file limit %d)",
            label,
            args.factory,
            time.monotonic() - started,
            soft_nofile,
        )
    except _Terminate as e:
        log.info("stopped by %s while starting", e)
        return 0
    except Exception as e:
        log.error(
            "cannot create driver %r from %s: %s: %s", label, args.factory, type(e).__name__, e, exc_info=True
        )
        return 1
    limits = Limits(
        max_prepared=args.max_prepared,
        max_memories=args.max_memories,
        max_fenced=args.max_fenced,
        max_in_flight=args.max_in_flight,
        max_mapped_bytes=args.max_mapped_mib << 20,
        max_queued_bytes=args.max_queued_kib << 10,
    )
    idle = args.idle_timeout if args.idle_timeout is not None else (None if sock else DEFAULT_IDLE_TIMEOUT)
    host = ServiceHost(
        device,
        name=args.name,
        limits=limits,
        workers=args.workers,
        prepare_workers=args.prepare_workers,
        frame_timeout=args.frame_timeout,
        fence_wait_limit=args.fence_wait_limit,
        max_clients=args.max_clients,
        max_clients_per_uid=args.max_clients_per_uid,
        max_clients_per_pid=args.max_clients_per_pid,
        idle_timeout=idle or None,
        shared=sock is None,
        prevalidate=args.prevalidate,
        prepare_nice=args.prepare_nice,
        priority_linger=args.priority_linger_us / 1e6,
        allowlist=allowlist,
        coverage=coverage,
    )
    log.info(
        "%d execution workers, %d preparation workers (%d nice steps below)",
        args.workers,
        args.prepare_workers,
        args.prepare_nice,
    )
    code = 0
    listeners = [NetListener(host, config) for config in net_configs]
    try:
        for listener in listeners:
            log.info("listening on %s (%s)", listener.bind(), listener.config.describe())
        if sock is not None:
            host.serve_connection(sock)
        else:
            serving = listeners if args.socket else listeners[1:]
            for listener in serving:
                threading.Thread(target=listener.serve, name="net-listener", daemon=True).start()
            if args.socket:
                host.listen(args.socket)
            else:
                listeners[0].serve()
    except _Terminate as e:
        log.info("stopped by %s", e)
    except InputError as e:
        log.error("%s", e)
        code = 2
    except OSError as e:
        log.error("cannot serve on %s: %s", args.socket, e)
        code = 2
    finally:
        for listener in listeners:
            listener.close()
        try:
            host.close()
        except _Terminate:
            host.close()
    log.info("driver %r exits", label)
    return code
