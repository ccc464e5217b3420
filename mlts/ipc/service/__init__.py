"""Serve any Device from its own process (`python -m mlts.ipc.service`), to one client or many.

Every message is untrusted: frames are checked by `mlts.ipc.wire`, arguments
by type in `args`, models and requests by `mlts.hal.validate` before the
Device sees them. Modules: `transport` (one connection), `handles` (per-client
handle tables and limits), `client` (dispatch of one client's calls),
`device_calls`, `execution_calls` and `fenced_calls` (the handlers),
`compact_dispatch` (compact execution calls, protocol 1.4), `scheduler` (worker
pools), `fence_watcher` (waits on input fences), `host` (the shared Device and
its clients) and `main` (the command line).
"""

from __future__ import annotations

from mlts.ipc.service.handles import Limits
from mlts.ipc.service.host import DEFAULT_FRAME_TIMEOUT, DEFAULT_WORKERS, ServiceHost
from mlts.ipc.service.main import main

__all__ = ["DEFAULT_FRAME_TIMEOUT", "DEFAULT_WORKERS", "Limits", "ServiceHost", "main"]
