"""Lab files: a small TOML or JSON list of named driver endpoints that a suite runs on, one after another.

    # lab.toml                              // lab.json
    [[endpoints]]                           {"endpoints": [
    name = "board-a"                          {"name": "board-a", "address": "/run/mlts/a.sock"},
    address = "/run/mlts/a.sock"              {"name": "quant", "driver": "sample-quant",
                                               "options": {"max_memory_mb": "512"}}]}
    [[endpoints]]
    name = "quant"
    driver = "sample-quant"
    options = { max_memory_mb = "512" }

    [[endpoints]]                           // a service on another machine, over TLS
    name = "board-b"
    address = "tcp://board-b:7700"
    tls_ca = "lab-ca.pem"                   // the authority that signed its certificate
    token_file = "board-b.token"            // or tls_cert + tls_key: a client certificate

An endpoint has a `name` (letters, digits, `.`, `_`, `-`; unique), and a `driver` (a driver mlts
starts as a private service wherever the unit runs, with `options` for its factory), an `address`
(a shared service someone runs: a Unix socket path, `unix:PATH`, or `tcp://HOST:PORT` with how to reach
it: `tls_ca`, `tls_cert`, `tls_key`, `token_file`, `insecure`; relative paths are taken from the lab
file's folder), or both (then the service must announce that driver). A JSON file may also be the bare
list. Anything else is a LabError: one line naming the file and the entry.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mlts.errors import InputError
from mlts.hal.files import FileReadError, KiB, read_text
from mlts.ipc.net.address import AddressError, is_network, parse

MAX_LAB_BYTES = 256 * KiB
MAX_ENDPOINTS = 256
#: How an endpoint at a tcp:// address is reached (mlts.ipc.net.address: the query keys they become).
NETWORK_KEYS = {
    "tls_ca": "ca",
    "tls_cert": "cert",
    "tls_key": "key",
    "token_file": "token-file",
    "insecure": "insecure",
}
KEYS = ("name", "driver", "address", "options", *NETWORK_KEYS)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class LabError(InputError):
    """A lab file that cannot be used: one line naming the file and what is wrong."""


@dataclass(frozen=True)
class LabEndpoint:
    """One named endpoint of a lab: a driver to start, a service address to connect to, or both."""

    name: str
    driver: str | None = None
    address: str | None = None  # a Unix socket path (the `unix:` prefix removed) or a tcp:// address
    options: dict[str, str] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        if self.address is not None and is_network(self.address):
            return parse(self.address).transport
        return "unix"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "driver": self.driver,
            "address": self.address,
            "options": dict(self.options),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LabEndpoint:
        """The endpoint a unit carries (already checked by `load_lab` on the machine that read the file)."""
        return cls(
            str(data["name"]), data.get("driver"), data.get("address"), dict(data.get("options") or {})
        )


@dataclass(frozen=True)
class Lab:
    """The endpoints of one lab file, in the file's order."""

    path: str
    endpoints: tuple[LabEndpoint, ...]

    def names(self) -> list[str]:
        return [e.name for e in self.endpoints]


def load_lab(path: str | os.PathLike[str]) -> Lab:
    """The lab in `path` (.toml or .json); LabError for anything that is not a usable lab file."""
    where = os.fspath(path)
    suffix = Path(where).suffix.lower()
    if suffix not in (".toml", ".json"):
        raise LabError(f"--lab {where}: expected a .toml or .json file")
    try:
        text = read_text(where, what="a lab file", limit=MAX_LAB_BYTES)
    except UnicodeDecodeError:
        raise LabError(f"--lab {where}: not UTF-8 text") from None
    except OSError as e:
        raise LabError(f"--lab {_os_error(e, where)}") from None
    try:
        data: Any = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, RecursionError) as e:
        kind = "TOML" if suffix == ".toml" else "JSON"
        raise LabError(f"--lab {where}: not valid {kind}: {' '.join(str(e).split())}") from None
    base = Path(where).resolve().parent
    return Lab(where, tuple(_endpoints(data, where, base)))


def _endpoints(data: Any, where: str, base: Path) -> list[LabEndpoint]:
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"endpoints"})
        if unknown:
            raise LabError(f"--lab {where}: unknown key {unknown[0]!r} (a lab file holds `endpoints`)")
        if "endpoints" not in data:
            raise LabError(f"--lab {where}: no `endpoints` list")
        data = data["endpoints"]
    if not isinstance(data, list):
        raise LabError(f"--lab {where}: `endpoints` must be a list of endpoints")
    if not data:
        raise LabError(f"--lab {where}: `endpoints` is empty; name at least one endpoint")
    if len(data) > MAX_ENDPOINTS:
        raise LabError(f"--lab {where}: {len(data)} endpoints; at most {MAX_ENDPOINTS}")
    out: list[LabEndpoint] = []
    for i, item in enumerate(data):
        endpoint = _endpoint(item, f"--lab {where}: endpoints[{i}]", base)
        if endpoint.name in {e.name for e in out}:
            raise LabError(f"--lab {where}: endpoints[{i}]: name {endpoint.name!r} is used twice")
        out.append(endpoint)
    return out


def _endpoint(item: Any, at: str, base: Path) -> LabEndpoint:
    if not isinstance(item, dict):
        raise LabError(f"{at}: expected a table with name and driver or address")
    unknown = sorted(set(item) - set(KEYS))
    if unknown:
        raise LabError(f"{at}: unknown key {unknown[0]!r}; an endpoint has {', '.join(KEYS)}")
    name = item.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise LabError(
            f"{at}: name {name!r}: expected 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    at = f"{at} ({name})"
    driver = item.get("driver")
    if driver is not None and (not isinstance(driver, str) or not driver.strip()):
        raise LabError(f"{at}: driver must be a driver's name (see `mlts devices`), got {driver!r}")
    address = item.get("address")
    network = {k: item[k] for k in NETWORK_KEYS if k in item}
    if address is not None:
        address = _address(address, at, base, network)
    elif network:
        raise LabError(f"{at}: {next(iter(network))} goes with a tcp:// address")
    if driver is None and address is None:
        raise LabError(f"{at}: give a driver to start, an address of a running service, or both")
    options = _options(item.get("options", {}), at)
    if options and address is not None:
        raise LabError(
            f"{at}: options configure a driver mlts starts; the service at {address} was started by "
            "someone else (give its options to `mlts driver serve`)"
        )
    return LabEndpoint(name, driver, address, options)


def _address(value: Any, at: str, base: Path, network: dict[str, Any]) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LabError(f"{at}: address must be a Unix socket path or tcp://HOST:PORT, got {value!r}")
    if is_network(value):
        try:
            where = parse(value, base=str(base))
        except AddressError as e:
            raise LabError(f"{at}: {e}") from None
        fields: dict[str, Any] = {}
        for key, value_ in network.items():
            if key == "insecure":
                if not isinstance(value_, bool):
                    raise LabError(f"{at}: insecure must be true or false, got {value_!r}")
                fields["insecure"] = value_
                continue
            if not isinstance(value_, str) or not value_:
                raise LabError(f"{at}: {key} must be a file name, got {value_!r}")
            fields[NETWORK_KEYS[key].replace("-", "_")] = (
                value_ if os.path.isabs(value_) else str(base / value_)
            )
        return str(replace(where, **fields))
    if network:
        raise LabError(f"{at}: {next(iter(network))} goes with a tcp:// address, not {value!r}")
    if "://" in value:
        scheme = value.split("://", 1)[0]
        raise LabError(
            f"{at}: address {value!r}: {scheme}:// is not a transport of mlts; give a Unix socket path or "
            "tcp://HOST:PORT"
        )
    path = value[len("unix:") :] if value.startswith("unix:") else value
    if not path or "\0" in path:
        raise LabError(f"{at}: address {value!r} is not a socket path")
    return str(base / path) if not os.path.isabs(path) else path


def _options(value: Any, at: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise LabError(f"{at}: options must be a table of KEY = VALUE")
    out: dict[str, str] = {}
    for key, v in value.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise LabError(f"{at}: option name {key!r} is not an identifier")
        if isinstance(v, bool):
            v = "1" if v else "0"
        elif isinstance(v, (int, float)):
            v = str(v)
        if not isinstance(v, str):
            raise LabError(f"{at}: option {key}: expected a string or number, got {type(v).__name__}")
        out[key] = v
    return out


def _os_error(e: OSError, where: str) -> str:
    return str(e) if isinstance(e, FileReadError) else f"{where}: {e.strerror or e}"
