"""Where the head's image tokens come from, and how samples are batched.

Two interchangeable sources give the same tensors for the same sample:

- ``cache``: the run's cached rows, read once into memory (:class:`ava.cache.reader.ResidentFeatures`, half
  precision, on the device when they fit); a batch gathers its rows by index: no VFM, no image decode, no per-step
  decompression.
- ``online``: the image, through the VFM's own ``preprocess`` (the function the cache was extracted with);
  the VFM runs on every batch in the training loop. This is the release's way, kept as the parity and speed
  baseline.

Batches are grouped by length (megabatches sorted by length, then shuffled), so padding is minimal. The collator
also computes, on the CPU, everything data-dependent the step needs (image and supervised positions, token counts),
so nothing in a training step reads device values back to the host.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ava.data.format import Dataset, Sample
from ava.heads.llm.prompt import IGNORE, Encoded, build_batch


@dataclass
class LoopData:
    """What the loop trains on: items (sample indices, or pixels + index), their encodings, and how a batch on the
    device becomes image features ``[B, T, D]``."""

    items: torch.utils.data.Dataset
    encoded: list
    num_image_tokens: int
    pad_id: int
    featurize: Any  # batch -> features [B, T, D] on the device


class IndexItems(torch.utils.data.Dataset):
    """Items ``{"index": i}``: the features come from a resident store, gathered by index on the device."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"index": i}

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        return [{"index": i} for i in indices]


class OnlineImages(torch.utils.data.Dataset):
    """Items ``{"pixels": [3, S, S], "index": i}``: the sample's image through ``vfm.preprocess``."""

    def __init__(self, dataset: Dataset, samples: Sequence[Sample], preprocess: Any) -> None:
        self.dataset, self.samples, self.preprocess = dataset, list(samples), preprocess

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"pixels": self.preprocess(self.dataset.load_image(self.samples[i])), "index": i}


def positions(batch: dict[str, Any], left_pad: bool) -> dict[str, Any]:
    """Host-side indices of a padded batch, so the step needs no data-dependent op on the device.

    ``image_pos`` [B, T]: the image slots of each row (when every row has one image); ``sup_pos`` [N]: flat
    positions (row * width + p) whose output predicts a label, ``sup_targets`` [N] those labels, ``sup_rows`` [N]
    their rows; ``n_tokens``: real tokens; ``mask_free``: every row starts at position 0 (right padding), so
    causal attention alone gives the padded batch's outputs at every real token and no padding mask is needed
    (SDPA's causal fast path).
    """
    b, width = batch["input_ids"].shape
    nxt = batch["labels"][:, 1:]
    rows, cols = (nxt != IGNORE).nonzero(as_tuple=True)
    counts = batch["image_mask"].sum(1)
    image = {}
    if counts[0] > 0 and bool((counts == counts[0]).all()):  # (else, e.g. text-only turns: the masked path)
        image["image_pos"] = batch["image_mask"].nonzero()[:, 1].view(b, -1)
    return {
        **image,
        "sup_pos": rows * width + cols,
        "sup_targets": nxt[rows, cols],
        "sup_rows": rows,
        "n_tokens": int(batch["attention_mask"].sum()),
        "mask_free": not left_pad,
    }


class Collator:
    """Stacks features or pixels and builds the padded text batch of the same samples, with its host-side indices
    (:func:`positions`)."""

    def __init__(self, encoded: Sequence[Encoded], num_image_tokens: int, pad_id: int, left_pad: bool = False):
        self.encoded, self.num_image_tokens, self.pad_id, self.left_pad = encoded, num_image_tokens, pad_id, left_pad

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        index = [int(it["index"]) for it in items]
        batch = build_batch(
            [self.encoded[i] for i in index], self.num_image_tokens, self.pad_id, left_pad=self.left_pad
        )
        batch["index"] = torch.tensor(index)
        batch.update(positions(batch, self.left_pad))
        for key in ("features", "pixels"):
            if key in items[0]:
                batch[key] = torch.stack([torch.as_tensor(it[key]) for it in items])
        return batch


def length_grouped_batches(
    lengths: Sequence[int],
    micro_batch: int,
    *,
    seed: int,
    epoch: int,
    rank: int = 0,
    world: int = 1,
    megabatch: int = 32,
) -> list[list[int]]:
    """This rank's micro-batches for one epoch: deterministic in (seed, epoch), similar lengths together.

    A seeded permutation is cut into megabatches of ``megabatch`` global batches, each sorted by length,
    cut into global batches of ``micro_batch * world`` and shuffled; rank r takes its slice of each.
    With several ranks the last global batch is filled up from the start so every rank steps equally.
    """
    rng = random.Random(f"{seed}-{epoch}")
    order = list(range(len(lengths)))
    rng.shuffle(order)
    step = micro_batch * world
    if world > 1 and len(order) % step:
        order += order[: step - len(order) % step]
    size = step * megabatch
    globals_: list[list[int]] = []
    for start in range(0, len(order), size):
        mega = sorted(order[start : start + size], key=lambda i: -lengths[i])
        globals_.extend(mega[j : j + step] for j in range(0, len(mega), step))
    rng.shuffle(globals_)
    return [g[rank * micro_batch : (rank + 1) * micro_batch] for g in globals_ if g[rank * micro_batch :]]


def steps_per_epoch(n_micro: int, grad_accum: int) -> int:
    return math.ceil(n_micro / grad_accum)
