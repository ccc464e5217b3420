"""What a unit drives: a driver started where the unit runs, a service at a Unix socket on one machine, or
a service at a network address (reached from any worker).

Targets come from a lab file (each endpoint, checked on this machine: a socket must answer with a
hello, and announce the driver the lab names) or from a command's own driver selection. They travel
in units as JSON and become a DriverSpec on the worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mlts.cluster.endpoints import endpoint_of, this_host
from mlts.cluster.lab import Lab, LabError
from mlts.ipc.net.address import is_network
from mlts.records.endpoint import Endpoint, LabDevice, LabSection


@dataclass(frozen=True)
class DriverTarget:
    """A driver by name (a private service where the unit runs) or the service at `socket` on `host`."""

    driver: str
    socket: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    device: str | None = None  # the lab endpoint's name (lab runs)
    host: str | None = None  # the machine whose Unix socket this is

    @property
    def name(self) -> str:
        """What rows call it: the lab endpoint's name, else the driver's."""
        return self.device or self.driver

    def to_json(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "socket": self.socket,
            "options": dict(self.options),
            "device": self.device,
            "host": self.host,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DriverTarget:
        return cls(
            str(data["driver"]),
            data.get("socket"),
            {str(k): str(v) for k, v in (data.get("options") or {}).items()},
            data.get("device"),
            data.get("host"),
        )

    def spec(self, plugin_files: Iterable[str] = ()):
        """The DriverSpec on the machine running the unit (DiscoveryError if the driver is unknown there)."""
        from mlts.runtime.discovery import DiscoveryError, DriverSpec, discover

        if self.socket is not None:
            return DriverSpec(self.driver, "", f"service {self.socket}", socket=self.socket)
        specs = discover(list(plugin_files))
        if self.driver not in specs:
            raise DiscoveryError(
                f"driver {self.driver!r} is not installed on {this_host()}; there: {', '.join(sorted(specs))}"
            )
        return specs[self.driver]

    def endpoint(self, in_process: bool = False) -> Endpoint:
        """Where the driver runs, as a results row records it (asked on the machine running the unit)."""
        return endpoint_of(self.name, self.socket, in_process=in_process)


def lab_targets(lab: Lab, plugin_files: Iterable[str] = ()) -> list[DriverTarget]:
    """The lab's endpoints as targets; LabError when a socket does not answer, announces another driver,
    or a driver is not known here."""
    from mlts.hal.errors import HalError
    from mlts.runtime.discovery import DiscoveryError, discover, socket_spec

    try:
        known = discover(list(plugin_files))
    except DiscoveryError as e:
        raise LabError(str(e)) from None
    out = []
    for ep in lab.endpoints:
        at = f"--lab {lab.path}: endpoint {ep.name}"
        if ep.address is None:
            assert ep.driver is not None
            if ep.driver not in known:
                raise LabError(f"{at}: unknown driver {ep.driver!r}; available: {', '.join(sorted(known))}")
            out.append(DriverTarget(ep.driver, None, dict(ep.options), ep.name))
            continue
        try:
            served = socket_spec(ep.address)
        except HalError as err:
            raise LabError(f"{at}: {' '.join(err.message.split())}") from None
        if ep.driver is not None and served.name != ep.driver:
            raise LabError(
                f"{at}: the service at {ep.address} serves driver {served.name!r}, not {ep.driver!r}"
            )
        # A network service is reached from any worker; a Unix socket only on this machine.
        local = None if is_network(ep.address) else this_host()
        out.append(DriverTarget(served.name, served.socket, {}, ep.name, local))
    return out


def spec_targets(
    specs: Iterable[Any], options: dict[str, dict[str, str]] | None = None
) -> list[DriverTarget]:
    """Targets for a command's own driver selection (DriverSpecs); services' sockets live on this machine."""
    options = options or {}
    return [
        DriverTarget(
            s.name,
            s.socket,
            dict(options.get(s.name) or {}),
            None,
            this_host() if s.socket and not is_network(s.socket) else None,
        )
        for s in specs
    ]


#: The host of a lab driver that each cluster unit starts on its own worker (the rows say which).
ON_EACH_WORKER = "each unit's worker"


def lab_section(lab: Lab, targets: list[DriverTarget], distributed: bool = False) -> LabSection:
    """The `lab` section of the results: every device, its driver and where it runs."""
    devices = []
    for t in targets:
        where = t.endpoint()
        if distributed and t.socket is None:
            where = Endpoint(name=where.name, host=ON_EACH_WORKER, transport=where.transport, address=None)
        devices.append(LabDevice(name=t.name, driver=t.driver, endpoint=where, options=dict(t.options)))
    return LabSection(file=lab.path, devices=tuple(devices))
