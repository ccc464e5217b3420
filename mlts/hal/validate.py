"""Validation of models, requests and call arguments against the NN HAL 1.3 rules (AOSP's ValidateHal).

Every rejection raises `HalError(INVALID_ARGUMENT)` naming the subgraph, the
operand or operation index and the rule; validation stops at the first
violation. Each operation is checked against its NNAPI signature (counts,
types and how they combine, ranks, constant parameters, shapes: see
`_validate_operation`). IF and WHILE may nest at most MAX_NESTING (64) levels
deep, a limit of this implementation (NNAPI sets none; drivers run subgraphs
recursively). Work is linear in the size of the model; of pool
contents only constant parameters of at most 4 KiB are read, so untrusted
models are cheap to check.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from mlts.hal import vlog
from mlts.hal._validate_common import is_int
from mlts.hal._validate_graph import (
    MAX_NESTING,
    check_io_lists,
    check_operations,
    check_references,
    subgraph_label,
)
from mlts.hal._validate_operand import check_operand
from mlts.hal._validate_request import check_request
from mlts.hal.errors import invalid
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import (
    CACHE_TOKEN_BYTES,
    LOOP_TIMEOUT_MAXIMUM_NS,
    ExtensionNameAndPrefix,
    Model,
    Request,
    Subgraph,
)

__all__ = [
    "MAX_NESTING",
    "validate_cache_token",
    "validate_execution_preference",
    "validate_loop_timeout",
    "validate_model",
    "validate_priority",
    "validate_request",
]

# Reverse-domain name: at least two dot-separated labels of letters, digits, '_' or '-'.
_EXTENSION_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+")
_MAX_EXTENSION_NAME = 256
_MAX_PREFIX = 0xFFFF


def validate_model(model: Model, *, allowed_extensions: Collection[str] | None = None) -> None:
    """Raise INVALID_ARGUMENT at the first HAL 1.3 rule `model` breaks; return None if it is valid."""
    if not isinstance(model, Model):
        raise invalid(f"model must be a Model record, got {type(model).__name__}")
    if not isinstance(model.operand_values, (bytes, bytearray, memoryview)):
        raise invalid(f"model operand_values must be bytes, got {type(model.operand_values).__name__}")
    if not isinstance(model.relax_computation_float32_to_float16, bool):
        raise invalid(
            "model relax_computation_float32_to_float16 must be a bool, "
            f"got {model.relax_computation_float32_to_float16!r}"
        )
    pool_sizes = _pool_sizes(model.pools)
    prefixes = _check_extensions(model.extension_name_to_prefix, allowed_extensions)
    if not isinstance(model.referenced, (tuple, list)):
        raise invalid(f"model referenced must be a tuple of Subgraph, got {type(model.referenced).__name__}")
    graphs = [(-1, model.main), *enumerate(model.referenced)]
    # Operands and I/O lists of every subgraph first: operation checks of IF/WHILE
    # look into the subgraphs they reference.
    for index, sub in graphs:
        label = subgraph_label(index)
        _check_subgraph_record(sub, label)
        for i, operand in enumerate(sub.operands):
            check_operand(model, pool_sizes, label, i, operand, prefixes)
        check_io_lists(sub, label)
    for index, sub in graphs:
        check_operations(model, sub, subgraph_label(index), prefixes)
    check_references(model)
    if vlog.on("model"):
        vlog.log(
            "model",
            "valid model: %d operations, %d operands, %d referenced subgraphs, %d pools",
            len(model.main.operations),
            len(model.main.operands),
            len(model.referenced),
            len(model.pools),
        )


def validate_request(request: Request, model: Model, *, allow_unspecified_output: bool = True) -> None:
    """Raise INVALID_ARGUMENT if `request` cannot run on `model` (which must already be valid)."""
    check_request(request, model, allow_unspecified_output)


def validate_priority(p: Any) -> None:
    """Priority must be LOW 0, MEDIUM 1 or HIGH 2."""
    if not is_int(p) or p not in (0, 1, 2):
        raise invalid(f"priority {p!r} is not a Priority; valid values are LOW 0, MEDIUM 1, HIGH 2")


def validate_execution_preference(p: Any) -> None:
    """ExecutionPreference must be LOW_POWER 0, FAST_SINGLE_ANSWER 1 or SUSTAINED_SPEED 2."""
    if not is_int(p) or p not in (0, 1, 2):
        raise invalid(
            f"execution preference {p!r} is not an ExecutionPreference; valid values are "
            "LOW_POWER 0, FAST_SINGLE_ANSWER 1, SUSTAINED_SPEED 2"
        )


def validate_cache_token(token: bytes | None) -> None:
    """A compilation cache token is exactly 32 bytes; None means caching is not used."""
    if token is None:
        return
    if not isinstance(token, (bytes, bytearray)):
        raise invalid(f"cache token must be bytes, got {type(token).__name__}")
    if len(token) != CACHE_TOKEN_BYTES:
        raise invalid(f"cache token is {len(token)} bytes; it must be exactly {CACHE_TOKEN_BYTES}")


def validate_loop_timeout(ns: int | None) -> None:
    """A WHILE loop timeout is an int number of nanoseconds in [0, 15 s]; None means the default."""
    if ns is None:
        return
    if not is_int(ns) or not 0 <= ns <= LOOP_TIMEOUT_MAXIMUM_NS:
        raise invalid(f"loop timeout {ns!r} ns outside [0, {LOOP_TIMEOUT_MAXIMUM_NS}] ns (at most 15 s)")


def _pool_sizes(pools: Any) -> tuple[int, ...]:
    if not isinstance(pools, (tuple, list)):
        raise invalid(f"model pools must be a tuple of memory pools, got {type(pools).__name__}")
    sizes = []
    for i, pool in enumerate(pools):
        if not isinstance(pool, (HostMemory, SharedMemory)):
            raise invalid(
                f"model pool {i} is {type(pool).__name__}; model pools must be HostMemory or SharedMemory"
            )
        sizes.append(pool.size)
    return tuple(sizes)


def _check_extensions(table: Any, allowed: Collection[str] | None) -> frozenset[int]:
    """The declared prefixes, after checking names, prefixes and the bijection between them."""
    if not isinstance(table, (tuple, list)):
        raise invalid(f"model extension_name_to_prefix must be a tuple, got {type(table).__name__}")
    names: dict[str, int] = {}
    prefixes: dict[int, str] = {}
    for i, entry in enumerate(table):
        if not isinstance(entry, ExtensionNameAndPrefix):
            raise invalid(
                f"extension_name_to_prefix[{i}] is {type(entry).__name__}, expected ExtensionNameAndPrefix"
            )
        name, prefix = entry.name, entry.prefix
        where = f"extension_name_to_prefix[{i}]"
        if (
            not isinstance(name, str)
            or len(name) > _MAX_EXTENSION_NAME
            or not _EXTENSION_NAME.fullmatch(name)
        ):
            raise invalid(
                f"{where}: name {name!r} is not a reverse-domain name like 'com.example.my_extension'"
            )
        if not is_int(prefix) or not 0 < prefix <= _MAX_PREFIX:
            raise invalid(f"{where}: prefix {prefix!r} for {name!r} outside [1, {_MAX_PREFIX}]")
        if name in names:
            raise invalid(
                f"{where}: name {name!r} already has prefix {names[name]}; names and prefixes must map one to one"
            )
        if prefix in prefixes:
            raise invalid(
                f"{where}: prefix {prefix} already names {prefixes[prefix]!r}; names and prefixes must map one to one"
            )
        if allowed is not None and name not in allowed:
            raise invalid(f"{where}: extension {name!r} is not in the allowed extensions {sorted(allowed)}")
        names[name] = prefix
        prefixes[prefix] = name
    return frozenset(prefixes)


def _check_subgraph_record(sub: Any, label: str) -> None:
    if not isinstance(sub, Subgraph):
        raise invalid(f"{label}: expected a Subgraph record, got {type(sub).__name__}")
    if not isinstance(sub.operands, (tuple, list)):
        raise invalid(f"{label}: operands must be a tuple of Operand, got {type(sub.operands).__name__}")
