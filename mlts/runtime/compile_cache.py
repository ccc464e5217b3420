"""Compilation caching on the client side: cache tokens, cache files per (device, token), NNAPI's prepare flow.

As the NNAPI runtime does, `CompilationCache.prepare` first offers the driver
the cache files of the model's token (when they exist and are not empty)
through prepareModelFromCache; when the driver rejects them, or there are
none, it compiles with prepareModel and hands the driver fresh, truncated
files to save into. A driver that needs no cache files just compiles.

The token is a SHA-256 over the model's encoding and the device's identity,
so the same model on the same driver (name and version) maps to the same
files, and any change of either maps elsewhere. The files of one directory
are meant for one process at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from mlts.hal.codec import model_to_dict
from mlts.hal.enums import ErrorStatus, ExecutionPreference, Priority
from mlts.hal.errors import HalError
from mlts.hal.interface import Device, PreparedModel
from mlts.hal.types import CacheFilesNeeded, Model

TOKEN_DOMAIN = b"mlts compilation cache token 1\0"
HIT, MISS, RECOMPILED, UNCACHED = "hit", "miss", "recompiled", "uncached"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _length_prefixed(h: hashlib._Hash, data: bytes | memoryview) -> None:
    view = memoryview(data)
    view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    h.update(view.nbytes.to_bytes(8, "little"))
    h.update(view)


def cache_token(model: Model, device_name: str, version: str) -> bytes:
    """The 32-byte cache token of `model` on device `device_name` at driver `version`.

    SHA-256 over a domain string, then each of: the device name, the version, the model's structure
    (canonical JSON of `mlts.hal.codec.model_to_dict`), its operand values and every pool's bytes,
    each preceded by its length (8 bytes, little endian) so no two inputs share a digest by shifting
    bytes between fields.
    """
    h = hashlib.sha256(TOKEN_DOMAIN)
    _length_prefixed(h, device_name.encode("utf-8"))
    _length_prefixed(h, version.encode("utf-8"))
    structure = json.dumps(model_to_dict(model), sort_keys=True, separators=(",", ":"), allow_nan=False)
    _length_prefixed(h, structure.encode("utf-8"))
    _length_prefixed(h, model.operand_values)
    for pool in model.pools:
        _length_prefixed(h, pool.buffer)
    return h.digest()


@dataclass(frozen=True, slots=True)
class CacheFiles:
    """The model and data cache files of one (device, token)."""

    model: tuple[Path, ...]
    data: tuple[Path, ...]

    @property
    def paths(self) -> tuple[Path, ...]:
        return self.model + self.data

    def usable(self) -> bool:
        """Every file exists and holds something (a driver may have saved into them)."""
        try:
            return bool(self.paths) and all(p.stat().st_size > 0 for p in self.paths)
        except OSError:
            return False

    def size_bytes(self) -> int:
        """The files' total size (missing files count 0)."""
        return sum(p.stat().st_size for p in self.paths if p.exists())


def open_files(paths: tuple[Path, ...], *, fresh: bool) -> list[int]:
    """Open `paths` read-only, or (`fresh`) created or truncated for writing; all or none stay open."""
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC if fresh else os.O_RDONLY
    fds: list[int] = []
    try:
        for path in paths:
            fds.append(os.open(path, flags | os.O_CLOEXEC, 0o600))
    except BaseException:
        close_files(fds)
        raise
    return fds


def close_files(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class CompilationCache:
    """Cache files under `directory`, one subdirectory per device; `prepare` compiles through them.

    `last_reason` says why the last `prepare` did not use the cache: the driver's rejection of
    the files ("recompiled") or why no cache files could be used ("uncached"); None otherwise.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.last_reason: str | None = None

    def files(self, device_name: str, token: bytes, needed: CacheFilesNeeded) -> CacheFiles:
        """The file paths of (device, token): as many model and data files as the device needs."""
        base = self.directory / (_UNSAFE.sub("_", device_name) or "_")
        stem = token.hex()
        return CacheFiles(
            tuple(base / f"{stem}.model{i}" for i in range(needed.num_model_cache)),
            tuple(base / f"{stem}.data{i}" for i in range(needed.num_data_cache)),
        )

    def prepare(
        self,
        device: Device,
        model: Model,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        deadline: int | None = None,
    ) -> tuple[PreparedModel, str]:
        """The prepared model and how: "hit", "miss", "recompiled" or "uncached" (see the module docstring).

        `deadline` (CLOCK_MONOTONIC ns) goes with every preparation it makes, from the cache or not."""
        self.last_reason = None
        needed = device.getNumberOfCacheFilesNeeded()
        if needed.num_model_cache == 0 and needed.num_data_cache == 0:
            return device.prepareModel(model, preference, priority, deadline), UNCACHED
        token = cache_token(model, device.name, device.getVersionString())
        files = self.files(device.name, token, needed)
        rejected = None
        if files.usable():
            prepared, rejected = self._from_cache(device, files, token, deadline)
            if prepared is not None:
                return prepared, HIT
        try:
            files.paths[0].parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fds = open_files(files.paths, fresh=True)
        except OSError as e:
            self.last_reason = f"cannot use the cache files in {self.directory}: {e}"
            return device.prepareModel(model, preference, priority, deadline), UNCACHED
        try:
            n = len(files.model)
            prepared = device.prepareModel(model, preference, priority, deadline, fds[:n], fds[n:], token)
        finally:
            close_files(fds)
        self.last_reason = rejected
        return prepared, MISS if rejected is None else RECOMPILED

    def _from_cache(
        self, device: Device, files: CacheFiles, token: bytes, deadline: int | None = None
    ) -> tuple[PreparedModel | None, str]:
        """The model prepared from the files, or None and why the driver (or the file system) refused."""
        try:
            fds = open_files(files.paths, fresh=False)
        except OSError as e:
            return None, f"cannot open the cache files: {e}"
        try:
            n = len(files.model)
            return device.prepareModelFromCache(fds[:n], fds[n:], token, deadline), ""
        except HalError as e:
            # A missed deadline is not the cache's fault, and a fresh compile would only miss it too.
            if e.status in (
                ErrorStatus.DEVICE_UNAVAILABLE,
                ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                ErrorStatus.MISSED_DEADLINE_PERSISTENT,
            ):
                raise
            return None, str(e)
        finally:
            close_files(fds)
