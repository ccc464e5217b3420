"""Build step for the sample driver's compiled kernels (everything else is in pyproject.toml).

The kernels are optional: without a C compiler the install still succeeds and the driver runs its
NumPy kernels. One library is built from every C source of driver/native; the digest of all of them
and of the headers beside them (driver.native.source_digest computes the same) is compiled in, so a
build older than any of its sources is not used.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from setuptools import Extension, setup

FOLDER = Path("driver/native")
SOURCES = sorted(FOLDER.glob("*.c"))
HEADERS = sorted(FOLDER.glob("*.h"))


def source_digest() -> str:
    """SHA-256 of each source and then each header, by name: name, NUL, length, NUL, bytes
    (driver.native.source_digest)."""
    digest = hashlib.sha256()
    for path in [*SOURCES, *HEADERS]:
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


setup(
    ext_modules=[
        Extension(
            "driver.native._kernels",
            [str(s) for s in SOURCES],
            depends=[str(h) for h in HEADERS],
            define_macros=[("MK_SOURCE_HASH", f'"{source_digest()}"')],
            extra_compile_args=["-O3", "-march=native", "-fopenmp", "-fwrapv", "-std=gnu11"],
            extra_link_args=["-fopenmp"],
            optional=True,
        )
    ]
)
