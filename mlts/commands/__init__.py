"""One module per CLI command; each is a thin wrapper over a library function."""
