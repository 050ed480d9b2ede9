"""`ava demo`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ava.cli.params import AvaOpt, ThreadsOpt, checked, split_list, threads_setup


def demo(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for data/, cache/, runs/, report/.")] = Path(
        "ava-out/demo"
    ),
    per_ava: Annotated[
        int | None,
        typer.Option(help="Synthetic samples per ability (default 200; 30 with --quick).", callback=checked("per_ava")),
    ] = None,
    size: Annotated[
        int | None,
        typer.Option(help="Synthetic image side in pixels (default 160; 96 with --quick).", callback=checked("size")),
    ] = None,
    ava: AvaOpt = None,
    head: Annotated[
        list[str] | None,
        typer.Option(
            "--head",
            help="Feature heads (repeat or comma-separate); default: knn, probe-linear, probe-attn.",
            callback=split_list,
        ),
    ] = None,
    llm: Annotated[str, typer.Option(help="LLM of the LLM head; '' for none.")] = "tiny-random-qwen2",
    llm_ava: Annotated[
        list[str] | None,
        typer.Option(
            "--llm-ava",
            help="Abilities of the LLM head (repeat or comma-separate); default: color, spatial.",
            callback=split_list,
        ),
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="Smaller and faster: fewer samples, no attentive probe, LLM on one ability.")
    ] = False,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of data and heads.")] = 0,
    threads: ThreadsOpt = None,
) -> None:
    """The whole pipeline offline in minutes: synthetic data, features of `pixels` (the floor), `random-vit` (random
    weights, a control) and `effnet-lite0` (real ImageNet weights: a trained CNN, not a paper VFM), kNN/probe heads
    on every ability, a tiny random LLM head on a few, and the report.

    Re-running resumes: finished stages are skipped. Example: ava demo --out ava-out/demo
    """
    from ava.demo import DemoConfig, run_demo

    threads_setup(threads)

    run_demo(
        DemoConfig(
            out=str(out),
            per_ava=per_ava,
            size=size,
            ava=ava or None,
            heads=head or None,
            llm=llm or None,
            llm_ava=llm_ava or None,
            quick=quick,
            device=device,
            seed=seed,
        )
    )
