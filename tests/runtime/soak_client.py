"""A well-behaved client for the release soak: prepares models and runs them on every execution path
until it is killed or its time is up.

    python -m tests.runtime.soak_client SOCKET_PATH SECONDS

Each round prepares a fresh model (so the service maps and releases models all along), runs it on
the sync, async, fenced and burst paths with a new pool now and then, and uses a driver buffer.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from mlts.hal.types import BufferDesc, BufferRole
from mlts.runtime.execution import EXECUTION_MODES, execute
from mlts.runtime.remote import RemoteDevice
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request


def main(path: str, seconds: float) -> int:
    until = time.monotonic() + seconds
    with RemoteDevice.connect(path) as device:
        rounds = 0
        while time.monotonic() < until:
            prepared = device.prepareModel(add_model())
            x = np.full((2, 3), rounds % 7, np.float32)
            pool = _pool(x, x)
            request = _request(pool)
            for mode in EXECUTION_MODES:
                execute(prepared, request, mode=mode)
                assert (_out(pool) == 2 * x).all()
            buffer = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
            buffer.copyFrom(x.tobytes(), (2, 3))
            buffer.close()
            device.freeMemory([pool])
            pool.close()
            prepared.close()
            rounds += 1
    print(rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2])))
