"""The operator's read model: what the command line, the dashboard and the metrics show
about jobs, attempts, workers and queues, computed once here from what the store reads,
so that no two screens can disagree on a figure. Each screen keeps only its presentation
(rich tables, HTML, Prometheus families).

- `heartq.inspect.attempts`: an attempt's timing (duration, last sign of life, detection
  delay) and shown state (`claimed` while a job claimed ahead has not started it).
- `heartq.inspect.states`: the state a job is shown in (`claimed` for a job claimed
  ahead, not `running`), and the store's filters for it.
- `heartq.inspect.jobs`: jobs in their shown state, listed and filtered by it; one job
  as an operator reads it (its worker's liveness, its attempts timed).
- `heartq.inspect.fleet`: the workers as shown (heartbeat age, `gone`, jobs running and
  claimed ahead).
- `heartq.inspect.limits`: the concurrency and rate keys in use, and which are at their
  limit.
- `heartq.inspect.fairness`: each queue's fairness keys in use (jobs queued and running,
  weight), the busiest first.
- `heartq.inspect.stats`: jobs by queue and state, and the queue at a glance.
"""
