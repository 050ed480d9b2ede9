"""`ava data` commands."""

from __future__ import annotations

import typer

from ava.cli import synth

app = typer.Typer(no_args_is_help=True)
app.command("synth")(synth.synth)
app.command("preview")(synth.preview)
