"""`bench.cost.waldump` reads PostgreSQL 15's `pg_waldump` lines as `python -m bench.cost`
needs them: the bytes and records of a phase by relation, the B-tree entries (leaf
inserts and leaf splits, not downlinks or new roots) and the heap LOCK records.

The lines are real, captured once from a private cluster (a table `q` of filenode 16385
with its primary key, 16390, and a second index, 16392): inserts until the index split
and grew a level, a row locked FOR UPDATE and updated, a HOT update, a prune, a delete,
updates after a CHECKPOINT (full-page images), an upper-level split of another table's
primary key (filenode 16388, after 150,000 rows), a key-share lock taken over by a
multixact.
"""

# ruff: noqa: E501 (the captured lines are kept as pg_waldump printed them)
from __future__ import annotations

from bench.cost import waldump

LINES = """\
rmgr: Heap        len (rec/tot):     91/    91, tx:        727, lsn: 0/0153AD10, prev 0/0153AC98, desc: INSERT+INIT off 1 flags 0x00, blkref #0: rel 1663/5/16385 blk 0
rmgr: Btree       len (rec/tot):     64/    64, tx:        727, lsn: 0/0153ADD0, prev 0/0153AD70, desc: INSERT_LEAF off 1, blkref #0: rel 1663/5/16390 blk 1
rmgr: Btree       len (rec/tot):     90/    90, tx:        727, lsn: 0/0153AD70, prev 0/0153AD10, desc: NEWROOT lev 0, blkref #0: rel 1663/5/16390 blk 1, blkref #2: rel 1663/5/16390 blk 0
rmgr: Btree       len (rec/tot):    752/   752, tx:        727, lsn: 0/01551358, prev 0/015512F8, desc: SPLIT_R level 0, firstrightoff 367, newitemoff 408, postingoff 0, blkref #0: rel 1663/5/16390 blk 1, blkref #1: rel 1663/5/16390 blk 2
rmgr: Btree       len (rec/tot):     72/    72, tx:        728, lsn: 0/01569228, prev 0/01568F38, desc: INSERT_UPPER off 3, blkref #0: rel 1663/5/16390 blk 3, blkref #1: rel 1663/5/16390 blk 2
rmgr: Btree       len (rec/tot):     56/    56, tx:        727, lsn: 0/015516C8, prev 0/01551648, desc: DEDUP nintervals 2, blkref #0: rel 1663/5/16392 blk 1

rmgr: Transaction len (rec/tot):     34/    34, tx:        727, lsn: 0/0155BFB8, prev 0/0155BF78, desc: COMMIT 2026-11-26 02:33:27.016237 UTC
rmgr: Heap        len (rec/tot):     54/    54, tx:        728, lsn: 0/0155BFE0, prev 0/0155BFB8, desc: LOCK off 1: xid 728: flags 0x00 LOCK_ONLY EXCL_LOCK KEYS_UPDATED , blkref #0: rel 1663/5/16385 blk 0
rmgr: Heap        len (rec/tot):    111/   111, tx:        728, lsn: 0/0155C0D8, prev 0/0155C0A0, desc: UPDATE+INIT off 1 xmax 728 flags 0x00 KEYS_UPDATED ; new off 1 xmax 728, blkref #0: rel 1663/5/16385 blk 5, blkref #1: rel 1663/5/16385 blk 0
rmgr: Heap        len (rec/tot):     70/    70, tx:        729, lsn: 0/0155C480, prev 0/0155C440, desc: HOT_UPDATE off 4 xmax 729 flags 0x20 ; new off 121 xmax 0, blkref #0: rel 1663/5/16385 blk 0
rmgr: Heap2       len (rec/tot):     60/    60, tx:          0, lsn: 0/0155C440, prev 0/0155C418, desc: PRUNE latestRemovedXid 728 nredirected 0 ndead 3, blkref #0: rel 1663/5/16385 blk 0
rmgr: Heap        len (rec/tot):     54/    54, tx:        730, lsn: 0/0155C530, prev 0/0155C4F0, desc: DELETE off 5 flags 0x00 KEYS_UPDATED , blkref #0: rel 1663/5/16385 blk 0
rmgr: Heap        len (rec/tot):     65/   661, tx:        727, lsn: 0/01538C78, prev 0/01538C00, desc: UPDATE off 1 xmax 727 flags 0x40 KEYS_UPDATED ; new off 11 xmax 0, blkref #0: rel 1663/5/16385 blk 0 FPW
rmgr: Btree       len (rec/tot):     53/   313, tx:        727, lsn: 0/01538F10, prev 0/01538C78, desc: INSERT_LEAF off 11, blkref #0: rel 1663/5/16390 blk 1 FPW
rmgr: Btree       len (rec/tot):   2064/  2064, tx:        727, lsn: 0/034C2208, prev 0/034C1F00, desc: SPLIT_R level 1, firstrightoff 286, newitemoff 409, postingoff 0, blkref #0: rel 1663/5/16388 blk 411, blkref #1: rel 1663/5/16388 blk 698, blkref #3: rel 1663/5/16388 blk 696
rmgr: Heap        len (rec/tot):     54/    54, tx:       1129, lsn: 0/015EF718, prev 0/015EF6E0, desc: LOCK off 7: xid 2: flags 0x00 IS_MULTI LOCK_ONLY EXCL_LOCK , blkref #0: rel 1663/5/16385 blk 0
""".splitlines()
TABLE, PKEY, OTHER_INDEX = (1663, 5, 16385), (1663, 5, 16390), (1663, 5, 16392)
BIG_PKEY = (1663, 5, 16388)


def test_a_record_line_gives_its_size_relation_and_kind() -> None:
    split = waldump.parse_record(LINES[3])
    assert split is not None
    assert (split.rmgr, split.type, split.size, split.relation) == ("Btree", "SPLIT_R", 752, PKEY)
    assert split.btree_entry and not split.heap_lock and split.full_pages == 0
    update = waldump.parse_record(LINES[13])
    assert update is not None
    assert (update.type, update.size, update.full_pages) == ("UPDATE", 661, 1)  # total, image
    commit = waldump.parse_record(LINES[7])
    assert commit is not None and commit.relation is None
    assert waldump.parse_record("") is None


def test_a_phase_sums_by_relation_and_counts_entries_and_locks() -> None:
    summary = waldump.summarize(LINES, {TABLE: "public.q", PKEY: "public.q_pkey"})
    assert (summary.records, summary.bytes, summary.full_pages) == (16, 2536 + 2064, 2)
    assert summary.btree_entries == 3  # two leaf inserts and a leaf split; no downlink,
    # new root or upper-level split
    assert summary.btree_entries_by_index == {"public.q_pkey": 3}
    assert summary.heap_locks == 2  # FOR UPDATE, and the multixact's
    assert summary.by_relation == {
        "public.q": 8,
        "public.q_pkey": 5,
        "1663/5/16392": 1,  # not named: shown by its numbers
        "1663/5/16388": 1,
        "(Transaction: no relation)": 1,
    }
    assert summary.bytes_by_relation["public.q_pkey"] == 64 + 90 + 752 + 72 + 313
    assert summary.by_type["Heap/UPDATE"] == 2  # UPDATE+INIT is an UPDATE
    assert waldump.relations(LINES) == {TABLE, PKEY, OTHER_INDEX, BIG_PKEY}
