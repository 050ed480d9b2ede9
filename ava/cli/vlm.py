"""`ava vlm` commands: whole VLMs answering the benchmark's questions (ava.vlm)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ava.cli.params import AvaOpt, ThreadsOpt, threads_setup

app = typer.Typer(no_args_is_help=True)


@app.command("answer")
def answer(
    model: Annotated[str, typer.Option(help="Image-text-to-text checkpoint: hub id or directory.")],
    data: Annotated[Path, typer.Option(help="Dataset directory (split).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Run directory (resumed when it holds this run).")],
    ava: AvaOpt = None,
    split: Annotated[str, typer.Option(help="Split to answer.")] = "test",
    batch_size: Annotated[int, typer.Option(help="Samples per generate call.")] = 8,
    max_new_tokens: Annotated[int, typer.Option(help="Longest reply, in tokens.")] = 32,
    max_samples: Annotated[
        int | None, typer.Option(help="Per ability, only the first N samples (smoke runs).", show_default=False)
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:1 ...")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto (the checkpoint's), fp32, bf16 or fp16.")] = "auto",
    trust_remote_code: Annotated[
        bool, typer.Option("--trust-remote-code", help="Let the checkpoint run its own Python code (off by default).")
    ] = False,
    random_weights: Annotated[
        bool, typer.Option("--random-weights", help="Label the run as random weights (a tiny test checkpoint).")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    threads: ThreadsOpt = None,
) -> None:
    """Answer every question of a split with a VLM (greedy, batched), write the replies sample by sample to OUT
    (re-running resumes), then score them like `ava score`; `ava report OUT ...` shows it as head vlm:<model>.

    Example: ava vlm answer --model llava-hf/llava-1.5-7b-hf --data data/ava-hard --out runs/vlm-llava
    """
    threads_setup(threads)
    from ava.api import vlm_answer
    from ava.cli.score import score_table  # the same table as `ava score`

    result = vlm_answer(
        model=model,
        data=data,
        out=out,
        ava=ava,
        split=split,
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        max_samples=max_samples,
        device=device,
        dtype=dtype,
        trust_remote_code=trust_remote_code,
        random_weights=random_weights,
        progress=not quiet,
    )
    from types import SimpleNamespace

    from rich.console import Console

    console = Console()
    console.print(score_table(SimpleNamespace(results=result.results)))  # type: ignore[arg-type]
    if random_weights:
        console.print("[yellow]random weights[/]: a control or a test, not a real result")
    console.print(
        f"{result.answered} answered, {result.resumed} already there; run directory: {result.run_dir}", highlight=False
    )
