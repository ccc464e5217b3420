"""The per-user cache shared by the model zoo and the datasets, and its locked, atomic build step.

Root: $MLTS_CACHE_DIR, else $XDG_CACHE_HOME/mlts, else ~/.cache/mlts. A cached
file is built at most once at a time across processes (an fcntl lock file
beside it), written atomically (temporary file + os.replace), and rebuilt
when it fails its validity check, so a corrupt or truncated file is never
served.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mlts.hal.atomic import write_atomic


def cache_root() -> Path:
    """<$MLTS_CACHE_DIR | $XDG_CACHE_HOME/mlts | ~/.cache/mlts>."""
    root = os.environ.get("MLTS_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "mlts") if xdg else os.path.join(Path.home(), ".cache", "mlts")
    return Path(root)


@contextmanager
def build_lock(path: Path) -> Iterator[None]:
    """Held while `path` (a file or a folder of files) is built: one builder at a time across processes.

    The lock is an fcntl lock on `<path>.lock` beside it (the parent folder is created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached_file(path: Path, is_valid: Callable[[Path], bool], build: Callable[[], bytes]) -> Path:
    """`path`, built by `build()` first when it is missing or fails `is_valid`."""
    if path.is_file() and is_valid(path):
        return path
    with build_lock(path):
        # Another process may have finished the build while this one waited for the lock.
        if not (path.is_file() and is_valid(path)):
            write_atomic(path, build())
    return path
