"""Maintenance: what every worker runs besides its jobs, to find and take back work that
nobody will finish, and to keep the tables small. Each service has a `run_once()` (one
pass, which tests call directly instead of waiting for a timer); the runner calls it
every interval.

- `reclaimers.py`: the services that take back work whose worker can no longer report
  it, in the order a worker finds things: `LivenessProbe` (every `liveness_interval`,
  default 1 s: gone processes, by their free liveness lock), `WorkerMonitor` (every
  `reclaim_interval`: workers silent past their own `stale_after`) and `LeaseReclaimer`
  (every `reclaim_interval`, default the heartbeat interval, 30 s: running jobs whose
  lease expired); what a pass found (`Findings`); and `reclaim_pass`, for `heartq
  reclaim`: the probe (twice if a lock is only suspected), the monitor and the lease
  reclaimer once each, with
  the same code and events. Its docstring lists each one's events.
- `pruner.py`, `Pruner`, every `prune_interval` (default 10 min): inactive/stopped
  workers and succeeded/cancelled jobs past their retention (7 days) are deleted; dead
  jobs stay until purged. Event: `pruned`.
- `scheduler.py`, `Scheduler`, on every worker with `periodic` on, every quarter of the
  shortest schedule's period (between 0.05 and 1 s; 1 s with none): the due ticks of
  the app's `@app.periodic` schedules and of the fleet's runtime ones (read each pass),
  each enqueued once across the fleet. Event: `schedule_skipped`.
- `sweeper.py`, `Sweeper`, with a transport, every `sweep_interval` (default 1 s): jobs
  due, queued again, or queued long that no message names, published. No event of its own.
- `reconcile.py`, `reconcile` once at startup (a worker with a `--name`), then
  `PendingReconciliation` every `liveness_grace` + 0.2 s while a namesake is suspected:
  jobs still held by gone earlier workers of that name. Events:
  `job_reclaimed`/`job_dead` (`reconciliation`), `namesake_alive`,
  `reconciliation_complete`.

The lease reclaimer and the monitor judge as their worker (`observer`): only while it has been in
unbroken contact with the database for a staleness threshold, because after a pause of
the database (a freeze, a failover) every heartbeat and lease looks old, and silence the
observer could not have heard is no evidence. Liveness locks still find real deaths.

Every worker runs all of them; racing is safe because each reclaim is one transaction
that only changes jobs still running under the execution it read.

- `runner.py`: `MaintenanceRunner`, every service at its interval (+/-10 % jitter) on
  one thread (`heartq.background`); a failing pass is logged (`maintenance_failed`) and
  retried at the next interval. `default_services`: the four every worker runs.

Each service tells what it finds to the worker's event stream (`heartq.event_stream`),
reclaimed jobs and gone workers the same way as the worker tells the attempts it hands
back itself (`EventStream.reclaimed`, `deactivated`); the runner then runs the crash
hooks of what a pass reclaimed (`EventStream.crashed`).
"""
