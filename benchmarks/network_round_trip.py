"""What the network transport adds: a synchronous round trip and a burst step over loopback TCP+TLS
against the Unix socket of the same service.

usage: python benchmarks/network_round_trip.py [--runs N] [--elements N] [--insecure]

Starts one sample-all service (`python -m mlts.ipc.service`) that listens on a Unix socket and on
tcp://127.0.0.1 with TLS (a throwaway CA and certificate made with the machine's openssl, a token),
connects a client over each, and times on each connection:

- `ping`: an empty call (what `harness_overhead` in results rows measures);
- `sync`: `executeSynchronously` of out = a + b on float32 tensors of `--elements` elements;
- `burst`: one step of a burst of the same request.

Prints `PATH TRANSPORT median X us p10 Y us p90 Z us` for each, and the difference TCP+TLS minus Unix.
`--insecure` measures plaintext TCP (loopback) instead of TLS. Measure on a quiet machine: these are
figures, not tests.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

from mlts.hal.enums import OperandLifeTime as L
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as O
from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, Model, Operand, Operation, Request, RequestArgument, Subgraph
from mlts.runtime.remote import RemoteDevice

TOKEN = "benchmark-token-0123456789abcdef"


def _openssl(folder: str, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


def certificates(folder: str) -> tuple[str, str, str]:
    """(CA, server certificate, server key) for 127.0.0.1, made with openssl."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        folder, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=benchmark CA", "-addext", "basicConstraints=critical,CA:TRUE",
    )  # fmt: skip
    with open(os.path.join(folder, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl(folder, "req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    _openssl(
        folder, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "1", "-extfile", "ext",
    )  # fmt: skip
    return tuple(os.path.join(folder, n) for n in ("ca.pem", "server.pem", "server.key"))  # type: ignore[return-value]


def add_model(elements: int) -> Model:
    dims = (1, elements)
    operands = (
        Operand(T.TENSOR_FLOAT32, dims, 1, lifetime=L.SUBGRAPH_INPUT),
        Operand(T.TENSOR_FLOAT32, dims, 1, lifetime=L.SUBGRAPH_INPUT),
        Operand(T.INT32, (), 1, lifetime=L.CONSTANT_COPY, location=DataLocation(0, 0, 4)),
        Operand(T.TENSOR_FLOAT32, dims, 0, lifetime=L.SUBGRAPH_OUTPUT),
    )
    main = Subgraph(operands, (Operation(O.ADD, (0, 1, 2), (3,)),), (0, 1), (3,))
    return Model(main, operand_values=struct.pack("<i", 0))


def describe(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6  # noqa: E731
    return statistics.median(ordered) * 1e6, pick(0.1), pick(0.9)


def measure(device: RemoteDevice, elements: int, runs: int) -> dict[str, tuple[float, float, float]]:
    n = 4 * elements
    pool = SharedMemory.create(3 * n)
    a = np.frombuffer(pool.buffer, np.float32, elements, 0)
    a[:] = 1.0
    np.frombuffer(pool.buffer, np.float32, elements, n)[:] = 2.0
    arg = lambda o: RequestArgument(False, DataLocation(0, o, n), (1, elements))  # noqa: E731
    request = Request((arg(0), arg(n)), (arg(2 * n),), (pool,))
    prepared = device.prepareModel(add_model(elements))
    out: dict[str, tuple[float, float, float]] = {}
    for _ in range(20):
        device.ping()
    out["ping"] = describe([device.ping() for _ in range(runs)])
    samples = []
    for i in range(runs + 20):
        t0 = time.perf_counter()
        prepared.executeSynchronously(request)
        if i >= 20:
            samples.append(time.perf_counter() - t0)
    out["sync"] = describe(samples)
    samples = []
    with prepared.configureExecutionBurst() as burst:
        for i in range(runs + 20):
            t0 = time.perf_counter()
            burst.execute(request)
            if i >= 20:
                samples.append(time.perf_counter() - t0)
    out["burst"] = describe(samples)
    got = np.frombuffer(pool.buffer, np.float32, elements, 2 * n)
    assert np.all(got == 3.0), "wrong result"
    prepared.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--elements", type=int, default=6, help="float32 elements per tensor")
    parser.add_argument("--insecure", action="store_true", help="plaintext TCP instead of TLS")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlts-net-bench-") as folder:
        sock = os.path.join(folder, "driver.sock")
        log = os.path.join(folder, "service.log")
        token = os.path.join(folder, "token")
        with open(token, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(token, 0o600)
        net = ["--insecure"]
        query = "insecure=1"
        if not args.insecure:
            ca, cert, key = certificates(folder)
            net = ["--tls-cert", cert, "--tls-key", key, "--token-file", token]
            query = f"ca={ca}&token-file={token}"
        command = [sys.executable, "-m", "mlts.ipc.service", "--factory", "driver.variants:SampleAll"]
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [*command, "--name", "sample-all", "--socket", sock, "--listen", "tcp://127.0.0.1:0", *net],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            port = None
            for _ in range(600):
                found = re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", open(log).read())
                if found and os.path.exists(sock):
                    port = int(found.group(1))
                    break
                time.sleep(0.05)
            if port is None:
                raise SystemExit(f"the service did not start:\n{open(log).read()}")
            transport = "tcp" if args.insecure else "tcp+tls"
            results = {}
            for name, where in (("unix", sock), (transport, f"tcp://127.0.0.1:{port}?{query}")):
                with RemoteDevice.connect(where) as device:
                    results[name] = measure(device, args.elements, args.runs)
            for path in ("ping", "sync", "burst"):
                for name in ("unix", transport):
                    med, p10, p90 = results[name][path]
                    print(f"{path:5} {name:7} median {med:8.1f} us p10 {p10:8.1f} us p90 {p90:8.1f} us")
                extra = results[transport][path][0] - results["unix"][path][0]
                print(
                    f"{path:5} {transport} adds {extra:8.1f} us (median) for {args.elements} float32 elements"
                )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)


if __name__ == "__main__":
    main()
