"""The table of TFLite builtin operators the importer maps, one mapping function per builtin.

Each entry says which NNAPI operations the builtin becomes, the newest operator version TFLite's
NNAPI delegate accepts for it, and a note on options and refusals; docs/tflite.md's mapping table
is generated from this table (scripts/gen_tflite_doc.py), so the document is what the code does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlts.convert.tflite.context import Graph
    from mlts.convert.tflite.model import Operator

Handler = Callable[["Graph", "Operator"], None]


@dataclass(frozen=True, slots=True)
class Mapping:
    builtin: str
    handler: Handler
    nnapi: tuple[str, ...]
    max_version: int | None  # None: the delegate checks no version
    note: str


_TABLE: dict[str, Mapping] = {}


def register(
    *builtins: str,
    nnapi: str | tuple[str, ...] | dict[str, tuple[str, ...]],
    max_version: int | None,
    note: str = "",
) -> Callable[[Handler], Handler]:
    """Register `fn` as the mapping of each of `builtins` (BuiltinOperator names).

    `nnapi` names the NNAPI operations: one name or tuple for a single builtin; for several, a tuple
    of one name per builtin (in order), or a dict builtin -> tuple.
    """

    def ops_of(k: int, name: str) -> tuple[str, ...]:
        if isinstance(nnapi, dict):
            return tuple(nnapi[name])
        if isinstance(nnapi, str):
            return (nnapi,)
        if len(builtins) > 1:
            if len(nnapi) != len(builtins):
                raise RuntimeError(f"{builtins}: give one NNAPI operation per builtin, or a dict")
            return (nnapi[k],)
        return tuple(nnapi)

    def deco(fn: Handler) -> Handler:
        for k, name in enumerate(builtins):
            if name in _TABLE:
                raise RuntimeError(f"two mappings for TFLite builtin {name}")
            _TABLE[name] = Mapping(name, fn, ops_of(k, name), max_version, note)
        return fn

    return deco


def lookup(builtin: str) -> Mapping | None:
    return _TABLE.get(builtin)


#: The NNAPI feature levels past the importer's (4: NNAPI 1.3, Android 11): (level, Android release).
FEATURE_LEVELS = {5: "Android 12", 6: "Android 13", 7: "Android 14", 8: "Android 15"}
#: The importer's target: NNAPI feature level 4 (NNAPI 1.3, Android 11, API 30), the sample driver's HAL.
TARGET_FEATURE_LEVEL = 4


@dataclass(frozen=True, slots=True)
class Later:
    """A builtin TFLite's NNAPI delegate maps only from a feature level above the importer's."""

    builtin: str
    feature_level: int
    nnapi: str


#: Builtins the delegate maps only at a feature level above 4 (its Validate's
#: ExpectMinAndroidSdkVersion(kNNAPIRuntimeFeatureLevelN)): refused, naming the level.
LATER: dict[str, Later] = {
    later.builtin: later
    for later in (
        Later("BATCH_MATMUL", 6, "BATCH_MATMUL"),
        Later("MIRROR_PAD", 7, "MIRROR_PAD"),
        Later("REVERSE_V2", 7, "REVERSE"),
    )
}


def feature_level_text(level: int) -> str:
    """'NNAPI feature level 6 (Android 13)' for a level above the importer's."""
    release = FEATURE_LEVELS.get(level)
    return f"NNAPI feature level {level}" + (f" ({release})" if release else "")


def needs_level(level: int, what: str) -> str:
    """The reason of a refusal for a form the delegate maps only from feature level `level`."""
    return (
        f"{what}: TFLite's NNAPI delegate maps it from {feature_level_text(level)} on; the importer "
        f"targets feature level {TARGET_FEATURE_LEVEL} (NNAPI 1.3)"
    )


def mappings() -> list[Mapping]:
    """Every mapped builtin, sorted by name."""
    import mlts.convert.tflite.ops  # noqa: F401  (registers every mapping)

    return [_TABLE[k] for k in sorted(_TABLE)]
