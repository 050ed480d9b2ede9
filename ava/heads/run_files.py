"""Run directories of the heads trained on cached features (the layout of :mod:`ava.heads.base`): config.json and
run.json at the start, the head's own files, results and predictions scored like ``ava score``; and opening a
finished run again for evaluation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ava.errors import AvaError

if TYPE_CHECKING:
    from ava.data.format import Dataset


class DiskFullError(AvaError):
    """A run file could not be written for want of space; nothing half-written was left behind."""


def write_file(path: Path, data: bytes | bytearray | memoryview) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, then a rename): a full disk leaves the file
    as it was (or absent), never a partial one a later run would misread, and is said in one line naming it."""
    import errno

    from ava.data.format import atomic_write_bytes

    try:
        atomic_write_bytes(path, data)  # type: ignore[arg-type]  # written as is: any bytes-like object will do
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        why = "no space left on device (ENOSPC)" if e.errno == errno.ENOSPC else "disk quota exceeded (EDQUOT)"
        raise DiskFullError(
            f"{path}: {why} while writing it ({len(memoryview(data).cast('B'))} bytes); nothing half-written was "
            "kept: free some space and run the same command again (a head run resumes where it stopped)"
        ) from None


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (tmp + rename; a full disk is named, see ``write_file``)."""
    from ava.config import to_jsonable

    write_file(path, (json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


@dataclass
class SavedRun:
    """A finished feature-head run opened for evaluation: its files, its dataset and its cache group."""

    path: Path
    config: dict[str, Any]
    run: dict[str, Any]
    metas: dict[str, Any]
    dataset: Dataset
    cache: Any
    device: str


def open_saved_run(run_dir: str | os.PathLike[str], meta_file: str, *, data: str | None = None,
                   cache: str | None = None, device: str | None = None) -> SavedRun:  # fmt: skip
    """Read config.json, run.json and the head's ``meta_file``; open the data and the run's own cache group
    (``data``/``cache``/``device`` override what the run recorded)."""
    from ava.cache import open_cache
    from ava.data.format import Dataset
    from ava.heads.features import resolve_device as _resolve_device

    path = Path(run_dir)
    config = read_json(path / "config.json")
    run = read_json(path / "run.json")
    return SavedRun(
        path=path, config=config, run=run, metas=read_json(path / meta_file),
        dataset=Dataset(data or config["data"]),
        cache=open_cache(cache or config["cache"], config["vfm"], key=run.get("cache_key")),
        device=_resolve_device(device or config.get("device", "auto")),
    )  # fmt: skip


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as e:
        raise AvaError(f"{path.parent} is not a complete run directory: {path.name} is missing") from e
    except json.JSONDecodeError as e:
        raise AvaError(f"{path}: not valid JSON ({e})") from e


def run_block(head: str, vfm: str, abilities: list[str], cache: Any, dataset: Dataset, **extra: Any) -> dict:
    """The ``run`` block of run.json and of every results file."""
    return {
        "head": head,
        "vfm": vfm,
        "abilities": abilities,
        "random_weights": bool(getattr(cache, "random_weights", False)),
        "llm": None,
        "cache_key": getattr(cache, "key", None),
        "split": dataset.split_info,
        "synthetic": dataset.is_synthetic,
        **extra,
    }


def start_run(out: str | os.PathLike[str], config: Any, run: dict) -> Path:
    """Create the run directory and write config.json and run.json."""
    from ava.config import save_config

    if not str(out):
        raise AvaError("no output directory given (--out)")
    run_dir = Path(out)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.json")
    write_json(run_dir / "run.json", run)
    return run_dir


def score_and_write(
    dataset: Dataset,
    predictions: Mapping[tuple[str, str], str],
    abilities: list[str],
    split: str,
    run: dict,
    config: dict,
    run_dir: Path,
    extra: Mapping[str, dict] | None = None,
) -> dict:
    """Score replies like ``ava score`` does, add per-ability ``extra`` (selection details), write results."""
    from ava.metrics.scoring import score_predictions, write_results

    report = score_predictions(dataset, predictions, abilities=abilities, split=split, run=run, config=config)
    for key, info in (extra or {}).items():
        if key in report.results.get("abilities", {}):
            report.results["abilities"][key]["extra"] = info
    write_results(report, run_dir, split)
    return report.results
