"""`ava data synth` and `ava data preview`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ava.cli.params import AvaOpt, DataArg, DataOpt, checked, dataset_dir


def synth(
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset directory to write.")],
    per_ava: Annotated[
        int | None, typer.Option("--per-ava", help="Samples per ability (default 100).", callback=checked("per_ava"))
    ] = None,
    ava: AvaOpt = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed; same seed and options give the same bytes.")] = None,
    size: Annotated[
        int | None, typer.Option("--size", help="Image side in pixels (default 384).", callback=checked("size"))
    ] = None,
    difficulty: Annotated[
        str | None, typer.Option("--difficulty", help="easy | medium | hard: noise, clutter, object size.")
    ] = None,
    test_frac: Annotated[
        float | None,
        typer.Option("--test-frac", help="Test fraction per class/bin (0.2).", callback=checked("test_frac")),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", help="Worker processes (default min(2, cpus)).", callback=checked("workers")),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing dataset at --out.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", hidden=True, help="Deprecated: --force.")] = False,
    config: Annotated[Path | None, typer.Option("--config", help="TOML file with SynthConfig fields.")] = None,
) -> None:
    """Generate the built-in synthetic AVA suite (all 14 abilities, exact labels, already split 80/20)."""
    from rich.console import Console

    from ava.api import synthesize

    result = synthesize(
        out,
        per_ava=per_ava,
        ava=ava or None,
        seed=seed,
        size=size,
        difficulty=difficulty,
        test_frac=test_frac,
        workers=workers,
        force=force or overwrite,
        config=config,
        progress=True,
    )
    if result.reused:
        Console().print(f"{result.path} already holds this synthetic set (same settings): nothing to do")
    else:
        Console().print(f"wrote synthetic dataset to [bold]{result.path}[/]")


def preview(
    ava: Annotated[str, typer.Option("--ava", help="Ability key to preview.")],
    data_arg: DataArg = None,
    data: DataOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG file to write.")] = Path("sheet.png"),
    n: Annotated[int, typer.Option("--n", help="Number of samples.", callback=checked("n"))] = 16,
    split: Annotated[str | None, typer.Option("--split", help="Only this split (train/test).")] = None,
) -> None:
    """Write a contact sheet of samples with their question and answer, to check a dataset by eye."""
    data = dataset_dir(data, data_arg)
    from rich.console import Console

    from ava.synth.preview import contact_sheet

    path = contact_sheet(data, ava, out, n=n, split=split)
    Console().print(f"wrote {path}")
