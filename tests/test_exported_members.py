"""The public API is `heartq.__all__`: every name in it is importable, every public name
of the package is in it, and every type `App`'s public methods return is exported."""

from __future__ import annotations

import inspect
import subprocess
import sys
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
    assert public | set(heartq._LAZY) == set(heartq.__all__) - {"__version__"}


def test_import_heartq_loads_no_worker() -> None:
    """A process that only enqueues loads neither the worker's runtime nor its
    maintenance; `heartq.Worker` loads them when first used."""
    code = (
        "import sys, heartq\n"
        "runtime = ('heartq.worker', 'heartq.maintenance')\n"
        "loaded = [m for m in sys.modules if m.startswith(runtime)]\n"
        "assert not loaded, loaded\n"
        "assert heartq.Worker.__module__ == 'heartq.worker.runtime'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_what_app_returns_is_exported() -> None:
    exported = {getattr(heartq, name) for name in heartq.__all__}
    for name, method in inspect.getmembers(heartq.App, inspect.isfunction):
        if name.startswith("_"):
            continue
        returned = typing.get_type_hints(method).get("return")
        for candidate in (returned, *typing.get_args(returned)):
            if inspect.isclass(candidate) and candidate.__module__.startswith("heartq"):
                assert candidate in exported, f"App.{name} returns {candidate.__name__}"


def test_what_pipelines_return_is_exported() -> None:
    """A pipeline's parts and what its `enqueue` returns are public: users type them."""
    exported = {getattr(heartq, name) for name in heartq.__all__}
    for cls in (heartq.Signature, heartq.Chain, heartq.Group):
        returned = typing.get_type_hints(cls.enqueue, localns=vars(heartq)).get("return")
        assert returned in exported, f"{cls.__name__}.enqueue returns {returned}"
    assert typing.get_type_hints(heartq.Task.s).get("return") is heartq.Signature
    assert heartq.chain.__module__ == heartq.group.__module__ == "heartq.pipelines"
