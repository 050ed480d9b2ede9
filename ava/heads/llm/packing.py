"""Packed sequences: a batch's samples concatenated into one row with no padding, attention kept inside each sample.

The collator (:class:`ava.heads.llm.data.Collator` with ``pack=True``) gives the row, ``position_ids`` that restart
at 0 for each sample (so RoPE sees each sample as it would alone), ``cu_seqlens`` (int32 [B + 1], the sample
boundaries) and ``max_len``. The decoder gets them as transformers' flash-attention keyword arguments
(``cu_seq_lens_q/k``, ``max_length_q/k``), which every decoder layer passes on to its attention function.

The attention function registered here (:data:`NAME`, through transformers' ``AttentionInterface``):

- on CUDA in fp16/bf16: ``torch.nn.attention.varlen.varlen_attn`` (FlashAttention's variable-length kernel, in
  PyTorch itself), causal within each sample, called with the arguments the installed PyTorch's signature takes
  (:class:`Varlen`: its keywords changed between 2.10, 2.11 and 2.13); checked once per device and dtype by
  :func:`varlen_usable` (a tiny forward against SDPA, and a backward), else the fallback below, with one warning
  that says why (:func:`varlen_status`; a run records which path ran as ``attention``);
- elsewhere (CPU, fp32, a GPU without the kernel): an exact equivalent, transformers' own SDPA attention run on each
  sample's slice with ``is_causal`` (the lengths come from the host as ``seq_lens``: nothing is read back);
- for an unpacked batch (no ``cu_seq_lens_q``): transformers' SDPA attention, unchanged.

A model whose attention is already transformers' FlashAttention (``flash_attention_2``/``3``, with the flash-attn
package) keeps it: that path reads the same keyword arguments.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

NAME = "ava_packed"


def register() -> str:
    """Register :func:`packed_attention` under :data:`NAME` with transformers (once); returns the name.

    No mask function is registered for it: transformers then builds no attention mask at all (none is needed:
    training batches are packed, or right-padded, where causal attention alone is exact).
    """
    from transformers import AttentionInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, packed_attention)
    return NAME


def varlen_function() -> Callable[..., torch.Tensor] | None:
    """The installed PyTorch's ``torch.nn.attention.varlen.varlen_attn``, or None (PyTorch < 2.10)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@dataclass(frozen=True)
class Varlen:
    """How the installed ``varlen_attn`` is called, read from its signature (never from a version string).

    Its keyword arguments changed between releases: 2.10 takes ``is_causal`` and no ``scale``; 2.11 takes ``scale``
    and ``window_size`` and grouped K/V as they are; 2.13 also wants ``enable_gqa=True`` for grouped K/V. ``gqa`` is
    how grouped K/V heads are passed: ``"flag"`` (``enable_gqa``), ``"native"`` (as they are) or ``"expand"`` (each
    K/V head repeated to the query heads, where the kernel refused them as they are)."""

    fn: Callable[..., torch.Tensor]
    causal: str  # "window_size" or "is_causal"
    scale: bool  # takes ``scale=``
    gqa: str

    @classmethod
    def of(cls, fn: Callable[..., torch.Tensor], gqa: str | None = None) -> Varlen:
        params = inspect.signature(fn).parameters
        if "window_size" in params:
            causal = "window_size"
        elif "is_causal" in params:
            causal = "is_causal"
        else:
            raise TypeError(f"varlen_attn{inspect.signature(fn)} takes neither window_size nor is_causal")
        return cls(fn, causal, "scale" in params, gqa or ("flag" if "enable_gqa" in params else "native"))

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, max_len: int, scaling: float | None
    ) -> torch.Tensor:
        """Causal attention within each sample of ``q`` [N, H, d], ``k``/``v`` [N, Hkv, d] -> [N, H, d]."""
        kwargs: dict[str, Any] = {"window_size": (-1, 0)} if self.causal == "window_size" else {"is_causal": True}
        if scaling is not None and self.scale:
            kwargs["scale"] = scaling
        elif scaling is not None and not math.isclose(scaling, q.shape[-1] ** -0.5, rel_tol=1e-6):
            q = q * (scaling * q.shape[-1] ** 0.5)  # the kernel scales by d^-0.5
        if k.shape[1] != q.shape[1]:
            if self.gqa == "flag":
                kwargs["enable_gqa"] = True
            elif self.gqa == "expand":
                k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
        return self.fn(q, k, v, cu, cu, max_len, max_len, **kwargs)


_VARLEN: dict[tuple[str, torch.dtype], Varlen | None] = {}
_WHY: dict[tuple[str, torch.dtype], str] = {}
_ACTIVE: dict[str, Varlen] = {}  # the way :func:`enable` chose (one device per process); read inside compiled layers


def probe_varlen(fn: Callable[..., torch.Tensor], device: torch.device, dtype: torch.dtype) -> Varlen:
    """The way to call ``fn`` here, found by a tiny forward (checked against per-sample SDPA) and backward with
    grouped K/V heads; raises what the kernel raised, or ValueError for a wrong result."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(6, 4, 64, generator=gen).to(device, dtype).requires_grad_()
    k, v = (torch.randn(6, 2, 64, generator=gen).to(device, dtype) for _ in range(2))
    cu = torch.tensor([0, 2, 6], device=device, dtype=torch.int32)
    ref = torch.cat(
        [
            torch.nn.functional.scaled_dot_product_attention(
                q[a:b].transpose(0, 1).float(),
                k[a:b].transpose(0, 1).float(),
                v[a:b].transpose(0, 1).float(),
                is_causal=True,
                enable_gqa=True,
            ).transpose(0, 1)
            for a, b in ((0, 2), (2, 6))
        ]
    )
    first = Varlen.of(fn)
    tries = [first] if first.gqa == "flag" else [first, Varlen.of(fn, "expand")]
    error: Exception | None = None
    for way in tries:
        try:
            out = way(q, k, v, cu, 4, 64**-0.5)
            out.float().sum().backward()
        except Exception as e:  # noqa: BLE001 - the next way, or the caller reports it
            error = e
            continue
        if not torch.allclose(out.float(), ref, atol=2e-2, rtol=2e-2):
            error = ValueError(
                f"varlen_attn (gqa {way.gqa}) differs from SDPA by {(out.float() - ref).abs().max().item():.3g}"
            )
            continue
        return way
    assert error is not None
    raise error


def varlen_usable(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether PyTorch's variable-length flash kernel runs here, forward and backward (probed once per device and
    dtype; :func:`varlen_status` says how it is called, or why not)."""
    return varlen_for(device, dtype) is not None


def varlen_for(device: torch.device, dtype: torch.dtype) -> Varlen | None:
    """How to call the varlen kernel on ``device`` at ``dtype``, or None where it does not run (with one warning)."""
    key = (str(device), dtype)
    if key in _VARLEN:
        return _VARLEN[key]
    fn = varlen_function()
    way = None
    if device.type != "cuda" or dtype not in (torch.float16, torch.bfloat16):
        _WHY[key] = f"varlen attention needs a CUDA device and fp16/bf16 (here {device.type}, {dtype})"
    elif fn is None:
        _WHY[key] = f"this PyTorch ({torch.__version__}) has no torch.nn.attention.varlen"
    else:
        try:
            way = probe_varlen(fn, device, dtype)
        except Exception as e:  # noqa: BLE001 - an old GPU, a build without flash kernels, another signature
            first = (str(e).splitlines() or [""])[0][:160]
            _WHY[key] = f"PyTorch's varlen attention does not run here ({type(e).__name__}: {first})"
            warnings.warn(f"packed sequences: {_WHY[key]}; attending sample by sample instead", stacklevel=2)
    _VARLEN[key] = way
    return way


def varlen_status(device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """What the varlen probe found: ``{"varlen": bool, "gqa": ..., "causal": ...}`` or ``{"varlen": False,
    "why": ...}``."""
    way = varlen_for(device, dtype)
    if way is None:
        return {"varlen": False, "why": _WHY.get((str(device), dtype), "")}
    return {"varlen": True, "gqa": way.gqa, "causal": way.causal, "scale": way.scale}


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [1, H, N, d], key/value [1, Hkv, N, d] -> [1, N, H, d]."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.pop("cu_seq_lens_q", None)
    seq_lens = kwargs.pop("seq_lens", None)
    max_len = kwargs.pop("max_length_q", None)
    for name in ("cu_seq_lens_k", "max_length_k", "position_ids"):
        kwargs.pop(name, None)
    if cu is None:  # an unpacked batch
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError(f"a packed batch is one row; got {query.shape[0]} rows")
    if seq_lens is None:  # the device kernel (the caller checked varlen_usable)
        if dropout:
            raise ValueError("packed sequences: varlen attention has no dropout; use --no-pack")
        way = _ACTIVE.get("way")
        if way is None:
            raise RuntimeError("packed sequences: no varlen kernel was enabled (LLMHead.use_packing)")
        q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))  # [N, heads, d]
        return way(q, k, v, cu, max_len, scaling).unsqueeze(0), None
    parts, start = [], 0
    for n in seq_lens:  # exact: each sample's causal attention on its own slice
        sl = slice(start, start + n)
        out, _ = sdpa_attention_forward(
            module,
            query[:, :, sl],
            key[:, :, sl],
            value[:, :, sl],
            None,
            scaling=scaling,
            dropout=dropout,
            is_causal=True,
            **kwargs,
        )
        parts.append(out)
        start += n
    return torch.cat(parts, 1), None


def enable(llm: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> dict[str, Any] | None:
    """Switch ``llm``'s attention to the packed-aware function; returns how packed batches attend
    (:func:`varlen_status`, plus ``"attention"``: ``varlen``, ``sdpa-per-sample`` or the model's own flash
    attention), or None (packing not possible: the model's attention is neither SDPA nor flash).

    The previous implementation is kept in ``llm._ava_attn_before`` for :func:`disable`.
    """
    config = getattr(llm, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current is None:
        return None
    if current.startswith("flash_attention"):  # transformers' own flash path reads the same kwargs
        return {"varlen": True, "attention": current}
    if current not in ("sdpa", NAME):
        return None
    register()
    llm._ava_attn_before = current  # type: ignore[attr-defined]
    _set(llm, NAME)
    status = varlen_status(device, dtype)
    if status["varlen"]:
        _ACTIVE["way"] = varlen_for(device, dtype)  # type: ignore[assignment]
    return {**status, "attention": "varlen" if status["varlen"] else "sdpa-per-sample"}


def disable(llm: torch.nn.Module) -> None:
    before = getattr(llm, "_ava_attn_before", None)
    if before is not None:
        _set(llm, before)
        del llm._ava_attn_before  # type: ignore[attr-defined]


def _set(llm: torch.nn.Module, name: str) -> None:
    """The attention implementation of every config in the model (its sub-configs too)."""
    for module in llm.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = name
