"""The ``ava`` command. Each sub-command lives in its own module and calls one library function.

Heavy libraries (torch, transformers, faiss, zarr) are imported inside command bodies only, so
``ava --help`` stays fast.

Errors: :func:`main` prints one line for every failure a user can cause or meet (an :class:`AvaError`, an
OSError, bad UTF-8, a corrupt JSON/safetensors/cache file: see :func:`ava.errors.describe`) and exits non-zero
without a traceback; ``AVA_DEBUG=1`` shows the traceback. Temporary files the failed run left are removed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from ava.cli import cache, data, demo, fingerprint, head, report, reproduce, results, score, sweep, vfm, vlm
from ava.cli.params import rewrap_help, tidy_help

tidy_help()


def _version(value: bool) -> None:
    if value:
        from ava import __version__

        typer.echo(f"ava {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="ava",
    help="AVA-Bench: what a vision foundation model can and cannot see, one atomic ability at a time.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """AVA-Bench: what a vision foundation model can and cannot see, one atomic ability at a time."""


app.add_typer(data.app, name="data", help="Import, synthesize, split, inspect and export datasets.")
app.add_typer(vfm.app, name="vfm", help="The registry of frozen vision foundation models.")
app.add_typer(cache.app, name="cache", help="Extract, inspect and verify the compressed feature cache.")
app.add_typer(head.app, name="head", help="Train and evaluate heads (LLM, probes, kNN) on cached features.")
app.add_typer(vlm.app, name="vlm", help="Whole VLMs answering the same questions, scored beside the heads.")
app.add_typer(
    results.app, name="results", help="Published results: export run directories as a results folder, show one."
)
app.add_typer(sweep.app, name="sweep", help="Run a grid of VFM x head x ability set as jobs (local or SLURM).")
app.command("fingerprint")(fingerprint.fingerprint)
app.command("score")(score.score)
app.command("report")(report.report)
app.command("reproduce")(reproduce.reproduce)
app.command("demo")(demo.demo)

OUTPUT_OPTIONS = ("--out", "-o", "--cache")  # directories a command writes into (temporaries are cleaned there)


def _output_roots(argv: list[str]) -> list[Path]:
    roots = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in OUTPUT_OPTIONS:
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if value:
                roots.append(Path(value))
    return roots


def _fail(e: BaseException, argv: list[str]) -> int:
    """Print one line for ``e`` (or re-raise it under AVA_DEBUG=1) and return the exit code."""
    from rich.console import Console
    from rich.markup import escape

    from ava.errors import AvaError, describe, redact, remove_own_temp_files

    remove_own_temp_files(_output_roots(argv))
    if os.environ.get("AVA_DEBUG") == "1":
        raise e
    if isinstance(e, KeyboardInterrupt):
        Console(stderr=True).print("[bold red]interrupted[/]")
        return 130
    from ava.extras import missing_message

    message = describe(e) or missing_message(e)
    if message is None:
        message = f"internal error: {type(e).__name__}: {e} (run with AVA_DEBUG=1 for the traceback, and report it)"
    message = redact(message)  # a credential written into a URL is never echoed
    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return 2 if isinstance(e, AvaError) else 1


def _redacted_warnings() -> None:
    """Warnings are printed with any credential written into a URL redacted (:func:`ava.errors.redact`)."""
    import warnings

    from ava.errors import redact

    if getattr(warnings.formatwarning, "_ava_redacts", False):
        return
    original = warnings.formatwarning

    def formatwarning(*args: object, **kwargs: object) -> str:
        return redact(original(*args, **kwargs))  # type: ignore[arg-type]

    formatwarning._ava_redacts = True  # type: ignore[attr-defined]
    warnings.formatwarning = formatwarning


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    _redacted_warnings()
    try:
        rewrap_help(typer.main.get_command(app))(args=args, prog_name="ava")  # what app() runs, help rewrapped
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - every failure ends as one line (see _fail)
        sys.exit(_fail(e, args))


if __name__ == "__main__":
    main()
