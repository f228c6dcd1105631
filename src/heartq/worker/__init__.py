"""The worker runtime. See `heartq.worker.runtime` for how its parts fit together."""

from heartq.worker.runtime import Worker

__all__ = ["Worker"]
