"""The store's seam as a newcomer greps it: `Store` is queue operations only, each written
out as a method of `SqlStore` that names the role answering it; what keeps a process
connected is `Store.link`'s (`Link`); and the figures docs/design/backends.md gives are
the code's. No database: these read the classes.
"""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

from heartq.store.interface import Store
from heartq.store.link import Link
from heartq.store.sql.base import Dialect
from heartq.store.sql.store import SqlStore

BACKENDS = Path(__file__).resolve().parents[1] / "docs" / "design" / "backends.md"


def _members(protocol: type) -> set[str]:
    """The public members a protocol declares, its bases' included."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass in (object, typing.Protocol, typing.Generic):
            continue
        names |= {n for n in vars(klass) if not n.startswith("_")}
        names |= {n for n in getattr(klass, "__annotations__", {}) if not n.startswith("_")}
    return names


def _methods(protocol: type) -> set[str]:
    return {n for n in _members(protocol) if inspect.isfunction(getattr(protocol, n, None))}


def test_the_store_is_queue_operations_and_its_link() -> None:
    """Nothing of the link (pool, sessions, listeners, schema, close) is a `Store` member:
    a caller that opens, migrates, listens or closes says `store.link`."""
    assert not _members(Store) & _members(Link), _members(Store) & _members(Link)
    assert {"reach", "migrate", "close", "listen", "liveness_hold"} <= _members(Link)
    assert "link" in _members(Store)


def test_every_operation_is_a_method_written_out() -> None:
    """`store.claim` is found where it is defined: each `Store` member is a `def` (or a
    property) of `SqlStore` itself, not a descriptor made by a facade, and each method's
    body names the role it goes to (or the liveness locks, or the dialect's clock)."""
    for name in sorted(_members(Store) - {"link"}):
        defined = vars(SqlStore).get(name)
        assert inspect.isfunction(defined) or isinstance(defined, property), name
        if inspect.isfunction(defined):
            body = inspect.getsource(defined)
            assert re.search(
                r"self\.(enqueuing|leases|reclaiming|registry|inspection|admin|controls|schedules|liveness)\."
                r"|current_time\(self\.dialect\)",
                body,
            ), name


def test_designs_figures_are_the_codes() -> None:
    """The design's "Backends" (docs/design/backends.md) gives `Store`'s methods and the
    dialect's members: they are the code's (a method added or moved changes the page with
    it)."""
    text = BACKENDS.read_text()
    store = re.search(r"`Store`\s+is\s+(\d+)\s+methods", text)
    link = re.search(r"`Link`'s\s+(\d+)\s+members", text)
    dialect = re.search(r"`Dialect`\s+has\s+(\d+)\s+members", text)
    assert store and link and dialect, "docs/design/backends.md names the seam's figures"
    assert int(store.group(1)) == len(_methods(Store))
    assert int(link.group(1)) == len(_members(Link))
    assert int(dialect.group(1)) == len(_members(Dialect))
