"""Probe modules: mean-pooled linear and attentive-pooled linear, trained as a grid side by side.

The attentive probe follows V-JEPA/AIMv2: learned queries attend over the patch tokens and the pooled
vectors feed a linear layer. A single learned query against a linear key projection scores a token by
``q . (W_k x) = (W_k^T q) . x``, so the query lives directly in feature space (one vector per head); a learned
per-head bias over token positions lets a head look at a region (raw-pixel tokens carry no position of
their own; VFM tokens do, and the bias then costs nothing). Each head's pooled vector also carries the
attention-weighted (x, y) position of the tokens it attended to: where it looked, which is what spatial
relations and boxes need (again free for VFMs whose tokens encode position). Values are the (standardized)
tokens themselves, and the linear layer on the concatenated per-head pools absorbs
any value/output projection. This keeps the probe linear in the tokens given the attention, and cheap
enough to train a grid of them on CPU. Queries start at zero, i.e. as mean pooling.

Targets and losses by answer kind (see :mod:`ava.heads.targets`): cross-entropy over the option vocabulary;
mean squared error on standardized regression targets (log count, log metres, RGB/255); for boxes,
sigmoid centre and size (DETR's parameterization), loss = L1 + (1 - GIoU).
"""

from __future__ import annotations

import math

import torch
from torch import nn

POS_DIM = 2  # the attention-weighted (x, y) of the tokens a head looked at, appended to its pooled vector
POS_SCALE = 4.0  # positions span ~[-2, 2], like standardized features


def giou(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Generalized IoU of boxes [..., 4] given as x1, y1, x2, y2 (corners already ordered), in -1..1.

    GIoU = IoU - |C minus (A union B)| / |C| with C the smallest box enclosing both (docs/metrics.md).
    """
    area_p = (pred[..., 2] - pred[..., 0]).clamp(min=0) * (pred[..., 3] - pred[..., 1]).clamp(min=0)
    area_t = (target[..., 2] - target[..., 0]).clamp(min=0) * (target[..., 3] - target[..., 1]).clamp(min=0)
    iw = (torch.minimum(pred[..., 2], target[..., 2]) - torch.maximum(pred[..., 0], target[..., 0])).clamp(min=0)
    ih = (torch.minimum(pred[..., 3], target[..., 3]) - torch.maximum(pred[..., 1], target[..., 1])).clamp(min=0)
    inter = iw * ih
    union = area_p + area_t - inter
    cw = torch.maximum(pred[..., 2], target[..., 2]) - torch.minimum(pred[..., 0], target[..., 0])
    ch = torch.maximum(pred[..., 3], target[..., 3]) - torch.minimum(pred[..., 1], target[..., 1])
    enclose = cw * ch
    eps = 1e-9
    iou = inter / union.clamp(min=eps)
    return iou - (enclose - union) / enclose.clamp(min=eps)


def box_from_output(out: torch.Tensor) -> torch.Tensor:
    """Raw outputs [..., 4] -> x1, y1, x2, y2: sigmoid centre and size (as DETR), so corners are always ordered.

    Sigmoids on the corners themselves need min/max reordering, which routes gradients to one corner at a
    time, and squash the corners near the image border; fitting was markedly worse that way.
    """
    cx, cy, w, h = torch.sigmoid(out).unbind(-1)
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)


def box_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """L1 + (1 - GIoU) of the decoded boxes, averaged over the batch."""
    pred = box_from_output(out)
    return (pred - target).abs().sum(-1).mean() + (1 - giou(pred, target)).mean()


class Standardize(nn.Module):
    """Centering per feature and one global scale, from train statistics, saved with the probe.

    Features of different VFMs differ in scale by orders of magnitude; unit-scale inputs let one learning-rate
    grid fit them all. The scale is shared by all features (the root mean variance) rather than per feature,
    so near-constant, noisy features are not blown up to the loudness of informative ones.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    def fit(self, x: torch.Tensor) -> None:
        flat = x.reshape(-1, x.shape[-1]).double()
        self.mean.copy_(flat.mean(0).float())
        rms = flat.var(0, unbiased=False).mean().sqrt().clamp(min=1e-6)
        self.std.copy_(rms.float().expand(self.std.shape[0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


COV_CELLS = 1 << 16  # cells per float64 block of a grid view's covariance (CellReduce.fit): 0.6 GB at 1152 dims


class CellReduce(nn.Module):
    """A fixed PCA of the cell means of a pooled grid view, fitted on train, saved with the probe.

    A ``gridN`` view of L layers is laid out per layer as [mean (D), N * N cell means (D each)]. The global
    means are kept whole; every cell mean is projected on the ``rank`` leading principal components of the
    train cells of its layer, so a 4 x 4 grid of 768-dim tokens costs 768 + 16 * 64 inputs instead of 17 x 768:
    fewer weights to fit from few samples, and a grid of probes that trains in seconds on a CPU.
    """

    def __init__(self, dim: int, layers: int, cells: int, rank: int) -> None:
        super().__init__()
        self.token_dim, self.layers, self.cells = dim // layers, layers, cells
        self.rank = min(rank, self.token_dim)
        basis = torch.eye(self.token_dim)[:, : self.rank].expand(layers, -1, -1).clone()
        self.register_buffer("basis", basis)  # [L, D, r]

    @property
    def out_dim(self) -> int:
        return self.layers * (self.token_dim + self.cells**2 * self.rank)

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.reshape(x.shape[0], self.layers, 1 + self.cells**2, self.token_dim)
        return x[:, :, 0], x[:, :, 1:]  # [B, L, D], [B, L, N*N, D]

    def fit(self, x: torch.Tensor) -> None:
        """Principal components of the train cells, per layer (centred; a fixed sign, so runs repeat), on the
        device of ``x``.

        The covariance is summed in float64 over blocks of at most :data:`COV_CELLS` cells, so the float64 copy
        never holds more than a block (a whole view in float64 was 8 bytes per value of every layer at once: ~5 GB
        for 32K rows of a 4 x 4 grid at 1152 dims). One block is the whole computation as before."""
        _, cells = self._split(x)
        per_block = max(1, COV_CELLS // max(1, cells.shape[2]))  # samples per block
        n = max(1, cells.shape[0] * cells.shape[2])
        for layer in range(self.layers):
            blocks = [
                cells[i : i + per_block, layer].reshape(-1, self.token_dim) for i in range(0, cells.shape[0], per_block)
            ]
            total = torch.zeros(self.token_dim, dtype=torch.float64, device=x.device)
            for block in blocks:
                total += block.double().sum(0)
            mean = total / n
            cov = torch.zeros(self.token_dim, self.token_dim, dtype=torch.float64, device=x.device)
            for block in blocks:
                centred = block.double() - mean
                cov += centred.T @ centred
            _, vectors = torch.linalg.eigh(cov / n)
            basis = vectors[:, -self.rank :].flip(-1)
            self.basis[layer].copy_((basis * torch.where(basis.sum(0) < 0, -1.0, 1.0)).float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        means, cells = self._split(x)
        reduced = torch.einsum("blcd,ldr->blcr", cells, self.basis).flatten(2)
        return torch.cat([means, reduced], -1).flatten(1)


class Probe(nn.Module):
    """One probe: (standardized) features -> mean or attentive pooling -> linear.

    ``pooling="mean"`` takes pooled [B, D] features (or [B, T, D], averaged here); with ``cells`` N > 0 it takes
    a ``gridN`` view instead (the mean plus N x N cell means, see :func:`ava.heads.features.pool_tokens`),
    whose cells a :class:`CellReduce` projects before the standardization. ``"attn"`` takes tokens.
    ``dim`` is the token feature size times the number of layers in every case.
    """

    def __init__(
        self,
        dim: int,
        out_dim: int,
        pooling: str = "mean",
        heads: int = 4,
        num_tokens: int = 1,
        grid: tuple[int, int] | None = None,
        cells: int = 0,
        layers: int = 1,
        rank: int = 64,
    ) -> None:
        super().__init__()
        self.pooling, self.heads, self.dim = pooling, heads, dim
        self.reduce = CellReduce(dim, layers, cells, rank) if cells and pooling == "mean" else None
        self.norm = Standardize(self.reduce.out_dim if self.reduce is not None else dim)
        if self.reduce is not None:
            self.linear = nn.Linear(self.reduce.out_dim, out_dim)
        elif pooling == "attn":
            self.query = nn.Parameter(torch.zeros(heads, dim))
            self.pos_bias = nn.Parameter(torch.zeros(heads, num_tokens))
            self.register_buffer("positions", token_positions(num_tokens, grid))
            self.linear = nn.Linear(heads * (dim + POS_DIM), out_dim)
        elif pooling == "mean":
            self.linear = nn.Linear(dim, out_dim)
        else:
            raise ValueError(f"unknown pooling {pooling!r}")

    def init_weights(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.linear.weight.normal_(0.0, 0.01, generator=generator)
            self.linear.bias.zero_()

    def fit_input(self, x: torch.Tensor) -> None:
        """Fit the fixed input transforms (cell PCA, then standardization) on train rows."""
        if self.reduce is not None:
            self.reduce.fit(x)
            x = self.reduce(x)
        self.norm.fit(x)

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        """Rows after the fixed transforms: what the linear layer of a pooled probe reads."""
        return self.norm(self.reduce(x) if self.reduce is not None else x)

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        if self.reduce is not None:
            return self.prepare(x)
        x = self.norm(x)
        if self.pooling == "mean":
            return x.mean(1) if x.dim() == 3 else x
        return attentive_pool(x, self.query, self.pos_bias, self.positions).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.pool(x))


def token_positions(num_tokens: int, grid: tuple[int, int] | None) -> torch.Tensor:
    """[T, 2] (x, y) centre of every token in 0..1, row-major over ``grid`` (rows, cols); a token sequence
    without a known grid gets its index as x."""
    rows, cols = grid if grid and grid[0] * grid[1] == num_tokens else (1, num_tokens)
    ys, xs = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    return torch.stack([(xs.flatten() + 0.5) / cols, (ys.flatten() + 0.5) / rows], -1).float()


def attentive_pool(
    x: torch.Tensor, queries: torch.Tensor, pos_bias: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """[B, T, D] tokens, [K, D] queries, [K, T] position biases, [T, 2] token positions -> [B, K, D + 2]: per
    query, the softmax(q . x / sqrt(D) + bias)-weighted mean of the tokens and of their positions."""
    # queries @ x^T (not einsum "btd,kd->bkt"): the same scores, but its backward for the queries runs as one
    # batched product over contiguous tokens instead of a [D, B*T] x [B*T, K] product ~4x slower on a CPU
    attn = (torch.matmul(queries, x.transpose(1, 2)) / math.sqrt(x.shape[-1]) + pos_bias).softmax(-1)
    where = (attn @ positions - 0.5) * POS_SCALE  # [B, K, 2], centred and on the scale of the features
    return torch.cat([attn @ x, where], -1)


class ProbeGrid(nn.Module):
    """G probes of one input type trained on the same batches, each with its own learning rate.

    The members share the input standardization; attentive members' queries are scored in one batched
    product so the tokens are read once per step for the whole grid.
    """

    def __init__(
        self,
        dim: int,
        out_dim: int,
        n: int,
        pooling: str,
        heads: int,
        num_tokens: int,
        grid: tuple[int, int] | None,
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        self.members = nn.ModuleList(Probe(dim, out_dim, pooling, heads, num_tokens, grid) for _ in range(n))
        for m in self.members:
            m.init_weights(generator)
        self.pooling, self.heads = pooling, heads

    def fit_norm(self, x: torch.Tensor) -> None:
        self.members[0].norm.fit(x)
        for m in self.members[1:]:
            m.norm.load_state_dict(self.members[0].norm.state_dict())

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.members[0].norm(x)
        if self.pooling == "mean":
            pooled = x.mean(1) if x.dim() == 3 else x
            return [m.linear(pooled) for m in self.members]
        queries = torch.cat([m.query for m in self.members])  # [G*h, D]
        bias = torch.cat([m.pos_bias for m in self.members])
        pools = attentive_pool(x, queries, bias, self.members[0].positions)
        pools = pools.unflatten(1, (len(self.members), self.heads))  # [B, G, h, D + 2]
        return [m.linear(pools[:, g].flatten(1)) for g, m in enumerate(self.members)]
