"""The one exception type that crosses the HAL: an ErrorStatus and a message."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlts.hal.enums import ErrorStatus

if TYPE_CHECKING:
    from mlts.hal.types import OutputShape


class HalError(Exception):
    """A HAL call failed with `status`; `message` says what and where.

    `output_shapes` is set with OUTPUT_INSUFFICIENT_SIZE so the caller learns
    which outputs were too small and how big they must be.
    """

    def __init__(
        self,
        status: ErrorStatus,
        message: str,
        output_shapes: tuple[OutputShape, ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = ErrorStatus(status)
        self.message = message
        self.output_shapes = tuple(output_shapes)

    def __str__(self) -> str:
        return f"{self.status.name}: {self.message}"


def invalid(message: str) -> HalError:
    """Shorthand for the INVALID_ARGUMENT rejections of validation."""
    return HalError(ErrorStatus.INVALID_ARGUMENT, message)


def not_implemented(what: str) -> HalError:
    """What a driver answers for a HAL method it does not implement."""
    return HalError(ErrorStatus.GENERAL_FAILURE, f"{what} is not implemented by this driver")
