"""Seeded mutators for the fuzz suite (bytes and JSON-like structures) and delta-debugging minimisation.

Byte mutations are libFuzzer's classic set (bit flips, interesting integers, chunk
insertion, deletion, duplication, splicing); structure mutations pick one node of a
JSON document (a model or request dict) and break it the way hostile peers do: a
boundary integer, a wrong type, a missing key, a duplicated or dropped list item.
`ddmin_bytes` and `ddmin_list` shrink a failing input while the failure persists.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from typing import Any

INTERESTING_INTS = (
    0,
    1,
    -1,
    2,
    3,
    4,
    7,
    8,
    16,
    63,
    64,
    127,
    128,
    255,
    256,
    1023,
    1024,
    4096,
    65535,
    65536,
    2**31 - 1,
    2**31,
    -(2**31),
    2**32 - 1,
    2**32,
    2**63 - 1,
    2**64 - 1,
    2**64,
    -(2**63),
    10**18,
)
INTERESTING_FLOATS = (0.0, -0.0, 1e-45, 1e-30, 0.5, 1.0, -1.0, 3.4e38, 1e300, -1e300)
_WIDTHS = (1, 2, 4, 8)


def mutate_bytes(
    rng: random.Random, data: bytes, corpus: Sequence[bytes] = (), max_len: int = 1 << 20
) -> bytes:
    """One to four byte-level mutations of `data`."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(8)
        n = len(buf)
        if choice == 0 and n:
            i = rng.randrange(n)
            buf[i] ^= 1 << rng.randrange(8)
        elif choice == 1 and n:
            buf[rng.randrange(n)] = rng.randrange(256)
        elif choice == 2 and n:
            width = rng.choice(_WIDTHS)
            i = rng.randrange(n)
            value = rng.choice(INTERESTING_INTS) % (1 << (8 * width))
            chunk = value.to_bytes(width, "little" if rng.random() < 0.7 else "big")
            buf[i : i + width] = chunk
        elif choice == 3 and n:
            i = rng.randrange(n)
            del buf[i : i + rng.randint(1, min(64, n - i))]
        elif choice == 4:
            i = rng.randrange(n + 1)
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif choice == 5 and n:
            i = rng.randrange(n)
            j = min(n, i + rng.randint(1, 64))
            k = rng.randrange(n + 1)
            buf[k:k] = buf[i:j]
        elif choice == 6 and corpus:
            other = rng.choice(corpus)
            if other:
                cut = rng.randrange(len(other))
                buf = buf[: rng.randrange(n + 1)] + bytearray(other[cut:])
        elif choice == 7 and n:
            # Digits are where JSON keeps its numbers: turn one into another number.
            digits = [i for i in range(n) if 48 <= buf[i] <= 57]
            if digits:
                i = rng.choice(digits)
                j = i
                while j < n and 48 <= buf[j] <= 57:
                    j += 1
                buf[i:j] = str(rng.choice(INTERESTING_INTS)).encode()
    return bytes(buf[:max_len])


def _nodes(doc: Any, path: tuple = ()) -> list[tuple]:
    """Every path into a JSON document (dict keys and list indexes)."""
    out = [path]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _nodes(v, (*path, i))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _new_value(rng: random.Random, old: Any) -> Any:
    r = rng.random()
    if isinstance(old, bool) or r < 0.1:
        return rng.choice([not old if isinstance(old, bool) else True, None, 0, "x", [], {}])
    if isinstance(old, int):
        if r < 0.6:
            return rng.choice(INTERESTING_INTS)
        return old + rng.choice((-2, -1, 1, 2))
    if isinstance(old, float):
        return rng.choice(INTERESTING_FLOATS + tuple(INTERESTING_INTS[:8]))
    if isinstance(old, str):
        return rng.choice(["", "A" * 300, old[::-1], old + "\u0000", "com.example", str(rng.randrange(100))])
    if isinstance(old, list):
        return rng.choice([[], old * 2, [None], [rng.choice(INTERESTING_INTS)] * rng.randint(1, 5)])
    return rng.choice([None, 0, [], "x"])


def mutate_doc(rng: random.Random, doc: Any, count: int | None = None) -> Any:
    """A deep copy of `doc` with one to three structural mutations."""
    out = copy.deepcopy(doc)
    for _ in range(count or rng.randint(1, 3)):
        paths = _nodes(out)
        path = rng.choice(paths[1:] or paths)
        if not path:
            continue
        parent = _get(out, path[:-1])
        key = path[-1]
        r = rng.random()
        if r < 0.15 and isinstance(parent, dict):
            del parent[key]
        elif r < 0.25 and isinstance(parent, list):
            if rng.random() < 0.5:
                del parent[key]
            else:
                parent.insert(key, copy.deepcopy(parent[key]))
        elif r < 0.3 and isinstance(parent, dict):
            parent[rng.choice(["extra", "bogus", key + "_"])] = _new_value(rng, parent[key])
        else:
            parent[key] = _new_value(rng, parent[key])
    return out


def ddmin_bytes(data: bytes, still_fails: Callable[[bytes], bool], budget: int = 400) -> bytes:
    """Delta debugging (Zeller's ddmin) over bytes: a smaller input that still fails."""
    return bytes(ddmin_list(list(data), lambda items: still_fails(bytes(items)), budget))


def ddmin_list(items: list, still_fails: Callable[[list], bool], budget: int = 400) -> list:
    """Delta debugging over a list: remove chunks (halves, quarters, ...) while the failure persists."""
    n = 2
    tries = 0
    while len(items) >= 2 and tries < budget:
        size = max(1, len(items) // n)
        reduced = False
        for start in range(0, len(items), size):
            candidate = items[:start] + items[start + size :]
            tries += 1
            if candidate and still_fails(candidate):
                items, n, reduced = candidate, max(n - 1, 2), True
                break
            if tries >= budget:
                break
        if not reduced:
            if size == 1:
                break
            n = min(len(items), n * 2)
    return items


def shrink_doc(doc: Any, still_fails: Callable[[Any], bool], budget: int = 300) -> Any:
    """Shrink a JSON document: drop list items (ddmin per list) while the failure persists."""
    tries = [0]

    def check(candidate: Any) -> bool:
        tries[0] += 1
        return tries[0] <= budget and still_fails(candidate)

    for path in sorted(_nodes(doc), key=len):
        try:
            node = _get(doc, path)
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(node, list) or len(node) < 2:
            continue

        def fails_with(items: list, path: tuple = path, base: Any = doc) -> bool:
            trial = copy.deepcopy(base)
            if path:
                _get(trial, path[:-1])[path[-1]] = items
            else:
                trial = items
            return check(trial)

        smaller = ddmin_list(list(node), fails_with, budget // 4)
        if len(smaller) < len(node):
            if path:
                _get(doc, path[:-1])[path[-1]] = smaller
            else:
                doc = smaller
    return doc
