"""`ava sweep`: run a grid of VFM x head x ability set as jobs; `ava sweep status PLAN`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ava.cli.params import AvaOpt, list_callback

app = typer.Typer(invoke_without_command=True, no_args_is_help=False)
_O = typer.Option
GPUS = "GPUs (local)"


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
    jobs: Annotated[
        int | None, _O(help="local: jobs at once (default 1; with --gpus, one per GPU slot).", min=1)
    ] = None,
    device: Annotated[str | None, _O(help="auto, cpu, cuda (passed to every job).")] = None,
    gpus: Annotated[
        str | None,
        _O(
            help="local: each job on its own GPU: all, a count (4) or GPU numbers as nvidia-smi shows them "
            "(0,2,5; one GPU: 3,). GPUs another process fills are skipped.",
            rich_help_panel=GPUS,
        ),
    ] = None,
    jobs_per_gpu: Annotated[
        int | None, _O(help="local: jobs sharing one GPU (default 1).", min=1, rich_help_panel=GPUS)
    ] = None,
    gpus_per_extract: Annotated[
        int | None,
        _O(help="local: GPUs of one extraction, run under torchrun (default 1).", min=1, rich_help_panel=GPUS),
    ] = None,
    gpu_min_free: Annotated[
        float | None,
        _O(
            help="local: skip GPUs with less free memory, GB (default: 90% of each GPU's memory).",
            min=0,
            rich_help_panel=GPUS,
        ),
    ] = None,
    partition: Annotated[str | None, _O(help="slurm: partition.")] = None,
    gpus_per_job: Annotated[int | None, _O(help="slurm: GPUs per job (> 1: torchrun extraction).", min=0)] = None,
    time_min: Annotated[int | None, _O(help="slurm: time limit per job, minutes.", min=1)] = None,
    array_parallelism: Annotated[int | None, _O(help="slurm: array tasks running at once.", min=1)] = None,
    account: Annotated[str | None, _O(help="slurm: account to charge.")] = None,
    cpus_per_job: Annotated[int | None, _O(help="slurm: CPUs per job.", min=1)] = None,
    dry_run: Annotated[
        bool,
        _O(
            "--dry-run",
            help="Write and run nothing: print the jobs (command, what each waits for, whether it would run), each "
            "one's estimated device time and disk, where and when it would run, and the grid's GPU-hours and wall "
            "time (for the GPUs given, even where there are none).",
        ),
    ] = False,
    calibrate: Annotated[
        bool,
        _O(
            "--calibrate", help="Time this machine first (each VFM's forward, a head's step; seconds) for the estimate."
        ),
    ] = False,
    device_kind: Annotated[
        str | None,
        _O(help="The speed table's device to estimate with: nvidia-h100, nvidia-h200, cpu (default: this machine's)."),
    ] = None,
    force: Annotated[
        bool,
        _O(
            "--force",
            help="Train again the jobs whose command changed since they ran (another "
            "ability set, device or cache for the same run directory), replacing "
            "their runs.",
        ),
    ] = False,
    as_json: Annotated[bool, _O("--json", help="Print JSON.")] = False,
) -> None:
    """Plan the grid (VFM x head x ability set), extract each VFM's cache once, then run every cell as its own job
    into OUT/<head>-<vfm> (what `ava report` reads). A VFM's jobs start as soon as its extraction is done. With
    --gpus each job runs on its own GPU(s). Rerunning runs only what is not done (a killed sweep resumes); a job
    whose command changed since it ran is refused, naming what changed, unless --force.

    Example: ava sweep --vfm pixels,random-vit --head knn,probe-linear --ava color,counting --data D --cache C
    --out runs --executor local --gpus all --dry-run
    """
    if ctx.invoked_subcommand is not None:
        return
    from ava.api import run_sweep

    result = run_sweep(
        vfm,
        plan=plan,
        head=head,
        ava=[",".join(ava)] if ava else None,
        data=data,
        cache=cache,
        out=out,
        executor=executor,
        jobs=jobs,
        device=device,
        gpus=gpus,
        jobs_per_gpu=jobs_per_gpu,
        gpus_per_extract=gpus_per_extract,
        gpu_min_free=gpu_min_free,
        slurm=_slurm(partition, gpus_per_job, time_min, array_parallelism, account, cpus_per_job),
        force=force,
        dry_run=dry_run,
        calibrate=calibrate,
        device_kind=device_kind,
        progress=not as_json,
    )
    if as_json:
        typer.echo(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in vars(result).items()}, indent=2))
    elif dry_run:
        print_dry_run(result.jobs, str(result.folder))
        _print_estimate(result.estimate, result.skipped, result.adopted)
    else:
        typer.echo(
            f"plan {result.plan}: {len(result.submitted)} job(s) run or submitted, "
            f"{len(result.skipped)} already done or in flight"
        )
        _print(result.jobs)
    if not dry_run and any(r["state"] in ("failed", "blocked") for r in result.jobs):
        raise typer.Exit(1)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _print_estimate(est: dict[str, Any], skipped: list[str], adopted: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    from ava.cache.plan import size

    console = Console(soft_wrap=True)
    console.print(f"estimate on {est['device']} ({est['speeds']})", highlight=False, markup=False)
    console.print(f"slots: {est['slots']}", highlight=False, markup=False)
    for note in est["notes"]:
        console.print(f"note: {note}", highlight=False, markup=False)
    table = Table("job", "GPUs", "starts", "ends", "device time", "disk", box=None, pad_edge=False)
    for r in sorted(est["jobs"], key=lambda r: (r["start"] is None, r["start"] or 0)):
        table.add_row(
            r["job"],
            ",".join(r["gpus"]) or "-",
            _duration(r["start"]),
            _duration(r["end"]),
            _duration(r["seconds"]),
            "?" if r["bytes"] is None else size(r["bytes"]),
        )
    console.print(table)
    more = f"; {len(skipped)} job(s) done already" if skipped else ""
    more += f"; {len(adopted)} still running from an earlier sweep" if adopted else ""
    console.print(
        f"total: {len(est['jobs'])} job(s), {est['gpu_hours']:.2f} device-hours, wall {_duration(est['wall_s'])}, "
        f"disk {size(est['bytes'])}{more}",
        highlight=False,
        markup=False,
    )


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
        where += f" [GPU {','.join(r['gpus'])}]" if r.get("gpus") else ""
        earlier = "" if r.get("current", True) else " (an earlier plan's)"
        took = ""
        if r.get("elapsed_s") is not None or r.get("estimate_s") is not None:
            took = f" {_duration(r.get('elapsed_s')) if r.get('elapsed_s') is not None else '-'}"
            took += f" (est {_duration(r['estimate_s'])})" if r.get("estimate_s") is not None else ""
        now = f" {r['progress']}" if r.get("progress") else ""
        tail = (f" -> {', '.join(r['results'])}" if r["results"] else "") + (f": {r['error']}" if r["error"] else "")
        console.print(
            f"{r['state']:<9} {r['job']}{earlier}{where}{took}{now} log {r['log'] or '-'}{tail}",
            highlight=False,
            markup=False,
        )


@app.command("status")
def status(
    plan: Annotated[Path, typer.Argument(help="The plan file (OUT/sweep/plan.toml) or the runs directory OUT.")],
    as_json: Annotated[bool, _O("--json", help="Print JSON.")] = False,
) -> None:
    """Each job's state, GPU(s), time taken (running: so far) beside its estimate, progress (running), log path
    and result (or its error in one line)."""
    from ava.api import sweep_status

    result = sweep_status(plan)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(f"plan {result['plan']}: " + ", ".join(f"{n} {s}" for s, n in sorted(result["counts"].items())))
    _print(result["jobs"])
