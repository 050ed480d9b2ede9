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
    values.update({k: v for k, v in overrides.items() if v is not None})
    unknown = set(values) - names
    if unknown:
        raise AvaError(f"unknown config field(s) {sorted(unknown)}")
    return cls(**values)


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
