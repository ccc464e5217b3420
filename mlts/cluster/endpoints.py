"""Where each row's backend ran: the `endpoint` record stamped on benchmark, stress and validate results.

Every run stamps its rows, a single machine's as well as a lab's or a cluster's, so the three write
the same schema. A driver reached over a Unix socket (a private service mlts started, or a shared one
at `address`) ran on the machine that reached it; onnxruntime and `--in-process` drivers ran inside
the tool. A driver reached at a network address (`tcp://HOST:PORT`) ran on HOST (on the machine that
reached it when HOST is a loopback address): transport "tcp+tls", or "tcp" for plaintext, and the
address without this machine's TLS settings.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from mlts.ipc.net.address import is_network, parse
from mlts.records.endpoint import Endpoint

REFERENCE_NAME = "onnxruntime"


def this_host() -> str:
    """This machine's name, as results rows record it."""
    return socket.gethostname() or "localhost"


def endpoint_of(
    name: str,
    socket_path: str | None = None,
    *,
    in_process: bool = False,
    client_host: str | None = None,
) -> Endpoint:
    """The endpoint of a driver named `name`: in this process, a private service, or the service at `socket_path`."""
    host = client_host or this_host()
    if in_process:
        return Endpoint(name=name, host=host, transport="in-process", address=None, client_host=host)
    if socket_path is not None and is_network(socket_path):
        where = parse(socket_path)
        served = host if where.is_loopback() else where.host
        return Endpoint(
            name=name, host=served, transport=where.transport, address=where.plain, client_host=host
        )
    return Endpoint(name=name, host=host, transport="unix", address=socket_path, client_host=host)


def driver_of_backend(backend: str) -> str | None:
    """The driver a benchmark backend label ran on (`driver:sample-all/async+x` -> sample-all); None for
    the reference (`cpu:...`); the label itself for the runtime's own placement (nnapi-reference)."""
    if backend.startswith("cpu:"):
        return None
    base = backend[len("driver:") :] if backend.startswith("driver:") else backend
    base = base.split("+", 1)[0]
    head, sep, tail = base.rpartition("/")
    return head if sep and tail in ("sync", "async", "fenced", "burst") else base


def stamp_benchmark(
    doc: dict[str, Any],
    sockets: Mapping[str, str | None],
    *,
    in_process: bool = False,
    device: str | None = None,
    client_host: str | None = None,
) -> dict[str, Any]:
    """`doc` (a benchmark document's JSON) with an `endpoint` on every row that has none yet.

    `sockets`: driver name -> the socket of its shared service (None: a private one). `device`: the
    lab endpoint's name, given to every row of the run (the reference's too: the device section it
    belongs to); without it a driver row's endpoint is named after its driver and the reference's
    "onnxruntime".
    """
    for row in doc.get("results", []):
        if not isinstance(row, dict) or "endpoint" in row:
            continue
        driver = driver_of_backend(str(row.get("backend", "")))
        if driver is None:
            where = endpoint_of(device or REFERENCE_NAME, in_process=True, client_host=client_host)
        else:
            where = endpoint_of(
                device or driver, sockets.get(driver), in_process=in_process, client_host=client_host
            )
        row["endpoint"] = where.to_json()
    return doc


def stamp_stress(
    doc: dict[str, Any],
    sockets: Mapping[str, str | None],
    *,
    in_process: bool = False,
    device: str | None = None,
    client_host: str | None = None,
) -> dict[str, Any]:
    """`doc` (a stress document's JSON) with an `endpoint` on every record that has none yet."""
    for record in doc.get("results", []):
        if not isinstance(record, dict) or "endpoint" in record:
            continue
        driver = str(record.get("driver", ""))
        where = endpoint_of(
            device or driver, sockets.get(driver), in_process=in_process, client_host=client_host
        )
        record["endpoint"] = where.to_json()
    return doc
