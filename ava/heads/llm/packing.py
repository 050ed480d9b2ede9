"""Packed sequences: a batch's samples concatenated into one row with no padding, attention kept inside each sample.

The collator (:class:`ava.heads.llm.data.Collator` with ``pack=True``) gives the row, ``position_ids`` that restart
at 0 for each sample (so RoPE sees each sample as it would alone), ``cu_seqlens`` (int32 [B + 1], the sample
boundaries) and ``max_len``. The decoder gets them as transformers' flash-attention keyword arguments
(``cu_seq_lens_q/k``, ``max_length_q/k``), which every decoder layer passes on to its attention function.

The attention function registered here (:data:`NAME`, through transformers' ``AttentionInterface``):

- on CUDA in fp16/bf16: ``torch.nn.attention.varlen.varlen_attn`` (FlashAttention's variable-length kernel, in
  PyTorch itself), causal within each sample, grouped-query heads as they are; checked once per device and dtype by
  :func:`varlen_usable` (a tiny forward and backward), else the fallback below;
- elsewhere (CPU, fp32, a GPU without the kernel): an exact equivalent, transformers' own SDPA attention run on each
  sample's slice with ``is_causal`` (the lengths come from the host as ``seq_lens``: nothing is read back);
- for an unpacked batch (no ``cu_seq_lens_q``): transformers' SDPA attention, unchanged.

A model whose attention is already transformers' FlashAttention (``flash_attention_2``/``3``, with the flash-attn
package) keeps it: that path reads the same keyword arguments.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

NAME = "ava_packed"
_VARLEN: dict[tuple[str, torch.dtype], bool] = {}


def register() -> str:
    """Register :func:`packed_attention` under :data:`NAME` with transformers (once); returns the name.

    No mask function is registered for it: transformers then builds no attention mask at all (none is needed:
    training batches are packed, or right-padded, where causal attention alone is exact).
    """
    from transformers import AttentionInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, packed_attention)
    return NAME


def varlen_usable(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether PyTorch's variable-length flash kernel runs here, forward and backward (probed once)."""
    if device.type != "cuda" or dtype not in (torch.float16, torch.bfloat16):
        return False
    key = (str(device), dtype)
    if key not in _VARLEN:
        try:
            from torch.nn.attention.varlen import varlen_attn

            q = torch.randn(6, 4, 64, device=device, dtype=dtype, requires_grad=True)
            kv = torch.randn(6, 2, 64, device=device, dtype=dtype)
            cu = torch.tensor([0, 2, 6], device=device, dtype=torch.int32)
            varlen_attn(q, kv, kv, cu, cu, 4, 4, window_size=(-1, 0), enable_gqa=True).sum().backward()
            _VARLEN[key] = True
        except Exception as e:  # noqa: BLE001 - an old GPU, a build without flash kernels, an older PyTorch
            first = (str(e).splitlines() or [""])[0][:120]
            warnings.warn(f"packed sequences: PyTorch's varlen attention does not run here ({type(e).__name__}: "
                          f"{first}); attending sample by sample instead", stacklevel=2)  # fmt: skip
            _VARLEN[key] = False
    return _VARLEN[key]


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
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)  # fmt: skip
    if query.shape[0] != 1:
        raise ValueError(f"a packed batch is one row; got {query.shape[0]} rows")
    if seq_lens is None:  # the device kernel (the caller checked varlen_usable)
        from torch.nn.attention.varlen import varlen_attn

        if dropout:
            raise ValueError("packed sequences: varlen attention has no dropout; use --no-pack")
        q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))  # [N, heads, d]
        out = varlen_attn(q, k, v, cu, cu, max_len, max_len, scale=scaling, window_size=(-1, 0),
                          enable_gqa=k.shape[1] != q.shape[1])  # fmt: skip
        return out.unsqueeze(0), None
    parts, start = [], 0
    for n in seq_lens:  # exact: each sample's causal attention on its own slice
        sl = slice(start, start + n)
        out, _ = sdpa_attention_forward(module, query[:, :, sl], key[:, :, sl], value[:, :, sl], None,
                                        scaling=scaling, dropout=dropout, is_causal=True, **kwargs)  # fmt: skip
        parts.append(out)
        start += n
    return torch.cat(parts, 1), None


def enable(llm: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> dict[str, Any] | None:
    """Switch ``llm``'s attention to the packed-aware function; returns the decoder keyword arguments' kind
    (``{"varlen": bool}``), or None (packing not possible: the model's attention is neither SDPA nor flash).

    The previous implementation is kept in ``llm._ava_attn_before`` for :func:`disable`.
    """
    config = getattr(llm, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current is None:
        return None
    if current.startswith("flash_attention"):  # transformers' own flash path reads the same kwargs
        return {"varlen": True}
    if current not in ("sdpa", NAME):
        return None
    register()
    llm._ava_attn_before = current  # type: ignore[attr-defined]
    _set(llm, NAME)
    return {"varlen": varlen_usable(device, dtype)}


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
