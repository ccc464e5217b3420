"""JSON for documents read from untrusted bytes: no duplicate keys, no NaN or Infinity."""

from __future__ import annotations

import json
from typing import Any


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def loads(text: str) -> Any:
    """json.loads that also refuses duplicate keys and NaN/Infinity (ValueError; deep nesting: RecursionError)."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
