"""Running a test's worker on several threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_concurrently(worker: Callable[[int], None], count: int = 2, timeout: float = 120.0) -> None:
    """worker(k) for k in range(count), each on its own thread; fails when one has not ended in `timeout` s."""
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a worker thread did not end"
