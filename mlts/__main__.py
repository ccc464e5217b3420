"""`python -m mlts` runs the command line."""

from mlts.cli import main

main()
