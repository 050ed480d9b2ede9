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
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the tables nor the progress.")] = False,
    detail: Annotated[bool, typer.Option(help="Also print the rank agreement per ability.")] = False,
    reference: Annotated[
        str | None,
        typer.Option(
            help="Also show every score relative to this VFM (a table and a plot per head), e.g. dinov2.",
            show_default=False,
        ),
    ] = None,
    paper: Annotated[
        bool,
        typer.Option(
            "--paper",
            help="Also rank the runs among the AVA-Bench paper's Table 5 (9 VFMs, LLM head; shipped with ava, "
            "Python: ava.paper_table()): per ability and on average, ours - paper with the 95% interval for a VFM "
            "the paper has, its self-contradicting cells flagged, and why the numbers are (not) comparable. "
            "The same as --published with the built-in table.",
        ),
    ] = False,
    published: Annotated[
        list[str] | None,
        typer.Option(
            "--published",
            help="Also rank the runs among a results folder (a path or an fsspec URL, s3://bucket/prefix) that "
            "`ava results export` wrote: same head and data identity, or a banner saying what differs "
            "(repeatable).",
            show_default=False,
        ),
    ] = None,
    gap: Annotated[
        list[str] | None,
        typer.Option(
            help="RUN=REF: RUN's accuracy split by whether REF got each "
            "question right (repeatable; default: each vlm run against each "
            "zero-shot run).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Tables (the paper's Table 5 per head) with 95% bootstrap intervals, chance and majority baselines, rank
    agreement between heads, subgroups, plots, and report.html with a gallery of failures.

    Runs of one head are put in one table only when they were scored on the same samples (fingerprint of ids
    and truths); otherwise that table is refused (exit code 1) unless --allow-mixed.

    --paper puts the runs beside the paper's Table 5 (ava.paper_table() in Python), --published DIR beside a
    results folder; both read and checked before anything is written.

    Example: ava report runs/knn-pixels runs/knn-random-vit runs/probe-linear-pixels --out report/
    """
    from rich.console import Console

    from ava.api import make_report
    from ava.report import print_report

    pairs = []
    for item in gap or []:
        a, eq, b = item.partition("=")
        if not eq or not a or not b:
            raise typer.BadParameter(f"{item!r}: give RUN=REF (two run directories)", param_hint="'--gap'")
        pairs.append((a, b))
    made = make_report(
        runs,
        out,
        split=split,
        allow_mixed=allow_mixed,
        n_boot=n_boot,
        seed=seed,
        reference=reference,
        gaps=pairs or None,
        progress=not quiet,
        paper=paper,
        published=published,
    )
    result = made.data
    console = Console()
    if not quiet:
        print_report(result, console, detail=detail)
        if result.get("published"):
            from ava.report.published_view import print_published

            print_published(result, console)
    if result.get("relative") or result.get("alignment"):
        from ava.report.alignment import markdown as gap_markdown
        from ava.report.reference import markdown as relative_markdown

        lines = relative_markdown(result["relative"]) if result.get("relative") else []
        lines += gap_markdown(result["alignment"]) if result.get("alignment") else []
        if not quiet:
            console.print("\n".join(lines), highlight=False, markup=False)
    console.print(f"report: {out / 'report.md'}  (also report.html, report.json, report.tex, plots/)", highlight=False)
    if result["refused"]:
        Console(stderr=True).print(
            f"[red]{len(result['refused'])} table(s) refused[/] (see above; --allow-mixed shows them marked)",
            highlight=False,
        )
        raise typer.Exit(1)
