"""`ava vfm` commands."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

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
    """List the registered VFMs: full hub id, input size, tokens x dim, prefix tokens, parameters, how they load
    (native, mapped, timm, remote code, built-in) and whether the hub repository is gated. Imports no torch.

    VFMs of installed plugins (entry-point group ava.vfms) are listed with the package they come from; a plugin
    that fails is named in a warning line and the others are still listed."""
    from rich.console import Console

    from ava.vfm import VFMS, list_vfms

    rows = list_vfms()
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for problem in VFMS.plugin_errors:
        err.print(f"[yellow]warning:[/] {escape(str(problem))}")
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return

    # Two lines per VFM, so full hub ids fit an 80-column terminal: the facts, then the weights' source.
    console = Console(highlight=False)
    head = f"{'key':<16}{'input':>5}  {'tokens x dim':<13}{'prefix':>6}{'params':>8}  loads"
    console.print(f"[bold]{head}[/]")
    for r in rows:
        loads = r["loader"] + (", gated" if r["gated"] else "")
        tokens = f"{r['num_tokens']} x {r['dim']}"
        console.print(
            f"[bold]{r['key']:<16}[/]{r['image_size']:>5}  {tokens:<13}{r['prefix_tokens']:>6}"
            f"{_params(r['params']):>8}  {loads}"
        )
        plugin = f" (plugin from {escape(r['package'])})" if r.get("package") else ""
        console.print(f"  [dim]{_weights(r)}[/]{plugin}")
    console.print("[dim]'random' = random weights (a control); details: ava vfm show KEY[/]")


def _weights(row: dict) -> str:
    if row["hub_id"]:
        return row["hub_id"]
    if row["weights_from"]:
        return "installed package"
    return "random" if row["random_weights"] else "built-in"


@app.command("show")
def show(
    key: Annotated[
        str, typer.Argument(help="Registry key or alias, 'key@<hub-id-or-dir>', 'hf:<hub-id-or-dir>' or 'timm:<name>'.")
    ],
    as_json: JsonOpt = False,
    trust_remote_code: Annotated[
        bool, typer.Option("--trust-remote-code", help="Let an hf: config that needs its own Python code run it.")
    ] = False,
) -> None:
    """Show every fact of one VFM: how it loads (native, mapped, timm, remote code), whether its hub repository is
    gated, and its parameter count (declared, or computed on the meta device; nothing downloaded)."""
    from ava.vfm import vfm_facts

    facts = vfm_facts(key, trust_remote_code=trust_remote_code)
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
