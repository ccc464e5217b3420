"""A description of the machine and software a run was measured on."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# /proc/cpuinfo flags that decide how 8-bit integer kernels (onnxruntime's, a driver's) compute:
# a label and the flags any one of which means the feature is there.
CPU_FEATURES = {
    "AVX2": ("avx2",),
    "AVX-512": ("avx512f",),
    "VNNI": ("avx512_vnni", "avx_vnni", "avx512vnni"),
    "AMX": ("amx_int8", "amx_tile"),
}


def cpu_flags() -> set[str] | None:
    """The flags of the first processor in /proc/cpuinfo, or None where there is no such file."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("flags", "features"):
                    return set(value.split())
    except OSError:
        return None
    return set()


def cpu_features(flags: set[str] | None = None) -> dict[str, bool] | None:
    """AVX2, AVX-512, VNNI and AMX: present or not (None when the CPU's flags cannot be read)."""
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return None
    return {label: any(f in flags for f in names) for label, names in CPU_FEATURES.items()}


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


PACKAGES = ("click", "numpy", "onnx", "onnxruntime", "pandas", "jinja2", "protobuf", "ml_dtypes")
"""Installed distributions whose versions can change results; `mlts compare` warns when they differ."""


def environment(threads: int | None = None) -> dict:
    import mlts

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    env = {
        "time_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cpu_features": cpu_features(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "numpy": _version("numpy"),
        "onnx": _version("onnx"),
        "onnxruntime": _version("onnxruntime"),
        "mlts": mlts.__version__,
        "packages": {name: _version(name) for name in PACKAGES},
    }
    if threads is not None:
        env["threads"] = threads
    return env
