"""Load a Device factory from "package.module:attr" or "path/file.py[:Class]"."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from mlts.errors import InputError
from mlts.hal.interface import Buffer, Burst, Device, PreparedModel

DeviceFactory = Callable[..., Device]


class FactoryError(InputError):
    """A factory spec cannot be resolved to something that makes a Device."""


def split_file_spec(spec: str) -> tuple[str, str] | None:
    """(path, class name or "") when `spec` names a Python file, else None."""
    if spec.endswith(".py"):
        return spec, ""
    path, sep, attr = spec.rpartition(":")
    if sep and (path.endswith(".py") or "/" in path):
        return path, attr
    return None


def load_file(path: str | Path) -> ModuleType:
    """Import a Python file as a module (once per resolved path)."""
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise FactoryError(f"driver file {str(path)!r} does not exist or is not a file")
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    module_name = f"mlts_driver_plugin_{resolved.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise FactoryError(f"driver file {str(resolved)!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    # Registered first so dataclasses and pickling-free introspection find the module.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[module_name]
        # A broken plugin is the user's input: say which file and what it raised, in one line.
        raise FactoryError(f"driver file {str(resolved)!r} failed to import: {type(e).__name__}: {e}") from e
    except SystemExit as e:
        del sys.modules[module_name]
        # sys.exit() at import must not end mlts silently with the plugin's status.
        raise FactoryError(
            f"driver file {str(resolved)!r} is broken: it called sys.exit({e.code!r}) while being imported"
        ) from None
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def device_classes(module: ModuleType) -> list[type[Device]]:
    """The concrete Device subclasses defined (not merely imported) in `module`."""
    found = []
    for _, obj in vars(module).items():
        if (
            isinstance(obj, type)
            and issubclass(obj, Device)
            and obj.__module__ == module.__name__
            and not inspect.isabstract(obj)
        ):
            found.append(obj)
    return found


#: The interface classes a driver subclasses; a subclass that leaves one of their abstract methods out
#: cannot be instantiated.
INTERFACE_CLASSES: tuple[type, ...] = (Device, PreparedModel, Burst, Buffer)


def unfinished_classes(module: ModuleType) -> list[tuple[type, list[str]]]:
    """(class, the abstract methods it leaves undefined) of each abstract interface subclass defined in
    `module` that no class of the module completes (an abstract base the module subclasses is fine)."""
    defined = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, INTERFACE_CLASSES) and obj.__module__ == module.__name__
    ]
    found = []
    for cls in defined:
        if not inspect.isabstract(cls) or cls in INTERFACE_CLASSES:
            continue
        if any(
            other is not cls and issubclass(other, cls) and not inspect.isabstract(other) for other in defined
        ):
            continue
        found.append((cls, sorted(getattr(cls, "__abstractmethods__", ()))))
    return found


def unfinished_message(cls: type, missing: list[str]) -> str:
    """ "class X leaves out a, b and c, which every Device must define" (its interface named)."""
    base = next(b for b in INTERFACE_CLASSES if issubclass(cls, b))
    names = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
    what = "method" if len(missing) == 1 else "methods"
    return (
        f"class {cls.__name__} does not define the {what} {names}, which every {base.__name__} must define "
        "(see docs/writing-a-driver.md)"
    )


def load_factory(spec: str) -> DeviceFactory:
    """Resolve `spec` to a callable returning a Device (usually a Device subclass)."""
    if not isinstance(spec, str) or not spec:
        raise FactoryError(
            f"driver factory spec {spec!r} is empty; expected 'module:attr' or 'file.py[:Class]'"
        )
    file_spec = split_file_spec(spec)
    if file_spec is not None:
        path, attr = file_spec
        module = load_file(path)
        if not attr:
            classes = device_classes(module)
            unfinished = unfinished_classes(module)
            if unfinished:
                raise FactoryError(f"driver file {path!r}: " + unfinished_message(*unfinished[0]))
            if len(classes) != 1:
                names = ", ".join(c.__name__ for c in classes) or "none"
                raise FactoryError(
                    f"driver file {path!r} defines {len(classes)} Device classes ({names}); "
                    f"name one as '{path}:Class'"
                )
            return classes[0]
    else:
        module_name, sep, attr = spec.partition(":")
        if not sep or not module_name or not attr:
            raise FactoryError(
                f"driver factory spec {spec!r} is malformed; expected 'module:attr' or 'file.py[:Class]'"
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise FactoryError(f"cannot import module {module_name!r} of driver spec {spec!r}: {e}") from e
        except SystemExit as e:
            raise FactoryError(
                f"module {module_name!r} of driver spec {spec!r} is broken: it called sys.exit({e.code!r}) "
                "while being imported"
            ) from None
    target: object = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise FactoryError(
                f"{module.__name__!r} has no attribute {attr!r} (driver spec {spec!r})"
            ) from None
    if not callable(target):
        raise FactoryError(f"driver spec {spec!r} names a {type(target).__name__}, not a class or function")
    return target  # type: ignore[return-value]
