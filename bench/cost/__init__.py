"""What a job costs, counted rather than timed: `python -m bench.cost` (its `__main__`).

Counts are the same on a quiet machine and a busy one, a quick one and a slow one:
statements, round trips, bytes, WAL, index entries, buffers, rows and the server's
instructions per job, for the enqueue and the work apart, and the bytes a finished job
leaves in the schema, heartq beside pgqueuer in the same run. Modules: `cluster` (the
private cluster, under callgrind or not, and the meter), `relay` (bytes and round trips
on the wire), `waldump` (the WAL by record type and relation), `rounds` (a contender's
phases, counted), `storage` (a burst and a steady flow, the schema measured after each),
`report` (per job, the tables).
"""
