"""The TFLite CPU reference: LiteRT's interpreter (ai-edge-litert) with TFLite's own kernels.

MLTS's accuracy and latency baseline is TFLite's CPU kernels; LiteRT is TFLite's interpreter as a
package. It runs with TFLite's builtin kernels and without the default XNNPACK delegate
(OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES): the integer results are those of TFLite's own
8-bit kernels, which NNAPI's quantized operations are specified after, and the thread count is the
run's. Inputs and outputs follow the converter's plan (mlts.convert.tflite.IoPlan): inputs the
conversion gave new shapes (their dynamic dimensions) are resized first (resize_tensor_input, strict;
a signature's runner resizes to the inputs it is fed), then the model's inputs and the state (variable)
tensors it converted to inputs are set before each call, and the
model's outputs then the state tensors' next values, read after it. Every call starts from the
state it is given, as the converted model does.

The package is optional (pip install 'mlts[tflite]'); without it a .tflite model has no reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlts.errors import InputError

PACKAGE = "ai-edge-litert"


class LiteRtUnavailable(InputError):
    """The LiteRT reference was asked for but the package is not installed (or cannot load)."""


class LiteRtError(InputError):
    """LiteRT cannot load or run the model; the message is one line."""


def available() -> bool:
    """Whether the LiteRT interpreter package can be imported."""
    try:
        import ai_edge_litert.interpreter  # noqa: F401
    except Exception:  # noqa: BLE001  (a broken install is as good as none)
        return False
    return True


def version() -> str | None:
    """The installed ai-edge-litert version, or None."""
    from importlib import metadata

    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


class LiteRtReference:
    """Runs a .tflite model on LiteRT's CPU kernels with an explicit thread count."""

    backend = "cpu:litert"
    framework = "litert"

    def __init__(self, model_bytes: bytes, threads: int, plan) -> None:
        try:
            from ai_edge_litert.interpreter import Interpreter, OpResolverType
        except Exception as e:  # noqa: BLE001
            raise LiteRtUnavailable(
                f"the LiteRT reference needs the {PACKAGE} package ({type(e).__name__}: {e}); "
                "install it with: pip install 'mlts[tflite]'"
            ) from None
        self.model_bytes = model_bytes
        self.plan = plan
        try:
            self.interpreter = Interpreter(
                model_content=model_bytes,
                num_threads=threads,
                experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            )
            if plan.subgraph == 0:
                for index, shape in getattr(plan, "resized", ()):
                    # The inputs the conversion was given shapes for (their dynamic dimensions only).
                    self.interpreter.resize_tensor_input(index, list(shape), strict=True)
            self.interpreter.allocate_tensors()
            self._runner = None
            if plan.subgraph != 0:
                self._runner = self.interpreter.get_signature_runner(plan.signature)
        except Exception as e:  # noqa: BLE001  (LiteRT raises RuntimeError/ValueError with its own text)
            raise LiteRtError(f"LiteRT cannot load the model: {_one_line(e)}") from None
        details = {d["index"]: d for d in self.interpreter.get_tensor_details()}
        self._shapes = {
            i: tuple(int(s) for s in details[i]["shape"]) for i in plan.all_tensors() if i in details
        }

    def _set(self, index: int, value: np.ndarray) -> None:
        shape = self._shapes.get(index)
        arr = np.asarray(value)
        self.interpreter.set_tensor(index, arr.reshape(shape) if shape is not None else arr)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        plan = self.plan
        try:
            if self._runner is not None:
                result = self._runner(**dict(zip(plan.input_names, inputs, strict=True)))
                return [np.asarray(result[name]) for name in plan.output_names]
            for index, value in zip(plan.inputs, inputs, strict=True):
                self._set(index, value)
            self.interpreter.invoke()
            return [np.array(self.interpreter.get_tensor(i)) for i in plan.outputs]
        except Exception as e:  # noqa: BLE001
            raise LiteRtError(f"LiteRT failed to run the model: {_one_line(e)}") from None


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:400]}" if text else type(e).__name__
