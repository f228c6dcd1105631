"""The public API is `heartq.__all__`: every name in it is importable, every public name
of the package is in it, and every type `App`'s public methods return is exported."""

from __future__ import annotations

import inspect
import typing

import heartq


def test_all_names_import() -> None:
    for name in heartq.__all__:
        assert getattr(heartq, name, None) is not None, name


def test_every_public_name_is_listed() -> None:
    public = {
        name
        for name, value in vars(heartq).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public == set(heartq.__all__) - {"__version__"}


def test_what_app_returns_is_exported() -> None:
    exported = {getattr(heartq, name) for name in heartq.__all__}
    for name, method in inspect.getmembers(heartq.App, inspect.isfunction):
        if name.startswith("_"):
            continue
        returned = typing.get_type_hints(method).get("return")
        for candidate in (returned, *typing.get_args(returned)):
            if inspect.isclass(candidate) and candidate.__module__.startswith("heartq"):
                assert candidate in exported, f"App.{name} returns {candidate.__name__}"
