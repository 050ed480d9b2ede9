"""The jobs of a sweep plan and their state on disk.

One extraction job per VFM (``extract-<vfm>``), then one training job per (VFM, head, ability set)
(``<head>-<vfm>[-<abilities>]``, also the name of its run directory under the plan's ``out``: what `ava report`
reads). A job is a command line (``python -m ava ...``), so every executor runs the same thing a user would type.

Jobs form a graph: ``Job.needs`` names the extraction a training job waits for and ``Job.after`` any other jobs
(a chain extraction -> stage 1 -> stage 2 -> ...; :meth:`Job.waits_for` gives both). An executor starts a job once
every job it waits for is done, and marks it ``blocked`` (never run, its error naming the dependency) when one
failed or was blocked itself; nothing else waits, so one VFM's failure stops only that VFM's jobs.

Each job's state is one JSON file, ``OUT/sweep/jobs/<name>.json``, written atomically: ``state`` (``pending``,
``submitted``, ``running``, ``done``, ``failed``, ``blocked``), the log path, the SLURM job id where there is one, the
exit code and, for a failed job, its error in one line.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ava.errors import redact
from ava.jsonfile import read_json
from ava.sweep.plan import SweepError, SweepPlan, reads_cache, safe

PENDING, SUBMITTED, RUNNING, DONE, FAILED, BLOCKED = "pending", "submitted", "running", "done", "failed", "blocked"
FINISHED = (DONE,)


@dataclass
class Job:
    name: str
    kind: str  # "extract" or "train"
    vfm: str
    argv: list[str]
    head: str | None = None
    ava: list[str] = field(default_factory=list)
    run_dir: str | None = None
    needs: str | None = None  # the extraction job this one waits for
    after: list[str] = field(default_factory=list)  # other jobs it waits for (a chain of stages: stage 1 -> 2 -> 3)
    gpus: int = 1  # GPUs it takes in a sweep on GPUs; more than one: its command runs under torchrun

    def waits_for(self) -> list[str]:
        """Every job this one starts after (its extraction and ``after``)."""
        return [n for n in (self.needs, *self.after) if n]


def ava_command(*args: str) -> list[str]:
    """A job's command line: ``python -m ava ARGS`` with this interpreter (what a user would type)."""
    return [sys.executable, "-m", "ava", *args]


def plan_jobs(plan: SweepPlan) -> list[Job]:
    """Extraction jobs first (one per VFM, when a head reads the cache), then the training jobs, in plan order."""
    out: list[Job] = []
    cached = {head: reads_cache(head) for head in plan.head}
    for vfm in plan.vfm if any(cached.values()) else ():
        out.append(
            Job(
                f"extract-{safe(vfm)}",
                "extract",
                vfm,
                ava_command(
                    "cache",
                    "extract",
                    "--vfm",
                    vfm,
                    "--data",
                    plan.data,
                    "--cache",
                    plan.cache,
                    "--device",
                    plan.device,
                    "--quiet",
                ),
                gpus=plan.gpus_per_extract,
            )
        )
    several = len(plan.ava) > 1
    for vfm in plan.vfm:
        for head in plan.head:
            for abilities in plan.ava:
                suffix = f"-{'+'.join(abilities) or 'all'}" if several else ""
                name = f"{head}-{safe(vfm)}{suffix}"
                run_dir = str(Path(plan.out) / name)
                cache = ["--cache", plan.cache] if cached[head] else []
                argv = ava_command(
                    "head",
                    "train",
                    "--head",
                    head,
                    "--vfm",
                    vfm,
                    "--data",
                    plan.data,
                    *cache,
                    "--out",
                    run_dir,
                    "--device",
                    plan.device,
                )
                if abilities:
                    argv += ["--ava", ",".join(abilities)]
                needs = f"extract-{safe(vfm)}" if cached[head] else None
                out.append(Job(name, "train", vfm, argv, head, list(abilities), run_dir, needs))
    return out


def check_graph(jobs: list[Job], known: set[str] | frozenset[str] = frozenset()) -> None:
    """Refuse a job that waits for a job neither in ``jobs`` nor ``known`` (jobs outside them, e.g. done in an
    earlier sweep), and a cycle (no job of it could ever start), naming the jobs."""
    names = {j.name for j in jobs}
    if len(names) != len(jobs):
        twice = next(j.name for i, j in enumerate(jobs) if j.name in {k.name for k in jobs[:i]})
        raise SweepError(f"sweep jobs: two jobs are named {twice!r}")
    for job in jobs:
        missing = [a for a in job.waits_for() if a not in names and a not in known]
        if missing:
            raise SweepError(f"sweep jobs: {job.name} waits for {', '.join(missing)}, which is no job of this sweep")
    order = topological(jobs)
    if len(order) < len(jobs):
        left = [j.name for j in jobs if j.name not in {o.name for o in order}]
        raise SweepError(f"sweep jobs: {', '.join(left)} wait for each other in a circle (none could start)")


def topological(jobs: list[Job]) -> list[Job]:
    """``jobs`` ordered so that each comes after the jobs of ``jobs`` it waits for (ties kept in list order); the
    jobs of a cycle are left out."""
    by_name = {j.name: j for j in jobs}
    placed: set[str] = set()
    out: list[Job] = []
    progressed = True
    while progressed:
        progressed = False
        for job in jobs:
            if job.name not in placed and all(a in placed or a not in by_name for a in job.waits_for()):
                placed.add(job.name)
                out.append(job)
                progressed = True
    return out


def dependents(jobs: list[Job]) -> dict[str, list[str]]:
    """Job name -> the names of the jobs that wait for it directly."""
    out: dict[str, list[str]] = {j.name: [] for j in jobs}
    for job in jobs:
        for a in job.waits_for():
            out.setdefault(a, []).append(job.name)
    return out


def blocked_error(job: Job, dependency: str, state: str, why: str | None) -> str:
    """Why ``job`` is blocked: the job it waits for that failed (or was blocked itself), and that one's error line."""
    what = "its extraction" if dependency == job.needs else "the job it waits for,"
    line = f"{what} {dependency} {'failed' if state == FAILED else 'is ' + state}: {why or 'no error line'}"
    return line if len(line) <= 400 else line[:397] + "..."


def torchrun(argv: list[str], processes: int) -> list[str]:
    """``python -m ava ...`` as one process per GPU under torchrun on this node (``ava cache extract`` splits its
    rows among the ranks, each writing its own shards)."""
    return [argv[0], "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", *argv[1:]]


class JobState:
    """The state files of a plan's jobs (``OUT/sweep/jobs``), their logs, and what a local job's own process
    writes beside them: its exit status (``OUT/sweep/exits``) and its progress (``OUT/sweep/progress``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder / "jobs"
        self.logs = folder / "logs"
        self.exits = folder / "exits"
        self.progress = folder / "progress"

    def log(self, job: Job) -> Path:
        return self.logs / f"{job.name}.log"

    def exit_file(self, job: Job) -> Path:
        return self.exits / f"{job.name}.json"

    def progress_file(self, job: Job) -> Path:
        return self.progress / f"{job.name}.json"

    def read(self, job: Job) -> dict[str, Any]:
        try:
            return read_json(self.folder / f"{job.name}.json", encoding="utf-8")
        except (FileNotFoundError, ValueError):
            return {"name": job.name, "state": PENDING}

    def read_all(self) -> list[dict[str, Any]]:
        """Every job record in the folder (jobs of earlier plans too), by name."""
        out = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                record = read_json(path, encoding="utf-8")
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and record.get("name"):
                out.append(record)
        return out

    def read_name(self, name: str) -> dict[str, Any]:
        return self.read(Job(name, "", "", []))

    def write(self, job: Job, **fields: Any) -> dict[str, Any]:
        from ava.data.format import atomic_write_text

        self.folder.mkdir(parents=True, exist_ok=True)
        record = {
            **self.read(job),
            "name": job.name,
            "kind": job.kind,
            "job": asdict(job),
            **fields,
            "updated": time.time(),
        }
        atomic_write_text(self.folder / f"{job.name}.json", json.dumps(record, indent=2))
        return record


def error_line(log: Path | str | None) -> str:
    """The line of a job's log that says why it failed: ava's own ``error:`` line, else the last non-empty line."""
    if not log:
        return "no log"
    try:
        text = Path(log).read_text(encoding="utf-8", errors="replace")
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    except FileNotFoundError:
        return f"no log at {log}"
    errors = [ln for ln in lines if ln.startswith("error:") or "Error:" in ln]
    line = redact((errors or lines or ["(empty log)"])[-1])
    return line if len(line) <= 300 else line[:297] + "..."


def result_files(job: Job) -> list[str]:
    """The results files a finished training job wrote into its run directory."""
    if not job.run_dir or not Path(job.run_dir).is_dir():
        return []
    return sorted(str(p) for p in Path(job.run_dir).glob("results_*.json"))
