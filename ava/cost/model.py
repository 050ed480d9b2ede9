"""A job's device time and the bytes it writes, from its shapes and the device's speeds.

Extraction (one VFM over every distinct image of the data): the job's start, loading the VFM, then per image its
forward (2 x parameters x tokens FLOP) and its preprocessing (per megapixel read and written), added on a CPU and
overlapped on a GPU, over the extraction's efficiency; and the cache it writes (:func:`ava.cache.plan.group_bytes`:
the codec's tokens, the pooled views, the index; before compression, so an upper bound). Under torchrun its images
are split among the GPUs.

A feature head (one VFM, one head, an ability set): the job's start; per ability its fixed work, its work per
sample, reading its features, and its fit:

- ``knn``: the pick's search among the train rows of every pooled view (every train row answered, leave-one-out, up
  to the kNN config's ``loo_max_rows``; its ``heldout_rows`` above), then the test rows (2 FLOP per value);
- ``probe-linear``: the stacked grid (learning rates x views) trained for the head's ~500 optimizer steps (the
  epochs it picks), each step at least the device's least step;
- ``probe-attn``: the same over the tokens (learned queries attend over them) at the token probe's batch and
  epochs;
- ``llm``: every ability's epochs over its train samples, at the LLM's tokens per second (visual tokens plus the
  question's and answer's), the compile warm-up, and the test samples' generation;
- ``zero-shot``: the VFM's forward over the test images (twice: image and text towers).

The bytes of a head job are its run directory: predictions and results per test sample, the head's tensors (a
probe's weights, kNN's train views, the LLM head's LoRA adapters and connector with a training checkpoint beside
them: its peak).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ava.cost.shapes import QWEN2_05B, AbilityCounts, DataShape, VFMShape, llm_params, llm_shape
from ava.cost.speeds import CostError, Speeds

TEXT_TOKENS = 82  # question and answer tokens of a sample in the LLM head (the benchmark's 811 - 729 visual)
GENERATED_TOKENS = 8  # an answer's tokens, generated one at a time at evaluation
PREDICTION_BYTES = 400  # a test sample's line in predictions_<split>.jsonl and its share of the results
LLM_REFERENCE_PARAMS = 0.494e9  # Qwen2-0.5B, at which llm_tokens_per_s is measured


@dataclass
class Estimate:
    """A job's estimated device time (seconds on one of its GPUs, or on the CPU) and the bytes it writes; ``parts``
    splits the time by what it is spent on."""

    seconds: float
    bytes: int
    parts: dict[str, float] = field(default_factory=dict)
    gpus: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 2),
            "bytes": int(self.bytes),
            "gpus": self.gpus,
            "parts": {k: round(v, 2) for k, v in self.parts.items()},
        }


def _views(vfm: VFMShape) -> list[str]:
    from ava.cache.pooling import STORED_VIEWS

    return list(STORED_VIEWS) if vfm.grid else ["mean"]


def extract_estimate(
    vfm: VFMShape,
    data: DataShape,
    speeds: Speeds,
    *,
    codec: str = "fp16",
    gpus: int = 1,
    threads: int | None = None,
) -> Estimate:
    """One VFM's extraction over the data's distinct images, alone on ``gpus`` GPUs (torchrun splits the images);
    ``threads``: the CPU threads the job is given (a CPU's figures measured with more are scaled)."""
    from ava.cache.plan import group_bytes

    forward = speeds.vfm_forward_s.get(vfm.name)
    if forward is None:
        forward = vfm.forward_flops / speeds.forward_flops_per_s
    prep = speeds.vfm_prep_s.get(vfm.name)
    if prep is None:
        prep = speeds.prep_s_per_mpix * (data.mpix + vfm.image_size**2 / 1e6)
    per_image = (forward + prep if speeds.on_cpu else max(forward, prep)) / speeds.extract_efficiency
    per_image *= speeds.slower(threads)
    written = group_bytes(codec, data.images, vfm.patch_tokens, vfm.dim, 1, _views(vfm))["total"]
    images = math.ceil(data.images / max(1, gpus))
    compute = images * per_image
    write = written / max(1, gpus) / speeds.write_bytes_per_s if speeds.write_bytes_per_s else 0.0
    parts = {
        "start": speeds.job_start_s + speeds.extract_start_s,
        "load": speeds.vfm_load_s.get(vfm.name, 0.0),
        "images": compute if speeds.on_cpu else max(compute, write),
    }
    if speeds.on_cpu:
        parts["write"] = write
    return Estimate(sum(parts.values()), written, parts, gpus)


def _counts(data: DataShape, abilities: list[str]) -> dict[str, AbilityCounts]:
    wanted = abilities or list(data.abilities)
    missing = [a for a in wanted if a not in data.abilities]
    if missing:
        raise CostError(f"{data.path}: no samples for ability {missing[0]!r}")
    return {a: data.abilities[a] for a in wanted}


def _probe_steps(head: str, n_train: int) -> tuple[int, int, Any]:
    """(optimizer steps, batch, config) of a probe on ``n_train`` samples: its own default epochs and batch on the
    held-out split's fit part (:func:`ava.heads.probe.train.epochs_and_batch`)."""
    from ava.heads.probe.config import AttnProbeConfig, ProbeConfig
    from ava.heads.probe.train import epochs_and_batch

    config = ProbeConfig() if head == "probe-linear" else AttnProbeConfig()
    held = min(n_train - 1, max(1, round(config.heldout_frac * n_train))) if n_train >= 2 else 0
    fit = max(1, n_train - held)
    epochs, batch = epochs_and_batch(config, fit, head == "probe-attn")
    return epochs * math.ceil(fit / batch), batch, config


def fit_seconds(head: str, vfm: VFMShape, c: AbilityCounts, speeds: Speeds, llm: str) -> tuple[float, float]:
    """(fit seconds, bytes of the head's tensors) of one ability."""
    from ava.cache.pooling import pool_cells, pool_dim

    d = vfm.dim
    views = _views(vfm)
    if head == "knn":  # the pick's queries (leave-one-out or a subsample) over every view it picks among
        from ava.heads.knn.config import KNNConfig

        config = KNNConfig()
        width = sum(pool_dim(d, v) for v in config.pools if v in views)
        flops = 2.0 * config.selection_queries(c.train) * c.train * width + 2.0 * c.test * c.train * width
        return flops / speeds.matmul_flops_per_s, c.train * d * 4.0
    if head in ("probe-linear", "probe-attn"):
        steps, batch, config = _probe_steps(head, c.train)
        lrs = len(config.lrs)
        if head == "probe-linear":  # every (view, lr) member: the mean, plus each cell reduced to cell_rank components
            width = sum(d + pool_cells(p) ** 2 * config.cell_rank for p in config.pools if p in views)
            flops = 6.0 * batch * width * c.out * lrs
        else:  # the learned queries attend over the tokens (scores and values), then a linear layer
            flops = 6.0 * batch * vfm.patch_tokens * d * 2 * config.heads * lrs + 6.0 * batch * d * c.out * lrs
        floor = speeds.probe_linear_step_s if head == "probe-linear" else speeds.probe_attn_step_s
        step = max(floor, flops / speeds.matmul_flops_per_s)
        return steps * step, (d + 16 * config.cell_rank) * c.out * 4.0
    if head == "llm":
        if speeds.llm_tokens_per_s <= 0:
            raise CostError(f"the speed table has no LLM-head figures for {speeds.kind}")
        scale = llm_params(llm) / LLM_REFERENCE_PARAMS
        rate = speeds.llm_tokens_per_s / max(scale, 1e-3)
        per_sample = vfm.patch_tokens + TEXT_TOKENS
        train = c.epochs * c.train * per_sample / rate
        evaluate = c.test * (per_sample + GENERATED_TOKENS * 4) / (3 * rate)  # forward only, one token at a time
        return train + evaluate, _lora_bytes(llm, vfm)
    if head == "zero-shot":
        forward = speeds.vfm_forward_s.get(vfm.name, vfm.forward_flops / speeds.forward_flops_per_s)
        return 2 * c.test * forward, 0.0
    raise CostError(f"no estimate for head {head!r}")


def _lora_bytes(llm: str, vfm: VFMShape, r: int = 128) -> float:
    """An ability's LLM-head run on disk at its peak: the trainable weights (LoRA of rank ``r``, the connector:
    vision dim -> hidden -> hidden) in float32, and one training checkpoint beside them (the weights and AdamW's two
    moments): 16 bytes a trainable parameter. An LLM whose shapes are not known scales Qwen2-0.5B's by the square
    root of its parameters."""
    shape = llm_shape(llm)
    if shape is None:
        ref = llm_shape(QWEN2_05B)
        scale = math.sqrt(llm_params(llm) / ref.params) if ref is not None else 1.0
        hidden, lora = 896 * scale, (ref.lora_params(r) if ref is not None else 35e6) * scale
    else:
        hidden, lora = shape.hidden, shape.lora_params(r)
    return 16.0 * (lora + vfm.dim * hidden + hidden * hidden)


def head_estimate(
    head: str,
    vfm: VFMShape,
    data: DataShape,
    abilities: list[str],
    speeds: Speeds,
    *,
    llm: str = "qwen2-0.5b",
    threads: int | None = None,
) -> Estimate:
    """One head job alone: ``head`` on ``vfm``'s features of ``abilities`` (empty: every ability in the data), given
    ``threads`` CPU threads."""
    counts = _counts(data, abilities)
    parts = {"start": speeds.job_start_s, "abilities": 0.0, "samples": 0.0, "read": 0.0, "fit": 0.0}
    written = 0.0
    views = _views(vfm)
    from ava.cache.pooling import pool_dim

    tokens = head in ("probe-attn", "llm")  # these read the tokens (fp16); the others the pooled views (float32)
    row = vfm.patch_tokens * vfm.dim * 2 if tokens else 4 * sum(pool_dim(vfm.dim, v) for v in views)
    for c in counts.values():
        n = c.train + c.test
        parts["abilities"] += speeds.ability_s
        parts["samples"] += speeds.sample_s * n
        parts["read"] += n * row / speeds.read_bytes_per_s if head != "zero-shot" else 0.0
        fit, tensors = fit_seconds(head, vfm, c, speeds, llm)
        parts["fit"] += fit * speeds.slower(threads)
        written += tensors + c.test * PREDICTION_BYTES
    if head == "llm":
        parts["warmup"] = speeds.llm_warmup_s
    return Estimate(sum(parts.values()), int(written), parts)
