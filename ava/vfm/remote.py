"""Models run with their publisher's own code: only behind ``--trust-remote-code`` (off everywhere by default).

Without the option ava never executes a checkpoint's Python files: every ``AutoConfig`` / ``AutoModel`` /
processor load passes ``trust_remote_code=False`` explicitly (so transformers never asks on stdin either), and the
hub download fetches no ``*.py`` files. With it, the checkpoint loads through ``AutoModel`` and its patch tokens of
the chosen layers are read per family:

- models with a timm-style ``forward_intermediates`` (RADIO's remote code: ``RADIOModel.forward_intermediates``)
  give each chosen block's tokens with their prefix (summary/CLS + registers) in front;
- the others (InternViT, AIMv2 remote code) return ``hidden_states`` like transformers' own classes (index 0 = the
  embeddings, -2 = the second-to-last block).

The prefix count stays the spec's (``#prefix=N`` for ``hf:``); the forward checks it against the output, and the
cache identity records ``trust_remote_code`` so such features never mix with a native load's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ava.errors import AvaError
from ava.vfm.spec import VFMSpec


class RemoteBackbone(nn.Module):
    """A remote-code model read as ``forward(pixel_values, layers) -> [[B, prefix + N, D], ...]``."""

    takes_layers = True

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.intermediates = hasattr(model, "forward_intermediates")
        self.num_hidden = _num_hidden(model, self.intermediates)

    def forward(self, pixel_values: torch.Tensor, layers: tuple[int, ...]) -> list[torch.Tensor]:
        if not self.intermediates:
            hidden = self.model(pixel_values=pixel_values, output_hidden_states=True).hidden_states
            return [hidden[layer] for layer in layers]
        wanted = sorted({self.num_hidden + layer for layer in layers})
        out = self.model.forward_intermediates(
            pixel_values,
            indices=wanted,
            return_prefix_tokens=True,
            norm=False,
            output_fmt="NLC",
            intermediates_only=True,
        )
        by_index = dict(zip(wanted, out, strict=True))
        states = []
        for layer in layers:
            item = by_index[self.num_hidden + layer]
            tokens, prefix = item if isinstance(item, tuple) else (item, None)
            if tokens.ndim == 4:  # NCHW despite the request
                tokens = tokens.flatten(2).transpose(1, 2)
            states.append(tokens if prefix is None else torch.cat([prefix, tokens], dim=1))
        return states


def _num_hidden(model: nn.Module, intermediates: bool) -> int:
    """Hidden states the layer indices count: blocks for ``forward_intermediates``, blocks + 1 (embeddings) else."""
    if intermediates:
        for owner in (model, getattr(model, "model", None)):
            blocks = getattr(owner, "blocks", None)
            if blocks is not None:
                return len(blocks)
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if n is None:
        raise AvaError(f"cannot tell how many layers the remote-code model {type(model).__name__} has")
    return int(n) + (0 if intermediates else 1)


def load_remote(spec: VFMSpec, path: str, dtype: torch.dtype) -> nn.Module:
    """The checkpoint in ``path`` through ``AutoModel`` with its own code (the caller asked for it)."""
    import transformers

    try:
        model: Any = transformers.AutoModel.from_pretrained(
            path, trust_remote_code=True, use_safetensors=True, dtype=dtype
        )
    except (RuntimeError, ValueError, OSError, ImportError) as e:
        raise AvaError(f"cannot load {path} with its remote code for VFM {spec.key!r}: {str(e).splitlines()[0]}") from e
    return RemoteBackbone(model)
