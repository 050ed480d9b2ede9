"""Typed command configs: dataclasses loadable from a TOML file and overridden by CLI options.

Every command resolves its config once (defaults < file < CLI) and saves the result beside its output
(``config.json``), so any result can be traced to the exact settings that produced it.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from ava.arguments import check_fields
from ava.errors import AvaError

C = TypeVar("C")


def load_config(cls: type[C], path: str | Path | None = None, **overrides: Any) -> C:
    """Build ``cls`` from defaults, then a TOML file, then the non-None ``overrides`` (CLI options)."""
    values: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if path is not None:
        path = Path(path)
        try:
            values.update(tomllib.loads(path.read_text()))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise AvaError(f"config file {path}: {e}") from e
        unknown = set(values) - names
        if unknown:
            raise AvaError(f"config file {path}: unknown field(s) {sorted(unknown)}; known: {sorted(names)}")
        _check_values(cls, values, f"config file {path}: ")
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = set(given) - names
    if unknown:
        raise AvaError(f"unknown config field(s) {sorted(unknown)}; known: {sorted(names)}")
    _check_values(cls, given, "")
    values.update(given)
    return cls(**values)


def config_from_dict(cls: type[C], values: Any, where: str) -> C:
    """``cls`` from a recorded config (a run's ``config.json``), checked as a config file is: an object, known
    fields only, each of its type and within its rule; an AvaError names ``where`` and the field."""
    if not isinstance(values, dict):
        raise AvaError(f"{where}: a JSON {type(values).__name__}, not an object of config fields")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - names)
    if unknown:
        raise AvaError(f"{where}: unknown field(s) {unknown} for this head; known: {sorted(names)}")
    _check_values(cls, values, f"{where}: ")
    return cls(**values)


def _check_values(cls: type, values: dict[str, Any], where: str) -> None:
    """Every value of the field's declared type and within its rule (:mod:`ava.validate`), or an AvaError
    naming the field: a TOML ``epochs = "ten"`` or ``lr = -1`` is refused before any work."""
    from ava.validate import check_all

    check_fields(cls, values, where)
    try:
        check_all(values)
    except ValueError as e:
        raise AvaError(f"{where}{e}") from None


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def save_config(config: Any, path: str | Path) -> None:
    from ava.data.format import atomic_write_text

    atomic_write_text(Path(path), json.dumps(to_jsonable(config), indent=2) + "\n")
