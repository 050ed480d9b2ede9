"""`ava sweep`: run a grid of VFM x head x ability set as jobs; `ava sweep status PLAN`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ava.cli.params import AvaOpt, list_callback

app = typer.Typer(invoke_without_command=True, no_args_is_help=False)
_O = typer.Option


def _slurm(
    partition: str | None,
    gpus: int | None,
    time_min: int | None,
    array: int | None,
    account: str | None,
    cpus: int | None,
) -> dict[str, Any]:
    fields = {
        "partition": partition,
        "gpus_per_job": gpus,
        "time_min": time_min,
        "array_parallelism": array,
        "account": account,
        "cpus_per_job": cpus,
    }
    return {k: v for k, v in fields.items() if v is not None}


@app.callback()
def sweep(
    ctx: typer.Context,
    vfm: Annotated[list[str] | None, _O(help="VFMs (repeat or comma-separate).", callback=list_callback)] = None,
    head: Annotated[
        list[str] | None,
        _O(help="Heads (repeat or comma-separate); default: probe-linear, probe-attn, knn.", callback=list_callback),
    ] = None,
    ava: AvaOpt = None,
    data: Annotated[str | None, _O(help="Dataset directory (already split).")] = None,
    cache: Annotated[str | None, _O(help="Feature cache: a directory or a URL (s3://bucket/prefix).")] = None,
    out: Annotated[str | None, _O("--out", "-o", help="Runs directory; the plan and job logs go to OUT/sweep.")] = None,
    plan: Annotated[Path | None, _O("--plan", help="TOML plan file; options override its fields.")] = None,
    executor: Annotated[str | None, _O(help="local (processes here) or slurm (submitit).")] = None,
    jobs: Annotated[int | None, _O(help="local: jobs at once (default 1).", min=1)] = None,
    device: Annotated[str | None, _O(help="auto, cpu, cuda (passed to every job).")] = None,
    partition: Annotated[str | None, _O(help="slurm: partition.")] = None,
    gpus_per_job: Annotated[int | None, _O(help="slurm: GPUs per job (> 1: torchrun extraction).", min=0)] = None,
    time_min: Annotated[int | None, _O(help="slurm: time limit per job, minutes.", min=1)] = None,
    array_parallelism: Annotated[int | None, _O(help="slurm: array tasks running at once.", min=1)] = None,
    account: Annotated[str | None, _O(help="slurm: account to charge.")] = None,
    cpus_per_job: Annotated[int | None, _O(help="slurm: CPUs per job.", min=1)] = None,
    force: Annotated[
        bool,
        _O(
            "--force",
            help="Train again the jobs whose command changed since they ran (another "
            "ability set, device or cache for the same run directory), replacing "
            "their runs.",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        _O(
            "--dry-run", help="Print the jobs (command, what each waits for, state, whether it would run); run nothing."
        ),
    ] = False,
    as_json: Annotated[bool, _O("--json", help="Print JSON.")] = False,
) -> None:
    """Plan the grid (VFM x head x ability set), extract each VFM's cache once, then run every cell as its own job
    into OUT/<head>-<vfm> (what `ava report` reads). Rerunning submits only what is missing or failed; a job whose
    command changed since it ran is refused, naming what changed, unless --force.

    Example: ava sweep --vfm pixels,random-vit --head knn,probe-linear --ava color,counting --data D --cache C
    --out runs --executor local --jobs 2
    """
    if ctx.invoked_subcommand is not None:
        return
    from ava.sweep.plan import load_plan, make_plan
    from ava.sweep.run import sweep as run_sweep

    fields = {
        "vfm": vfm,
        "head": head,
        "ava": [",".join(ava)] if ava else None,
        "data": data,
        "cache": cache,
        "out": out,
        "executor": executor,
        "jobs": jobs,
        "device": device,
    }
    slurm = _slurm(partition, gpus_per_job, time_min, array_parallelism, account, cpus_per_job)
    the_plan = load_plan(plan, **fields, slurm=slurm) if plan else make_plan({**fields, "slurm": slurm})
    if dry_run:
        from ava.sweep.jobs import plan_jobs
        from ava.sweep.run import dry_run as plan_rows

        rows = plan_rows(plan_jobs(the_plan), the_plan.folder)
        typer.echo(json.dumps(rows, indent=2)) if as_json else print_dry_run(rows, str(the_plan.folder))
        return
    result = run_sweep(the_plan, force=force, progress=not as_json)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(
        f"plan {result['plan']}: {len(result['submitted'])} job(s) run or submitted, "
        f"{len(result['skipped'])} already done or in flight"
    )
    _print(result["jobs"])
    if any(r["state"] in ("failed", "blocked") for r in result["jobs"]):
        raise typer.Exit(1)


def print_dry_run(rows: list[dict[str, Any]], folder: str) -> None:
    """The jobs a run would make (`--dry-run` of `ava sweep` and `ava reproduce`): one line each with its state and
    what it waits for, then its command."""
    from rich.console import Console

    console = Console(soft_wrap=True)
    todo = sum(r["runs"] for r in rows)
    console.print(
        f"{len(rows)} job(s), {todo} would run, {len(rows) - todo} done or in flight (state kept in {folder}); "
        "nothing was run or written",
        highlight=False,
        markup=False,
    )
    for r in rows:
        after = f" after {', '.join(r['after'])}" if r["after"] else ""
        what = "run " if r["runs"] else "skip"
        console.print(f"{what} {r['job']} [{r['kind']}, {r['state']}]{after}", highlight=False, markup=False)
        console.print(f"     $ {r['command']}", highlight=False, markup=False)


def _print(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console

    console = Console(soft_wrap=True)
    for r in rows:
        where = f" [slurm {r['slurm_id']}]" if r.get("slurm_id") else ""
        earlier = "" if r.get("current", True) else " (an earlier plan's)"
        tail = (f" -> {', '.join(r['results'])}" if r["results"] else "") + (f": {r['error']}" if r["error"] else "")
        console.print(
            f"{r['state']:<9} {r['job']}{earlier}{where} log {r['log'] or '-'}{tail}", highlight=False, markup=False
        )


@app.command("status")
def status(
    plan: Annotated[Path, typer.Argument(help="The plan file (OUT/sweep/plan.toml) or the runs directory OUT.")],
    as_json: Annotated[bool, _O("--json", help="Print JSON.")] = False,
) -> None:
    """Each job's state, log path and result (or its error in one line)."""
    from ava.sweep.plan import load_plan
    from ava.sweep.run import status as sweep_status

    result = sweep_status(load_plan(plan))
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(f"plan {result['plan']}: " + ", ".join(f"{n} {s}" for s, n in sorted(result["counts"].items())))
    _print(result["jobs"])
