"""Build step for the sample driver's compiled kernels (everything else is in pyproject.toml).

The kernels are optional: without a C compiler the install still succeeds and the driver runs its
NumPy kernels. Each source's digest (SHA-256 of the source and then of every header beside it, as
driver.native.source_digest computes it) is compiled in, so a build older than its sources is not used.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from setuptools import Extension, setup

HEADERS = sorted(Path("driver/native").glob("*.h"))


def source_digest(source: Path) -> str:
    """SHA-256 of `source` followed by every header beside it (driver.native.source_digest)."""
    digest = hashlib.sha256(source.read_bytes())
    for header in HEADERS:
        digest.update(header.read_bytes())
    return digest.hexdigest()


SOURCE = Path("driver/native/kernels.c")
DIGEST = source_digest(SOURCE)
# The fused LSTM cell (driver/ops/_lstm_native.py checks its own digest).
LSTM_SOURCE = Path("driver/native/lstm_kernels.c")
LSTM_DIGEST = source_digest(LSTM_SOURCE)
# The 8-bit VNNI GEMM (driver/ops/_qgemm.py checks its own digest).
QGEMM_SOURCE = Path("driver/native/qgemm_kernels.c")
QGEMM_DIGEST = source_digest(QGEMM_SOURCE)

setup(
    ext_modules=[
        Extension(
            "driver.native._kernels",
            [str(SOURCE), str(LSTM_SOURCE), str(QGEMM_SOURCE)],
            depends=[str(h) for h in HEADERS],
            define_macros=[
                ("MK_SOURCE_HASH", f'"{DIGEST}"'),
                ("MK_LSTM_SOURCE_HASH", f'"{LSTM_DIGEST}"'),
                ("MK_QGEMM_SOURCE_HASH", f'"{QGEMM_DIGEST}"'),
            ],
            extra_compile_args=["-O3", "-march=native", "-fopenmp", "-fwrapv", "-std=gnu11"],
            extra_link_args=["-fopenmp"],
            optional=True,
        )
    ]
)
