"""Input data: procedural images and MLTS's preprocessing."""
