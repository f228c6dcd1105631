"""The version of heartq: the one place it is written (`pyproject.toml` reads it from
here, `heartq.__version__` re-exports it), a module of its own so that any part may name
it without importing the package's public API."""

__version__ = "0.1.0"
