"""mlts: an MLTS-style benchmark and stress suite for NN-HAL-style drivers."""

__version__ = "0.1.0"
