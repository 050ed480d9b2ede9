"""Where the head's image tokens come from, and how samples are batched.

Two interchangeable sources give the same tensors for the same sample:

- ``cache``: the run's cached rows, read once into memory (:class:`ava.cache.reader.ResidentFeatures`, half
  precision, on the device when they fit); a batch gathers its rows by index: no VFM, no image decode, no per-step
  decompression.
- ``online``: the image, through the VFM's own ``preprocess`` (the function the cache was extracted with);
  the VFM runs on every batch in the training loop. This is the release's way, kept as the parity and speed
  baseline.

Batches are grouped by length (megabatches sorted by length, then shuffled), so padding is minimal; training packs
each batch's samples into one row with no padding at all (:class:`Collator` ``pack=True``,
:mod:`ava.heads.llm.packing`). The collator also computes, on the CPU, everything data-dependent the step needs
(image and supervised positions, token counts, sample boundaries), so nothing in a training step reads device
values back to the host.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ava.data.format import Dataset, Sample
from ava.heads.llm.prompt import IGNORE, Encoded


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


@dataclass(frozen=True)
class _Row:
    """One sample's tokens as arrays, made once per run (:meth:`Collator.row`)."""

    ids: np.ndarray  # int64 [L]: image slots hold the pad id
    labels: np.ndarray  # int64 [L]
    image_at: int  # first image slot
    slots: int  # image slots (0 or num_image_tokens)
    sup: np.ndarray  # int64: positions p (0 <= p < L - 1) whose next token is a label


class Collator:
    """Builds a batch from sample indices with host-side indices of everything the step needs.

    Each sample's token ids and labels become arrays once per run (the first time the sample is batched); a batch
    is then assembled with a few array copies per row, and its positions (image slots, supervised positions and
    targets, token count) come from per-sample offsets, not from scanning the batch.

    Padded (default): ``input_ids``, ``labels``, ``image_mask``, ``attention_mask`` [B, W] (right padding, or left
    for generation) plus host-side indices, so the step needs no data-dependent op on the device: ``image_pos``
    [B, T] (the image slots of each row, when every row has one image), ``sup_pos`` [N] (flat positions
    row * width + p whose output predicts a label), ``sup_targets`` [N] (those labels), ``sup_rows`` [N] (their
    rows), ``n_tokens`` (real tokens) and ``mask_free`` (right padding: causal attention alone gives the padded
    batch's outputs at every real token, so no padding mask is needed).

    Packed (``pack=True``, right padding only, every row with an image): the samples are concatenated into one
    row [1, N] with no padding; ``position_ids`` restart at 0 for each sample, ``cu_seqlens`` (int32 [B + 1]) and
    ``seq_lens`` (host tuple) delimit them, ``max_len`` is the longest, and attention stays inside each sample
    (:mod:`ava.heads.llm.packing`). A batch with a text-only row (stage 2) is padded instead.
    """

    def __init__(
        self, encoded: Sequence[Encoded], num_image_tokens: int, pad_id: int, left_pad: bool = False, pack: bool = False
    ) -> None:
        self.encoded, self.num_image_tokens, self.pad_id, self.left_pad = encoded, num_image_tokens, pad_id, left_pad
        self.pack = pack and not left_pad
        self._rows: dict[int, _Row] = {}

    def row(self, i: int) -> _Row:
        got = self._rows.get(i)
        if got is None:
            e = self.encoded[i]
            slots = self.num_image_tokens if e.image else 0
            post_labels = e.post_labels if e.post_labels is not None else [IGNORE] * len(e.post)
            ids = np.array(e.pre + [self.pad_id] * slots + e.post + e.answer, dtype=np.int64)
            labels = np.array([IGNORE] * (len(e.pre) + slots) + list(post_labels) + e.answer, dtype=np.int64)
            sup = np.flatnonzero(labels[1:] != IGNORE).astype(np.int64)
            got = self._rows[i] = _Row(ids, labels, len(e.pre), slots, sup)
        return got

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        index = [int(it["index"]) for it in items]
        rows = [self.row(i) for i in index]
        if self.pack and all(r.slots == self.num_image_tokens > 0 for r in rows):
            batch = self._packed(rows)
        else:
            batch = self._padded(rows)
        batch["index"] = torch.tensor(index)
        for key in ("features", "pixels"):
            if key in items[0]:
                batch[key] = torch.stack([torch.as_tensor(it[key]) for it in items])
        return batch

    def _padded(self, rows: list[_Row]) -> dict[str, Any]:
        b, width = len(rows), max(len(r.ids) for r in rows)
        ids = np.full((b, width), self.pad_id, dtype=np.int64)
        labels = np.full((b, width), IGNORE, dtype=np.int64)
        attn = np.zeros((b, width), dtype=np.int64)
        image = np.zeros((b, width), dtype=bool)
        sup_pos, sup_rows = [], []
        for k, r in enumerate(rows):
            start = width - len(r.ids) if self.left_pad else 0
            ids[k, start : start + len(r.ids)] = r.ids
            labels[k, start : start + len(r.ids)] = r.labels
            attn[k, start : start + len(r.ids)] = 1
            image[k, start + r.image_at : start + r.image_at + r.slots] = True
            sup_pos.append(k * width + start + r.sup)
            sup_rows.append(np.full(len(r.sup), k, dtype=np.int64))
        pos = np.concatenate(sup_pos)
        out = {
            "input_ids": ids,
            "labels": labels,
            "image_mask": image,
            "attention_mask": attn,
            "sup_pos": pos,
            "sup_targets": labels.reshape(-1)[pos + 1],
            "sup_rows": np.concatenate(sup_rows),
        }
        slots = {r.slots for r in rows}
        if len(slots) == 1 and slots != {0}:  # (else, e.g. text-only turns: the masked path)
            n = slots.pop()
            first = np.array([(width - len(r.ids) if self.left_pad else 0) + r.image_at for r in rows])
            out["image_pos"] = first[:, None] + np.arange(n)
        batch: dict[str, Any] = {k: torch.from_numpy(v) for k, v in out.items()}
        batch["n_tokens"] = int(sum(len(r.ids) for r in rows))
        batch["mask_free"] = not self.left_pad
        return batch

    def _packed(self, rows: list[_Row]) -> dict[str, Any]:
        lens = [len(r.ids) for r in rows]
        starts = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        ids = np.concatenate([r.ids for r in rows])[None]
        labels = np.concatenate([r.labels for r in rows])[None]
        pos = np.concatenate([np.arange(n) for n in lens])[None]
        image = np.zeros(ids.shape, dtype=bool)
        for s, r in zip(starts, rows, strict=False):
            image[0, s + r.image_at : s + r.image_at + r.slots] = True
        sup = np.concatenate([s + r.sup for s, r in zip(starts, rows, strict=False)])
        first = starts[:-1] + np.array([r.image_at for r in rows])
        out = {
            "input_ids": ids,
            "labels": labels,
            "image_mask": image,
            "attention_mask": np.ones_like(ids),
            "position_ids": pos,
            "cu_seqlens": starts.astype(np.int32),
            "sup_pos": sup,
            "sup_targets": labels[0, sup + 1],
            "sup_rows": np.concatenate([np.full(len(r.sup), k, dtype=np.int64) for k, r in enumerate(rows)]),
            "image_pos": (first[:, None] + np.arange(self.num_image_tokens)).reshape(1, -1),
        }
        batch: dict[str, Any] = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in out.items()}
        batch.update(n_tokens=int(starts[-1]), mask_free=True, seq_lens=tuple(lens), max_len=max(lens))
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
