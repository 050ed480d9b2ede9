"""Stage 2 from the cache: full fine-tuning of the LLM and the connector on instruction conversations.

The paper's stage 3 starts from a stage-2 checkpoint: the connector aligned on LLaVA-558K captions (stage 1,
:mod:`ava.heads.llm.align`), then the LLM and the connector tuned together on LLaVA-665K instructions (lr 2e-5,
global batch 128, 1 epoch). The whole protocol from one cache::

    ava head import-captions blip_laion_cc_sbu_558k.json --images LLaVA-Pretrain/images --out data/captions
    ava head import-instructions llava_v1_5_mix665k.json --images LLaVA-Finetune/images --out data/instruct
    ava cache extract --vfm siglip --data data/captions --cache cache --ava captions
    ava cache extract --vfm siglip --data data/instruct --cache cache --ava instructions
    ava head align    --vfm siglip --data data/captions --cache cache --out runs/stage1
    ava head instruct --vfm siglip --data data/instruct --cache cache --init runs/stage1 --out runs/stage2
    ava head train    --vfm siglip --data data/ava --cache cache --init runs/stage2 --out runs/stage3

``import_instructions`` reads LLaVA-665K JSON (a list of ``{"id", "image"?, "conversations": [{"from": "human" |
"gpt", "value"}, ...]}``): a conversation with an image becomes a sample of ``samples/instructions.jsonl`` (its
turns in ``meta["turns"]``; the image normalized and content-addressed, so the cache extracts it like any other);
one without an image goes to ``instructions_text.jsonl``, which needs no features. Every reply of a conversation
carries loss (:meth:`ava.heads.llm.prompt.PromptEncoder.encode_turns`).

The output directory is what ``--init`` of ``ava head train`` reads as a stage-2 checkpoint: a transformers
causal-LM directory (``config.json``, ``model.safetensors``, the tokenizer) plus ``connector.safetensors`` and
``ava_llm.json`` (the prompt template); the training log, config and resumable checkpoint are under ``training/``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from ava.data.format import Dataset, DatasetWriter, Sample, atomic_write_text
from ava.errors import AvaError
from ava.heads.llm.config import InstructConfig

INSTRUCTIONS = "instructions"
TEXT_FILE = "instructions_text.jsonl"
TRAINING_DIR = "training"


# -- import ----------------------------------------------------------------------------------------------------
def conversation_turns(item: Any, where: str) -> list[tuple[str, str]]:
    """``[(question, reply), ...]`` of one LLaVA conversation: human and gpt turns alternating, ``<image>`` removed."""
    if not isinstance(item, dict):
        raise AvaError(f"{where}: expected an object with id and conversations, got {type(item).__name__}")
    conv = item.get("conversations")
    name = f"{where}: conversation {item.get('id')!r}"
    if not isinstance(conv, list) or len(conv) < 2:
        raise AvaError(f"{name} has no human and gpt turns")
    turns = []
    for i in range(0, len(conv) - 1, 2):
        human, gpt = conv[i], conv[i + 1]
        if not (isinstance(human, dict) and isinstance(gpt, dict)):
            raise AvaError(f"{name}: turn {i} is not an object with 'from' and 'value'")
        if human.get("from") != "human" or gpt.get("from") != "gpt":
            raise AvaError(f"{name}: turns must alternate human, gpt (turn {i} is {human.get('from')!r})")
        question = " ".join(str(human.get("value", "")).replace("<image>", " ").split())
        reply = str(gpt.get("value", "")).strip()
        if not question or not reply:
            raise AvaError(f"{name}: turn {i} has an empty question or reply")
        turns.append((question, reply))
    if len(conv) % 2:
        raise AvaError(f"{name}: the last turn has no gpt reply")
    return turns


def import_instructions(
    path: str | Path, images: str | Path, out: str | Path, *, max_items: int | None = None
) -> tuple[int, int]:
    """Write a LLaVA-665K-style JSON into a dataset at ``out``; returns (conversations with an image, without)."""
    from ava.data.images import normalize_image

    path, images, out = Path(path), Path(images), Path(out)
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AvaError(f"instructions file {path}: {e}") from e
    except RecursionError:
        raise AvaError(f"instructions file {path}: JSON nested too deeply to read") from None
    if not isinstance(items, list):
        raise AvaError(f"instructions file {path}: expected a JSON list of {{id, image, conversations}}")
    items = items[:max_items] if max_items is not None else items
    conversations = [conversation_turns(item, str(path)) for item in items]  # all checked before anything is written
    text_only: list[dict[str, Any]] = []
    n_image = 0
    with DatasetWriter(out, info={"source": f"instructions:{path.name}", "instructions": True}) as writer:
        for item, turns in zip(items, conversations, strict=True):
            sid = str(item.get("id"))
            if not item.get("image"):
                text_only.append({"id": sid, "turns": [list(t) for t in turns]})
                continue
            image_path = images / str(item["image"])
            try:
                norm = normalize_image(image_path.read_bytes(), source=str(image_path))
            except OSError as e:
                raise AvaError(f"{path}: image of conversation {sid!r} cannot be read: {e}") from e
            rel = writer.add_image_bytes(norm.data, norm.ext)
            question, reply = turns[-1]
            writer.add_sample(
                Sample(
                    id=sid,
                    ava=INSTRUCTIONS,
                    image=rel,
                    width=norm.width,
                    height=norm.height,
                    question=question,
                    answer=reply,
                    truth={"text": reply},
                    split="train",
                    meta={"turns": [list(t) for t in turns]},
                )
            )
            n_image += 1
    atomic_write_text(out / TEXT_FILE, "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in text_only))
    return n_image, len(text_only)


def _read_text_only(root: Path) -> list[list[tuple[str, str]]]:
    path = root / TEXT_FILE
    if not path.is_file():
        return []
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append([(str(q), str(a)) for q, a in json.loads(line)["turns"]])
            except (ValueError, KeyError, TypeError) as e:
                raise AvaError(f"{path}:{lineno}: not a conversation ({e})") from e
    return out


# -- training --------------------------------------------------------------------------------------------------
class _Mixed(torch.utils.data.Dataset):
    """Image conversations (features from the cache) then text-only ones (zero features, no image slots)."""

    def __init__(self, images: Any, n_text: int, num_tokens: int, dim: int) -> None:
        self.images, self.n_text, self.zeros = images, n_text, torch.zeros(num_tokens, dim)

    def __len__(self) -> int:
        return len(self.images) + self.n_text

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i < len(self.images):
            return self.images[i]
        return {"features": self.zeros, "index": i}

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        """A batch's cached features in one read (as :class:`ava.cache.FeatureDataset` does)."""
        n = len(self.images)
        wanted = [i for i in indices if i < n]
        read = getattr(self.images, "__getitems__", None)
        rows = read(wanted) if wanted and read else [self.images[i] for i in wanted]
        got = dict(zip(wanted, rows, strict=True))
        return [got[i] if i < n else {"features": self.zeros, "index": i} for i in indices]


def _featurize(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    from ava.heads.llm.prompt import image_rows_first

    return image_rows_first(batch["features"], batch["image_mask"])


def instruct(config: InstructConfig) -> Path:
    """Stage 2: tune the whole LLM and the connector on conversations; writes a directory ``--init`` accepts.

    ``--out`` is owned as the other heads own theirs (:mod:`ava.heads.rundir.ownership`): the run's config lives in
    ``training/``, so that is what is claimed (one job at a time, no other config mixed in); a non-empty ``--out``
    without ``training/`` holds no stage-2 run and is never written into.
    """
    from ava.heads.rundir import RunDirError, claim_run

    if not config.out:
        raise AvaError("no output directory given (--out)")
    out = Path(config.out)
    if out.is_dir() and any(out.iterdir()) and not (out / TRAINING_DIR).is_dir():
        raise RunDirError(
            f"--out {out} is not empty and holds no stage-2 run (no {TRAINING_DIR}/); it is never "
            "written into: choose another --out"
        )
    hint = f"Choose another --out, or delete {out} to start over (stage 2 has no --force)"
    with claim_run(out / TRAINING_DIR, "instruct", config, replace_hint=hint):
        return _instruct(config)


def _instruct(config: InstructConfig) -> Path:
    from ava.heads.llm.config import auto_grad_accum
    from ava.heads.llm.llms import TEMPLATE_FILE, load_llm
    from ava.heads.llm.model import build_head
    from ava.heads.llm.prompt import PromptEncoder
    from ava.heads.llm.runtime import feature_source, load_connector, read_init, write_run_files
    from ava.heads.llm.train import LoopData, check_resumable, fit, init_dist, resolve_dtype
    from ava.heads.targets import stable_order

    if config.features != "cache":
        raise AvaError("--features: stage 2 reads image features from the cache only (--features cache)")
    dist, device = init_dist(config.device)
    if config.grad_accum is None:
        config = dataclasses.replace(config, grad_accum=auto_grad_accum(config.batch_size or 128, dist.world, 16))
    out = Path(config.out)
    train_dir = out / TRAINING_DIR
    check_resumable(train_dir, config)
    dataset = Dataset(config.data)
    if not (dataset.root / "samples" / f"{INSTRUCTIONS}.jsonl").is_file() and not (dataset.root / TEXT_FILE).is_file():
        raise AvaError(f"{config.data} holds no conversations; make it with `ava head import-instructions`")
    samples = dataset.samples(INSTRUCTIONS) if (dataset.root / "samples" / f"{INSTRUCTIONS}.jsonl").is_file() else []
    samples = stable_order(samples, f"ins{config.seed}")[: config.max_train] if config.max_train else samples
    text = _read_text_only(dataset.root)[: config.max_train] if config.max_train else _read_text_only(dataset.root)
    if not samples:
        raise AvaError(f"{config.data}: stage 2 needs conversations with an image (the connector learns from them)")
    init_llm, connector = read_init(config.init)
    llm, tokenizer, info = load_llm(init_llm or config.llm, device=str(device))  # fp32 weights: all of them train
    dtype = resolve_dtype(config.dtype, device)
    source = feature_source(config, dataset, samples, device)
    head = build_head(llm, source.dim, lora_r=None, seed=config.seed).to(device)
    head.llm.requires_grad_(True)  # full fine-tuning of the LLM, and the connector
    head.connector.float()
    if connector is not None:
        load_connector(head.connector, connector, str(config.init))
    encoder = PromptEncoder(tokenizer)
    encoded = [encoder.encode_turns([tuple(t) for t in s.meta["turns"]]) for s in samples]
    encoded += [encoder.encode_turns(turns, image=False) for turns in text]
    loop = LoopData(
        _Mixed(source.items, len(text), source.num_tokens, source.dim),
        encoded,
        source.num_tokens,
        tokenizer.pad_token_id,
        _featurize,
    )
    run = {
        "head": "instruct",
        "vfm": config.vfm,
        "abilities": [],
        "n_conversations": len(samples),
        "n_text_only": len(text),
        "init": config.init,
        **source.info,
        **info,
        "random_weights": bool(source.info["vfm_random_weights"] or info["llm_random_weights"]),
    }
    if dist.main:
        write_run_files(train_dir, config, run)
    summary = fit(
        head,
        loop,
        config,
        train_dir,
        dist=dist,
        device=device,
        dtype=dtype,
        epochs=config.epochs or 1,
        lr=config.lr or 2e-5,
        batch_size=config.batch_size or 128,
        description="instruct",
    )
    if dist.main:
        _save(out, head, tokenizer, info, TEMPLATE_FILE)
        write_run_files(train_dir, config, {**run, "training": summary})
    return out


def _save(out: Path, head: Any, tokenizer: Any, info: dict[str, Any], template_file: str) -> None:
    """The tuned LLM (safetensors), its tokenizer, the connector and the prompt template, as ``--init`` reads them;
    the LLM it was tuned from and whether its weights were random go beside them, so every run started from this
    directory says so."""
    from safetensors.torch import save_file

    from ava.heads.llm.runtime import CONNECTOR_FILE

    out.mkdir(parents=True, exist_ok=True)
    head.base.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    state = {k: v.detach().cpu().contiguous() for k, v in head.connector.state_dict().items()}
    save_file(state, str(out / f".{CONNECTOR_FILE}.tmp"))
    (out / f".{CONNECTOR_FILE}.tmp").replace(out / CONNECTOR_FILE)
    described = {
        "template": info["prompt_template"],
        "stage": 2,
        "tuned_from": info.get("llm_base") or info["llm"],
        "llm_random_weights": bool(info["llm_random_weights"]),
    }
    atomic_write_text(out / template_file, json.dumps(described) + "\n")
