"""`ava score`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ava.cli.params import AvaOpt

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ava.metrics.scoring import ScoreReport

_SHOW = 5  # ids listed in a warning


def score(
    data: Annotated[Path, typer.Option("--data", help="Dataset directory (ava format).")],
    pred: Annotated[Path, typer.Option("--pred", help='Predictions JSONL: {"id", "prediction"[, "ava"]} per line.')],
    ava: AvaOpt = None,
    split: Annotated[str, typer.Option("--split", help="test, train or all.")] = "test",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Directory for results_<split>.json and predictions_<split>.jsonl (default: the --pred file's).",
            show_default=False,
        ),
    ] = None,
    box_format: Annotated[
        str,
        typer.Option(
            "--box-format",
            help="How box replies are read: normalized (0..1), pixels (/ image size), 1000 (a 0..1000 grid, "
            "Qwen-VL's <box>), or auto (pixels when a value is beyond 2, else normalized; the results count each).",
        ),
    ] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print the results JSON instead of the table.")] = False,
) -> None:
    """Score raw model replies against a dataset: parse each reply, apply the ability's metric.

    Writes results_<split>.json (the results schema) and predictions_<split>.jsonl (one scored line per sample)
    into --out. Unparsed replies and samples without a prediction are scored at the metric's worst value and
    counted as unparsed, never dropped. See docs/metrics.md for the parsing rules and worst values.
    """
    import json

    from rich.console import Console

    from ava.api import score as run_score

    result = run_score(data, pred, ava=ava, split=split, out=out, box_format=box_format)
    report, out_dir = result.report, result.out
    _warn(report, Console(stderr=True))
    if as_json:
        typer.echo(json.dumps(report.results, indent=2, ensure_ascii=False))
        return
    console = Console()
    console.print(score_table(report))
    console.print(f"wrote {out_dir / f'results_{split}.json'} and predictions_{split}.jsonl", highlight=False)


def _ids(keys: list[tuple[str, str]]) -> str:
    shown = ", ".join(f"{a}/{i}" if a else i for a, i in keys[:_SHOW])
    return shown + (", ..." if len(keys) > _SHOW else "")


def _warn(report: ScoreReport, console: Console) -> None:
    if report.missing:
        console.print(
            f"[yellow]warning:[/] {len(report.missing)} samples have no prediction (scored as unparsed): "
            f"{_ids(report.missing)}",
            highlight=False,
        )
    for key, res in report.results["abilities"].items():
        if res.get("n_class_unknown"):
            console.print(
                f"[yellow]note:[/] {key}: {res['n_class_unknown']} of {res['n']} questions name their object in no "
                "known wording (class 'unknown'; see docs/metrics.md)",
                highlight=False,
            )
        rules = {r: n for r, n in (res.get("box_rules") or {}).items() if n}
        if len(rules) > 1:  # auto read some boxes as normalized and others as pixels: say so
            counts = ", ".join(f"{n} as {r}" for r, n in rules.items())
            console.print(
                f"[yellow]note:[/] {key}: boxes read {counts} (--box-format {res['box_format']})", highlight=False
            )
    if report.unknown:
        console.print(
            f"[yellow]warning:[/] {len(report.unknown)} predictions match no scored sample (ignored): "
            f"{_ids(report.unknown)}",
            highlight=False,
        )


def score_table(report: ScoreReport) -> Table:
    from rich.table import Table

    from ava.data.split import split_label
    from ava.metrics import METRICS

    title = f"split {split_label(report.results['split'])}"
    if report.results.get("synthetic"):
        title += ", synthetic data"
    table = Table(title=title)
    for col, justify in (
        ("ability", "left"),
        ("metric", "left"),
        ("value", "right"),
        ("dir", "center"),
        ("n", "right"),
        ("unparsed", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for key, res in report.results["abilities"].items():
        arrow = METRICS.get(res["metric"]).arrow
        table.add_row(key, res["metric"], f"{res['value']:.4f}", arrow, str(res["n"]), str(res["n_unparsed"]))
    return table
