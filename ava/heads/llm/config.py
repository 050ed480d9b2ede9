"""Configs of the LLM head (the paper's protocol) and of connector pre-training (the paper's stage 1).

Defaults are the paper's stage-3 hyperparameters; ``None`` means "the paper's value for this ability"
(e.g. ``epochs`` is 10, or 20 for localization, from :attr:`ava.abilities.Ability.epochs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LLMHeadConfig:
    """One LLM-head run. The paper trains one head per ability: several abilities in one run train one head each,
    in one run directory (:mod:`ava.heads.llm.per_ability`), each with its own epochs; ``joint`` trains one head on
    their union instead (epochs default to the largest of theirs)."""

    # the fields every head's config shares (what `ava fingerprint` and the sweep fill in)
    ava: list[str] = field(default_factory=list)
    vfm: str = ""
    data: str = ""
    cache: str = ""
    out: str = ""
    seed: int = 0
    device: str = "auto"
    epochs: int | None = None  # None: Ability.epochs (10, or 20 for localization)
    lr: float | None = None  # None: 1e-4
    batch_size: int | None = None  # the GLOBAL batch (all ranks x grad_accum x micro batch); None: 16
    layer: int | None = None  # the VFM layer among the cached ones; None: the first cached layer
    split: str = "test"
    eval_after: bool = True
    max_train: int | None = None
    # LLM-head fields
    joint: bool = False  # one joint head on all the abilities, not the paper's one head per ability
    llm: str = "qwen2-0.5b"
    grad_accum: int = 1
    lora_r: int = 128
    lora_alpha: int | None = None  # None: 2 * lora_r (the paper: r 128, alpha 256)
    lora_dropout: float = 0.05
    features: str = "cache"  # "cache" (read the feature cache) or "online" (run the VFM on every batch)
    trust_remote_code: bool = False  # online features: let the VFM checkpoint run its own code (opt-in, recorded)
    init: str | None = None  # an align run, an LLM-head run, or a stage-2 directory (see ava/heads/llm/align.py)
    dtype: str = "auto"  # "auto" (bf16 autocast on GPU, fp32 on CPU), "fp32" or "bf16" (fp16 would need a GradScaler)
    max_eval: int | None = None
    decode: str = "generate"  # evaluation after training: "generate" or "score"
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    gradient_checkpointing: bool = False
    num_workers: int = 0
    checkpoint_every: int = 200  # optimizer steps between resumable checkpoints (and at every epoch end)
    stop_after_steps: int | None = None  # stop (with a checkpoint) after this many optimizer steps: a time box
    eval_batch_size: int | None = None  # None: sized to the memory at hand (evaluate.auto_batch_size)
    progress: bool = True
    compile: bool | None = None  # torch.compile the decoder layers; None: on for CUDA, off elsewhere
    pack: bool | None = None  # packed sequences, no padding (ava.heads.llm.packing); None: on
    log_every: int = 10  # optimizer steps between reads of the loss from the device (the log still has every step)
    force: bool = False  # replace a different run at `out` (atomically; see ava.heads.rundir.ownership)


@dataclass
class AlignConfig:
    """Connector-only training on image-caption pairs (LLaVA-558K JSON, imported with ``import_captions``)."""

    vfm: str = ""
    data: str = ""  # a captions dataset dir made by ``ava head import-captions`` (samples/captions.jsonl)
    cache: str = ""
    out: str = ""
    llm: str = "qwen2-0.5b"
    seed: int = 0
    device: str = "auto"
    epochs: int | None = 1
    lr: float | None = 1e-3  # the paper's stage 1
    batch_size: int | None = 256  # the paper's stage-1 global batch
    layer: int | None = None
    max_train: int | None = None
    features: str = "cache"
    trust_remote_code: bool = False  # online features: let the VFM checkpoint run its own code (opt-in, recorded)
    dtype: str = "auto"
    grad_accum: int | None = None  # None: the fewest steps that keep micro-batches at <= 32 (256 = 8 x 32)
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    gradient_checkpointing: bool = False
    num_workers: int = 0
    checkpoint_every: int = 200
    stop_after_steps: int | None = None
    progress: bool = True
    compile: bool | None = None
    pack: bool | None = None
    log_every: int = 10
    force: bool = False  # replace a different run at `out` (atomically; see ava.heads.rundir.ownership)


@dataclass
class InstructConfig:
    """Full fine-tuning of the LLM and the connector on instruction conversations (the paper's stage 2).

    ``data`` is a dataset made by ``ava head import-instructions`` (LLaVA-665K JSON); ``init`` an ``ava head align``
    run (stage 1) whose connector starts the training. Defaults are the paper's stage 2: lr 2e-5, global batch
    128, 1 epoch, cosine decay with 3% warmup, no weight decay.
    """

    vfm: str = ""
    data: str = ""
    cache: str = ""
    out: str = ""
    init: str | None = None  # a stage-1 (align) run: its connector is the starting point
    llm: str = "qwen2-0.5b"
    seed: int = 0
    device: str = "auto"
    epochs: int | None = 1
    lr: float | None = 2e-5
    batch_size: int | None = 128
    layer: int | None = None
    max_train: int | None = None
    features: str = "cache"  # stage 2 reads image features from the cache only
    dtype: str = "auto"
    grad_accum: int | None = None  # None: the fewest steps that keep micro-batches at <= 16 (128 = 8 x 16)
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    gradient_checkpointing: bool = False
    num_workers: int = 0
    checkpoint_every: int = 200
    stop_after_steps: int | None = None
    progress: bool = True
    compile: bool | None = None
    pack: bool | None = None
    log_every: int = 10
    force: bool = False  # replace a different run at `out` (atomically; see ava.heads.rundir.ownership)


def auto_grad_accum(batch_size: int, world: int, max_micro: int) -> int:
    """The fewest accumulation steps that split ``batch_size`` evenly over ``world`` ranks into micro-batches of at
    most ``max_micro`` (1 when the batch does not split evenly: the trainer then names the problem)."""
    per_rank = batch_size // world if batch_size % world == 0 else 0
    for accum in range(1, per_rank + 1):
        if per_rank % accum == 0 and per_rank // accum <= max_micro:
            return accum
    return 1
