"""Pieces of hostile task code shared by the tests that run it: the runtime's
(tests/runtime/test_hostile_tasks.py) and the chaos runner's hostile family
(tests/soak/chaos_hostile_tasks.py)."""

from __future__ import annotations


class Unprintable(Exception):
    """An exception whose text cannot be made: `str` and `repr` raise."""

    def __str__(self) -> str:
        raise RuntimeError("no text")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class Unencodable:
    """A result no JSON encoder can take (its `__repr__` raises too)."""

    def __repr__(self) -> str:
        raise KeyboardInterrupt


def recurse(n: int) -> int:
    """Recurses until `RecursionError`."""
    return recurse(n + 1) + 1
