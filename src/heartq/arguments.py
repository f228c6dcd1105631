"""A task's arguments, checked against its signature when the job is enqueued.

A job stores its arguments as a JSON object: the worker calls the task with them as
keyword arguments. A misspelled or missing argument would otherwise be found by the
worker, attempt after attempt, until the job went to the dead-letter queue; checked
here, the caller gets Python's own `TypeError` (a `BadArguments`) naming it, and nothing
is stored.

One check (`bind`) for every path: a task registered in the enqueuing program binds
against its function's signature; an enqueue by name, from a program without the task's
code, binds against the parameters its workers declared (`describe` at the worker's
start, `declared_signature` at the enqueue); and a worker whose call of a task raised
`TypeError` asks the same check whether the arguments could bind at all (then the call
failed before any of the task's code ran, and no retry can change that).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from heartq.errors import BadArguments
from heartq.model import TaskParameter

CONTEXT_PARAMETER = "ctx"
"""The parameter through which a task receives its `JobContext` (never a job argument)."""

KINDS: dict[str, inspect._ParameterKind] = {
    kind.name.lower(): kind
    for kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.VAR_KEYWORD,
    )
}
"""A parameter's kind as a declaration names it (`keyword_only`), and back."""

_DECLARED_DEFAULT = object()
"""The default of a declared parameter that has one: its value stays with the code."""


def call_signature(fn: Callable[..., Any]) -> inspect.Signature:
    """The signature callers bind against: the function's, without its `ctx`."""
    signature = inspect.signature(fn)
    return signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name != CONTEXT_PARAMETER]
    )


def describe(signature: inspect.Signature) -> tuple[TaskParameter, ...]:
    """What a worker declares of a task's parameters (`call_signature`'s): each one's
    name, kind and whether it has a default."""
    return tuple(
        TaskParameter(p.name, p.kind.name.lower(), p.default is not inspect.Parameter.empty)
        for p in signature.parameters.values()
    )


def declared_signature(parameters: Sequence[TaskParameter] | None) -> inspect.Signature | None:
    """The signature declared parameters describe, to bind an enqueue by name against.
    None when there is none to check: a declaration without parameters (a worker of a
    version before they were declared), or one this version cannot read (a later one's):
    the enqueue is then not checked, as before parameters were declared."""
    if parameters is None:
        return None
    try:
        return inspect.Signature(
            [
                inspect.Parameter(
                    p.name,
                    KINDS[p.kind],
                    default=_DECLARED_DEFAULT if p.has_default else inspect.Parameter.empty,
                )
                for p in parameters
            ]
        )
    except (KeyError, ValueError, TypeError):
        return None


def bind(
    task: str, signature: inspect.Signature, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The job's arguments as the worker will pass them (by keyword), or `BadArguments`
    (a `TypeError`) saying which argument is wrong, as calling the function would."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        said = mismatch(signature, args, kwargs) or str(exc)
        raise BadArguments(f"task {task!r}: {said}") from None
    arguments: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise BadArguments(
                    f"task {task!r}: extra positional arguments (*{name}) cannot be stored "
                    "in a job, whose arguments are passed by keyword"
                )
        elif kind is inspect.Parameter.POSITIONAL_ONLY:
            raise BadArguments(
                f"task {task!r}: parameter {name!r} is positional-only, but a job's "
                "arguments are passed by keyword"
            )
        else:
            arguments[name] = value
    return arguments


def mismatch(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> str | None:
    """Every argument missing and every one unexpected, in Python's words (`missing a
    required argument: 'y'; got an unexpected keyword argument 'z'`), or None when
    neither is what is wrong (too many positional arguments, one given twice: Python's
    own message says it). Python names only the first it meets, so a misspelled argument
    (`{"x": 1, "z": 2}` for `x, y`) was reported as `y` missing, the stray `z` unnamed."""
    parameters = signature.parameters
    kinds = {p.kind for p in parameters.values()}
    by_position = [
        p.name
        for p in parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ][: len(args)]
    if any(name in kwargs for name in by_position):
        return None  # given twice: Python's "multiple values for argument"
    unexpected = (
        []
        if inspect.Parameter.VAR_KEYWORD in kinds
        else [name for name in kwargs if name not in parameters]
    )
    missing = [
        p.name
        for p in parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and p.name not in by_position
        and p.name not in kwargs
    ]
    said = []
    if missing:
        said.append(_listed("missing a required argument:", "missing required arguments:", missing))
    if unexpected:
        said.append(
            _listed(
                "got an unexpected keyword argument", "got unexpected keyword arguments", unexpected
            )
        )
    return "; ".join(said) or None


def _listed(one: str, many: str, names: Sequence[str]) -> str:
    """`missing a required argument: 'y'`, `missing required arguments: 'x', 'y'`."""
    return f"{one if len(names) == 1 else many} {', '.join(repr(n) for n in names)}"


DEPENDENCY_RESULTS = "its dependencies' results"
"""What a group's callback takes, as `results_parameter`'s refusal names it."""
PREVIOUS_RESULT = "the previous step's result"
"""What a pipeline's step made with `Signature.takes_result` takes."""


def results_parameter(
    task: str, signature: inspect.Signature, what: str = DEPENDENCY_RESULTS
) -> str:
    """The parameter through which a task that takes results (a group's callback, a
    pipeline's step that takes the previous step's) receives them: its first, which must
    take a value by keyword (a job's arguments are passed by keyword); `BadArguments`,
    naming `what` it was to take, for a task without one."""
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
            return parameter.name
        break
    raise BadArguments(
        f"task {task!r} cannot take {what}: its first parameter (after ctx) must be a "
        "plain one (results, ...), which the worker passes them to"
    )


def bind_after_results(
    task: str,
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    what: str = DEPENDENCY_RESULTS,
) -> dict[str, Any]:
    """`bind` for a task that takes results as its first parameter: the other arguments,
    checked as if the results were given (the worker adds them)."""
    name = results_parameter(task, signature, what)
    bound = bind(task, signature, (None, *args), kwargs)
    del bound[name]
    return bound


def refusal(
    task: str, signature: inspect.Signature, args: Mapping[str, Any]
) -> BadArguments | None:
    """Why a job's arguments cannot be passed to its task (None: they can). Asked by a
    worker whose call of the task raised `TypeError`: if the arguments do not bind, the
    call failed at its door, before any of the task's code ran (a `TypeError` the code
    raised itself means they did bind), and no retry can make them fit."""
    try:
        bind(task, signature, (), args)
    except BadArguments as exc:
        return exc
    return None


def template_fields(
    template: str, what: str = "concurrency_key", signature: inspect.Signature | None = None
) -> list[str]:
    """The argument names a `str.format` template reads (`"tenant:{tenant}"`: tenant);
    `ConfigError` (naming `what`, the option it was given as) for a template that is not
    one, or reads a positional field, or (given the task's `signature`) an argument the
    task does not take: a misspelled name would leave every job without a key."""
    from heartq.errors import ConfigError

    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"{what} {template!r} is not a format template: {exc}") from None
    fields = []
    for _, field, _, _ in parts:
        if field is None:
            continue
        name = field.split(".", 1)[0].split("[", 1)[0]
        if not name.isidentifier():
            raise ConfigError(
                f"{what} {template!r} must name the job's arguments ({{tenant}}), not positions"
            )
        fields.append(name)
    takes = {} if signature is None else signature.parameters
    if signature is not None and inspect.Parameter.VAR_KEYWORD not in {
        p.kind for p in takes.values()
    }:
        for name in fields:
            if name not in takes:
                raise ConfigError(
                    f"{what} {template!r} reads {name!r}, which is not a parameter of the "
                    f"task (it takes {', '.join(map(repr, takes)) or 'none'})"
                )
    return fields


def declared_defaults(parameters: Sequence[TaskParameter] | None) -> dict[str, Any] | None:
    """The defaults a key template reads for an enqueue by name, from the parameters the
    task's workers declared: each that has one, as `_DECLARED_DEFAULT` (its value stays
    with the code). None when none were declared (any argument might have a default)."""
    if parameters is None:
        return None
    return {p.name: _DECLARED_DEFAULT for p in parameters if p.has_default}


def fill_template(
    task: str,
    what: str,
    template: str,
    args: Mapping[str, Any],
    defaults: Mapping[str, Any] | None,
) -> str | None:
    """A key template (`concurrency_key`, `rate_key`: `"tenant:{tenant}"`) filled from a
    job's arguments, and the function's `defaults` for those it leaves out. None when an
    argument it reads is None or absent (a task taking `**kwargs`): the job is in no
    group, so it has no key and that limit does not apply to it (docs/design/limits.md, "Keys
    from templates"). `TypeError` naming the argument when its value is not known here:
    left to a default that lives with the task's code (an enqueue by name, whose
    `defaults` are `declared_defaults`; None: the task's parameters are not known)."""
    values = {**(defaults or {}), **args}
    fields = template_fields(template, what)
    if any(values.get(name) is None for name in fields if defaults is not None or name in values):
        return None
    for name in fields:
        if values.get(name, _DECLARED_DEFAULT) is _DECLARED_DEFAULT:
            raise TypeError(
                f"{task}: {what} {template!r} reads the argument {name!r}, which this job "
                f"leaves to the task's default; that default is in the task's code, which "
                f"this program does not have: pass {name}= (None: no key)"
            )
    return template.format(**values)


UNIQUE_ARGS_PREFIX = "args:"
"""How a key derived from a job's task and arguments starts (`unique_args_key`)."""


def unique_args_key(task: str, args_json: str) -> str:
    """The unique key of a job of `task` whose stored arguments are `args_json` (the JSON
    object an enqueue stores): `args:TASK:SHA256`, the SHA-256 (hex) of the arguments'
    canonical JSON (object keys sorted at every level, no spaces, UTF-8, strings as
    written). The same for the same arguments however they were given (positionally or
    by name, in any order, from any program and either backend, today and after an
    upgrade: nothing in it depends on the process); different for any argument that
    differs as JSON (`1` and `1.0`, `[1]` and `1`, an argument left to its default and
    the same value given)."""
    canonical = json.dumps(
        json.loads(args_json), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return f"{UNIQUE_ARGS_PREFIX}{task}:{digest}"
