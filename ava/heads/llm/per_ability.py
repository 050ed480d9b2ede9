"""One LLM head per ability, in one run directory: the paper's protocol and ``ava head train --head llm``'s default.

The paper trains stage 3 separately for every ability (its own connector and LoRA adapter, its own epochs: 10, or
20 for localization). This module orchestrates that on top of the single-run trainer
(:func:`ava.heads.llm.train.train`), which it calls once per ability::

    RUN/config.json, RUN/run.json          # the command's config; run.json says "per_ability": true
    RUN/abilities/<key>/                   # a complete single-ability LLM-head run (connector, adapter, log,
                                           # checkpoint, its own results): resumable on its own
    RUN/results_<split>.json               # one results file: every ability's block, from its own head
    RUN/predictions_<split>.jsonl          # every ability's per-sample records

Re-running the same command skips the abilities whose head is trained (and scored), and resumes the one that was
interrupted from its checkpoint. One joint head on the union of the abilities is still available with
``--joint`` (``LLMHeadConfig.joint``); a run of one ability is a plain single run either way.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from ava.errors import AvaError
from ava.heads.llm.config import LLMHeadConfig
from ava.heads.rundir import owns_run_dir
from ava.jsonfile import read_json

ABILITIES_DIR = "abilities"


def ability_dir(run_dir: str | Path, key: str) -> Path:
    return Path(run_dir) / ABILITIES_DIR / key


def is_per_ability(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds per-ability heads (written by :func:`train`)."""
    path = Path(run_dir) / "run.json"
    try:
        return bool(read_json(path).get("per_ability")) if path.is_file() else False
    except (OSError, json.JSONDecodeError):
        return False


def _main() -> bool:
    return os.environ.get("RANK", "0") == "0"


def _abilities(config: LLMHeadConfig) -> list[str]:
    from ava.data.format import Dataset
    from ava.heads.targets import select_abilities

    if not config.data:
        raise AvaError("no dataset given (--data)")
    return select_abilities(Dataset(config.data), config.ava)


def _suffix(decode: str) -> str:
    return "" if decode == "generate" else "_score"


def _finished(sub: LLMHeadConfig) -> bool:
    """A sub-run whose training is done and (when it evaluates after training) whose results exist."""
    from ava.heads.llm.train import check_resumable

    sub_dir = Path(sub.out)
    check_resumable(sub_dir, sub)  # a different config in the same place is refused, never silently skipped
    run_file = sub_dir / "run.json"
    if not run_file.is_file():
        return False
    training = read_json(run_file).get("training") or {}
    if not training.get("done"):
        return False
    return not sub.eval_after or (sub_dir / f"results_{sub.split}{_suffix(sub.decode)}.json").is_file()


def sub_config(config: LLMHeadConfig, key: str) -> LLMHeadConfig:
    """The single-ability config of ``key`` inside a per-ability run (epochs None: that ability's own)."""
    return dataclasses.replace(config, ava=[key], out=str(ability_dir(config.out, key)), joint=False)


@owns_run_dir("llm")
def train(config: LLMHeadConfig) -> Path:
    """Train one head per ability of ``config`` (or one joint head with ``config.joint``); returns the run dir."""
    from ava.heads.llm.train import train as train_one

    abilities = _abilities(config)
    if config.joint or len(abilities) == 1:
        return train_one(config)
    if not config.out:
        raise AvaError("no output directory given (--out)")
    run_dir = Path(config.out)
    if (run_dir / "config.json").is_file() and not is_per_ability(run_dir):
        raise AvaError(f"{run_dir} holds a joint LLM-head run; pass --joint to continue it, or another --out")
    if _main():
        _write_parent(run_dir, config, abilities)
    for key in abilities:
        sub = sub_config(config, key)
        if not _finished(sub):
            train_one(sub)
    if _main():
        _write_parent(run_dir, config, abilities)
        if config.eval_after:
            merge_results(run_dir, config.split, config.decode)
    return run_dir


def _write_parent(run_dir: Path, config: LLMHeadConfig, abilities: list[str]) -> None:
    """The parent's config.json and run.json: which abilities, where their runs are, what each trained."""
    from ava.heads.llm.runtime import write_run_files

    runs: dict[str, Any] = {}
    first: dict[str, Any] = {}
    for key in abilities:
        path = ability_dir(run_dir, key) / "run.json"
        sub = read_json(path) if path.is_file() else {}
        first = first or sub
        runs[key] = {"dir": f"{ABILITIES_DIR}/{key}", "training": sub.get("training"), "n_train": sub.get("n_train")}
    # (each ability's run keeps the identity of its own data: ava head eval checks it there)
    run = {k: v for k, v in first.items() if k not in ("training", "n_train", "abilities", "data_identity")}
    run.update({"head": "llm", "vfm": config.vfm, "abilities": abilities, "per_ability": True, "runs": runs})
    run["random_weights"] = any(_sub_run(run_dir, k).get("random_weights") for k in abilities)
    write_run_files(run_dir, config, run)


def _sub_run(run_dir: Path, key: str) -> dict[str, Any]:
    path = ability_dir(run_dir, key) / "run.json"
    return read_json(path) if path.is_file() else {}


def evaluate(run_dir: str | Path, split: str = "test", **options: Any) -> dict[str, Any]:
    """Evaluate every ability's head of a per-ability run on ``split``, then write the one merged results file."""
    from ava.heads.llm.evaluate import evaluate as evaluate_one
    from ava.heads.rundir import read_run

    run_dir = Path(run_dir)
    _, run = read_run(run_dir, head="llm")
    for key in run["abilities"]:
        evaluate_one(ability_dir(run_dir, key), split, **options)
    if not _main():
        return {}
    return merge_results(run_dir, split, options.get("decode") or "generate")


def merge_results(run_dir: str | Path, split: str, decode: str = "generate") -> dict[str, Any]:
    """``RUN/results_<split>.json`` from the abilities' own results: one block per ability, counts summed."""
    from ava.metrics.sample_set import merge as merge_sample_sets
    from ava.metrics.sample_set import recorded_block
    from ava.metrics.scoring import write_json

    run_dir = Path(run_dir)
    run = read_json(run_dir / "run.json")
    name = f"{split}{_suffix(decode)}"
    parts: dict[str, dict[str, Any]] = {}
    records: list[str] = []
    for key in run["abilities"]:
        sub = ability_dir(run_dir, key)
        path = sub / f"results_{name}.json"
        if not path.is_file():
            raise AvaError(f"{sub}: no results_{name}.json; evaluate it (`ava head eval --run {run_dir}`)")
        parts[key] = read_json(path)
        pred = sub / f"predictions_{name}.jsonl"
        if pred.is_file():
            records.extend(line for line in pred.read_text().splitlines() if line.strip())
    first = next(iter(parts.values()))
    merged = {
        **first,
        "abilities": {k: r["abilities"][k] for k, r in parts.items()},
        "run": {**run, "decode": decode},
        "n_missing": sum(int(r.get("n_missing", 0)) for r in parts.values()),
        "n_unknown": sum(int(r.get("n_unknown", 0)) for r in parts.values()),
        "sample_set": merge_sample_sets(recorded_block(r) for r in parts.values()),
    }
    write_json(merged, run_dir / f"results_{name}.json")
    from ava.data.format import atomic_write_text

    atomic_write_text(run_dir / f"predictions_{name}.jsonl", "".join(r + "\n" for r in records))
    return merged
