"""Network addresses of driver services: `tcp://HOST:PORT`, with how to reach them securely.

    tcp://board-a:7700                                  TLS, the server checked against the system store
    tcp://board-a:7700?ca=lab-ca.pem&token-file=tok    TLS, checked against lab-ca.pem; a bearer token
    tcp://board-a:7700?ca=ca.pem&cert=me.pem&key=me.key TLS with a client certificate
    tcp://127.0.0.1:7700?insecure=1                     plaintext (loopback only)

HOST is a name, an IPv4 address or an IPv6 address in brackets. The query names files on the machine
that connects (so a results row records the address without it). Options a command takes
(`--tls-ca`, `--tls-cert`, `--tls-key`, `--token-file`, `--insecure`) fill in what an address leaves
out (`with_defaults`). Anything malformed is an AddressError: one line naming the address.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, quote, urlencode

from mlts.errors import InputError

SCHEME = "tcp://"
#: Query keys of a client address and the fields they set.
_QUERY = {"ca": "ca", "cert": "cert", "key": "key", "token-file": "token_file", "insecure": "insecure"}
_TRUE = ("1", "true", "yes")
_FALSE = ("0", "false", "no")


class AddressError(InputError):
    """A network address that cannot be used (one line naming it)."""


def is_network(address: str | os.PathLike[str]) -> bool:
    """Whether `address` names a network service (`tcp://...`) rather than a Unix socket path."""
    return isinstance(address, str) and address.lower().startswith(SCHEME)


@dataclass(frozen=True)
class NetAddress:
    """A parsed `tcp://HOST:PORT[?...]` address and the client's security settings for it."""

    host: str
    port: int
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    token_file: str | None = None
    insecure: bool = False

    @property
    def tls(self) -> bool:
        return not self.insecure

    @property
    def transport(self) -> str:
        """How results rows name it: "tcp+tls", or "tcp" for plaintext."""
        return "tcp+tls" if self.tls else "tcp"

    @property
    def hostport(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def plain(self) -> str:
        """`tcp://HOST:PORT`: where the service is, without this machine's settings."""
        return f"{SCHEME}{self.hostport}"

    def __str__(self) -> str:
        query = {
            k: getattr(self, field)
            for k, field in _QUERY.items()
            if field != "insecure" and getattr(self, field) is not None
        }
        if self.insecure:
            query["insecure"] = "1"
        return self.plain + (f"?{urlencode(query, quote_via=quote, safe='/')}" if query else "")

    def is_loopback(self) -> bool:
        """Whether HOST is this machine's loopback (127.0.0.0/8, ::1 or the name localhost)."""
        return is_loopback_host(self.host)

    def with_defaults(self, defaults: ClientDefaults | None) -> NetAddress:
        """This address with the settings it leaves out taken from `defaults`."""
        if defaults is None:
            return self
        return replace(
            self,
            ca=self.ca or defaults.ca,
            cert=self.cert or defaults.cert,
            key=self.key or defaults.key,
            token_file=self.token_file or defaults.token_file,
            insecure=self.insecure or defaults.insecure,
        )


@dataclass(frozen=True)
class ClientDefaults:
    """What a command's `--tls-ca`, `--tls-cert`, `--tls-key`, `--token-file` and `--insecure` say."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    token_file: str | None = None
    insecure: bool = False

    def any(self) -> bool:
        return bool(self.ca or self.cert or self.key or self.token_file or self.insecure)


def is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse(address: str, *, listen: bool = False, base: str | None = None) -> NetAddress:
    """The NetAddress of `address`; AddressError when it is not `tcp://HOST:PORT[?...]`.

    `listen`: an address to listen on (port 0 lets the system choose; no query). `base`: the folder
    relative file names in the query are taken from (a lab file's); else they stay as given.
    """
    if not is_network(address):
        raise AddressError(f"{address!r} is not a network address; expected tcp://HOST:PORT")
    rest = address[len(SCHEME) :]
    where, sep, query = rest.partition("?")
    if "/" in where or "@" in where or "#" in where:
        raise AddressError(f"{address}: expected tcp://HOST:PORT (no user, path or fragment)")
    if where.startswith("["):
        host, bracket, tail = where[1:].partition("]")
        if not bracket or not tail.startswith(":"):
            raise AddressError(f"{address}: an IPv6 address is written [ADDRESS]:PORT")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise AddressError(f"{address}: {host!r} is not an IPv6 address") from None
        port_text = tail[1:]
    else:
        host, colon, port_text = where.rpartition(":")
        if not colon or not host:
            raise AddressError(f"{address}: expected tcp://HOST:PORT (a port is needed)")
        if ":" in host:
            raise AddressError(f"{address}: write an IPv6 address in brackets, tcp://[ADDRESS]:PORT")
    if not host or any(c.isspace() for c in host) or "\0" in host:
        raise AddressError(f"{address}: {host!r} is not a host name or address")
    if not port_text.isdigit() or not (0 if listen else 1) <= int(port_text) <= 65535:
        low = 0 if listen else 1
        raise AddressError(f"{address}: port {port_text!r} must be a number in {low}..65535")
    parsed = NetAddress(host, int(port_text))
    if not sep:
        return parsed
    if listen:
        raise AddressError(f"{address}: a listening address takes no options; give them to the command")
    fields: dict[str, object] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise AddressError(f"{address}: the options after '?' are not KEY=VALUE&KEY=VALUE") from None
    for key, value in pairs:
        field = _QUERY.get(key)
        if field is None:
            raise AddressError(f"{address}: unknown option {key!r}; known: {', '.join(_QUERY)}")
        if field in fields:
            raise AddressError(f"{address}: option {key!r} is given twice")
        if field == "insecure":
            if value.lower() not in _TRUE + _FALSE:
                raise AddressError(f"{address}: insecure={value!r} must be 1 or 0")
            fields[field] = value.lower() in _TRUE
            continue
        if not value:
            raise AddressError(f"{address}: option {key!r} needs a file name")
        if base is not None and not os.path.isabs(value):
            value = os.path.join(base, value)
        fields[field] = value
    return replace(parsed, **fields)  # type: ignore[arg-type]


def resolve(address: NetAddress, *, listen: bool = False) -> list[tuple]:
    """getaddrinfo of the address (TCP); AddressError when the name does not resolve."""
    try:
        return socket.getaddrinfo(
            address.host,
            address.port,
            type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE if listen else 0,
        )
    except (socket.gaierror, UnicodeError) as e:
        raise AddressError(f"{address.plain}: cannot resolve {address.host!r}: {e}") from None


#: What this process's command said with --tls-ca, --tls-cert, --tls-key, --token-file, --insecure.
_defaults = ClientDefaults()


def set_client_defaults(defaults: ClientDefaults) -> None:
    """Set the settings every network address of this process leaves out (a command's options)."""
    global _defaults
    _defaults = defaults


def client_defaults() -> ClientDefaults:
    return _defaults


def complete(address: str) -> str:
    """`address` with the command's settings filled in (a Unix socket path is returned unchanged), so
    whoever the address is handed to (a child process, a cluster worker) reaches the service the same way."""
    if not is_network(address):
        return address
    return str(parse(address).with_defaults(_defaults))
