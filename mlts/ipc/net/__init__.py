"""The network transport of driver services: TCP with TLS, authentication, and tensors inside frames.

A service listens on `tcp://HOST:PORT` beside its Unix socket (`listener`); a client reaches it with a
network address (`address`). Each end runs a bridge between the network connection and an ordinary
local connection (`service_bridge`, `client_bridge`), so the service and the runtime speak the Unix
protocol unchanged while file descriptors travel as data: memories as mirrored bytes, sync fences as
completion messages, burst rings as a stream of their messages (docs/wire-protocol.md, "Network").
"""
