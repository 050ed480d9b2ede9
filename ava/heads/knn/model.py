"""The kNN head's index and its rules for turning neighbours into a prediction.

Features are pooled patch tokens (the mean, or the mean plus coarse grid cells), L2-normalized, searched by
inner product (cosine) in a ``faiss.IndexFlatIP`` (exact). The index goes to every GPU when faiss was built
with GPU support and the device is CUDA; otherwise it stays on the CPU.

- Choice abilities: majority vote among the k nearest train samples whose label is one of *this question's*
  options (per-question option lists differ); ties go to the option with the larger summed similarity.
- Counts, depth, colour, boxes: the inverse-distance-weighted mean of the neighbours' targets, in the same
  target space as the probes (log count, log metres, RGB/255, normalized box; see :mod:`ava.heads.targets`).
- OCR: the nearest neighbour's text, whatever k. This is a weak baseline: it can only ever repeat a train
  string, so it measures whether images with the same text land near each other, not reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ava.abilities import Ability
from ava.data.format import Sample
from ava.heads.targets import option_text, question_options, regression_reply, regression_targets

SEARCH_BATCH = 4096
NORM_BLOCK = 4 << 20  # bytes of rows normalized at a time (a block's squares stay in the CPU's cache)
CHOICE_SEARCH = 256  # neighbours searched for choice questions, so k valid ones exist among per-question options


def normalized(x: np.ndarray, threads: int | None = None) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), float32 C-contiguous as faiss wants: a new array, computed
    a block of rows at a time (the squares ``np.linalg.norm`` makes stay one block, not a second array of ``x``'s
    size; each row's norm is the same, as it is reduced on its own). The blocks are shared among ``threads``
    threads (default: torch's intra-op threads, which a fit running beside others has been given its share of;
    numpy's loops release the GIL), each writing its own rows: the same values as one thread, bit for bit."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    step = max(1, NORM_BLOCK // max(1, x[:1].nbytes))
    starts = range(0, len(x), step)

    def block(i: int) -> None:
        part = x[i : i + step]
        np.divide(part, np.maximum(np.linalg.norm(part, axis=1, keepdims=True), 1e-12), out=out[i : i + step])

    if threads is None:
        import torch

        threads = torch.get_num_threads()
    threads = max(1, min(threads, len(starts)))
    if threads == 1:
        for i in starts:
            block(i)
        return out
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads, thread_name_prefix="ava-norm") as pool:
        list(pool.map(block, starts))
    return out


def build_index(features: np.ndarray, *, unit: bool = False) -> Any:
    """A CPU ``IndexFlatIP`` over normalized ``features`` (``unit``: rows :func:`normalized` already, added as they
    are: normalizing again would give the same rows, at two more passes over them)."""
    import faiss

    index = faiss.IndexFlatIP(features.shape[1])
    index.add(features if unit else normalized(features))
    return index


class TorchFlatIP:
    """An exact inner-product index on a torch device (a matmul and a top-k), for GPUs where faiss has no GPU
    build: the same ``ntotal`` / ``search(queries, k) -> (similarities, ids)`` as a faiss flat index. Rows beyond
    ``ntotal`` come back with id -1 and the lowest float32, as faiss returns them."""

    def __init__(self, vectors: np.ndarray, device: str, *, own: bool = False) -> None:
        """``own``: remember ``vectors`` (no copy), so that :func:`search` given them again as the queries searches
        the rows held here instead of copying them to the device again (a leave-one-out selection)."""
        import torch

        self.source = vectors if own else None
        self.vectors = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)).to(device)
        self.ntotal = int(self.vectors.shape[0])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import torch

        return self._search(
            torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(self.vectors.device), k
        )

    def search_own(self, start: int, end: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` with the index's own rows ``start:end`` as the queries (no copy to the device)."""
        return self._search(self.vectors[start:end], k)

    def _search(self, q: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        take = min(k, self.ntotal)
        sims, ids = (q @ self.vectors.T).topk(take, dim=1) if take else (q[:, :0], q[:, :0].long())
        sims, ids = sims.cpu().numpy(), ids.cpu().numpy().astype(np.int64, copy=False)
        if take < k:  # fewer rows than asked for: pad like faiss
            pad = k - take
            sims = np.concatenate([sims, np.full((len(q), pad), np.finfo(np.float32).min, np.float32)], axis=1)
            ids = np.concatenate([ids, np.full((len(q), pad), -1, np.int64)], axis=1)
        return sims, ids


def make_index(unit_rows: np.ndarray, device: str) -> Any:
    """The search index of rows already :func:`normalized`, where ``device`` searches: on CUDA without faiss-gpu a
    :class:`TorchFlatIP` made from the rows themselves (one copy to the GPU; not a faiss index first, copied out
    again); else a faiss index (:func:`on_device`). The same neighbours either way."""
    if device.startswith("cuda") and not _faiss_gpus():
        import torch

        if torch.cuda.is_available():
            return TorchFlatIP(unit_rows, device, own=True)
    return on_device(build_index(unit_rows, unit=True), device)


def _faiss_gpus() -> int:
    import faiss

    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def on_device(index: Any, device: str) -> Any:
    """The index on all GPUs when faiss has GPU support and ``device`` is CUDA; on CUDA without faiss-gpu, an exact
    :class:`TorchFlatIP` on the GPU; else unchanged (CPU faiss)."""
    import faiss

    if not device.startswith("cuda"):
        return index
    if _faiss_gpus() > 0:
        return faiss.index_cpu_to_all_gpus(index)
    import torch

    if not torch.cuda.is_available():
        return index
    return TorchFlatIP(index.reconstruct_n(0, index.ntotal), device)


def search(
    index: Any, queries: np.ndarray, k: int, batch_size: int = SEARCH_BATCH, *, unit: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, ids), each [Q, k], nearest first (``unit``: ``queries`` are :func:`normalized` already)."""
    own = unit and getattr(index, "source", None) is queries  # a TorchFlatIP's own rows: searched where it holds them
    q = queries if own else np.ascontiguousarray(queries, dtype=np.float32) if unit else normalized(queries)
    sims, ids = [], []
    for i in range(0, len(q), batch_size):
        s, j = index.search_own(i, i + batch_size, k) if own else index.search(q[i : i + batch_size], k)
        sims.append(s)
        ids.append(j)
    if not sims:
        return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
    return np.concatenate(sims), np.concatenate(ids)


class VoteTable(NamedTuple):
    """What the votes of some queries need whatever k is (:meth:`Memory._vote_table`)."""

    samples: Sequence[Sample]  # the queries and their neighbour ids (the very objects the table was made for)
    ids: np.ndarray
    options: list[list[str]]  # each query's options
    option_ids: np.ndarray  # [Q, options] their label ids, padded with -2; -1 for an option no train row has
    position: np.ndarray  # [Q, depth] the option each neighbour votes for; -1: none of the query's, or no neighbour
    rank: np.ndarray  # [Q, depth] each neighbour's rank among those that vote


@dataclass
class Memory:
    """What the index's rows stand for: option labels, regression targets or texts, row-aligned."""

    ability: Ability
    labels: list[str] | None = None  # choice: option text of each train row; OCR: the text
    targets: np.ndarray | None = None  # regression targets [N, d]
    # the last queries' vote table (see :meth:`_vote_table`): a selection asks the same neighbours for every k
    _table: VoteTable | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(cls, ability: Ability, samples: Sequence[Sample]) -> Memory:
        kind = ability.answer_kind
        if kind == "option":
            return cls(ability, labels=[option_text(ability, s) for s in samples])
        if kind == "text":
            return cls(ability, labels=[str(s.truth.get("text", "")) for s in samples])
        return cls(ability, targets=regression_targets(ability, samples))

    @property
    def search_k(self) -> int:
        return CHOICE_SEARCH if self.ability.answer_kind == "option" else 0

    def reply(self, sample: Sample, sims: np.ndarray, ids: np.ndarray, k: int) -> str:
        """The reply for one query from its neighbours (nearest first; id -1 means none)."""
        valid = ids >= 0
        sims, ids = sims[valid], ids[valid]
        kind = self.ability.answer_kind
        if kind == "text":
            from ava.abilities.parsers import format_reply

            return format_reply(self.ability, self.labels[int(ids[0])] if len(ids) else "")
        if kind == "option":
            return self._vote(sample, sims, ids, k)
        d = np.sqrt(np.maximum(2.0 - 2.0 * sims[:k].astype(np.float64), 0.0))  # L2 distance on the unit sphere
        w = 1.0 / (d + 1e-6)
        value = (w[:, None] * self.targets[ids[:k]]).sum(0) / w.sum()
        return regression_reply(self.ability, sample, value)

    def _vote(self, sample: Sample, sims: np.ndarray, ids: np.ndarray, k: int) -> str:
        options = question_options(self.ability, sample)
        allowed = set(options)
        count: dict[str, int] = {}
        summed: dict[str, float] = {}
        taken = 0
        for s, j in zip(sims, ids, strict=True):
            label = self.labels[int(j)]
            if label not in allowed:
                continue
            count[label] = count.get(label, 0) + 1
            summed[label] = summed.get(label, 0.0) + float(s)
            taken += 1
            if taken == k:
                break
        # votes first; the summed similarity (|sum| <= k) breaks ties without outweighing a vote
        scores = np.array([count.get(o, 0) + summed.get(o, 0.0) / (2 * k + 1) if o in count else -1.0 for o in options])
        from ava.abilities.parsers import format_reply

        return format_reply(self.ability, int(np.argmax(scores)), options=options)

    def replies(self, samples: Sequence[Sample], sims: np.ndarray, ids: np.ndarray, k: int) -> list[str]:
        """The replies of many queries at once: the same rules as :meth:`reply`, with the votes and weighted means
        computed as array operations over all queries (only the formatting of each reply is per sample)."""
        from ava.abilities.parsers import format_reply

        if not len(samples):
            return []
        kind = self.ability.answer_kind
        if kind == "option":
            return self._votes(samples, sims, ids, k)
        sims, ids = np.asarray(sims), np.asarray(ids)
        valid = ids >= 0
        if kind == "text":
            has = valid.any(axis=1)
            nearest = ids[np.arange(len(ids)), valid.argmax(axis=1)]
            return [
                format_reply(self.ability, self.labels[int(j)] if h else "")  # type: ignore[index]
                for j, h in zip(nearest, has, strict=True)
            ]
        first_k = valid & (np.cumsum(valid, axis=1) <= k)  # the first k neighbours that exist
        # the first k existing neighbours moved to the front, so sums run in the order of the per-sample rule
        front = np.argsort(~first_k, axis=1, kind="stable")[:, :k]
        taken = np.take_along_axis(first_k, front, 1)
        near = np.take_along_axis(sims, front, 1).astype(np.float64)
        d = np.sqrt(np.maximum(2.0 - 2.0 * near, 0.0))  # L2 distance on the unit sphere
        w = np.where(taken, 1.0 / (d + 1e-6), 0.0)
        targets = np.asarray(self.targets, np.float64)[np.where(taken, np.take_along_axis(ids, front, 1), 0)]
        values = (w[:, :, None] * targets).sum(axis=1) / w.sum(axis=1, keepdims=True)
        return [regression_reply(self.ability, s, v) for s, v in zip(samples, values, strict=True)]

    def _vote_table(self, samples: Sequence[Sample], ids: np.ndarray) -> VoteTable:
        """The vote table of these queries and neighbour lists, kept for the last ones (the very objects): a
        selection asks for every candidate k."""
        if self._table is not None and self._table.samples is samples and self._table.ids is ids:
            return self._table
        vocab = {label: i for i, label in enumerate(dict.fromkeys(self.labels or ()))}
        row_label = np.array([vocab[label] for label in self.labels or ()], np.int64)
        options = [question_options(self.ability, s) for s in samples]
        option_ids = np.full((len(samples), max(len(o) for o in options)), -2, np.int64)
        for q, opts in enumerate(options):
            option_ids[q, : len(opts)] = [vocab.get(o, -1) for o in opts]
        found = np.asarray(ids)
        valid = found >= 0
        labels = (
            np.where(valid, row_label[np.where(valid, found, 0)], -3) if len(row_label) else np.full(found.shape, -3)
        )
        # the first of the query's options a neighbour's label is, one option at a time (never the [Q, depth,
        # options] table of every comparison: at real size that was most of a kNN selection's vote time)
        position = np.full(labels.shape, -1, np.int32)
        for w in range(option_ids.shape[1] - 1, -1, -1):
            position[labels == option_ids[:, w : w + 1]] = w
        rank = np.cumsum(position >= 0, axis=1, dtype=np.int32)
        self._table = VoteTable(samples, ids, options, option_ids, position, rank)
        return self._table

    def _votes(self, samples: Sequence[Sample], sims: np.ndarray, ids: np.ndarray, k: int) -> list[str]:
        """Majority votes of all queries at once (see :meth:`_vote`): neighbours whose label is one of the query's
        options are counted up to k, per-option counts and similarity sums come from one ``bincount`` each."""
        from ava.abilities.parsers import format_reply

        table = self._vote_table(samples, ids)
        options, option_ids, position = table.options, table.option_ids, table.position
        width = option_ids.shape[1]
        taken = (position >= 0) & (table.rank <= k)
        q_index = np.broadcast_to(np.arange(len(samples))[:, None], position.shape)
        flat = (q_index * width + position)[taken]
        size = len(samples) * width
        count = np.bincount(flat, minlength=size).reshape(len(samples), width)
        summed = np.bincount(flat, weights=np.asarray(sims)[taken].astype(np.float64), minlength=size).reshape(
            count.shape
        )
        # votes first; the summed similarity (|sum| <= k) breaks ties without outweighing a vote
        scores = np.where(count > 0, count + summed / (2 * k + 1), -1.0)
        scores[option_ids == -2] = -np.inf
        best = scores.argmax(axis=1)
        return [format_reply(self.ability, int(b), options=o) for b, o in zip(best, options, strict=True)]
