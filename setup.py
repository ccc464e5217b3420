"""Build step for the sample driver's compiled kernels (everything else is in pyproject.toml).

The kernels are optional: without a C compiler the install still succeeds and the driver runs its
NumPy kernels. The source's SHA-256 is compiled in, so a build older than its source is not used.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = Path("driver/native/kernels.c")
DIGEST = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
# The fused LSTM cell (driver/ops/_lstm_native.py checks its own digest).
LSTM_SOURCE = Path("driver/native/lstm_kernels.c")
LSTM_DIGEST = hashlib.sha256(LSTM_SOURCE.read_bytes()).hexdigest()
# The 8-bit VNNI GEMM (driver/ops/_qgemm.py checks its own digest).
QGEMM_SOURCE = Path("driver/native/qgemm_kernels.c")
QGEMM_DIGEST = hashlib.sha256(QGEMM_SOURCE.read_bytes()).hexdigest()

setup(
    ext_modules=[
        Extension(
            "driver.native._kernels",
            [str(SOURCE), str(LSTM_SOURCE), str(QGEMM_SOURCE)],
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
