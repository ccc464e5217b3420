"""The extension allowlist: which clients may use which vendor extensions.

As on Android (/vendor/etc/nnapi_extensions_app_allowlist), one entry per
line names a client: a program path starting with '/' or a package-style name
(the bundled tools are `mlts`). Here an entry may also name the extensions
that client may use, whitespace-separated after it; an entry without any
allows it every extension. '#' starts a comment; blank lines are ignored.

    # client            extensions
    mlts                com.example.mlts.activations
    /opt/vendor/bin/app

The file is `--extensions-allowlist FILE`, else `<config dir>/extensions_allowlist`
when it exists; without either the bundled tools are allowed the bundled
example extension only. The runtime refuses a model that uses an extension
the running client is not allowed (`check_model`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mlts.errors import InputError
from mlts.hal.capabilities_file import config_dir
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.extensions import check_name, extensions_used
from mlts.hal.types import Model

FILE_NAME = "extensions_allowlist"
#: The bundled tools' client name.
BUNDLED_CLIENT = "mlts"
BUNDLED_EXTENSION = "com.example.mlts.activations"
ALL = "*"
_PACKAGE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*")
_MAX_BYTES = 1 << 20


class AllowlistError(InputError):
    """A malformed allowlist file (the message names the file and line)."""


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
        with open(path, "rb") as f:
            data = f.read(_MAX_BYTES + 1)
    except OSError as e:
        raise AllowlistError(f"extensions allowlist {path}: {e.strerror or e}") from None
    if len(data) > _MAX_BYTES:
        raise AllowlistError(f"extensions allowlist {path}: larger than {_MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AllowlistError(f"extensions allowlist {path}: not UTF-8 text") from None
    return parse(text, str(path))


def client_names() -> tuple[str, ...]:
    """Who is running: the bundled tools' name and the program's absolute path."""
    names = [BUNDLED_CLIENT]
    if sys.argv and sys.argv[0]:
        names.append(os.path.abspath(sys.argv[0]))
    return tuple(names)


# The file chosen by --extensions-allowlist for this process (None: the config dir or the default).
_selected: str | None = None


def select_file(path: str | None) -> None:
    """Use `path` for every later check in this process (validated now: AllowlistError if malformed)."""
    global _selected
    if path is not None:
        load(path)
    _selected = path


def check_model(
    model: Model, allowlist: Allowlist | None = None, clients: Iterable[str] | None = None
) -> None:
    """INVALID_ARGUMENT when `model` uses an extension the running client may not use."""
    used = extensions_used(model)
    if not used:
        return
    try:
        table = allowlist if allowlist is not None else load(_selected)
    except AllowlistError as e:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, str(e)) from None
    who = tuple(clients) if clients is not None else client_names()
    for name in used:
        if not table.allowed(who, name):
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT,
                f"extension {name!r} is not allowed for client {who[0]!r} by the extensions allowlist "
                f"({table.source})",
            )
