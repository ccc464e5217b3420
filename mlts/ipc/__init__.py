"""How a `Device` is served from its own process and reached: the transport layer.

Above `mlts.hal` (whose types, interface, validation and file formats it carries) and below
`mlts.runtime` (the client side that uses it). Modules: `wire` (frames and the JSON control
messages), `compact_calls` (the binary execution message), `burst_messages` and `burst_ring`
(a burst's shared-memory rings), `socket_polling` and `expected_wait` (how a reader waits),
`peer` (who a client is, as the kernel says), `socket_dir` (where a service's socket may live),
`extension_allowlist` (the allowlist file), and `service` (the service host: one Device shared
by many clients).
"""
