"""The ``ava`` command. Each sub-command lives in its own module and calls one library function.

Heavy libraries (torch, transformers, faiss, zarr) are imported inside command bodies only, so
``ava --help`` stays fast.
"""

from __future__ import annotations

import sys

import typer

from ava.cli import cache, data, demo, head, report, score, vfm

app = typer.Typer(
    name="ava",
    help="AVA-Bench: what a vision foundation model can and cannot see, one atomic ability at a time.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(data.app, name="data", help="Import, synthesize, split, inspect and export datasets.")
app.add_typer(vfm.app, name="vfm", help="The registry of frozen vision foundation models.")
app.add_typer(cache.app, name="cache", help="Extract, inspect and verify the compressed feature cache.")
app.add_typer(head.app, name="head", help="Train and evaluate heads (LLM, probes, kNN) on cached features.")
app.command("score")(score.score)
app.command("report")(report.report)
app.command("demo")(demo.demo)


def main() -> None:
    from ava.errors import AvaError

    try:
        app()
    except AvaError as e:
        from rich.console import Console

        Console(stderr=True).print(f"[bold red]error:[/] {e}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
