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

from ava import jsonfile
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


def open_saved_run(
    run_dir: str | os.PathLike[str],
    meta_file: str,
    *,
    data: str | None = None,
    cache: str | None = None,
    device: str | None = None,
    split: str = "test",
) -> SavedRun:
    """Read config.json, run.json and the head's ``meta_file``; open the data and the run's own cache group
    (``data``/``cache``/``device`` override what the run recorded). The recorded config is checked like a config
    file, and the data like :func:`ava.heads.rundir.identity.check_eval_target` says, before anything is read."""
    from ava.cache import open_cache
    from ava.data.format import Dataset
    from ava.heads.features import resolve_device as _resolve_device
    from ava.heads.rundir.identity import check_eval_target

    path = Path(run_dir)
    config, run = read_run(path)
    metas = read_json(path / meta_file)
    dataset = Dataset(data or config["data"])
    check_eval_target(path, run, dataset, list(metas), [f"results_{split}.json"])
    return SavedRun(
        path=path,
        config=config,
        run=run,
        metas=metas,
        dataset=dataset,
        cache=open_cache(cache or config["cache"], config["vfm"], key=run.get("cache_key")),
        device=_resolve_device(device or config.get("device", "auto")),
    )


def evaluate_run(
    run_dir: str | os.PathLike[str],
    split: str = "test",
    *,
    decode: str | None = None,
    max_eval: int | None = None,
    batch_size: int | None = None,
    device: str | None = None,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """``ava head eval``: evaluate any head's run on ``split`` (the head is read from its run.json). The options
    are the command line's; LLM-only ones are refused on other heads, and a recorded ``trust_remote_code`` must
    equal ``trust_remote_code`` (:mod:`ava.heads.rundir.identity`)."""
    from ava.heads import HEADS

    path = Path(run_dir)
    head = read_json(path / "run.json").get("head")
    if head == "align":
        raise AvaError(f"{path} is a connector-alignment run; use it with `ava head train --init {path}`")
    if head not in HEADS:
        raise AvaError(f"{path / 'run.json'}: head {head!r} is not one of {', '.join(HEADS)}; not an ava run")
    if decode is not None and decode not in ("generate", "score"):
        raise AvaError(f"--decode {decode!r}: use 'generate' or 'score'")
    given = {"--decode": decode, "--max-eval": max_eval, "--trust-remote-code": trust_remote_code or None}
    llm_only = [flag for flag, value in given.items() if value is not None]
    if HEADS.canonical(head) != "llm" and llm_only:
        raise AvaError(f"{', '.join(llm_only)} apply to LLM-head runs only; {path} is a {head} run")
    options = {"decode": decode, "max_eval": max_eval, "batch_size": batch_size, "device": device}
    if trust_remote_code:
        options["trust_remote_code"] = True
    return HEADS.get(head).evaluate(path, split, **{k: v for k, v in options.items() if v is not None})


def read_run(run_dir: Path, head: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config, run) of a run directory: ``run.json`` names a registered head (``head``, when given), and
    ``config.json`` is a valid config of that head (checked as a ``--config`` file is)."""
    from ava.config import config_from_dict, to_jsonable
    from ava.heads import HEADS

    run = read_json(run_dir / "run.json")
    name = run.get("head")
    if not isinstance(name, str) or name not in HEADS:
        raise AvaError(f"{run_dir / 'run.json'}: head {name!r} is not one of {', '.join(HEADS)}; not an ava run")
    if head is not None and HEADS.canonical(name) != head:
        raise AvaError(f"{run_dir} is a {name!r} run, not a {head!r} run")
    abilities = run.get("abilities")
    if not isinstance(abilities, list) or not all(isinstance(a, str) for a in abilities):
        raise AvaError(f"{run_dir / 'run.json'}: 'abilities' is {abilities!r}, not a list of ability names")
    config = read_json(run_dir / "config.json")
    cfg = config_from_dict(HEADS.get(name).config_cls, config, str(run_dir / "config.json"))
    return to_jsonable(cfg), run


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a run directory; AvaError naming the file when it is missing, not JSON or no object."""
    try:
        found = jsonfile.read_json(path)
    except FileNotFoundError as e:
        raise AvaError(f"{path.parent} is not a complete run directory: {path.name} is missing") from e
    except json.JSONDecodeError as e:
        raise AvaError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(found, dict):
        raise AvaError(f"{path}: a JSON {type(found).__name__}, not an object; not a file ava wrote")
    return found


def run_block(head: str, vfm: str, abilities: list[str], cache: Any, dataset: Dataset, **extra: Any) -> dict:
    """The ``run`` block of run.json and of every results file (with the identity of the data it reads, which
    ``ava head eval`` checks: :mod:`ava.heads.rundir.identity`)."""
    from ava.heads.rundir.identity import data_identity

    return {
        "head": head,
        "vfm": vfm,
        "abilities": abilities,
        "random_weights": bool(getattr(cache, "random_weights", False)),
        "llm": None,
        "cache_key": getattr(cache, "key", None),
        "split": dataset.split_info,
        "synthetic": dataset.is_synthetic,
        "data_identity": data_identity(dataset, abilities),
        **extra,
    }


def start_run(out: str | os.PathLike[str], config: Any, run: dict) -> Path:
    """Create the run directory and write config.json and run.json."""
    from ava.config import save_config

    if not str(out):
        raise AvaError("no output directory given (--out)")
    from ava.heads.rundir.identity import resolved_paths

    run_dir = Path(out)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(resolved_paths(config), run_dir / "config.json")  # the same files from any working directory
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
