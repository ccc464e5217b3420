"""Where a row's backend ran (the `endpoint` of a results row), and the `lab` and `cluster` sections.

An endpoint says which machine served the driver and how the tool reached it: `transport` "unix" (a
driver service on a Unix socket: a private one mlts started, or a shared one at `address`),
"in-process" (the driver, or onnxruntime, inside the tool's own process), and a driver service on
the network: "tcp+tls" (or "tcp" for a plaintext loopback service), `address` tcp://HOST:PORT, `host`
HOST. `client_host` is the machine whose tool
talked to it: a cluster worker's, or the one that ran the command. `name` is the lab endpoint's
name in a lab run (the device the report and `mlts compare` group by), else the driver's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlts.records import _json as j

TRANSPORTS = ("unix", "in-process", "tcp", "tcp+tls")


@dataclass(frozen=True)
class Endpoint(j.Record):
    """Where a driver ran: endpoint name, host, transport, the address of a shared service."""

    name: str = j.value(j.text)
    host: str = j.value(j.text)
    transport: str = j.value(j.one_of(TRANSPORTS))
    address: str | None = j.value(j.nullable(j.text), default=None)
    client_host: str | None = j.value(j.nullable(j.text), default=None, omit=True)
    extra: dict = j.extra()


@dataclass(frozen=True)
class LabDevice(j.Record):
    """One endpoint of a lab file: its name, the driver it serves, and where that driver runs."""

    name: str = j.value(j.text)
    driver: str = j.value(j.text)
    endpoint: Endpoint = j.value(j.record_check(Endpoint))
    options: dict = j.value(j.map_of(j.text), default={})
    extra: dict = j.extra()


@dataclass(frozen=True)
class LabSection(j.Record):
    """The `lab` section: the lab file a run read and its devices, in the file's order."""

    file: str = j.value(j.text)
    devices: tuple[LabDevice, ...] = j.value(j.list_of(j.record_check(LabDevice)))
    extra: dict = j.extra()

    @classmethod
    def from_json(cls, data: Any, where: str = "lab") -> LabSection:
        section = j.decode(cls, data, where)
        names = [d.name for d in section.devices]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            j.fail(j.at(where, "devices"), f"device {repeated[0]!r} is listed twice")
        return section

    def names(self) -> list[str]:
        return [d.name for d in self.devices]


def lab_section(value: Any, where: str) -> LabSection:
    """The check of the optional top-level `lab` section (see document.OPTIONAL_SECTIONS)."""
    return LabSection.from_json(value, where or "lab")


@dataclass(frozen=True)
class UnitRecord(j.Record):
    """One unit of a distributed run: what it was, where and how often it ran, and whether it was quiet.

    `quiet` (timing units): no other unit of the run was running on the same host meanwhile;
    `shared_with` names the units that were, when it was not.
    """

    id: str = j.value(j.text)
    kind: str = j.value(j.text)
    label: str = j.value(j.text)
    status: str = j.value(j.one_of(("done", "failed")))
    timing: bool = j.value(j.boolean, default=False)
    worker: str | None = j.value(j.nullable(j.text), default=None)
    host: str | None = j.value(j.nullable(j.text), default=None)
    attempts: int = j.value(j.count, default=1)
    seconds: float = j.value(j.number, default=0.0)
    start_s: float | None = j.value(j.nullable(j.number), default=None)
    quiet: bool | None = j.value(j.nullable(j.boolean), default=None, omit=True)
    shared_with: tuple[str, ...] = j.value(j.texts, default=())
    error: str | None = j.value(j.nullable(j.text), default=None, omit=True)
    extra: dict = j.extra()


@dataclass(frozen=True)
class ClusterSection(j.Record):
    """The `cluster` section: the engine and scheduler, the workers, every unit and how timing was kept quiet."""

    engine: str = j.value(j.text)
    scheduler: str = j.value(j.text)
    workers: tuple[dict, ...] = j.value(j.list_of(j.obj))
    units: tuple[UnitRecord, ...] = j.value(j.list_of(j.record_check(UnitRecord)))
    timing_isolation: str = j.value(j.text)
    seconds: float = j.value(j.number, default=0.0)
    hosts: dict = j.value(j.obj, default={})
    extra: dict = j.extra()

    @property
    def timing_units(self) -> list[UnitRecord]:
        return [u for u in self.units if u.timing]

    def noisy_timing(self) -> list[UnitRecord]:
        """Timing units that were not measured on a quiet host."""
        return [u for u in self.timing_units if u.quiet is False]


def cluster_section(value: Any, where: str) -> ClusterSection:
    """The check of the optional top-level `cluster` section (see document.OPTIONAL_SECTIONS)."""
    return ClusterSection.from_json(value, where or "cluster")
