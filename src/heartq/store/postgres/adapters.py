"""How heartq's rows read on PostgreSQL: JSON as its text, a job id as `str`.

A job's JSON (its arguments, result, checkpoint, metadata) goes on to a worker or a
reader as the text it is, never parsed and dumped again. A job id is a `uuid` on
PostgreSQL and text on SQLite; the store's rows carry it as `str` on both, so nothing
above the store knows the difference. psycopg would make a `uuid.UUID`: the loaders here
read the server's text form as it is, and the binary form (16 bytes, which the claim's
cursor reads) as the same text.
"""

from __future__ import annotations

from psycopg.adapt import AdaptersMap, Loader
from psycopg.pq import Format
from psycopg.types.string import TextLoader
from psycopg.types.uuid import UUIDBinaryLoader, UUIDLoader

from heartq.ids import dashed_id


class JobIdBinaryLoader(Loader):
    """A `uuid` read in binary: its 16 bytes as the text the server prints (lower-case
    hex digits with their dashes)."""

    format = Format.BINARY

    def load(self, data: bytes | bytearray | memoryview) -> str:
        return dashed_id(bytes(data).hex())


def register_loaders(adapters: AdaptersMap) -> None:
    """Make `adapters` (a connection's or a cursor's) read JSON and job ids as text."""
    for name in ("json", "jsonb"):
        adapters.register_loader(name, TextLoader)
    read_uuids_as_job_ids(adapters)


def read_uuids_as_job_ids(adapters: AdaptersMap) -> None:
    """A `uuid` read as a job id: `str`, whether the server sends it as text or binary."""
    adapters.register_loader("uuid", TextLoader)
    adapters.register_loader("uuid", JobIdBinaryLoader)


def read_uuids_as_psycopg_does(adapters: AdaptersMap) -> None:
    """A `uuid` read as psycopg reads it (`uuid.UUID`): what a task's own tables hold, on
    heartq's connection lent to it (`borrowed.task_scope`), reads as on a connection of
    the task's own."""
    adapters.register_loader("uuid", UUIDLoader)
    adapters.register_loader("uuid", UUIDBinaryLoader)
