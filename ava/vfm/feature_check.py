"""What a VFM's features must be before anything keeps them: real, finite numbers.

A VFM given in memory (``vfm_from_module``) or a checkpoint with broken numerics can return NaN, infinities or
complex tensors. Stored, they would poison every head trained on them, and only ``ava cache verify`` would find
them later; scored, a complex token would lose its imaginary part silently. Both callers of a VFM's forward, the
cache extraction and the in-memory fingerprint, pass each batch through :func:`check_features`.

On a CPU the finiteness check is read at once (one reduction per batch). On a GPU, reading it would stall the
device once per batch; :func:`check_features` then returns the per-image flags still on the device, and the caller
reads them where it waits anyway (the extraction: once per shard, with its copies).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ava.errors import AvaError

if TYPE_CHECKING:
    import torch


def check_features(out: torch.Tensor, name: str, images: Callable[[Sequence[int]], str]) -> torch.Tensor | None:
    """Refuse a complex ``out`` [B, ...] at once; on a CPU refuse non-finite values at once too (``images`` names
    the batch's items at the given positions). On another device, return the [B] flags of items with a non-finite
    value, unread, for :func:`raise_nonfinite`; None when there is nothing left to check."""

    refuse_complex(out, name)
    if not out.is_floating_point() or out.numel() == 0:
        return None
    bad = ~finite_rows(out)
    if out.device.type != "cpu":
        return bad
    if bool(bad.any()):
        raise_nonfinite(name, bad, images)
    return None


def finite_rows(values: torch.Tensor) -> torch.Tensor:
    """Which rows of ``values`` [N, ...] hold only finite numbers: [N] bools, where ``values`` is. A NaN anywhere
    makes a row's max (and min) NaN, +inf its max, -inf its min: two reductions, no temporary tensor of the rows'
    size (``isfinite().all()`` made one: 4 ms per SigLIP-sized image on a CPU core, 14x this; ``np.isfinite`` on a
    cache's fp16 rows, 1.3 ms a row, 5x this)."""
    import torch

    flat = values.flatten(1)
    if flat.shape[1] == 0:
        return torch.ones(len(flat), dtype=torch.bool, device=values.device)
    return torch.isfinite(flat.amax(dim=1)) & torch.isfinite(flat.amin(dim=1))


def refuse_complex(out: torch.Tensor, name: str) -> None:
    """Refuse complex features (casting them to real would drop the imaginary part without a word)."""
    if out.is_complex():
        raise AvaError(
            f"VFM {name!r} returned complex features ({str(out.dtype).removeprefix('torch.')}); features "
            "are real numbers: return x.real, x.abs(), or torch.view_as_real(x) folded into the feature "
            "dimension"
        )


def raise_nonfinite(name: str, bad: torch.Tensor, images: Callable[[Sequence[int]], str]) -> None:
    """Raise the one-line error for the items flagged in ``bad`` [B] (if any)."""
    where = [int(i) for i in bad.nonzero().flatten().tolist()]
    if where:
        raise AvaError(
            f"VFM {name!r} returned NaN or infinite features for {len(where)} of {bad.numel()} image(s) "
            f"of a batch ({images(where)}); nothing of them was kept: check the model's numerics (a "
            "forward in fp32: --dtype fp32) and its inputs"
        )
