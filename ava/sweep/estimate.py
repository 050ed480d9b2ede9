"""A sweep's cost before it runs: each job's estimated device time and disk (:mod:`ava.cost`), and the grid's
GPU-hours and wall time on the slots given, by simulating the executor's own schedule (:mod:`ava.sweep.schedule`:
the same priorities, the same rule for which job starts on which free slot) with the estimated durations.

Each job's time is its estimate alone, longer where it shares the CPUs with jobs running at once (measured by
``--calibrate``, or assumed shared evenly); the GPU-hours are the sum of every job's time on each GPU it holds (on
a CPU sweep: device hours of the CPU slots); the wall time is when the simulated last job ends. Jobs done in an
earlier sweep cost nothing; a job whose shapes are not known before it runs (a VFM whose parameters are not
declared) counts zero and is named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ava.cost import CostError, Estimate, Speeds, data_shape, extract_estimate, head_estimate, vfm_shape
from ava.errors import AvaError
from ava.sweep.jobs import DONE, Job
from ava.sweep.schedule import Schedule


@dataclass
class SweepEstimate:
    """The estimate of the jobs a sweep would run: per job its seconds, bytes and place in the simulated schedule
    (``start``/``end`` in seconds from the sweep's start, the GPUs it would hold), and the totals."""

    device: str
    speeds: str  # where the figures come from
    slots: str  # the slots simulated, in words
    jobs: list[dict[str, Any]] = field(default_factory=list)
    gpu_hours: float = 0.0
    wall_s: float = 0.0
    bytes: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "speeds": self.speeds,
            "slots": self.slots,
            "gpu_hours": round(self.gpu_hours, 6),
            "wall_s": round(self.wall_s, 2),
            "bytes": self.bytes,
            "notes": self.notes,
            "jobs": self.jobs,
        }


def job_estimates(
    plan: Any, jobs: list[Job], speeds: Speeds, threads: int | None = None
) -> tuple[dict[str, Estimate | None], list[str]]:
    """Each job's estimate alone (None where none can be made), and a line for each reason one could not;
    ``threads``: the CPU threads each job is given (None: the machine's)."""
    notes: list[str] = []
    if not getattr(plan, "data", None):
        return dict.fromkeys([j.name for j in jobs]), ["no estimate: the plan names no dataset"]
    try:
        data = data_shape(plan.data)
    except AvaError as e:  # a dataset the jobs themselves will refuse: no estimate, the reason said
        return dict.fromkeys([j.name for j in jobs]), [f"no estimate: {e}"]
    shapes: dict[str, Any] = {}
    for name in dict.fromkeys(j.vfm for j in jobs):
        try:
            shapes[name] = vfm_shape(name)
        except CostError as e:
            notes.append(str(e))
    out: dict[str, Estimate | None] = {}
    for job in jobs:
        vfm = shapes.get(job.vfm)
        try:
            if vfm is None:
                out[job.name] = None
            elif job.kind == "extract":
                gpus = job.gpus if getattr(plan, "gpus", None) else 1
                out[job.name] = extract_estimate(vfm, data, speeds, gpus=gpus, threads=threads)
            elif job.kind == "train" and job.head:
                out[job.name] = head_estimate(job.head, vfm, data, job.ava, speeds, llm=_llm(job), threads=threads)
            else:
                out[job.name] = None
                notes.append(f"no estimate for job {job.name} (a {job.kind} job)")
        except CostError as e:
            out[job.name] = None
            notes.append(f"no estimate for job {job.name}: {e}")
    return out, notes


def _llm(job: Job) -> str:
    """The LLM a head job's command names (``--llm``), else the LLM head's default."""
    argv = job.argv
    return argv[argv.index("--llm") + 1] if "--llm" in argv[:-1] else "qwen2-0.5b"


def simulate(
    todo: list[Job],
    slots: Any,
    estimates: dict[str, Estimate | None],
    finished: dict[str, str] | None = None,
    share: Callable[[int], float] | None = None,
) -> list[dict[str, Any]]:
    """The executor's schedule of ``todo`` on ``slots`` with the estimated durations: per job its start, end and
    GPUs, in the order the jobs would start. ``share(n)``: how much longer each of ``n`` jobs running at once takes
    than alone (on a CPU they share its cores; on GPUs, 1): every running job advances at that pace, so a job that
    overlaps others takes longer than one that runs alone at the end."""

    def seconds(job: Job) -> float:
        est = estimates.get(job.name)
        return est.seconds if est is not None else 0.0

    share = share or (lambda n: 1.0)
    schedule = Schedule(todo, slots, finished, cost=seconds)
    by_name = {j.name: j for j in todo}
    clock, left, rows = 0.0, {}, {}  # left: each running job's work still to do, in seconds alone
    while schedule.active:
        for job, lease in schedule.startable():
            left[job.name] = seconds(job)
            rows[job.name] = {"job": job.name, "start": clock, "end": None, "gpus": list(lease.gpus)}
        if not left:
            for job, reason in schedule.stuck():
                rows[job.name] = {"job": job.name, "start": None, "end": None, "gpus": [], "error": reason}
            break
        pace = 1.0 / share(len(left))
        step = min(left.values()) / pace
        clock += step
        for name in left:
            left[name] -= step * pace
        for name in [n for n, w in left.items() if w <= 1e-9]:
            del left[name]
            rows[name]["end"] = clock
            schedule.end(by_name[name], DONE)
    return list(rows.values())


def estimate(
    plan: Any,
    todo: list[Job],
    slots: Any,
    speeds: Speeds,
    *,
    finished: dict[str, str] | None = None,
    notes: list[str] | None = None,
    running: dict[str, float] | None = None,
    jobs: list[Job] | None = None,
) -> SweepEstimate:
    """The estimate of running ``todo`` on ``slots`` with ``speeds`` (see the module's docstring). ``running``:
    jobs found running (started by an earlier driver), by name, with the seconds they have left: they hold their
    slots first and what waits on them starts after them; ``jobs``: every job of the plan (where those are)."""
    running = running or {}
    adopted = [j for j in jobs or [] if j.name in running]
    estimates, why = job_estimates(plan, todo, speeds, slots.threads)
    estimates.update({name: Estimate(left, 0) for name, left in running.items()})
    todo = [*adopted, *todo]
    result = SweepEstimate(speeds.kind, speeds.source, slots.describe(), notes=[*(notes or []), *why])
    most, measured = speeds.stretch(slots.units, slots.threads)
    if most > 1.05:
        how = "measured" if measured else "not measured (--calibrate measures it): the CPUs shared evenly"
        result.notes.append(
            f"jobs at once share this machine's CPUs: {slots.units} at once each take x{most:.2f} the time "
            f"alone ({how})"
        )
    placed = {
        r["job"]: r
        for r in simulate(todo, slots, estimates, finished, share=lambda n: speeds.stretch(n, slots.threads)[0])
    }
    by_name = {j.name: j for j in todo}
    for name, row in placed.items():
        est = estimates.get(name)
        held = max(1, len(row["gpus"]))
        took = row["end"] - row["start"] if est is not None and row["end"] is not None else None
        result.jobs.append(
            {
                **row,
                "start": None if row["start"] is None else round(row["start"], 2),
                "end": None if row["end"] is None else round(row["end"], 2),
                "kind": by_name[name].kind,
                "running": name in running,  # found running: its time left
                "seconds": None if took is None else round(took, 2),  # beside the jobs running with it
                "alone_s": None if est is None else round(est.seconds, 2),
                "bytes": None if est is None else est.bytes,
                "parts": None if est is None else est.as_dict()["parts"],
            }
        )
        if took is not None:
            result.gpu_hours += took * held / 3600
            result.bytes += est.bytes
    ends = [r["end"] for r in placed.values() if r.get("end") is not None]
    result.wall_s = max(ends, default=0.0)
    return result
