"""What a phase wrote to the WAL, record by record: `pg_waldump` between two LSNs, summed.

`pg_waldump --stats` sums by record type only; a job's cost needs the relation each
record touched too (the job table's heap, each of its indexes, the log table), so this
reads the records themselves, one line each:

    rmgr: Heap        len (rec/tot):     59/    59, tx:        745, lsn: 0/0174A3C8,
        prev 0/0174A390, desc: INSERT off 5 flags 0x00, blkref #0: rel 1663/16384/16390 blk 0

A record is put on the relation of its first block reference (`rel spc/db/filenode`);
one with none (a commit, a running-transactions snapshot) on its resource manager.
Besides bytes and records, two counts the issue asks for:

- **B-tree entries**: index tuples added, `INSERT_LEAF` and `INSERT_POST` records and
  the leaf-level splits (`SPLIT_L`/`SPLIT_R` at `level 0` carry the new item too);
  `INSERT_UPPER` (a downlink after a split) adds no entry for a row.
- **heap LOCK records**: `Heap LOCK` (a row locked, `FOR UPDATE` or a key-share by a
  foreign key) and `Heap2 LOCK_UPDATED` (the same on a newer version of the row).
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

RECORD = re.compile(
    r"^rmgr: (?P<rmgr>\S+)\s+len \(rec/tot\):\s*\d+/\s*(?P<total>\d+),.*?desc: (?P<desc>.*)$"
)
FIRST_BLOCK = re.compile(r"blkref #0: rel (?P<spc>\d+)/(?P<db>\d+)/(?P<node>\d+)")
FULL_PAGE = re.compile(r"\bFPW\b")
LEAF_SPLIT = re.compile(r"^SPLIT_[LR] level 0\b")
BTREE_ENTRY_TYPES = {"INSERT_LEAF", "INSERT_POST"}
HEAP_LOCK_TYPES = {("Heap", "LOCK"), ("Heap2", "LOCK_UPDATED")}


@dataclass(frozen=True)
class Record:
    """One WAL record: its resource manager and type, its size, the relation of its
    first block reference (None when it has none), and its full-page images."""

    rmgr: str
    type: str
    size: int
    relation: tuple[int, int, int] | None
    full_pages: int
    btree_entry: bool
    heap_lock: bool


@dataclass
class WalSummary:
    """A phase's WAL: totals, and the same by record type and by relation."""

    records: int = 0
    bytes: int = 0
    full_pages: int = 0
    btree_entries: int = 0
    heap_locks: int = 0
    by_type: Counter[str] = field(default_factory=Counter)
    bytes_by_type: Counter[str] = field(default_factory=Counter)
    by_relation: Counter[str] = field(default_factory=Counter)
    bytes_by_relation: Counter[str] = field(default_factory=Counter)
    btree_entries_by_index: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        return {
            "records": self.records,
            "bytes": self.bytes,
            "full_page_images": self.full_pages,
            "btree_entries": self.btree_entries,
            "heap_lock_records": self.heap_locks,
            "by_type": {k: [v, self.bytes_by_type[k]] for k, v in self.by_type.most_common()},
            "by_relation": {
                k: [v, self.bytes_by_relation[k]] for k, v in self.by_relation.most_common()
            },
            "btree_entries_by_index": dict(self.btree_entries_by_index.most_common()),
        }


def parse_record(line: str) -> Record | None:
    """One line of `pg_waldump`'s output as a Record (None for any other line)."""
    match = RECORD.match(line)
    if match is None:
        return None
    rmgr, desc = match["rmgr"], match["desc"]
    kind = desc.split(" ", 1)[0].rstrip(",;:")
    block = FIRST_BLOCK.search(desc)
    relation = (int(block["spc"]), int(block["db"]), int(block["node"])) if block else None
    return Record(
        rmgr=rmgr,
        type=kind,
        size=int(match["total"]),
        relation=relation,
        full_pages=len(FULL_PAGE.findall(desc)),
        btree_entry=rmgr == "Btree"
        and (kind in BTREE_ENTRY_TYPES or LEAF_SPLIT.match(desc) is not None),
        heap_lock=(rmgr, kind) in HEAP_LOCK_TYPES,
    )


def summarize(lines: Iterable[str], names: dict[tuple[int, int, int], str]) -> WalSummary:
    """Sum the records among `lines`; `names` gives a relation's name by its
    (tablespace, database, filenode), the rest are shown as those numbers."""
    summary = WalSummary()
    for line in lines:
        record = parse_record(line)
        if record is None:
            continue
        kind = f"{record.rmgr}/{record.type.removesuffix('+INIT')}"
        if record.relation is None:
            where = f"({record.rmgr}: no relation)"
        else:
            where = names.get(record.relation, "/".join(map(str, record.relation)))
        summary.records += 1
        summary.bytes += record.size
        summary.full_pages += record.full_pages
        summary.by_type[kind] += 1
        summary.bytes_by_type[kind] += record.size
        summary.by_relation[where] += 1
        summary.bytes_by_relation[where] += record.size
        if record.btree_entry:
            summary.btree_entries += 1
            summary.btree_entries_by_index[where] += 1
        if record.heap_lock:
            summary.heap_locks += 1
    return summary


def relations(lines: Iterable[str]) -> set[tuple[int, int, int]]:
    """The relations the records among `lines` touch first (to be named)."""
    found = set()
    for line in lines:
        record = parse_record(line)
        if record is not None and record.relation is not None:
            found.add(record.relation)
    return found


def dump(waldump: Path, wal_dir: Path, start: str, end: str, into: Path) -> None:
    """Write the records from LSN `start` up to `end` into the file `into` (a phase of
    20,000 jobs is a few hundred thousand lines: read twice from disk, never held)."""
    if start == end:
        into.write_text("")
        return
    with into.open("w") as out:
        subprocess.run(
            [str(waldump), "-p", str(wal_dir), "-s", start, "-e", end],
            check=True,
            stdout=out,
            stderr=subprocess.PIPE,
        )
