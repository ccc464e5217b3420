"""Where a shared service's socket may live: a folder nobody else can write to.

Whoever can write to the socket's folder can remove the socket and bind their own in its place, and
whoever creates a path first owns it. So a service listens only in a folder that

- is a real directory (not a symbolic link) owned by the service's user and writable by nobody else
  (no group or other write permission), and
- has only ancestors that are owned by that user or root and are not writable by others, unless
  they carry the sticky bit (as /tmp does: others may create entries there but not remove or rename
  ours).

`secure_folder` creates the default folder (mode 0700) and checks it afterwards, so a folder another
user created first under the same name (in /tmp, say) is refused, never used. Clients check the
other side as well: mlts.runtime.shared refuses a service that runs as another user (SO_PEERCRED).
"""

from __future__ import annotations

import os
import stat

from mlts.errors import EXIT_BAD_INPUT, MltsError


class UnsafeFolderError(MltsError, OSError):
    """A socket folder (or one of its parents) that another user could write to or does not belong to us."""

    exit_status = EXIT_BAD_INPUT

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unsafe socket folder"


def default_socket_path(name: str) -> str:
    """$XDG_RUNTIME_DIR/mlts/NAME.sock, or <temp dir>/mlts-UID/NAME.sock."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    folder = os.path.join(base, "mlts") if base else os.path.join("/tmp", f"mlts-{os.geteuid()}")
    return os.path.join(folder, f"{name}.sock")


def _owner(uid: int) -> str:
    return "root" if uid == 0 else f"uid {uid}"


def check_folder(folder: str, private: bool = False) -> None:
    """UnsafeFolderError unless `folder` and its ancestors are safe for a socket of this user (see above);
    `private`: the folder must also be closed to everyone else (no group or other permission at all)."""
    me = os.geteuid()
    path = os.path.abspath(folder)
    try:
        info = os.lstat(path)
    except OSError as e:
        raise UnsafeFolderError(f"socket folder {path}: {e.strerror or e}") from None
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeFolderError(f"socket folder {path} is a symbolic link; name the real folder")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeFolderError(f"socket folder {path} is not a directory")
    if info.st_uid != me:
        raise UnsafeFolderError(
            f"socket folder {path} belongs to {_owner(info.st_uid)}, not to this user (uid {me}): its owner "
            "could replace the socket; use a folder of your own"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeFolderError(
            f"socket folder {path} is writable by others (mode {stat.S_IMODE(info.st_mode):04o}): they could "
            "replace the socket; use a folder only you can write (chmod go-w, or mode 0700)"
        )
    if private and info.st_mode & 0o077:
        raise UnsafeFolderError(
            f"socket folder {path} has mode {stat.S_IMODE(info.st_mode):04o}, expected 0700 (this user only); "
            "remove it or chmod 700 it if it is yours"
        )
    parent = os.path.dirname(path)
    while True:
        info = os.stat(parent)
        if info.st_uid not in (me, 0):
            raise UnsafeFolderError(
                f"{parent}, a parent of the socket folder {path}, belongs to {_owner(info.st_uid)}: its owner "
                "could move the folder away"
            )
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            raise UnsafeFolderError(
                f"{parent}, a parent of the socket folder {path}, is writable by others without the sticky "
                f"bit (mode {stat.S_IMODE(info.st_mode):04o}): they could move the folder away"
            )
        up = os.path.dirname(parent)
        if up == parent:
            return
        parent = up


def secure_folder(folder: str) -> str:
    """Create `folder` (mode 0700; its parents as needed) unless it exists, then check it (ours, mode 0700,
    safe parents: `check_folder(private=True)`); returns its absolute path. A folder someone else made
    first under this name is refused, never used."""
    path = os.path.abspath(folder)
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, mode=0o700, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise UnsafeFolderError(f"cannot create the socket folder {path}: {e.strerror or e}") from None
    check_folder(path, private=True)
    return path
