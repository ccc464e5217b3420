"""Bearer tokens: the files that hold them and their constant-time check.

A token file holds one token per line, `SECRET` or `ID SECRET` (blank lines and `#` comments are
skipped). The service accepts any token of its file and knows the client by the token's ID (a bare
secret's ID is `sha256:` and the first 12 hex digits of its hash, safe to log); a client sends the
first token of its file. A secret has at least 16 characters and no white space. Neither side reads a
token file that its group or others may read, or that is not a regular file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
from dataclasses import dataclass

from mlts.errors import InputError
from mlts.hal.files import KiB, describe_mode

MAX_TOKEN_FILE_BYTES = 64 * KiB
MIN_SECRET_CHARS = 16
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}")


class TokenFileError(InputError):
    """A token file that cannot be used: one line naming it."""


@dataclass(frozen=True)
class Token:
    id: str
    secret: bytes

    def __repr__(self) -> str:  # never print a secret
        return f"Token({self.id!r})"


def token_id(secret: bytes) -> str:
    return "sha256:" + hashlib.sha256(secret).hexdigest()[:12]


def read_tokens(path: str, option: str = "--token-file") -> list[Token]:
    """Every token of the file at `path`; TokenFileError when it is unsafe or malformed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as e:
        raise TokenFileError(f"{option} {path}: {e.strerror or e}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"{option} {path} is {describe_mode(info.st_mode)}, not a regular file")
        if info.st_mode & 0o077:
            raise TokenFileError(
                f"{option} {path} may be read by its group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
                f"make it yours alone: chmod 600 {path}"
            )
        if info.st_size > MAX_TOKEN_FILE_BYTES:
            raise TokenFileError(f"{option} {path} has {info.st_size} bytes; at most {MAX_TOKEN_FILE_BYTES}")
        data = os.read(fd, MAX_TOKEN_FILE_BYTES + 1)
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TokenFileError(f"{option} {path} is not UTF-8 text") from None
    tokens: list[Token] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) > 2:
            raise TokenFileError(f"{option} {path}:{number}: expected SECRET or ID SECRET")
        secret = fields[-1].encode("utf-8")
        if len(fields[-1]) < MIN_SECRET_CHARS:
            raise TokenFileError(
                f"{option} {path}:{number}: a secret needs at least {MIN_SECRET_CHARS} characters "
                "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        ident = fields[0] if len(fields) == 2 else token_id(secret)
        if not _ID.fullmatch(ident):
            raise TokenFileError(
                f"{option} {path}:{number}: token ID {ident!r} is not 1-64 letters and digits"
            )
        if any(t.id == ident for t in tokens) or any(hmac.compare_digest(t.secret, secret) for t in tokens):
            raise TokenFileError(f"{option} {path}:{number}: token {ident!r} is given twice")
        tokens.append(Token(ident, secret))
    if not tokens:
        raise TokenFileError(f"{option} {path} holds no token")
    return tokens


def client_secret(path: str) -> str:
    """The secret a client sends: the first token of its file."""
    return read_tokens(path).pop(0).secret.decode("utf-8")


def match(tokens: list[Token], presented: object) -> Token | None:
    """The token `presented` equals, compared in constant time with every token (None: no match)."""
    if not isinstance(presented, str) or len(presented) > 1024:
        return None
    given = presented.encode("utf-8", "replace")
    found = None
    for token in tokens:
        # Every token is compared, so the time taken says nothing about which one (or none) matched.
        if hmac.compare_digest(token.secret, given):
            found = token
    return found
