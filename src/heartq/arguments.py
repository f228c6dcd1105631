"""A task's arguments, checked against its signature when the job is enqueued.

A job stores its arguments as a JSON object: the worker calls the task with them as
keyword arguments. A misspelled or missing argument would otherwise be found by the
worker, attempt after attempt, until the job went to the dead-letter queue; checked
here, the caller gets Python's own `TypeError` naming it, and nothing is stored.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable, Mapping
from typing import Any

CONTEXT_PARAMETER = "ctx"
"""The parameter through which a task receives its `JobContext` (never a job argument)."""


def call_signature(fn: Callable[..., Any]) -> inspect.Signature:
    """The signature callers bind against: the function's, without its `ctx`."""
    signature = inspect.signature(fn)
    return signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name != CONTEXT_PARAMETER]
    )


def bind(
    task: str, signature: inspect.Signature, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The job's arguments as the worker will pass them (by keyword), or `TypeError`
    saying which argument is wrong, as calling the function would."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"task {task!r}: {exc}") from None
    arguments: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise TypeError(
                    f"task {task!r}: extra positional arguments (*{name}) cannot be stored "
                    "in a job, whose arguments are passed by keyword"
                )
        elif kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"task {task!r}: parameter {name!r} is positional-only, but a job's "
                "arguments are passed by keyword"
            )
        else:
            arguments[name] = value
    return arguments


def template_fields(template: str) -> list[str]:
    """The argument names a `str.format` template reads (`"tenant:{tenant}"`: tenant);
    `ConfigError` for a template that is not one, or reads a positional field."""
    from heartq.errors import ConfigError

    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"concurrency_key {template!r} is not a format template: {exc}") from None
    fields = []
    for _, field, _, _ in parts:
        if field is None:
            continue
        name = field.split(".", 1)[0].split("[", 1)[0]
        if not name.isidentifier():
            raise ConfigError(
                f"concurrency_key {template!r} must name the job's arguments ({{tenant}}), "
                f"not positions"
            )
        fields.append(name)
    return fields
