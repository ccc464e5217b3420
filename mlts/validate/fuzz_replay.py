"""Replaying a saved burst ring image (`.ring`): the fuzz suite's ring campaign, for one input.

The image (the request ring's 192-byte header and data area) is copied into the request
ring of a fresh burst on the fuzz suite's request model, on a service that does not
pre-validate; the driver must answer or end the burst in time and stay alive.
"""

from __future__ import annotations

from collections.abc import Callable

from mlts.ipc.burst_ring import HEADER_BYTES, MAX_CAPACITY, MIN_CAPACITY
from mlts.validate.core import CaseResult, Target, ValidateError, run_case
from mlts.validate.fuzz_targets import RingTarget, ServiceContext
from mlts.validate.reproducer import Reproducer

#: Seconds the driver has to answer a replayed ring.
RING_WAIT_S = 10.0


def replay_ring(target: Target, repro: Reproducer, emit: Callable[[CaseResult], None]) -> CaseResult:
    data = repro.data or b""
    capacity = len(data) - HEADER_BYTES
    if not MIN_CAPACITY <= capacity <= MAX_CAPACITY:
        raise ValidateError(
            f"{repro.path}: a ring image is {HEADER_BYTES} header bytes plus {MIN_CAPACITY}..{MAX_CAPACITY} "
            f"data bytes, this one has {len(data)} bytes"
        )

    def body() -> tuple[str, str] | None:
        found = RingTarget().service(ServiceContext(target, RING_WAIT_S), data)
        if found is None:
            return None
        outcome = {"crash": "error", "hang": "hang"}.get(found.kind, "fail")
        if outcome != "fail":
            target.restart(f"replay: {repro.case}: the driver {'hung' if outcome == 'hang' else 'crashed'}")
        return outcome, found.detail

    return run_case(target, repro.suite, f"replay: {repro.case}", body, emit)
