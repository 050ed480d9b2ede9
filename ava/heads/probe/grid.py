"""A probe grid trained as stacked tensors: every member's parameters side by side along a leading member axis,
one forward, one backward and one optimizer update per step for the whole grid.

A grid of G probes (views x learning rates, or learning rates alone) costs little compute per step (a linear layer
on a few hundred rows), so per-step overhead decided its speed: G separate modules, G optimizer parameter groups
(torch's optimizers take one learning rate per group) and one loss per view. Here:

- :class:`StackedLinears`: the linear probes of pooled views, one weight block ``[G_v, out, d_v]`` per view (the
  members reading that view's columns of the concatenated prepared rows), one product per view.
- :class:`StackedAttentive`: the attentive probes. All members' queries and position biases in one ``[G*K, ...]``
  tensor, scored in one product over the (already standardized) tokens, and their linear layers as one batched
  product.
- :class:`GridAdamW`: ``torch.optim.AdamW``'s update (decoupled weight decay, bias-corrected moments, same
  defaults) on those tensors with one learning rate per member (tested against ``torch.optim.AdamW``).

After training, :meth:`write_back` copies each member's slice into its :class:`~ava.heads.probe.model.Probe`, which
is what is scored, saved and reloaded (the saved format does not change).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ava.heads.probe.model import Probe, attentive_pool


class GridAdamW:
    """AdamW over parameters whose first axis runs over grid members, member i with learning rate ``lrs[i]``.

    The update is ``torch.optim.AdamW``'s (amsgrad off): ``p *= 1 - lr * wd``; ``m = lerp(m, g, 1 - b1)``;
    ``v = b2 * v + (1 - b2) * g * g``; ``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``.
    :meth:`step` takes the schedule's factor for this step (the learning rates are ``lrs * factor``).

    Where the installed torch has AdamW's fused kernel for the parameters' device and dtype
    (``torch._fused_adamw_``, probed once: :func:`fused_adamw_runs`), each learning rate's rows are updated by one
    call of it: one launch per learning rate and one for the step counts, instead of 14 multi-tensor ops per step (on
    a GPU a probe's step is a few dozen small kernels, and the optimizer's were half of the linear probe's).
    Elsewhere, the 14 ``torch._foreach_*`` ops.
    """

    def __init__(
        self,
        params: Sequence[tuple[torch.Tensor, torch.Tensor]],
        weight_decay: float = 1e-2,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        fused: bool | None = None,
    ) -> None:
        """``params``: (parameter, per-row learning rates of its first axis) pairs. ``fused``: None = where the
        fused kernel runs (probed), False = the foreach ops."""
        self.params = [p for p, _ in params]
        rates = [lr.detach().cpu().double().reshape(-1) for _, lr in params]
        self.lrs = [lr.to(p.device, p.dtype).reshape(-1, *([1] * (p.dim() - 1))) for p, lr in params]
        for p, lr in zip(self.params, self.lrs, strict=True):
            if lr.shape[0] != p.shape[0]:
                raise ValueError(f"{lr.shape[0]} learning rates for a parameter of {p.shape[0]} rows")
        self.weight_decay, self.betas, self.eps = weight_decay, betas, eps
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.steps = 0
        self.fused = fused is not False and bool(self.params) and fused_adamw_runs(self.params[0])
        # the fused kernel's groups: per learning rate, the runs of rows (param, first row, end row) that have it
        by_rate: dict[float, list[tuple[int, int, int]]] = {}
        for i, r in enumerate(rates):
            start = 0
            for j in range(1, len(r) + 1):
                if j == len(r) or r[j] != r[start]:
                    by_rate.setdefault(float(r[start]), []).append((i, start, j))
                    start = j
        # per learning rate, views of its rows, made once (parameters, moments, step counts; gradients: each step)
        self._groups = (
            [
                (
                    lr,
                    runs,
                    [self.params[i][a:b] for i, a, b in runs],
                    [self.exp_avg[i][a:b] for i, a, b in runs],
                    [self.exp_avg_sq[i][a:b] for i, a, b in runs],
                    [torch.tensor(0.0, device=self.params[i].device) for i, _, _ in runs],
                )
                for lr, runs in by_rate.items()
            ]
            if self.fused
            else []
        )
        self._counts = [c for group in self._groups for c in group[5]]  # every group's step count

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, factor: float = 1.0) -> None:
        """One update of every parameter with a gradient: per learning rate one fused call, or each op applied to
        all of them in one ``torch._foreach_*`` call (the per-tensor loop cost more in calls than the small probes'
        arithmetic)."""
        if self.fused and all(p.grad is not None for p in self.params):
            self._fused_step(factor)
            return
        self.steps += 1
        beta1, beta2 = self.betas
        bias1, bias2_sqrt = 1 - beta1**self.steps, math.sqrt(1 - beta2**self.steps)
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        params = [self.params[i] for i in live]
        grads = [self.params[i].grad for i in live]
        m, v = [self.exp_avg[i] for i in live], [self.exp_avg_sq[i] for i in live]
        lr_t = torch._foreach_mul([self.lrs[i] for i in live], factor)
        decay = torch._foreach_mul(lr_t, -self.weight_decay)
        torch._foreach_add_(decay, 1.0)  # 1 - lr_t * wd
        torch._foreach_mul_(params, decay)
        torch._foreach_lerp_(m, grads, 1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        update = torch._foreach_div(m, denom)
        torch._foreach_mul_(update, torch._foreach_div(lr_t, bias1))
        torch._foreach_sub_(params, update)
        for count in self._counts:  # (a step some rows had no gradient in: the fused counts follow)
            count.fill_(self.steps)

    def _fused_step(self, factor: float) -> None:
        """``torch._fused_adamw_`` once per learning rate, on the views of its rows made at the start."""
        torch._foreach_add_(self._counts, 1.0)  # (the fused kernel reads its step counts; torch's optimizer adds too)
        beta1, beta2 = self.betas
        for lr, runs, params, avg, sq, counts in self._groups:
            grads = [self.params[i].grad[a:b] for i, a, b in runs]  # type: ignore[index]
            torch._fused_adamw_(
                params,
                grads,
                avg,
                sq,
                [],
                counts,
                lr=lr * factor,
                beta1=beta1,
                beta2=beta2,
                weight_decay=self.weight_decay,
                eps=self.eps,
                amsgrad=False,
                maximize=False,
            )
        self.steps += 1


def fused_adamw_runs(like: torch.Tensor) -> bool:
    """Whether ``torch._fused_adamw_`` runs for tensors like ``like`` (its device and dtype) in this torch."""
    return _fused_adamw_probe(str(like.device), like.dtype)


@functools.cache
def _fused_adamw_probe(device: str, dtype: torch.dtype) -> bool:
    """One update of a scratch element with ``torch._fused_adamw_`` on ``device`` in ``dtype``: whether it runs."""
    if not hasattr(torch, "_fused_adamw_"):
        return False
    x = [torch.zeros(1, device=device, dtype=dtype) for _ in range(4)]
    try:
        torch._fused_adamw_(
            [x[0]],
            [x[1]],
            [x[2]],
            [x[3]],
            [],
            [torch.ones((), device=device)],
            lr=1e-3,
            beta1=0.9,
            beta2=0.999,
            weight_decay=0.0,
            eps=1e-8,
            amsgrad=False,
            maximize=False,
        )
    except (RuntimeError, NotImplementedError):  # no kernel for this device or dtype
        return False
    return True


class StackedLinears(nn.Module):
    """The linear layers of pooled probes on their prepared views, stacked (see the module doc).

    ``members[g]`` reads columns ``slices[g]`` of the concatenated prepared rows; its weight and bias are the
    starting point of its row. Members reading the same columns form one block ``W [G_v, out, d_v]``, applied as
    one ``[B, d_v] x [d_v, G_v * out]`` product (a broadcast batched product is several times slower on a CPU,
    its weight gradient most of all)."""

    def __init__(self, members: Sequence[Probe], slices: Sequence[slice]) -> None:
        super().__init__()
        self.members = list(members)
        blocks: dict[tuple[int, int], list[int]] = {}
        for g, sl in enumerate(slices):
            blocks.setdefault((sl.start, sl.stop), []).append(g)
        self.blocks = [(slice(*key), ids) for key, ids in blocks.items()]
        self.weights = nn.ParameterList(
            [torch.stack([self.members[g].linear.weight.detach() for g in ids]) for _, ids in self.blocks]
        )
        self.biases = nn.ParameterList(
            [torch.stack([self.members[g].linear.bias.detach() for g in ids]) for _, ids in self.blocks]
        )
        order = [g for _, ids in self.blocks for g in ids]
        self.register_buffer("order", torch.tensor([order.index(g) for g in range(len(order))]))
        self._in_order = order == sorted(order)

    def param_lrs(self, lrs: Sequence[float]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out = []
        for (_, ids), w, b in zip(self.blocks, self.weights, self.biases, strict=True):
            rates = torch.tensor([float(lrs[g]) for g in ids], dtype=torch.float32)
            out += [(w, rates), (b, rates)]
        return out

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """[B, F] prepared rows -> [G, B, out], members in their given order."""
        outs = []
        for (sl, _), w, b in zip(self.blocks, self.weights, self.biases, strict=True):
            g, out, width = w.shape
            outs.append((z[:, sl] @ w.reshape(g * out, width).T).reshape(len(z), g, out).transpose(0, 1) + b[:, None])
        stacked = outs[0] if len(outs) == 1 else torch.cat(outs)
        return stacked if self._in_order else stacked.index_select(0, self.order)

    @torch.no_grad()
    def write_back(self) -> None:
        for (_, ids), w, b in zip(self.blocks, self.weights, self.biases, strict=True):
            for i, g in enumerate(ids):
                self.members[g].linear.weight.copy_(w[i])
                self.members[g].linear.bias.copy_(b[i])


class StackedAttentive(nn.Module):
    """The attentive probes of a :class:`~ava.heads.probe.model.ProbeGrid`, stacked (see the module doc).

    The input is tokens already standardized by the grid's shared standardization (done once per ability, not per
    batch)."""

    def __init__(self, members: Sequence[Probe]) -> None:
        super().__init__()
        self.members = list(members)
        self.heads = self.members[0].heads
        self.query = nn.Parameter(torch.cat([m.query.detach() for m in self.members]))  # [G*K, D]
        self.pos_bias = nn.Parameter(torch.cat([m.pos_bias.detach() for m in self.members]))  # [G*K, T]
        self.weight = nn.Parameter(torch.stack([m.linear.weight.detach() for m in self.members]))  # [G, out, F]
        self.bias = nn.Parameter(torch.stack([m.linear.bias.detach() for m in self.members]))  # [G, out]
        self.register_buffer("positions", self.members[0].positions.clone())

    def param_lrs(self, lrs: Sequence[float]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        rates = torch.tensor(list(lrs), dtype=torch.float32)
        per_query = rates.repeat_interleave(self.heads)
        return [(self.query, per_query), (self.pos_bias, per_query), (self.weight, rates), (self.bias, rates)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] standardized tokens -> [G, B, out]."""
        pools = attentive_pool(x, self.query, self.pos_bias, self.positions)  # [B, G*K, D + 2]
        pools = pools.reshape(x.shape[0], len(self.members), -1).transpose(0, 1)  # [G, B, K * (D + 2)]
        return torch.bmm(pools, self.weight.transpose(1, 2)) + self.bias[:, None]

    @torch.no_grad()
    def write_back(self) -> None:
        k = self.heads
        for g, m in enumerate(self.members):
            m.query.copy_(self.query[g * k : (g + 1) * k])
            m.pos_bias.copy_(self.pos_bias[g * k : (g + 1) * k])
            m.linear.weight.copy_(self.weight[g])
            m.linear.bias.copy_(self.bias[g])


def stacked_loss(out: torch.Tensor, y: Any, task: Any) -> torch.Tensor:
    """The summed loss of G members' outputs ``[G, B, out]`` on one batch: the task's loss (a mean over rows) of
    all G * B rows at once, times G."""
    n = out.shape[0]
    target = y.repeat(n) if y.dim() == 1 else y.repeat(n, 1)
    return n * task.loss(out.flatten(0, 1), target)
