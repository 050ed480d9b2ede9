"""Run a reproduction's jobs on the sweep's executors (:func:`ava.sweep.run.run_jobs`: local processes or SLURM,
resumable, done jobs skipped) and read back its report: per ability ours, the paper's, the difference and whether the
paper's value lies in our 95% interval, and every setting that differs from the paper's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ava.reproduce.plan import PLAN_FILE, REPORT, ReproducePlan, check_plan, make_jobs, write_plan
from ava.sweep.run import job_status, preview, run_jobs


def plan_jobs(plan: ReproducePlan) -> list[Any]:
    """The plan checked, and its jobs (nothing is written)."""
    return make_jobs(plan, check_plan(plan))


def reproduce(plan: ReproducePlan, *, force: bool = False, progress: bool = False, dry: bool = False) -> dict[str, Any]:
    """Check the plan, then run (``local``) or submit (``slurm``) every job that is not done (``dry``: only say what
    would run, writing nothing). Returns ``{"plan", "stages": [lines], "jobs": rows, "submitted", "skipped",
    "report": report.json's content or None (not made yet)}``; ``dry`` gives ``{"plan", "stages", "dry_run": rows}``.
    """
    jobs = plan_jobs(plan)
    path = str(plan.folder / PLAN_FILE)
    if dry:
        return {"plan": path, "stages": plan.stages(), "dry_run": preview(jobs, plan.folder)}
    ran = run_jobs(jobs, plan, force=force, progress=progress, before=lambda: write_plan(plan))
    status = job_status(jobs, plan.folder, path)
    return {"plan": path, "stages": plan.stages(), **ran, "jobs": status["jobs"], "report": read_report(plan)}


def read_report(plan: ReproducePlan) -> dict[str, Any] | None:
    """The reproduction's report.json (``OUT/report``), once its report job has written it."""
    path = Path(plan.out) / REPORT / "report.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))
