"""The harness's own cost per call: empty round trips to the driver service on the same connection.

Every timed execution pays the client ↔ service round trip on top of the driver's work. An empty
call (`ping`: the service answers at once, no driver involved) on the connection the benchmark uses
measures that cost, so a results row can carry it and a user can subtract it from the latencies.
"""

from __future__ import annotations

from typing import Any

from mlts.bench.stats import describe

#: Empty round trips per measurement, after a few untimed ones (the first calls warm the connection).
OVERHEAD_CALLS = 200
OVERHEAD_WARMUP_CALLS = 10


def harness_overhead(device: Any, calls: int = OVERHEAD_CALLS) -> dict[str, Any] | None:
    """Median and 95% interval (µs) of `calls` empty round trips to `device`'s service.

    None for a device without a service connection (a driver loaded in this process, onnxruntime):
    no round trip, nothing to measure.
    """
    ping = getattr(device, "ping", None)
    if ping is None or calls < 1:
        return None
    for _ in range(OVERHEAD_WARMUP_CALLS):
        ping()
    stats = describe([ping() for _ in range(calls)], p99_wanted=False)
    lo, hi = stats["median_ci95"]
    return {
        "method": "ping",
        "calls": stats["n"],
        "median_us": stats["median"] * 1000.0,
        "median_ci95_us": [lo * 1000.0, hi * 1000.0],
    }
