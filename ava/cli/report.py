"""`ava report`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def report(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (each with run.json and results_<split>.json).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for report.md, report.json, report.tex, plots/.")],
    split: Annotated[str, typer.Option(help="Which results_<split>.json of each run to report.")] = "test",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the tables.")] = False,
    detail: Annotated[bool, typer.Option(help="Also print the rank agreement per ability.")] = False,
) -> None:
    """Tables (the paper's Table 5 per head), rank agreement between heads, subgroup tables and plots over runs.

    Example: ava report runs/knn-pixels runs/knn-random-vit runs/probe-linear-pixels --out report/
    """
    from rich.console import Console

    from ava.report import make_report, print_report

    result = make_report(runs, out, split=split)
    console = Console()
    if not quiet:
        print_report(result, console, detail=detail)
    console.print(f"report: {out / 'report.md'}  (also report.json, report.tex, plots/)", highlight=False)
