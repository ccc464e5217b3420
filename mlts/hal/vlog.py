"""MLTS_VLOG: verbose logging by tag, as NNAPI's `debug.nn.vlog` property.

The variable holds tags separated by commas, spaces or colons: `model`
(building, converting and validating models), `compilation` (preparation:
device choice, partitioning, the compilation cache, deadlines), `execution`
(every execution: path, result or error, time), `manager` (drivers found,
services started or connected), `driver` (the sample driver's side of the
calls) and `cpuexe` (the sample driver's executor: every operation run and
its time). `1` or `all` turns every tag on. An unknown tag is reported once
and ignored, as NNAPI does. Every process reads it (a driver service inherits
it from the tool that starts it).

Each tag is the logger `mlts.vlog.TAG` at DEBUG: code asks `on(TAG)` (a set
lookup) before it formats anything, so a tag that is off costs nothing. A
process that shows log records already (a driver service) shows these too;
`configure_stderr()` gives a tool without a handler one for them.
"""

from __future__ import annotations

import logging
import os
import re
import sys

ENV = "MLTS_VLOG"
#: NNAPI's tags, in its order.
TAGS = ("model", "compilation", "execution", "cpuexe", "manager", "driver")
_ALL = ("1", "all")
PREFIX = "mlts.vlog"

#: The tags turned on in this process (see `enable`).
enabled: frozenset[str] = frozenset()
#: The unknown tags of the last `parse`, reported by `enable`.
_unknown: tuple[str, ...] = ()


def parse(text: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """The tags `text` turns on, and the words that are not tags."""
    words = [w for w in re.split(r"[,\s:]+", text.strip()) if w]
    if any(w in _ALL for w in words):
        on = set(TAGS)
    else:
        on = {w for w in words if w in TAGS}
    unknown = tuple(w for w in words if w not in TAGS and w not in _ALL and w != "0")
    return frozenset(on), unknown


def logger(tag: str) -> logging.Logger:
    """The logger of `tag` (records at DEBUG)."""
    return logging.getLogger(f"{PREFIX}.{tag}")


def on(tag: str) -> bool:
    """Whether `tag` is turned on (check before formatting a message)."""
    return tag in enabled


def log(tag: str, message: str, *args: object) -> None:
    """Log `message % args` under `tag` when it is on."""
    if tag in enabled:
        logger(tag).debug(message, *args)


def enable(text: str | None = None) -> frozenset[str]:
    """Turn on the tags of `text` (MLTS_VLOG by default) in this process and off the others."""
    global enabled, _unknown
    tags, unknown = parse(os.environ.get(ENV, "") if text is None else text)
    enabled = tags
    for tag in TAGS:
        logger(tag).setLevel(logging.DEBUG if tag in tags else logging.WARNING)
    if unknown and unknown != _unknown:
        logging.getLogger(PREFIX).warning(
            "%s: unknown tag(s) %s ignored; tags are %s, or 1/all", ENV, ", ".join(unknown), ", ".join(TAGS)
        )
    _unknown = unknown
    return tags


class _TagFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        tag = record.name.rpartition(".")[2]
        return f"VLOG {tag}[{record.process}]: {record.getMessage()}"


def configure_stderr(stream=None) -> logging.Handler | None:
    """Show the tags' records on stderr (once per process) when any tag is on; the handler, or None."""
    root = logging.getLogger(PREFIX)
    for handler in root.handlers:
        if getattr(handler, "_mlts_vlog", False):
            return handler
    if not enabled:
        return None
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_TagFormatter())
    handler._mlts_vlog = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.propagate = False  # shown here; a root handler (a service's) would show it twice
    return handler


enable()
