"""The extension allowlist, enforced by the service with the identity the kernel gives each client.

The runtime's own check (mlts.runtime.allowlist) is advisory: a client chooses its file and could
skip it. The service decides from what it can verify itself (mlts.ipc.peer): the peer's uid and, when
readable, its executable (/proc/PID/exe of the SO_PEERCRED pid). A client's names in the table are

- its executable's path, when the service can read it;
- `mlts` (the bundled tools) when that executable is the Python interpreter the service itself runs
  on, or when it cannot be read but the client runs as the service's own user: a process that hides
  its executable from its own user (non-dumpable, as every mlts client holding shared memory is)
  could run the bundled tools anyway, so the table cannot tell them apart and does not pretend to.

Another user's executable is readable only by root, so a service of an ordinary user knows such a
client by its uid alone and grants it no entry's extensions. Models prepared from a compilation
cache cannot be checked (the service never sees them): a driver that caches extension models must
check its cache token's owner itself.
"""

from __future__ import annotations

import os
import sys

from mlts.hal.errors import invalid
from mlts.hal.extensions import extensions_used
from mlts.hal.types import Model
from mlts.ipc.extension_allowlist import BUNDLED_CLIENT, DEFAULT, Allowlist, load
from mlts.ipc.peer import Peer


class AllowlistPolicy:
    """The service's allowlist and how it names its clients."""

    def __init__(
        self, table: Allowlist = DEFAULT, interpreter: str | None = None, uid: int | None = None
    ) -> None:
        self.table = table
        self.interpreter = interpreter if interpreter is not None else os.path.realpath(sys.executable)
        self.uid = os.geteuid() if uid is None else uid

    @classmethod
    def from_file(cls, path: str | None) -> AllowlistPolicy:
        """The policy of allowlist file `path` (None: the config dir's file, else the built-in default);
        AllowlistError when the file is unreadable or malformed."""
        return cls(load(path))

    def names(self, peer: Peer) -> tuple[str, ...]:
        """The allowlist's names for `peer` (see the module's docstring)."""
        names: list[str] = []
        exe = peer.executable
        if exe is not None:
            names.append(exe)
            if exe == self.interpreter:
                names.append(BUNDLED_CLIENT)
        elif peer.uid == self.uid:
            names.append(BUNDLED_CLIENT)
        return tuple(names)

    def check(self, peer: Peer, model: Model, method: str) -> None:
        """INVALID_ARGUMENT when `model` uses an extension `peer` may not use."""
        used = extensions_used(model)
        if not used:
            return
        names = self.names(peer)
        for name in used:
            if not self.table.allowed(names, name):
                who = names[0] if names else f"uid {peer.uid} (executable not readable)"
                raise invalid(
                    f"{method}: extension {name!r} is not allowed for client {peer.describe()} ({who}) by the "
                    f"service's extensions allowlist ({self.table.source})"
                )
