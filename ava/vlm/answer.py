"""``ava vlm answer``: a VLM's reply to every sample of a split, written to a run directory sample by sample, then
scored exactly as ``ava score`` scores any replies.

Run directory::

    RUN/config.json               # the resolved AnswerConfig
    RUN/run.json                  # head "vlm", the model (as vfm and llm, so reports label it vlm:<model>), its
                                  # weights identity, the data identity of the abilities answered
    RUN/replies.jsonl             # {"ava", "id", "prediction"} per sample, appended a batch at a time
    RUN/results_<split>.json      # scored (the results schema), predictions_<split>.jsonl beside it

Re-running the same command answers only the samples without a reply (a line cut short by a kill is dropped);
a RUN made by another model or for other data is refused by name, and so is scoring its replies against another
dataset (:func:`check_replies_dataset`, which ``ava score`` calls).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ava.errors import AvaError
from ava.jsonfile import loads, read_json

REPLIES = "replies.jsonl"


@dataclass
class AnswerConfig:
    """``ava vlm answer``: one VLM, one dataset, one split."""

    model: str = ""  # hub id or directory of an image-text-to-text checkpoint
    data: str = ""
    out: str = ""
    ava: list[str] | None = None
    split: str = "test"
    batch_size: int = 8
    max_new_tokens: int = 32
    max_samples: int | None = None  # per ability, the first N in the dataset's order (smoke runs)
    device: str = "auto"
    dtype: str = "auto"
    trust_remote_code: bool = False
    random_weights: bool = False  # the checkpoint has random weights (a tiny test model): every table says so
    progress: bool = True


@dataclass
class AnswerResult:
    run_dir: Path
    answered: int  # samples answered by this call
    resumed: int  # samples that already had a reply
    results: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def scores(self) -> dict[str, float]:
        return {a: r["value"] for a, r in self.results.get("abilities", {}).items()}


def read_replies(path: Path) -> dict[tuple[str, str], str]:
    """The replies written so far; a last line cut short (a kill mid-write) is dropped, any other bad line named."""
    found: dict[tuple[str, str], str] = {}
    if not path.is_file():
        return found
    lines = path.read_text(encoding="utf-8").split("\n")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = loads(line, f"{path}:{lineno}")
            found[(str(rec["ava"]), str(rec["id"]))] = str(rec["prediction"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            if lineno == len(lines):  # the unfinished last line of an interrupted run
                break
            raise AvaError(f"{path}:{lineno}: not a reply line ({e}); not a file ava wrote") from e
    return found


def _run_block(config: AnswerConfig, vlm_name: str, identity: str, dataset: Any, abilities: list[str]) -> dict:
    from ava.heads.rundir import data_identity

    return {
        "head": "vlm",
        "vfm": vlm_name,
        "llm": vlm_name,
        "model": config.model,
        "weights": identity,
        "abilities": abilities,
        "random_weights": config.random_weights,
        "llm_random_weights": config.random_weights,
        "vfm_random_weights": config.random_weights,
        "split": dataset.split_info,
        "synthetic": dataset.is_synthetic,
        "data_identity": data_identity(dataset, abilities),
    }


def _check_resume(run_dir: Path, run: dict[str, Any]) -> None:
    """Refuse to add replies to a run made by another model or for other data."""
    path = run_dir / "run.json"
    if not path.is_file():
        if (run_dir / REPLIES).is_file():
            raise AvaError(f"{run_dir} holds {REPLIES} but no run.json: not a run `ava vlm answer` made")
        return
    old = read_json(path)
    if old.get("head") != "vlm":
        raise AvaError(f"{run_dir} is a {old.get('head')!r} run, not a VLM run: choose another --out")
    if old.get("weights") != run["weights"]:
        raise AvaError(
            f"{run_dir} holds replies of {old.get('model')} ({old.get('weights')}), not of "
            f"{run['model']}: choose another --out"
        )
    before = (old.get("data_identity") or {}).get("per_ability") or {}
    now = run["data_identity"]["per_ability"]
    if any(before[a] != now[a] for a in set(before) & set(now)):
        raise AvaError(
            f"{run_dir} holds replies for other data ({(old.get('data_identity') or {}).get('dataset')}); "
            f"the samples of {run['data_identity'].get('dataset')} differ: choose another --out"
        )


def answer(config: AnswerConfig) -> AnswerResult:
    """Generate a reply for every sample of ``config.split`` not answered yet, then score the run."""
    from ava.config import save_config, to_jsonable
    from ava.data.format import Dataset
    from ava.heads.features import resolve_device
    from ava.heads.rundir import score_and_write, write_json
    from ava.heads.targets import select_abilities
    from ava.vlm.model import load_vlm

    if not config.model or not config.data or not config.out:
        raise AvaError("--model, --data and --out are required")
    if config.batch_size < 1 or config.max_new_tokens < 1:
        raise AvaError("--batch-size and --max-new-tokens must be at least 1")
    dataset = Dataset(config.data)
    abilities = select_abilities(dataset, config.ava)
    samples = [s for a in abilities for s in dataset.samples(a, split=config.split)[: config.max_samples]]
    if not samples:
        raise AvaError(f"dataset {config.data} has no {config.split!r} samples for {', '.join(abilities)}")
    vlm = load_vlm(
        config.model,
        device=resolve_device(config.device),
        dtype=config.dtype,
        trust_remote_code=config.trust_remote_code,
    )
    run_dir = Path(config.out)
    run = _run_block(config, vlm.name, vlm.identity, dataset, abilities)
    _check_resume(run_dir, run)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.json")
    write_json(run_dir / "run.json", run)
    done = read_replies(run_dir / REPLIES)
    _rewrite_complete(run_dir / REPLIES, done)
    todo = [s for s in samples if s.key not in done]
    _generate(vlm, dataset, todo, config, run_dir / REPLIES, done)
    predictions = {s.key: done[s.key] for s in samples if s.key in done}
    results = score_and_write(dataset, predictions, abilities, config.split, run, to_jsonable(config), run_dir)
    return AnswerResult(run_dir, len(todo), len(samples) - len(todo), results)


def _rewrite_complete(path: Path, done: dict[tuple[str, str], str]) -> None:
    """Drop an unfinished last line, so the next appends start on a line of their own."""
    if path.is_file():
        from ava.data.format import atomic_write_text

        atomic_write_text(path, "".join(_line(a, i, r) for (a, i), r in done.items()))


def _line(ava: str, sample_id: str, reply: str) -> str:
    return json.dumps({"ava": ava, "id": sample_id, "prediction": reply}, ensure_ascii=False) + "\n"


def _generate(
    vlm: Any, dataset: Any, todo: list[Any], config: AnswerConfig, path: Path, done: dict[tuple[str, str], str]
) -> None:
    from ava.progress import progress as progress_bar

    with progress_bar(config.progress, transient=True) as bar, path.open("a", encoding="utf-8") as f:
        task = bar.add_task(f"vlm {vlm.name}", total=len(todo))
        for start in range(0, len(todo), config.batch_size):
            batch = todo[start : start + config.batch_size]
            replies = vlm.generate(
                [dataset.load_image(s) for s in batch], [s.question for s in batch], config.max_new_tokens
            )
            f.write("".join(_line(s.ava, s.id, r) for s, r in zip(batch, replies, strict=True)))
            f.flush()
            os.fsync(f.fileno())  # a batch answered is a batch kept, whatever happens next
            done.update({s.key: r for s, r in zip(batch, replies, strict=True)})
            bar.advance(task, len(batch))


def check_replies_dataset(
    pred: str | os.PathLike[str], data: str | os.PathLike[str], abilities: list[str] | None = None
) -> None:
    """Refuse to score a VLM run's replies against another dataset than the one they answered (``ava score``)."""
    from ava.data.format import Dataset
    from ava.heads.rundir import data_identity

    run_path = Path(pred).parent / "run.json"
    if not run_path.is_file():
        return
    try:
        run = read_json(run_path)
    except (OSError, json.JSONDecodeError):
        return
    if not isinstance(run, dict) or run.get("head") != "vlm" or not isinstance(run.get("data_identity"), dict):
        return
    recorded = run["data_identity"].get("per_ability") or {}
    keys = [a for a in (abilities or list(recorded)) if a in recorded]
    dataset = Dataset(data)
    now = data_identity(dataset, [a for a in keys if dataset.has_samples(a)]).get("per_ability") or {}
    differ = [a for a in keys if now.get(a) != recorded[a]]
    if differ:
        raise AvaError(
            f"{pred} holds replies of VLM {run.get('model')} for {run['data_identity'].get('dataset')}, "
            f"not for {data} (abilities {', '.join(differ)} differ); score them against the data they "
            "answered"
        )
