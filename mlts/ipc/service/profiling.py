"""MLTS_SERVICE_PROFILE: a service thread's work under cProfile, its statistics written when it ends."""

from __future__ import annotations

import cProfile
import os
from collections.abc import Callable

ENV = "MLTS_SERVICE_PROFILE"


def run_profiled(name: str, work: Callable[[], None]) -> None:
    """Run `work()`; with MLTS_SERVICE_PROFILE=PREFIX in the environment, under cProfile, writing the
    statistics to PREFIX.PID.NAME when it returns or raises (read them with `pstats`)."""
    prefix = os.environ.get(ENV)
    if not prefix:
        work()
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        work()
    finally:
        profile.disable()
        profile.dump_stats(f"{prefix}.{os.getpid()}.{name}")
