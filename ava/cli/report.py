"""`ava report`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def report(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (each with run.json and results_<split>.json).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for report.md/.json/.tex/.html and plots/.")],
    split: Annotated[str, typer.Option(help="Which results_<split>.json of each run to report.")] = "test",
    allow_mixed: Annotated[
        bool, typer.Option("--allow-mixed", help="Show tables whose runs were scored on different samples (marked).")
    ] = False,
    n_boot: Annotated[int, typer.Option("--n-boot", min=100, help="Bootstrap replicates per score.")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap (reports are reproducible).")] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the tables.")] = False,
    detail: Annotated[bool, typer.Option(help="Also print the rank agreement per ability.")] = False,
) -> None:
    """Tables (the paper's Table 5 per head) with 95% bootstrap intervals, chance and majority baselines, rank
    agreement between heads, subgroups, plots, and report.html with a gallery of failures.

    Runs of one head are put in one table only when they were scored on the same samples (fingerprint of ids
    and truths); otherwise that table is refused (exit code 1) unless --allow-mixed.

    Example: ava report runs/knn-pixels runs/knn-random-vit runs/probe-linear-pixels --out report/
    """
    from rich.console import Console

    from ava.api import make_report
    from ava.report import print_report

    made = make_report(runs, out, split=split, allow_mixed=allow_mixed, n_boot=n_boot, seed=seed)
    result = made.data
    console = Console()
    if not quiet:
        print_report(result, console, detail=detail)
    console.print(f"report: {out / 'report.md'}  (also report.html, report.json, report.tex, plots/)", highlight=False)
    if result["refused"]:
        Console(stderr=True).print(f"[red]{len(result['refused'])} table(s) refused[/] (see above; --allow-mixed "
                                   "shows them marked)", highlight=False)  # fmt: skip
        raise typer.Exit(1)
