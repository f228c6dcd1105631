"""A job's fate: what becomes of a job once one of its attempts ends.

Every way an attempt can end meets its job's policy here, and only here, whoever closes
the attempt: the worker that ran it (its completer), or a reclaimer on any backend (the
lease reclaimer, a liveness probe, startup reconciliation, the worker whose child died). So a job
that raised, timed out, crashed its worker or lost its database is judged by one set of
rules, with one retry policy and one wording of its `dead_reason`.

A job's states (`JobStatus`) and the moves an attempt's end makes::

    queued --claim--> running --+-- succeeded                  -> succeeded
                                +-- failed / timed_out          -> queued after a backoff,
                                |                                  or dead (retries spent,
                                |                                  `Permanent`)
                                +-- crashed                     -> queued (at once the first
                                |                                  time, then after a
                                |                                  backoff), or dead
                                +-- interrupted (not counted)   -> queued in its place, or
                                |                                  dead after 20
                                +-- released (not counted)      -> queued (shutdown; the
                                |                                  store's release statement)
                                +-- snoozed (not counted)       -> queued after the delay
                                |                                  its task asked for
                                |                                  (`heartq.Snooze`); past
                                |                                  `max_snoozes`, a failed
                                |                                  attempt instead
                                +-- cancelled                   -> cancelled; so is a job
                                                                   whose attempt failed,
                                                                   snoozed, crashed, was
                                                                   interrupted or released
                                                                   after a cancel request

How one attempt ended is an `Outcome` (`heartq.model`), the same word in the worker, the
store, the events and the docs; `Outcome.LOST` ("the lease is gone: report nothing") is
the worker's alone and never stored. The modules, one question each:

- `fate`: an attempt its own worker ended: how it ended (`AttemptEnd`), who decides its
  fate (the worker, the store after a crash, nobody once its transaction committed), the
  fate the worker decides (`decide` -> a `Finish`: succeeded, retried, dead, cancelled),
  the `dead_reason` every dead job gets and what is kept of an error (clipped, and the
  line operators read first); and what the store makes of any fate when it lands on the
  job's row as it stands then (a cancel requested meanwhile; attempts that do not
  count), the rules each dialect's FINISH and RELEASE write in SQL.
- `crash`: an attempt someone else closed: how it ended (crashed, or interrupted by a
  database outage: `INFRASTRUCTURE`, `MAX_INTERRUPTIONS`), its job's fate, and what is
  kept of it (its crash context).
- `retry`: whether to retry and after how long (backoff with jitter), and the defaults.

Why one place: these rules used to be spread over the worker, the store and three
modules, with three words for the same ends; a change to one path (a crash) could miss
another (an interruption). The package depends only on the model, the errors, payload
cleaning and time formatting, never on the worker or the store: both call it, and it
can be read, and tested, on its own.
"""
