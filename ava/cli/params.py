"""Options shared by every command, so one concept has one form everywhere.

Reuse these in any ``ava/cli`` module::

    from ava.cli.params import AvaOpt, ThreadsOpt, checked, split_list, threads_setup

    def cmd(ava: AvaOpt = None, epochs: Annotated[int | None, typer.Option(callback=checked("epochs"))] = None,
            threads: ThreadsOpt = None) -> None:
        threads_setup(threads)          # before any torch work
        abilities = split_list(ava)     # --ava a,b --ava c -> [a, b, c]

- numbers: ``callback=checked(NAME)`` applies :data:`ava.validate.RULES` [NAME] at parse time, so a bad value is
  refused with ``Invalid value for '--NAME': ...`` before any work (config files get the same rules in
  :func:`ava.config.load_config`);
- lists: options that take several values accept both repetition and commas (``--ava a,b --ava c``);
- ``--threads``: every compute command takes it; :func:`threads_setup` applies it (default: the CPUs this
  process may use minus DataLoader workers, or ``OMP_NUM_THREADS``) and the results files record it.

Nothing here imports torch: ``ava --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

PANEL_RESOURCES = "Resources"


def split_list(values: list[str] | str | None) -> list[str] | None:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``; None or nothing given -> None."""
    if not values:
        return None
    if isinstance(values, str):
        values = [values]
    out = [v.strip() for item in values for v in str(item).split(",") if v.strip()]
    return out or None


def checked(name: str, *, as_list: bool = False, convert: Callable[[str], Any] | None = None) -> Callable[..., Any]:
    """A typer callback checking an option's value with the rule of ``name`` in :mod:`ava.validate`.

    ``as_list``: the option is repeatable and comma-separated; the callback returns the flat list, each item
    converted with ``convert`` (e.g. ``int``) and checked.
    """
    from ava.validate import check

    def callback(value: Any) -> Any:
        if value is None or (as_list and not value):
            return None if as_list else value
        try:
            if as_list:
                items = split_list(value) or []
                if convert is not None:
                    try:
                        items = [convert(v) for v in items]
                    except ValueError as e:
                        raise ValueError(f"{value!r} is not a list of {getattr(convert, '__name__', 'values')}") from e
                return check(name, items) if items else None
            return check(name, value)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None

    return callback


def vfm_callback(value: str | None) -> str | None:
    """``--vfm``: the ``#prefix=N,size=S,pool=G`` options of an ``hf:`` name checked at parse time."""
    if value:
        from ava.errors import AvaError
        from ava.vfm.resolve import check_name

        try:
            check_name(value)
        except AvaError as e:
            raise typer.BadParameter(str(e)) from None
    return value


def list_callback(value: list[str] | None) -> list[str] | None:
    """Repetition and commas: ``--ava a,b --ava c``."""
    return split_list(value)


ThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--threads",
        help="CPU threads for torch (default: the CPUs this process may use, from its affinity and cgroup quota, "
        "less those other processes keep busy, minus DataLoader workers; OMP_NUM_THREADS when set). "
        "Recorded in the results.",
        callback=checked("threads"),
        rich_help_panel=PANEL_RESOURCES,
        show_default=False,
    ),
]

AvaOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ava",
        help="Abilities (repeat or comma-separate: --ava color,counting); default: all.",
        callback=list_callback,
        show_default=False,
    ),
]

ForceOpt = Annotated[bool, typer.Option("--force", help="Replace what is already there.")]


def threads_setup(threads: int | None, num_workers: int | None = 0) -> dict[str, Any]:
    """Apply ``--threads`` (or its default) to torch before any work; returns what was chosen."""
    from ava.threads import apply_threads

    return apply_threads(threads, num_workers=num_workers or 0)


def tidy_help() -> None:
    """Two fixes to typer 0.29's help screens, applied once by ``ava/cli/main.py``.

    typer prints a ``<bool>`` type beside flags, which take no value, and writes a required argument as
    ``{data}`` in the usage line. Flags get no type here, and arguments are written the click way: ``DATA``
    when required, ``[DATA]`` when optional. Typer versions without these methods are left alone.
    """
    from typer import core

    option, argument = core.TyperOption, getattr(core, "TyperArgument", None)
    if getattr(option, "_ava_tidy", False) or not hasattr(option, "display_type_rich"):
        return
    original = option.display_type_rich

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        if getattr(self, "is_flag", False) or getattr(self, "count", False):
            return None
        return original(self, ctx)

    option.display_type_rich = display_type_rich
    option._ava_tidy = True
    if argument is not None and hasattr(argument, "_usage_display_name"):

        def usage_name(self: Any) -> str:
            if getattr(self, "hidden", False):  # a deprecated positional form: not advertised
                return ""
            name = (self.metavar or self.name or "").upper()
            name = name if self.required else f"[{name}]"
            return name + ("..." if self.nargs != 1 else "")

        argument._usage_display_name = usage_name


def whole_sentences(text: str) -> str:
    """A docstring as help text: the lines of each paragraph joined, so the terminal wraps whole sentences (typer
    keeps a docstring's line breaks in the command lists, which cut sentences in two); an ``Example:`` line or a
    ``- `` item starts a paragraph of its own."""
    import inspect

    paragraphs = []
    for block in inspect.cleandoc(text).split("\n\n"):
        merged: list[str] = []
        for line in block.split("\n"):
            if merged and line.strip() and not line.lstrip().startswith(("Example:", "- ", "\b", "\f")):
                merged[-1] += " " + line.strip()
            else:
                merged.append(line.strip())
        paragraphs += [m for m in merged if m]
    return "\n\n".join(paragraphs)


def rewrap_help(command: Any) -> Any:
    """``command`` (a click command or group, as typer builds it) with :func:`whole_sentences` applied to its help
    and to every sub-command's; returns it."""
    if getattr(command, "help", None):
        command.help = whole_sentences(command.help)
    for sub in getattr(command, "commands", {}).values():
        rewrap_help(sub)
    return command


DataOpt = Annotated[
    Path | None,
    typer.Option("--data", help="Dataset directory. Required.", show_default=False),
]
# The dataset used to be the positional argument of `ava data ...` commands; still accepted there, not shown.
DataArg = Annotated[Path | None, typer.Argument(hidden=True, metavar="DATA", show_default=False)]


def dataset_dir(option: Path | None, positional: Path | None) -> Path:
    """The dataset of a command: ``--data DIR`` (the one form), or the older positional DIR."""
    if option is not None and positional is not None and option != positional:
        raise typer.BadParameter(
            f"two datasets given ({positional} and --data {option}); give one", param_hint="'--data'"
        )
    chosen = option or positional
    if chosen is None:
        raise typer.BadParameter("a dataset directory is required", param_hint="'--data'")
    return chosen
