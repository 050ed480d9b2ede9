"""The jobs of a sweep plan and their state on disk.

One extraction job per VFM (``extract-<vfm>``), then one training job per (VFM, head, ability set)
(``<head>-<vfm>[-<abilities>]``, also the name of its run directory under the plan's ``out``: what `ava report`
reads). A job is a command line (``python -m ava ...``), so every executor runs the same thing a user would type.

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
from ava.sweep.plan import SweepPlan, reads_cache, safe

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


class JobState:
    """The state files of a plan's jobs (``OUT/sweep/jobs``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder / "jobs"
        self.logs = folder / "logs"

    def log(self, job: Job) -> Path:
        return self.logs / f"{job.name}.log"

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
