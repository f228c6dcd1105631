"""The deployment's stream on the server: made when missing, with the settings the
transport URL gives (replicas, storage, limits: `settings.py`), joined when it exists
without this deployment's subjects, and compared with those settings when it exists:
a stream someone else made (an operator, another deployment, an earlier heartq) is used
as it is, and a difference is said in one line rather than changed behind their back.

Why replicas matter: a stream of one replica lives on one node of a cluster; while that
node is down its wake-ups are gone, and publishes fail until it returns. With
`replicas=3` the stream survives a node, after an election (docs/NATS.md, "Running on a
cluster").
"""

from __future__ import annotations

import math
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig, StreamInfo
from nats.js.errors import Error as JetStreamError
from nats.js.errors import NotFoundError

from heartq.transport.names import NatsNames


class NatsRefused(RuntimeError):
    """The server answers but will not take this deployment's stream or consumer (a
    name in the URL that clashes with another deployment's, or with a stream of an
    earlier version; replicas the cluster cannot hold): the worker says why and polls
    the database, it does not exit."""


def stream_config(names: NatsNames, settings: dict[str, Any]) -> StreamConfig:
    """The stream heartq makes: work-queue retention (a wake-up acked is gone), the
    deployment's subjects, and the URL's replicas, storage and limits."""
    return StreamConfig(
        name=names.stream,
        description=f"heartq wake-ups, deployment {names.deployment}",
        subjects=[names.subjects],
        retention=RetentionPolicy.WORK_QUEUE,
        num_replicas=settings.get("replicas", 1),
        storage=StorageType(settings.get("storage", "file")),
        max_age=settings.get("max_age"),
        max_msgs=settings.get("max_msgs"),
        max_bytes=settings.get("max_bytes"),
    )


async def ensure_stream(
    js: JetStreamContext, admin: JetStreamContext, names: NatsNames, settings: dict[str, Any]
) -> list[str]:
    """Make the stream when missing; on one that exists without this deployment's
    subjects, add them (`_join`). The differences between an existing stream and the
    URL's stream settings, in words (empty when none, or when made here). Looking waits
    as long as `js`'s timeout, making as long as `admin`'s: the caller bounds the whole."""
    try:
        info = await js.stream_info(names.stream)
    except NotFoundError:
        js = admin  # what follows makes or changes the stream
        refused: Exception | None = None
        try:
            await js.add_stream(stream_config(names, settings))
        except Exception as exc:  # noqa: BLE001 - or made by another process meanwhile
            refused = exc
        try:
            info = await js.stream_info(names.stream)
        except NotFoundError:
            raise NatsRefused(
                f"NATS refused stream {names.stream} for subjects {names.subjects}: "
                f"{reason(refused)}"
            ) from None
        if refused is None:
            return []
    if names.subjects not in (info.config.subjects or []):
        await _join(admin, names, info.config)
    return differences(info, settings)


def differences(info: StreamInfo, settings: dict[str, Any]) -> list[str]:
    """What an existing stream has that the URL's stream settings say otherwise."""
    config = info.config
    have: dict[str, Any] = {
        "replicas": config.num_replicas or 1,
        "storage": StorageType(config.storage or StorageType.FILE).value,  # a str, as read
        "max_age": config.max_age or None,
        "max_msgs": config.max_msgs if config.max_msgs and config.max_msgs > 0 else None,
        "max_bytes": config.max_bytes if config.max_bytes and config.max_bytes > 0 else None,
    }
    said = []
    for name, want in settings.items():
        got = have[name]
        same = (
            got is not None and math.isclose(float(got), float(want), rel_tol=1e-6)
            if name == "max_age"
            else got == want
        )
        if not same:
            said.append(f"{name} {_shown(got)} (the transport URL says {_shown(want)})")
    return said


def _shown(value: Any) -> str:
    if value is None:
        return "unlimited"
    return f"{value:g}" if isinstance(value, float) else str(value)


async def _join(js: JetStreamContext, names: NatsNames, config: StreamConfig) -> None:
    """A stream named in the URL (`stream=`) and made by another deployment, or by
    the operator: add this deployment's subjects to it, unless it takes them already
    (a wider subject of its own). Deployments that share a stream on purpose thus
    keep their own subjects and consumers."""
    try:
        holder: str | None = await js.find_stream_name_by_subject(names.subjects)
    except NotFoundError:
        holder = None
    if holder == names.stream:
        return
    if holder is not None:
        raise NatsRefused(
            f"NATS subjects {names.subjects} belong to stream {holder}, not "
            f"{names.stream}: set prefix= to subjects of this deployment's own"
        )
    config.subjects = [*(config.subjects or []), names.subjects]
    await js.update_stream(config)


def reason(exc: Exception | None) -> str:
    """NATS's own words for a refusal (its description), else the error's."""
    if isinstance(exc, JetStreamError) and exc.description:
        return exc.description
    return str(exc) if exc is not None else "not found after creating it"
