"""Which job starts when: list scheduling over the jobs' graph, shared by the local executor (real processes) and
the dry run's simulation (estimated durations), so that the plan a dry run prints is the order the executor keeps.

A job is *ready* when every job it waits for is done. Whenever slots are free, the ready jobs are started in
priority order, each on the first free slots that fit it (a job needing more GPUs than are free lets a smaller
ready job start first: no slot idles while some job could run). The priority is a job's *bottom level*: its own
cost plus the most expensive chain of jobs waiting on it (a long extraction that four trainings wait for starts
before a short training), ties in list order; without costs every job counts 1, so jobs that more work waits for
go first. A job whose dependency failed, or was blocked itself, is blocked at once with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ava.sweep.jobs import BLOCKED, DONE, FAILED, Job, blocked_error, dependents, topological


def bottom_levels(jobs: list[Job], cost: Callable[[Job], float] | None = None) -> dict[str, float]:
    """Job name -> its cost plus the largest bottom level among the jobs that wait for it."""
    waits = dependents(jobs)
    level: dict[str, float] = {}
    for job in reversed(topological(jobs)):
        below = [level[d] for d in waits.get(job.name, []) if d in level]
        level[job.name] = (cost(job) if cost else 1.0) + max(below, default=0.0)
    return level


class Schedule:
    """The state of one run of ``todo``: waiting, running, ended; which job may start on which slots next.

    ``finished``: the state of jobs outside ``todo`` that some job may wait for (done in an earlier sweep).
    ``slots``: an object with ``take(job) -> lease | None`` and ``give(lease)`` (:class:`ava.sweep.slots.Slots`).
    """

    def __init__(
        self,
        todo: list[Job],
        slots: Any,
        finished: dict[str, str] | None = None,
        cost: Callable[[Job], float] | None = None,
        errors: Callable[[str], str | None] | None = None,
    ) -> None:
        self.slots = slots
        self.outcome: dict[str, str] = dict(finished or {})
        levels = bottom_levels(todo, cost)
        rank = {j.name: i for i, j in enumerate(todo)}
        self.waiting = sorted(todo, key=lambda j: (-levels[j.name], rank[j.name]))
        self.running: dict[str, Any] = {}  # name -> lease
        self._errors = errors or (lambda name: None)
        self._reasons: dict[str, str] = {}

    def error_of(self, name: str) -> str | None:
        """The error line of an ended job (the reason a blocked one was given here, else the caller's record)."""
        return self._reasons.get(name) or self._errors(name)

    def blocked(self) -> list[tuple[Job, str]]:
        """The waiting jobs that can never run now (a dependency failed or is blocked), removed from the waiting
        list, each with its reason; repeated until no more are found (chains block in one call)."""
        out: list[tuple[Job, str]] = []
        found = True
        while found:
            found = False
            for job in list(self.waiting):
                bad = next((a for a in job.waits_for() if self.outcome.get(a) in (FAILED, BLOCKED)), None)
                if bad is None:
                    continue
                reason = blocked_error(job, bad, self.outcome[bad], self.error_of(bad))
                self.waiting.remove(job)
                self.outcome[job.name] = BLOCKED
                self._reasons[job.name] = reason
                out.append((job, reason))
                found = True
        return out

    def startable(self) -> list[tuple[Job, Any]]:
        """Ready jobs, in priority order, each with the lease of the slots it takes (taken now)."""
        out = []
        for job in list(self.waiting):
            if not all(self.outcome.get(a) == DONE for a in job.waits_for()):
                continue
            lease = self.slots.take(job)
            if lease is None:
                continue
            self.waiting.remove(job)
            self.running[job.name] = lease
            out.append((job, lease))
        return out

    def hold(self, job: Job, lease: Any) -> None:
        """Count ``job`` as running on ``lease`` (a job already running when this schedule began)."""
        self.waiting = [j for j in self.waiting if j.name != job.name]
        self.running[job.name] = lease

    def end(self, job: Job, result: str) -> None:
        """``job`` ended with ``result`` (done or failed): its slots are free again."""
        lease = self.running.pop(job.name, None)
        if lease is not None:
            self.slots.give(lease)
        self.outcome[job.name] = result

    def stuck(self) -> list[tuple[Job, str]]:
        """When nothing runs and nothing can start: the waiting jobs and why (a dependency never run here, or
        more slots than there are), removed from the waiting list."""
        out = []
        for job in self.waiting:
            missing = [a for a in job.waits_for() if self.outcome.get(a) != DONE]
            if missing:
                reason = f"waits for {', '.join(missing)}, which did not run in this sweep"
            else:
                reason = self.slots.why_not(job)
            self.outcome[job.name] = BLOCKED
            self._reasons[job.name] = reason
            out.append((job, reason))
        self.waiting = []
        return out

    @property
    def active(self) -> bool:
        return bool(self.waiting or self.running)
