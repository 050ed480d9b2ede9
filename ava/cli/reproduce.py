"""`ava reproduce`: the paper's protocol for the paper's VFMs, end to end, on the sweep's executors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ava.cli.params import AvaOpt, list_callback

_O = typer.Option


def reproduce(
    vfm: Annotated[
        list[str], _O(help="The paper's VFMs (repeat or comma-separate): siglip2, dinov2 ...", callback=list_callback)
    ],
    data: Annotated[str, _O(help="AVA-Bench dataset directory, split (`ava data import`, then `ava data split`).")],
    cache: Annotated[str, _O(help="Feature cache: a directory or a URL (s3://bucket/prefix).")],
    out: Annotated[str, _O("--out", "-o", help="Runs directory: stage runs, OUT/report, state in OUT/reproduce.")],
    captions: Annotated[
        str | None, _O(help="Stage 1's caption pairs (`ava head import-captions`, e.g. of LLaVA-558K).")
    ] = None,
    instructions: Annotated[
        str | None, _O(help="Stage 2's conversations (`ava head import-instructions`, e.g. of LLaVA-665K).")
    ] = None,
    llm: Annotated[str, _O(help="The LLM (the paper's: qwen2-0.5b).")] = "qwen2-0.5b",
    ava: AvaOpt = None,
    executor: Annotated[str, _O(help="local (processes here) or slurm (submitit).")] = "local",
    jobs: Annotated[int, _O(help="local: jobs at once.", min=1)] = 1,
    device: Annotated[str, _O(help="auto, cpu, cuda (passed to every job).")] = "auto",
    partition: Annotated[str | None, _O(help="slurm: partition.")] = None,
    gpus_per_job: Annotated[int | None, _O(help="slurm: GPUs per job.", min=0)] = None,
    time_min: Annotated[int | None, _O(help="slurm: time limit per job, minutes.", min=1)] = None,
    account: Annotated[str | None, _O(help="slurm: account to charge.")] = None,
    cpus_per_job: Annotated[int | None, _O(help="slurm: CPUs per job.", min=1)] = None,
    epochs: Annotated[int | None, _O(help="Stage 3 epochs (the paper's: 10, 20 for localization).")] = None,
    batch_size: Annotated[int | None, _O(help="Stage 3 global batch (the paper's: 16).")] = None,
    lora_r: Annotated[int | None, _O(help="Stage 3 LoRA rank (the paper's: 128, alpha 2r).")] = None,
    dtype: Annotated[str | None, _O(help="auto (bf16 on GPU), fp32 or bf16, every stage.")] = None,
    max_train: Annotated[
        int | None, _O(help="Cap on training samples per ability, caption pairs and conversations (quick runs).")
    ] = None,
    max_eval: Annotated[int | None, _O(help="Cap on test samples per ability (quick runs).")] = None,
    force: Annotated[
        bool, _O("--force", help="Run again the jobs whose command changed, replacing their runs.")
    ] = False,
    dry_run: Annotated[
        bool, _O("--dry-run", help="Print the jobs (command, what each waits for, state); run and write nothing.")
    ] = False,
    as_json: Annotated[bool, _O("--json", help="Print JSON.")] = False,
) -> None:
    """The paper's protocol, end to end, for the paper's VFMs: extraction, stage 1 (connector alignment) on
    --captions and stage 2 (instruction tuning) on --instructions when given (else the shortcut: stage 3 from the
    LLM as released, named in the output), stage 3 per ability with the paper's settings (`ava head list`), then
    `ava report --paper` into OUT/report with ours - paper per ability, whether the paper's value lies in our 95%
    interval, and every setting that differs from the paper's. Runs on the executors of `ava sweep`; rerunning the
    same command resumes (done jobs are skipped).

    Example: ava reproduce --vfm siglip2,dinov2 --data data/ava --cache cache --out runs/repro --device cuda
    """
    from ava.api import reproduce as run

    slurm = {
        "partition": partition,
        "gpus_per_job": gpus_per_job,
        "time_min": time_min,
        "account": account,
        "cpus_per_job": cpus_per_job,
    }
    result = run(
        vfm=vfm,
        data=data,
        cache=cache,
        out=out,
        captions=captions,
        instructions=instructions,
        llm=llm,
        ava=ava,
        executor=executor,
        jobs=jobs,
        device=device,
        slurm={k: v for k, v in slurm.items() if v is not None},
        epochs=epochs,
        batch_size=batch_size,
        lora_r=lora_r,
        dtype=dtype,
        max_train=max_train,
        max_eval=max_eval,
        force=force,
        dry_run=dry_run,
        progress=not as_json,
    )
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(result), indent=2, default=str))
        return
    _print(result)


def _print(result: Any) -> None:
    from rich.console import Console

    from ava.cli.sweep import print_dry_run
    from ava.report.published_view import print_published

    console = Console(soft_wrap=True)
    for line in result.stages:
        console.print(line, highlight=False, markup=False)
    if result.dry_run is not None:
        print_dry_run(result.dry_run, str(Path(result.plan).parent))
        return
    failed = [r for r in result.jobs if r["state"] in ("failed", "blocked")]
    for r in result.jobs:
        tail = f": {r['error']}" if r["error"] else ""
        console.print(f"{r['state']:<9} {r['job']} log {r['log'] or '-'}{tail}", highlight=False, markup=False)
    report = result.report
    if report is None:
        console.print(
            "no report yet: rerun the same command once the jobs are done (it skips them)",
            highlight=False,
            markup=False,
        )
    else:
        print_published(report, console)
        console.print(f"report: {result.report_dir / 'report.md'} (also .html, .json, .tex)", highlight=False)
    if failed:
        raise typer.Exit(1)
