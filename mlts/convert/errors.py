"""The converter's one error type."""

from __future__ import annotations

from mlts.errors import InputError


class ConversionError(InputError):
    """An ONNX model (or one of its nodes) that cannot be converted; the message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))
