"""Find drivers (entry points of group "mlts.drivers" and plugin files), pick them by regex, open them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from mlts.errors import InputError
from mlts.hal import vlog
from mlts.hal.interface import Device
from mlts.hal.loader import device_classes, load_factory, load_file, unfinished_classes, unfinished_message
from mlts.ipc.net.address import complete, is_network, parse
from mlts.runtime.network import connect_endpoint
from mlts.runtime.remote import RemoteDevice

ENTRY_POINT_GROUP = "mlts.drivers"
#: The built-in drivers, as pyproject.toml registers them; used when the project is not installed.
BUILTIN_DRIVERS: Mapping[str, str] = {
    "sample-all": "driver.variants:SampleAll",
    "sample-float-fast": "driver.variants:SampleFloatFast",
    "sample-float-slow": "driver.variants:SampleFloatSlow",
    "sample-minimal": "driver.variants:SampleMinimal",
    "sample-quant": "driver.variants:SampleQuant",
    "sample-faulty": "driver.faulty:SampleFaulty",
}
#: Fault-injection drivers: selected only when the user names drivers, never by the default selection.
TEST_DOUBLES = frozenset({"sample-faulty"})
#: The other sample variants run sample-all's kernels under other support rules and capabilities (for
#: device choice and partitioning); a default run would only repeat sample-all, so they too must be named.
SAMPLE_VARIANTS = frozenset({"sample-float-fast", "sample-float-slow", "sample-minimal", "sample-quant"})
NOT_SELECTED_BY_DEFAULT = TEST_DOUBLES | SAMPLE_VARIANTS


class DiscoveryError(InputError):
    """A driver cannot be found, is defined twice, or a selection matches nothing."""


@dataclass(frozen=True, slots=True)
class DriverSpec:
    """A driver's name, its factory spec ('module:attr' or 'file.py:Class') and where it came from."""

    name: str
    factory: str
    source: str  # "builtin", "entry point <dist>", "plugin <file>" or "service <socket path>"
    socket: str | None = None  # a shared driver service to connect to instead of starting one


def _entry_points() -> list[tuple[str, str, str]]:
    """(name, value, distribution) of every installed entry point of the group."""
    found = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "unknown distribution"
        found.append((ep.name, ep.value, dist))
    return found


def _add(specs: dict[str, DriverSpec], spec: DriverSpec) -> None:
    other = specs.get(spec.name)
    if other is not None and other != spec:
        raise DiscoveryError(
            f"driver name {spec.name!r} is defined twice: by {other.source} ({other.factory}) "
            f"and by {spec.source} ({spec.factory}); rename one of them"
        )
    specs[spec.name] = spec


def plugin_specs(path: str | Path) -> list[DriverSpec]:
    """One DriverSpec per Device subclass defined in the Python file `path`.

    A Device, PreparedModel, Burst or Buffer subclass of the file that leaves abstract methods undefined
    (and that no other class of the file completes) is refused, naming the methods it lacks.
    """
    resolved = Path(path).expanduser().resolve()
    module = load_file(resolved)
    unfinished = unfinished_classes(module)
    if unfinished:
        raise DiscoveryError(f"driver plugin {str(path)!r}: " + unfinished_message(*unfinished[0]))
    classes = device_classes(module)
    if not classes:
        raise DiscoveryError(
            f"driver plugin {str(path)!r} defines no Device subclass (a driver is a class that subclasses "
            "mlts.hal.interface.Device; see docs/writing-a-driver.md)"
        )
    specs = []
    for cls in classes:
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name or name == Device.name:
            raise DiscoveryError(
                f"driver plugin {str(path)!r}: class {cls.__name__} needs a 'name' class attribute "
                '(the name it is selected by, e.g. name = "my-npu")'
            )
        specs.append(DriverSpec(name, f"{resolved}:{cls.__name__}", f"plugin {resolved}"))
    return specs


def socket_spec(path: str) -> DriverSpec:
    """The driver served at socket `path`, or at a network address (its name is the one the service
    announces). A network address keeps the command's TLS and token settings (`address.complete`), so
    whoever the spec is handed to (a child process, a cluster worker) connects the same way."""
    path = complete(path)
    endpoint = connect_endpoint(path)
    endpoint.close_socket()
    shown = parse(path).plain if is_network(path) else path
    return DriverSpec(endpoint.name, "", f"service {shown}", socket=path)


def discover(plugin_files: Iterable[str | Path] = (), sockets: Iterable[str] = ()) -> dict[str, DriverSpec]:
    """Every known driver by name: installed entry points (or the built-in table), plugin files, services.

    A driver served at one of `sockets` replaces a driver of the same name that would be started.
    """
    specs: dict[str, DriverSpec] = {}
    installed = _entry_points()
    if installed:
        for name, value, dist in installed:
            _add(specs, DriverSpec(name, value, f"entry point {dist}"))
    else:
        for name, value in BUILTIN_DRIVERS.items():
            _add(specs, DriverSpec(name, value, "builtin"))
    for path in plugin_files:
        seen_in_file: set[str] = set()
        for spec in plugin_specs(path):
            if spec.name in seen_in_file:
                raise DiscoveryError(f"driver plugin {str(path)!r} defines driver name {spec.name!r} twice")
            seen_in_file.add(spec.name)
            _add(specs, spec)
    for path in sockets:
        spec = socket_spec(path)
        other = specs.get(spec.name)
        if other is not None and other.socket is not None and other.socket != path:
            raise DiscoveryError(f"driver {spec.name!r} is served at both {other.socket} and {path}")
        specs[spec.name] = spec
    return specs


def select(specs: Mapping[str, DriverSpec], regex: str | None) -> list[DriverSpec]:
    """The drivers whose name matches `regex` (re.search), sorted by name.

    `regex` None is the default selection: the drivers of services named with `--driver-socket` if
    there are any, else every driver except the fault-injection test doubles and the alternative
    sample variants.
    """
    served = {name for name, spec in specs.items() if spec.socket is not None}
    explicit = regex is not None
    try:
        pattern = re.compile(regex if regex is not None else ".*")
    except re.error as e:
        raise DiscoveryError(f"bad driver regex {regex!r}: {e}") from None
    chosen = [
        specs[name]
        for name in sorted(specs)
        if pattern.search(name)
        and (explicit or (name in served if served else name not in NOT_SELECTED_BY_DEFAULT))
    ]
    if not chosen:
        available = ", ".join(sorted(specs)) or "none"
        raise DiscoveryError(f"no driver matches {regex!r}; available: {available}")
    return chosen


def open_device(
    spec: DriverSpec,
    *,
    in_process: bool = False,
    options: Mapping[str, str] | None = None,
    log_path: str | None = None,
    threads: int | None = None,
    **timeouts: float,
) -> Device:
    """The driver's Device: a client of its shared service, built here (`in_process`), or a RemoteDevice
    over a fresh private service process.

    `threads` caps the BLAS/OpenMP threads of a private driver process; an
    in-process driver shares this process's threads instead, and a shared service has its own.
    """
    if spec.socket is not None:
        vlog.log("manager", "driver %s: connecting to the shared service at %s", spec.name, spec.socket)
        return RemoteDevice.connect(spec.socket, **timeouts)
    vlog.log(
        "manager",
        "driver %s: %s from %s",
        spec.name,
        "made in this process" if in_process else "starting a private service",
        spec.factory,
    )
    if in_process:
        factory = load_factory(spec.factory)
        try:
            device = factory(**dict(options or {}))
        except Exception as e:
            # As from a driver process: the reason in one line (-v shows the traceback).
            raise DiscoveryError(
                f"driver {spec.name!r}: cannot create driver from {spec.factory}: {type(e).__name__}: {e}"
            ) from e
        if not isinstance(device, Device):
            raise DiscoveryError(
                f"driver {spec.name!r}: {spec.factory} made a {type(device).__name__}, not a Device"
            )
        return device
    env = thread_env(threads) if threads else None
    return RemoteDevice.start(
        spec.factory, name=spec.name, options=options, log_path=log_path, env=env, **timeouts
    )


def thread_env(threads: int) -> dict[str, str]:
    """Environment that fixes the math-library thread pools of a new process to `threads`."""
    return {var: str(threads) for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
