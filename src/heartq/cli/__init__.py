"""The `heartq` command line."""
