"""The crash and stress suite: MLTS stress modes run in supervised child processes."""
