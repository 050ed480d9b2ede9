"""Train and evaluate the probe heads from the feature cache.

Like dinov2's linear evaluation: for each ability, the features are loaded once, a small grid (learning
rates x layer choices, and for the linear probe x pooled views) of probes is trained side by side on the
same batches, the member with the best metric on a deterministic held-out 10% of train is kept, and it is
evaluated on the test split. The held-out slice is not folded back into training: selection and the saved
probe stay consistent.

Pooled views of the linear probe (``ProbeConfig.pools``): ``"mean"`` over the patch tokens, and ``"gridN"`` =
the mean plus the means of N x N cells of the token grid, each cell reduced by a fixed PCA of train cells
(``cell_rank``). The mean alone cannot say where anything is (spatial relations were at chance on raw
pixels); the cells keep coarse position. The chosen view is in probe.json and the results' ``extra.pool``.
Predictions become replies through ``format_reply`` and are scored by ``ava.metrics`` like ``ava score``.

Run directory (besides config.json, run.json, results_<split>.json, predictions_<split>.jsonl)::

    probe.json           # per ability: probe kind, layers, vocabulary/target statistics, the grid's scores
    probe.safetensors    # per ability: the chosen probe's tensors, keys "<ability>.<tensor>"
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ava.abilities import Ability, get_ability
from ava.cache.placement import ON_DEVICE, STREAMED, place
from ava.data.format import Dataset, Sample
from ava.errors import AvaError
from ava.heads.ability_runs import AbilityRun, save_tensors, train_abilities
from ava.heads.features import (
    AbilityFeatures,
    CacheRows,
    TokenRows,
    layer_sets,
    pool_candidates,
    pool_cells,
    read_layers,
    read_pooled_views,
    resolve_device,
    token_grid,
)
from ava.heads.probe.config import ProbeConfig
from ava.heads.probe.grid import GridAdamW, StackedAttentive, StackedLinears, stacked_loss
from ava.heads.probe.model import Probe, ProbeGrid, box_from_output, box_loss
from ava.heads.probe.ocr import CTCReader, char_vocabulary, ctc_loss, encode_texts, greedy_decode, num_slots
from ava.heads.rundir import open_saved_run, owns_run_dir, score_and_write, write_json
from ava.heads.targets import (
    TARGET_DIMS,
    choice_reply,
    holdout_split,
    is_better,
    mean_score,
    option_text,
    option_vocabulary,
    regression_reply,
    regression_targets,
    select_abilities,
    truth_field,
)

META_FILE = "probe.json"
WEIGHTS_FILE = "probe.safetensors"
EVAL_BATCH = 256


# -- features -------------------------------------------------------------------------------------------
Rows = np.ndarray | torch.Tensor | TokenRows


def load_features(
    cache: Any,
    samples: Sequence[Sample],
    layers: tuple[int | None, ...],
    tokens: bool,
    max_memory_gb: float,
    device: str = "cpu",
) -> Rows:
    """Pooled [N, D] features, or token [N, T, D] rows: batch by batch from an ability's held features
    (:class:`HeldRows`, gathered on the device they are held on), else from the cache (in memory when they fit in
    ``max_memory_gb`` as float32, else :class:`CacheRows`)."""
    if not tokens:
        return read_layers(cache, samples, layers, pooled=True)
    if isinstance(cache, AbilityFeatures):
        return cache.held_rows(samples, layers, device)
    if _float32_bytes(cache, len(samples), layers) > max_memory_gb * 2**30:
        return CacheRows(tuple(samples), layers, device, cache=cache)
    return read_layers(cache, samples, layers, pooled=False)


def _float32_bytes(cache: Any, n: int, layers: Sequence[int | None]) -> int:
    return n * int(cache.num_tokens) * int(cache.dim) * len(layers) * 4


def held_in_float32(rows: Rows, cache: Any, max_memory_gb: float) -> Rows:
    """Train rows read many times: held whole in float32 on their device when that fits in ``max_memory_gb`` (the
    same numbers; a head then standardizes them once), else left to be gathered batch by batch."""
    if getattr(cache, "placement", None) == STREAMED:  # the ability fits in no memory: rows stay streamed
        return rows
    if isinstance(rows, TokenRows) and _float32_bytes(cache, len(rows), rows.layers) <= max_memory_gb * 2**30:
        return rows.materialize()
    return rows


def _batches(n: int, batch_size: int, generator: torch.Generator | None) -> list[np.ndarray]:
    order = torch.randperm(n, generator=generator).numpy() if generator is not None else np.arange(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def _as_tensor(rows: Rows, index: np.ndarray, device: str, on_device: torch.Tensor | None = None) -> torch.Tensor:
    """Rows ``index`` on ``device`` (``on_device``: the same positions already on the device, for rows held there)."""
    if isinstance(rows, torch.Tensor):  # held whole on the device: gathered there
        if on_device is not None and on_device.device == rows.device:
            return rows.index_select(0, on_device).to(device)
        return rows.index_select(0, torch.from_numpy(index).to(rows.device)).to(device)
    if isinstance(rows, TokenRows):  # gathered on the device (and transformed) batch by batch
        return rows[index].to(device)
    return torch.from_numpy(np.ascontiguousarray(rows[index])).to(device)


STATS_ROWS = 512  # rows gathered batch by batch fit the input standardization on at most this many, evenly spaced


def _stats_rows(rows: Rows, device: str) -> torch.Tensor:
    """The rows the input standardization is fitted on, on ``device``: all of them when held whole, else up to
    :data:`STATS_ROWS` evenly spaced rows."""
    if isinstance(rows, TokenRows):
        return rows[np.unique(np.linspace(0, len(rows) - 1, min(len(rows), STATS_ROWS)).astype(np.int64))]
    return (rows if isinstance(rows, torch.Tensor) else torch.from_numpy(rows)).to(device)


def standardized(rows: Rows, norm: nn.Module, device: str) -> torch.Tensor | TokenRows:
    """Token rows through the grid's fixed standardization: held whole, once, in place (a float32 tensor on
    ``device``); gathered batch by batch, per batch on their device (the same values either way)."""
    mean, std = norm.mean.to(device), norm.std.to(device)
    if isinstance(rows, TokenRows):
        return rows.mapped(lambda x: x.sub_(mean).div_(std))
    x = rows.to(device) if isinstance(rows, torch.Tensor) else torch.from_numpy(rows).to(device)
    return x.sub_(mean).div_(std)


# -- targets --------------------------------------------------------------------------------------------
@dataclass
class Task:
    """How one ability's samples become targets, losses and replies for a probe."""

    ability: Ability
    kind: str  # "classify" | "regress" | "box" | "ctc"
    vocab: list[str] | None = None
    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    chars: list[str] | None = None
    slots: int = 0

    @property
    def out_dim(self) -> int:
        if self.kind == "classify":
            return len(self.vocab or ())
        return TARGET_DIMS[self.ability.answer_kind]

    @classmethod
    def build(cls, ability: Ability, train: Sequence[Sample], num_tokens: int) -> Task:
        kind = ability.answer_kind
        if kind == "option":
            return cls(ability, "classify", vocab=option_vocabulary(ability, train))
        if kind == "text":
            texts = [truth_field(s, "text") for s in train]
            return cls(ability, "ctc", chars=char_vocabulary(texts), slots=num_slots(texts, num_tokens))
        if kind == "box":
            return cls(ability, "box")
        y = regression_targets(ability, train)
        return cls(ability, "regress", mean=y.mean(0), std=np.maximum(y.std(0), 1e-3))

    def targets(self, samples: Sequence[Sample]) -> Any:
        if self.kind == "classify":
            index = {v: i for i, v in enumerate(self.vocab or ())}
            return torch.tensor([index[option_text(self.ability, s)] for s in samples], dtype=torch.long)
        if self.kind == "ctc":
            return [str(s.truth.get("text", "")) for s in samples]
        y = regression_targets(self.ability, samples)
        if self.kind == "regress":
            y = (y - self.mean) / self.std
        return torch.from_numpy(y.astype(np.float32))

    def loss(self, out: torch.Tensor, y: Any) -> torch.Tensor:
        if self.kind == "classify":
            return nn.functional.cross_entropy(out, y)
        if self.kind == "box":
            return box_loss(out, y)
        if self.kind == "ctc":
            flat, lengths = encode_texts(y, self.chars or [])
            return ctc_loss(out, flat.to(out.device), lengths.to(out.device))
        return nn.functional.mse_loss(out, y)

    def replies(self, out: torch.Tensor, samples: Sequence[Sample]) -> list[str]:
        """Replies from a batch of raw probe outputs."""
        from ava.abilities.parsers import format_reply

        if self.kind == "ctc":
            return [format_reply(self.ability, t) for t in greedy_decode(out.cpu(), self.chars or [])]
        if self.kind == "box":
            out = box_from_output(out.detach().double())
        out = out.detach().cpu().double().numpy()
        if self.kind == "classify":
            index = {v: i for i, v in enumerate(self.vocab or ())}
            return [choice_reply(self.ability, s, o, index) for s, o in zip(samples, out, strict=True)]
        values = out if self.kind == "box" else out * self.std + self.mean
        return [regression_reply(self.ability, s, v) for s, v in zip(samples, values, strict=True)]

    def meta(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "vocab": self.vocab,
            "mean": None if self.mean is None else self.mean.tolist(),
            "std": None if self.std is None else self.std.tolist(),
            "chars": self.chars,
            "slots": self.slots,
        }

    @classmethod
    def from_meta(cls, ability: Ability, meta: dict[str, Any]) -> Task:
        arr = lambda v: None if v is None else np.asarray(v, np.float64)  # noqa: E731
        return cls(
            ability,
            meta["kind"],
            meta.get("vocab"),
            arr(meta.get("mean")),
            arr(meta.get("std")),
            meta.get("chars"),
            int(meta.get("slots", 0)),
        )


def _member_batch_targets(y: Any, index: np.ndarray, device: str, on_device: torch.Tensor | None = None) -> Any:
    """The targets of rows ``index`` (``on_device``: the same positions, already on ``y``'s device)."""
    if isinstance(y, list):
        return [y[i] for i in index]
    if on_device is not None and on_device.device == y.device:
        return y.index_select(0, on_device).to(device)
    return y[torch.from_numpy(index).to(y.device)].to(device)


# -- models ---------------------------------------------------------------------------------------------
def build_model(task: Task, meta: dict[str, Any]) -> nn.Module:
    """The probe module of one ability (the chosen grid member's architecture) from its metadata."""
    dim, num_tokens = int(meta["dim"]), int(meta["num_tokens"])
    if task.kind == "ctc":
        return CTCReader(dim, num_tokens, task.slots, len(task.chars or []))
    grid = tuple(meta["grid_shape"]) if meta.get("grid_shape") else None
    cells, rank = int(meta.get("cells", 0)), int(meta.get("rank", 0)) or 64
    return Probe(
        dim,
        task.out_dim,
        meta["pooling"],
        int(meta["heads"]),
        num_tokens,
        grid,  # type: ignore[arg-type]
        cells=cells,
        layers=len(meta["layers"]),
        rank=rank,
    )


class _ReaderGrid(nn.Module):
    """CTC readers of a grid, trained on the same batches of tokens reduced once by their shared PCA."""

    def __init__(self, dim: int, num_tokens: int, task: Task, n: int, generator: torch.Generator) -> None:
        super().__init__()
        self.members = nn.ModuleList(CTCReader(dim, num_tokens, task.slots, len(task.chars or [])) for _ in range(n))
        for m in self.members:
            m.init_weights(generator)

    def fit_norm(self, x: torch.Tensor) -> None:
        self.members[0].fit_input(x)
        for m in self.members[1:]:
            m.norm.load_state_dict(self.members[0].norm.state_dict())
            m.basis.copy_(self.members[0].basis)

    @torch.no_grad()
    def reduce_rows(self, rows: Rows) -> torch.Tensor:
        """The rows' tokens reduced once, chunk by chunk, on the readers' device: [N, T, rank] float32."""
        reducer = self.members[0]
        device = str(reducer.basis.device)
        chunks = [
            reducer.reduce(_as_tensor(rows, np.arange(i, min(i + EVAL_BATCH, len(rows))), device))
            for i in range(0, len(rows), EVAL_BATCH)
        ]
        return torch.cat(chunks) if chunks else torch.zeros((0, reducer.num_tokens, reducer.rank), device=device)

    def forward(self, z: torch.Tensor) -> list[torch.Tensor]:
        return [m.read(z) for m in self.members]


class _ReadOnly(nn.Module):
    """A reader applied to already reduced tokens (held-out scoring inside the grid)."""

    def __init__(self, reader: CTCReader) -> None:
        super().__init__()
        self.reader = reader

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.reader.read(z)


def train_grid(
    grid: nn.Module,
    lrs: Sequence[float],
    rows: Any,
    y: Any,
    task: Task,
    *,
    epochs: int,
    batch_size: int,
    weight_decay: float,
    generator: torch.Generator,
    device: str,
    on_epoch: Callable[[], None] | None = None,
) -> None:
    """Train every grid member on the same shuffled batches, member g with learning rate lrs[g] (cosine decay).

    A stacked grid (:class:`StackedLinears`, :class:`StackedAttentive`) runs one forward and backward per step for
    all members; other grids (the CTC readers) return one output per member. Both update with :class:`GridAdamW`
    (``torch.optim.AdamW``'s update, one learning rate per member; torch's optimizer would also import
    ``torch._dynamo``, ~2.5 s, on first use)."""
    total = max(1, epochs * math.ceil(len(rows) / batch_size))

    def factor(step: int) -> float:
        return 0.5 * (1 + math.cos(math.pi * min(step, total) / total))

    stacked = isinstance(grid, StackedLinears | StackedAttentive)
    if stacked:
        params = grid.param_lrs(lrs)
    else:  # each parameter of member g: all its rows at lrs[g]
        params = [
            (p, torch.full((p.shape[0],), float(lr)))
            for m, lr in zip(grid.members, lrs, strict=True)
            for p in m.parameters()
        ]
    opt = GridAdamW(params, weight_decay=weight_decay)
    if isinstance(y, torch.Tensor):
        y = y.to(device)
    grid.train()
    # every epoch's batches drawn up front (the generator serves nothing else): the next batch is known at every
    # step, so rows streamed from the cache are read ahead across epochs too
    plan = [(e, index) for e in range(epochs) for index in _batches(len(rows), batch_size, generator)]
    # every batch's row positions copied to the device once: a step then indexes there, with no host-to-device copy
    # from pageable memory (which waits for the device) in the loop
    flat = torch.from_numpy(np.concatenate([ix for _, ix in plan]) if plan else np.zeros(0, np.int64)).to(device)
    start = 0
    for i, (epoch, index) in enumerate(plan):
        if isinstance(rows, TokenRows) and i + 1 < len(plan):
            rows.prefetch(plan[i + 1][1])  # (rows streamed from the cache: read while this batch computes)
        on_device = flat[start : start + len(index)]
        start += len(index)
        xb = _as_tensor(rows, index, device, on_device)
        yb = _member_batch_targets(y, index, device, on_device)
        opt.zero_grad()
        if stacked:
            stacked_loss(grid(xb), yb, task).backward()
        else:
            sum(task.loss(o, yb) for o in grid(xb)).backward()
        opt.step(factor(i))
        if on_epoch is not None and (i + 1 == len(plan) or plan[i + 1][0] != epoch):
            on_epoch()
    grid.eval()


@torch.no_grad()
def predict(model: nn.Module, task: Task, rows: Rows, samples: Sequence[Sample], device: str) -> list[str]:
    """Replies of one probe for ``samples`` (rows aligned with samples)."""
    model.eval()
    replies: list[str] = []
    batches = _batches(len(samples), EVAL_BATCH, None)
    for i, index in enumerate(batches):
        if isinstance(rows, TokenRows) and i + 1 < len(batches):
            rows.prefetch(batches[i + 1])
        out = model(_as_tensor(rows, index, device))
        replies.extend(task.replies(out, [samples[i] for i in index]))
    return replies


# -- one ability ----------------------------------------------------------------------------------------
def _grid_shape(cache: Any) -> list[int] | None:
    """The token grid (rows, cols) the attentive probe's position bias is laid out on (as the pooled views)."""
    grid = token_grid(cache)
    return list(grid) if grid else None


def epochs_and_batch(config: ProbeConfig, n: int, tokens: bool) -> tuple[int, int]:
    """(epochs, batch size) of a probe fitted on ``n`` samples: the config's, else ~``config.steps`` optimizer steps
    within the head's range of epochs (also what a sweep's estimate counts)."""
    batch_size = config.batch_size or (32 if tokens else 128)
    batch_size = max(1, min(batch_size, n))
    # token probes cost ~T times more per sample: fewer epochs (they also converge faster from mean pooling)
    # fewer epochs or smaller batches than these move the scores of small abilities (fine-grained, spatial,
    # relative depth at 150 samples), so the recipe stays though it bounds a CPU fingerprint's time
    epochs = config.epochs or int(
        min(40 if tokens else 300, max(5, math.ceil(config.steps / math.ceil(n / batch_size))))
    )
    return epochs, batch_size


Pick = tuple[float, nn.Module, tuple[int | None, ...], float, str]  # held-out score, probe, layers, lr, pool


def transforms_device(device: str, view_bytes: int) -> str:
    """Where a pooled view's fixed transforms (a grid view's cell PCA: a float64 covariance of every train cell, then
    the standardization) are fitted and applied: on the GPU the probe trains on when the view and the transforms'
    temporaries (~3 views) fit in its free memory (on a GPU they were the host's largest share of the linear probe),
    else on the host."""
    if device.startswith("cuda") and place(device, 3 * view_bytes).kind == ON_DEVICE:
        return device
    return "cpu"


def _fit_pooled(
    config: ProbeConfig,
    ability: Ability,
    task: Task,
    fit: list[Sample],
    held: list[Sample],
    cache: Any,
    device: str,
    lrs: list[float],
    y: Any,
    on_epoch: Callable[[], None] | None,
) -> tuple[list[dict[str, Any]], Pick]:
    """The linear probe's grid: layer sets x pooled views x learning rates, picked on the held-out slice.

    Per layer set the tokens are read once into every pooled view; each view's fixed transforms are fitted on
    the fit rows, and all (view, lr) members train in one loop on the same batches."""
    epochs, batch_size = epochs_and_batch(config, len(fit), False)
    pools = pool_candidates(cache, config.pools)
    grid_log: list[dict[str, Any]] = []
    best: Pick | None = None
    memo: dict[Any, float] = {}  # (sample, reply) -> score: members often give the same reply
    for layers in layer_sets(cache, config.layer):
        generator = torch.Generator().manual_seed(config.seed)
        torch.manual_seed(config.seed)
        views_fit = read_pooled_views(cache, fit, layers, pools)
        views_held = read_pooled_views(cache, held, layers, pools)
        members: list[tuple[str, float, Probe]] = []
        prepared: list[torch.Tensor] = []
        slices, offset = [], 0
        for pool in pools:
            shape = dict(cells=pool_cells(pool), layers=len(layers), rank=config.cell_rank)
            where = transforms_device(device, views_fit[pool].nbytes)
            first = Probe(cache.dim * len(layers), task.out_dim, "mean", **shape).to(where)
            rows = torch.from_numpy(views_fit[pool]).to(where)
            first.fit_input(rows)
            with torch.no_grad():
                z = first.prepare(rows).to(device)
            del rows
            prepared.append(z)
            for lr in lrs:
                member = Probe(cache.dim * len(layers), task.out_dim, "mean", **shape)
                member.load_state_dict(first.state_dict())
                member.init_weights(generator)
                members.append((pool, lr, member))
                slices.append(slice(offset, offset + z.shape[1]))
            offset += z.shape[1]
        trainer = StackedLinears([m for _, _, m in members], slices).to(device)
        z_fit = torch.cat(prepared, 1)
        del prepared
        train_grid(
            trainer,
            [lr for _, lr, _ in members],
            z_fit,
            y,
            task,
            epochs=epochs,
            batch_size=batch_size,
            weight_decay=config.weight_decay,
            generator=generator,
            device=device,
            on_epoch=on_epoch,
        )
        trainer.write_back()
        del z_fit, trainer
        held_rows = {
            pool: torch.from_numpy(v).to(transforms_device(device, v.nbytes))  # once per view, where its
            for pool, v in views_held.items()
        }  # transforms fit (else host rows, each batch moved)
        for pool, lr, member in members:
            replies = predict(member.to(device), task, held_rows[pool], held, device)
            score = mean_score(ability, held, replies, memo=memo)
            grid_log.append({"layers": list(layers), "pool": pool, "lr": lr, "heldout": score})
            if best is None or is_better(ability, score, best[0]):
                best = (score, member, layers, lr, pool)
    assert best is not None
    return grid_log, best


def _fit_tokens(
    config: ProbeConfig,
    ability: Ability,
    task: Task,
    fit: list[Sample],
    held: list[Sample],
    cache: Any,
    device: str,
    lrs: list[float],
    y: Any,
    on_epoch: Callable[[], None] | None,
) -> tuple[list[dict[str, Any]], Pick]:
    """The grid of token probes (attentive pooling, the CTC reader): layer sets x learning rates."""
    epochs, batch_size = epochs_and_batch(config, len(fit), True)
    grid_log: list[dict[str, Any]] = []
    best: Pick | None = None
    memo: dict[Any, float] = {}  # (sample, reply) -> score: members often give the same reply
    for layers in layer_sets(cache, config.layer):
        generator = torch.Generator().manual_seed(config.seed)
        torch.manual_seed(config.seed)
        # train rows are read every epoch: held whole in float32 when they fit, else gathered per batch (as held-out)
        x_fit = held_in_float32(
            load_features(cache, fit, layers, True, config.max_memory_gb, device), cache, config.max_memory_gb
        )
        x_held = load_features(cache, held, layers, True, config.max_memory_gb, device)
        dim = cache.dim * len(layers)
        if task.kind == "ctc":
            grid: nn.Module = _ReaderGrid(dim, cache.num_tokens, task, len(lrs), generator)
        else:
            grid = ProbeGrid(
                dim,
                task.out_dim,
                len(lrs),
                config.pooling,
                config.heads,
                cache.num_tokens,
                _grid_shape(cache),
                generator,
            )
        grid.to(device)  # the fixed transforms are fitted where the rows are
        grid.fit_norm(_stats_rows(x_fit, device))
        train_kw = dict(
            epochs=epochs,
            batch_size=batch_size,
            weight_decay=config.weight_decay,
            generator=generator,
            device=device,
            on_epoch=on_epoch,
        )
        if isinstance(grid, _ReaderGrid):
            x_fit, x_held = grid.reduce_rows(x_fit), grid.reduce_rows(x_held)
            train_grid(grid, lrs, x_fit, y, task, **train_kw)
        else:  # standardized once when held whole, else per batch where gathered; all members in one stacked step
            rows = standardized(x_fit, grid.members[0].norm, device)
            del x_fit
            trainer = StackedAttentive(list(grid.members)).to(device)
            train_grid(trainer, lrs, rows, y, task, **train_kw)
            trainer.write_back()
            del rows, trainer
        for member, lr in zip(grid.members, lrs, strict=True):
            scorer = _ReadOnly(member) if isinstance(grid, _ReaderGrid) else member
            score = mean_score(ability, held, predict(scorer, task, x_held, held, device), memo=memo)
            grid_log.append({"layers": list(layers), "pool": "tokens", "lr": lr, "heldout": score})
            if best is None or is_better(ability, score, best[0]):
                best = (score, member, layers, lr, "tokens")
    assert best is not None
    return grid_log, best


def fit_ability(
    config: ProbeConfig,
    ability: Ability,
    train: list[Sample],
    cache: Any,
    device: str,
    on_epoch: Callable[[], None] | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """Train the grid of one ability and return the probe chosen on the held-out slice, with its metadata."""
    fit, held = holdout_split(train, config.heldout_frac, config.seed)
    task = Task.build(ability, fit, cache.num_tokens)
    tokens = config.pooling == "attn" or task.kind == "ctc"
    lrs = [config.lr] if config.lr else list(config.ocr_lrs if task.kind == "ctc" else config.lrs)
    epochs, batch_size = epochs_and_batch(config, len(fit), tokens)
    fit_grid = _fit_tokens if tokens else _fit_pooled
    # the CTC reader does not depend on the probe's pooling: within a fingerprint (features shared by the heads)
    # probe-linear and probe-attn would train the same one, so the second takes the first's
    shared = getattr(cache, "shared", None) if task.kind == "ctc" else None
    key = (
        "ctc",
        ability.key,
        tuple(s.key for s in fit),
        tuple(s.key for s in held),
        tuple(lrs),
        epochs,
        batch_size,
        config.weight_decay,
        config.seed,
        config.layer,
        device,
    )
    lock = getattr(cache, "shared_lock", None) if shared is not None else None
    with lock or contextlib.nullcontext():  # a head fitting at the same time waits for this one's reader
        if shared is not None and key in shared:
            grid_log, best = copy.deepcopy(shared[key])
        else:
            grid_log, best = fit_grid(config, ability, task, fit, held, cache, device, lrs, task.targets(fit), on_epoch)
            if shared is not None:
                shared[key] = copy.deepcopy((grid_log, best))
    score, model, layers, lr, pool = best
    reduce = model.reduce if isinstance(model, Probe) else None  # the cell PCA of a grid view
    meta = {
        **task.meta(),
        "pooling": config.pooling,
        "pool": pool,
        "cells": reduce.cells if reduce is not None else 0,
        "rank": reduce.rank if reduce is not None else 0,
        "heads": config.heads,
        "dim": cache.dim * len(layers),
        "num_tokens": cache.num_tokens,
        "grid_shape": _grid_shape(cache),
        "layers": list(layers),
        "lr": lr,
        "heldout": score,
        "epochs": epochs,
        "batch_size": batch_size,
        "n_fit": len(fit),
        "n_heldout": len(held),
        "grid": grid_log,
    }
    return model.cpu(), meta


# -- runs -----------------------------------------------------------------------------------------------
def _load_models(run_dir: Path, metas: dict[str, dict[str, Any]]) -> dict[str, tuple[nn.Module, Task]]:
    from safetensors.torch import load_file

    path = run_dir / WEIGHTS_FILE
    if not path.is_file():
        raise AvaError(f"{run_dir} is not a probe run directory: {WEIGHTS_FILE} is missing")
    tensors = load_file(str(path))
    out = {}
    for ava, meta in metas.items():
        ability = get_ability(ava)
        task = Task.from_meta(ability, meta)
        model = build_model(task, meta)
        prefix = f"{ava}."
        state = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        try:
            model.load_state_dict(state)
        except RuntimeError as e:
            raise AvaError(f"{path}: the tensors of {ava!r} do not match {META_FILE} ({e})") from e
        out[ava] = (model.eval(), task)
    return out


def _head_name(config: ProbeConfig) -> str:
    return "probe-attn" if config.pooling == "attn" else "probe-linear"


def _uses_tokens(meta: dict[str, Any], task: Task) -> bool:
    return meta["pooling"] == "attn" or task.kind == "ctc"


def predict_split(
    model: nn.Module,
    task: Task,
    meta: dict[str, Any],
    samples: Sequence[Sample],
    cache: Any,
    device: str,
    max_memory_gb: float,
) -> list[str]:
    """Replies of one ability's chosen probe for ``samples``, from ``cache`` (the cache or an ability's features)."""
    if not samples:
        return []
    layers = tuple(meta["layers"])
    if _uses_tokens(meta, task):
        rows = load_features(cache, samples, layers, True, max_memory_gb, device)
    else:
        pool = meta.get("pool", "mean")
        rows = read_pooled_views(cache, samples, layers, [pool])[pool]
    return predict(model.to(device), task, rows, samples, device)


def _extra(meta: dict[str, Any]) -> dict[str, Any]:
    """The selection details of one ability in its results' ``extra``."""
    keys = ("pool", "layers", "lr", "heldout", "grid", "epochs", "n_fit", "n_heldout")
    return {k: meta.get(k, "mean" if k == "pool" else None) for k in keys}


class ProbeRun(AbilityRun):
    """A probe run (linear or attentive) trained ability by ability, resumable per ability."""

    def __init__(self, config: ProbeConfig, dataset: Dataset, cache: Any, abilities: list[str], device: str) -> None:
        if config.pooling not in ("mean", "attn"):
            raise AvaError(f"unknown pooling {config.pooling!r}; use 'mean' or 'attn'")
        pool_candidates(cache, config.pools)  # an unknown pooling is named before any training
        self.head = _head_name(config)
        super().__init__(config, dataset, cache, abilities, device)

    def layers(self) -> list[int | None]:
        return list(dict.fromkeys(la for layers in layer_sets(self.cache, self.config.layer) for la in layers))

    def needs(self, ava: str) -> tuple[list[str], bool]:
        if self.config.pooling == "attn" or get_ability(ava).answer_kind == "text":  # attentive pool, CTC reader
            return [], True
        return pool_candidates(self.cache, self.config.pools), False

    def fit_ability(
        self,
        ava: str,
        features: Any,
        on_step: Callable[[], None] | None,
    ) -> tuple[dict[str, Any], dict[str, Any], list[str], dict]:
        ability = get_ability(ava)
        model, meta = fit_ability(self.config, ability, self.train_samples(ava), features, self.device, on_step)
        task = Task.from_meta(ability, meta)
        replies = predict_split(
            model, task, meta, self.eval_samples(ava), features, self.device, self.config.max_memory_gb
        )
        return meta, dict(model.cpu().state_dict()), replies, _extra(meta)

    def write_head_files(self) -> None:
        tensors = {f"{ava}.{k}": v for ava in self.abilities for k, v in self.record_tensors(ava).items()}
        save_tensors(
            self.run_dir / WEIGHTS_FILE,
            tensors,
            metadata={"format": "ava-probe", "abilities": ",".join(self.abilities)},
        )
        write_json(self.run_dir / META_FILE, {ava: self.records[ava]["meta"] for ava in self.abilities})


@owns_run_dir(_head_name)
def train(config: ProbeConfig) -> Path:
    """Train probes for the abilities of ``config`` and write the run directory (evaluates when eval_after).

    Each ability is recorded as soon as it is trained: re-running an interrupted run with the same config
    trains only the abilities not recorded yet (see :mod:`ava.heads.ability_runs`)."""
    from ava.cache import open_cache

    if config.pooling not in ("mean", "attn"):
        raise AvaError(f"unknown pooling {config.pooling!r}; use 'mean' or 'attn'")
    dataset = Dataset(config.data)
    abilities = select_abilities(dataset, config.ava)
    cache = open_cache(config.cache, config.vfm)
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    run = ProbeRun(config, dataset, cache, abilities, device)
    train_abilities([run], cache, abilities, device=device, progress=config.progress, label=f"{run.head} {config.vfm}")
    run.finish()
    return run.run_dir


def evaluate(
    run_dir: str | os.PathLike[str],
    split: str = "test",
    *,
    data: str | None = None,
    cache: str | None = None,
    device: str | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Reload the saved probes, predict ``split`` from the cache and write results_<split>.json."""
    saved = open_saved_run(run_dir, META_FILE, data=data, cache=cache, device=device, split=split)
    run_dir, config, run, metas = saved.path, saved.config, saved.run, saved.metas
    dataset, feature_cache, dev = saved.dataset, saved.cache, saved.device
    predictions: dict[tuple[str, str], str] = {}
    extra = {}
    max_memory = float(config.get("max_memory_gb", 4.0))
    for ava, (model, task) in _load_models(run_dir, metas).items():
        samples = dataset.samples(ava, split=split)
        meta = metas[ava]
        if samples:
            features = AbilityFeatures(feature_cache, samples, list(meta["layers"]), device=dev)
            replies = predict_split(model, task, meta, samples, features, dev, max_memory)
            predictions.update({s.key: r for s, r in zip(samples, replies, strict=True)})
        extra[ava] = _extra(meta)
    return score_and_write(dataset, predictions, list(metas), split, run, config, run_dir, extra)
