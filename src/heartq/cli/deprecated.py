"""Old names of commands and options, kept for one version once renamed (one word for each
thing: docs/design/words-and-map.md, "Words"): each still works as its new name does, and says once,
on stderr, that it is deprecated and what to type instead. Hidden from `--help`, so
nobody starts using them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

RENAMED_COMMANDS = {"reap": "reclaim"}
"""`heartq OLD` -> `heartq NEW`."""
RENAMED_OPTIONS = {"--reap-interval": "--reclaim-interval"}
"""`heartq worker`'s old options -> their names."""


def warn(old: str, new: str) -> None:
    """The one line a deprecated name prints on stderr."""
    click.echo(f"heartq: warning: {old} is deprecated, use {new}", err=True)


def command_alias(command: click.Command, old: str) -> click.Command:
    """`command` under its old name `old`: the same options and callback, hidden, with a
    warning first."""
    new = command.name or old
    callback = command.callback
    assert callback is not None

    def run(**kwargs: Any) -> Any:
        warn(f"'heartq {old}'", f"'heartq {new}'")
        return callback(**kwargs)

    return click.Command(
        old,
        params=list(command.params),
        callback=run,
        help=f"Deprecated: use 'heartq {new}'.",
        hidden=True,
    )


def option_alias(old: str, new: str, kind: Any) -> Callable[[F], F]:
    """A hidden option `old` that sets what `new` sets (the command maps its value, see
    `renamed_values`), with a warning when typed."""

    def said(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            warn(old, new)
        return value

    return click.option(old, type=kind, default=None, hidden=True, callback=said)


def renamed_values(given: dict[str, Any]) -> dict[str, Any]:
    """A command's values with each old option's under its new name; both typed is a
    usage error, as both given to `Settings` is a `ConfigError`."""
    out = dict(given)
    for old, new in RENAMED_OPTIONS.items():
        old_key, new_key = old[2:].replace("-", "_"), new[2:].replace("-", "_")
        value = out.pop(old_key, None)
        if value is None:
            continue
        if out.get(new_key) is not None:
            raise click.UsageError(f"{old} and {new} both given: use {new} alone")
        out[new_key] = value
    return out
