"""The base of every error a user of mlts can meet, and the exit status the CLI gives it.

This module imports nothing of the project, so every layer may use it. The
command line prints an `MltsError` (like a driver's `HalError` or an
`OSError`) as one line and exits with its `exit_status`: 2 for bad input
(`InputError`: a file, an option value, a model name) and 1 for a run that
failed. Any other exception reaching the command line is a bug in mlts and is
reported as an internal error with its own status.
"""

from __future__ import annotations

#: Exit status of bad input (click's own usage errors use it too).
EXIT_BAD_INPUT = 2
#: Exit status of a run that failed (a driver error, a failed stress test, a regression).
EXIT_FAILURE = 1
#: Exit status of a bug in mlts itself (sysexits' EX_SOFTWARE), distinct from both.
EXIT_INTERNAL = 70


class MltsError(Exception):
    """An error a user can meet and act on: the CLI prints its message as one line and exits 1."""

    exit_status = EXIT_FAILURE


class InputError(MltsError, ValueError):
    """Bad input from the user (a file, an option value, a name): one line and exit status 2.

    Also a ValueError, so code that validates values keeps catching it as one.
    """

    exit_status = EXIT_BAD_INPUT
