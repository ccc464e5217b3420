"""The client side of the extension allowlist: an early, friendly refusal of a model the client may not use.

The table and its file format are mlts.ipc.extension_allowlist. The driver
service enforces it with the identity the kernel gives it for each client
(its executable and uid); this check runs in the client before a model is
sent, so the refusal comes at once and names the allowlist. The file is
`--extensions-allowlist FILE`, else `<config dir>/extensions_allowlist` when
it exists; without either the bundled tools are allowed the bundled example
extension only. A private driver service started by this process uses the
same file (mlts.runtime.process).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.extensions import extensions_used
from mlts.hal.types import Model
from mlts.ipc.extension_allowlist import (  # noqa: F401  (this module's public names, as before)
    ALL,
    BUNDLED_CLIENT,
    BUNDLED_EXTENSION,
    DEFAULT,
    FILE_NAME,
    Allowlist,
    AllowlistError,
    default_path,
    load,
    parse,
)


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


def selected_file() -> str | None:
    """The file chosen with `select_file` (None: the config dir's file or the built-in default)."""
    return _selected


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
