"""What a run directory was trained on, and the checks that keep ``ava head eval`` to that.

A run directory is data: someone may hand one over, or run ``ava head eval`` on it from another directory. So

- **paths are stored resolved.** ``data``, ``cache``, ``out`` and ``init`` (and ``llm`` when it is a directory) are
  made absolute before a run's ``config.json`` is written (:func:`resolved_paths`), so a run means the same files
  from any working directory; messages show them relative to the working directory where that is shorter
  (:func:`shown`).
- **the data and the cache are identified.** ``run.json`` records ``data_identity``: per ability, a SHA-256 over
  the ability's sample records (ids, splits, images by content hash, questions, truths), sorted; the cache group's
  key is recorded beside it (``cache_key``). ``ava head eval`` recomputes both and refuses to write results into
  a run whose data or cache differs (:func:`check_eval_target`).
- **runs from before the identity** (no ``data_identity`` in ``run.json``) still evaluate: their relative paths
  are taken from the working directory as they always were, but the results they already hold guard them: when
  ``results_<split>.json`` says it was scored on another dataset directory (its ``sample_set.dataset``),
  eval refuses rather than overwrite it.
- **nothing recorded runs code.** A recorded ``trust_remote_code`` is never acted on: it must equal the command
  line's ``--trust-remote-code`` (:func:`check_recorded_options`); a difference is refused by name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ava.errors import AvaError
from ava.jsonfile import read_json

if TYPE_CHECKING:
    from ava.data.format import Dataset

PATH_FIELDS = ("data", "cache", "out", "init")
IDENTITY_ALGORITHM = "per ability: sha256 over the sorted JSON lines of its sample records"


class RunIdentityError(AvaError):
    """``ava head eval`` would write into a run trained on other data or another cache, or would take an option
    that can run code from a file."""


def resolved(path: str) -> str:
    """``path`` absolute, symlinks resolved (the empty string stays empty: "not given"; a URL, such as an object-store
    cache ``s3://bucket/prefix``, stays as given)."""
    if not path or "://" in path:
        return path
    return str(Path(path).expanduser().resolve())


def resolved_paths(config: Any) -> Any:
    """``config`` (a dataclass) with its path fields absolute; ``llm`` too when it names a local directory."""
    changes = {
        name: resolved(value) for name in PATH_FIELDS if isinstance(value := getattr(config, name, None), str) and value
    }
    llm = getattr(config, "llm", None)
    if isinstance(llm, str) and llm and Path(llm).expanduser().is_dir():  # resolve_llm takes a directory first
        changes["llm"] = resolved(llm)
    return dataclasses.replace(config, **changes) if changes else config


def shown(path: str | os.PathLike[str]) -> str:
    """A path for display: relative to the working directory when it lies below it, else as it is."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve())) or "."
    except (ValueError, OSError):
        return str(p)


_DIGESTS: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


def data_identity(dataset: Dataset, abilities: list[str]) -> dict[str, Any]:
    """``{"dataset", "algorithm", "per_ability": {ability: sha256}}`` of the samples a run reads.

    Each ability's digest is computed once per opened dataset (a fingerprint's three heads each record it; a
    ``Dataset`` loads an ability's samples once, so they cannot change under it)."""
    known = _DIGESTS.setdefault(dataset, {})
    for ava in abilities:
        if ava not in known:
            h = hashlib.sha256()
            for line in sorted(s.to_json() for s in dataset.samples(ava)):
                h.update(line.encode("utf-8") + b"\n")
            known[ava] = h.hexdigest()
    per = {ava: known[ava] for ava in abilities}
    return {"dataset": str(Path(dataset.root).resolve()), "algorithm": IDENTITY_ALGORITHM, "per_ability": per}


def check_recorded_options(run_dir: Path, config: dict[str, Any], trust_remote_code: bool) -> None:
    """Refuse a run whose recorded ``trust_remote_code`` differs from the command line's: a file never decides
    whether a checkpoint's own Python code runs."""
    recorded = config.get("trust_remote_code", False)
    if recorded is True and not trust_remote_code:
        raise RunIdentityError(
            f"{run_dir / 'config.json'} records trust_remote_code = true (VFM {config.get('vfm')!r}): an option that "
            "lets a checkpoint run its own Python code is taken from the command line only, never from a run "
            "directory. If you trust that code, pass --trust-remote-code"
        )
    if trust_remote_code and recorded is not True:
        raise RunIdentityError(
            f"--trust-remote-code: {run_dir} was trained without it (its config.json records trust_remote_code = "
            f"{json.dumps(recorded)}); leave it out"
        )


def check_cache_key(run_dir: Path, run: dict[str, Any], cache_key: str | None) -> None:
    """Refuse features from another cache group than the run recorded (an LLM head finds its group by VFM name;
    a kNN/probe run opens the recorded key, so another group cannot be read there)."""
    recorded = run.get("cache_key")
    if cache_key and recorded and cache_key != recorded:
        raise RunIdentityError(
            f"{run_dir} was trained on cache group {recorded!r}, but its cache now gives {cache_key!r}; "
            "`ava head eval` writes nothing into it (evaluate with the cache it was trained on, or train a new run)"
        )


def check_eval_target(
    run_dir: Path, run: dict[str, Any], dataset: Dataset, abilities: list[str], results_names: list[str]
) -> None:
    """Refuse to evaluate ``run_dir`` on a ``dataset`` other than it was trained on (its ``abilities``).

    ``results_names``: the results files the evaluation would replace (checked for runs without a recorded
    identity, see the module docstring).
    """
    identity = run.get("data_identity")
    if not isinstance(identity, dict):
        _check_legacy(run_dir, dataset, results_names)
        return
    recorded = identity.get("per_ability")
    missing = [a for a in abilities if not isinstance(recorded, dict) or a not in recorded]
    if missing:
        raise RunIdentityError(f"{run_dir / 'run.json'}: data_identity has no digest of ability {missing[0]!r}")
    now = data_identity(dataset, abilities)
    for ava in abilities:
        if now["per_ability"][ava] != recorded[ava]:
            then = identity.get("dataset")
            where = "" if then == now["dataset"] else f" (it was trained on {shown(str(then))})"
            raise RunIdentityError(
                f"{run_dir} was trained on other data: the {ava!r} samples of {shown(dataset.root)} are not those "
                f"recorded in its run.json{where}; `ava head eval` writes nothing into it (train a new run on this "
                "data)"
            )


def _check_legacy(run_dir: Path, dataset: Dataset, results_names: list[str]) -> None:
    """A run without a recorded identity: its results must not be replaced by those of another dataset dir."""
    from ava.metrics.sample_set import recorded_block

    here = Path(dataset.root).resolve()
    for name in results_names:
        try:
            old = read_json(run_dir / name, encoding="utf-8")
        except (OSError, ValueError):
            continue
        fp = recorded_block(old)
        where = fp.get("dataset") if isinstance(fp, dict) else None
        if isinstance(where, str) and Path(where) != here:
            raise RunIdentityError(
                f"{run_dir / name} was scored on {where}, but the run's data path resolves to {here} from this "
                "directory (the run records a relative path and no data identity: it was trained before ava "
                "recorded them); run `ava head eval` from the directory it was trained in"
            )
