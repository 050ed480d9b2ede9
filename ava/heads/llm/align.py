"""Connector pre-training on image-caption pairs (the paper's stage 1), and warm starts.

How captions reach the cache, simply: ``import_captions`` turns a LLaVA-558K-style JSON (a list of
``{"id", "image", "conversations": [{"from": "human", "value": "<image>\\n..."}, {"from": "gpt", ...}]}``,
image paths relative to ``--images``) into an ava dataset directory whose ``samples/captions.jsonl`` holds
one sample per pair (ava ``"captions"``, split ``"train"``, images normalized and content-addressed like
every dataset). Then::

    ava head import-captions blip_laion_cc_sbu_558k.json --images LLaVA-Pretrain/images --out data/captions
    ava cache extract --vfm siglip --data data/captions --cache cache --ava captions
    ava head align --vfm siglip --data data/captions --cache cache --out runs/align-siglip
    ava head train --vfm siglip ... --init runs/align-siglip

(``--features online`` skips the cache and runs the VFM on every batch instead.)

Only the connector trains (the LLM is frozen, no LoRA), at the paper's stage-1 learning rate 1e-3 and global
batch 256 (by default 8 accumulated micro-batches of 32), with the same prompt as stage 3 (the instruction as the
question, the caption as the answer). Stage 2 (:mod:`ava.heads.llm.stage2`) continues from its connector.
``--init`` of ``ava head train`` accepts the resulting run directory; see
:func:`ava.heads.llm.runtime.read_init` for the stage-2 directory layout.
"""

from __future__ import annotations

import json
from pathlib import Path

from ava.data.format import Dataset, DatasetWriter, Sample
from ava.errors import AvaError
from ava.heads.llm.config import AlignConfig
from ava.heads.rundir import owns_run_dir
from ava.jsonfile import read_json

CAPTIONS = "captions"


def _turns(item: dict, where: str) -> tuple[str, str]:
    conv = item.get("conversations") or []
    human = next((c.get("value", "") for c in conv if c.get("from") == "human"), None)
    gpt = next((c.get("value", "") for c in conv if c.get("from") == "gpt"), None)
    if human is None or not gpt:
        raise AvaError(f"{where}: pair {item.get('id')!r} lacks a human or a gpt turn")
    question = " ".join(human.replace("<image>", " ").split())
    return question or "Give a brief description of the image.", gpt.strip()


def _check_ids(items: list, captions: Path) -> None:
    """Every pair is an object with an id of its own (a repeated id would silently replace a pair)."""
    first: dict[str, int] = {}
    for n, item in enumerate(items):
        if not isinstance(item, dict) or item.get("id") is None:
            raise AvaError(f"captions file {captions}: pair {n} is not an object with an 'id'")
        sid = str(item["id"])
        if sid in first:
            raise AvaError(
                f"captions file {captions}: id {sid!r} is used by pairs {first[sid]} and {n}; ids must be unique"
            )
        first[sid] = n


def import_captions(captions: str | Path, images: str | Path, out: str | Path, *, max_pairs: int | None = None) -> int:
    """Write the pairs of a LLaVA caption JSON as ``samples/captions.jsonl`` of a dataset at ``out``."""
    from ava.data.images import normalize_image
    from ava.data.paths import read_confined

    captions, images = Path(captions), Path(images)
    try:
        items = read_json(captions)
    except (OSError, json.JSONDecodeError) as e:
        raise AvaError(f"captions file {captions}: {e}") from e
    if not isinstance(items, list):
        raise AvaError(f"captions file {captions}: expected a JSON list of {{id, image, conversations}}")
    items = items[:max_pairs] if max_pairs is not None else items
    _check_ids(items, captions)
    with DatasetWriter(out, info={"source": f"captions:{captions.name}", "captions": True}) as writer:
        for item in items:
            question, caption = _turns(item, str(captions))
            try:
                data = read_confined(images, str(item.get("image", "")), what="image")
            except AvaError as e:
                raise AvaError(f"{captions}: image of pair {item.get('id')!r}: {e}") from e
            norm = normalize_image(data, source=str(images / str(item.get("image", ""))))
            rel = writer.add_image_bytes(norm.data, norm.ext)
            writer.add_sample(
                Sample(
                    id=str(item.get("id")),
                    ava=CAPTIONS,
                    image=rel,
                    width=norm.width,
                    height=norm.height,
                    question=question,
                    answer=caption,
                    truth={"text": caption},
                    split="train",
                )
            )
    return len(items)


@owns_run_dir("align")
def align(config: AlignConfig) -> Path:
    """Train the connector alone on caption pairs; writes ``connector.safetensors`` and run.json (head "align")."""
    import dataclasses

    import torch

    from ava.heads.llm.config import auto_grad_accum
    from ava.heads.llm.llms import load_llm
    from ava.heads.llm.model import build_head
    from ava.heads.llm.prompt import PromptEncoder
    from ava.heads.llm.runtime import encode_samples, feature_source, save_weights, write_run_files
    from ava.heads.llm.train import LoopData, check_resumable, fit, init_dist, resolve_dtype
    from ava.heads.targets import stable_order

    if not config.out:
        raise AvaError("no output directory given (--out)")
    dist, device = init_dist(config.device)
    if config.grad_accum is None:  # the paper's 256 as 8 x 32 on one device
        batch = config.batch_size or 256
        config = dataclasses.replace(config, grad_accum=auto_grad_accum(batch, dist.world, 32))
    dtype = resolve_dtype(config.dtype, device)
    run_dir = Path(config.out)
    check_resumable(run_dir, config)
    dataset = Dataset(config.data)
    if not dataset.has_samples(CAPTIONS):
        raise AvaError(f"{config.data} has no samples/{CAPTIONS}.jsonl; make it with `ava head import-captions`")
    samples = dataset.samples(CAPTIONS)
    if config.max_train is not None:
        samples = stable_order(samples, f"cap{config.seed}")[: config.max_train]
    llm, tokenizer, info = load_llm(
        config.llm, dtype=torch.bfloat16 if dtype == torch.bfloat16 else None, device=str(device)
    )
    source = feature_source(config, dataset, samples, device)
    head = build_head(llm, source.dim, lora_r=None, seed=config.seed).to(device)
    head.connector.float()
    loop = LoopData(
        source.items,
        encode_samples(PromptEncoder(tokenizer), samples, True),
        source.num_tokens,
        tokenizer.pad_token_id,
        source.featurize,
    )
    run = {
        "head": "align",
        "vfm": config.vfm,
        "abilities": [],
        "n_pairs": len(samples),
        **source.info,
        **info,
        "random_weights": bool(source.info["vfm_random_weights"] or info["llm_random_weights"]),
    }
    if dist.main:
        write_run_files(run_dir, config, run)
    summary = fit(
        head,
        loop,
        config,
        run_dir,
        dist=dist,
        device=device,
        dtype=dtype,
        epochs=config.epochs or 1,
        lr=config.lr or 1e-3,
        batch_size=config.batch_size or 256,
        description="align",
    )
    if dist.main:
        save_weights(head, run_dir)
        write_run_files(run_dir, config, {**run, "training": summary})
    return run_dir
