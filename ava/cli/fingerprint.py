"""`ava fingerprint`: linear probe, attentive probe and kNN on every ability of one VFM in one command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ava.cli.params import AvaOpt, ThreadsOpt, checked, list_callback

_O = typer.Option


def fingerprint(
    vfm: Annotated[str, _O(help="VFM key (the cache's VFM).")],
    data: Annotated[Path, _O(help="Dataset directory (already split).")],
    cache: Annotated[str, _O(help="Feature cache: a directory or a URL, s3://bucket/prefix (`ava cache extract`).")],
    out: Annotated[Path, _O("--out", "-o", help="Runs directory: one run per head, OUT/<head>-<vfm>.")],
    ava: AvaOpt = None,
    head: Annotated[
        list[str] | None,
        _O(
            "--head",
            help="Heads (repeat or comma-separate); default: probe-linear, probe-attn, knn.",
            callback=list_callback,
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, _O(help="Random seed.")] = 0,
    device: Annotated[str, _O(help="auto, cpu, cuda, cuda:1 ...")] = "auto",
    max_train: Annotated[
        int | None, _O(help="Cap on training samples per ability.", callback=checked("max_train"), show_default=False)
    ] = None,
    split: Annotated[str, _O(help="Split evaluated after training.")] = "test",
    quiet: Annotated[bool, _O("--quiet", "-q", help="No progress bar.")] = False,
    threads: ThreadsOpt = None,
    jobs: Annotated[
        int | None,
        _O(
            help="Heads fitted at once per ability (threads); default: 2 on a GPU or a CPU with 2+ cores, else 1.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """The quick re-ranking: linear probe, attentive probe and kNN on every ability, each ability's features read
    once and shared by the three heads; one run directory per head (what `ava report` reads).

    Re-running an interrupted fingerprint with the same options redoes only the abilities not finished.
    Example: ava fingerprint --vfm pixels --data ava-data --cache ava-cache --out ava-runs
    """
    from ava.api import fingerprint as run_fingerprint

    result = run_fingerprint(
        vfm,
        data,
        cache,
        out,
        ava=ava or None,
        heads=head or None,
        seed=seed,
        device=device,
        max_train=max_train,
        split=split,
        progress=not quiet,
        jobs=jobs,
        threads=threads or "auto",
    )
    print_fingerprint(result.source)


def print_fingerprint(result: Any) -> None:
    """One table: abilities down, heads across, the split's metric; then the run directories."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    heads = [h for h, r in result.results.items() if r]
    if heads:
        first = result.results[heads[0]]
        run = first.get("run") or {}
        table = Table(title=f"fingerprint of {run.get('vfm', '')} (split {first['split']['name']})")
        table.add_column("ability")
        table.add_column("metric")
        for h in heads:
            table.add_column(h, justify="right")
        for key, r in first["abilities"].items():
            arrow = "↑" if r["higher_is_better"] else "↓"
            values = [result.results[h]["abilities"].get(key, {}).get("value") for h in heads]
            table.add_row(key, f"{r['metric']} {arrow}", *("-" if v is None else f"{v:.4f}" for v in values))
        console.print(table)
        if run.get("random_weights"):
            console.print("[yellow]random weights[/]: a control or a test, not a real result")
    resumed = {h: a for h, a in result.resumed.items() if a}
    if resumed:
        console.print("resumed (already trained): " + "; ".join(f"{h}: {len(a)} abilities" for h, a in resumed.items()))
    for h, path in result.run_dirs.items():
        console.print(f"{h}: [bold]{path}[/]")
