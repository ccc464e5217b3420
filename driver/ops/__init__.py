"""Operation kernels, one module per NNAPI operation, registered by code on import."""

from driver.ops._base import ArgInfo, kernel_for, register, registered_operations

__all__ = ["ArgInfo", "kernel_for", "register", "registered_operations"]
