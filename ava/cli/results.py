"""`ava results export` (run directories as a results folder) and `ava results show` (a published source's table)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)
_O = typer.Option


@app.command("export")
def export(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (each with run.json and results_<split>.json).")],
    out: Annotated[str, _O("--out", "-o", help="The results folder to write or add to: a path or an fsspec URL.")],
    title: Annotated[str | None, _O(help="The folder's title (its README card and reports show it).")] = None,
    split: Annotated[str, _O(help="Which results_<split>.json of each run to export.")] = "test",
    force: Annotated[bool, _O("--force", help="Replace entries the folder already holds (same VFM and head).")] = False,
    n_boot: Annotated[int, _O("--n-boot", min=100, help="Bootstrap replicates of each interval.")] = 2000,
    seed: Annotated[int, _O(help="Seed of the bootstrap (as `ava report --seed`).")] = 0,
    as_json: Annotated[bool, _O("--json", help="Print the folder's index as JSON.")] = False,
) -> None:
    """Write fingerprints as a results folder: per VFM and head the values, n, 95% intervals, the run's identity,
    data identity, config and versions, an index.json with every file's SHA-256, and a README card. Others then
    rank their VFMs against it without re-running: ava report RUNS --published DIR.

    Example: ava results export runs/llm-siglip2 runs/llm-dinov2 --out results/my-lab --title "My lab, 2026"
    """
    from ava.api import export_results

    result = export_results(runs, out, split=split, title=title, force=force, n_boot=n_boot, seed=seed)
    if as_json:
        typer.echo(json.dumps(result.index, indent=2))
        return
    typer.echo(f"results folder {out}: {len(result.entries)} entries ({len(runs)} written now), index.json, README.md")


@app.command("show")
def show(
    folder: Annotated[
        str | None, typer.Argument(help="A results folder (path or URL); leave out with --paper.", show_default=False)
    ] = None,
    paper: Annotated[bool, _O("--paper", help="The AVA-Bench paper's Table 5 (built into ava).")] = False,
    as_json: Annotated[
        bool, _O("--json", help="Print the source as JSON (values in ava's units and as printed).")
    ] = False,
) -> None:
    """A published source's table as published: values and printed ranks, the flags on cells the source
    contradicts, and average ranks printed and recomputed. Python: ava.paper_table(), ava.load_published(DIR).
    """
    from rich.console import Console

    from ava.api import load_published, paper_table
    from ava.report.published import source_table
    from ava.report.published_view import flag_lines, provenance_line, show_table, source_rows, transposed

    if paper == (folder is not None):
        raise typer.BadParameter("give a results folder or --paper (one of them)", param_hint="'FOLDER'")
    source = paper_table() if paper else load_published(folder)
    data = source.to_dict()
    if as_json:
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    console = Console()
    console.print(provenance_line(data), highlight=False, markup=False)
    for table in source_table(source):
        rows = transposed(source_rows(table, data["columns"]))
        show_table(console, rows, f"{source.title} · head: {table['head']} · published, not re-run")
    for line in flag_lines(data) + [r["text"] for r in data["remarks"]]:
        console.print(line, highlight=False, markup=False)
