"""Behaviour cases about state a driver keeps: the compilation cache, extensions, and one client's handles.

- cache: a cache written by prepareModel prepares again with the same results;
  corrupt, truncated, swapped or empty cache files and a wrong token never
  crash the driver and never give a model with other results; another client
  holding the same token but not the files gets nothing;
- extensions: getSupportedExtensions well formed; an undeclared extension is
  neither supported nor prepared; for com.example.mlts.activations (when
  declared) invalid extension data and signatures are INVALID_ARGUMENT;
- isolation: another client cannot run, release or burst a client's prepared
  model, nor use its driver buffer token.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from mlts.hal import example_extension as gelu
from mlts.hal import opprobe
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.types import BufferDesc, BufferRole, DataLocation, Model, Request
from mlts.runtime.burst import RemoteBurst
from mlts.runtime.execution import execute
from mlts.runtime.remote_prepared import RemotePreparedModel
from mlts.validate.core import SuiteOptions, Target
from mlts.validate.request_mutations import valid_request

_TOKEN = bytes(range(32))
_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+")


def simple_case() -> tuple[Model, Request]:
    """A one-ADD float32 model and a request for it with non-zero inputs."""
    model = opprobe.probe_model(OperationType.ADD, OperandType.TENSOR_FLOAT32)
    return model, valid_request(model, [bytes(range(16)) * 2, bytes(32)])


def _outputs(request: Request) -> bytes:
    return bytes(request.pools[1].buffer)  # type: ignore[union-attr]


@contextmanager
def cache_files(count_model: int, count_data: int, folder: str) -> Iterator[tuple[list[int], list[int]]]:
    """Fresh empty cache files opened read-write; closed (and removed with `folder`) afterwards."""
    fds = [
        os.open(os.path.join(folder, f"cache{i}"), os.O_RDWR | os.O_CREAT, 0o600)
        for i in range(count_model + count_data)
    ]
    try:
        yield fds[:count_model], fds[count_model:]
    finally:
        for fd in fds:
            os.close(fd)


def _copy_files(src: list[int], folder: str, tag: str, change: Callable[[int, bytes], bytes]) -> list[int]:
    out = []
    for n, fd in enumerate(src):
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        path = os.path.join(folder, f"{tag}{n}")
        new = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(new, change(n, data))
        out.append(new)
    return out


def _flip_middle(n: int, data: bytes) -> bytes:
    if not data:
        return b"\x01"
    b = bytearray(data)
    b[len(b) // 2] ^= 0x5A
    return bytes(b)


CORRUPTIONS: dict[str, Callable[[int, bytes], bytes]] = {
    "one byte flipped in the middle": _flip_middle,
    "truncated to half": lambda n, d: d[: len(d) // 2],
    "emptied": lambda n, d: b"",
    "header zeroed": lambda n, d: bytes(min(len(d), 128)) + d[128:],
}


NO_CACHE = "the driver asks for no cache files (getNumberOfCacheFilesNeeded 0, 0)"


def _cache_counts(device) -> tuple[int, int] | None:
    """(model, data) cache files the driver asks for, or None when it asks for none."""
    needed = device.getNumberOfCacheFilesNeeded()
    counts = (needed.num_model_cache, needed.num_data_cache)
    return None if counts == (0, 0) else counts


def case_cache(target: Target, options: SuiteOptions) -> str | tuple[str, str] | None:
    device = target.device()
    needed = _cache_counts(device)
    if needed is None:
        return "skip", NO_CACHE
    model, request = simple_case()
    with tempfile.TemporaryDirectory(prefix="mlts-validate-cache-") as folder:
        with cache_files(*needed, folder) as (mfds, dfds):
            prepared = device.prepareModel(model, model_cache=mfds, data_cache=dfds, token=_TOKEN)
            try:
                execute(prepared, request)
                expected = _outputs(request)
            finally:
                prepared.close()
            problems = [_from_cache(device, request, expected, mfds, dfds, _TOKEN, "the cache as written")]
            for name, change in CORRUPTIONS.items():
                if options.quick and name == "header zeroed":
                    continue
                m2 = _copy_files(mfds, folder, "m-", change)
                d2 = _copy_files(dfds, folder, "d-", change)
                try:
                    problems.append(
                        _from_cache(device, request, expected, m2, d2, _TOKEN, f"cache files {name}")
                    )
                finally:
                    for fd in m2 + d2:
                        os.close(fd)
            if mfds and dfds:
                problems.append(
                    _from_cache(device, request, expected, dfds, mfds, _TOKEN, "model and data files swapped")
                )
            problems.append(_from_cache(device, request, expected, mfds, dfds, bytes(32), "another token"))
    bad = [p for p in problems if p]
    return "; ".join(bad) if bad else None


def _from_cache(device, request: Request, expected: bytes, mfds, dfds, token: bytes, what: str) -> str | None:
    """None when preparing from the cache fails cleanly, or succeeds with the same results."""
    try:
        prepared = device.prepareModelFromCache(mfds, dfds, token)
    except HalError as e:
        if device.dead is not None:
            raise
        if what == "the cache as written":
            return f"{what}: prepareModelFromCache failed ({e.status.name}: {e.message})"
        return None
    try:
        execute(prepared, request)
    except HalError as e:
        if device.dead is not None:
            raise
        return f"{what}: prepared from the cache, then the execution failed ({e.status.name}: {e.message})"
    finally:
        prepared.close()
    if _outputs(request) != expected:
        return f"{what}: the model prepared from the cache gives other results (misleading cache)"
    return None


def case_cache_other_client(target: Target) -> str | tuple[str, str] | None:
    """Client A writes a cache under token T; client B, with T but none of A's files, must get no model."""
    a = target.new_client()
    b = target.new_client()
    try:
        needed = _cache_counts(a)
        if needed is None:
            return "skip", NO_CACHE
        model, _ = simple_case()
        with tempfile.TemporaryDirectory(prefix="mlts-validate-cache-") as folder:
            with cache_files(*needed, folder) as (mfds, dfds):
                a.prepareModel(model, model_cache=mfds, data_cache=dfds, token=_TOKEN).close()
            own = os.path.join(folder, "client-b")
            os.mkdir(own)
            with cache_files(*needed, own) as (m2, d2):
                try:
                    stolen = b.prepareModelFromCache(m2, d2, _TOKEN)
                except HalError:
                    if b.dead is not None:
                        raise
                    return None
                stolen.close()
                return "another client's cache token prepared a model from empty cache files (a token accepted from another client)"
    finally:
        a.close()
        b.close()


def case_isolation(target: Target) -> str | None:
    """Client B cannot execute, burst or release client A's prepared model, nor use A's buffer token."""
    a = target.new_client()
    b = target.new_client()
    try:
        model, request = simple_case()
        prepared = a.prepareModel(model)
        problems = []
        stranger = RemotePreparedModel(b, prepared.handle)
        try:
            execute(stranger, request)
            problems.append("another client executed this client's prepared model")
        except HalError as e:
            if e.status != ErrorStatus.INVALID_ARGUMENT:
                problems.append(
                    f"executing another client's prepared model answered {e.status.name}, not INVALID_ARGUMENT"
                )
        try:
            burst = RemoteBurst(b, prepared.handle)
            burst.close()
            problems.append("another client opened a burst on this client's prepared model")
        except HalError:
            pass
        try:
            b.call("releasePreparedModel", {"prepared": prepared.handle})
            problems.append("another client released this client's prepared model")
        except HalError:
            pass
        problems += _buffer_isolation(a, b, prepared, model)
        execute(prepared, request)  # A's model is still there and runs
        prepared.close()
    finally:
        a.close()
        b.close()
    return "; ".join(problems) or None


def _buffer_isolation(a, b, prepared, model: Model) -> list[str]:
    try:
        buffer = a.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
    except HalError:
        return []  # the driver has no memory domains: nothing to share
    try:
        _, request = simple_case()
        inputs = list(request.inputs)
        inputs[0] = replace(inputs[0], location=DataLocation(len(request.pools), 0, 0))
        forged = Request(tuple(inputs), request.outputs, (*request.pools, buffer.token))
        stranger = RemotePreparedModel(b, b.prepareModel(model).handle)
        try:
            execute(stranger, forged)
            return ["another client's request used this client's buffer token"]
        except HalError as e:
            if e.status != ErrorStatus.INVALID_ARGUMENT:
                return [f"another client's buffer token answered {e.status.name}, not INVALID_ARGUMENT"]
            return []
        finally:
            stranger.close()
    finally:
        buffer.close()


def case_extensions_declared(target: Target) -> str | None:
    extensions = target.device().getSupportedExtensions()
    names = [e.name for e in extensions]
    if len(set(names)) != len(names):
        return f"getSupportedExtensions names an extension twice: {names}"
    for e in extensions:
        if not _NAME.fullmatch(e.name):
            return f"extension name {e.name!r} is not reverse-domain (like com.example.my_extension)"
        types = [t.type for t in e.operand_types]
        if len(set(types)) != len(types):
            return f"extension {e.name} declares operand type codes twice: {types}"
    return None


def _gelu_model(name: str = gelu.NAME, mode_data: bytes | None = None, extra_input: bool = False) -> Model:
    b = ModelBuilder()
    b.use_extension(name)
    x = b.add_input(OperandType.TENSOR_FLOAT32, (4,))
    out = b.add_operand(OperandType.TENSOR_FLOAT32, (4,))
    approx = b.add_omitted(b.extension_operand_type(name, gelu.APPROXIMATION))
    b.set_operand_extension_data(approx, gelu.mode_data(0) if mode_data is None else mode_data)
    inputs = [x, approx, x] if extra_input else [x, approx]
    b.add_operation(b.extension_operation_type(name, gelu.GELU), inputs, [out])
    b.mark_outputs(out)
    return b.build()


def case_extension_undeclared(target: Target) -> str | None:
    model = _gelu_model("com.example.mlts.never_declared")
    device = target.raw_device()
    try:
        flags = device.getSupportedOperations(model)
        if any(flags):
            return "getSupportedOperations claims an operation of an extension the driver does not declare"
    except HalError:
        if device.dead is not None:
            raise
    try:
        device.prepareModel(model).close()
    except HalError:
        if device.dead is not None:
            raise
        return None
    return "prepareModel accepted an operation of an extension the driver does not declare"


def case_extension_invalid(target: Target) -> str | tuple[str, str] | None:
    device = target.raw_device()
    if gelu.NAME not in {e.name for e in device.getSupportedExtensions()}:
        return "skip", f"the driver does not declare {gelu.NAME}"
    device.prepareModel(_gelu_model()).close()  # the valid one prepares
    problems = []
    for what, model in (
        ("GELU approximation data 7 (not a mode)", _gelu_model(mode_data=b"\x07\x00\x00\x00")),
        ("GELU approximation data of 2 bytes", _gelu_model(mode_data=b"\x00\x00")),
        ("GELU with an extra input", _gelu_model(extra_input=True)),
    ):
        try:
            device.prepareModel(model).close()
            problems.append(f"{what}: prepared")
        except HalError as e:
            if device.dead is not None:
                raise
            if e.status != ErrorStatus.INVALID_ARGUMENT:
                problems.append(f"{what}: {e.status.name}, not INVALID_ARGUMENT")
    return "; ".join(problems) or None


def cases(target: Target, options: SuiteOptions) -> list[tuple[str, Callable[[], object]]]:
    return [
        ("cache: round trip and corruption", lambda: case_cache(target, options)),
        ("cache: token of another client", lambda: case_cache_other_client(target)),
        ("isolation: prepared models, bursts and buffer tokens", lambda: case_isolation(target)),
        ("extensions: declared well formed", lambda: case_extensions_declared(target)),
        ("extensions: undeclared extension refused", lambda: case_extension_undeclared(target)),
        ("extensions: invalid extension operands refused", lambda: case_extension_invalid(target)),
    ]
