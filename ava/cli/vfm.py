"""`ava vfm` commands."""

from __future__ import annotations

import json
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _params(n: int | None) -> str:
    if n is None:
        return "?"
    if n == 0:
        return "0"
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


@app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """List the registered VFMs: hub id, transformers class, input size, tokens x dim, prefix tokens, parameters."""
    from ava.vfm import list_vfms

    rows = list_vfms()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="VFMs (parameters counted on the meta device; 'random' = random weights, a control)")
    for col in ("key", "hub id", "class", "input", "tokens x dim", "prefix", "params"):
        table.add_column(col, justify="right" if col in ("input", "params") else "left")
    for r in rows:
        hub = r["hub_id"] or ("random" if r["random_weights"] else "built-in")
        post = f" ({r['postprocess']})" if r["postprocess"] else ""
        tokens = f"{r['num_tokens']} x {r['dim']}{post}"
        table.add_row(r["key"], hub, r["model_class"], str(r["image_size"]), tokens,
                      str(r["prefix_tokens"]),
                      _params(r["params"]))  # fmt: skip
    Console().print(table)


@app.command("show")
def show(
    key: Annotated[str, typer.Argument(help="Registry key or alias, 'key@<hub-id-or-dir>', or 'hf:<hub-id-or-dir>'.")],
    as_json: JsonOpt = False,
) -> None:
    """Show every fact of one VFM, with its parameter count computed on the meta device (nothing downloaded)."""
    from ava.vfm import vfm_facts

    facts = vfm_facts(key)
    if as_json:
        typer.echo(json.dumps(facts, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"VFM {facts['key']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for name, value in facts.items():
        if name == "params":
            value = f"{value:,}" if value is not None else "?"
        elif isinstance(value, (dict, list)):
            value = json.dumps(value)
        table.add_row(name, "" if value is None else str(value))
    Console().print(table)
