"""The extension allowlist file: which clients may use which vendor extensions.

As on Android (/vendor/etc/nnapi_extensions_app_allowlist), one entry per
line names a client: a program path starting with '/' or a package-style name
(the bundled tools are `mlts`). Here an entry may also name the extensions
that client may use, whitespace-separated after it; an entry without any
allows it every extension. '#' starts a comment; blank lines are ignored.

    # client            extensions
    mlts                com.example.mlts.activations
    /opt/vendor/bin/app

Without a file the bundled tools are allowed the bundled example extension
only (`DEFAULT`). The file is read with every check made first: it must be a
regular file (a FIFO, a device or a directory is refused at once, never read)
of at most 1 MiB of UTF-8 text.

The driver service enforces the table (mlts.ipc.service.allowlist_policy) with
the identity the kernel gives it for each client; the client runtime checks it
too, as an early and friendly error (mlts.runtime.allowlist).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mlts.errors import InputError
from mlts.hal import files
from mlts.hal.capabilities_file import config_dir
from mlts.hal.extensions import check_name

FILE_NAME = "extensions_allowlist"
#: The bundled tools' client name.
BUNDLED_CLIENT = "mlts"
BUNDLED_EXTENSION = "com.example.mlts.activations"
ALL = "*"
_PACKAGE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*")
_MAX_BYTES = 1 << 20


class AllowlistError(InputError):
    """A malformed or unreadable allowlist file (the message names the file and line)."""


@dataclass(frozen=True)
class Allowlist:
    """client -> the extensions it may use (ALL for every one), and where the table came from."""

    entries: dict[str, frozenset[str]]
    source: str  # a file path, or "built-in default"

    def allowed(self, clients: Iterable[str], extension: str) -> bool:
        for client in clients:
            names = self.entries.get(client)
            if names is not None and (ALL in names or extension in names):
                return True
        return False


DEFAULT = Allowlist({BUNDLED_CLIENT: frozenset({BUNDLED_EXTENSION})}, "built-in default")


def parse(text: str, source: str) -> Allowlist:
    """The allowlist in `text`; AllowlistError naming `source` and the line for anything malformed."""
    entries: dict[str, set[str]] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        client, *names = line.split()
        if not (client.startswith("/") or _PACKAGE.fullmatch(client)):
            raise AllowlistError(
                f"{source}:{n}: {client!r} is neither a program path starting with '/' nor a package name"
            )
        for name in names:
            try:
                check_name(name)
            except ValueError as e:
                raise AllowlistError(f"{source}:{n}: {e}") from None
        entries.setdefault(client, set()).update(names or [ALL])
    return Allowlist({c: frozenset(v) for c, v in entries.items()}, source)


def default_path() -> Path:
    return config_dir() / FILE_NAME


def load(path: str | os.PathLike[str] | None = None) -> Allowlist:
    """The allowlist from `path`, else from the config dir when the file exists, else DEFAULT."""
    if path is None:
        candidate = default_path()
        if not candidate.exists():
            return DEFAULT
        path = candidate
    path = Path(path).expanduser()
    try:
        # A regular file of bounded size only: a FIFO must not block us, /dev/zero must not be read for ever.
        fd, _ = files.open_regular(path, what="the file", limit=_MAX_BYTES)
        with os.fdopen(fd, "rb") as f:
            data = f.read(_MAX_BYTES + 1)
    except files.FileReadError as e:
        raise AllowlistError(f"extensions allowlist {path}: {e.strerror}") from None
    except OSError as e:
        raise AllowlistError(f"extensions allowlist {path}: {e.strerror or e}") from None
    if len(data) > _MAX_BYTES:
        raise AllowlistError(f"extensions allowlist {path}: larger than {_MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AllowlistError(f"extensions allowlist {path}: not UTF-8 text") from None
    return parse(text, str(path))
