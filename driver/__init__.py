"""The bundled sample driver: NumPy kernels and an executor behind the `mlts.hal` Device interface.

Imports only `mlts.hal` and NumPy.
"""
