"""Write a file so that readers see either the old file or the complete new one, never a part."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable


def write_atomic(path: str | os.PathLike[str], chunks: bytes | Iterable[bytes | memoryview]) -> None:
    """Write `chunks` to a temp file beside `path`, fsync, rename over `path`.

    On any failure (including one raised while `chunks` is generated) the
    temp file is removed and `path` is left as it was.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in [chunks] if isinstance(chunks, (bytes, bytearray, memoryview)) else chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            # mkstemp creates 0600; an output file is as readable as any other.
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    """Make the rename durable; some filesystems cannot open directories, which is fine."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
