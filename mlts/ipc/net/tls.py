"""TLS settings of both ends (the standard library's ssl): TLS 1.2 at least, certificates checked.

The service presents its certificate (`--tls-cert`, `--tls-key`) and, with `--tls-client-ca`, asks
every client for a certificate signed by that authority. A client checks the service's certificate
against `--tls-ca` (else the system's store) and the host name of the address it dialled, and
presents its own certificate when it has one.
"""

from __future__ import annotations

import ssl
from typing import Any

from mlts.errors import InputError

_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "emailAddress": "emailAddress",
}


class TlsSetupError(InputError):
    """A certificate, key or authority file that cannot be used (one line)."""


def _load(what: str, action: Any) -> None:
    try:
        action()
    except FileNotFoundError as e:
        raise TlsSetupError(f"{what}: no such file: {e.filename}") from None
    except ssl.SSLError as e:
        raise TlsSetupError(f"{what}: cannot be used: {e.reason or e}") from None
    except (OSError, ValueError) as e:
        text = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise TlsSetupError(f"{what}: cannot be used: {' '.join(text.split())}") from None


def server_context(cert: str, key: str | None, client_ca: str | None = None) -> ssl.SSLContext:
    """The service's context: its certificate chain, and client certificates required with `client_ca`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.num_tickets = 0  # nothing is resumed; a connection is one client
    _load(f"--tls-cert {cert} / --tls-key {key or cert}", lambda: ctx.load_cert_chain(cert, key))
    if client_ca is not None:
        _load(f"--tls-client-ca {client_ca}", lambda: ctx.load_verify_locations(cafile=client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(ca: str | None, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """A client's context: the service's certificate checked against `ca` (None: the system's store)
    and the host name; the client's own certificate when `cert` is given."""
    if ca is None:
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        except ssl.SSLError as e:
            raise TlsSetupError(f"cannot read the system's certificate store: {e}") from None
    else:
        # Only the named authority: the system's store is not consulted.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        _load(f"--tls-ca {ca}", lambda: ctx.load_verify_locations(cafile=ca))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        _load(f"--tls-cert {cert} / --tls-key {key or cert}", lambda: ctx.load_cert_chain(cert, key))
    elif key is not None:
        raise TlsSetupError(f"--tls-key {key} needs --tls-cert")
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def subject_of(cert: dict[str, Any] | None) -> str | None:
    """'CN=board-a,O=lab' of a peer certificate as ssl's getpeercert() gives it (None without one)."""
    if not cert:
        return None
    parts = []
    for rdn in cert.get("subject", ()):
        for name, value in rdn:
            parts.append(f"{_SHORT.get(name, name)}={value}")
    return ",".join(parts) or None
