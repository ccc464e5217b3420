"""Serve any Device from its own process (`python -m mlts.ipc.service`), to one client or many.

Every message is untrusted: frames are checked by `mlts.ipc.wire`, arguments
by type in `args`, models and requests by `mlts.hal.validate` before the
Device sees them; no client can stall, starve or outlive the others (the
threat model of docs/wire-protocol.md). Modules: `transport` (one connection)
and `outbox` (its bounded queue of answers), `handles` (per-client handle
tables and limits), `client` (dispatch of one client's calls), `device_calls`,
`execution_calls`, `fenced_calls`, `burst_calls` and `buffer_calls` (the
handlers), `compact_dispatch` (compact execution calls, protocol 1.4),
`scheduler` (worker pools), `fence_watcher` (waits on input fences),
`refusals` (aggregated refusal logs, the token-guess brake),
`allowlist_policy` (the extension allowlist, enforced), `memory_trim` (giving
memory back after a client leaves), `host` (the shared Device and its clients)
and `main` (the command line).
"""

from __future__ import annotations

from mlts.ipc.service.handles import Limits
from mlts.ipc.service.host import DEFAULT_FRAME_TIMEOUT, DEFAULT_WORKERS, ServiceHost
from mlts.ipc.service.main import main

__all__ = ["DEFAULT_FRAME_TIMEOUT", "DEFAULT_WORKERS", "Limits", "ServiceHost", "main"]
